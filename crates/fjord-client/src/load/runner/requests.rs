//! Each session's RTSP connection, from the runner's side: the connect
//! finishing, SETUP of the source stream (UDP ports or interleaved
//! channels) and of the repair stream, PLAY, the replies as they are read
//! between interleaved frames, and a connection lost.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use super::{K_REPAIR, K_RTCP, K_RTP, MAX_CARRY, Runner, token};
use crate::load::control::{
    Control, Item, Request, pair, parse_stream, session_id, transport_param,
};
use crate::load::session::Phase;
use crate::load::sys;
use crate::{Response, parse_rtp_info};

impl Runner<'_> {
    pub(super) fn on_ctl(&mut self, i: usize, events: u32) {
        let phase = self.sessions[i].phase;
        if phase == Phase::Connecting {
            if events & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                return;
            }
            let fd = match &self.sessions[i].ctl {
                Some(c) => c.stream.as_raw_fd(),
                None => return,
            };
            match sys::take_socket_error(fd) {
                Ok(()) => self.connected(i),
                Err(e) => {
                    self.sessions[i].fail(format!("connect: {e}"));
                    self.close(i);
                }
            }
            return;
        }
        if events & libc::EPOLLOUT as u32 != 0 {
            let r = self.sessions[i].ctl.as_mut().map(Control::flush);
            if let Some(Err(e)) = r {
                self.lost_connection(i, format!("write: {e}"));
                return;
            }
            self.sync_interest(i);
        }
        if events & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
            self.read_ctl(i);
        }
    }

    /// The connect finished: SETUP.
    fn connected(&mut self, i: usize) {
        let s = &mut self.sessions[i];
        let Some(c) = s.ctl.as_mut() else { return };
        if crate::tls::is_rtsps(&self.cfg.url)
            && let Err(e) = c.start_tls(crate::tls::host_of(&self.cfg.url))
        {
            s.fail(format!("TLS handshake: {e}"));
            self.close(i);
            return;
        }
        let transport = if self.cfg.tcp {
            "RTP/AVP/TCP;unicast;interleaved=0-1".to_string()
        } else {
            let ip = match c.stream.local_addr() {
                Ok(a) => a.ip(),
                Err(e) => {
                    s.fail(format!("local address: {e}"));
                    self.close(i);
                    return;
                }
            };
            let (rtp, rtcp, opts) = match sys::udp_pair(ip, self.cfg.rcvbuf, self.cfg.gro) {
                Ok(p) => p,
                Err(e) => {
                    s.fail(format!("binding UDP ports: {e}"));
                    self.close(i);
                    return;
                }
            };
            self.udp_opts = opts;
            let port = rtp.local_addr().map(|a| a.port()).unwrap_or(0);
            let mut added = self
                .epoll
                .add(rtp.as_raw_fd(), token(i, K_RTP), false)
                .and_then(|()| self.epoll.add(rtcp.as_raw_fd(), token(i, K_RTCP), false));
            s.rtp = Some(rtp);
            s.rtcp = Some(rtcp);
            if let Some(f) = s.fec.as_deref_mut()
                && added.is_ok()
            {
                added =
                    sys::udp_pair(ip, self.cfg.rcvbuf, self.cfg.gro).and_then(|(rtp, rtcp, _)| {
                        let fd = rtp.as_raw_fd();
                        f.rtp = Some(rtp);
                        f.rtcp = Some(rtcp);
                        self.epoll.add(fd, token(i, K_REPAIR), false)
                    });
            }
            if let Err(e) = added {
                s.fail(format!("epoll: {e}"));
                self.close(i);
                return;
            }
            format!("RTP/AVP;unicast;client_port={}-{}", port, port + 1)
        };
        let Some(c) = s.ctl.as_mut() else { return };
        match c.request(
            Request::Setup,
            "SETUP",
            &self.titles[s.title].track_url,
            &[("Transport", &transport)],
        ) {
            Ok(()) => s.phase = Phase::SetupSent,
            Err(e) => {
                s.fail(format!("SETUP: {e}"));
                self.close(i);
                return;
            }
        }
        self.sync_interest(i);
    }

    fn lost_connection(&mut self, i: usize, why: String) {
        let measuring = self.measuring;
        let s = &mut self.sessions[i];
        if s.phase == Phase::Playing {
            if measuring && !s.teardown_sent {
                s.dropped = true;
                let secs = (sys::now_ns() - s.play_ns.unwrap_or(s.started_ns)) as f64 / 1e9;
                s.error
                    .get_or_insert(format!("{why} after {secs:.1} s of playing"));
            }
        } else {
            s.fail(why);
        }
        self.close(i);
    }

    fn read_ctl(&mut self, i: usize) {
        let Some(len) = self.fill_read_buffer(i) else {
            return;
        };
        let now = sys::now_ns();
        if self.cfg.tcp
            && self.cfg.quickack
            && let Some(c) = &self.sessions[i].ctl
        {
            sys::quickack(c.stream.as_raw_fd());
        }
        let responses = match self.take_items(i, len, now) {
            Ok(r) => r,
            Err(why) => {
                self.lost_connection(i, why);
                return;
            }
        };
        for r in responses {
            self.on_response(i, r, now);
        }
        if self.sessions[i].bye_pending {
            self.on_bye(i);
        }
    }

    /// Reads session `i`'s connection into the shared buffer, after the
    /// bytes carried from the last read: how many bytes the buffer holds,
    /// or `None` when there was nothing to read or the connection is lost.
    fn fill_read_buffer(&mut self, i: usize) -> Option<usize> {
        let Runner {
            sessions,
            rbuf,
            syscalls,
            ..
        } = self;
        let c = sessions[i].ctl.as_mut()?;
        let carry = c.carry.len();
        rbuf[..carry].copy_from_slice(&c.carry);
        c.carry.clear();
        *syscalls += 1;
        match c.read(&mut rbuf[carry..]) {
            Ok(None) => {
                c.carry.extend_from_slice(&rbuf[..carry]);
                None
            }
            Ok(Some(0)) => {
                let why = "connection closed by the server".to_string();
                self.lost_connection(i, why);
                None
            }
            Err(e) => {
                self.lost_connection(i, format!("read: {e}"));
                None
            }
            Ok(Some(n)) => Some(carry + n),
        }
    }

    /// Splits the first `len` bytes of the shared buffer into session `i`'s
    /// interleaved frames, counted as they come, and responses, returned;
    /// an incomplete item is carried to the next read. `Err`: why the
    /// connection is dropped.
    fn take_items(&mut self, i: usize, len: usize, now: i64) -> Result<Vec<Response>, String> {
        let Runner {
            sessions,
            rbuf,
            measuring,
            reads,
            ..
        } = self;
        let s = &mut sessions[i];
        let (rtp_ch, rtcp_ch) = s.channels;
        let repair_ch = s.fec.as_ref().map(|f| f.channel);
        // Frames read with the PLAY reply (the server's first burst follows
        // it at once) count: PLAY is answered before any frame is sent.
        let playing = matches!(s.phase, Phase::PlaySent | Phase::Playing) && *measuring;
        let mut frames = 0u64;
        let mut responses = Vec::new();
        let used = parse_stream(&rbuf[..len], |item| match item {
            Item::Frame(ch, data) if playing => {
                if ch == rtp_ch {
                    frames += 1;
                    s.on_rtp(data, now);
                } else if ch == rtcp_ch {
                    s.on_rtcp(data, now);
                } else if Some(ch) == repair_ch {
                    s.on_repair(data);
                }
            }
            Item::Frame(..) => {}
            Item::Response(r) => responses.push(r),
        });
        if frames > 0 {
            *reads += 1;
        }
        let rest = &rbuf[used?..len];
        if rest.len() > MAX_CARRY {
            return Err("oversized message from the server".into());
        }
        if let Some(c) = s.ctl.as_mut() {
            c.carry.extend_from_slice(rest);
        }
        Ok(responses)
    }

    fn on_response(&mut self, i: usize, r: Response, now: i64) {
        let tcp = self.cfg.tcp;
        let rr_interval = self.cfg.rr_interval.as_nanos() as i64;
        let s = &mut self.sessions[i];
        let Some(c) = s.ctl.as_mut() else { return };
        let Some(kind) = c.answered(&r) else { return };
        match kind {
            Request::Setup => self.on_setup_reply(i, &r),
            Request::SetupRepair => {
                if !r.is_success() {
                    s.fail(refused("SETUP of the repair stream", &r));
                    self.close(i);
                    return;
                }
                let transport = r.header("Transport").unwrap_or_default();
                if let (true, Some(f)) = (tcp, s.fec.as_deref_mut())
                    && let Some((rtp, _)) =
                        transport_param(transport, "interleaved").and_then(pair::<u8>)
                {
                    f.channel = rtp;
                }
                self.play(i);
            }
            Request::Play => {
                if !r.is_success() {
                    s.fail(refused("PLAY", &r));
                    self.close(i);
                    return;
                }
                s.phase = Phase::Playing;
                s.play_ns = Some(now);
                s.next_rr_ns = now + rr_interval;
                self.last_play_ns = self.last_play_ns.max(now);
            }
            Request::Replay => self.on_replay_reply(i, &r),
            Request::Teardown => s.torn_down = true,
        }
    }

    /// The reply to session `i`'s SETUP: its session, the server's SSRC and
    /// RTCP port or channels; then SETUP of the repair stream, or PLAY.
    fn on_setup_reply(&mut self, i: usize, r: &Response) {
        let tcp = self.cfg.tcp;
        let server_ip = self.server.ip();
        let s = &mut self.sessions[i];
        if !r.is_success() {
            s.fail(refused("SETUP", r));
            self.close(i);
            return;
        }
        let Some(id) = session_id(r) else {
            s.fail("SETUP reply without Session".into());
            self.close(i);
            return;
        };
        let Some(c) = s.ctl.as_mut() else { return };
        c.session = Some(id);
        let transport = r.header("Transport").unwrap_or_default();
        if let Some(v) = transport_param(transport, "ssrc")
            && let Ok(ssrc) = u32::from_str_radix(v, 16)
        {
            s.server_ssrc = Some(ssrc);
        }
        if tcp {
            if let Some(ch) = transport_param(transport, "interleaved").and_then(pair::<u8>) {
                s.channels = ch;
            }
        } else if let Some((_, rtcp)) =
            transport_param(transport, "server_port").and_then(pair::<u16>)
        {
            s.server_rtcp = Some(SocketAddr::new(server_ip, rtcp));
        }
        match s.fec.is_some() {
            true => self.setup_repair(i),
            false => self.play(i),
        }
    }

    /// The reply to session `i`'s PLAY of its title again, after a BYE.
    fn on_replay_reply(&mut self, i: usize, r: &Response) {
        let s = &mut self.sessions[i];
        if !r.is_success() {
            s.ended = true;
            s.error.get_or_insert(refused("PLAY again", r));
            return;
        }
        // A server that renumbers on PLAY starts a new sequence run.
        let info = r.header("RTP-Info").map(parse_rtp_info).unwrap_or_default();
        if let Some(seq) = info.first().and_then(|e| e.seq)
            && s.since_bye == 0
            && s.seq.expected() > 0
            && (s.seq.extended_highest() as u16).wrapping_add(1) != seq
        {
            if let Some(f) = s.fec.as_deref_mut() {
                f.restart(&mut s.seq);
            }
            s.seq.resync();
        }
    }

    /// SETUP of session `i`'s repair stream, after its source stream's.
    fn setup_repair(&mut self, i: usize) {
        let tcp = self.cfg.tcp;
        let s = &mut self.sessions[i];
        let repair = self.titles[s.title].repair.as_ref();
        let url = repair.map_or("", |r| r.url.as_str());
        let (Some(c), Some(f)) = (s.ctl.as_mut(), s.fec.as_deref()) else {
            return;
        };
        let transport = match tcp {
            true => format!(
                "RTP/AVP/TCP;unicast;interleaved={}-{}",
                f.channel,
                f.channel + 1
            ),
            false => {
                let port = f.rtp.as_ref().and_then(|r| r.local_addr().ok());
                let port = port.map_or(0, |a| a.port());
                format!("RTP/AVP;unicast;client_port={}-{}", port, port + 1)
            }
        };
        if let Err(e) = c.request(
            Request::SetupRepair,
            "SETUP",
            url,
            &[("Transport", &transport)],
        ) {
            s.fail(format!("SETUP of the repair stream: {e}"));
            self.close(i);
            return;
        }
        self.sync_interest(i);
    }

    /// PLAY of session `i`, its streams set up.
    fn play(&mut self, i: usize) {
        let s = &mut self.sessions[i];
        let Some(c) = s.ctl.as_mut() else { return };
        let range = format!("npt={:.3}-", s.npt_s);
        // Stamped before the request leaves: the first packet may beat the
        // return of the write.
        let sent = sys::now_ns();
        match c.request(
            Request::Play,
            "PLAY",
            &self.titles[s.title].control_url,
            &[("Range", &range)],
        ) {
            Ok(()) => {
                s.phase = Phase::PlaySent;
                s.play_sent_ns = Some(sent);
            }
            Err(e) => {
                s.fail(format!("PLAY: {e}"));
                self.close(i);
                return;
            }
        }
        self.sync_interest(i);
    }
}

/// What a refused request's error says: `what`, then the status.
fn refused(what: &str, r: &Response) -> String {
    format!("{what}: {} {}", r.status, r.reason)
}

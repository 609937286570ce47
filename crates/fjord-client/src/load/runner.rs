//! The load run's one thread: an epoll loop over every session's sockets
//! that starts sessions on their stagger, keeps house (setup timeouts,
//! receiver reports), ends the measurement with TEARDOWN and drains the
//! RTP and RTCP sockets. Each RTSP connection's side is [`requests`], the
//! report at the end [`summary`].

mod requests;
mod summary;

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::config::LoadConfig;
use super::control::{Control, Request};
use super::repair::SessFec;
use super::report::LoadReport;
use super::session::{Phase, Sess};
use super::stats::{LateBins, gro_segments};
use super::sys::{self, Epoll, RecvBatch};
use super::title::Title;
use crate::Result;

/// What an epoll token's low two bits name ([`token`]).
const K_RTP: u64 = 0;
const K_RTCP: u64 = 1;
const K_CTL: u64 = 2;
const K_REPAIR: u64 = 3;
/// The shared read buffer of RTSP connections.
const READ_BUF: usize = 1 << 20;
/// Longest incomplete item carried between reads.
const MAX_CARRY: usize = READ_BUF / 4;

/// Runs `cfg`'s sessions of `titles` on `server`, session `i` from
/// `starts[i % len]` (a title's index and a position), and reports.
pub(super) fn run(
    cfg: &LoadConfig,
    server: SocketAddr,
    titles: Vec<Title>,
    starts: &[(usize, f64)],
) -> Result<LoadReport> {
    let mut runner = Runner::new(cfg, server, titles, starts)?;
    runner.run()?;
    Ok(runner.report())
}

/// Every session of a run, and the thread's epoll, buffers and clocks.
struct Runner<'a> {
    cfg: &'a LoadConfig,
    server: SocketAddr,
    titles: Vec<Title>,
    sessions: Vec<Sess>,
    epoll: Epoll,
    batch: RecvBatch,
    rbuf: Vec<u8>,
    rtcp_buf: Vec<u8>,
    udp_opts: sys::UdpOptions,
    measuring: bool,
    t0: i64,
    end_ns: Option<i64>,
    stop_ns: i64,
    last_play_ns: i64,
    cpu0: (f64, f64),
    cpu: (f64, f64),
    reads: u64,
    syscalls: u64,
}

impl<'a> Runner<'a> {
    fn new(
        cfg: &'a LoadConfig,
        server: SocketAddr,
        titles: Vec<Title>,
        starts: &[(usize, f64)],
    ) -> Result<Runner<'a>> {
        let late_ns = cfg.late_threshold.as_nanos() as i64;
        let sessions = (0..cfg.sessions)
            .map(|i| {
                let (title, npt) = starts[i % starts.len()];
                let t = &titles[title];
                let mut s = Sess::with_title(i, t.clock_rate, late_ns, title, npt);
                if let (Some(offer), Some(options)) = (&t.repair, &cfg.fec) {
                    s.fec = Some(Box::new(SessFec::new(offer, options, i)));
                }
                s
            })
            .collect();
        Ok(Runner {
            cfg,
            server,
            titles,
            sessions,
            epoll: Epoll::new(1024)?,
            batch: RecvBatch::new(),
            rbuf: vec![0; READ_BUF],
            rtcp_buf: vec![0; 2048],
            udp_opts: sys::UdpOptions::default(),
            measuring: true,
            t0: 0,
            end_ns: None,
            stop_ns: 0,
            last_play_ns: 0,
            cpu0: (0.0, 0.0),
            cpu: (0.0, 0.0),
            reads: 0,
            syscalls: 0,
        })
    }

    fn run(&mut self) -> Result<()> {
        let stagger = self.cfg.stagger.as_nanos() as i64;
        let min_poll = self.cfg.min_poll_interval.as_nanos() as i64;
        self.cpu0 = sys::thread_cpu();
        self.t0 = sys::now_ns();
        for s in &mut self.sessions {
            s.late_bins = LateBins::new(self.t0, self.cfg.timeline);
        }
        let n = self.sessions.len();
        let mut next_start = 0usize;
        let mut next_house = self.t0;
        let mut teardown_deadline = None;
        let mut last_wait = 0i64;
        loop {
            let now = sys::now_ns();
            while next_start < n && now >= self.t0 + next_start as i64 * stagger {
                self.start(next_start, now);
                next_start += 1;
            }
            if now >= next_house {
                next_house = now + 20_000_000;
                self.housekeeping(now, next_start == n);
            }
            if self.measuring && self.end_ns.is_some_and(|e| now >= e) {
                self.stop(now);
                teardown_deadline = Some(now + self.cfg.teardown_timeout.as_nanos() as i64);
            }
            if let Some(deadline) = teardown_deadline {
                let waiting = self
                    .sessions
                    .iter()
                    .any(|s| s.teardown_sent && !s.torn_down && s.ctl.is_some());
                if !waiting || now >= deadline {
                    break;
                }
            }
            // Coalesce wakeups when the kernel stamps arrivals: nothing
            // measured changes, and each recvmmsg reads more.
            if self.measuring && !self.cfg.tcp && self.udp_opts.timestamps && min_poll > 0 {
                let since = now - last_wait;
                if since < min_poll {
                    std::thread::sleep(Duration::from_nanos((min_poll - since) as u64));
                }
            }
            let mut wake = next_house;
            if next_start < n {
                wake = wake.min(self.t0 + next_start as i64 * stagger);
            }
            if let Some(e) = self.end_ns.filter(|_| self.measuring) {
                wake = wake.min(e);
            }
            let now = sys::now_ns();
            let timeout_ms = ((wake - now).max(0) + 999_999) / 1_000_000;
            last_wait = now;
            let ready = self.epoll.wait(timeout_ms.min(20) as i32)?;
            for i in 0..ready {
                let (token, events) = self.epoll.event(i);
                let idx = (token >> 2) as usize;
                match token & 3 {
                    K_RTP => self.read_rtp(idx, false),
                    K_REPAIR => self.read_rtp(idx, true),
                    K_RTCP => self.read_rtcp(idx),
                    _ => self.on_ctl(idx, events),
                }
            }
        }
        Ok(())
    }

    /// Connects session `i`.
    fn start(&mut self, i: usize, now: i64) {
        let s = &mut self.sessions[i];
        s.started_ns = now;
        match sys::connect_nonblocking(self.server) {
            Ok(stream) => {
                let fd = stream.as_raw_fd();
                s.ctl = Some(Control::new(stream));
                s.phase = Phase::Connecting;
                if let Err(e) = self.epoll.add(fd, token(i, K_CTL), true) {
                    s.fail(format!("epoll: {e}"));
                }
            }
            Err(e) => s.fail(format!("connect: {e}")),
        }
    }

    fn housekeeping(&mut self, now: i64, all_started: bool) {
        let timeout = self.cfg.setup_timeout.as_nanos() as i64;
        let rr_interval = self.cfg.rr_interval.as_nanos() as i64;
        let mut settled = all_started;
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            match s.phase {
                Phase::Connecting | Phase::SetupSent | Phase::PlaySent => {
                    if now - s.started_ns > timeout {
                        s.fail(format!(
                            "no answer within {:?} ({:?})",
                            self.cfg.setup_timeout, s.phase
                        ));
                        self.close(i);
                    } else {
                        settled = false;
                    }
                }
                Phase::Playing if self.measuring && now >= s.next_rr_ns => {
                    s.next_rr_ns = now + rr_interval;
                    let rr = s.receiver_report(now);
                    self.send_rtcp(i, &rr);
                }
                _ => {}
            }
        }
        if settled && self.end_ns.is_none() {
            let any = self.sessions.iter().any(|s| s.phase == Phase::Playing);
            self.end_ns = Some(if any {
                self.last_play_ns + self.cfg.duration.as_nanos() as i64
            } else {
                now
            });
        }
    }

    fn send_rtcp(&mut self, i: usize, rr: &[u8]) {
        let s = &mut self.sessions[i];
        if self.cfg.tcp {
            let mut frame = [0u8; 4 + 32];
            frame[0] = b'$';
            frame[1] = s.channels.1;
            frame[2..4].copy_from_slice(&(rr.len() as u16).to_be_bytes());
            frame[4..4 + rr.len()].copy_from_slice(rr);
            let r = s.ctl.as_mut().map(|c| c.send(&frame[..4 + rr.len()]));
            if let Some(Err(e)) = r {
                s.error.get_or_insert(format!("sending RTCP: {e}"));
            }
            self.sync_interest(i);
        } else if let (Some(sock), Some(to)) = (&s.rtcp, s.server_rtcp) {
            let _ = sock.send_to(rr, to);
        }
    }

    /// Ends the measurement: no more counting, TEARDOWN every session.
    fn stop(&mut self, now: i64) {
        self.measuring = false;
        self.stop_ns = now;
        self.cpu = sys::thread_cpu();
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            let repair = s.fec.as_ref().and_then(|f| f.rtp.as_ref());
            for sock in [&s.rtp, &s.rtcp].into_iter().flatten().chain(repair) {
                self.epoll.delete(sock.as_raw_fd());
            }
            let s = &mut self.sessions[i];
            let play_url = self.titles[s.title].control_url.clone();
            if s.phase == Phase::Playing
                && let Some(c) = s.ctl.as_mut()
            {
                // A connection that cannot take the request counts as unanswered.
                s.teardown_sent = true;
                let _ = c.request(Request::Teardown, "TEARDOWN", &play_url, &[]);
                self.sync_interest(i);
            }
        }
    }

    /// Drains session `i`'s RTP socket, or its repair stream's.
    fn read_rtp(&mut self, i: usize, repair: bool) {
        let Runner {
            sessions,
            batch,
            reads,
            syscalls,
            measuring,
            ..
        } = self;
        let s = &mut sessions[i];
        let sock = match repair {
            true => s.fec.as_ref().and_then(|f| f.rtp.as_ref()),
            false => s.rtp.as_ref(),
        };
        let Some(fd) = sock.map(AsRawFd::as_raw_fd) else {
            return;
        };
        if !*measuring {
            return;
        }
        for _ in 0..64 {
            *syscalls += 1;
            let n = match batch.recv(fd) {
                Ok(n) => n,
                Err(e) => {
                    s.error.get_or_insert(format!("recvmmsg: {e}"));
                    return;
                }
            };
            let fallback = sys::now_ns();
            *reads += n as u64;
            for k in 0..n {
                let m = batch.message(k);
                if m.truncated {
                    s.truncated += 1;
                }
                let arrival = m.timestamp.unwrap_or(fallback);
                for seg in gro_segments(m.data, m.gso_size) {
                    match repair {
                        true => s.on_repair(seg),
                        false => s.on_rtp(seg, arrival),
                    }
                }
            }
            if n < sys::BATCH {
                break;
            }
        }
    }

    fn read_rtcp(&mut self, i: usize) {
        let s = &mut self.sessions[i];
        let Some(fd) = s.rtcp.as_ref().map(AsRawFd::as_raw_fd) else {
            return;
        };
        // RTCP is rare; a plain recv per compound packet.
        while let Ok(Some(n)) = sys::read_some(fd, &mut self.rtcp_buf) {
            if self.measuring {
                s.on_rtcp(&self.rtcp_buf[..n], sys::now_ns());
            }
        }
        if s.bye_pending {
            self.on_bye(i);
        }
    }

    fn on_bye(&mut self, i: usize) {
        let s = &mut self.sessions[i];
        let control_url = self.titles[s.title].control_url.clone();
        s.bye_pending = false;
        if !self.measuring || s.phase != Phase::Playing || s.ended {
            return;
        }
        s.new_segment = true;
        s.since_bye = 0;
        if !self.cfg.replay {
            s.ended = true;
            return;
        }
        let Some(c) = s.ctl.as_mut() else { return };
        if c.awaiting(Request::Replay) {
            return;
        }
        match c.request(
            Request::Replay,
            "PLAY",
            &control_url,
            &[("Range", "npt=0-")],
        ) {
            Ok(()) => s.replays += 1,
            Err(e) => s.fail(format!("PLAY again: {e}")),
        }
        self.sync_interest(i);
    }

    /// Arms or disarms EPOLLOUT on session `i`'s RTSP connection.
    fn sync_interest(&mut self, i: usize) {
        let s = &self.sessions[i];
        if let Some(c) = &s.ctl {
            let write = c.wants_write() || s.phase == Phase::Connecting;
            let _ = self
                .epoll
                .modify(c.stream.as_raw_fd(), token(i, K_CTL), write);
        }
    }

    fn close(&mut self, i: usize) {
        let s = &mut self.sessions[i];
        if let Some(c) = s.ctl.take() {
            self.epoll.delete(c.stream.as_raw_fd());
        }
        let repair = s.fec.as_mut().map(|f| (f.rtp.take(), f.rtcp.take()));
        let (repair_rtp, repair_rtcp) = repair.unwrap_or_default();
        for sock in [s.rtp.take(), s.rtcp.take(), repair_rtp, repair_rtcp]
            .into_iter()
            .flatten()
        {
            self.epoll.delete(sock.as_raw_fd());
        }
    }
}

/// The epoll token of session `i`'s socket of `kind`.
fn token(i: usize, kind: u64) -> u64 {
    ((i as u64) << 2) | kind
}

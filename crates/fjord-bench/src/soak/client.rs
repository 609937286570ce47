//! The viewers: one thread per session slot, living one planned life
//! ([`plan`]) after another through `fjord_client::RtspClient`.
//!
//! A thread blocks only in its own RTSP requests, so one slow reply stalls
//! one viewer. UDP media goes to plain nonblocking sockets (no `UDP_GRO`)
//! that the thread drains every [`TICK`], as a player with a small jitter
//! buffer would; every packet is read. TCP media is read from the RTSP
//! connection as it arrives. Each track's sequence numbers are checked
//! ([`SeqStats`]), a new run starting at the `RTP-Info` of every PLAY;
//! every [`RR_EVERY`] a receiver report keeps the session alive.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fjord_client::load::{SeqStats, receiver_report};
use fjord_client::{Error, Event, Response, RtspClient, parse_rtcp_compound, parse_rtp_info};

use super::plan::{self, End, Life, Rng, Shape, Step};

/// How often a UDP viewer reads its sockets.
pub const TICK: Duration = Duration::from_millis(100);
/// How often a viewer sends an RTCP receiver report.
pub const RR_EVERY: Duration = Duration::from_secs(5);
/// How long a life that plays to the end waits for the BYE after its
/// last seek, beyond the time left in the title.
const BYE_GRACE: Duration = Duration::from_secs(15);

/// What every viewer shares.
pub struct Ctx {
    /// `rtsp://` URL of each title.
    pub urls: Vec<String>,
    pub shape: Shape,
    pub seed: u64,
    pub stop: AtomicBool,
    pub counts: Counts,
    /// Errors by kind (method, status or what failed).
    pub errors: Mutex<BTreeMap<String, u64>>,
    /// The viewers' network namespace (`--veth`); loopback without.
    pub net: Option<super::veth::ViewerNet>,
}

/// Running totals of all viewers.
#[derive(Default)]
pub struct Counts {
    sessions: AtomicU64,
    lives: AtomicU64,
    ended: [AtomicU64; 3],
    early_bye: AtomicU64,
    requests: AtomicU64,
    packets: AtomicU64,
    lost_udp: AtomicU64,
    gaps_tcp: AtomicU64,
    errors: AtomicU64,
}

/// A snapshot of [`Counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    /// Set up and not ended, now.
    pub sessions: u64,
    /// Lives begun.
    pub lives: u64,
    /// Lives ended as planned, by [`End::ALL`].
    pub ended: [u64; 3],
    /// Lives whose title ended (BYE) before their plan did.
    pub early_bye: u64,
    pub requests: u64,
    pub packets: u64,
    /// Sequence gaps: UDP loss, and packets a TCP session never got.
    pub lost_udp: u64,
    pub gaps_tcp: u64,
    /// Lives cut short by an error.
    pub errors: u64,
}

impl Counts {
    pub fn tally(&self) -> Tally {
        let l = |a: &AtomicU64| a.load(Relaxed);
        Tally {
            sessions: l(&self.sessions),
            lives: l(&self.lives),
            ended: self.ended.each_ref().map(l),
            early_bye: l(&self.early_bye),
            requests: l(&self.requests),
            packets: l(&self.packets),
            lost_udp: l(&self.lost_udp),
            gaps_tcp: l(&self.gaps_tcp),
            errors: l(&self.errors),
        }
    }
}

impl Ctx {
    pub fn new(
        urls: Vec<String>,
        shape: Shape,
        seed: u64,
        net: Option<super::veth::ViewerNet>,
    ) -> Ctx {
        Ctx {
            urls,
            shape,
            seed,
            stop: AtomicBool::new(false),
            counts: Counts::default(),
            errors: Mutex::default(),
            net,
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Relaxed)
    }

    /// Sleeps `d` unless stopped first; true when stopped.
    fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            std::thread::sleep(left.min(TICK));
        }
        true
    }

    fn fail(&self, f: Failure) {
        self.counts.errors.fetch_add(1, Relaxed);
        if let Ok(mut e) = self.errors.lock() {
            *e.entry(f.kind()).or_default() += 1;
        }
    }
}

/// Starts slot `slot`'s viewer after `delay`.
pub fn spawn(ctx: std::sync::Arc<Ctx>, slot: usize, delay: Duration) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("soak-{slot}"))
        // RtspClient reads into a 64 KiB buffer on the stack.
        .stack_size(256 << 10)
        .spawn(move || {
            if let Some(net) = &ctx.net
                && let Err(e) = net.enter()
            {
                ctx.fail(Failure::at("entering the viewers' namespace")(Error::Io(e)));
                return;
            }
            if ctx.sleep(delay) {
                return;
            }
            let mut rng = Rng::new(ctx.seed ^ (slot as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
            while !ctx.stopped() {
                let life = plan::life(&mut rng, &ctx.shape);
                ctx.counts.lives.fetch_add(1, Relaxed);
                if let Err(f) = live(&ctx, slot, &life) {
                    ctx.fail(f);
                    ctx.sleep(Duration::from_secs(1));
                }
            }
        })
}

/// What failed, and while doing what.
#[derive(Debug)]
pub struct Failure {
    what: &'static str,
    error: Error,
}

impl Failure {
    fn at(what: &'static str) -> impl FnOnce(Error) -> Failure {
        move |error| Failure { what, error }
    }

    /// The kind it is counted under: no addresses or ids in it.
    fn kind(&self) -> String {
        match &self.error {
            Error::Status { method, response } => {
                format!("{method} {} {}", response.status, response.reason)
            }
            Error::Closed => format!("connection closed by the server during {}", self.what),
            Error::Timeout => format!("no reply in time to {}", self.what),
            Error::Io(e) => format!("{}: I/O error {:?}", self.what, e.kind()),
            e => format!("{}: {e}", self.what),
        }
    }
}

/// Plays one life to its end (or until stopped).
fn live(ctx: &Ctx, slot: usize, life: &Life) -> Result<(), Failure> {
    let mut p = Player::open(ctx, slot, &ctx.urls[life.title], life.tcp)?;
    p.play(&[("Range", &npt(life.start))])?;
    for step in &life.steps {
        let flow = match *step {
            Step::Play(s) => p.receive(secs(s))?,
            Step::Seek(x) => p.play(&[("Range", &npt(x))]).map(|()| Flow::Going)?,
            Step::Pause(s) => {
                p.request("PAUSE", &[])?;
                p.receive_then_play(secs(s))?
            }
            Step::Trick(s) => {
                p.play(&[("Scale", "2")])?;
                p.receive_then_play(secs(s))?
            }
        };
        match flow {
            Flow::Stopped => return p.teardown(),
            Flow::Bye => {
                ctx.counts.early_bye.fetch_add(1, Relaxed);
                return p.end(End::Bye);
            }
            Flow::Going => {}
        }
    }
    if life.end == End::Bye {
        let left = secs(ctx.shape.title_s - p.last_start.unwrap_or(0.0));
        match p.receive(left + BYE_GRACE)? {
            Flow::Going => {
                return Err(Failure::at("waiting for the BYE at the end")(
                    Error::Timeout,
                ));
            }
            Flow::Stopped => return p.teardown(),
            Flow::Bye => {}
        }
    }
    p.end(life.end)
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

fn npt(s: f64) -> String {
    format!("npt={s:.3}-")
}

/// What receiving came to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Flow {
    /// The time asked for passed.
    Going,
    /// An RTCP BYE arrived.
    Bye,
    /// The run is over.
    Stopped,
}

/// One set-up track.
struct Track {
    url: String,
    /// The server's SSRC, from the SETUP reply.
    ssrc: Option<u32>,
    media: Media,
    seq: Seq,
}

/// A track's sequence accounting across PLAYs.
#[derive(Default)]
struct Seq {
    stats: SeqStats,
    /// The first sequence number of the latest PLAY (`RTP-Info`): packets
    /// before it were sent before that PLAY.
    next_run: Option<u16>,
    /// Packets of a run's start that never came.
    head_lost: u64,
}

enum Media {
    Udp {
        rtp: UdpSocket,
        rtcp: UdpSocket,
        server_rtcp: Option<SocketAddr>,
    },
    Tcp {
        rtcp_channel: u8,
    },
}

impl Seq {
    fn on_rtp(&mut self, seq: u16) {
        if let Some(first) = self.next_run
            && seq.wrapping_sub(first) as i16 >= 0
        {
            self.next_run = None;
            let continues = (self.stats.extended_highest() as u16).wrapping_add(1) == first;
            if self.stats.expected() > 0 && !continues {
                self.stats.resync();
            }
            if !continues || self.stats.expected() == 0 {
                self.head_lost += u64::from(seq.wrapping_sub(first));
            }
        }
        self.stats.on_packet(seq);
    }

    fn lost(&self) -> u64 {
        self.stats.lost() + self.head_lost
    }
}

/// A viewer's session.
struct Player<'a> {
    ctx: &'a Ctx,
    c: RtspClient,
    tracks: Vec<Track>,
    tcp: bool,
    ssrc: u32,
    bye: bool,
    /// Where the latest ranged PLAY started, seconds.
    last_start: Option<f64>,
    next_rr: Instant,
    unflushed: u64,
}

impl<'a> Player<'a> {
    /// Connects, DESCRIBEs and SETs UP every track.
    fn open(ctx: &'a Ctx, slot: usize, url: &str, tcp: bool) -> Result<Player<'a>, Failure> {
        let mut c = RtspClient::connect(url).map_err(Failure::at("connect"))?;
        ctx.counts.requests.fetch_add(1, Relaxed);
        let d = c.describe().map_err(Failure::at("DESCRIBE"))?;
        let mut tracks = Vec::new();
        for (k, u) in d.track_urls.iter().enumerate() {
            ctx.counts.requests.fetch_add(1, Relaxed);
            let t = if tcp {
                setup_tcp(&mut c, u, 2 * k as u8)
            } else {
                setup_udp(&mut c, u)
            };
            tracks.push(t.map_err(Failure::at("SETUP"))?);
        }
        ctx.counts.sessions.fetch_add(1, Relaxed);
        Ok(Player {
            ctx,
            c,
            tracks,
            tcp,
            ssrc: 0x536f_0000 ^ slot as u32,
            bye: false,
            last_start: None,
            next_rr: Instant::now() + RR_EVERY,
            unflushed: 0,
        })
    }

    /// A request to the aggregate control URL; non-2xx is a failure.
    fn request(
        &mut self,
        method: &'static str,
        headers: &[(&str, &str)],
    ) -> Result<Response, Failure> {
        if !self.tcp {
            self.drain_udp()?;
        }
        self.ctx.counts.requests.fetch_add(1, Relaxed);
        let url = self.c.control_url().to_string();
        let r = self
            .c
            .request(method, &url, headers, &[])
            .map_err(Failure::at(method))?;
        if !r.is_success() {
            let error = Error::Status {
                method: method.into(),
                response: Box::new(r),
            };
            return Err(Failure::at(method)(error));
        }
        Ok(r)
    }

    /// PLAY; each track's next packets start a new run at its `RTP-Info`.
    fn play(&mut self, headers: &[(&str, &str)]) -> Result<(), Failure> {
        let r = self.request("PLAY", headers)?;
        let info = r.header("RTP-Info").map(parse_rtp_info).unwrap_or_default();
        for (k, t) in self.tracks.iter_mut().enumerate() {
            let entry = info.iter().find(|i| i.url == t.url).or(info.get(k));
            t.seq.next_run = entry.and_then(|i| i.seq);
        }
        if headers.iter().any(|(h, _)| *h == "Range") {
            let range = r.header("Range").and_then(fjord_client::parse_npt_range);
            self.last_start = range.map(|(s, _)| s);
        }
        Ok(())
    }

    /// Receives for `d`, then PLAYs at Scale 1 from where it stands.
    fn receive_then_play(&mut self, d: Duration) -> Result<Flow, Failure> {
        let flow = self.receive(d)?;
        if flow == Flow::Going {
            self.play(&[])?;
        }
        Ok(flow)
    }

    /// Receives for `d`, until a BYE, or until the run stops.
    fn receive(&mut self, d: Duration) -> Result<Flow, Failure> {
        let until = Instant::now() + d;
        loop {
            if self.ctx.stopped() {
                return Ok(Flow::Stopped);
            }
            if self.bye {
                return Ok(Flow::Bye);
            }
            let now = Instant::now();
            if now >= until {
                self.flush();
                return Ok(Flow::Going);
            }
            if now >= self.next_rr {
                self.next_rr = now + RR_EVERY;
                self.send_receiver_reports();
            }
            let wait = (until - now).min(TICK);
            if self.tcp {
                let event = self.c.recv_interleaved(wait);
                if let Some(e) = event.map_err(Failure::at("receiving"))? {
                    self.on_event(e);
                }
            } else {
                self.drain_udp()?;
                std::thread::sleep(wait);
            }
            if self.unflushed >= 256 {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        self.ctx.counts.packets.fetch_add(self.unflushed, Relaxed);
        self.unflushed = 0;
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Rtp(p) => {
                let n = self.tracks.len();
                let k = (0..n).find(|&k| self.tracks[k].ssrc == Some(p.ssrc));
                self.tracks[k.unwrap_or(0)].seq.on_rtp(p.seq);
                self.unflushed += 1;
            }
            Event::Rtcp(r) => self.bye |= r.is_bye(),
            Event::Garbage { .. } => {}
        }
    }

    /// Reads every datagram waiting on every track's sockets.
    fn drain_udp(&mut self) -> Result<(), Failure> {
        let mut buf = [0u8; 2048];
        for t in &mut self.tracks {
            let Track {
                media: Media::Udp { rtp, rtcp, .. },
                seq,
                ..
            } = t
            else {
                continue;
            };
            while let Some(n) = recv(rtp, &mut buf).map_err(into_failure)? {
                if n >= 12 {
                    self.unflushed += 1;
                    seq.on_rtp(u16::from_be_bytes([buf[2], buf[3]]));
                }
            }
            while let Some(n) = recv(rtcp, &mut buf).map_err(into_failure)? {
                let packets = parse_rtcp_compound(&buf[..n]).unwrap_or_default();
                self.bye |= packets
                    .iter()
                    .any(|p| matches!(p, fjord_client::RtcpPacket::Bye { .. }));
            }
        }
        Ok(())
    }

    fn send_receiver_reports(&mut self) {
        for t in &self.tracks {
            let rr = receiver_report(
                self.ssrc,
                t.ssrc.unwrap_or(0),
                0,
                t.seq.lost().min(0x7f_ffff) as u32,
                t.seq.stats.extended_highest(),
                0,
                0,
                0,
            );
            // A report that does not leave is the server's timeout to see.
            let _ = match &t.media {
                Media::Udp {
                    rtcp,
                    server_rtcp: Some(to),
                    ..
                } => rtcp.send_to(&rr, to).map(drop).map_err(Error::Io),
                Media::Udp { .. } => Ok(()),
                Media::Tcp { rtcp_channel } => {
                    let mut frame = vec![b'$', *rtcp_channel, 0, rr.len() as u8];
                    frame.extend_from_slice(&rr);
                    self.c.send_raw(&frame)
                }
            };
        }
    }

    fn teardown(&mut self) -> Result<(), Failure> {
        self.request("TEARDOWN", &[]).map(drop)
    }

    /// Ends the life as planned.
    fn end(mut self, how: End) -> Result<(), Failure> {
        if how != End::Close {
            self.teardown()?;
        }
        let i = End::ALL.iter().position(|&e| e == how).unwrap_or(0);
        self.ctx.counts.ended[i].fetch_add(1, Relaxed);
        Ok(())
    }
}

impl Drop for Player<'_> {
    fn drop(&mut self) {
        self.flush();
        let (udp, tcp): (Vec<&Track>, Vec<&Track>) = self
            .tracks
            .iter()
            .partition(|t| matches!(t.media, Media::Udp { .. }));
        let lost = |ts: Vec<&Track>| ts.iter().map(|t| t.seq.lost()).sum::<u64>();
        let counts = &self.ctx.counts;
        counts.lost_udp.fetch_add(lost(udp), Relaxed);
        counts.gaps_tcp.fetch_add(lost(tcp), Relaxed);
        counts.sessions.fetch_sub(1, Relaxed);
    }
}

fn into_failure(e: io::Error) -> Failure {
    Failure::at("receiving")(Error::Io(e))
}

/// One datagram, `None` when none waits.
fn recv(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<Option<usize>> {
    match sock.recv(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        // An ICMP error of an earlier send (a report after the server's
        // port closed): nothing to read.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(None),
        Err(e) => Err(e),
    }
}

fn setup_tcp(c: &mut RtspClient, url: &str, channel: u8) -> Result<Track, Error> {
    let s = c.setup_tcp_on(url, channel)?;
    let rtcp_channel = match s.kind {
        fjord_client::TransportKind::Tcp { rtcp_channel, .. } => rtcp_channel,
        fjord_client::TransportKind::Udp { .. } => channel + 1,
    };
    Ok(track(url, s.ssrc, Media::Tcp { rtcp_channel }))
}

/// SETUP over UDP to a plain nonblocking port pair of our own (the
/// client's receiver would spend two threads on it).
fn setup_udp(c: &mut RtspClient, url: &str) -> Result<Track, Error> {
    let (rtp, rtcp) = bind_pair(c.local_addr()?.ip())?;
    let server_ip = c.peer_addr()?.ip();
    let port = rtp.local_addr()?.port();
    let transport = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
    let r = c.request("SETUP", url, &[("Transport", &transport)], &[])?;
    if !r.is_success() {
        return Err(Error::Status {
            method: "SETUP".into(),
            response: Box::new(r),
        });
    }
    let id = r.header("Session").and_then(|s| s.split(';').next());
    let id = id.ok_or_else(|| Error::Protocol("SETUP reply without Session".into()))?;
    c.set_session_id(Some(id.trim()));
    let reply = r.header("Transport").unwrap_or_default();
    let server_rtcp = transport_param(reply, "server_port")
        .and_then(|v| v.split_once('-')?.1.parse().ok())
        .map(|p| SocketAddr::new(server_ip, p));
    let ssrc = transport_param(reply, "ssrc").and_then(|v| u32::from_str_radix(v, 16).ok());
    let media = Media::Udp {
        rtp,
        rtcp,
        server_rtcp,
    };
    Ok(track(url, ssrc, media))
}

fn track(url: &str, ssrc: Option<u32>, media: Media) -> Track {
    Track {
        url: url.to_string(),
        ssrc,
        media,
        seq: Seq::default(),
    }
}

/// `value` of `key=value` in a Transport header.
fn transport_param<'a>(transport: &'a str, key: &str) -> Option<&'a str> {
    transport
        .split(';')
        .find_map(|p| p.trim().strip_prefix(key)?.strip_prefix('='))
}

/// An even port and the odd one above it, nonblocking.
fn bind_pair(ip: IpAddr) -> io::Result<(UdpSocket, UdpSocket)> {
    let (a, b) = fjord_client::bind_pair(ip)?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_play_that_continues_the_numbering_loses_nothing() {
        let mut t = Seq::default();
        (100..108).for_each(|s| t.on_rtp(s));
        t.next_run = Some(110);
        (108..110).for_each(|s| t.on_rtp(s)); // sent before the PLAY
        (110..120).for_each(|s| t.on_rtp(s));
        assert_eq!(t.lost(), 0);
    }

    #[test]
    fn a_renumbered_run_counts_only_its_own_gaps() {
        let mut t = Seq::default();
        (100..110).for_each(|s| t.on_rtp(s));
        t.next_run = Some(5000);
        t.on_rtp(110); // late packet of the old run
        [5002, 5003, 5005].into_iter().for_each(|s| t.on_rtp(s));
        // 5000, 5001 at the head and 5004 in the middle never came.
        assert_eq!(t.lost(), 3);
    }

    #[test]
    fn transport_parameters() {
        let t = "RTP/AVP;unicast;client_port=5000-5001;server_port=6970-6971;ssrc=0A1B2C3D";
        assert_eq!(transport_param(t, "server_port"), Some("6970-6971"));
        assert_eq!(transport_param(t, "ssrc"), Some("0A1B2C3D"));
        assert_eq!(transport_param(t, "port"), None);
    }
}

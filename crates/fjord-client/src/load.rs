//! A load generator that verifies what it receives: N RTSP sessions of one
//! title, each on its own RTSP connection, all received by ONE thread.
//!
//! The thread runs an epoll loop over every socket: the RTSP connections
//! (nonblocking SETUP/PLAY/TEARDOWN, and the media itself in TCP interleaved
//! mode) and, over UDP, each session's RTP and RTCP sockets. A ready RTP
//! socket is drained with `recvmmsg` into reused buffers; with `UDP_GRO` one
//! datagram may carry several packets (a sender's GSO burst), split by the
//! segment size the kernel reports. Arrival times are the kernel's receive
//! timestamps (`SO_TIMESTAMPNS`) where available, so the measure of the
//! server does not depend on when this thread got around to a socket.
//!
//! Per session it counts loss, reordering and duplicates from sequence
//! numbers, packets later than 2 ms after their schedule (the first packet's
//! arrival plus the RTP timestamp offset; again from the first packet after a
//! new PLAY), and the RFC 3550 §A.8 jitter; it sends an RTCP receiver report
//! every 5 s so the server's session timeout never fires. Titles shorter than
//! the run are played again from the start after their RTCP BYE
//! (`PLAY Range: npt=0-`).
//!
//! With [`LoadConfig::fec`], each session also receives the source track's
//! repair stream (`docs/fec.md`) and rebuilds lost packets with a
//! [`FecReceiver`], after a loss model has dropped received packets. A
//! rebuilt packet fills its gap in the sequence accounting (not lost, not
//! reordered) but is not a received packet: it counts in neither throughput
//! nor lateness and jitter, having no arrival of its own.
//!
//! [`run`] is the whole thing; `fjord load` prints its [`LoadReport`].

mod control;
mod report;
mod stats;
mod sys;

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

pub use report::{
    ClientCpu, FecCounts, FecSetup, LoadReport, ReceiverInfo, SessionReport, Totals, Worst,
};
pub use report::{LateCounts, TimelineSecond};
pub use stats::{
    LATE_THRESHOLDS_MS, LateBins, SEQ_WINDOW, SecondBin, SeqClass, SeqStats, Timing, gro_segments,
};

use crate::fec::{Delivery, FecReceiver, FecStats, Loss, LossModel, RepairOffer, fec_streams};
use crate::rtcp::{RtcpPacket, parse_rtcp_compound};
use crate::rtp::payload_range;
use crate::{Error, Response, Result, RtspClient, parse_rtp_info};
use control::{Control, Item, Request, pair, parse_stream, session_id, transport_param};
use fjord_fec::SourcePacket;
use sys::{Epoll, RecvBatch};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `rtsp://host[:port]/title`.
    pub url: String,
    /// Concurrent sessions.
    pub sessions: usize,
    /// How long every session receives (from the last session's PLAY).
    pub duration: Duration,
    /// RTP interleaved on the RTSP connection instead of UDP.
    pub tcp: bool,
    /// Time between session starts (default 1 ms: N sessions start over N ms).
    pub stagger: Duration,
    /// Play a title again after its BYE (default); else its session just ends.
    pub replay: bool,
    /// Packets later than this after their schedule are late (default 2 ms).
    pub late_threshold: Duration,
    /// RTCP receiver report interval (default 5 s).
    pub rr_interval: Duration,
    /// Limit for a session's SETUP and PLAY (default 10 s).
    pub setup_timeout: Duration,
    /// Limit for the TEARDOWN replies (default 2 s).
    pub teardown_timeout: Duration,
    /// `SO_RCVBUF` asked for on RTP sockets (default 4 MiB).
    pub rcvbuf: usize,
    /// Least time between two epoll waits when arrival times come from the
    /// kernel (default 1 ms): lets packets gather so each `recvmmsg` reads
    /// many; it does not change what is measured.
    pub min_poll_interval: Duration,
    /// TCP mode: acknowledge every read at once (`TCP_QUICKACK`; default
    /// off). Over loopback the MSS is 64 KiB, so a server writing one small
    /// frame per send never fills a segment and the kernel may delay ACKs up
    /// to 40 ms, which a sender with a full congestion window then waits for.
    /// Against fjord's batched writes it made no measurable difference.
    pub quickack: bool,
    /// Receive the repair stream the SDP offers and rebuild lost packets
    /// (default `None`: no FEC).
    pub fec: Option<FecOptions>,
    /// Ask for `UDP_GRO` on the RTP sockets (default on: fewer reads per
    /// packet). Real players do not: off, every packet is its own datagram.
    pub gro: bool,
    /// Where each session starts: session `i` plays `starts[i % len]`
    /// (its title and `PLAY Range: npt=X-`). Empty (default): every
    /// session plays `url` from the start.
    pub starts: Vec<SessionStart>,
    /// Keep the lateness per second of the run ([`LoadReport::timeline`];
    /// default off).
    pub timeline: bool,
}

/// A session's title and start position ([`LoadConfig::starts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionStart {
    /// `rtsp://host[:port]/title`.
    pub url: String,
    /// Seconds into the title (`PLAY Range: npt=X-`).
    pub npt_s: f64,
}

/// `--fec`: the loss model applied to received packets before recovery.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FecOptions {
    /// Probability of dropping a packet (0: drop none).
    pub drop: f64,
    /// Drop runs of this many source packets instead ([`LossModel::Bursts`]).
    pub burst: Option<u32>,
    /// Seed of the loss model; session i uses `seed + i`.
    pub seed: u64,
}

impl LoadConfig {
    /// `sessions` sessions of `url` for `duration`, over UDP, with defaults.
    pub fn new(url: impl Into<String>, sessions: usize, duration: Duration) -> LoadConfig {
        LoadConfig {
            url: url.into(),
            sessions,
            duration,
            tcp: false,
            stagger: Duration::from_millis(1),
            replay: true,
            late_threshold: Duration::from_millis(2),
            rr_interval: Duration::from_secs(5),
            setup_timeout: Duration::from_secs(10),
            teardown_timeout: Duration::from_secs(2),
            rcvbuf: 4 << 20,
            min_poll_interval: Duration::from_millis(1),
            quickack: false,
            fec: None,
            gro: true,
            starts: Vec::new(),
            timeline: false,
        }
    }
}

const K_RTP: u64 = 0;
const K_RTCP: u64 = 1;
const K_CTL: u64 = 2;
const K_REPAIR: u64 = 3;
/// How many errors the report lists.
const MAX_ERRORS: usize = 10;
/// The shared read buffer of RTSP connections.
const READ_BUF: usize = 1 << 20;
/// Longest incomplete item carried between reads.
const MAX_CARRY: usize = READ_BUF / 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Connecting,
    SetupSent,
    PlaySent,
    Playing,
    Failed,
}

struct Sess {
    index: usize,
    phase: Phase,
    ctl: Option<Control>,
    rtp: Option<UdpSocket>,
    rtcp: Option<UdpSocket>,
    server_rtcp: Option<SocketAddr>,
    channels: (u8, u8),
    server_ssrc: Option<u32>,
    ssrc: u32,
    seq: SeqStats,
    timing: Timing,
    packets: u64,
    bytes: u64,
    started_ns: i64,
    play_ns: Option<i64>,
    /// When the first PLAY was sent, and when the first RTP packet arrived.
    play_sent_ns: Option<i64>,
    first_packet_ns: Option<i64>,
    /// Index into the runner's titles.
    title: usize,
    /// `PLAY Range: npt=X-` of the first PLAY.
    npt_s: f64,
    late_bins: LateBins,
    replays: u64,
    /// A BYE ended the title: the next packet starts a new timeline.
    new_segment: bool,
    /// Packets since the last BYE.
    since_bye: u64,
    /// A BYE arrived and is to be acted on.
    bye_pending: bool,
    /// The title ended and will not be played again.
    ended: bool,
    /// (LSR, arrival) of the last sender report.
    last_sr: Option<(u32, i64)>,
    rr_prev: (u64, u64),
    next_rr_ns: i64,
    error: Option<String>,
    dropped: bool,
    teardown_sent: bool,
    torn_down: bool,
    garbage: u64,
    truncated: u64,
    rtcp_packets: u64,
    fec: Option<Box<SessFec>>,
}

/// A session's repair stream and recovery (`--fec`).
struct SessFec {
    k: u16,
    m: u16,
    /// Made by the first source packet received, where the sequence
    /// accounting starts too (packets the server sent before are not
    /// counted, e.g. frames read with the PLAY reply).
    rx: Option<FecReceiver>,
    /// Counts of receivers replaced when the server renumbered.
    before: FecStats,
    loss: Loss,
    rtp: Option<UdpSocket>,
    /// Holds the RTCP port of the pair; not read, the source stream's RTCP
    /// is enough.
    rtcp: Option<UdpSocket>,
    /// Interleaved channel of the repair RTP (TCP).
    channel: u8,
    /// Bit `seq` set: the loss model dropped source packet `seq` and the
    /// receiver has not yet rebuilt it or given it up.
    marks: Box<[u64; 1024]>,
    /// Source packets dropped.
    drops: u64,
    /// Of those, the ones rebuilt or given up.
    decided: u64,
    repair_dropped: u64,
}

impl SessFec {
    fn new(offer: &RepairOffer, options: &FecOptions, index: usize) -> SessFec {
        let model = LossModel::from_options(options.drop, options.burst, u32::from(offer.k));
        SessFec {
            k: offer.k,
            m: offer.m,
            rx: None,
            before: FecStats::default(),
            loss: Loss::new(model, options.seed.wrapping_add(index as u64)),
            rtp: None,
            rtcp: None,
            channel: 2,
            marks: Box::new([0; 1024]),
            drops: 0,
            decided: 0,
            repair_dropped: 0,
        }
    }

    fn receiver(&mut self) -> &mut FecReceiver {
        self.rx
            .get_or_insert_with(|| FecReceiver::new(Some((self.k, self.m)), None))
    }

    fn drop_source(&mut self, seq: u16) {
        self.drops += 1;
        self.marks[usize::from(seq / 64)] |= 1 << (seq % 64);
    }

    /// A received source packet; rebuilt ones fill their gap in `stats`.
    fn source(&mut self, pkt: &[u8], seq: u16, timestamp: u32, stats: &mut SeqStats) {
        let Ok(range) = payload_range(pkt) else {
            return;
        };
        // The receiver owns what it holds: one copy per packet, freed when
        // the packet leaves its window.
        let packet = SourcePacket {
            payload: pkt[range].to_vec(),
            marker: pkt[1] & 0x80 != 0,
            timestamp,
        };
        if self.rx.is_none() {
            // Packets dropped before the first one the receiver sees are not
            // in the sequence accounting either: forget them.
            self.drops = self.decided;
            self.marks.fill(0);
        }
        let (k, m) = (self.k, self.m);
        let rx = self
            .rx
            .get_or_insert_with(|| FecReceiver::new(Some((k, m)), None));
        let (marks, decided) = (&mut self.marks, &mut self.decided);
        rx.source(seq, packet, &mut |d| on_decided(d, stats, marks, decided));
    }

    /// The server renumbered: everything held is decided, a new receiver
    /// starts with the next packet.
    fn restart(&mut self, stats: &mut SeqStats) {
        if let Some(mut rx) = self.rx.take() {
            let (marks, decided) = (&mut self.marks, &mut self.decided);
            rx.finish(&mut |d| on_decided(d, stats, marks, decided));
            let s = rx.stats();
            let b = &mut self.before;
            b.received += s.received;
            b.repair_received += s.repair_received;
            b.repair_rejected += s.repair_rejected;
            b.recovered += s.recovered;
            b.unrecoverable += s.unrecoverable;
            b.decode_cpu += s.decode_cpu;
        }
    }

    fn counts(&self) -> FecCounts {
        let s = self
            .rx
            .as_ref()
            .map_or(FecStats::default(), FecReceiver::stats);
        let b = &self.before;
        FecCounts {
            dropped: self.decided,
            pending: self.drops - self.decided,
            recovered: b.recovered + s.recovered,
            unrecoverable: b.unrecoverable + s.unrecoverable,
            repair_packets: b.repair_received
                + b.repair_rejected
                + s.repair_received
                + s.repair_rejected,
            repair_dropped: self.repair_dropped,
            repair_rejected: b.repair_rejected + s.repair_rejected,
            decode_cpu_ms: (b.decode_cpu + s.decode_cpu).as_secs_f64() * 1e3,
        }
    }
}

/// A source packet the receiver rebuilt or gave up.
fn on_decided(d: Delivery, stats: &mut SeqStats, marks: &mut [u64; 1024], decided: &mut u64) {
    let seq = match d {
        Delivery::Packet {
            recovered: false, ..
        } => return,
        Delivery::Packet { seq, .. } => {
            stats.on_recovered(seq);
            seq
        }
        Delivery::Lost { seq } => seq,
    };
    let (word, bit) = (usize::from(seq / 64), 1u64 << (seq % 64));
    if marks[word] & bit != 0 {
        marks[word] &= !bit;
        *decided += 1;
    }
}

impl Sess {
    #[cfg(test)]
    fn new(index: usize, clock_rate: u32, late_ns: i64) -> Sess {
        Sess::with_title(index, clock_rate, late_ns, 0, 0.0)
    }

    fn with_title(index: usize, clock_rate: u32, late_ns: i64, title: usize, npt_s: f64) -> Sess {
        Sess {
            index,
            phase: Phase::Waiting,
            ctl: None,
            rtp: None,
            rtcp: None,
            server_rtcp: None,
            channels: (0, 1),
            server_ssrc: None,
            ssrc: 0x464a_0000 ^ (std::process::id() << 16) ^ index as u32,
            seq: SeqStats::default(),
            timing: Timing::new(clock_rate, late_ns),
            packets: 0,
            bytes: 0,
            started_ns: 0,
            play_ns: None,
            play_sent_ns: None,
            first_packet_ns: None,
            title,
            npt_s,
            late_bins: LateBins::default(),
            replays: 0,
            new_segment: false,
            since_bye: 0,
            bye_pending: false,
            ended: false,
            last_sr: None,
            rr_prev: (0, 0),
            next_rr_ns: i64::MAX,
            error: None,
            dropped: false,
            teardown_sent: false,
            torn_down: false,
            garbage: 0,
            truncated: 0,
            rtcp_packets: 0,
            fec: None,
        }
    }

    /// One RTP packet (the hot path: no allocation).
    #[inline]
    fn on_rtp(&mut self, pkt: &[u8], arrival: i64) {
        if pkt.len() < 12 || pkt[0] >> 6 != 2 {
            self.garbage += 1;
            return;
        }
        let seq = u16::from_be_bytes([pkt[2], pkt[3]]);
        let ts = u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]);
        let ssrc = u32::from_be_bytes([pkt[8], pkt[9], pkt[10], pkt[11]]);
        if let Some(f) = self.fec.as_deref_mut()
            && f.loss.drop_packet(false)
        {
            f.drop_source(seq);
            return;
        }
        self.server_ssrc = Some(ssrc);
        if self.new_segment {
            self.new_segment = false;
            self.timing.reanchor();
            // The title ended (BYE) and plays again: a server that numbers
            // by position starts over, maybe before its PLAY answer is read.
            if self.seq.expected() > 0
                && (self.seq.extended_highest() as u16).wrapping_add(1) != seq
            {
                if let Some(f) = self.fec.as_deref_mut() {
                    f.restart(&mut self.seq);
                }
                self.seq.resync();
            }
        }
        self.packets += 1;
        self.since_bye += 1;
        self.bytes += pkt.len() as u64;
        if self.first_packet_ns.is_none() {
            self.first_packet_ns = Some(arrival);
        }
        let class = self.seq.on_packet(seq);
        if class != SeqClass::Duplicate {
            let lateness = self
                .timing
                .on_packet(arrival, ts, class == SeqClass::InOrder);
            self.late_bins.on_packet(arrival, lateness);
        }
        if let Some(f) = self.fec.as_deref_mut() {
            f.source(pkt, seq, ts, &mut self.seq);
        }
    }

    /// One packet of the repair stream.
    fn on_repair(&mut self, pkt: &[u8]) {
        let Some(f) = self.fec.as_deref_mut() else {
            return;
        };
        let Ok(range) = payload_range(pkt) else {
            self.garbage += 1;
            return;
        };
        if f.loss.drop_packet(true) {
            f.repair_dropped += 1;
            return;
        }
        let ts = u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]);
        f.receiver().repair(ts, &pkt[range]);
    }

    /// An RTCP compound packet (rare: may allocate).
    fn on_rtcp(&mut self, data: &[u8], arrival: i64) {
        self.rtcp_packets += 1;
        let Some(packets) = parse_rtcp_compound(data) else {
            return;
        };
        for p in packets {
            match p {
                RtcpPacket::SenderReport { ntp, .. } => {
                    self.last_sr = Some(((ntp >> 16) as u32, arrival));
                }
                RtcpPacket::Bye { .. } => self.bye_pending = true,
                RtcpPacket::Other { .. } => {}
            }
        }
    }

    /// Which of `n` starts this session plays (`starts[index % n]`).
    fn index_in_starts(&self, n: usize) -> usize {
        self.index % n.max(1)
    }

    fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(msg);
        }
        if self.phase != Phase::Playing {
            self.phase = Phase::Failed;
        }
    }

    /// An RTCP receiver report with one report block about the server's
    /// stream (RFC 3550 §6.4.2).
    fn receiver_report(&mut self, now: i64) -> [u8; 32] {
        let expected = self.seq.expected();
        let unique = self.seq.unique;
        let (e0, u0) = self.rr_prev;
        self.rr_prev = (expected, unique);
        let exp_int = expected.saturating_sub(e0);
        let lost_int = exp_int.saturating_sub(unique.saturating_sub(u0));
        let fraction = (lost_int << 8)
            .checked_div(exp_int)
            .map_or(0, |f| f.min(255) as u8);
        let (lsr, dlsr) = match self.last_sr {
            Some((lsr, at)) => (
                lsr,
                (((now - at).max(0) as u128 * 65536) / 1_000_000_000) as u32,
            ),
            None => (0, 0),
        };
        receiver_report(
            self.ssrc,
            self.server_ssrc.unwrap_or(0),
            fraction,
            self.seq.lost().min(0x7f_ffff) as u32,
            self.seq.extended_highest(),
            self.timing.jitter_ticks(),
            lsr,
            dlsr,
        )
    }
}

/// An RTCP RR (PT 201) with one report block.
#[allow(clippy::too_many_arguments)]
pub fn receiver_report(
    reporter: u32,
    source: u32,
    fraction_lost: u8,
    cumulative_lost: u32,
    extended_highest: u32,
    jitter: u32,
    lsr: u32,
    dlsr: u32,
) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = 0x81;
    b[1] = 201;
    b[2..4].copy_from_slice(&7u16.to_be_bytes());
    b[4..8].copy_from_slice(&reporter.to_be_bytes());
    b[8..12].copy_from_slice(&source.to_be_bytes());
    b[12] = fraction_lost;
    b[13..16].copy_from_slice(&cumulative_lost.to_be_bytes()[1..]);
    b[16..20].copy_from_slice(&extended_highest.to_be_bytes());
    b[20..24].copy_from_slice(&jitter.to_be_bytes());
    b[24..28].copy_from_slice(&lsr.to_be_bytes());
    b[28..32].copy_from_slice(&dlsr.to_be_bytes());
    b
}

/// Runs the load and reports; fails only when the title cannot be described
/// or the receive loop cannot run. Sessions that fail to set up are counted
/// in the report.
pub fn run(config: &LoadConfig) -> Result<LoadReport> {
    // Every distinct title, described once.
    let mut urls: Vec<&str> = Vec::new();
    if config.starts.is_empty() {
        urls.push(&config.url);
    }
    for st in &config.starts {
        if !urls.contains(&st.url.as_str()) {
            urls.push(&st.url);
        }
    }
    let mut titles = Vec::with_capacity(urls.len());
    let mut server = None;
    for url in &urls {
        let (title, addr) = describe_title(url, config.fec.is_some())?;
        server.get_or_insert(addr);
        titles.push(title);
    }
    let server = server.ok_or_else(|| Error::Protocol("no title to play".into()))?;
    let starts: Vec<(usize, f64)> = if config.starts.is_empty() {
        vec![(0, 0.0)]
    } else {
        config
            .starts
            .iter()
            .map(|st| {
                let t = urls.iter().position(|u| *u == st.url).unwrap_or(0);
                (t, st.npt_s.max(0.0))
            })
            .collect()
    };
    let mut runner = Runner::new(config, server, titles, &starts)?;
    runner.run()?;
    Ok(runner.report())
}

/// `n` sessions at random places: each a uniformly chosen title of
/// `titles` (URL, duration in seconds) and a uniform start in
/// `[0, duration - seconds]` (0 for a title shorter than `seconds`).
/// The same `seed` gives the same starts.
pub fn random_starts(
    titles: &[(String, f64)],
    n: usize,
    seconds: f64,
    seed: u64,
) -> Vec<SessionStart> {
    let mut state = seed;
    // SplitMix64: small, and enough to spread sessions.
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    if titles.is_empty() {
        return Vec::new();
    }
    (0..n)
        .map(|_| {
            let (url, duration) = &titles[(next() % titles.len() as u64) as usize];
            let span = (duration - seconds).max(0.0);
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            SessionStart {
                url: url.clone(),
                npt_s: (span * u * 1000.0).floor() / 1000.0,
            }
        })
        .collect()
}

/// The duration `url` announces in its SDP, seconds.
pub fn title_duration_s(url: &str) -> Result<f64> {
    let mut c = RtspClient::connect(url)?;
    let d = c.describe()?;
    sdp_duration_s(&d.sdp)
        .ok_or_else(|| Error::Protocol(format!("{url} announces no duration (a=range)")))
}

/// What a session needs of its title: where to SETUP and PLAY.
struct Title {
    track_url: String,
    repair: Option<RepairOffer>,
    control_url: String,
    clock_rate: u32,
}

fn describe_title(url: &str, fec: bool) -> Result<(Title, SocketAddr)> {
    let mut describe = RtspClient::connect(url)?;
    let d = match fec {
        true => describe.describe_fec()?,
        false => describe.describe()?,
    };
    let server = describe.peer_addr()?;
    drop(describe);
    let no_media = || Error::Protocol(format!("the SDP of {url} has no media section"));
    let (track_url, repair) = match fec {
        true => {
            let stream = fec_streams(&d).into_iter().next().ok_or_else(no_media)?;
            let repair = stream.repair.ok_or_else(|| {
                Error::Protocol("the title offers no repair stream (ingest it with --fec)".into())
            })?;
            (stream.source_url, Some(repair))
        }
        false => (d.track_urls.first().cloned().ok_or_else(no_media)?, None),
    };
    let clock_rate = sdp_clock_rate(&d.sdp).unwrap_or(90_000);
    let title = Title {
        track_url,
        repair,
        control_url: d.aggregate_url,
        clock_rate,
    };
    Ok((title, server))
}

/// The duration an SDP announces (`a=range:npt=0-X`), seconds; `None` for
/// an open range or none.
pub fn sdp_duration_s(sdp: &str) -> Option<f64> {
    sdp.lines().find_map(|l| {
        let r = l.trim().strip_prefix("a=range:npt=")?;
        let (_, end) = r.split_once('-')?;
        end.trim().parse::<f64>().ok().filter(|d| d.is_finite())
    })
}

/// The clock rate of the first `a=rtpmap` of an SDP.
fn sdp_clock_rate(sdp: &str) -> Option<u32> {
    sdp.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("a=rtpmap:")?;
        let enc = rest.split_whitespace().nth(1)?;
        enc.split('/').nth(1)?.trim().parse().ok()
    })
}

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

    fn on_ctl(&mut self, i: usize, events: u32) {
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
        let quickack = self.cfg.tcp && self.cfg.quickack;
        let now;
        let mut responses: Vec<Response> = Vec::new();
        {
            let Runner {
                sessions,
                rbuf,
                measuring,
                reads,
                syscalls,
                ..
            } = self;
            let s = &mut sessions[i];
            let Some(c) = s.ctl.as_mut() else { return };
            let carry = c.carry.len();
            rbuf[..carry].copy_from_slice(&c.carry);
            c.carry.clear();
            *syscalls += 1;
            let n = match sys::read_some(c.stream.as_raw_fd(), &mut rbuf[carry..]) {
                Ok(None) => {
                    c.carry.extend_from_slice(&rbuf[..carry]);
                    return;
                }
                Ok(Some(0)) => {
                    let why = "connection closed by the server".to_string();
                    self.lost_connection(i, why);
                    return;
                }
                Err(e) => {
                    self.lost_connection(i, format!("read: {e}"));
                    return;
                }
                Ok(Some(n)) => n,
            };
            now = sys::now_ns();
            if quickack {
                sys::quickack(c.stream.as_raw_fd());
            }
            let (rtp_ch, rtcp_ch) = s.channels;
            let repair_ch = s.fec.as_ref().map(|f| f.channel);
            let playing = s.phase == Phase::Playing && *measuring;
            let mut frames = 0u64;
            let used = parse_stream(&rbuf[..carry + n], |item| match item {
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
            let used = match used {
                Ok(u) => u,
                Err(e) => {
                    self.lost_connection(i, e);
                    return;
                }
            };
            let rest = &rbuf[used..carry + n];
            if rest.len() > MAX_CARRY {
                self.lost_connection(i, "oversized message from the server".into());
                return;
            }
            if let Some(c) = sessions[i].ctl.as_mut() {
                c.carry.extend_from_slice(rest);
            }
        }
        for r in responses {
            self.on_response(i, r, now);
        }
        if self.sessions[i].bye_pending {
            self.on_bye(i);
        }
    }

    fn on_response(&mut self, i: usize, r: Response, now: i64) {
        let tcp = self.cfg.tcp;
        let server_ip = self.server.ip();
        let rr_interval = self.cfg.rr_interval.as_nanos() as i64;
        let s = &mut self.sessions[i];
        let Some(c) = s.ctl.as_mut() else { return };
        let Some(kind) = c.answered(&r) else { return };
        let refused = |what: &str| format!("{what}: {} {}", r.status, r.reason);
        match kind {
            Request::Setup => {
                if !r.is_success() {
                    s.fail(refused("SETUP"));
                    self.close(i);
                    return;
                }
                let Some(id) = session_id(&r) else {
                    s.fail("SETUP reply without Session".into());
                    self.close(i);
                    return;
                };
                c.session = Some(id);
                let transport = r.header("Transport").unwrap_or_default();
                if let Some(v) = transport_param(transport, "ssrc")
                    && let Ok(ssrc) = u32::from_str_radix(v, 16)
                {
                    s.server_ssrc = Some(ssrc);
                }
                if tcp {
                    if let Some(ch) = transport_param(transport, "interleaved").and_then(pair::<u8>)
                    {
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
            Request::SetupRepair => {
                if !r.is_success() {
                    s.fail(refused("SETUP of the repair stream"));
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
                    s.fail(refused("PLAY"));
                    self.close(i);
                    return;
                }
                s.phase = Phase::Playing;
                s.play_ns = Some(now);
                s.next_rr_ns = now + rr_interval;
                self.last_play_ns = self.last_play_ns.max(now);
            }
            Request::Replay => {
                if !r.is_success() {
                    s.ended = true;
                    s.error.get_or_insert(refused("PLAY again"));
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
            Request::Teardown => s.torn_down = true,
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

    /// The repair layout and loss model, for the report.
    fn fec_setup(&self) -> Option<FecSetup> {
        let offer = self.titles.iter().find_map(|t| t.repair.as_ref())?;
        let o = self.cfg.fec.as_ref()?;
        let loss = match LossModel::from_options(o.drop, o.burst, u32::from(offer.k)) {
            LossModel::None => "no loss model".to_owned(),
            LossModel::Random { p } => format!("random loss {p}, seed {}", o.seed),
            LossModel::Bursts { p, n, spacing } => {
                format!(
                    "bursts of {n} (p {p}, at least {spacing} apart), seed {}",
                    o.seed
                )
            }
        };
        Some(FecSetup {
            k: offer.k,
            m: offer.m,
            loss,
        })
    }

    /// The URL of session `s`'s title.
    fn session_url(&self, s: &Sess) -> String {
        match self.cfg.starts.is_empty() {
            true => self.cfg.url.clone(),
            false => self.cfg.starts[s.index_in_starts(self.cfg.starts.len())]
                .url
                .clone(),
        }
    }

    /// Every session's seconds summed.
    fn timeline(&self) -> Vec<TimelineSecond> {
        let n = self
            .sessions
            .iter()
            .map(|s| s.late_bins.seconds.len())
            .max()
            .unwrap_or(0);
        let mut out: Vec<SecondBin> = vec![
            SecondBin {
                max_lateness_ns: i64::MIN,
                ..SecondBin::default()
            };
            n
        ];
        for s in &self.sessions {
            for (o, b) in out.iter_mut().zip(&s.late_bins.seconds) {
                o.packets += b.packets;
                for k in 0..3 {
                    o.over[k] += b.over[k];
                }
                o.max_lateness_ns = o.max_lateness_ns.max(b.max_lateness_ns);
            }
        }
        out.iter()
            .enumerate()
            .map(|(t, b)| TimelineSecond {
                t_s: t as u64,
                packets: b.packets,
                late: LateCounts::from_array(b.over),
                max_lateness_ms: if b.packets > 0 {
                    b.max_lateness_ns as f64 / 1e6
                } else {
                    0.0
                },
            })
            .collect()
    }

    fn report(&self) -> LoadReport {
        let end = self.stop_ns;
        let mut sessions = Vec::with_capacity(self.sessions.len());
        let mut t = Totals::default();
        let mut w = Worst {
            min_mbps: f64::INFINITY,
            max_lateness_ms: f64::NEG_INFINITY,
            ..Worst::default()
        };
        let mut errors = Vec::new();
        let mut expected = 0u64;
        let mut jitter_sum = 0.0;
        let mut playing = 0usize;
        let mut failures = 0usize;
        let mut dropped = 0usize;
        let mut teardown_unanswered = 0usize;
        for (index, s) in self.sessions.iter().enumerate() {
            if let Some(e) = &s.error
                && errors.len() < MAX_ERRORS
            {
                errors.push(format!("session {index}: {e}"));
            }
            let is_playing = s.play_ns.is_some();
            if !is_playing {
                failures += 1;
                sessions.push(SessionReport {
                    index,
                    error: s.error.clone(),
                    url: self.session_url(s),
                    start_npt_s: s.npt_s,
                    ..SessionReport::default()
                });
                continue;
            }
            playing += 1;
            dropped += usize::from(s.dropped);
            teardown_unanswered += usize::from(s.teardown_sent && !s.torn_down);
            let seconds = ((end - s.play_ns.unwrap_or(end)) as f64 / 1e9).max(1e-9);
            // Dropped packets whose block was still open at the end were
            // neither rebuilt nor given up: not lost.
            let pending = s.fec.as_ref().map_or(0, |f| f.drops - f.decided);
            let max_lateness_ms = if s.packets > 0 {
                s.timing.max_lateness_ns as f64 / 1e6
            } else {
                0.0
            };
            let r = SessionReport {
                index,
                playing: true,
                error: s.error.clone(),
                seconds,
                packets: s.packets,
                bytes: s.bytes,
                lost: s.seq.lost().saturating_sub(pending),
                reordered: s.seq.reordered,
                duplicates: s.seq.duplicates,
                late: s.timing.late,
                max_lateness_ms,
                jitter_ms: s.timing.jitter_ns / 1e6,
                jitter_ms_peak: s.timing.max_jitter_ns / 1e6,
                mbps: s.bytes as f64 * 8.0 / seconds / 1e6,
                pps: s.packets as f64 / seconds,
                timestamp_backwards: s.timing.timestamp_backwards,
                replays: s.replays,
                fec: s.fec.as_ref().map(|f| f.counts()),
                url: self.session_url(s),
                start_npt_s: s.npt_s,
                first_packet_ms: match (s.play_sent_ns, s.first_packet_ns) {
                    (Some(a), Some(b)) => Some((b - a) as f64 / 1e6),
                    _ => None,
                },
                late_over: LateCounts::from_array(s.late_bins.over),
                max_stall_ms: s.timing.max_stall_ns as f64 / 1e6,
            };
            t.late_over.add(&r.late_over);
            t.max_stall_ms = t.max_stall_ms.max(r.max_stall_ms);
            expected += s.seq.expected();
            jitter_sum += r.jitter_ms;
            t.packets += r.packets;
            t.bytes += r.bytes;
            t.lost += r.lost;
            t.reordered += r.reordered;
            t.duplicates += r.duplicates;
            t.late += r.late;
            t.mbps += r.mbps;
            t.pps += r.pps;
            t.timestamp_backwards += r.timestamp_backwards;
            t.replays += r.replays;
            t.garbage += s.garbage;
            t.truncated += s.truncated;
            t.rtcp_packets += s.rtcp_packets;
            if let Some(c) = &r.fec {
                t.fec.get_or_insert_default().add(c);
            }
            w.lost = w.lost.max(r.lost);
            w.reordered = w.reordered.max(r.reordered);
            w.duplicates = w.duplicates.max(r.duplicates);
            w.late = w.late.max(r.late);
            if s.packets > 0 {
                w.max_lateness_ms = w.max_lateness_ms.max(max_lateness_ms);
            }
            w.jitter_ms = w.jitter_ms.max(r.jitter_ms);
            w.jitter_ms_peak = w.jitter_ms_peak.max(r.jitter_ms_peak);
            w.min_mbps = w.min_mbps.min(r.mbps);
            sessions.push(r);
        }
        if !w.min_mbps.is_finite() {
            w.min_mbps = 0.0;
        }
        if !w.max_lateness_ms.is_finite() {
            w.max_lateness_ms = 0.0;
        }
        t.max_lateness_ms = w.max_lateness_ms;
        t.loss_percent = pct(t.lost, expected);
        t.late_percent = pct(t.late, t.packets);
        if playing > 0 {
            t.jitter_ms_mean = jitter_sum / playing as f64;
            t.mbps_per_session = t.mbps / playing as f64;
        }
        let (u0, s0) = self.cpu0;
        let (u1, s1) = self.cpu;
        let wall_s = (end - self.t0) as f64 / 1e9;
        let cpu_s = (u1 - u0) + (s1 - s0);
        let client = ClientCpu {
            user_s: u1 - u0,
            sys_s: s1 - s0,
            wall_s,
            percent_of_core: if wall_s > 0.0 {
                100.0 * cpu_s / wall_s
            } else {
                0.0
            },
            us_per_packet: if t.packets > 0 {
                cpu_s * 1e6 / t.packets as f64
            } else {
                0.0
            },
        };
        let receiver = ReceiverInfo {
            threads: 1,
            method: if self.cfg.tcp {
                "epoll + read (1 MiB buffer)".into()
            } else {
                format!("epoll + recvmmsg ({} per call)", sys::BATCH)
            },
            gro: !self.cfg.tcp && self.udp_opts.gro,
            kernel_timestamps: !self.cfg.tcp && self.udp_opts.timestamps,
            rcvbuf_bytes: if self.cfg.tcp {
                0
            } else {
                self.udp_opts.rcvbuf
            },
            reads: self.reads,
            packets_per_read: if self.reads > 0 {
                t.packets as f64 / self.reads as f64
            } else {
                0.0
            },
            syscalls_per_packet: if t.packets > 0 {
                self.syscalls as f64 / t.packets as f64
            } else {
                0.0
            },
        };
        LoadReport {
            timeline: self.timeline(),
            url: self.cfg.url.clone(),
            transport: if self.cfg.tcp { "tcp" } else { "udp" }.into(),
            sessions_requested: self.sessions.len(),
            sessions_playing: playing,
            setup_failures: failures,
            sessions_dropped: dropped,
            teardown_unanswered,
            errors,
            duration_s: self.cfg.duration.as_secs_f64(),
            setup_s: (self.last_play_ns.max(self.t0) - self.t0) as f64 / 1e9,
            wall_s,
            started_unix_ns: self.t0,
            replay: self.cfg.replay,
            late_threshold_ms: self.cfg.late_threshold.as_secs_f64() * 1e3,
            fec: self.fec_setup(),
            totals: t,
            worst: w,
            client,
            receiver,
            sessions,
        }
    }
}

fn token(i: usize, kind: u64) -> u64 {
    ((i as u64) << 2) | kind
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receiver_report_layout() {
        let rr = receiver_report(1, 2, 3, 0x0102_0304, 0x0001_0005, 77, 0xaabb_ccdd, 65536);
        assert_eq!(&rr[..4], &[0x81, 201, 0, 7]);
        assert_eq!(&rr[4..12], &[0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(rr[12], 3);
        assert_eq!(&rr[13..16], &[0x02, 0x03, 0x04], "24-bit cumulative loss");
        assert_eq!(&rr[16..20], &[0, 1, 0, 5]);
        assert_eq!(u32::from_be_bytes(rr[20..24].try_into().unwrap()), 77);
        assert_eq!(&rr[24..28], &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(u32::from_be_bytes(rr[28..32].try_into().unwrap()), 65536);
        assert_eq!(
            parse_rtcp_compound(&rr),
            Some(vec![RtcpPacket::Other { pt: 201 }])
        );
    }

    #[test]
    fn random_starts_stay_inside_their_titles() {
        let titles = vec![("a".to_string(), 100.0), ("b".to_string(), 30.0)];
        let starts = random_starts(&titles, 200, 20.0, 7);
        assert_eq!(starts.len(), 200);
        assert!(starts.iter().any(|s| s.url == "a") && starts.iter().any(|s| s.url == "b"));
        for s in &starts {
            let limit = if s.url == "a" { 80.0 } else { 10.0 };
            assert!((0.0..=limit).contains(&s.npt_s), "{s:?}");
        }
        assert_eq!(starts, random_starts(&titles, 200, 20.0, 7));
        assert_eq!(
            sdp_duration_s("v=0\r\na=range:npt=0-600.040\r\n"),
            Some(600.04)
        );
        assert_eq!(sdp_duration_s("a=range:npt=0-\r\n"), None);
    }

    #[test]
    fn sdp_clock_rate_from_rtpmap() {
        let sdp = "v=0\r\nm=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\n";
        assert_eq!(sdp_clock_rate(sdp), Some(90_000));
        assert_eq!(sdp_clock_rate("v=0\r\n"), None);
    }

    #[test]
    fn session_counts_a_gro_burst_and_a_replay() {
        let ms = 1_000_000i64;
        let mut s = Sess::new(0, 90_000, 2 * ms);
        let pkt = |seq: u16, ts: u32| {
            let mut p = vec![0x80, 33];
            p.extend_from_slice(&seq.to_be_bytes());
            p.extend_from_slice(&ts.to_be_bytes());
            p.extend_from_slice(&7u32.to_be_bytes());
            p.extend_from_slice(&[0x47; 188]);
            p
        };
        // A GSO burst of 3 packets, 1 ms of media apart, arriving together.
        let mut burst = Vec::new();
        for k in 0..3u16 {
            burst.extend_from_slice(&pkt(65534u16.wrapping_add(k), 90 * u32::from(k)));
        }
        for seg in gro_segments(&burst, 200) {
            s.on_rtp(seg, 0);
        }
        assert_eq!((s.packets, s.seq.lost(), s.timing.late), (3, 0, 0));
        // The title ends; the new PLAY starts elsewhere on the timeline.
        s.new_segment = true;
        s.on_rtp(&pkt(1, 5_000_000), 10_000 * ms);
        s.on_rtp(&pkt(2, 5_000_000 + 900), 10_013 * ms);
        assert_eq!((s.packets, s.seq.lost(), s.timing.late), (5, 0, 1));
        // It ends again and the server numbers packets by position: the
        // replay starts over at the first number, before its PLAY answer.
        s.new_segment = true;
        s.on_rtp(&pkt(65534, 0), 20_000 * ms);
        s.on_rtp(&pkt(65535, 90), 20_001 * ms);
        assert_eq!((s.packets, s.seq.lost(), s.seq.duplicates), (7, 0, 0));
        s.on_rtp(b"not rtp", 0);
        assert_eq!(s.garbage, 1);
    }
}

//! What a load run is asked to do: [`LoadConfig`] with its defaults, where
//! sessions start ([`SessionStart`]) and the loss model of `--fec`
//! ([`FecOptions`]).

use std::time::Duration;

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
    /// Keep the lateness per second of the run
    /// ([`LoadReport::timeline`](super::LoadReport::timeline); default off).
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
    /// Drop runs of this many source packets instead
    /// ([`LossModel::Bursts`](crate::fec::LossModel::Bursts)).
    pub burst: Option<u32>,
    /// Seed of the loss model; session i uses `seed + i`.
    pub seed: u64,
}

/// Time between session starts unless set: N sessions start over N ms.
pub const DEFAULT_STAGGER: Duration = Duration::from_millis(1);

impl LoadConfig {
    /// `sessions` sessions of `url` for `duration`, over UDP, with defaults.
    pub fn new(url: impl Into<String>, sessions: usize, duration: Duration) -> LoadConfig {
        LoadConfig {
            url: url.into(),
            sessions,
            duration,
            tcp: false,
            stagger: DEFAULT_STAGGER,
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

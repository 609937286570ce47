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
//! [`FecReceiver`](crate::fec::FecReceiver), after a loss model has dropped received packets. A
//! rebuilt packet fills its gap in the sequence accounting (not lost, not
//! reordered) but is not a received packet: it counts in neither throughput
//! nor lateness and jitter, having no arrival of its own.
//!
//! [`run`] is the whole thing; `fjord load` prints its [`LoadReport`].

mod config;
mod control;
mod repair;
mod report;
mod runner;
mod session;
mod stats;
mod sys;
#[cfg(test)]
mod tests;
mod title;

pub use config::{DEFAULT_STAGGER, FecOptions, LoadConfig, SessionStart};
pub use report::{
    ClientCpu, FecCounts, FecSetup, LoadReport, ReceiverInfo, SessionReport, Totals, Worst,
};
pub use report::{LateCounts, TimelineSecond};
pub use session::receiver_report;
pub use stats::{
    LATE_THRESHOLDS_MS, LateBins, SEQ_WINDOW, SecondBin, SeqClass, SeqStats, Timing, gro_segments,
};
pub use title::{random_starts, sdp_duration_s, title_duration_s};

use crate::{Error, Result};
use title::describe_title;

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
    runner::run(config, server, titles, &starts)
}

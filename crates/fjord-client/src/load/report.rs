//! What a load run found, for people (`Display`) and programs (JSON).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The result of [`crate::load::run`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// The title's URL.
    pub url: String,
    /// `"udp"` or `"tcp"`.
    pub transport: String,
    /// Sessions asked for.
    pub sessions_requested: usize,
    /// Sessions that got to play.
    pub sessions_playing: usize,
    /// Sessions whose SETUP or PLAY failed (or timed out).
    pub setup_failures: usize,
    /// Sessions that were playing and lost their connection before the end.
    pub sessions_dropped: usize,
    /// Sessions whose TEARDOWN got no answer in time.
    pub teardown_unanswered: usize,
    /// The first few error messages, `session N: ...`.
    pub errors: Vec<String>,
    /// The receive time asked for, seconds.
    pub duration_s: f64,
    /// From the first connect to the last session's PLAY reply, seconds.
    pub setup_s: f64,
    /// From the first connect to the end of receiving, seconds.
    pub wall_s: f64,
    /// When the first connect was made, nanoseconds since the Unix epoch
    /// (`CLOCK_REALTIME`): with `wall_s` and each session's `seconds`, it
    /// places the receive window in time, e.g. to read a server's CPU
    /// over exactly that window.
    #[serde(default)]
    pub started_unix_ns: i64,
    /// Titles shorter than the run are played again from the start after
    /// their RTCP BYE (`true`), or the session just ends (`false`).
    pub replay: bool,
    /// Packets more than this many ms after their schedule count as late.
    pub late_threshold_ms: f64,
    /// Sums and means over all playing sessions.
    pub totals: Totals,
    /// The worst session for each measure.
    pub worst: Worst,
    /// The repair layout and loss model (`--fec` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fec: Option<FecSetup>,
    /// The load generator's own CPU.
    pub client: ClientCpu,
    /// How packets were received.
    pub receiver: ReceiverInfo,
    /// Every session.
    pub sessions: Vec<SessionReport>,
    /// Per second from the first connect, over all sessions
    /// ([`crate::load::LoadConfig::timeline`] only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelineSecond>,
}

/// Packets more than 2, 50 and 200 ms after their schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LateCounts {
    pub over_2ms: u64,
    pub over_50ms: u64,
    pub over_200ms: u64,
}

impl LateCounts {
    /// From counts over [`crate::load::LATE_THRESHOLDS_MS`].
    pub fn from_array(a: [u64; 3]) -> LateCounts {
        LateCounts {
            over_2ms: a[0],
            over_50ms: a[1],
            over_200ms: a[2],
        }
    }

    pub fn add(&mut self, o: &LateCounts) {
        self.over_2ms += o.over_2ms;
        self.over_50ms += o.over_50ms;
        self.over_200ms += o.over_200ms;
    }
}

/// One second of the run over all sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineSecond {
    /// Seconds since the first connect (this bin covers `[t, t + 1)`).
    pub t_s: u64,
    pub packets: u64,
    pub late: LateCounts,
    /// The largest lateness of a packet in this second, ms (0 if none).
    pub max_lateness_ms: f64,
}

/// Sums over the playing sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// RTP packets received, duplicates included.
    pub packets: u64,
    /// RTP bytes (header and payload) received.
    pub bytes: u64,
    /// Packets missing from the sequence.
    pub lost: u64,
    /// `lost` over expected, percent.
    pub loss_percent: f64,
    /// Packets that arrived after a higher sequence number.
    pub reordered: u64,
    /// Packets that arrived twice.
    pub duplicates: u64,
    /// Packets more than the threshold after their schedule.
    pub late: u64,
    /// `late` over received, percent.
    pub late_percent: f64,
    /// The largest lateness of any packet, ms (negative: all early).
    pub max_lateness_ms: f64,
    /// Mean over sessions of the final RFC 3550 jitter estimate, ms.
    pub jitter_ms_mean: f64,
    /// Sum of the sessions' receive rates, Mbit/s of RTP.
    pub mbps: f64,
    /// Sum of the sessions' packet rates.
    pub pps: f64,
    /// Mean receive rate per session, Mbit/s.
    pub mbps_per_session: f64,
    /// In-order packets whose RTP timestamp went backwards.
    pub timestamp_backwards: u64,
    /// Times a title ended and was played again.
    pub replays: u64,
    /// Datagrams or frames on the RTP channel that are not RTP.
    pub garbage: u64,
    /// Datagrams cut short by the receive buffer.
    pub truncated: u64,
    /// RTCP packets received.
    pub rtcp_packets: u64,
    /// Repair-stream counts (`--fec` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fec: Option<FecCounts>,
    /// Packets over each of the lateness thresholds 2, 50 and 200 ms.
    #[serde(default)]
    pub late_over: LateCounts,
    /// The longest stall of any session, ms: a gap between two consecutive
    /// arrivals beyond the media time between them.
    #[serde(default)]
    pub max_stall_ms: f64,
}

/// The repair streams of a `--fec` run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FecSetup {
    /// Source packets per block.
    pub k: u16,
    /// Repair packets per block.
    pub m: u16,
    /// The loss model applied before recovery, e.g. `"random 0.1, seed 1"`.
    pub loss: String,
}

/// What the repair streams did, in one session or summed. Recovered packets
/// are not lost and not reordered; they are not counted as received
/// (`packets`, `bytes`) nor in lateness and jitter, having no arrival time
/// of their own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FecCounts {
    /// Source packets the loss model dropped, in blocks decided (rebuilt or
    /// given up) before the run ended.
    pub dropped: u64,
    /// Source packets dropped in blocks still open when the run ended:
    /// neither recovered nor unrecoverable, and not counted as lost.
    pub pending: u64,
    /// Missing source packets rebuilt from the repair stream.
    pub recovered: u64,
    /// Missing source packets that could not be rebuilt (they are lost).
    pub unrecoverable: u64,
    /// Repair packets received after the loss model.
    pub repair_packets: u64,
    /// Repair packets the loss model dropped (random loss only).
    pub repair_dropped: u64,
    /// Repair packets that did not parse or did not fit their block.
    pub repair_rejected: u64,
    /// CPU time of the receive thread in FEC decoding (its thread CPU
    /// clock read around each decode of a block with missing packets), ms.
    pub decode_cpu_ms: f64,
}

impl FecCounts {
    /// Adds a session's counts to these.
    pub fn add(&mut self, o: &FecCounts) {
        self.dropped += o.dropped;
        self.pending += o.pending;
        self.recovered += o.recovered;
        self.unrecoverable += o.unrecoverable;
        self.repair_packets += o.repair_packets;
        self.repair_dropped += o.repair_dropped;
        self.repair_rejected += o.repair_rejected;
        self.decode_cpu_ms += o.decode_cpu_ms;
    }
}

/// The worst value of each measure over the playing sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Worst {
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub late: u64,
    pub max_lateness_ms: f64,
    /// The largest final jitter estimate, ms.
    pub jitter_ms: f64,
    /// The largest value any session's jitter estimate reached, ms.
    pub jitter_ms_peak: f64,
    /// The slowest session, Mbit/s.
    pub min_mbps: f64,
}

/// CPU the load generator's receive thread used while it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientCpu {
    pub user_s: f64,
    pub sys_s: f64,
    pub wall_s: f64,
    /// (user + sys) / wall, percent of one core.
    pub percent_of_core: f64,
    /// (user + sys) / packets received, microseconds.
    pub us_per_packet: f64,
}

/// How packets were received.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReceiverInfo {
    /// Receive threads (all sessions share them).
    pub threads: usize,
    /// e.g. `"epoll + recvmmsg"`.
    pub method: String,
    /// `UDP_GRO` was enabled on the RTP sockets.
    pub gro: bool,
    /// Arrival times come from the kernel (`SO_TIMESTAMPNS`), not from the
    /// time the receive thread got to the packet.
    pub kernel_timestamps: bool,
    /// The RTP sockets' receive buffer as the kernel reports it, bytes.
    pub rcvbuf_bytes: usize,
    /// Datagrams (UDP) or reads (TCP) that brought packets.
    pub reads: u64,
    /// Mean RTP packets per datagram (GRO) or read (TCP).
    pub packets_per_read: f64,
    /// System calls to receive (recvmmsg / read) per RTP packet.
    pub syscalls_per_packet: f64,
}

/// One session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionReport {
    pub index: usize,
    /// It got to play.
    pub playing: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// Seconds from its PLAY reply to the end of the run.
    pub seconds: f64,
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    pub reordered: u64,
    pub duplicates: u64,
    pub late: u64,
    pub max_lateness_ms: f64,
    pub jitter_ms: f64,
    pub jitter_ms_peak: f64,
    pub mbps: f64,
    pub pps: f64,
    pub timestamp_backwards: u64,
    pub replays: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fec: Option<FecCounts>,
    /// The title's URL, when sessions play several.
    #[serde(default)]
    pub url: String,
    /// Where its first PLAY started, seconds into the title.
    #[serde(default)]
    pub start_npt_s: f64,
    /// From its first PLAY sent to its first RTP packet, ms.
    #[serde(default)]
    pub first_packet_ms: Option<f64>,
    /// Packets over each of the lateness thresholds 2, 50 and 200 ms.
    #[serde(default)]
    pub late_over: LateCounts,
    /// Its longest stall, ms (see [`Totals::max_stall_ms`]).
    #[serde(default)]
    pub max_stall_ms: f64,
}

impl LoadReport {
    /// Pretty JSON, for `--json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses what [`LoadReport::to_json`] wrote.
    pub fn from_json(s: &str) -> Result<LoadReport, serde_json::Error> {
        serde_json::from_str(s)
    }

    /// Whether every session played without loss and without late packets.
    pub fn clean(&self) -> bool {
        self.setup_failures == 0
            && self.sessions_dropped == 0
            && self.totals.lost == 0
            && self.totals.late == 0
    }
}

fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        let w = &self.worst;
        let r = &self.receiver;
        let mut urls: Vec<&str> = self.sessions.iter().map(|s| s.url.as_str()).collect();
        urls.sort_unstable();
        urls.dedup();
        let what = match urls.len() {
            0 | 1 => self.url.clone(),
            n => format!("{n} titles from random positions"),
        };
        writeln!(
            f,
            "fjord load: {} × {} over {} for {:.1} s ({} playing, {} failed to set up, {} dropped)",
            self.sessions_requested,
            what,
            self.transport.to_uppercase(),
            self.duration_s,
            self.sessions_playing,
            self.setup_failures,
            self.sessions_dropped,
        )?;
        writeln!(
            f,
            "  received     {} packets, {:.1} MB: {:.1} Mbit/s total, {:.2} Mbit/s per session (slowest {:.2}), {:.0} packets/s",
            count(t.packets),
            t.bytes as f64 / 1e6,
            t.mbps,
            t.mbps_per_session,
            w.min_mbps,
            t.pps
        )?;
        writeln!(
            f,
            "  loss         {} ({:.4} %), worst session {}",
            count(t.lost),
            t.loss_percent,
            count(w.lost)
        )?;
        if let (Some(setup), Some(c)) = (&self.fec, &t.fec) {
            writeln!(
                f,
                "  fec          {}:{}, {}: dropped {} (+{} in blocks open at the end), recovered {}, unrecoverable {}; repair packets {} ({} dropped, {} rejected); decode CPU {:.2} ms",
                setup.k,
                setup.m,
                setup.loss,
                count(c.dropped),
                count(c.pending),
                count(c.recovered),
                count(c.unrecoverable),
                count(c.repair_packets),
                count(c.repair_dropped),
                count(c.repair_rejected),
                c.decode_cpu_ms
            )?;
        }
        writeln!(
            f,
            "  reordered    {}, worst session {}; duplicates {}, worst session {}",
            count(t.reordered),
            count(w.reordered),
            count(t.duplicates),
            count(w.duplicates)
        )?;
        writeln!(
            f,
            "  late >{:.0} ms   {} ({:.4} %), worst session {}; latest packet {:+.2} ms vs its schedule",
            self.late_threshold_ms,
            count(t.late),
            t.late_percent,
            count(w.late),
            t.max_lateness_ms
        )?;
        writeln!(
            f,
            "  late >50 ms  {}, >200 ms {}; longest stall {:.1} ms",
            count(t.late_over.over_50ms),
            count(t.late_over.over_200ms),
            t.max_stall_ms
        )?;
        let mut ttfp: Vec<f64> = self
            .sessions
            .iter()
            .filter_map(|s| s.first_packet_ms)
            .collect();
        ttfp.sort_by(f64::total_cmp);
        if let (Some(first), Some(last)) = (ttfp.first(), ttfp.last()) {
            writeln!(
                f,
                "  first packet {:.1} ms median after PLAY (fastest {:.1}, slowest {:.1})",
                ttfp[ttfp.len() / 2],
                first,
                last
            )?;
        }
        writeln!(
            f,
            "  jitter       {:.2} ms mean, worst session {:.2} ms (peak {:.2} ms)  [RFC 3550 A.8]",
            t.jitter_ms_mean, w.jitter_ms, w.jitter_ms_peak
        )?;
        if t.timestamp_backwards + t.garbage + t.truncated > 0 {
            writeln!(
                f,
                "  anomalies    {} timestamps backwards, {} non-RTP, {} truncated",
                t.timestamp_backwards, t.garbage, t.truncated
            )?;
        }
        writeln!(
            f,
            "  replays      {} (titles shorter than the run {})",
            t.replays,
            if self.replay {
                "play again from the start after their BYE"
            } else {
                "end"
            }
        )?;
        writeln!(
            f,
            "  client CPU   {:.1} % of one core (user {:.2} s, sys {:.2} s over {:.1} s), {:.2} µs per packet",
            self.client.percent_of_core,
            self.client.user_s,
            self.client.sys_s,
            self.client.wall_s,
            self.client.us_per_packet
        )?;
        if self.transport == "tcp" {
            writeln!(
                f,
                "  receiver     {} thread, {}, user-space timestamps; {:.1} packets per read, {:.3} syscalls per packet",
                r.threads, r.method, r.packets_per_read, r.syscalls_per_packet
            )?;
        } else {
            writeln!(
                f,
                "  receiver     {} thread, {}; UDP_GRO {}, {} timestamps, rcvbuf {} KiB; {:.1} packets per datagram, {:.3} syscalls per packet",
                r.threads,
                r.method,
                if r.gro { "on" } else { "off" },
                if r.kernel_timestamps {
                    "kernel"
                } else {
                    "user-space"
                },
                r.rcvbuf_bytes / 1024,
                r.packets_per_read,
                r.syscalls_per_packet
            )?;
        }
        writeln!(f, "  setup        {:.2} s for all sessions", self.setup_s)?;
        if self.teardown_unanswered > 0 {
            writeln!(
                f,
                "  teardown     {} sessions got no TEARDOWN reply",
                self.teardown_unanswered
            )?;
        }
        for e in &self.errors {
            writeln!(f, "  error        {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_group_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}

//! The report at the end of a run: each session's counts, their totals
//! and worst, the receiving thread's CPU and reads, the lateness timeline.

use super::Runner;
use crate::fec::LossModel;
use crate::load::report::{
    ClientCpu, FecSetup, LateCounts, LoadReport, ReceiverInfo, SessionReport, TimelineSecond,
    Totals, Worst,
};
use crate::load::session::Sess;
use crate::load::stats::SecondBin;
use crate::load::sys;

/// How many errors the report lists.
const MAX_ERRORS: usize = 10;

impl Runner<'_> {
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

    /// What the run found.
    pub(super) fn report(&self) -> LoadReport {
        let end = self.stop_ns;
        let mut sessions = Vec::with_capacity(self.sessions.len());
        let mut sums = Sums::new();
        let mut errors = Vec::new();
        let mut failures = 0usize;
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
            let r = self.session_report(index, s, end);
            sums.add(s, &r);
            sessions.push(r);
        }
        let wall_s = (end - self.t0) as f64 / 1e9;
        let (playing, dropped, teardown_unanswered) =
            (sums.playing, sums.dropped, sums.teardown_unanswered);
        let (t, w) = sums.finish();
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
            client: self.client_cpu(wall_s, t.packets),
            receiver: self.receiver_info(t.packets),
            totals: t,
            worst: w,
            sessions,
        }
    }

    /// The report of session `index`, which played, at `end`.
    fn session_report(&self, index: usize, s: &Sess, end: i64) -> SessionReport {
        let seconds = ((end - s.play_ns.unwrap_or(end)) as f64 / 1e9).max(1e-9);
        // Dropped packets whose block was still open at the end were
        // neither rebuilt nor given up: not lost.
        let pending = s.fec.as_ref().map_or(0, |f| f.drops - f.decided);
        let max_lateness_ms = if s.packets > 0 {
            s.timing.max_lateness_ns as f64 / 1e6
        } else {
            0.0
        };
        SessionReport {
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
        }
    }

    /// The receiving thread's CPU over `wall_s`, for `packets` received.
    fn client_cpu(&self, wall_s: f64, packets: u64) -> ClientCpu {
        let (u0, s0) = self.cpu0;
        let (u1, s1) = self.cpu;
        let cpu_s = (u1 - u0) + (s1 - s0);
        ClientCpu {
            user_s: u1 - u0,
            sys_s: s1 - s0,
            wall_s,
            percent_of_core: if wall_s > 0.0 {
                100.0 * cpu_s / wall_s
            } else {
                0.0
            },
            us_per_packet: if packets > 0 {
                cpu_s * 1e6 / packets as f64
            } else {
                0.0
            },
        }
    }

    /// How the thread received `packets`.
    fn receiver_info(&self, packets: u64) -> ReceiverInfo {
        ReceiverInfo {
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
                packets as f64 / self.reads as f64
            } else {
                0.0
            },
            syscalls_per_packet: if packets > 0 {
                self.syscalls as f64 / packets as f64
            } else {
                0.0
            },
        }
    }
}

/// The sessions that played, summed as they are added.
struct Sums {
    totals: Totals,
    worst: Worst,
    /// Packets the sessions' sequence numbers say were sent.
    expected: u64,
    jitter_sum: f64,
    playing: usize,
    dropped: usize,
    teardown_unanswered: usize,
}

impl Sums {
    fn new() -> Sums {
        Sums {
            totals: Totals::default(),
            worst: Worst {
                min_mbps: f64::INFINITY,
                max_lateness_ms: f64::NEG_INFINITY,
                ..Worst::default()
            },
            expected: 0,
            jitter_sum: 0.0,
            playing: 0,
            dropped: 0,
            teardown_unanswered: 0,
        }
    }

    /// Session `s`, which played, and its report `r`.
    fn add(&mut self, s: &Sess, r: &SessionReport) {
        self.playing += 1;
        self.dropped += usize::from(s.dropped);
        self.teardown_unanswered += usize::from(s.teardown_sent && !s.torn_down);
        let t = &mut self.totals;
        t.late_over.add(&r.late_over);
        t.max_stall_ms = t.max_stall_ms.max(r.max_stall_ms);
        self.expected += s.seq.expected();
        self.jitter_sum += r.jitter_ms;
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
        let w = &mut self.worst;
        w.lost = w.lost.max(r.lost);
        w.reordered = w.reordered.max(r.reordered);
        w.duplicates = w.duplicates.max(r.duplicates);
        w.late = w.late.max(r.late);
        if s.packets > 0 {
            w.max_lateness_ms = w.max_lateness_ms.max(r.max_lateness_ms);
        }
        w.jitter_ms = w.jitter_ms.max(r.jitter_ms);
        w.jitter_ms_peak = w.jitter_ms_peak.max(r.jitter_ms_peak);
        w.min_mbps = w.min_mbps.min(r.mbps);
    }

    /// The totals and the worst, with the percentages and means.
    fn finish(self) -> (Totals, Worst) {
        let (mut t, mut w) = (self.totals, self.worst);
        if !w.min_mbps.is_finite() {
            w.min_mbps = 0.0;
        }
        if !w.max_lateness_ms.is_finite() {
            w.max_lateness_ms = 0.0;
        }
        t.max_lateness_ms = w.max_lateness_ms;
        t.loss_percent = pct(t.lost, self.expected);
        t.late_percent = pct(t.late, t.packets);
        if self.playing > 0 {
            t.jitter_ms_mean = self.jitter_sum / self.playing as f64;
            t.mbps_per_session = t.mbps / self.playing as f64;
        }
        (t, w)
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

//! The samples of a soak run and what is made of them: `soak.csv` (a row
//! per sample, appended as it is taken), the verdict (growth after the
//! warm-up as a least-squares slope, late packets per million sent), the
//! markdown note `soak.md` and the plot `soak.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::client::Tally;
use super::plan::End;
use super::sched::{EngineThread, Evidence, Machine, Split, ThreadCounters};
use super::server::{ProcFigures, Warnings};
use crate::chart;
use crate::procfs::tick_ms;

/// Growth slower than this, in % of the level per hour, is flat.
pub const FLAT_PCT_PER_HOUR: f64 = 2.0;
/// A window shorter than this is too short to call growth.
pub const MIN_WINDOW_S: f64 = 600.0;

/// One sample of the server, the machine and the viewers.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Seconds since the viewers started (0: before).
    pub t_s: f64,
    pub proc: ProcFigures,
    /// From `/metrics`: live sessions, connections, RTP packets sent and
    /// sent late (> 2 ms), the worst lateness since the start, RTSP
    /// requests and those answered other than 2xx.
    pub sessions: u64,
    pub connections: u64,
    /// Sessions in the admin API's list not in the previous sample's, and
    /// gone from it: the churn as the server sees it.
    pub came: u64,
    pub went: u64,
    pub sent: u64,
    pub late: u64,
    pub max_late_ms: f64,
    pub requests: u64,
    pub refused: u64,
    pub client: Tally,
    /// CPU of this process (the viewers, the sampler), seconds.
    pub client_cpu_s: f64,
    /// Times the engine found a session's next packet not read yet (the
    /// storage layer's wait; session starts included), from `/metrics`.
    pub not_ready: u64,
    /// Heap the allocator counts in use (`fjord_heap_allocated_bytes`),
    /// KiB: the live bytes plus chunk headers and its thread caches.
    pub heap_allocated_kib: u64,
    /// Heap the server's code holds (`fjord_heap_live_bytes`), KiB.
    pub heap_live_kib: u64,
    /// The server's engine threads since the previous sample.
    pub engine: Vec<EngineThread>,
    /// The machine since the previous sample: steal, irq + softirq.
    pub machine: Machine,
}

const CSV_COLUMNS: &str = "t_s,rss_kib,fds,threads,server_cpu_s,slab_kib,sunreclaim_kib,\
sessions,connections,came,went,sent,late,max_late_ms,rtsp_requests,rtsp_not_2xx,\
viewer_sessions,lives,ended_teardown,ended_close,ended_bye,early_bye,viewer_requests,\
packets,lost_udp,gaps_tcp,errors,client_cpu_s,\
rss_anon_kib,rss_file_kib,rss_shmem_kib,not_ready,steal_ms,usual_steal_ms,irq_softirq_ms,\
late_whose,heap_allocated_kib,heap_live_kib";

/// Per engine thread (`e` alone: summed over them), since the previous
/// sample; `late` and `max_late_ms` come from `/metrics`.
const THREAD_COLUMNS: [&str; 14] = [
    "cpu_ms",
    "runq_ms",
    "usual_runq_ms",
    "slices",
    "vcsw",
    "nvcsw",
    "majflt",
    "blkio_ms",
    "late",
    "late_woke",
    "late_busy",
    "late_storage",
    "late_socket",
    "max_late_ms",
];

/// The header of `soak.csv` for the engine threads `threads` (their N).
pub fn csv_header(threads: &[usize]) -> String {
    let mut h = CSV_COLUMNS.to_string();
    let names = std::iter::once("e".to_string()).chain(threads.iter().map(|i| format!("e{i}")));
    for n in names {
        for c in THREAD_COLUMNS {
            let _ = write!(h, ",{n}_{c}");
        }
    }
    h.push('\n');
    h
}

/// [`THREAD_COLUMNS`] of a thread's (or the sum's) figures.
fn thread_csv(t: &EngineThread) -> String {
    let (d, tick) = (&t.d, tick_ms());
    format!(
        ",{:.3},{:.3},{:.3},{},{},{},{},{:.0},{},{},{},{},{},{:.3}",
        d.cpu_ns as f64 / 1e6,
        d.wait_ns as f64 / 1e6,
        t.usual_wait_ns as f64 / 1e6,
        d.slices,
        d.voluntary,
        d.nonvoluntary,
        d.majflt,
        d.blkio_ticks as f64 * tick,
        t.late,
        t.woke,
        t.busy,
        t.storage,
        t.socket,
        t.max_late_ms
    )
}

impl Sample {
    /// The engine threads summed (the worst lateness: the most of one).
    pub fn engine_sum(&self) -> EngineThread {
        let e = &self.engine;
        EngineThread {
            index: 0,
            d: ThreadCounters::sum(e.iter().map(|t| &t.d)),
            late: e.iter().map(|t| t.late).sum(),
            woke: e.iter().map(|t| t.woke).sum(),
            busy: e.iter().map(|t| t.busy).sum(),
            storage: e.iter().map(|t| t.storage).sum(),
            socket: e.iter().map(|t| t.socket).sum(),
            usual_wait_ns: e.iter().map(|t| t.usual_wait_ns).sum(),
            max_late_ms: e.iter().map(|t| t.max_late_ms).fold(0.0, f64::max),
            rose: e.iter().any(|t| t.rose),
        }
    }

    /// Late packets in this sample (the engine threads' counters).
    pub fn late_here(&self) -> u64 {
        self.engine.iter().map(|t| t.late).sum()
    }

    /// Whose this sample's late packets are; None without any.
    pub fn split(&self) -> Option<Split> {
        Some(Split::of(&self.engine)).filter(|s| s.late() > 0)
    }

    pub fn evidence(&self) -> Evidence {
        Evidence::of(&self.engine)
    }

    /// A row of `soak.csv`, its thread columns for `threads`.
    pub fn csv_row(&self, threads: &[usize]) -> String {
        let mut row = self.base_csv();
        let (p, m) = (&self.proc, &self.machine);
        let whose = self.split().map_or(String::new(), |s| s.name());
        let _ = write!(
            row,
            ",{},{},{},{},{:.0},{:.1},{:.0},{whose},{},{}",
            p.rss_anon_kib,
            p.rss_file_kib,
            p.rss_shmem_kib,
            self.not_ready,
            m.steal_ms,
            m.usual_steal_ms,
            m.irq_ms,
            self.heap_allocated_kib,
            self.heap_live_kib
        );
        row.push_str(&thread_csv(&self.engine_sum()));
        for i in threads {
            match self.engine.iter().find(|t| t.index == *i) {
                Some(t) => row.push_str(&thread_csv(t)),
                None => row.push_str(&",".repeat(THREAD_COLUMNS.len())),
            }
        }
        row.push('\n');
        row
    }

    /// The columns `soak.csv` had before the engine threads'.
    fn base_csv(&self) -> String {
        let (p, c) = (&self.proc, &self.client);
        format!(
            "{:.1},{},{},{},{:.2},{},{},{},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.2}",
            self.t_s,
            p.rss_kib,
            p.fds,
            p.threads,
            p.cpu_s,
            p.slab_kib,
            p.sunreclaim_kib,
            self.sessions,
            self.connections,
            self.came,
            self.went,
            self.sent,
            self.late,
            self.max_late_ms,
            self.requests,
            self.refused,
            c.sessions,
            c.lives,
            c.ended[0],
            c.ended[1],
            c.ended[2],
            c.early_bye,
            c.requests,
            c.packets,
            c.lost_udp,
            c.gaps_tcp,
            c.errors,
            self.client_cpu_s
        )
    }
}

/// A least-squares line through a measure after the warm-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    /// The mean of the measure.
    pub level: f64,
    /// Units per hour.
    pub per_hour: f64,
}

impl Growth {
    /// The slope through `(seconds, value)` points; None under 3 points.
    pub fn of(points: &[(f64, f64)]) -> Option<Growth> {
        if points.len() < 3 {
            return None;
        }
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| Growth {
            level: my,
            per_hour: sxy / sxx * 3600.0,
        })
    }

    pub fn pct_per_hour(&self) -> f64 {
        if self.level == 0.0 {
            0.0
        } else {
            100.0 * self.per_hour / self.level
        }
    }

    /// The call on a window of `window_s` seconds.
    pub fn call(&self, window_s: f64) -> &'static str {
        let pct = self.pct_per_hour();
        if window_s < MIN_WINDOW_S {
            "window too short to call"
        } else if pct.abs() < FLAT_PCT_PER_HOUR {
            "flat"
        } else if pct > 0.0 {
            "GROWS"
        } else {
            "shrinks"
        }
    }
}

/// Everything the note says.
#[derive(Clone, Debug, Default)]
pub struct SoakReport {
    pub command: String,
    pub machine: String,
    pub sessions: usize,
    pub minutes: f64,
    pub tcp_share: f64,
    pub seed: u64,
    /// The titles, for people.
    pub titles: Vec<String>,
    /// The first is taken before the viewers start.
    pub samples: Vec<Sample>,
    pub warmup_s: f64,
    /// Once the viewers stopped and the server's sessions drained.
    pub after: Option<Sample>,
    /// The server's exit code on SIGTERM (None: a signal or no exit) and
    /// how long it took, seconds.
    pub exit: Option<(Option<i32>, f64)>,
    /// Why the run stopped before its time, if it did.
    pub aborted: Option<String>,
    pub warnings: Warnings,
    pub errors: BTreeMap<String, u64>,
    /// The viewers' counts at the end (or the latest sample's).
    pub viewers: Tally,
    /// The engine threads (their N) found at the first sample: the
    /// per-thread columns of `soak.csv`.
    pub engine_threads: Vec<usize>,
    /// The titles' files and the `fjord` binary: what file pages the
    /// server maps can add up to.
    pub library_kib: u64,
    pub binary_kib: u64,
    /// Whether block I/O delay was counted (kernel.task_delayacct).
    pub delayacct: String,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl SoakReport {
    fn last(&self) -> Sample {
        self.samples.last().cloned().unwrap_or_default()
    }

    /// The samples after the warm-up.
    fn window(&self) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.t_s >= self.warmup_s)
            .collect()
    }

    fn growth(&self, f: impl Fn(&Sample) -> f64) -> Option<(Growth, f64)> {
        let w = self.window();
        let span = w.last()?.t_s - w.first()?.t_s;
        let g = Growth::of(&w.iter().map(|s| (s.t_s, f(s))).collect::<Vec<_>>())?;
        Some((g, span))
    }

    fn growth_line(&self, what: &str, unit: &str, f: impl Fn(&Sample) -> f64) -> String {
        match self.growth(f) {
            Some((g, span)) => format!(
                "- {what}: {:+.2} {unit}/h ({:+.2} % of {:.1} {unit} per hour) over {:.1} min after the warm-up: **{}**",
                g.per_hour,
                g.pct_per_hour(),
                g.level,
                span / 60.0,
                g.call(span)
            ),
            None => format!("- {what}: too few samples after the warm-up"),
        }
    }

    /// Late packets per million sent after the warm-up (and their counts).
    pub fn late_per_million(&self) -> (f64, u64, u64) {
        let w = self.window();
        let (Some(a), Some(b)) = (w.first(), w.last()) else {
            return (0.0, 0, 0);
        };
        let late = b.late.saturating_sub(a.late);
        let sent = b.sent.saturating_sub(a.sent);
        (late as f64 * 1e6 / sent.max(1) as f64, late, sent)
    }

    /// The verdict lines.
    pub fn verdict(&self) -> Vec<String> {
        let mut v = self.rss_lines();
        v.extend([
            self.growth_line("server open fds", "fds", |s| s.proc.fds as f64),
            self.growth_line("server threads", "threads", |s| s.proc.threads as f64)
                + " (tokio's blocking pool, at most 64 threads, reads titles' indexes and \
                   disk pages for seeks and downloads; an idle one ends after a minute, so the \
                   count follows the peak of such waits within that bound)",
            self.growth_line("kernel slab (system-wide)", "MiB", |s| mib(s.proc.slab_kib)),
            self.growth_line("kernel SUnreclaim (system-wide)", "MiB", |s| {
                mib(s.proc.sunreclaim_kib)
            }),
        ]);
        let (ppm, late, sent) = self.late_per_million();
        let last = self.last();
        v.push(format!(
            "- late packets (> 2 ms, the server's count): {ppm:.1} per million sent after the warm-up ({late} of {sent}); worst lateness since the start {:.1} ms",
            last.max_late_ms
        ));
        v.push(format!(
            "- late packets, attributed: {}",
            self.attribution().line()
        ));
        let c = &self.viewers;
        v.push(format!(
            "- viewer errors: {} in {} lives; RTSP replies other than 2xx counted by the server: {}; server log warnings and errors: {}",
            c.errors, c.lives, last.refused, self.warnings.count
        ));
        v.push(format!(
            "- sequence gaps in {} packets received: {} over UDP (lost), {} over TCP",
            c.packets, c.lost_udp, c.gaps_tcp
        ));
        v.push(self.after_line());
        v.push(self.cpu_line());
        v
    }

    /// RSS in its parts: the heap (RssAnon) could leak; file pages
    /// (RssFile) are titles mapped by seeks, bounded by the library.
    fn rss_lines(&self) -> Vec<String> {
        let p = self.last().proc;
        let bound = self.library_kib + self.binary_kib;
        let mut file = self.growth_line("server file pages (RssFile)", "MiB", |s| {
            mib(s.proc.rss_file_kib)
        });
        let peak = self.samples.iter().map(|s| s.proc.rss_file_kib).max();
        if file.ends_with("**GROWS**") && peak.is_some_and(|k| k <= bound) {
            file.truncate(file.len() - "**GROWS**".len());
            file.push_str("**grows, bounded**");
        }
        let _ = write!(
            file,
            " (file pages of the titles mapped by seeks, and of the binary: bounded by the library's {:.1} MiB + the binary's {:.1} MiB, so growth within that is the page cache filling, not a leak)",
            mib(self.library_kib),
            mib(self.binary_kib)
        );
        vec![
            format!(
                "- server RSS {:.1} MiB at the end = RssAnon {:.1} + RssFile {:.1} + RssShmem {:.1}; growth is judged on the heap and the file pages apart:",
                mib(p.rss_kib),
                mib(p.rss_anon_kib),
                mib(p.rss_file_kib),
                mib(p.rss_shmem_kib)
            ),
            self.growth_line("server heap (RssAnon)", "MiB", |s| mib(s.proc.rss_anon_kib)),
            self.growth_line(
                "heap the server's code holds (counted at each allocation and free: a leak shows here)",
                "MiB",
                |s| mib(s.heap_live_kib),
            ),
            self.growth_line(
                "heap the allocator counts in use (glibc's: the above plus chunk headers and each thread's cache of freed chunks, untouched pages included)",
                "MiB",
                |s| mib(s.heap_allocated_kib),
            ),
            file,
        ]
    }

    fn after_line(&self) -> String {
        let base = self.samples.first().cloned().unwrap_or_default();
        let after = match &self.after {
            Some(a) => format!(
                "{} sessions and {} connections left on the server; {} fds (before the viewers: {}), RSS {:.1} MiB (before: {:.1})",
                a.sessions,
                a.connections,
                a.proc.fds,
                base.proc.fds,
                mib(a.proc.rss_kib),
                mib(base.proc.rss_kib)
            ),
            None => "not reached (the run is still going or was interrupted)".into(),
        };
        let exit = match self.exit {
            Some((Some(code), s)) => format!("exit code {code} after {s:.2} s"),
            Some((None, s)) => {
                format!("no exit code (killed by a signal, or still running after {s:.0} s)")
            }
            None => "not sent yet".into(),
        };
        format!("- after the viewers stopped: {after}; SIGTERM: {exit}")
    }

    fn cpu_line(&self) -> String {
        let (Some(a), Some(b)) = (self.samples.get(1), self.samples.last()) else {
            return "- CPU: too few samples".into();
        };
        let dt = (b.t_s - a.t_s).max(1e-9);
        format!(
            "- CPU, % of one core: server {:.1}, viewers {:.1} ({} viewers, a thread each; this process, sampler included)",
            100.0 * (b.proc.cpu_s - a.proc.cpu_s) / dt,
            100.0 * (b.client_cpu_s - a.client_cpu_s) / dt,
            self.sessions
        )
    }

    /// The samples the table shows: one per `step` seconds and the last.
    fn rows(&self) -> Vec<&Sample> {
        let step = if self.minutes > 30.0 { 300.0 } else { 60.0 };
        let mut rows: Vec<&Sample> = Vec::new();
        let mut next = 0.0;
        for s in &self.samples {
            if s.t_s >= next - 1.0 {
                rows.push(s);
                next = (s.t_s / step + 1.0).round() * step;
            }
        }
        if let Some(l) = self.samples.last()
            && rows.last().is_none_or(|r| !std::ptr::eq(*r, l))
        {
            rows.push(l);
        }
        rows
    }

    fn table(&self) -> String {
        let mut t = String::from(
            "| min | RSS MiB (heap / files) | fds | threads | slab MiB | SUnreclaim MiB | sessions | came / went | sent pkt/s | late/s | server CPU % | viewers CPU % | errors | lost (UDP) |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let rows = self.rows();
        for (i, s) in rows.iter().enumerate() {
            t.push_str(&self.row(rows[i.saturating_sub(1)], s));
        }
        t
    }

    /// A table row: levels at `s`, rates and churn since `prev`.
    fn row(&self, prev: &Sample, s: &Sample) -> String {
        let dt = s.t_s - prev.t_s;
        let per = |a: f64, b: f64, scale: f64, digits: usize| {
            if dt > 0.0 {
                format!("{:.digits$}", scale * (a - b) / dt)
            } else {
                "-".into()
            }
        };
        let between = self
            .samples
            .iter()
            .filter(|x| x.t_s > prev.t_s && x.t_s <= s.t_s);
        let (came, went) = between.fold((0, 0), |(c, w), x| (c + x.came, w + x.went));
        format!(
            "| {:.1} | {:.1} ({:.1} / {:.1}) | {} | {} | {:.1} | {:.1} | {} | {came} / {went} | {} | {} | {} | {} | {} | {} |\n",
            s.t_s / 60.0,
            mib(s.proc.rss_kib),
            mib(s.proc.rss_anon_kib),
            mib(s.proc.rss_file_kib),
            s.proc.fds,
            s.proc.threads,
            mib(s.proc.slab_kib),
            mib(s.proc.sunreclaim_kib),
            s.sessions,
            per(s.sent as f64, prev.sent as f64, 1.0, 0),
            per(s.late as f64, prev.late as f64, 1.0, 1),
            per(s.proc.cpu_s, prev.proc.cpu_s, 100.0, 1),
            per(s.client_cpu_s, prev.client_cpu_s, 100.0, 1),
            s.client.errors,
            s.client.lost_udp
        )
    }

    fn ends(&self) -> String {
        let c = self.viewers;
        let mut parts: Vec<String> = End::ALL
            .iter()
            .zip(c.ended)
            .map(|(e, n)| format!("{n} {}", e.name()))
            .collect();
        parts.push(format!(
            "{} ended by the title's end before their plan",
            c.early_bye
        ));
        parts.push(format!("{} by an error", c.errors));
        let ended = c.ended.iter().sum::<u64>() + c.early_bye + c.errors;
        parts.push(format!(
            "{} still going when the viewers stopped",
            c.lives.saturating_sub(ended)
        ));
        parts.join(", ")
    }

    /// Every sample with late packets, the one before it, and whose.
    fn late_samples(&self) -> Vec<(&Sample, &Sample, Split)> {
        let s = &self.samples;
        (0..s.len())
            .filter_map(|i| Some((&s[i.saturating_sub(1)], &s[i], s[i].split()?)))
            .collect()
    }

    /// The late packets since the start by whose they are.
    pub fn attribution(&self) -> Attribution {
        let mut a = Attribution::default();
        for (_, _, split) in self.late_samples() {
            a.samples += 1;
            a.split.add(&split);
        }
        a
    }

    /// The section "Late packets, attributed": a row per sample with any.
    fn attributed(&self) -> String {
        let mut m = String::from("\n## Late packets, attributed\n\n");
        let _ = writeln!(m, "{}\n", self.attribution().line());
        let rows = self.late_samples();
        if rows.is_empty() {
            let _ = writeln!(m, "Block I/O delay: {}.", self.delayacct);
            return m;
        }
        let _ = writeln!(m, "{ATTRIBUTION}Block I/O delay: {}.\n", self.delayacct);
        m.push_str(
            "| min | late packets | threads late | worst ms | whose (the engine's causes) | run-queue wait ms (usual) | beyond usual ms | engine CPU ms | nonvoluntary switches | major faults | blkio ms | steal ms (usual) | irq+softirq ms | not-ready waits |\n\
             |---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for (prev, s, split) in rows {
            m.push_str(&late_row(prev, s, &split));
        }
        m
    }

    pub fn markdown(&self, running: bool) -> String {
        let mut m = String::new();
        let last = self.last();
        let _ = writeln!(
            m,
            "# Soak: {} sessions for {} minutes{}\n",
            self.sessions,
            self.minutes,
            if running { " (in progress)" } else { "" }
        );
        let _ = writeln!(m, "`{}`\n", self.command);
        if let Some(why) = &self.aborted {
            let _ = writeln!(m, "**The run stopped early: {why}**\n");
        }
        let _ = writeln!(m, "- machine: {}", self.machine);
        let _ = writeln!(
            m,
            "- ran {:.1} min of viewers; samples every 10 s (all in soak.csv); warm-up {:.0} s left out of the slopes",
            last.t_s / 60.0,
            self.warmup_s
        );
        let _ = writeln!(m, "- titles: {}", self.titles.join("; "));
        let _ = writeln!(
            m,
            "- {} lives ({} RTSP requests; TCP interleaved share {:.0} %, seed {}): {}\n",
            self.viewers.lives,
            self.viewers.requests,
            self.tcp_share * 100.0,
            self.seed,
            self.ends()
        );
        m.push_str("## Verdict\n\n");
        for l in self.verdict() {
            m.push_str(&l);
            m.push('\n');
        }
        m.push_str(&self.attributed());
        let step = if self.minutes > 30.0 { 5 } else { 1 };
        let _ = writeln!(m, "\n## Samples (every {step} min)\n\n{}", self.table());
        m.push_str(&self.problems());
        m.push_str(NOTES);
        m
    }

    fn problems(&self) -> String {
        let mut m = String::new();
        if !self.errors.is_empty() {
            m.push_str("## Viewer errors by kind\n\n");
            for (k, n) in &self.errors {
                let _ = writeln!(m, "- {n} × {k}");
            }
            m.push('\n');
        }
        if !self.warnings.first.is_empty() {
            let _ = writeln!(
                m,
                "## The server's first warnings ({} in all)\n",
                self.warnings.count
            );
            for l in &self.warnings.first {
                let _ = writeln!(m, "    {l}");
            }
            m.push('\n');
        }
        m
    }

    /// Five panels over the minutes of the run.
    pub fn svg(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 1400)).into_drawing_area();
        root.fill(&WHITE)?;
        let areas = root.split_evenly((5, 1));
        let s = &self.samples;
        let line = |f: &dyn Fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            s.iter().map(|x| (x.t_s / 60.0, f(x))).collect()
        };
        let rate = |server_only: bool| -> Vec<(f64, f64)> {
            let late = |x: &Sample| match (x.split(), server_only) {
                (Some(s), true) => s.server(),
                (Some(s), false) => s.late(),
                (None, _) => 0,
            };
            let dt = |w: &[Sample]| (w[1].t_s - w[0].t_s).max(1e-9);
            let pts = s.windows(2);
            pts.map(|w| (w[1].t_s / 60.0, late(&w[1]) as f64 / dt(w)))
                .collect()
        };
        let panels: [(&str, &str, Vec<Line>); 5] = [
            (
                "server RSS",
                "MiB",
                vec![
                    ("VmRSS", line(&|x| mib(x.proc.rss_kib))),
                    ("RssAnon (heap)", line(&|x| mib(x.proc.rss_anon_kib))),
                    ("heap allocated", line(&|x| mib(x.heap_allocated_kib))),
                    ("heap live (fjord's code)", line(&|x| mib(x.heap_live_kib))),
                    (
                        "RssFile (mapped titles)",
                        line(&|x| mib(x.proc.rss_file_kib)),
                    ),
                ],
            ),
            (
                "server open fds",
                "fds",
                vec![("fds", line(&|x| x.proc.fds as f64))],
            ),
            (
                "kernel slab, system-wide",
                "MiB",
                vec![
                    ("Slab", line(&|x| mib(x.proc.slab_kib))),
                    ("SUnreclaim", line(&|x| mib(x.proc.sunreclaim_kib))),
                ],
            ),
            (
                "sessions",
                "sessions",
                vec![
                    ("server (fjord_sessions)", line(&|x| x.sessions as f64)),
                    ("viewers set up", line(&|x| x.client.sessions as f64)),
                    ("came since the last sample", line(&|x| x.came as f64)),
                    ("went since the last sample", line(&|x| x.went as f64)),
                ],
            ),
            (
                "late packets (> 2 ms, server)",
                "per second",
                vec![
                    ("late/s", rate(false)),
                    ("late/s attributable to the server", rate(true)),
                ],
            ),
        ];
        let xmax = s.last().map_or(1.0, |x| x.t_s / 60.0).max(0.1);
        for (area, (caption, ydesc, lines)) in areas.iter().zip(panels) {
            panel(area, caption, ydesc, &lines, xmax)?;
        }
        root.present()?;
        Ok(())
    }
}

/// Late packets by whose they are, over the samples that had any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    pub samples: u64,
    pub split: Split,
}

impl Attribution {
    pub fn server(&self) -> u64 {
        self.split.server()
    }

    fn line(&self) -> String {
        if self.samples == 0 {
            return "no late packets, none attributable to the server".into();
        }
        let s = &self.split;
        let server = match s.server() {
            0 => "**none attributable to the server**".to_string(),
            n => format!("**{n} attributable to the server**"),
        };
        format!(
            "{server} (engine thread busy past its deadline {}, held by their sessions {}: after a storage wait {}, in a disk wait {}, for no known reason {}), {} to the clients (held after a full socket: viewers that took nothing more), {} to the machine (the engine thread woke late); {} late packets in {} samples of 10 s since the start",
            s.busy,
            s.storage + s.held + s.disk,
            s.storage,
            s.disk,
            s.held,
            s.client(),
            s.machine(),
            s.late(),
            self.samples
        )
    }
}

/// A row of "Late packets, attributed": whose they are, and the figures
/// of the engine threads that went late and of the machine.
fn late_row(prev: &Sample, s: &Sample, split: &Split) -> String {
    let set = super::sched::late_threads(&s.engine);
    let sum = ThreadCounters::sum(set.iter().map(|t| &t.d));
    let usual: u64 = set.iter().map(|t| t.usual_wait_ns).sum();
    let who: Vec<String> = set
        .iter()
        .filter(|t| t.late > 0)
        .map(|t| t.index.to_string())
        .collect();
    let m = &s.machine;
    format!(
        "| {:.1} | {} | {} | {} | {} | {:.1} ({:.1}) | {:.1} | {:.0} | {} | {} | {:.0} | {:.0} ({:.0}) | {:.0} | {} |\n",
        s.t_s / 60.0,
        s.late_here(),
        who.join(", "),
        worst(&set),
        split.name(),
        sum.wait_ns as f64 / 1e6,
        usual as f64 / 1e6,
        s.evidence().extra_wait_ms,
        sum.cpu_ns as f64 / 1e6,
        sum.nonvoluntary,
        sum.majflt,
        sum.blkio_ticks as f64 * tick_ms(),
        m.steal_ms,
        m.usual_steal_ms,
        m.irq_ms,
        s.not_ready.saturating_sub(prev.not_ready)
    )
}

/// The worst lateness of `threads` in a sample: exact where a thread's
/// gauge (since the start) rose in it, else at most the gauge.
fn worst(threads: &[&EngineThread]) -> String {
    let rose = threads.iter().filter(|t| t.rose).map(|t| t.max_late_ms);
    let all = threads.iter().map(|t| t.max_late_ms);
    match (rose.reduce(f64::max), all.reduce(f64::max)) {
        (Some(ms), _) => format!("{ms:.1}"),
        (None, Some(ms)) => format!("≤ {ms:.1}"),
        (None, None) => "-".into(),
    }
}

const ATTRIBUTION: &str = "Per 10 s sample with late packets (min: the sample's end). Whose: \
the engine counts, for every late packet, why (`fjord_late_packets_by_cause_total`): a tick sends \
what is due at its start, so a packet is late because its tick began late, the thread having \
**woke late** (asleep at its deadline, it got the CPU back late: the kernel, an interrupt or the \
hypervisor; the machine's) or been **busy** past it with earlier work (a tick, commands such as \
a session's registration; the server's), or else because its session held it: after waiting \
for the **storage** layer (not read yet; the server's), after a **full socket** (a viewer that \
took nothing more; the client's), or **held** for no reason it knew of (the server's; a **disk \
wait** when its thread had major faults or block I/O delay in the sample). Beside it, what the kernel saw over the sample of the engine \
threads that sent them (`/proc/PID/task/TID`: schedstat, status, stat) and of the machine \
(`/proc/stat`), as context: run-queue wait beyond its usual (its mean wait per timeslice so far, \
times its timeslices in the sample; under --realtime the threads are SCHED_FIFO), steal, irq + \
softirq. Run-queue wait, its usual, CPU, switches, faults and blkio are summed over the late \
threads; beyond usual is the most of one late thread; steal and irq+softirq are machine-wide, \
all CPUs. Worst: the late threads' gauge where it rose in the sample, else at most (≤) its value \
since the start. Not-ready waits: the engine found a packet not read yet (the storage layer's; \
session starts included). ";

/// A named line of (minutes, value) points.
type Line<'a> = (&'a str, Vec<(f64, f64)>);

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    ydesc: &str,
    lines: &[Line<'_>],
    xmax: f64,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let ys = lines.iter().flat_map(|l| l.1.iter().map(|p| p.1));
    let ymax = ys.fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("minutes since the viewers started")
        .y_desc(ydesc)
        .draw()?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart::line(&mut chart, pts.iter().copied(), color, Some(*name))?;
    }
    chart::legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

const NOTES: &str = "## How it was measured\n\n\
- Every viewer is a thread living one seeded life after another: DESCRIBE, SETUP of every \
track (UDP to plain sockets without UDP_GRO, drained every 100 ms, or TCP interleaved), PLAY \
from a random point, 5-60 s of receiving split by seeks (PLAY Range), pauses of 1-5 s and \
Scale 2 trick play of 2-5 s; then TEARDOWN, a close without TEARDOWN, or a seek near the end \
and play to the server's RTCP BYE. Receiver reports every 5 s. Then the next life.\n\
- Server figures: VmRSS and its parts RssAnon (the heap), RssFile (mapped title pages and \
the binary) and RssShmem, open fds and threads from /proc/PID; CPU is utime + stime. Slab and \
SUnreclaim come from /proc/meminfo and are system-wide: the viewers' sockets are in them too.\n\
- Late packets, packets sent and the worst lateness are the server's own counters (/metrics, \
summed over engine threads); sessions are `fjord_sessions`.\n\
- Per engine thread (`fjord-engine-N`) and sample, in soak.csv: CPU, run-queue wait and \
timeslices (schedstat), voluntary and nonvoluntary switches (status), major faults and block \
I/O delay (stat fields 12 and 42), its late packets and worst lateness (`/metrics`); \
machine-wide steal and irq + softirq (/proc/stat).\n\
- Growth is the least-squares slope over the samples after the warm-up, per hour and as % \
of the mean level; under 2 %/h is called flat, and a window under 10 min is not called.\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_s: f64, rss_kib: u64, sent: u64, late: u64) -> Sample {
        Sample {
            t_s,
            proc: ProcFigures {
                rss_kib,
                rss_anon_kib: rss_kib,
                rss_file_kib: 1024 + (t_s as u64) % 7,
                fds: 100,
                ..ProcFigures::default()
            },
            sent,
            late,
            ..Sample::default()
        }
    }

    #[test]
    fn slope_per_hour_and_share_of_the_level() {
        let pts: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64 * 360.0, 100.0 + i as f64))
            .collect();
        let g = Growth::of(&pts).unwrap();
        assert!((g.per_hour - 10.0).abs() < 1e-9);
        assert!((g.level - 104.5).abs() < 1e-9);
        assert!((g.pct_per_hour() - 100.0 * 10.0 / 104.5).abs() < 1e-9);
        assert_eq!(g.call(3600.0), "GROWS");
        assert_eq!(g.call(60.0), "window too short to call");
        let flat = Growth::of(&[(0.0, 50.0), (1800.0, 50.2), (3600.0, 50.0)]).unwrap();
        assert_eq!(flat.call(3600.0), "flat");
        assert!(Growth::of(&[(0.0, 1.0), (1.0, 2.0)]).is_none());
        assert!(Growth::of(&[(5.0, 1.0), (5.0, 2.0), (5.0, 3.0)]).is_none());
    }

    fn report() -> SoakReport {
        SoakReport {
            minutes: 15.0,
            warmup_s: 120.0,
            samples: (0..=90)
                .map(|i| sample(i as f64 * 10.0, 40_960 + i * 10, i * 1000, i / 10))
                .collect(),
            ..SoakReport::default()
        }
    }

    #[test]
    fn late_packets_per_million_after_the_warm_up() {
        // From t = 120 s (sent 12000, late 1) to 900 s (sent 90000, late 9).
        assert_eq!(report().late_per_million(), (8.0 * 1e6 / 78000.0, 8, 78000));
    }

    #[test]
    fn the_table_has_a_row_a_minute_and_the_verdict_calls_rss() {
        let r = report();
        let md = r.markdown(false);
        let rows = md
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| min"))
            .count();
        assert_eq!(rows, 16, "{md}");
        let rss = r
            .verdict()
            .into_iter()
            .find(|l| l.contains("server heap (RssAnon)"))
            .unwrap();
        // 10 KiB per 10 s: 3.52 MiB/h.
        assert!(
            rss.contains("+3.52 MiB/h") && rss.contains("GROWS"),
            "{rss}"
        );
        let fds = r.verdict().into_iter().find(|l| l.contains("fds")).unwrap();
        assert!(fds.contains("flat"), "{fds}");
        let file = r
            .verdict()
            .into_iter()
            .find(|l| l.contains("RssFile)"))
            .unwrap();
        assert!(file.contains("**flat**"), "{file}");
    }

    #[test]
    fn file_pages_that_grow_within_the_library_are_bounded() {
        let mut r = report();
        for s in &mut r.samples {
            s.proc.rss_file_kib = 1000 + s.t_s as u64;
        }
        r.library_kib = 2000;
        let file = |r: &SoakReport| r.verdict().into_iter().find(|l| l.contains("RssFile)"));
        assert!(file(&r).unwrap().contains("**grows, bounded**"));
        r.library_kib = 100;
        assert!(file(&r).unwrap().contains("**GROWS**"));
    }

    /// An engine thread with `late` packets, `woke` and `busy` of them by
    /// those causes (the rest held), `wait_ms` on a run queue.
    fn late(
        index: usize,
        late: u64,
        woke: u64,
        busy: u64,
        wait_ms: u64,
        majflt: u64,
    ) -> EngineThread {
        EngineThread {
            index,
            late,
            woke,
            busy,
            storage: 0,
            socket: 0,
            d: ThreadCounters {
                cpu_ns: 900_000_000,
                wait_ns: wait_ms * 1_000_000,
                majflt,
                ..ThreadCounters::default()
            },
            max_late_ms: 41.7,
            rose: late > 0,
            usual_wait_ns: 0,
        }
    }

    #[test]
    fn late_samples_attributed() {
        let mut r = report();
        r.samples[30].engine = vec![late(0, 700, 700, 0, 45, 0), late(1, 80, 70, 10, 0, 0)];
        r.samples[40].engine = vec![late(0, 0, 0, 0, 9, 0), late(1, 3, 0, 0, 1, 0)];
        r.samples[45].engine = vec![EngineThread {
            storage: 4,
            socket: 2,
            ..late(0, 6, 0, 0, 0, 0)
        }];
        r.samples[50].engine = vec![late(0, 5, 0, 0, 0, 1)];
        r.samples[60].engine = vec![late(0, 2, 2, 0, 0, 0)];
        r.samples[60].machine = Machine {
            steal_ms: 70.0,
            usual_steal_ms: 10.0,
            irq_ms: 50.0,
        };
        let a = r.attribution();
        let want = Split {
            woke: 772,
            busy: 10,
            storage: 4,
            socket: 2,
            disk: 5,
            held: 3,
        };
        assert_eq!((a.samples, a.split), (5, want));
        let v = r
            .verdict()
            .into_iter()
            .find(|l| l.contains("attributed"))
            .unwrap();
        assert!(v.contains("**22 attributable to the server**"), "{v}");
        assert!(v.contains("2 to the clients"), "{v}");
        assert!(v.contains("772 to the machine"), "{v}");
        let md = r.markdown(false);
        let section = md.split("## Late packets, attributed").nth(1).unwrap();
        let section = section.split("## Samples").next().unwrap();
        let rows: Vec<&str> = section
            .lines()
            .filter(|l| l.starts_with("| 5.0 "))
            .collect();
        assert_eq!(rows.len(), 1, "{section}");
        let want = "| 780 | 0, 1 | 41.7 | woke late 770 (machine); busy 10 (server) | 45.0 (0.0) | 45.0 | 1800 |";
        assert!(rows[0].contains(want), "{}", rows[0]);
        assert!(
            section.contains("| 6.7 | 3 | 1 | 41.7 | held 3 (server) | 1.0 (0.0) | 1.0 |"),
            "{section}"
        );
        assert!(section.contains("| disk wait 5 (server) |"), "{section}");
        assert!(
            section.contains("| storage 4 (server); full socket 2 (client) |"),
            "{section}"
        );
        assert!(
            section.contains(
                "| woke late 2 (machine) | 0.0 (0.0) | 0.0 | 900 | 0 | 0 | 0 | 70 (10) | 50 |"
            ),
            "{section}"
        );
    }

    #[test]
    fn csv_rows_have_the_header_columns() {
        let mut s = sample(10.0, 1, 2, 3);
        s.engine = vec![late(0, 3, 1, 1, 50, 0), late(2, 0, 0, 0, 0, 0)];
        let header = csv_header(&[0, 1, 2]);
        let row = s.csv_row(&[0, 1, 2]);
        let n = |l: &str| l.trim_end().split(',').count();
        assert_eq!(n(&header), n(&row), "{header}{row}");
        assert!(header.contains(",e1_runq_ms,") && header.contains(",e0_late_woke,e0_late_busy,"));
        assert!(
            row.contains(",woke late 1 (machine); busy 1 held 1 (server),"),
            "{row}"
        );
    }
}

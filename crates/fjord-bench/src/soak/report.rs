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
use super::server::{ProcFigures, Warnings};

/// Growth slower than this, in % of the level per hour, is flat.
pub const FLAT_PCT_PER_HOUR: f64 = 2.0;
/// A window shorter than this is too short to call growth.
pub const MIN_WINDOW_S: f64 = 600.0;

/// One sample of the server, the machine and the viewers.
#[derive(Clone, Copy, Debug, Default)]
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
}

pub const CSV_HEADER: &str = "t_s,rss_kib,fds,threads,server_cpu_s,slab_kib,sunreclaim_kib,\
sessions,connections,came,went,sent,late,max_late_ms,rtsp_requests,rtsp_not_2xx,\
viewer_sessions,lives,ended_teardown,ended_close,ended_bye,early_bye,viewer_requests,\
packets,lost_udp,gaps_tcp,errors,client_cpu_s\n";

impl Sample {
    pub fn csv_row(&self) -> String {
        let (p, c) = (&self.proc, &self.client);
        format!(
            "{:.1},{},{},{},{:.2},{},{},{},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.2}\n",
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
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl SoakReport {
    fn last(&self) -> Sample {
        self.samples.last().copied().unwrap_or_default()
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
        let mut v = vec![
            self.growth_line("server RSS", "MiB", |s| mib(s.proc.rss_kib)),
            self.growth_line("server open fds", "fds", |s| s.proc.fds as f64),
            self.growth_line("server threads", "threads", |s| s.proc.threads as f64),
            self.growth_line("kernel slab (system-wide)", "MiB", |s| mib(s.proc.slab_kib)),
            self.growth_line("kernel SUnreclaim (system-wide)", "MiB", |s| {
                mib(s.proc.sunreclaim_kib)
            }),
        ];
        let (ppm, late, sent) = self.late_per_million();
        let last = self.last();
        v.push(format!(
            "- late packets (> 2 ms, the server's count): {ppm:.1} per million sent after the warm-up ({late} of {sent}); worst lateness since the start {:.1} ms",
            last.max_late_ms
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

    fn after_line(&self) -> String {
        let base = self.samples.first().copied().unwrap_or_default();
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
            "| min | RSS MiB | fds | threads | slab MiB | SUnreclaim MiB | sessions | came / went | sent pkt/s | late/s | server CPU % | viewers CPU % | errors | lost (UDP) |\n\
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
            "| {:.1} | {:.1} | {} | {} | {:.1} | {:.1} | {} | {came} / {went} | {} | {} | {} | {} | {} | {} |\n",
            s.t_s / 60.0,
            mib(s.proc.rss_kib),
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
        let late: Vec<(f64, f64)> = s
            .windows(2)
            .map(|w| {
                let dt = (w[1].t_s - w[0].t_s).max(1e-9);
                (
                    w[1].t_s / 60.0,
                    w[1].late.saturating_sub(w[0].late) as f64 / dt,
                )
            })
            .collect();
        let panels: [(&str, &str, Vec<Line>); 5] = [
            (
                "server RSS",
                "MiB",
                vec![("VmRSS", line(&|x| mib(x.proc.rss_kib)))],
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
                vec![("late/s", late)],
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
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

const NOTES: &str = "## How it was measured\n\n\
- Every viewer is a thread living one seeded life after another: DESCRIBE, SETUP of every \
track (UDP to plain sockets without UDP_GRO, drained every 100 ms, or TCP interleaved), PLAY \
from a random point, 5-60 s of receiving split by seeks (PLAY Range), pauses of 1-5 s and \
Scale 2 trick play of 2-5 s; then TEARDOWN, a close without TEARDOWN, or a seek near the end \
and play to the server's RTCP BYE. Receiver reports every 5 s. Then the next life.\n\
- Server figures: VmRSS (mapped title pages included), open fds and threads from /proc/PID; \
CPU is utime + stime. Slab and SUnreclaim come from /proc/meminfo and are system-wide: the \
viewers' sockets are in them too.\n\
- Late packets, packets sent and the worst lateness are the server's own counters (/metrics, \
summed over engine threads); sessions are `fjord_sessions`.\n\
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
            .find(|l| l.contains("server RSS"))
            .unwrap();
        // 10 KiB per 10 s: 3.52 MiB/h.
        assert!(
            rss.contains("+3.52 MiB/h") && rss.contains("GROWS"),
            "{rss}"
        );
        let fds = r.verdict().into_iter().find(|l| l.contains("fds")).unwrap();
        assert!(fds.contains("flat"), "{fds}");
    }
}

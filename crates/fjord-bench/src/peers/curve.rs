//! `fjord bench peers --loads`: the whole comparison at each load, drawn as
//! CPU per packet against sessions. One load hides how cost per packet
//! moves with the load (bursts grow, wake-ups are shared), and where a
//! server stops keeping up.

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use anyhow::Context;
use plotters::prelude::*;

use crate::chart;

use super::{FjordFloor, Peer, PeerResult, PeersConfig, PeersReport, fjord_floor};

/// Loss above which a point is a gap: the server fell behind, so its CPU
/// per packet is of less work than asked for.
pub const MAX_LOSS_PERCENT: f64 = 1.0;

/// One series (a server or a floor burst) at one load.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub sessions: usize,
    /// [`Peer::tag`]: `fjord`, `kernel floor B=4`, …
    pub series: String,
    /// Median µs CPU per received packet over the runs that count.
    pub us: Option<f64>,
    pub loss_percent: Option<f64>,
    /// fjord's measured packets per send.
    pub burst: Option<f64>,
    /// Why the point is left out of its line.
    pub gap: Option<String>,
}

/// A load's comparison, or why there is none.
#[derive(Clone, Debug)]
pub struct Load {
    pub sessions: usize,
    pub points: Vec<Point>,
    pub fjord_floor: Option<FjordFloor>,
    pub error: Option<String>,
}

impl Load {
    pub fn of(r: &PeersReport) -> Self {
        let n = r.config.sessions;
        Self {
            sessions: n,
            points: r.results.iter().map(|p| point(n, p)).collect(),
            fjord_floor: fjord_floor(r),
            error: None,
        }
    }
}

fn point(sessions: usize, p: &PeerResult) -> Point {
    let us = p.us_per_packet().map(|s| s.median);
    let loss_percent = p.loss_percent();
    Point {
        sessions,
        series: p.peer.tag(),
        us,
        loss_percent,
        burst: p.burst(),
        gap: gap(p, us.is_some(), loss_percent),
    }
}

fn gap(p: &PeerResult, counted: bool, loss: Option<f64>) -> Option<String> {
    if let Some(why) = &p.skipped {
        return Some(why.clone());
    }
    if !counted {
        let first = p.runs.iter().find_map(|r| r.error.as_deref());
        return Some(format!("no run counted: {}", first.unwrap_or("no runs")));
    }
    let loss = loss.filter(|&l| l > MAX_LOSS_PERCENT)?;
    Some(format!("loss {loss:.2} % > {MAX_LOSS_PERCENT} %"))
}

/// A line's pieces between gaps: `(sessions, µs)` each.
pub type Segments = Vec<Vec<(f64, f64)>>;

/// Every load, in the order run.
#[derive(Clone, Debug, Default)]
pub struct Curve {
    pub loads: Vec<Load>,
}

/// Runs `measure` (the whole comparison) at each load in turn. A load that
/// fails is kept as a gap with its error, so one load cannot lose the rest.
pub fn run(
    cfg: &PeersConfig,
    loads: &[usize],
    mut measure: impl FnMut(&PeersConfig) -> anyhow::Result<PeersReport>,
) -> anyhow::Result<Curve> {
    anyhow::ensure!(!loads.is_empty(), "--loads needs at least one load");
    anyhow::ensure!(loads.iter().all(|&n| n > 0), "--loads must be at least 1");
    let mut curve = Curve::default();
    for &n in loads {
        let cfg = PeersConfig {
            sessions: n,
            ..cfg.clone()
        };
        eprintln!("peers curve: {n} sessions");
        let load = measure(&cfg).map(|r| Load::of(&r)).unwrap_or_else(|e| {
            eprintln!("peers curve: {n} sessions failed: {e:#}");
            Load {
                sessions: n,
                points: Vec::new(),
                fjord_floor: None,
                error: Some(format!("{e:#}")),
            }
        });
        curve.loads.push(load);
    }
    Ok(curve)
}

impl Curve {
    /// Series names in the order first seen (servers, then floors).
    pub fn series(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for p in self.loads.iter().flat_map(|l| &l.points) {
            if !names.contains(&p.series) {
                names.push(p.series.clone());
            }
        }
        names
    }

    /// Loads sorted by sessions, for the axis.
    fn sorted(&self) -> Vec<&Load> {
        let mut v: Vec<&Load> = self.loads.iter().collect();
        v.sort_by_key(|l| l.sessions);
        v
    }

    /// The plotted value of `series` at `load`: none for a gap.
    fn value(load: &Load, series: &str) -> Option<f64> {
        let p = load.points.iter().find(|p| p.series == series)?;
        p.us.filter(|_| p.gap.is_none())
    }

    /// The line of `series`: runs of consecutive loads with a value, each
    /// drawn on its own so a gap breaks the line.
    pub fn segments(&self, series: &str) -> Segments {
        let (mut segs, mut seg) = (Vec::new(), Vec::new());
        for l in self.sorted() {
            match Self::value(l, series) {
                Some(us) => seg.push((l.sessions as f64, us)),
                None if !seg.is_empty() => segs.push(std::mem::take(&mut seg)),
                None => {}
            }
        }
        if !seg.is_empty() {
            segs.push(seg);
        }
        segs
    }
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.filter(|v| v.is_finite())
        .map_or_else(String::new, |v| format!("{v:.prec$}"))
}

impl Curve {
    /// A row per series per load; a load that failed as a whole is one row
    /// of series `all`.
    pub fn csv(&self) -> String {
        let mut s =
            String::from("sessions,series,us_per_packet,loss_percent,fjord_packets_per_send,gap\n");
        let clean = |t: &str| t.replace([',', '\n'], ";");
        for l in &self.loads {
            if let Some(e) = &l.error {
                let _ = writeln!(s, "{},all,,,,{}", l.sessions, clean(e));
            }
            for p in &l.points {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{}",
                    l.sessions,
                    p.series,
                    opt(p.us, 4),
                    opt(p.loss_percent, 5),
                    opt(p.burst, 3),
                    clean(p.gap.as_deref().unwrap_or(""))
                );
            }
        }
        s
    }
}

impl Curve {
    /// The table of medians (series × load), fjord against its floor per
    /// load, and why points are missing.
    pub fn markdown(&self, command: &str, machine: &str) -> String {
        let mut md = String::from("# fjord bench peers: CPU per packet against the load\n\n");
        let _ = writeln!(md, "Command: `{command}`\n\nMachine: {machine}\n");
        md.push_str(
            "Each load is the whole comparison of `fjord bench peers` (every server and kernel \
             floor row, fresh servers, runs interleaved, medians), written as peers-N.md and \
             peers-N.csv; here the medians of µs CPU per received packet. –: a gap (see below). \
             Plot: peers-curve.svg (sessions on a log axis); data: peers-curve.csv.\n\n",
        );
        md.push_str(&self.table());
        md.push_str("\nfjord against the kernel floor at its measured burst:\n\n");
        md.push_str(&self.ratio_table());
        let notes = self.notes();
        if !notes.is_empty() {
            md.push('\n');
            for n in notes {
                let _ = writeln!(md, "- {n}");
            }
        }
        md
    }

    fn table(&self) -> String {
        let loads = self.sorted();
        let mut t = String::from("| series |");
        for l in &loads {
            let _ = write!(t, " {} sessions |", l.sessions);
        }
        t.push_str("\n|---|");
        t.push_str(&"---:|".repeat(loads.len()));
        t.push('\n');
        for name in self.series() {
            let _ = write!(t, "| {name} |");
            for l in &loads {
                let v = Self::value(l, &name).map_or("–".into(), |us| format!("{us:.2}"));
                let _ = write!(t, " {v} |");
            }
            t.push('\n');
        }
        t
    }

    fn ratio_table(&self) -> String {
        let mut t = String::from(
            "| sessions | fjord µs/packet | packets/send | floor there µs/packet | × floor (interpolated) | nearest floor row | × nearest |\n\
             |---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for l in self.sorted() {
            let fjord = Self::value(l, Peer::Fjord.name());
            let _ = match (&l.fjord_floor, fjord) {
                (Some(f), Some(us)) => writeln!(
                    t,
                    "| {} | {us:.2} | {:.2} | {:.2} | {:.2}× | B={} | {:.2}× |",
                    l.sessions, f.burst, f.at.us, f.x_at, f.nearest, f.x_nearest
                ),
                _ => writeln!(
                    t,
                    "| {} | {} | – | – | – | – | – |",
                    l.sessions,
                    opt(fjord, 2)
                ),
            };
        }
        t
    }

    /// Gaps grouped by series and reason, so a peer that is not installed
    /// is one note, not one per load.
    fn notes(&self) -> Vec<String> {
        let mut by: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        for l in self.sorted() {
            if let Some(e) = &l.error {
                by.entry(("every series".into(), e.clone()))
                    .or_default()
                    .push(l.sessions);
            }
            for p in &l.points {
                if let Some(g) = &p.gap {
                    by.entry((p.series.clone(), g.clone()))
                        .or_default()
                        .push(l.sessions);
                }
            }
        }
        by.into_iter()
            .map(|((series, why), at)| {
                let at: Vec<String> = at.iter().map(usize::to_string).collect();
                format!("{series}, gap at {} sessions: {why}", at.join(", "))
            })
            .collect()
    }
}

impl Curve {
    /// CPU per packet against sessions (log axis), a line per series with
    /// its gaps, fjord's points marked with its ratio to the floor.
    pub fn svg(&self, path: &Path) -> anyhow::Result<()> {
        self.draw(path)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("drawing {}", path.display()))
    }

    fn draw(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let lines: Vec<(String, Segments)> = self
            .series()
            .into_iter()
            .map(|s| {
                let segs = self.segments(&s);
                (s, segs)
            })
            .filter(|(_, segs)| !segs.is_empty())
            .collect();
        let (xmin, xmax) = self.x_range();
        let ymax = lines
            .iter()
            .flat_map(|(_, s)| s.iter().flatten().map(|&(_, y)| y))
            .fold(0.1f64, f64::max)
            * 1.15;
        let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "fjord bench peers: server CPU per packet against the load",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_desc("sessions (log scale)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("µs CPU per received packet")
            .draw()?;
        for (i, (name, segs)) in lines.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            for (k, seg) in segs.iter().enumerate() {
                // One legend entry per series, not per segment.
                let label = (k == 0).then_some(name.as_str());
                chart::line(&mut chart, seg.iter().copied(), color, label)?;
                chart::dots(&mut chart, seg.iter().copied(), color)?;
            }
        }
        let style = ("sans-serif", 13).into_font();
        chart.draw_series(self.ratio_labels().into_iter().map(|(x, y, text)| {
            EmptyElement::at((x, y)) + Text::new(text, (6, -18), style.clone())
        }))?;
        chart::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present()?;
        Ok(())
    }

    /// The axis: the loads with a margin, so end points are not on it.
    fn x_range(&self) -> (f64, f64) {
        let n = || self.loads.iter().map(|l| l.sessions.max(1) as f64);
        let lo = n().fold(f64::INFINITY, f64::min);
        let hi = n().fold(1.0, f64::max);
        match lo.is_finite() {
            true => (lo / 1.25, hi * 1.25),
            false => (1.0, 10.0),
        }
    }

    /// "N× floor" for each plotted fjord point that has a floor to compare.
    pub fn ratio_labels(&self) -> Vec<(f64, f64, String)> {
        self.loads
            .iter()
            .filter_map(|l| {
                let us = Self::value(l, Peer::Fjord.name())?;
                let f = l.fjord_floor?;
                Some((l.sessions as f64, us, format!("{:.1}× floor", f.x_at)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::Run;

    fn result(peer: Peer, runs: &[(f64, f64)]) -> PeerResult {
        let runs = runs
            .iter()
            .enumerate()
            .map(|(rep, &(us, loss))| Run {
                rep,
                us_per_packet: us,
                loss_percent: loss,
                burst: (peer == Peer::Fjord).then_some(3.4),
                ..Run::default()
            })
            .collect();
        PeerResult {
            peer,
            version: peer.tag(),
            runs,
            skipped: None,
        }
    }

    fn report(sessions: usize, live555_loss: f64) -> PeersReport {
        let mut live555 = result(Peer::Live555, &[(10.0, live555_loss)]);
        if sessions == 10 {
            live555.runs[0].error = Some("3 of 10 sessions played".into());
        }
        let gst = PeerResult {
            skipped: Some("GStreamer rtsp-server: skipped, not installed".into()),
            ..result(Peer::Gst, &[])
        };
        PeersReport {
            config: PeersConfig {
                sessions,
                seconds: 3.0,
                tcp: false,
                reps: 1,
                cpu: 0,
                realtime: false,
                gro: false,
                fjord_exe: "fjord".into(),
                media_dir: "m".into(),
                floor_bursts: vec![1, 4],
                servers: Peer::ALL.to_vec(),
                udp_sockets: "shared".into(),
            },
            load_cpu: 1,
            title: "t".into(),
            results: vec![
                result(Peer::Fjord, &[(2.0, 0.0), (2.2, 0.0), (1.8, 0.0)]),
                live555,
                gst,
                result(Peer::Floor(1), &[(4.0, 0.0)]),
                result(Peer::Floor(4), &[(1.5, 0.0)]),
            ],
            notes: vec![],
        }
    }

    /// Loads 10, 100, 1000, 20 (out of order), and 500 that failed: live555
    /// fails at 10 and loses too much at 1000.
    fn curve() -> Curve {
        let cfg = report(1, 0.0).config;
        run(&cfg, &[10, 100, 1000, 500, 20], |c| match c.sessions {
            500 => anyhow::bail!("too many open files"),
            1000 => Ok(report(1000, 5.0)),
            n => Ok(report(n, 0.01)),
        })
        .unwrap()
    }

    #[test]
    fn a_failed_load_is_kept_with_its_error() {
        let c = curve();
        let sessions: Vec<usize> = c.loads.iter().map(|l| l.sessions).collect();
        assert_eq!(sessions, [10, 100, 1000, 500, 20]);
        assert_eq!(c.loads[3].error.as_deref(), Some("too many open files"));
        assert!(c.loads[3].points.is_empty());
        assert!(run(&report(1, 0.0).config, &[], |_| unreachable!()).is_err());
        assert!(run(&report(1, 0.0).config, &[0], |_| unreachable!()).is_err());
    }

    #[test]
    fn gaps_break_lines() {
        let c = curve();
        assert_eq!(
            c.series(),
            [
                "fjord",
                "live555MediaServer",
                "GStreamer rtsp-server",
                "kernel floor B=1",
                "kernel floor B=4"
            ]
        );
        // Sorted by sessions; 500 failed, so every line breaks there.
        assert_eq!(
            c.segments("fjord"),
            [
                vec![(10.0, 2.0), (20.0, 2.0), (100.0, 2.0)],
                vec![(1000.0, 2.0)]
            ]
        );
        // live555: failed at 10, 5 % loss at 1000.
        assert_eq!(
            c.segments("live555MediaServer"),
            [vec![(20.0, 10.0), (100.0, 10.0)]]
        );
        assert!(c.segments("GStreamer rtsp-server").is_empty());
    }

    #[test]
    fn csv_has_a_row_per_series_per_load() {
        let csv = curve().csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 4 * 5 + 1, "{csv}");
        assert!(lines.iter().all(|l| l.split(',').count() == 6), "{csv}");
        assert_eq!(lines[1], "10,fjord,2.0000,0.00000,3.400,");
        assert!(lines.contains(&"500,all,,,,too many open files"), "{csv}");
        assert!(
            lines.contains(&"1000,live555MediaServer,10.0000,5.00000,,loss 5.00 % > 1 %"),
            "{csv}"
        );
        assert!(
            lines.contains(&"10,live555MediaServer,,,,no run counted: 3 of 10 sessions played"),
            "{csv}"
        );
        assert!(
            lines.contains(&"20,kernel floor B=4,1.5000,0.00000,,"),
            "{csv}"
        );
    }

    #[test]
    fn markdown_has_the_curve_the_ratios_and_the_gaps() {
        let md = curve().markdown("fjord bench peers --loads 10,100", "m");
        assert!(
            md.contains(
                "| series | 10 sessions | 20 sessions | 100 sessions | 500 sessions | 1000 sessions |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| fjord | 2.00 | 2.00 | 2.00 | – | 2.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| live555MediaServer | – | 10.00 | 10.00 | – | – |"),
            "{md}"
        );
        assert!(
            md.contains("| GStreamer rtsp-server | – | – | – | – | – |"),
            "{md}"
        );
        // The floor at 3.4 between B=1 (4.0) and B=4 (1.5), log-linear.
        let floor = 4.0 - 2.5 * 3.4f64.ln() / 4f64.ln();
        let row = format!(
            "| 20 | 2.00 | 3.40 | {floor:.2} | {:.2}× | B=4 | {:.2}× |",
            2.0 / floor,
            2.0 / 1.5
        );
        assert!(md.contains(&row), "{row}\n{md}");
        assert!(md.contains("| 500 |  | – | – | – | – | – |"), "{md}");
        assert!(
            md.contains(
                "- GStreamer rtsp-server, gap at 10, 20, 100, 1000 sessions: GStreamer \
                 rtsp-server: skipped, not installed"
            ),
            "{md}"
        );
        assert!(
            md.contains("- every series, gap at 500 sessions: too many open files"),
            "{md}"
        );
        assert!(
            md.contains("- live555MediaServer, gap at 1000 sessions: loss 5.00 % > 1 %"),
            "{md}"
        );
    }

    #[test]
    fn svg_has_a_line_per_series_and_the_ratio() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.svg");
        let c = curve();
        c.svg(&p).unwrap();
        let s = std::fs::read_to_string(&p).unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..100.min(s.len())]);
        let texts: Vec<&str> = s.lines().map(str::trim).collect();
        for t in [
            "fjord",
            "live555MediaServer",
            "kernel floor B=1",
            "kernel floor B=4",
            "sessions (log scale)",
        ] {
            assert!(texts.contains(&t), "text {t:?} missing: {s}");
        }
        // Not installed: no line, no legend entry.
        assert!(!texts.contains(&"GStreamer rtsp-server"), "{s}");
        // Each drawn series: a polyline per segment and one in the legend.
        let drawn = [
            "fjord",
            "live555MediaServer",
            "kernel floor B=1",
            "kernel floor B=4",
        ];
        for (i, name) in drawn.iter().enumerate() {
            let (r, g, b) = Palette99::pick(i).rgb();
            let stroke = format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"");
            let n = s
                .lines()
                .filter(|l| l.contains("<polyline") && l.contains(&stroke))
                .count();
            assert_eq!(n, c.segments(name).len() + 1, "{name}: {s}");
        }
        // fjord's ratio to the floor at 3.4 packets/send, at its 4 points.
        let x = 2.0 / (4.0 - 2.5 * 3.4f64.ln() / 4f64.ln());
        let label = format!("{x:.1}× floor");
        assert_eq!(c.ratio_labels().len(), 4);
        assert_eq!(
            texts.iter().filter(|t| **t == label).count(),
            4,
            "{label}: {s}"
        );
    }
}

//! `fjord bench broadcast`: the periodic broadcasting schemes of
//! [`fjord_broadcast`] on one title, simulated (no network): for each
//! scheme the closed form's bandwidth and worst wait beside what its plan,
//! cut at the title's sync points, measures over many client arrivals.
//!
//! The title is synthetic (constant bit rate, 1316-byte packets, a sync
//! point every `gop_s`) unless a media file is given: then its index (made
//! by ingest if missing, beside the file) gives every track's packets,
//! merged by send time, and the video tracks' sync points. Each scheme is
//! also planned on the same packets with any packet allowed to start a
//! segment (the schemes' ideal cuts), and for key frames every 0.5, 1 and
//! 2 s; and over a range of start-up waits for the plot.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use fjord_broadcast::{
    CHANNEL_LIMIT, Config, Expected, Packet, Plan, Reception, Scheme, SimStats, Title, formula,
    measure_bandwidth, simulate,
};
use plotters::prelude::*;

use crate::{chart, stats::SplitMix64};

/// Bytes of a synthetic packet: seven TS packets.
pub const PACKET_BYTES: u32 = 1316;
/// Start-up waits of the plot, seconds.
const SWEEP_S: [f64; 12] = [
    1.0, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];
/// Key-frame spacings of the sensitivity table, seconds.
const GOPS_S: [f64; 3] = [0.5, 1.0, 2.0];
/// Adversarial arrivals: 1 ns after this many instances of segment 1 on
/// every channel that carries it (the longest waits there are).
const WORST_ARRIVALS: u64 = 20;
/// One colour per scheme, dark enough on white.
const COLORS: [RGBColor; 5] = [
    RGBColor(200, 30, 45),
    RGBColor(40, 140, 60),
    RGBColor(120, 60, 170),
    RGBColor(0, 110, 190),
    RGBColor(230, 120, 20),
];
/// Random arrivals are uniform over this many periods of the longest channel.
const SPAN_PERIODS: u64 = 4;

/// What to run.
#[derive(Clone, Debug)]
pub struct BroadcastConfig {
    pub title_seconds: u64,
    pub mbps: f64,
    pub max_start_s: f64,
    pub gop_s: f64,
    pub arrivals: usize,
    pub seed: u64,
    /// A media file instead of the synthetic title.
    pub title: Option<PathBuf>,
    pub out: PathBuf,
}

/// One scheme on one title.
#[derive(Clone, Debug)]
pub struct Row {
    pub scheme: &'static str,
    pub channels: usize,
    pub formula: Expected,
    /// The plan's bound on the wait, and the start delay in it.
    pub bound_ns: u64,
    /// The sum of the channels' sending rates (bytes/s).
    pub peak_bytes_per_s: f64,
    pub delay_ns: u64,
    pub sim: SimStats,
}

impl Row {
    pub fn bandwidth_deviation(&self) -> f64 {
        self.sim.bandwidth_bytes_per_s / self.formula.bandwidth_bytes_per_s - 1.0
    }

    pub fn wait_deviation(&self) -> f64 {
        self.sim.worst_wait_ns as f64 / self.formula.worst_wait_ns - 1.0
    }
}

/// Deviation from the closed form of a plan alone (no arrivals).
#[derive(Clone, Debug)]
pub struct Sensitivity {
    pub gop: String,
    /// Per scheme: bandwidth and worst-wait deviation, or why no plan.
    pub cells: Vec<Result<(f64, f64), String>>,
}

/// Bandwidth over the start-up wait, Mbit/s, per scheme.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub scheme: &'static str,
    /// (wait s, formula, plan); schemes over the channel cap are left out.
    pub points: Vec<(f64, f64, f64)>,
}

/// What a run produced.
#[derive(Debug)]
pub struct Report {
    pub command: String,
    pub title: String,
    pub duration_ns: u64,
    pub bytes_per_s: f64,
    pub packets: usize,
    pub sync_points: usize,
    pub max_start_s: f64,
    pub synced: Vec<Row>,
    pub any_cut: Vec<Row>,
    pub sensitivity: Vec<Sensitivity>,
    pub sweep: Vec<Sweep>,
}

/// Runs the simulation, writes `broadcast.md` and `broadcast.svg` to the
/// output directory and returns the report.
pub fn run(cfg: &BroadcastConfig, command: &str) -> anyhow::Result<Report> {
    check(cfg)?;
    let (title, name) = match &cfg.title {
        Some(path) => (file_title(path)?, path.display().to_string()),
        None => (synthetic(cfg, cfg.gop_s)?, synthetic_name(cfg)),
    };
    let wait_ns = (cfg.max_start_s * 1e9) as u64;
    let any = Title::without_sync(title.packets().to_vec(), title.duration_ns())?;
    let report = Report {
        command: command.to_string(),
        title: name,
        duration_ns: title.duration_ns(),
        bytes_per_s: title.bytes_per_s(),
        packets: title.packets().len(),
        sync_points: title.sync_points().len(),
        max_start_s: cfg.max_start_s,
        synced: rows(&title, wait_ns, cfg)?,
        any_cut: rows(&any, wait_ns, cfg)?,
        sensitivity: sensitivity(cfg, &title, &any, wait_ns)?,
        sweep: sweep(&title),
    };
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    std::fs::write(cfg.out.join("broadcast.md"), report.markdown())?;
    report
        .svg(&cfg.out.join("broadcast.svg"))
        .map_err(|e| anyhow::anyhow!("writing broadcast.svg: {e}"))?;
    Ok(report)
}

fn check(cfg: &BroadcastConfig) -> anyhow::Result<()> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    ensure!(cfg.title_seconds > 0, "--title-seconds must be at least 1");
    ensure!(positive(cfg.mbps), "--mbps must be above 0");
    ensure!(positive(cfg.gop_s), "--gop must be above 0");
    ensure!(positive(cfg.max_start_s), "--max-start must be above 0");
    ensure!(cfg.arrivals > 0, "--arrivals must be at least 1");
    Ok(())
}

fn synthetic_name(cfg: &BroadcastConfig) -> String {
    format!(
        "synthetic: {} s at {} Mbit/s, {PACKET_BYTES}-byte packets, a key frame every {} s",
        cfg.title_seconds, cfg.mbps, cfg.gop_s
    )
}

/// Constant bit rate packets with a sync point at the first packet of
/// every `gop_s`.
pub fn synthetic(cfg: &BroadcastConfig, gop_s: f64) -> anyhow::Result<Title> {
    let per_ns = f64::from(PACKET_BYTES) * 8.0 / (cfg.mbps * 1e6) * 1e9;
    let duration_ns = cfg.title_seconds.saturating_mul(1_000_000_000);
    let n = (duration_ns as f64 / per_ns).floor() as u64;
    ensure!(
        n >= 1 && n < u64::from(u32::MAX),
        "the title would have {n} packets"
    );
    let gop_ns = (gop_s * 1e9).max(1.0) as u64;
    let packets: Vec<Packet> = (0..n)
        .map(|i| Packet {
            pts_ns: (i as f64 * per_ns) as u64,
            bytes: PACKET_BYTES,
        })
        .collect();
    let sync = (0..n as usize)
        .filter(|&i| i == 0 || packets[i].pts_ns / gop_ns != packets[i - 1].pts_ns / gop_ns)
        .map(|i| i as u32)
        .collect();
    Ok(Title::new(packets, sync, duration_ns)?)
}

/// A media file's packets (every track, merged by send time) and the sync
/// points of its video tracks (of every track if it has no video).
pub fn file_title(path: &Path) -> anyhow::Result<Title> {
    let (index, _) = fjord_media::open_or_ingest(
        path,
        &fjord_media::TsOptions::default(),
        &fjord_media::plan::no_parity,
        &mut |_, _| {},
    )
    .with_context(|| {
        format!(
            "indexing {} (its directory must be writable)",
            path.display()
        )
    })?;
    let has_video = index
        .tracks()
        .any(|t| t.kind() == fjord_media::TrackKind::Video);
    // (send time, track, packet in track, bytes, is a sync point)
    let mut all: Vec<(u64, usize, u32, u32, bool)> = Vec::new();
    for (ti, track) in index.tracks().enumerate() {
        let use_sync = !has_video || track.kind() == fjord_media::TrackKind::Video;
        let sync: std::collections::BTreeSet<u32> = track.sync_points().map(|s| s.packet).collect();
        for i in 0..track.packet_count() {
            let Some(p) = track.packet(i) else { continue };
            let bytes = p.payload_len() as u32;
            let is_sync = use_sync && sync.contains(&(i as u32));
            all.push((p.send_time_ns, ti, i as u32, bytes.max(1), is_sync));
        }
    }
    all.sort_unstable_by_key(|x| (x.0, x.1, x.2));
    let Some(last) = all.last() else {
        bail!("{} has no packets", path.display())
    };
    let duration_ns = index.duration_ns().max(last.0 + 1);
    let packets = all
        .iter()
        .map(|x| Packet {
            pts_ns: x.0,
            bytes: x.3,
        })
        .collect();
    let sync = (0..all.len())
        .filter(|&i| all[i].4)
        .map(|i| i as u32)
        .collect();
    Ok(Title::new(packets, sync, duration_ns)?)
}

/// Every scheme on `title`, simulated over the configured arrivals.
fn rows(title: &Title, wait_ns: u64, cfg: &BroadcastConfig) -> anyhow::Result<Vec<Row>> {
    let plans = Scheme::ALL
        .iter()
        .map(|&s| Plan::new(title.clone(), Config::new(s, wait_ns)))
        .collect::<Result<Vec<_>, _>>()
        .context("planning (allow a longer --max-start or shorter --gop)")?;
    // One thread per scheme: the simulations are independent.
    std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .map(|p| scope.spawn(move || row(p, cfg)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a simulation panicked"))?
            })
            .collect()
    })
}

/// The means come from the random arrivals; the worst wait, buffer and
/// underruns from those and the adversarial ones together.
fn row(plan: &Plan, cfg: &BroadcastConfig) -> anyhow::Result<Row> {
    let t = plan.title();
    let formula = formula(plan.config(), t.duration_ns(), t.bytes_per_s())?;
    let mut sim = simulate(plan, random_arrivals(plan, cfg.arrivals, cfg.seed));
    let worst = simulate(plan, worst_arrivals(plan));
    sim.clients += worst.clients;
    sim.underruns += worst.underruns;
    sim.clients_late += worst.clients_late;
    sim.worst_wait_ns = sim.worst_wait_ns.max(worst.worst_wait_ns);
    sim.worst_buffer_bytes = sim.worst_buffer_bytes.max(worst.worst_buffer_bytes);
    sim.worst_channels_at_once = sim.worst_channels_at_once.max(worst.worst_channels_at_once);
    Ok(Row {
        scheme: plan.config().scheme.name(),
        channels: plan.channels().len(),
        formula,
        bound_ns: plan.worst_wait_ns(),
        peak_bytes_per_s: plan.peak_bandwidth_bytes_per_s(),
        delay_ns: plan.start_delay_ns(),
        sim,
    })
}

/// `count` arrivals uniform over a few periods of the longest channel
/// (seeded).
pub fn random_arrivals(plan: &Plan, count: usize, seed: u64) -> Vec<u64> {
    let longest = plan
        .channels()
        .iter()
        .map(|c| c.period_ns)
        .max()
        .unwrap_or(1);
    let span = longest.saturating_mul(SPAN_PERIODS);
    let mut rng = SplitMix64(seed);
    (0..count)
        .map(|_| ((u128::from(rng.next_u64()) * u128::from(span)) >> 64) as u64)
        .collect()
}

/// The adversarial arrivals: 1 ns after instances of segment 1, the
/// longest waits there are (none when the start does not wait for one).
pub fn worst_arrivals(plan: &Plan) -> Vec<u64> {
    let mut out = Vec::new();
    for ch in plan
        .channels()
        .iter()
        .filter(|c| c.reception == Reception::InOrder)
    {
        for slot in ch.slots.iter().filter(|s| s.segment == 0) {
            let origin = ch.phase_ns + slot.offset_ns;
            out.extend((0..WORST_ARRIVALS).map(|m| origin + m * ch.period_ns + 1));
        }
    }
    out
}

/// Plan-only deviations for other key-frame spacings and without sync
/// constraints (exact plan bandwidth; the wait bound).
fn sensitivity(
    cfg: &BroadcastConfig,
    title: &Title,
    any: &Title,
    wait_ns: u64,
) -> anyhow::Result<Vec<Sensitivity>> {
    let mut out = Vec::new();
    if cfg.title.is_none() {
        for gop in GOPS_S {
            let t = synthetic(cfg, gop)?;
            out.push(deviations(format!("key frame every {gop} s"), &t, wait_ns));
        }
    } else {
        out.push(deviations("the file's key frames".into(), title, wait_ns));
    }
    out.push(deviations(
        "any packet (no sync constraint)".into(),
        any,
        wait_ns,
    ));
    Ok(out)
}

fn deviations(gop: String, title: &Title, wait_ns: u64) -> Sensitivity {
    let cells = Scheme::ALL
        .iter()
        .map(|&s| {
            let config = Config::new(s, wait_ns);
            let plan = Plan::new(title.clone(), config).map_err(|e| e.to_string())?;
            let f = formula(&config, title.duration_ns(), title.bytes_per_s())
                .map_err(|e| e.to_string())?;
            Ok((
                plan.bandwidth_bytes_per_s() / f.bandwidth_bytes_per_s - 1.0,
                plan.worst_wait_ns() as f64 / f.worst_wait_ns - 1.0,
            ))
        })
        .collect();
    Sensitivity { gop, cells }
}

/// Formula and measured bandwidth over the start-up waits of the plot,
/// with the cap raised so staggered shows its cost too.
fn sweep(title: &Title) -> Vec<Sweep> {
    Scheme::ALL
        .iter()
        .map(|&scheme| {
            let points = SWEEP_S
                .iter()
                .filter_map(|&w| {
                    let mut config = Config::new(scheme, (w * 1e9) as u64);
                    config.max_channels = CHANNEL_LIMIT;
                    let f = formula(&config, title.duration_ns(), title.bytes_per_s()).ok()?;
                    let plan = Plan::new(title.clone(), config).ok()?;
                    Some((
                        w,
                        mbit(f.bandwidth_bytes_per_s),
                        mbit(measure_bandwidth(&plan).0),
                    ))
                })
                .collect();
            Sweep {
                scheme: scheme.name(),
                points,
            }
        })
        .collect()
}

fn mbit(bytes_per_s: f64) -> f64 {
    bytes_per_s * 8.0 / 1e6
}

fn secs(ns: f64) -> f64 {
    ns / 1e9
}

fn mb(bytes: f64) -> f64 {
    bytes / 1e6
}

impl Report {
    /// The result note: the command, the title, the tables.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Periodic broadcasting, simulated\n");
        let _ = writeln!(m, "`{}`\n", self.command);
        let _ = writeln!(
            m,
            "Title: {}; {:.1} s, {:.3} Mbit/s of payload, {} packets, {} sync points. \
             Maximum start-up wait w = {} s.\n",
            self.title,
            secs(self.duration_ns as f64),
            mbit(self.bytes_per_s),
            self.packets,
            self.sync_points,
            self.max_start_s
        );
        let _ = writeln!(m, "## Cut at the title's sync points\n");
        m.push_str(&table(&self.synced));
        m.push_str(&self.instance_line());
        let _ = writeln!(m, "\n## Cut anywhere (any packet may start a segment)\n");
        m.push_str(&table(&self.any_cut));
        m.push_str(&self.sensitivity_table());
        m.push_str(NOTES);
        m
    }

    /// The seed's figure: cautious harmonic, 180 s, 3.5 Mbit/s, w = 5 s.
    fn instance_line(&self) -> String {
        let Some(r) = self.synced.iter().find(|r| r.scheme == "cautious harmonic") else {
            return String::new();
        };
        format!(
            "\nINSTANCE (seed 001) gives 16.26 Mbit/s for cautious harmonic broadcasting of a \
             180 s title at 3.5 Mbit/s with a 5 s wait (n = 36). Here: formula {:.2} Mbit/s, \
             measured {:.2} Mbit/s ({:+.2} %) on {} channels.\n",
            mbit(r.formula.bandwidth_bytes_per_s),
            mbit(r.sim.bandwidth_bytes_per_s),
            r.bandwidth_deviation() * 100.0,
            r.channels
        )
    }

    fn sensitivity_table(&self) -> String {
        let mut m = String::from(
            "\n## Deviation from the closed form by key-frame spacing (plans only)\n\n\
             Bandwidth / worst wait of the plan against the formula, %.\n\n| sync points |",
        );
        for s in Scheme::ALL {
            let _ = write!(m, " {} |", s.name());
        }
        m.push_str("\n|---|");
        m.push_str(&"---:|".repeat(Scheme::ALL.len()));
        m.push('\n');
        for row in &self.sensitivity {
            let _ = write!(m, "| {} |", row.gop);
            for c in &row.cells {
                match c {
                    Ok((b, w)) => {
                        let _ = write!(m, " {:+.2} / {:+.2} |", b * 100.0, w * 100.0);
                    }
                    Err(e) => {
                        let _ = write!(m, " no plan: {e} |");
                    }
                }
            }
            m.push('\n');
        }
        m
    }

    /// Bandwidth over the start-up wait, log scale: formula lines, plan
    /// points.
    pub fn svg(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
        root.fill(&WHITE)?;
        let all = self.sweep.iter().flat_map(|s| s.points.iter());
        let ymax = all.clone().map(|p| p.1.max(p.2)).fold(1.0, f64::max) * 1.3;
        let ymin = all.map(|p| p.1.min(p.2)).fold(f64::MAX, f64::min).min(ymax) * 0.8;
        let xmax = SWEEP_S[SWEEP_S.len() - 1] * 1.05;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "server bandwidth of one title ({:.0} s)",
                    secs(self.duration_ns as f64)
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, (ymin.max(0.01)..ymax).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("maximum start-up wait w, s")
            .y_desc("Mbit/s (lines: formula; points: plan cut at sync points)")
            .draw()?;
        for (i, s) in self.sweep.iter().enumerate() {
            let color = COLORS[i % COLORS.len()].to_rgba();
            let line = s.points.iter().map(|p| (p.0, p.1));
            chart::line(&mut chart, line, color, Some(s.scheme))?;
            chart::dots(&mut chart, s.points.iter().map(|p| (p.0, p.2)), color)?;
        }
        chart::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present()?;
        Ok(())
    }
}

fn table(rows: &[Row]) -> String {
    let mut m = String::from(
        "| scheme | channels | formula Mbit/s | measured Mbit/s | Δ | sending Mbit/s | \
         formula worst wait s | worst wait s | Δ | mean wait s | start delay ms | \
         worst buffer MB | mean buffer MB | channels at once | clients | underruns |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            m,
            "| {} | {} | {:.2} | {:.2} | {:+.2} % | {:.2} | {:.3} | {:.3} | {:+.2} % | {:.3} | {:.3} | {:.2} | {:.2} | {} | {} | {} |",
            r.scheme,
            r.channels,
            mbit(r.formula.bandwidth_bytes_per_s),
            mbit(r.sim.bandwidth_bytes_per_s),
            r.bandwidth_deviation() * 100.0,
            mbit(r.peak_bytes_per_s),
            secs(r.formula.worst_wait_ns),
            secs(r.sim.worst_wait_ns as f64),
            r.wait_deviation() * 100.0,
            secs(r.sim.mean_wait_ns),
            r.delay_ns as f64 / 1e6,
            mb(r.sim.worst_buffer_bytes as f64),
            mb(r.sim.mean_buffer_bytes),
            r.sim.worst_channels_at_once,
            r.sim.clients,
            r.sim.underruns,
        );
    }
    m
}

const NOTES: &str = "\n## How it was measured\n\n\
- Formula: the papers' closed forms for the title's duration D and payload rate b \
(`fjord_broadcast::formula`). Pyramid uses α = e and the least K whose wait is at most w.\n\
- Measured bandwidth: the bytes every channel's emission cursor sends over 100 periods of the \
longest channel (plus a third), in steady state, per second. Sending: the sum of the \
channels' sending rates, what the title costs while every channel sends at once; an in-order \
channel sends its segment at least at the segment's own mean rate, faster where the title runs \
ahead of it (variable bit rate), and idles for the rest of its slot.\n\
- Clients: uniform random arrivals over four periods of the longest channel (seeded; the \
means are theirs), plus the adversarial ones, 1 ns after each of the first 20 instances of \
segment 1 on every channel that carries it, so the worst wait is the plan's true worst \
(`clients` counts both). Each client follows \
`Plan::join`: it hears each channel only inside its window; every packet's arrival (its first \
sending there) is checked against its play time (start + presentation time); an underrun is a \
packet late or missing. Buffer: payload bytes received and not yet played, at the peak.\n\
- Δ: measured against formula. Cuts move to a sync point next to them (the first to the \
neighbour with the smaller sum of relative bandwidth and wait, the others to the one costing \
less bandwidth) and rates follow the segments' actual bytes, so the difference is what moving \
the cuts adds or saves; harmonic's plan can come out below its formula. It grows as segments \
shorten against the key-frame spacing.\n\
- A media file's packets are due at their send times (the mux's schedule, earlier than their \
decode times), so a file whose mux runs ahead of its mean rate (an MPEG-TS mux sends the first \
frames in a burst) shows that lead as start delay.\n\
- Harmonic is the delayed variant: the client plays one slot d after it arrives, so every \
client waits d (its start delay is d). Start delay: what a client adds to the next instance of \
segment 1 so every packet is in time (the title's own lead over a constant rate). Channels at \
once: the most channels one client hears at the same time.\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BroadcastConfig {
        BroadcastConfig {
            title_seconds: 60,
            mbps: 2.0,
            max_start_s: 4.0,
            gop_s: 1.0,
            arrivals: 20,
            seed: 7,
            title: None,
            out: PathBuf::from("unused"),
        }
    }

    #[test]
    fn synthetic_title_is_cbr_with_key_frames_every_gop() {
        let t = synthetic(&cfg(), 1.0).unwrap();
        assert!((t.bytes_per_s() * 8.0 / 2e6 - 1.0).abs() < 0.001);
        assert_eq!(t.sync_points().len(), 60);
    }

    #[test]
    fn every_scheme_plays_without_underrun_and_the_note_says_so() {
        let c = cfg();
        let title = synthetic(&c, 1.0).unwrap();
        let rows = rows(&title, 4_000_000_000, &c).unwrap();
        assert_eq!(rows.len(), 5);
        assert!(
            rows.iter()
                .all(|r| r.sim.underruns == 0 && r.sim.clients >= 20)
        );
        let md = table(&rows);
        assert!(md.contains("| cautious harmonic | 14 |"), "{md}");
    }
}

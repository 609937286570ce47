//! `fjord bench soak`: session churn against one `fjord serve` for a long
//! while; does anything grow, does anything go late?
//!
//! In ([`SoakConfig`]): how many concurrent viewers, for how many minutes,
//! the share of them over TCP interleaved, the title's length, a seed and
//! an output directory. Made here: a low-rate title with ffmpeg (720p25
//! H.264 at 400 kbit/s + AAC, MPEG-TS muxed at 600 kbit/s) and the same
//! remuxed to MP4, both ingested, and a `fjord serve` child on loopback
//! ([`server`]) with limits far above the load. Every viewer ([`client`])
//! lives seeded lives ([`plan`]) one after another: set up, play, seek,
//! pause, trick play, then TEARDOWN, a close without it, or play to the
//! end. Every 10 s a [`report::Sample`]: the server's RSS, fds, threads and
//! CPU, the machine's slab, the server's `/metrics`, the viewers' counts.
//!
//! Out, in the output directory: `soak.csv` (a row per sample, appended as
//! it is taken), `soak.md` and `soak.svg` (rewritten every minute, so a
//! killed run keeps its data; final at the end, with the verdict), and
//! `server.log`, everything the server logged. At the
//! end the viewers stop, the server's sessions must drain, and the server
//! must exit 0 on SIGTERM.
//!
//! A sample also holds, since the previous one, what the kernel says of
//! each engine thread of the server (`fjord-engine-N`, [`sched`]): CPU,
//! run-queue wait and timeslices (`schedstat`), voluntary and
//! nonvoluntary switches (`status`), major faults and block I/O delay
//! (`stat`; kernel.task_delayacct is set to 1 for the run when it can
//! be); its late packets, their causes and its worst lateness
//! (`/metrics`); the machine's
//! steal and irq + softirq (`/proc/stat`); and the RSS in its parts,
//! RssAnon (the heap), RssFile (mapped titles) and RssShmem. From those
//! each late packet is the server's (its engine thread was busy past its
//! deadline, or its session held it: not read yet, a full socket, a disk
//! wait) or the machine's (the thread woke late), by the causes the
//! engine counts; and RSS growth is judged on the heap apart from the
//! file pages.

pub mod client;
pub mod plan;
pub mod report;
pub mod sched;
pub mod server;
pub mod veth;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};

use client::Ctx;
use report::{Sample, SoakReport};
use server::Server;

/// What to run.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    pub sessions: usize,
    pub minutes: f64,
    /// Share of lives over TCP interleaved (the rest over UDP).
    pub tcp_share: f64,
    pub title_seconds: u64,
    pub seed: u64,
    pub out: PathBuf,
    /// The `fjord` binary (serve, ingest).
    pub fjord_exe: PathBuf,
    pub progress: bool,
    /// The server's engine threads under SCHED_FIFO (`realtime = true`):
    /// the viewers on the same cores then cannot delay its packets.
    pub realtime: bool,
    /// The viewers in a namespace of their own across a veth pair
    /// ([`veth`]) instead of on loopback.
    pub veth: bool,
}

pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// The viewers' first sessions start spread over this.
const START_SPREAD: Duration = Duration::from_secs(10);
/// The video rate and TS mux rate of the title, kbit/s and bit/s.
const VIDEO_KBPS: u64 = 400;
const MUX_BPS: u64 = 600_000;

/// Set on Ctrl-C (or SIGTERM): the run ends early and still reports.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Runs the soak and writes its files; the report is returned too.
pub fn run(cfg: &SoakConfig, command: &str) -> anyhow::Result<SoakReport> {
    check(cfg)?;
    // Several sockets per viewer, and the server inherits the limit.
    crate::capacity::raise_fd_limit();
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Relaxed));
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let scratch = tempfile::Builder::new().prefix("fjord-soak").tempdir()?;
    let (media, titles) = make_titles(scratch.path(), cfg)?;
    let config = scratch.path().join("serve.toml");
    std::fs::write(&config, serve_config(&media, cfg.realtime))?;
    // Before the server starts, so its threads count block I/O delay;
    // put back when dropped, at the end of the run.
    let delayacct = sched::DelayAcct::enable();
    let net = cfg.veth.then(veth::ViewerNet::create).transpose()?;
    let bind = net.as_ref().map_or("127.0.0.1", |_| veth::SERVER_IP);
    let server = Server::start(&cfg.fjord_exe, &config, bind, &cfg.out.join("server.log"))?;
    let (urls, title_s) = describe(&server, &titles)?;
    let shape = plan::Shape {
        titles: titles.len(),
        title_s,
        tcp_share: cfg.tcp_share,
    };
    let ctx = Arc::new(Ctx::new(urls, shape, cfg.seed, net));
    let mut report = SoakReport {
        command: command.to_string(),
        machine: crate::peers::machine(),
        sessions: cfg.sessions,
        minutes: cfg.minutes,
        tcp_share: cfg.tcp_share,
        seed: cfg.seed,
        titles: titles.into_iter().map(|t| t.1).collect(),
        warmup_s: (cfg.minutes * 60.0 / 4.0).min(120.0),
        library_kib: dir_kib(&media),
        binary_kib: file_kb(&cfg.fjord_exe) * 1000 / 1024,
        delayacct: delayacct.note.clone(),
        ..SoakReport::default()
    };
    let driven = drive(cfg, &server, &ctx, &mut report);
    finish(server, &ctx, &mut report, &cfg.out, driven)?;
    Ok(report)
}

fn check(cfg: &SoakConfig) -> anyhow::Result<()> {
    ensure!(cfg.sessions > 0, "--sessions must be at least 1");
    ensure!(cfg.minutes > 0.0, "--minutes must be positive");
    ensure!(
        (0.0..=1.0).contains(&cfg.tcp_share),
        "--tcp-share is a share, 0 to 1"
    );
    ensure!(
        cfg.title_seconds >= 20,
        "--title-seconds must be at least 20"
    );
    Ok(())
}

/// Samples the server before and while the viewers play, then stops
/// them and waits for the server's sessions to drain.
fn drive(
    cfg: &SoakConfig,
    server: &Server,
    ctx: &Arc<Ctx>,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    let mut sampler = Sampler {
        server,
        ctx,
        t0: Instant::now(),
        ids: BTreeSet::new(),
        watch: sched::Watch::new(server.pid()),
    };
    let baseline = sampler.take()?;
    // The engine's threads are made at its start: fixed for the run.
    report.engine_threads = baseline.engine.iter().map(|t| t.index).collect();
    let mut csv = std::fs::File::create(cfg.out.join("soak.csv"))?;
    csv.write_all(report::csv_header(&report.engine_threads).as_bytes())?;
    record(report, &mut csv, baseline)?;
    let viewers = start_viewers(ctx, cfg.sessions)?;
    let watched = watch(cfg, &mut sampler, report, &mut csv);
    stop_viewers(ctx, viewers);
    watched?;
    report.after = Some(sampler.drained()?);
    Ok(())
}

/// Ends the run: what the viewers and the server's log said, why it
/// stopped early if it did, SIGTERM to the server, the final files.
fn finish(
    server: Server,
    ctx: &Ctx,
    report: &mut SoakReport,
    out: &Path,
    driven: anyhow::Result<()>,
) -> anyhow::Result<()> {
    ctx.stop.store(true, Relaxed);
    report.errors = ctx.errors.lock().map(|e| e.clone()).unwrap_or_default();
    report.viewers = ctx.counts.tally();
    report.warnings = server.warnings();
    if let Err(e) = &driven {
        report.aborted = Some(format!("{e:#}"));
    } else if INTERRUPTED.load(Relaxed) {
        report.aborted = Some("interrupted (Ctrl-C or a signal)".into());
    }
    let (code, took) = server.stop(Duration::from_secs(10));
    report.exit = Some((code, took.as_secs_f64()));
    write(report, out, false)?;
    driven
}

/// The title and its MP4 remux in `dir/media`, ingested; with a line
/// about each for the report.
fn make_titles(dir: &Path, cfg: &SoakConfig) -> anyhow::Result<(PathBuf, Vec<(PathBuf, String)>)> {
    let media = dir.join("media");
    std::fs::create_dir_all(&media)?;
    let ts = media.join("soak.ts");
    let mp4 = media.join("soak.mp4");
    let bar = spinner(
        cfg.progress,
        "making the titles with ffmpeg and fjord ingest",
    );
    crate::clip::encode(&ts, cfg.title_seconds, VIDEO_KBPS, MUX_BPS)?;
    remux_mp4(&ts, &mp4)?;
    for t in [&ts, &mp4] {
        crate::storage::library::ingest(&cfg.fjord_exe, t)?;
    }
    bar.finish_and_clear();
    let s = cfg.title_seconds;
    let about = [
        format!(
            "soak.ts ({s} s, 720p25 H.264 {VIDEO_KBPS} kbit/s + AAC, MPEG-TS at {} kbit/s)",
            MUX_BPS / 1000
        ),
        format!(
            "soak.mp4 (the same remuxed to MP4, H.264 and AAC tracks, {} kB)",
            file_kb(&mp4)
        ),
    ];
    Ok((media, [ts, mp4].into_iter().zip(about).collect()))
}

fn file_kb(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len() / 1000)
}

/// The files directly in `dir`, KiB: the titles and what ingest made.
fn dir_kib(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let bytes: u64 = entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    bytes / 1024
}

fn remux_mp4(ts: &Path, mp4: &Path) -> anyhow::Result<()> {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(ts)
        .args(["-c", "copy", "-f", "mp4"])
        .arg(mp4)
        .stdin(Stdio::null())
        .output()
        .context("running ffmpeg")?;
    if !out.status.success() {
        bail!(
            "ffmpeg remux to MP4 failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Limits far above the load, so nothing is refused; the session timeout
/// is the default's.
fn serve_config(media: &Path, realtime: bool) -> String {
    format!(
        "root = {media:?}\nmax_sessions = 100000\nmax_connections = 100000\n\
         max_connections_per_address = 0\nmax_sessions_per_address = 0\nsession_timeout_s = 60\n\
         capacity_pps_per_core = 1000000000000\nrealtime = {realtime}\n"
    )
}

/// Every title's URL, and the shortest duration its SDP announces.
fn describe(server: &Server, titles: &[(PathBuf, String)]) -> anyhow::Result<(Vec<String>, f64)> {
    let mut urls = Vec::new();
    let mut shortest = f64::INFINITY;
    for (path, _) in titles {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let url = format!("rtsp://{}/{name}", server.rtsp);
        let mut c = fjord_client::RtspClient::connect(&url)?;
        let d = c.describe().with_context(|| format!("DESCRIBE {url}"))?;
        shortest = shortest.min(d.duration.context("SDP without a=range")?);
        urls.push(url);
    }
    Ok((urls, shortest))
}

fn start_viewers(ctx: &Arc<Ctx>, n: usize) -> anyhow::Result<Vec<JoinHandle<()>>> {
    (0..n)
        .map(|i| {
            let delay = START_SPREAD.mul_f64(i as f64 / n as f64);
            client::spawn(ctx.clone(), i, delay).context("starting a viewer thread")
        })
        .collect()
}

/// Stops the viewers (each ends its session with TEARDOWN) and waits for
/// them, at most 30 s: a reply comes within the client's 10 s timeout.
fn stop_viewers(ctx: &Ctx, viewers: Vec<JoinHandle<()>>) {
    ctx.stop.store(true, Relaxed);
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until && !viewers.iter().all(|v| v.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for v in viewers.into_iter().filter(|v| v.is_finished()) {
        let _ = v.join();
    }
}

/// Samples every [`SAMPLE_EVERY`] until the time is up (or Ctrl-C).
fn watch(
    cfg: &SoakConfig,
    sampler: &mut Sampler,
    report: &mut SoakReport,
    csv: &mut std::fs::File,
) -> anyhow::Result<()> {
    let t0 = sampler.t0;
    let total = Duration::from_secs_f64(cfg.minutes * 60.0);
    let bar = progress(cfg.progress, total);
    let mut next = SAMPLE_EVERY.min(total);
    while !INTERRUPTED.load(Relaxed) {
        while t0.elapsed() < next && !INTERRUPTED.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let s = sampler.take()?;
        bar.set_position(s.t_s as u64);
        bar.set_message(status(&s));
        record(report, csv, s)?;
        if report.samples.len() % 6 == 1 {
            write(report, &cfg.out, true)?;
        }
        if next >= total {
            break;
        }
        next = (next + SAMPLE_EVERY).min(total);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Keeps a sample: in the report and, at once, in `soak.csv`.
fn record(report: &mut SoakReport, csv: &mut std::fs::File, s: Sample) -> anyhow::Result<()> {
    csv.write_all(s.csv_row(&report.engine_threads).as_bytes())?;
    report.viewers = s.client;
    report.samples.push(s);
    Ok(())
}

fn status(s: &Sample) -> String {
    format!(
        "{} sessions, RSS {:.1} MiB, {} fds, {} late, {} lives, {} errors",
        s.sessions,
        s.proc.rss_kib as f64 / 1024.0,
        s.proc.fds,
        s.late,
        s.client.lives,
        s.client.errors
    )
}

/// Takes the samples: the server, the viewers, and the sessions the admin
/// API listed last time.
struct Sampler<'a> {
    server: &'a Server,
    ctx: &'a Ctx,
    /// When the viewers started.
    t0: Instant,
    ids: BTreeSet<String>,
    /// The engine threads and the machine at the previous sample.
    watch: sched::Watch,
}

impl Sampler<'_> {
    fn take(&mut self) -> anyhow::Result<Sample> {
        let m = self.server.metrics().context("the server's /metrics")?;
        let ids = self
            .server
            .session_ids()
            .context("the server's session list")?;
        let came = ids.difference(&self.ids).count() as u64;
        let went = self.ids.difference(&ids).count() as u64;
        self.ids = ids;
        let own = crate::procfs::process_cpu(std::process::id())?;
        let (engine, machine) = self.watch.take(&m);
        Ok(Sample {
            t_s: self.t0.elapsed().as_secs_f64(),
            proc: server::proc_figures(self.server.pid()),
            sessions: m.sum("fjord_sessions") as u64,
            connections: m.sum("fjord_connections") as u64,
            came,
            went,
            sent: m.sum("fjord_packets_sent_total") as u64,
            late: m.sum("fjord_late_packets_total") as u64,
            max_late_ms: m.max("fjord_engine_max_lateness_seconds") * 1e3,
            requests: m.sum("fjord_rtsp_requests_total") as u64,
            refused: m.sum_where("fjord_rtsp_requests_total", |l| !l.contains("status=\"2")) as u64,
            client: self.ctx.counts.tally(),
            client_cpu_s: own.as_secs_f64(),
            not_ready: m.sum("fjord_not_ready_packets_total") as u64,
            heap_allocated_kib: m.sum("fjord_heap_allocated_bytes") as u64 / 1024,
            heap_live_kib: m.sum("fjord_heap_live_bytes") as u64 / 1024,
            engine,
            machine,
        })
    }

    /// A sample once the server's sessions are gone, or after 10 s.
    fn drained(&mut self) -> anyhow::Result<Sample> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.take()?;
            if (s.sessions == 0 && s.connections == 0) || Instant::now() >= until {
                return Ok(s);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// `soak.md` and `soak.svg` into `dir`.
fn write(r: &SoakReport, dir: &Path, running: bool) -> anyhow::Result<()> {
    std::fs::write(dir.join("soak.md"), r.markdown(running))?;
    r.svg(&dir.join("soak.svg"))
        .map_err(|e| anyhow::anyhow!("drawing soak.svg: {e}"))
}

fn progress(show: bool, total: Duration) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total.as_secs()).with_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

fn spinner(show: bool, msg: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_message(msg.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

//! `fjord bench storage`: does the server keep every session on time when
//! the library does not fit in memory and the disk is slow?
//!
//! A library of titles (existing, or made and kept: [`library`]) is served
//! by `fjord serve` inside a memory cgroup that holds less than the library
//! (its page cache included) with reads from the library's disk throttled
//! in bytes and operations per second ([`cgroup`]), caches dropped first.
//! `fjord load` receivers (plain UDP sockets, no `UDP_GRO`, as players)
//! play sessions at random titles and positions for a while; optionally a
//! new title is copied in and ingested inside the same cgroup meanwhile.
//! Reported per run: packets, loss, lateness over 2 / 50 / 200 ms, the
//! longest stall, time to first packet, each engine thread's major faults
//! and time blocked on I/O (`/proc`, delay accounting), the disk's reads,
//! and the server's own storage figures from its stats file when it writes
//! one ([`procfs`]). `--baseline` adds the same scenario with everything
//! cached and nothing limited. Output: [`report`].

pub mod cgroup;
pub mod library;
pub mod pool;
pub mod procfs;
pub mod report;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fjord_client::load::{self, LoadConfig, LoadReport, TimelineSecond};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use cgroup::{Cgroup, Device, Limits};
use library::Library;
use procfs::{ServerStats, TaskStat};

/// Where the titles come from.
#[derive(Clone, Debug)]
pub enum LibrarySource {
    /// Existing titles under a directory.
    Dir(PathBuf),
    /// N titles of M MB each, made (once) under a cache directory.
    Made {
        titles: usize,
        mb: u64,
        cache: PathBuf,
    },
}

/// What to run.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    pub library: LibrarySource,
    /// Memory of the server's cgroup, MiB.
    pub cache_mb: u64,
    /// Read throttle on the library's disk, MB/s (10^6 bytes).
    pub disk_mbps: u64,
    pub disk_iops: u64,
    pub sessions: usize,
    /// Time between two sessions' starts: 5 ms starts them all at once
    /// (the harshest case for the disk), seconds spreads them as arrivals.
    pub stagger: Duration,
    pub seconds: f64,
    /// Copy a new title of this many MB in and ingest it during the run.
    pub ingest_mb: Option<u64>,
    /// Also run everything cached, nothing limited.
    pub baseline: bool,
    /// Seed of the sessions' titles and positions.
    pub seed: u64,
    /// Engine threads of the server (0: its default, one per core).
    pub threads: usize,
    /// The `fjord` binary (serve, ingest).
    pub fjord_exe: PathBuf,
    pub progress: bool,
    /// Disks of the storage pool (1: the library's own disk; more: loop
    /// devices, each throttled as one disk, [`pool`]).
    pub roots: usize,
    /// Zipf exponent of the titles' popularity (title 0 first); 0: uniform.
    pub zipf: f64,
}

/// What a run serves from: the media roots, and the disks under them.
struct Disks {
    roots: Vec<PathBuf>,
    devs: Vec<Device>,
}

impl Disks {
    fn names(&self) -> String {
        let names: Vec<String> = self
            .devs
            .iter()
            .map(|d| format!("{} ({})", d.name, d.id()))
            .collect();
        names.join(" + ")
    }

    /// Per disk: what the cgroup read from it, and `/sys/block/DEV/stat`.
    fn each(&self, cg: &Cgroup) -> Vec<(Counts, Counts)> {
        let each = |d| (cg.io_read_of(d), cgroup::disk_stat(d));
        self.devs.iter().map(each).collect()
    }
}

/// `/sys/block/DEV/stat` of every disk of [`Disks::each`], summed.
fn whole_stat(each: &[(Counts, Counts)]) -> Counts {
    each.iter().try_fold((0, 0), |(a, b), (_, st)| {
        let (x, y) = (*st)?;
        Some((a + x, b + y))
    })
}

/// One run's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// `constrained` or `baseline`.
    pub name: String,
    /// What was limited, for people.
    pub setting: String,
    pub memory_limit_bytes: Option<u64>,
    pub read_bps_limit: Option<u64>,
    pub read_iops_limit: Option<u64>,
    pub sessions_requested: usize,
    pub sessions_playing: usize,
    pub setup_failures: usize,
    pub sessions_dropped: usize,
    /// The receive time asked for, and from the first connect to the end.
    pub seconds: f64,
    pub wall_s: f64,
    pub packets: u64,
    pub lost: u64,
    pub loss_percent: f64,
    pub late: LateSummary,
    /// The largest lateness of any packet, ms.
    pub max_lateness_ms: f64,
    /// The longest stall of any session, ms.
    pub max_stall_ms: f64,
    pub first_packet_ms: Percentiles,
    /// Each session's time to first packet, in session order (the order
    /// of `starts`): which starts were slow.
    #[serde(default)]
    pub first_packet_ms_by_session: Vec<Option<f64>>,
    /// Each engine thread (`fjord-engine-N`) over the run.
    pub engine_threads: Vec<ThreadRow>,
    /// The whole server process over the run.
    pub process: ThreadRow,
    pub disk: DiskRow,
    /// Each disk of a pool (`--roots` above 1; empty for one disk).
    #[serde(default)]
    pub disks: Vec<DiskRow>,
    /// The cgroup's memory: most charged at once (page cache included).
    pub memory_peak_bytes: Option<u64>,
    /// From `fjord serve --stats-file`; `None`: the server wrote none.
    pub server: Option<ServerSummary>,
    /// Why there are no server figures, if there are none.
    pub server_note: String,
    /// The server's warnings and errors during the run (of its first 500
    /// log lines), as it logged them.
    #[serde(default)]
    pub server_warnings: Vec<String>,
    pub ingest: Option<IngestResult>,
    /// Per second from the first connect.
    pub timeline: Vec<TimelineSecond>,
    /// Mean time between two samples of the engine threads' state, ms.
    #[serde(default)]
    pub d_sample_ms: f64,
    /// The cgroup's disk reads per second of the receive window.
    #[serde(default)]
    pub disk_timeline: Vec<DiskSecond>,
    /// Increments of a thread's I/O-blocked time larger than the time
    /// between two samples, left out (a kernel artefact).
    pub blkio_artefacts: u64,
    pub errors: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct LateSummary {
    pub over_2ms: u64,
    pub over_50ms: u64,
    pub over_200ms: u64,
    pub over_2ms_percent: f64,
    pub over_50ms_percent: f64,
    pub over_200ms_percent: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles.
    pub fn of(values: &[f64]) -> Percentiles {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return Percentiles::default();
        }
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Percentiles {
            n: v.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            max: v[v.len() - 1],
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ThreadRow {
    pub tid: u32,
    pub name: String,
    pub major_faults: u64,
    /// Time blocked on block I/O (delay accounting), ms.
    pub io_blocked_ms: f64,
    /// Impossible increments of that time left out (see
    /// [`procfs::BlkioTracker`]).
    #[serde(default)]
    pub io_blocked_artefacts: u64,
    /// Time in uninterruptible sleep (`D`), estimated by sampling the
    /// thread's state, ms (engine threads only).
    #[serde(default)]
    pub d_state_ms: Option<f64>,
}

/// About one second of the run: what the cgroup read from the disk,
/// averaged over the time since the previous sample.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DiskSecond {
    /// Seconds since the receivers started, at the end of the interval.
    pub t_s: f64,
    pub read_mbps: f64,
    pub read_iops: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DiskRow {
    /// The device the library is on, `vda (254:0)`.
    pub device: String,
    pub seconds: f64,
    /// Read by the cgroup's processes (the server; the ingest if any).
    pub cgroup_read_mb: Option<f64>,
    pub cgroup_read_mbps: Option<f64>,
    pub cgroup_read_iops: Option<f64>,
    /// Read from the whole device by anyone (`/sys/block/DEV/stat`).
    pub device_read_mbps: Option<f64>,
    pub device_read_iops: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServerSummary {
    /// Bursts deferred because their data was not resident, all engine
    /// threads.
    pub not_ready: u64,
    pub packets: u64,
    pub late: u64,
    pub max_late_ms: f64,
    pub budget_bytes: Option<u64>,
    pub pinned_bytes_peak: Option<u64>,
    pub reads: Option<u64>,
    pub read_bytes: Option<u64>,
    pub read_errors: Option<u64>,
    pub bulk_bytes: Option<u64>,
    /// The server's longest first read (PLAY or seek to first packets
    /// resident), ms.
    #[serde(default)]
    pub first_read_max_ms: Option<f64>,
    pub threads: Vec<procfs::ThreadStats>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IngestResult {
    pub mb: u64,
    /// Seconds into the receive window it started.
    pub started_at_s: f64,
    /// Writing the title (ffmpeg -c copy), seconds.
    pub copy_s: Option<f64>,
    /// The server's ingest of it on its first DESCRIBE (the index),
    /// seconds.
    pub ingest_s: Option<f64>,
    /// Then its parity and packet file, made by the server in the
    /// background, seconds.
    pub derive_s: Option<f64>,
    pub error: Option<String>,
}

/// Everything a `fjord bench storage` produced.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StorageReport {
    pub command: String,
    pub machine: String,
    pub library: String,
    pub library_root: String,
    pub titles: usize,
    pub library_media_bytes: u64,
    /// Media and sidecars (index, parity, packets).
    pub library_total_bytes: u64,
    pub cgroup: String,
    pub device: String,
    /// The storage pool's disks (1: the library's own).
    #[serde(default)]
    pub roots: usize,
    /// Zipf exponent of the titles' popularity; 0: uniform.
    #[serde(default)]
    pub zipf: f64,
    pub sessions: usize,
    pub seconds: f64,
    pub seed: u64,
    /// Where each session started: (title, seconds into it).
    pub starts: Vec<(String, f64)>,
    pub runs: Vec<RunResult>,
}

impl StorageReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses what [`StorageReport::to_json`] (and `storage.json`) holds.
    pub fn from_json(s: &str) -> Result<StorageReport, serde_json::Error> {
        serde_json::from_str(s)
    }
}

/// The server, killed (SIGTERM, then SIGKILL) on drop.
struct Server {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    url: String,
}

/// The pid to kill on Ctrl-C.
static SERVER_PID: AtomicU32 = AtomicU32::new(0);
static HANDLER: std::sync::Once = std::sync::Once::new();

fn install_handler() {
    HANDLER.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            let pid = SERVER_PID.load(Ordering::Relaxed);
            if pid != 0 {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(100));
            cgroup::remove_live();
            cgroup::restore_delayacct_if_changed();
            eprintln!(
                "fjord bench storage: interrupted; server killed, cgroups removed, task_delayacct restored"
            );
            std::process::exit(130);
        });
    });
}

/// Makes `cmd`'s process join the cgroup (its pid written to each
/// `cgroup.procs`) before it execs, and die with us.
fn join_cgroup(cmd: &mut Command, procs: &[PathBuf]) -> anyhow::Result<()> {
    let paths: Vec<CString> = procs
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .collect::<Result<_, _>>()?;
    // SAFETY: only async-signal-safe calls (getpid, open, write, close,
    // prctl) between fork and exec, on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let mut pid = libc::getpid() as u32;
            let mut buf = [0u8; 12];
            let mut i = buf.len();
            loop {
                i -= 1;
                buf[i] = b'0' + (pid % 10) as u8;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            for p in &paths {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
                libc::close(fd);
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    Ok(())
}

impl Server {
    fn start(
        exe: &Path,
        config: &Path,
        stats: Option<&Path>,
        cg: &Cgroup,
    ) -> anyhow::Result<Server> {
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .args(["--http-port", "0", "--admin-bind", ""])
            .arg("--config")
            .arg(config);
        if let Some(s) = stats {
            cmd.arg("--stats-file").arg(s);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        join_cgroup(&mut cmd, &cg.procs_files())?;
        let mut child = cmd.spawn().context("starting fjord serve")?;
        SERVER_PID.store(child.id(), Ordering::Relaxed);
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let out: Vec<Box<dyn std::io::Read + Send>> = [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        .collect();
        for pipe in out {
            let (tx, log) = (tx.clone(), log.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Ok(mut l) = log.lock()
                        && l.len() < 500
                    {
                        l.push(line.clone());
                    }
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let mut server = Server {
            child,
            log,
            url: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = line.trim().strip_prefix("fjord: listening on rtsp://") {
                        server.url = format!("rtsp://{}/", addr.trim_end_matches('/'));
                        return Ok(server);
                    }
                }
                Err(_) => {
                    let status = server.child.try_wait().ok().flatten();
                    bail!(
                        "fjord serve did not start{}: {}",
                        status.map(|s| format!(" ({s})")).unwrap_or_default(),
                        server.log_text()
                    );
                }
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lines of the log that warn or report an error.
    fn warnings(&self) -> Vec<String> {
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        log.into_iter()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .collect()
    }

    fn log_text(&self) -> String {
        self.log.lock().map(|l| l.join(" | ")).unwrap_or_default()
    }

    /// SIGTERM, up to 3 s to exit, then SIGKILL.
    fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above; the group, so nothing it started outlives it.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
        SERVER_PID.store(0, Ordering::Relaxed);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Whether the server refused `--stats-file` (today's main does).
fn rejected_stats_flag(err: &anyhow::Error) -> bool {
    let s = format!("{err:#}");
    s.contains("--stats-file") || s.contains("stats-file")
}

/// A short description of the machine: CPUs, memory, kernel.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or("?".into(), |kb| format!("{:.1} GiB", kb as f64 / 1048576.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpus} CPUs, {mem} RAM, Linux {kernel}")
}

/// Makes or finds the library.
pub fn prepare_library(cfg: &StorageConfig) -> anyhow::Result<Library> {
    match &cfg.library {
        LibrarySource::Dir(d) => library::existing(d, &cfg.fjord_exe, cfg.progress),
        LibrarySource::Made { titles, mb, cache } => {
            library::made(cache, *titles, *mb, &cfg.fjord_exe, cfg.progress)
        }
    }
}

/// Runs the benchmark: the constrained run, then the baseline if asked.
pub fn run(cfg: &StorageConfig, command: &str) -> anyhow::Result<StorageReport> {
    if cfg.sessions == 0 || !(cfg.seconds.is_finite() && cfg.seconds > 0.0) {
        bail!("--sessions and --seconds must be positive");
    }
    install_handler();
    if cfg.roots > 1 && (cfg.baseline || cfg.ingest_mb.is_some()) {
        bail!("--roots above 1 runs without --baseline and --ingest-mb");
    }
    let lib = prepare_library(cfg)?;
    let scratch = tempfile::Builder::new()
        .prefix("fjord-bench-storage")
        .tempdir()?;
    let pool = (cfg.roots > 1)
        .then(|| pool::mount(&lib, cfg.roots, scratch.path(), cfg.progress))
        .transpose()?;
    let roots = pool
        .as_ref()
        .map_or_else(|| vec![lib.root.clone()], |p| p.roots.clone());
    let devs = roots
        .iter()
        .map(|r| cgroup::device_of(r))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let disks = Disks { roots, devs };
    let dev = &disks.devs[0];
    let delayacct_before = cgroup::enable_delayacct()?;
    let result = (|| {
        let mut report = StorageReport {
            command: command.to_string(),
            machine: machine(),
            library: lib.origin.clone(),
            library_root: lib.root.display().to_string(),
            titles: lib.titles.len(),
            library_media_bytes: lib.media_bytes(),
            library_total_bytes: lib.total_bytes(),
            device: format!(
                "{}{}",
                disks.names(),
                dev.partition_of
                    .as_ref()
                    .map(|p| format!(", the disk of partition {p}"))
                    .unwrap_or_default()
            ),
            roots: cfg.roots,
            zipf: cfg.zipf,
            sessions: cfg.sessions,
            seconds: cfg.seconds,
            seed: cfg.seed,
            ..StorageReport::default()
        };
        let constrained = Limits {
            memory: Some(cfg.cache_mb << 20),
            read_bps: Some(cfg.disk_mbps * 1_000_000),
            read_iops: Some(cfg.disk_iops),
        };
        let mut runs = vec![("constrained", constrained)];
        if cfg.baseline {
            runs.push(("baseline", Limits::default()));
        }
        for (name, limits) in runs {
            let r = run_one(cfg, &lib, &disks, name, limits, scratch.path(), &mut report)?;
            report.runs.push(r);
        }
        Ok(report)
    })();
    cgroup::restore_delayacct(&delayacct_before);
    drop(pool);
    result
}

/// Gives each session a title of Zipf(`cfg.zipf`) popularity (the
/// library's first title the most asked for), at its position where the
/// title is long enough.
fn zipf_titles(starts: &mut [load::SessionStart], titles: &[(String, f64)], cfg: &StorageConfig) {
    let plan = crate::cluster::plan::plan(starts.len(), 0.0, titles.len(), cfg.zipf, 1, cfg.seed);
    for (s, a) in starts.iter_mut().zip(plan) {
        let (url, duration) = &titles[a.title];
        s.url = url.clone();
        s.npt_s = s.npt_s.min((duration - cfg.seconds).max(0.0));
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// (bytes or sectors, reads) so far, where they could be read.
type Counts = Option<(u64, u64)>;

/// A disk row from [`Counts`] of the cgroup and of the whole device,
/// before and after `elapsed` seconds.
type Reads = (Counts, Counts);

fn disk_row(device: String, elapsed: f64, cgroup: Reads, whole: Reads) -> DiskRow {
    let delta = |(a, b): Reads| Some((b?.0.saturating_sub(a?.0), b?.1.saturating_sub(a?.1)));
    let (cg, dev) = (delta(cgroup), delta(whole));
    DiskRow {
        device,
        seconds: elapsed,
        cgroup_read_mb: cg.map(|c| mb(c.0)),
        cgroup_read_mbps: cg.map(|c| mb(c.0) / elapsed),
        cgroup_read_iops: cg.map(|c| c.1 as f64 / elapsed),
        device_read_mbps: dev.map(|d| mb(d.0 * 512) / elapsed),
        device_read_iops: dev.map(|d| d.1 as f64 / elapsed),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    cfg: &StorageConfig,
    lib: &Library,
    disks: &Disks,
    name: &str,
    limits: Limits,
    scratch: &Path,
    report: &mut StorageReport,
) -> anyhow::Result<RunResult> {
    let setting = match limits.memory {
        Some(m) => format!(
            "memory {} MiB, reads {} MB/s and {} IOPS on {} (each), caches dropped",
            m >> 20,
            limits.read_bps.unwrap_or(0) / 1_000_000,
            limits.read_iops.unwrap_or(0),
            disks.names()
        ),
        None => "no limits, every file read into the page cache first".to_string(),
    };
    let pb_msg = |m: &str| {
        if cfg.progress {
            eprintln!("fjord bench storage [{name}]: {m}");
        }
    };
    // The title to ingest beside the streams arrives before the run (a copy
    // from elsewhere is not the server's work); caches are dropped after.
    let ingest_title = match cfg.ingest_mb {
        Some(mb) => {
            pb_msg("writing the title to ingest");
            let source = library::clip_of(lib).unwrap_or_else(|| lib.titles[0].path.clone());
            let path = lib.root.join("bench-ingest.ts");
            Some((mb, write_title(&source, mb, &path), path))
        }
        None => None,
    };
    let cg = Cgroup::create(&disks.devs, limits)?;
    report.cgroup = cg.describe();
    if limits.memory.is_some() {
        pb_msg("dropping caches");
        cgroup::drop_caches()?;
    } else {
        pb_msg("warming the page cache");
        library::warm(lib, cfg.progress)?;
    }
    let config = scratch.join(format!("serve-{name}.toml"));
    let root = match &disks.roots[..] {
        [one] => format!("root = {one:?}"),
        many => format!("roots = {many:?}"),
    };
    let toml = format!(
        "{}\nbind = \"127.0.0.1\"\nport = 0\nthreads = {}\n\
         capacity_pps_per_core = 1000000000000\nmax_sessions = 100000\n\
         max_connections = 100000\nmax_connections_per_address = 0\nmax_sessions_per_address = 0\n{}",
        root,
        cfg.threads,
        // The operator tells the server what its disk reads (as `fjord
        // bench disk` would): admission and bulk pacing use it.
        limits.read_bps.map_or(String::new(), |b| format!(
            "disk_mbps = {}\n",
            b / 1_000_000
        ))
    );
    std::fs::write(&config, toml)?;
    let stats_path = scratch.join(format!("stats-{name}.json"));
    let _ = std::fs::remove_file(&stats_path);
    let (server, mut server_note) =
        match Server::start(&cfg.fjord_exe, &config, Some(&stats_path), &cg) {
            Ok(s) => (s, String::new()),
            Err(e) if rejected_stats_flag(&e) => (
                Server::start(&cfg.fjord_exe, &config, None, &cg)?,
                "n/a: this fjord serve has no --stats-file".to_string(),
            ),
            Err(e) => return Err(e),
        };
    let pid = server.pid();
    // Durations, then where each session starts.
    pb_msg("describing the titles");
    let mut titles = Vec::new();
    for t in &lib.titles {
        let url = format!("{}{}", server.url, encode_path(&t.name));
        let d = load::title_duration_s(&url)
            .with_context(|| format!("DESCRIBE {url}: {}", server.log_text()))?;
        titles.push((url, d));
    }
    let mut starts = load::random_starts(&titles, cfg.sessions, cfg.seconds, cfg.seed);
    if cfg.zipf > 0.0 {
        zipf_titles(&mut starts, &titles, cfg);
    }
    report.starts = starts
        .iter()
        .map(|s| {
            let name = s.url.strip_prefix(&server.url).unwrap_or(&s.url);
            (name.to_string(), s.npt_s)
        })
        .collect();
    let mut lc = LoadConfig::new(
        &starts[0].url,
        cfg.sessions,
        Duration::from_secs_f64(cfg.seconds),
    );
    lc.gro = false;
    lc.starts = starts;
    lc.timeline = true;
    lc.setup_timeout = Duration::from_secs(30);
    lc.stagger = cfg.stagger;
    // Before.
    let tasks0 = procfs::tasks(pid);
    let proc0 = procfs::process(pid).unwrap_or_default();
    let io0 = cg.io_read();
    let per_disk0 = disks.each(&cg);
    let disk0 = whole_stat(&per_disk0);
    let t0 = Instant::now();
    let mut blkio = procfs::BlkioTracker::new(&tasks0, t0);
    let engine_tids: Vec<u32> = tasks0
        .iter()
        .filter(|(_, t)| t.name.starts_with("fjord-engine-"))
        .map(|(tid, _)| *tid)
        .collect();
    let dstate = procfs::DStateSampler::start(pid, engine_tids, Duration::from_millis(2));
    let load_thread = std::thread::spawn(move || load::run(&lc));
    // Bulk I/O beside the streams.
    let ingest_thread = ingest_title.map(|(mb, copied, path)| {
        let delay = Duration::from_secs_f64((cfg.seconds / 4.0).min(10.0));
        let url = server.url.clone();
        let within = Duration::from_secs_f64(cfg.seconds + 30.0);
        std::thread::spawn(move || bulk_ingest(&url, &path, mb, copied, delay, within))
    });
    // Watch while it runs.
    let total = cfg.seconds + 35.0;
    let bar = if cfg.progress {
        let b = ProgressBar::new(cfg.seconds.ceil() as u64).with_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} s {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        b
    } else {
        ProgressBar::hidden()
    };
    let mut pinned_peak: Option<u64> = None;
    let mut disk_timeline: Vec<DiskSecond> = Vec::new();
    let mut disk_prev = (io0, 0.0f64);
    let mut last_stats: Option<ServerStats> = None;
    let timed_out = Arc::new(AtomicBool::new(false));
    while !load_thread.is_finished() {
        std::thread::sleep(Duration::from_millis(250));
        let el = t0.elapsed().as_secs_f64();
        bar.set_position((el as u64).min(cfg.seconds.ceil() as u64));
        if let Some(s) = procfs::read_server_stats(&stats_path) {
            if let Some(st) = &s.storage {
                pinned_peak = Some(pinned_peak.unwrap_or(0).max(st.pinned_bytes));
            }
            last_stats = Some(s);
        }
        let tasks = procfs::tasks(pid);
        blkio.sample(&tasks, Instant::now());
        if el >= disk_prev.1 + 1.0 {
            let now = cg.io_read();
            let dt = el - disk_prev.1;
            if let (Some(a), Some(b)) = (disk_prev.0, now) {
                disk_timeline.push(DiskSecond {
                    t_s: el,
                    read_mbps: mb(b.0.saturating_sub(a.0)) / dt,
                    read_iops: b.1.saturating_sub(a.1) as f64 / dt,
                });
            }
            disk_prev = (now, el);
        }
        let engine_faults: u64 = tasks
            .iter()
            .filter(|(_, t)| t.name.starts_with("fjord-engine-"))
            .map(|(tid, t)| t.major_faults - tasks0.get(tid).map_or(0, |a| a.major_faults))
            .sum();
        bar.set_message(format!(
            "[{name}] {} sessions; cgroup memory {}; engine major faults {engine_faults}",
            cfg.sessions,
            cg.memory_now()
                .map_or("?".into(), |m| format!("{:.0} MB", mb(m))),
        ));
        if el > total {
            // Bounded: the receivers' own limits should end it long before.
            timed_out.store(true, Ordering::Relaxed);
            break;
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    // After.
    let dstate = dstate.finish();
    let tasks1 = procfs::tasks(pid);
    blkio.sample(&tasks1, Instant::now());
    let proc1 = procfs::process(pid).unwrap_or_default();
    let io1 = cg.io_read();
    let per_disk1 = disks.each(&cg);
    let disk1 = whole_stat(&per_disk1);
    let memory_peak_bytes = cg.memory_peak();
    if let Some(s) = procfs::read_server_stats(&stats_path) {
        if let Some(st) = &s.storage {
            pinned_peak = Some(pinned_peak.unwrap_or(0).max(st.pinned_bytes));
        }
        last_stats = Some(s);
    }
    bar.finish_and_clear();
    let ingest = ingest_thread.map(|h| {
        h.join().unwrap_or_else(|_| IngestResult {
            error: Some("the ingest thread panicked".into()),
            ..IngestResult::default()
        })
    });
    let server_log = server.log_text();
    let (load_report, server_warnings): (LoadReport, _) = if timed_out.load(Ordering::Relaxed) {
        server.stop();
        bail!("the receivers did not finish in {total:.0} s; server: {server_log}");
    } else {
        let r = load_thread
            .join()
            .map_err(|_| anyhow::anyhow!("the load thread panicked"))?;
        let warnings = server.warnings();
        server.stop();
        let r = r.with_context(|| format!("fjord load; server: {server_log}"))?;
        (r, warnings)
    };
    drop(cg);
    let row = |tid: u32, a: Option<&TaskStat>, b: &TaskStat| ThreadRow {
        tid,
        name: b.name.clone(),
        major_faults: b
            .major_faults
            .saturating_sub(a.map_or(0, |a| a.major_faults)),
        io_blocked_ms: blkio.ms(tid),
        io_blocked_artefacts: blkio.artefacts.get(&tid).copied().unwrap_or(0),
        d_state_ms: dstate
            .d
            .contains_key(&tid)
            .then(|| dstate.ms(tid))
            .or(Some(0.0)),
    };
    let engine_threads: Vec<ThreadRow> = tasks1
        .iter()
        .filter(|(_, t)| t.name.starts_with("fjord-engine-"))
        .map(|(tid, t)| row(*tid, tasks0.get(tid), t))
        .collect();
    // Faults of the process count every thread, gone ones too; its I/O
    // wait is the main thread's alone, so the threads' are summed.
    let mut process = row(pid, Some(&proc0), &proc1);
    process.name = "all threads".into();
    process.io_blocked_ms = tasks1.keys().map(|t| blkio.ms(*t)).sum();
    process.io_blocked_artefacts = blkio.artefacts.values().sum();
    process.d_state_ms = None;
    let d_sample_ms = dstate.period_ms();
    let blkio_artefacts = process.io_blocked_artefacts;
    let disk = disk_row(disks.names(), elapsed, (io0, io1), (disk0, disk1));
    let per_disk = (disks.devs.iter().zip(per_disk0.iter().zip(&per_disk1)))
        .map(|(d, ((io0, st0), (io1, st1)))| {
            let name = format!("{} ({})", d.name, d.id());
            disk_row(name, elapsed, (*io0, *io1), (*st0, *st1))
        })
        .collect::<Vec<_>>();
    let server_summary = match last_stats {
        Some(s) => Some(summarise_server(&s, pinned_peak)),
        None => {
            if server_note.is_empty() {
                server_note = "n/a: the server wrote no stats file".into();
            }
            None
        }
    };
    let t = &load_report.totals;
    let pct = |n: u64| {
        if t.packets > 0 {
            100.0 * n as f64 / t.packets as f64
        } else {
            0.0
        }
    };
    let ttfp: Vec<f64> = load_report
        .sessions
        .iter()
        .filter_map(|s| s.first_packet_ms)
        .collect();
    Ok(RunResult {
        name: name.to_string(),
        setting,
        memory_limit_bytes: limits.memory,
        read_bps_limit: limits.read_bps,
        read_iops_limit: limits.read_iops,
        sessions_requested: load_report.sessions_requested,
        sessions_playing: load_report.sessions_playing,
        setup_failures: load_report.setup_failures,
        sessions_dropped: load_report.sessions_dropped,
        seconds: cfg.seconds,
        wall_s: load_report.wall_s,
        packets: t.packets,
        lost: t.lost,
        loss_percent: t.loss_percent,
        late: LateSummary {
            over_2ms: t.late_over.over_2ms,
            over_50ms: t.late_over.over_50ms,
            over_200ms: t.late_over.over_200ms,
            over_2ms_percent: pct(t.late_over.over_2ms),
            over_50ms_percent: pct(t.late_over.over_50ms),
            over_200ms_percent: pct(t.late_over.over_200ms),
        },
        max_lateness_ms: t.max_lateness_ms,
        max_stall_ms: t.max_stall_ms,
        first_packet_ms: Percentiles::of(&ttfp),
        first_packet_ms_by_session: load_report
            .sessions
            .iter()
            .map(|s| s.first_packet_ms)
            .collect(),
        engine_threads,
        process,
        disk,
        disks: if per_disk.len() > 1 {
            per_disk
        } else {
            Vec::new()
        },
        memory_peak_bytes,
        server: server_summary,
        server_note,
        server_warnings,
        ingest,
        timeline: load_report.timeline.clone(),
        blkio_artefacts,
        disk_timeline,
        d_sample_ms,
        errors: load_report.errors.clone(),
    })
}

fn summarise_server(s: &ServerStats, pinned_peak: Option<u64>) -> ServerSummary {
    let engine = s.threads.iter();
    ServerSummary {
        not_ready: engine.clone().map(|t| t.not_ready).sum(),
        packets: engine.clone().map(|t| t.packets).sum(),
        late: engine.clone().map(|t| t.late).sum(),
        max_late_ms: engine.map(|t| t.max_late_us).max().unwrap_or(0) as f64 / 1e3,
        budget_bytes: s.storage.as_ref().map(|st| st.budget_bytes),
        pinned_bytes_peak: pinned_peak,
        reads: s.storage.as_ref().map(|st| st.reads),
        read_bytes: s.storage.as_ref().map(|st| st.read_bytes),
        read_errors: s.storage.as_ref().map(|st| st.read_errors),
        bulk_bytes: s.storage.as_ref().map(|st| st.bulk_bytes),
        first_read_max_ms: s
            .storage
            .as_ref()
            .map(|st| st.first_read_max_us as f64 / 1e3),
        threads: s.threads.clone(),
    }
}

/// Percent-encodes what a URL path cannot hold as is.
fn encode_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Writes a title of `mb` MB at `path` looping `source` (stream copy),
/// flushed to disk; how long it took.
fn write_title(source: &Path, mb: u64, path: &Path) -> Result<f64, String> {
    let t = Instant::now();
    let out = library::loop_command(source, mb * 1_000_000, path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| e.to_string())?;
    Ok(t.elapsed().as_secs_f64())
}

/// After `delay`, has the server ingest the title at `path` (written
/// before the run, `copied`), as a title new to it: a DESCRIBE makes it
/// write the index, then it makes the parity and packet file in the
/// background, all as bulk work its storage layer schedules after the
/// streams. Waits for the packet file at most `within`; then removes the
/// title and its files.
fn bulk_ingest(
    url: &str,
    path: &Path,
    mb: u64,
    copied: Result<f64, String>,
    delay: Duration,
    within: Duration,
) -> IngestResult {
    std::thread::sleep(delay);
    let mut r = IngestResult {
        mb,
        started_at_s: delay.as_secs_f64(),
        ..IngestResult::default()
    };
    match copied {
        Ok(s) => r.copy_s = Some(s),
        Err(e) => r.error = Some(format!("writing the title: {e}")),
    }
    if r.error.is_none() {
        let t = Instant::now();
        match describe(&format!("{url}bench-ingest.ts"), within) {
            Ok(()) => r.ingest_s = Some(t.elapsed().as_secs_f64()),
            Err(e) => r.error = Some(format!("DESCRIBE: {e}")),
        }
        let t = Instant::now();
        let packets = library::sidecars(path)
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "fjpkt"));
        while r.error.is_none() && t.elapsed() < within {
            if packets.as_ref().is_some_and(|p| p.exists()) {
                r.derive_s = Some(t.elapsed().as_secs_f64());
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for p in library::sidecars(path).into_iter().chain([path.to_owned()]) {
        let _ = std::fs::remove_file(p);
    }
    r
}

/// One RTSP DESCRIBE of `url`, waiting up to `within` for a 200.
fn describe(url: &str, within: Duration) -> Result<(), String> {
    use std::io::{Read, Write};
    let host = url
        .strip_prefix("rtsp://")
        .and_then(|r| r.split('/').next())
        .ok_or("not an rtsp:// URL")?;
    let mut c = std::net::TcpStream::connect(host).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(within))
        .map_err(|e| e.to_string())?;
    write!(c, "DESCRIBE {url} RTSP/1.0\r\nCSeq: 1\r\n\r\n").map_err(|e| e.to_string())?;
    let mut head = [0u8; 64];
    let n = c.read(&mut head).map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]);
    if line.starts_with("RTSP/1.0 200") {
        Ok(())
    } else {
        Err(line.lines().next().unwrap_or("no reply").to_owned())
    }
}

/// Per-thread rows keyed by name, for tables.
pub fn by_name(rows: &[ThreadRow]) -> BTreeMap<String, &ThreadRow> {
    rows.iter().map(|r| (r.name.clone(), r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&v);
        assert_eq!((p.n, p.p50, p.p99, p.max), (100, 50.0, 99.0, 100.0));
        let p = Percentiles::of(&[3.0]);
        assert_eq!((p.p50, p.p99, p.max), (3.0, 3.0, 3.0));
        assert_eq!(Percentiles::of(&[]).n, 0);
    }

    #[test]
    fn paths_are_encoded_for_urls() {
        assert_eq!(encode_path("films/a b.ts"), "films/a%20b.ts");
        assert_eq!(encode_path("title-00.ts"), "title-00.ts");
    }
}

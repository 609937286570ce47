//! `fjord bench peers`: the same load against fjord and the open-source
//! video-on-demand RTSP servers, CPU per packet side by side.
//!
//! One MPEG-TS title (H.264 + AAC, 4.5 Mbit/s constant mux rate, made once
//! with ffmpeg and kept) is served by each server in turn: `fjord serve`
//! (one engine thread, its default data path), live555MediaServer (Debian
//! `livemedia-utils`) and GStreamer's rtsp-server (a small Python program,
//! `bench/peers/gst_rtsp_vod.py`, built into this binary, with one pipeline
//! per client: video on demand, not a shared live stream). Each server runs
//! as a child process pinned, all its threads, to one CPU; the receivers are
//! `fjord load` in this process, pinned to another CPU, N sessions over
//! loopback. The server's CPU is its threads' time on a CPU from
//! `/proc/PID/task/*/schedstat` (nanoseconds: `/proc/PID/stat` counts clock
//! ticks of 10 ms, more than one session costs in a run), sampled every
//! 20 ms and read, by interpolation, over the
//! receive window of the load: from the first PLAY reply to the end of
//! receiving. Packets are the RTP packets the receivers counted in that
//! window, so CPU per packet is exactly the server's cost of what arrived.
//!
//! A peer that is not installed is skipped with the package that provides
//! it; MediaMTX is skipped always ([`MEDIAMTX_SKIP`] says why). Children
//! die with this process on every exit path: dropped (killed with their
//! process group), or, if this process dies first, by `PR_SET_PDEATHSIG`.
//!
//! Beside them, in the same runs, the kernel floor ([`floor`]): no server,
//! a thread pinned to the servers' CPU sends prebuilt packets of the title
//! to N plain UDP receivers on the receivers' CPU (drained as `fjord load`
//! drains), each session at the title's packet rate, in bursts of B per
//! session per send (a GSO `sendmsg` per burst, a `send` per packet for
//! B = 1), sleeping to the next due time. Its CPU per packet is what the
//! kernel path alone costs. fjord's burst is measured ([`burst`]: packets
//! over send calls of its data path, from its `/metrics` at the end of each
//! run); its row gives its ratio to the floor at the measured burst nearest
//! it and to the floor interpolated at its own (`--floor-bursts`,
//! `--no-floor`). [`curve`] repeats the whole comparison over loads.

use std::{
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{
    capacity::{available_cpus, pin_current_thread, raise_fd_limit},
    procfs::Schedstat,
    stats::{Summary, median},
};

pub mod burst;
pub mod curve;
pub mod floor;
pub mod idle;

/// The GStreamer server program, written to a temporary file at run time.
pub const GST_SCRIPT: &str = include_str!("../../../bench/peers/gst_rtsp_vod.py");

/// The title's mux rate, bits per second.
pub const BITRATE: u64 = 4_500_000;

/// Why MediaMTX is not measured.
pub const MEDIAMTX_SKIP: &str = "MediaMTX: skipped, no package registry here serves it (no Debian package; the Go module proxy refuses github.com/bluenviron/mediamtx), and it has no video on demand of stored files: it would take a live fan-out of one copy pushed by ffmpeg, a runner not built without a binary to test it against";

#[derive(Clone, Debug)]
pub struct PeersConfig {
    pub sessions: usize,
    /// Receive seconds per run.
    pub seconds: f64,
    /// RTP interleaved on the RTSP connection instead of UDP.
    pub tcp: bool,
    /// Runs per server (interleaved: fjord, live555, GStreamer, fjord, …).
    pub reps: usize,
    /// The CPU the servers are pinned to (the receivers take the next one).
    pub cpu: usize,
    /// Every server, all its threads, under SCHED_FIFO at the same low
    /// priority, so other work on a shared machine cannot take its CPU.
    pub realtime: bool,
    /// Receivers with UDP GRO; players' plain sockets when false.
    pub gro: bool,
    /// The `fjord` executable that serves.
    pub fjord_exe: PathBuf,
    /// Where the title is made and kept.
    pub media_dir: PathBuf,
    /// Packets per send of the kernel floor rows; empty: no floor.
    pub floor_bursts: Vec<usize>,
    /// The servers to measure (of [`Peer::ALL`]); the others are skipped.
    pub servers: Vec<Peer>,
    /// fjord's `udp_sockets` (`shared`, its default, or `per-session`).
    pub udp_sockets: String,
}

/// The servers measured, and the kernel floor at a burst size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Fjord,
    Live555,
    Gst,
    Floor(usize),
}

impl Peer {
    pub const ALL: [Peer; 3] = [Peer::Fjord, Peer::Live555, Peer::Gst];

    /// The server named `name` on the command line: fjord, live555, gst.
    pub fn parse(name: &str) -> Option<Peer> {
        match name {
            "fjord" => Some(Peer::Fjord),
            "live555" => Some(Peer::Live555),
            "gst" | "gstreamer" => Some(Peer::Gst),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Peer::Fjord => "fjord",
            Peer::Live555 => "live555MediaServer",
            Peer::Gst => "GStreamer rtsp-server",
            Peer::Floor(_) => "kernel floor",
        }
    }

    /// The name, with the burst for a floor.
    pub fn tag(self) -> String {
        match self {
            Peer::Floor(b) => format!("kernel floor B={b}"),
            p => p.name().to_string(),
        }
    }
}

/// One run of one server.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub rep: usize,
    pub sessions: usize,
    pub playing: usize,
    pub packets: u64,
    /// RTP bytes (header and payload) received.
    pub bytes: u64,
    pub lost: u64,
    pub loss_percent: f64,
    pub late: u64,
    pub late_percent: f64,
    pub max_late_ms: f64,
    pub mbps_per_session: f64,
    /// The server's CPU (user + system) over the receive window, seconds.
    pub cpu_s: f64,
    /// Time the server's threads waited on a run queue over the window
    /// (ready to run, CPU taken by something else), seconds.
    pub wait_s: f64,
    /// The receive window, seconds.
    pub window_s: f64,
    pub us_per_packet: f64,
    /// First connect to the last PLAY reply, seconds.
    pub setup_s: f64,
    /// Why the run does not count (no packets, sessions that failed).
    pub error: Option<String>,
    /// fjord's packets per send call over the run; other servers: none.
    pub burst: Option<f64>,
    /// Why fjord's burst was not read.
    pub burst_note: Option<String>,
}

/// A server's runs, or why it was skipped.
#[derive(Clone, Debug)]
pub struct PeerResult {
    pub peer: Peer,
    pub version: String,
    pub runs: Vec<Run>,
    pub skipped: Option<String>,
}

impl PeerResult {
    fn good(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.error.is_none())
    }

    fn med(&self, f: impl Fn(&Run) -> f64) -> f64 {
        median(&self.good().map(f).collect::<Vec<_>>())
    }

    /// CPU per packet over the good runs.
    pub fn us_per_packet(&self) -> Option<Summary> {
        Summary::of(&self.good().map(|r| r.us_per_packet).collect::<Vec<_>>())
    }

    /// Median packets per send over the good runs that read it.
    pub fn burst(&self) -> Option<f64> {
        let b: Vec<f64> = self.good().filter_map(|r| r.burst).collect();
        (!b.is_empty()).then(|| median(&b))
    }

    /// Median loss over the good runs.
    pub fn loss_percent(&self) -> Option<f64> {
        (self.good().count() > 0).then(|| self.med(|r| r.loss_percent))
    }
}

pub struct PeersReport {
    pub config: PeersConfig,
    /// The CPU the receivers ran on.
    pub load_cpu: usize,
    pub title: String,
    pub results: Vec<PeerResult>,
    pub notes: Vec<String>,
}

/// The CPU at `t_ns`, linear between the samples `(time ns, CPU s)` around
/// it (sorted by time); `None` outside them.
pub fn cpu_at(samples: &[(i64, f64)], t_ns: i64) -> Option<f64> {
    let i = samples.partition_point(|&(t, _)| t < t_ns);
    match (
        i.checked_sub(1).and_then(|j| samples.get(j)),
        samples.get(i),
    ) {
        (_, Some(&(t1, c1))) if t1 == t_ns => Some(c1),
        (Some(&(t0, c0)), Some(&(t1, c1))) => {
            Some(c0 + (c1 - c0) * (t_ns - t0) as f64 / (t1 - t0) as f64)
        }
        _ => None,
    }
}

/// The port of the URL live555MediaServer prints, e.g.
/// `rtsp://192.0.2.2:8554/<filename>` (554 when it names none).
pub fn live555_port(banner: &str) -> Option<u16> {
    let rest = &banner[banner.find("rtsp://")? + 7..];
    let host = &rest[..rest.find('/')?];
    let port = match host.rsplit_once(']') {
        Some((_, p)) => p.strip_prefix(':'),
        None => host.split_once(':').map(|(_, p)| p),
    };
    match port {
        Some(p) => p.parse().ok(),
        None => Some(554),
    }
}

/// The library version live555MediaServer prints.
pub fn live555_version(banner: &str) -> Option<String> {
    let at = banner.find("library version ")? + 16;
    let v: String = banner[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v = v.trim_end_matches('.');
    (!v.is_empty()).then(|| v.to_string())
}

/// How long the title is: the run and its setup fit in it, so no session
/// reaches its end (servers differ in what they do there).
pub fn title_seconds(run_seconds: f64) -> u64 {
    let need = (run_seconds.max(0.0) + 20.0).ceil() as u64;
    need.div_ceil(30).max(2) * 30
}

/// Makes the title with ffmpeg unless it is there: `peers-SECONDSs.ts`.
pub fn make_title(dir: &Path, seconds: u64) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("peers-{seconds}s.ts"));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".peers-{seconds}s.ts.tmp"));
    let bar = spinner(&format!(
        "making the title with ffmpeg: {seconds} s of 720p25 H.264 + AAC, muxrate 4.5 Mbit/s"
    ));
    let made = crate::clip::encode(&tmp, seconds, 3900, BITRATE);
    bar.finish_and_clear();
    made?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

fn spinner(msg: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(msg.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// `live555MediaServer` on the PATH, or why not.
pub fn find_live555() -> Result<PathBuf, String> {
    find_on_path("live555MediaServer").ok_or_else(|| {
        "live555MediaServer: skipped, not installed (apt-get install livemedia-utils; Debian \
         bookworm and trixie have none: `make peers` takes sid's)"
            .to_string()
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A Python with GStreamer's rtsp-server bindings and the elements the
/// pipeline needs, and the GStreamer version; or why not.
pub fn find_gst_python() -> Result<(PathBuf, String), String> {
    const CHECK: &str = "import gi; gi.require_version('Gst','1.0'); \
        gi.require_version('GstRtspServer','1.0'); \
        from gi.repository import Gst, GstRtspServer; Gst.init(None); \
        missing=[e for e in ('filesrc','tsparse','rtpmp2tpay') if not Gst.ElementFactory.find(e)]; \
        print('missing:' + ','.join(missing) if missing else Gst.version_string())";
    let mut why = String::new();
    // The system Python first: python3-gi installs for it, not for others
    // (pyenv, venvs) that may come first on the PATH.
    for py in ["/usr/bin/python3", "python3"] {
        let out = match Command::new(py).args(["-c", CHECK]).output() {
            Ok(o) => o,
            Err(_) => continue,
        };
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !text.starts_with("missing:") {
            return Ok((PathBuf::from(py), text));
        }
        if let Some(m) = text.strip_prefix("missing:") {
            why = format!(
                "GStreamer elements {m} missing (apt-get install gstreamer1.0-plugins-base \
                 gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)"
            );
        }
    }
    if why.is_empty() {
        why = "not installed (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 \
               gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)"
            .into();
    }
    Err(format!("GStreamer rtsp-server: skipped, {why}"))
}

/// A server child process: pinned to one CPU, in its own process group,
/// killed (the whole group) when dropped and when this process dies.
pub struct ServerChild {
    child: Child,
    /// What it printed (stdout and stderr), for error messages.
    log: Arc<Mutex<Vec<String>>>,
    /// `host:port` of its admin listener (fjord's), if it printed one.
    pub admin: Option<String>,
}

impl ServerChild {
    /// Spawns `cmd` and waits up to `timeout` for a line from which
    /// `ready` makes the URL; `ready` sees every line until then, so it
    /// can keep what earlier ones said.
    pub fn spawn(
        mut cmd: Command,
        cpu: usize,
        realtime: bool,
        timeout: Duration,
        mut ready: impl FnMut(&str) -> Option<String>,
    ) -> anyhow::Result<(Self, String)> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: only async-signal-safe system calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                pin_current_thread(cpu);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if realtime {
                    // Threads it makes inherit the policy.
                    let param = libc::sched_param {
                        sched_priority: REALTIME_PRIORITY,
                    };
                    if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let out = child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>);
        let err = child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>);
        for pipe in [out, err].into_iter().flatten() {
            let (tx, log) = (tx.clone(), log.clone());
            // Drains the pipe until the child exits, so it never blocks.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Ok(mut l) = log.lock()
                        && l.len() < 200
                    {
                        l.push(line.clone());
                    }
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let mut server = ServerChild {
            child,
            log,
            admin: None,
        };
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(url) = ready(&line) {
                        return Ok((server, url));
                    }
                }
                Err(e) => {
                    let status = server.child.try_wait().ok().flatten();
                    bail!(
                        "{program} did not start ({}{}): {}",
                        match e {
                            mpsc::RecvTimeoutError::Timeout => "no URL in time",
                            mpsc::RecvTimeoutError::Disconnected => "output closed",
                        },
                        status.map(|s| format!(", {s}")).unwrap_or_default(),
                        server.log_text()
                    );
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed, one line after another.
    pub fn log_text(&self) -> String {
        self.log.lock().map(|l| l.join(" | ")).unwrap_or_default()
    }

    /// Whole banner printed so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        // The group: whatever it started dies with it.
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples a process's CPU every `period` on a thread of its own.
pub struct CpuSampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(i64, f64, f64)>>>,
}

impl CpuSampler {
    pub fn start(pid: u32, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            loop {
                let done = flag.load(Ordering::Relaxed);
                let s = Schedstat::of_process(pid);
                if s.run_ns > 0 {
                    samples.push((unix_ns(), s.run_ns as f64 / 1e9, s.wait_ns as f64 / 1e9));
                }
                if done {
                    return samples;
                }
                std::thread::sleep(period);
            }
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// `(CLOCK_REALTIME ns, CPU s, run-queue wait s)`, sorted by time; one
    /// last sample is taken now.
    pub fn finish(mut self) -> Vec<(i64, f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// A server ready to be measured, with what it serves.
struct Prepared {
    peer: Peer,
    /// Makes a fresh server; returns it and the title's URL.
    start: Box<dyn Fn() -> anyhow::Result<(ServerChild, String)>>,
}

const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The SCHED_FIFO priority of `--realtime` (fjord's own `realtime = true`
/// uses a low one too).
pub const REALTIME_PRIORITY: i32 = 10;

fn prepare(
    peer: Peer,
    cfg: &PeersConfig,
    title: &Path,
    scratch: &Path,
) -> Result<(Prepared, String), String> {
    let (cpu, rt) = (cfg.cpu, cfg.realtime);
    let name = title
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("peers.ts")
        .to_string();
    match peer {
        Peer::Fjord => {
            let config = scratch.join("fjord-serve.toml");
            let root = title.parent().unwrap_or(Path::new(".")).to_path_buf();
            // Admission control must not refuse sessions: no saved budget.
            let toml = format!(
                "root = {root:?}\nbind = \"127.0.0.1\"\nport = 0\nthreads = 1\n\
                 capacity_pps_per_core = 1000000000000\nmax_sessions = 100000\n\
                 max_connections = 100000\nmax_connections_per_address = 0\nmax_sessions_per_address = 0\n\
                 udp_sockets = {:?}\n",
                cfg.udp_sockets
            );
            std::fs::write(&config, toml).map_err(|e| format!("fjord: {e}"))?;
            let exe = cfg.fjord_exe.clone();
            let start = move || {
                let mut cmd = Command::new(&exe);
                // The admin listener for its send counters (the burst).
                cmd.arg("serve")
                    .args(["--http-port", "0", "--admin-bind", "127.0.0.1:0"])
                    .arg("--config")
                    .arg(&config);
                let mut admin = None;
                let (mut server, url) = ServerChild::spawn(cmd, cpu, rt, START_TIMEOUT, |l| {
                    let l = l.trim();
                    // Printed before the RTSP line.
                    if let Some(a) = l.strip_prefix("fjord: status page on http://") {
                        admin = Some(a.trim_end_matches('/').to_string());
                        return None;
                    }
                    let addr = l
                        .strip_prefix("fjord: listening on rtsp://")?
                        .trim_end_matches('/');
                    Some(format!("rtsp://{addr}/{name}"))
                })?;
                server.admin = admin;
                Ok((server, url))
            };
            let version = format!("fjord {}", env!("CARGO_PKG_VERSION"));
            Ok((
                Prepared {
                    peer,
                    start: Box::new(start),
                },
                version,
            ))
        }
        Peer::Live555 => {
            let exe = find_live555()?;
            let dir = title.parent().unwrap_or(Path::new(".")).to_path_buf();
            let start = move || {
                let mut cmd = Command::new(&exe);
                // It serves the files of its working directory, by suffix.
                cmd.current_dir(&dir);
                let name = name.clone();
                ServerChild::spawn(cmd, cpu, rt, START_TIMEOUT, move |l| {
                    let port = live555_port(l)?;
                    Some(format!("rtsp://127.0.0.1:{port}/{name}"))
                })
            };
            // The version is in the banner: start once to read it.
            let (server, _) = start().map_err(|e| format!("live555MediaServer: {e:#}"))?;
            std::thread::sleep(Duration::from_millis(200));
            let banner = server.log_lines().join("\n");
            drop(server);
            let version =
                live555_version(&banner).map_or("live555".into(), |v| format!("LIVE555 {v}"));
            Ok((
                Prepared {
                    peer,
                    start: Box::new(start),
                },
                version,
            ))
        }
        Peer::Gst => {
            let (python, gst_version) = find_gst_python()?;
            let script = scratch.join("gst_rtsp_vod.py");
            std::fs::write(&script, GST_SCRIPT).map_err(|e| format!("GStreamer: {e}"))?;
            let title = title.to_path_buf();
            let start = move || {
                let mut cmd = Command::new(&python);
                cmd.arg(&script).arg(&title).args(["--bind", "127.0.0.1"]);
                ServerChild::spawn(cmd, cpu, rt, START_TIMEOUT, |l| {
                    l.trim()
                        .strip_prefix("listening on ")
                        .map(|u| u.split_whitespace().next().unwrap_or(u).to_string())
                })
            };
            Ok((
                Prepared {
                    peer,
                    start: Box::new(start),
                },
                gst_version.replace("GStreamer ", "GStreamer rtsp-server "),
            ))
        }
        Peer::Floor(_) => Err("the kernel floor is no server".into()),
    }
}

/// One run: a fresh server, the load, the server's CPU over the window.
fn run_once(p: &Prepared, cfg: &PeersConfig, rep: usize) -> anyhow::Result<Run> {
    let (server, url) = (p.start)()?;
    let sampler = CpuSampler::start(server.pid(), Duration::from_millis(20));
    let mut load = fjord_client::load::LoadConfig::new(
        url.clone(),
        cfg.sessions,
        Duration::from_secs_f64(cfg.seconds),
    );
    load.tcp = cfg.tcp;
    load.gro = cfg.gro;
    load.setup_timeout = Duration::from_secs(30);
    let report = fjord_client::load::run(&load);
    let samples = sampler.finish();
    // Before the server goes: its counters go with it.
    let burst = (p.peer == Peer::Fjord).then(|| burst::read(server.admin.as_deref()));
    let alive = server.child_alive();
    let log = server.log_text();
    drop(server);
    let report = report.with_context(|| format!("{}: load on {url}", p.peer.name()))?;
    let end = report.started_unix_ns + (report.wall_s * 1e9) as i64;
    let window_s = report
        .sessions
        .iter()
        .filter(|s| s.playing)
        .map(|s| s.seconds)
        .fold(0.0, f64::max);
    let start = end - (window_s * 1e9) as i64;
    let over_window = |series: Vec<(i64, f64)>| match (cpu_at(&series, start), cpu_at(&series, end))
    {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    };
    let cpu_s = over_window(samples.iter().map(|&(t, c, _)| (t, c)).collect());
    let wait_s = over_window(samples.iter().map(|&(t, _, w)| (t, w)).collect());
    let t = &report.totals;
    let mut error = None;
    if report.sessions_playing < cfg.sessions || report.sessions_dropped > 0 {
        error = Some(format!(
            "{} of {} sessions played, {} dropped: {}",
            report.sessions_playing,
            cfg.sessions,
            report.sessions_dropped,
            report.errors.join("; ")
        ));
    } else if t.packets == 0 {
        error = Some("no packets arrived".into());
    } else if !cpu_s.is_finite() {
        error = Some("no CPU samples over the window".into());
    }
    if let Some(e) = &mut error
        && !alive
    {
        e.push_str(&format!(" (the server exited; it said: {log})"));
    }
    Ok(Run {
        rep,
        sessions: cfg.sessions,
        playing: report.sessions_playing,
        packets: t.packets,
        bytes: t.bytes,
        lost: t.lost,
        loss_percent: t.loss_percent,
        late: t.late,
        late_percent: t.late_percent,
        max_late_ms: t.max_lateness_ms,
        mbps_per_session: t.mbps_per_session,
        cpu_s,
        wait_s,
        window_s,
        us_per_packet: cpu_s * 1e6 / t.packets.max(1) as f64,
        setup_s: report.setup_s,
        error,
        burst: burst.clone().and_then(Result::ok),
        burst_note: burst.and_then(Result::err),
    })
}

impl ServerChild {
    fn child_alive(&self) -> bool {
        // SAFETY: signal 0 only checks the process exists.
        unsafe { libc::kill(self.child.id() as i32, 0) == 0 }
    }
}

/// Measures every installed server and the kernel floor `cfg.reps` times,
/// interleaved.
pub fn run(cfg: &PeersConfig) -> anyhow::Result<PeersReport> {
    anyhow::ensure!(cfg.sessions > 0, "--sessions must be at least 1");
    anyhow::ensure!(cfg.reps > 0, "--reps must be at least 1");
    anyhow::ensure!(
        cfg.seconds.is_finite() && cfg.seconds > 0.0,
        "--seconds must be positive"
    );
    anyhow::ensure!(
        cfg.floor_bursts.iter().all(|&b| b > 0),
        "--floor-bursts must be at least 1"
    );
    raise_fd_limit();
    let cpus = available_cpus();
    let load_cpu = (cfg.cpu + 1) % cpus;
    let mut notes = Vec::new();
    if cpus < 2 {
        notes.push("one CPU only: the servers and the receivers share it".to_string());
    }
    let secs = title_seconds(cfg.seconds);
    let title = make_title(&cfg.media_dir, secs)?;
    let scratch = tempfile::tempdir()?;
    let mut prepared = Vec::new();
    let mut results = Vec::new();
    for peer in Peer::ALL {
        let asked = match cfg.servers.contains(&peer) {
            true => Ok(()),
            false => Err(format!(
                "{}: skipped, not asked for (--servers)",
                peer.name()
            )),
        };
        match asked.and_then(|()| prepare(peer, cfg, &title, scratch.path())) {
            Ok((p, version)) => {
                prepared.push(p);
                results.push(PeerResult {
                    peer,
                    version,
                    runs: Vec::new(),
                    skipped: None,
                });
            }
            Err(why) => {
                eprintln!("{why}");
                results.push(PeerResult {
                    peer,
                    version: String::new(),
                    runs: Vec::new(),
                    skipped: Some(why),
                });
            }
        }
    }
    eprintln!("{MEDIAMTX_SKIP}");
    notes.push(MEDIAMTX_SKIP.to_string());
    let floor = floors(cfg, &title, &mut results, &mut notes)?;
    pin_current_thread(load_cpu);
    let floor_runs = floor.as_ref().map_or(0, |f| f.bursts.len());
    let bar = ProgressBar::new(((prepared.len() + floor_runs) * cfg.reps) as u64).with_style(
        ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    for rep in 0..cfg.reps {
        for p in &prepared {
            bar.set_message(running(p.peer, rep, cfg));
            let r = run_once(p, cfg, rep).unwrap_or_else(|e| failed(rep, cfg, &e));
            record(&bar, &mut results, p.peer, r);
        }
        if let Some(f) = &floor {
            for &b in &f.bursts {
                bar.set_message(running(Peer::Floor(b), rep, cfg));
                let r =
                    floor::run_once(cfg, &f.ring, b, rep).unwrap_or_else(|e| failed(rep, cfg, &e));
                record(&bar, &mut results, Peer::Floor(b), r);
            }
        }
    }
    bar.finish_and_clear();
    Ok(PeersReport {
        config: cfg.clone(),
        load_cpu,
        title: format!(
            "{} ({secs} s, 1280x720 25 fps H.264 CBR 3.9 Mbit/s + AAC 128 kbit/s, MPEG-TS muxrate 4.5 Mbit/s, made by ffmpeg)",
            title.display()
        ),
        results,
        notes,
    })
}

/// The kernel floor's bursts and its prebuilt packets.
struct Floors {
    bursts: Vec<usize>,
    ring: floor::Ring,
}

fn floors(
    cfg: &PeersConfig,
    title: &Path,
    results: &mut Vec<PeerResult>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<Floors>> {
    let mut bursts = cfg.floor_bursts.clone();
    bursts.sort_unstable();
    bursts.dedup();
    if cfg.tcp && !bursts.is_empty() {
        // Its kernel path is UDP's: no floor of interleaved TCP.
        notes.push("kernel floor: skipped, it is of the UDP path (--tcp)".into());
        bursts.clear();
    }
    if bursts.is_empty() {
        return Ok(None);
    }
    for &b in &bursts {
        results.push(PeerResult {
            peer: Peer::Floor(b),
            version: floor::label(b, cfg.sessions, cfg.gro),
            runs: Vec::new(),
            skipped: None,
        });
    }
    let ring = floor::Ring::from_title(title)?;
    Ok(Some(Floors { bursts, ring }))
}

fn running(peer: Peer, rep: usize, cfg: &PeersConfig) -> String {
    format!(
        "{}, run {}/{}: {} sessions for {} s",
        peer.tag(),
        rep + 1,
        cfg.reps,
        cfg.sessions,
        cfg.seconds
    )
}

fn failed(rep: usize, cfg: &PeersConfig, e: &anyhow::Error) -> Run {
    Run {
        rep,
        sessions: cfg.sessions,
        cpu_s: f64::NAN,
        us_per_packet: f64::NAN,
        error: Some(format!("{e:#}")),
        ..Run::default()
    }
}

/// Prints a run and adds it to its server's results.
fn record(bar: &ProgressBar, results: &mut [PeerResult], peer: Peer, r: Run) {
    let burst = match (r.burst, &r.burst_note) {
        (Some(b), _) => format!(", {b:.2} packets/send"),
        (None, Some(why)) => format!(", packets/send not read: {why}"),
        (None, None) => String::new(),
    };
    bar.suspend(|| {
        eprintln!(
            "{:<22} run {}: {} packets, CPU {:.3} s over {:.2} s, {:.2} µs/packet, loss {:.4} %, late {:.4} %, {:.2} Mbit/s per session{burst}{}",
            peer.tag(),
            r.rep + 1,
            r.packets,
            r.cpu_s,
            r.window_s,
            r.us_per_packet,
            r.loss_percent,
            r.late_percent,
            r.mbps_per_session,
            r.error
                .as_deref()
                .map(|e| format!("; DOES NOT COUNT: {e}"))
                .unwrap_or_default()
        )
    });
    if let Some(res) = results.iter_mut().find(|x| x.peer == peer) {
        res.runs.push(r);
    }
    bar.inc(1);
}

/// The CSV of every run.
pub fn csv(r: &PeersReport) -> String {
    let mut s = String::from(
        "server,version,transport,rep,sessions,playing,packets,bytes,cpu_s,wait_s,window_s,us_per_packet,lost,loss_percent,late,late_percent,max_late_ms,mbps_per_session,setup_s,packets_per_send,error\n",
    );
    let transport = if r.config.tcp { "tcp" } else { "udp" };
    for p in &r.results {
        for x in &p.runs {
            s.push_str(&format!(
                "{},{},{},{},{},{},{},{},{:.4},{:.4},{:.3},{:.4},{},{:.5},{},{:.5},{:.3},{:.4},{:.3},{},{}\n",
                p.peer.name(),
                p.version.replace(',', ";"),
                transport,
                x.rep + 1,
                x.sessions,
                x.playing,
                x.packets,
                x.bytes,
                x.cpu_s,
                x.wait_s,
                x.window_s,
                x.us_per_packet,
                x.lost,
                x.loss_percent,
                x.late,
                x.late_percent,
                x.max_late_ms,
                x.mbps_per_session,
                x.setup_s,
                x.burst.map_or(String::new(), |b| format!("{b:.3}")),
                x.error.as_deref().unwrap_or("").replace([',', '\n'], ";")
            ));
        }
    }
    s
}

/// The machine, for the report: CPU model, CPUs, kernel.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    // Online CPUs, not this thread's affinity (the bench pins itself).
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    format!("{model}, {cpus} CPUs, Linux {kernel}")
}

/// fjord against the kernel floor at its measured burst.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FjordFloor {
    /// fjord's packets per send, median over its runs.
    pub burst: f64,
    /// The measured floor burst nearest it, and fjord's ratio to that row.
    pub nearest: usize,
    pub x_nearest: f64,
    /// The floor interpolated at fjord's burst, and the ratio to it.
    pub at: floor::FloorAt,
    pub x_at: f64,
}

impl FjordFloor {
    /// The "× kernel floor" cell of fjord's row.
    pub fn describe(&self) -> String {
        let (b, at) = (self.burst, self.at);
        let from = if at.lo != at.hi {
            format!("interpolated from B={} and B={}", at.lo, at.hi)
        } else if (b - at.lo as f64).abs() < 0.05 {
            format!("measured at B={}", at.lo)
        } else {
            format!("taken as B={}'s, the nearest measured", at.lo)
        };
        format!(
            "{:.1}× (measured {b:.1} packets/send; floor at {b:.1} {from}); {:.1}× the nearest row, B={}",
            self.x_at, self.x_nearest, self.nearest
        )
    }
}

/// The median CPU per packet of `peer`'s good runs.
fn median_us(r: &PeersReport, peer: Peer) -> Option<f64> {
    r.results
        .iter()
        .find(|p| p.peer == peer)
        .and_then(PeerResult::us_per_packet)
        .map(|s| s.median)
}

/// fjord's burst, if measured.
pub fn fjord_burst(r: &PeersReport) -> Option<f64> {
    r.results
        .iter()
        .find(|p| p.peer == Peer::Fjord)
        .and_then(PeerResult::burst)
}

/// fjord's CPU per packet over the floor's at its measured burst; none
/// when the burst, fjord's runs or every floor row are missing. A floor
/// row that lost packets fell behind the load (its sender could not keep
/// up): it is no floor, and not compared with.
pub fn fjord_floor(r: &PeersReport) -> Option<FjordFloor> {
    let kept = |p: &PeerResult| {
        p.loss_percent()
            .is_some_and(|l| l <= curve::MAX_LOSS_PERCENT)
    };
    let rows: Vec<(usize, f64)> = r
        .results
        .iter()
        .filter(|p| kept(p))
        .filter_map(|p| match p.peer {
            Peer::Floor(b) => Some((b, median_us(r, p.peer)?)),
            _ => None,
        })
        .collect();
    let burst = fjord_burst(r)?;
    let fjord = median_us(r, Peer::Fjord)?;
    let bursts: Vec<usize> = rows.iter().map(|&(b, _)| b).collect();
    let nearest = floor::nearest_burst(&bursts, burst)?;
    let near_us = rows.iter().find(|&&(b, _)| b == nearest)?.1;
    let at = floor::floor_at(&rows, burst)?;
    Some(FjordFloor {
        burst,
        nearest,
        x_nearest: floor::times_floor(fjord, near_us)?,
        at,
        x_at: floor::times_floor(fjord, at.us)?,
    })
}

/// How the floor was measured and which of its rows fjord is held to.
fn floor_note(r: &PeersReport) -> Option<String> {
    let bursts: Vec<String> = r
        .results
        .iter()
        .filter_map(|p| match p.peer {
            Peer::Floor(b) => Some(b.to_string()),
            _ => None,
        })
        .collect();
    if bursts.is_empty() {
        return None;
    }
    let pps = floor::session_pps();
    let grid_ms = floor::GRID_NS as f64 / 1e6;
    let fjord = match fjord_burst(r) {
        Some(b) => format!("{b:.2} packets per send (median over its runs)"),
        None => "not read (see above)".into(),
    };
    Some(format!(
        "Kernel floor: no server; a thread pinned to CPU {} sends prebuilt RTP packets (12-byte \
         header + 1316 bytes of the title, from a ring of them) on a connected UDP socket per \
         session to {} UDP receivers on CPU {} (epoll at most every 1 ms, recvmmsg of 32, kernel \
         timestamps, 4 MiB buffers: as `fjord load`), {pps:.1} packets/s per session, sessions \
         phased evenly, in bursts of B per session per send (one `sendmsg` with UDP_SEGMENT per \
         burst; a `send` per packet for B = 1), waking on a {grid_ms} ms grid as fjord's \
         engine does at its default burst limit (the bursts due within a step leave together). CPU is that thread's (CLOCK_THREAD_CPUTIME_ID) over {:.1} s after \
         0.5 s of warm-up, per packet the receivers counted. Bursts measured: {}. fjord's burst \
         is measured: its UDP data path's packets over its send system calls \
         (`{}` / `{}` from its `/metrics`, summed over engine threads, read at the end of each \
         run): {fjord}. Its × kernel floor is against the floor interpolated at that burst \
         (linear in log B between the measured bursts around it; outside them, the nearest) and \
         against the measured row nearest it.",
        r.config.cpu,
        r.config.sessions,
        r.load_cpu,
        r.config.seconds,
        bursts.join(", "),
        burst::PACKETS,
        burst::SEND_CALLS,
    ))
}

/// The markdown report: the table of medians, then how it was measured.
pub fn markdown(r: &PeersReport, command: &str, machine_note: &str) -> String {
    let c = &r.config;
    let fjord = r
        .results
        .iter()
        .find(|p| p.peer == Peer::Fjord)
        .and_then(PeerResult::us_per_packet)
        .map(|s| s.median);
    let mut md = String::new();
    md.push_str("# fjord bench peers: server CPU per packet, fjord and its open-source peers\n\n");
    md.push_str(&format!("Command: `{command}`\n\n"));
    md.push_str(&format!("Machine: {machine_note}\n\n"));
    md.push_str(&format!(
        "{} sessions over {} to 127.0.0.1 for {} s per run, {} runs per server (interleaved), medians; \
         µs CPU/packet with the 95 % bootstrap interval of its median.\n\n",
        c.sessions,
        match (c.tcp, c.gro) {
            (true, _) => "TCP (interleaved)",
            (false, false) => "UDP to plain receivers (no UDP GRO: a datagram per packet, as players)",
            (false, true) => "UDP to receivers with UDP GRO (`--gro`: cheaper for the server than players)",
        },
        c.seconds,
        c.reps
    ));
    let x_floor = fjord_floor(r);
    md.push_str("| server | sessions | packets | bytes/packet | CPU s | % of a core | waited for CPU s | µs CPU/packet | ratio to fjord | Mbit/s per session | loss | late >2 ms | × kernel floor |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for p in &r.results {
        if p.skipped.is_some() {
            continue;
        }
        let good = p.good().count();
        let Some(us) = p.us_per_packet() else {
            md.push_str(&format!(
                "| {} | {} | no run counted | | | | | | | | | | |\n",
                p.version, c.sessions
            ));
            continue;
        };
        let ratio = match fjord {
            Some(f) if f > 0.0 => format!("{:.1}×", us.median / f),
            _ => "–".into(),
        };
        md.push_str(&format!(
            "| {}{} | {} | {:.0} | {:.0} | {:.3} | {:.0} % | {:.3} | {:.2} [{:.2}, {:.2}] | {} | {:.2} | {:.3} % | {:.3} % | {} |\n",
            p.version,
            if good < p.runs.len() {
                format!(" ({good} of {} runs counted)", p.runs.len())
            } else {
                String::new()
            },
            c.sessions,
            p.med(|x| x.packets as f64),
            p.med(|x| x.bytes as f64 / x.packets.max(1) as f64),
            p.med(|x| x.cpu_s),
            p.med(|x| 100.0 * x.cpu_s / x.window_s),
            p.med(|x| x.wait_s),
            us.median,
            us.ci_low,
            us.ci_high,
            ratio,
            p.med(|x| x.mbps_per_session),
            p.med(|x| x.loss_percent),
            p.med(|x| x.late_percent),
            match (p.peer, &x_floor) {
                (Peer::Fjord, Some(f)) => f.describe(),
                _ => "–".into(),
            },
        ));
    }
    md.push('\n');
    for p in &r.results {
        if let Some(why) = &p.skipped {
            md.push_str(&format!("- {why}\n"));
        }
        for x in &p.runs {
            if let Some(e) = &x.error {
                md.push_str(&format!(
                    "- {} run {} does not count: {e}\n",
                    p.peer.name(),
                    x.rep + 1
                ));
            }
            if let Some(why) = &x.burst_note {
                md.push_str(&format!(
                    "- {} run {}: packets per send not read: {why}\n",
                    p.peer.name(),
                    x.rep + 1
                ));
            }
        }
    }
    for n in &r.notes {
        md.push_str(&format!("- {n}\n"));
    }
    if let Some(note) = floor_note(r) {
        md.push_str(&format!("- {note}\n"));
    }
    md.push_str(&format!(
        "\nTitle: {}. Every session reads it from the start, from the page cache.\n\n",
        r.title
    ));
    md.push_str(&format!(
        "How: each server is a child process started afresh for each run and pinned, all its \
         threads, to CPU {} (`sched_setaffinity`){}; fjord as `fjord serve` with one engine thread \
         and its default data path, its admin listener on loopback (read once per run, after \
         the window, for its send counters); live555MediaServer serving its working directory; \
         GStreamer's rtsp-server from `bench/peers/gst_rtsp_vod.py` with one pipeline per client \
         (`filesrc ! tsparse set-timestamps=true ! rtpmp2tpay`, not shared). The receivers are \
         `fjord load` (one thread, epoll + recvmmsg) in the bench process, pinned to CPU {}. \
         CPU is the server's threads' time on a CPU (`/proc/PID/task/*/schedstat`, in ns; \
         `/proc/PID/stat` counts 10 ms clock ticks), sampled every 20 ms and interpolated to the receive window: from the first PLAY reply \
         to the end of receiving. Packets are the RTP packets the receivers got in that window; \
         bytes/packet is their mean size with the 12-byte RTP header (7 TS packets make \
         1328). Waited for CPU is the \
         time the server's threads were ready to run while the CPU ran something else \
         (`/proc/PID/task/*/schedstat`, summed over its threads, so threads of one server \
         waiting for each other on its one CPU count too): on a shared machine, a server that \
         falls behind because it was not given the CPU shows it here. Mbit/s per session is what each \
         session received over its own time; the title has 4.5 Mbit/s of TS (4.54 with RTP \
         headers), so less means the server fell behind; live555 stamps its RTP packets with the \
         wall-clock time it read them from the file, so its lateness cannot show that. Loss is from RTP \
         sequence numbers; late is packets more than 2 ms after their schedule (the session's \
         first arrival plus the RTP timestamp offset, so a server that sends its first packets \
         ahead of the rest shows the rest as late). CSV of every run: peers.csv.\n",
        c.cpu,
        if c.realtime {
            format!(
                " and run under SCHED_FIFO priority {REALTIME_PRIORITY} (`--realtime`, the same \
                 for every server: other work on the machine cannot take their CPU)"
            )
        } else {
            String::new()
        },
        r.load_cpu
    ));
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_interpolates_between_samples() {
        let s = [(0, 1.0), (100, 2.0), (300, 2.0), (400, 6.0)];
        assert_eq!(cpu_at(&s, 0), Some(1.0));
        assert_eq!(cpu_at(&s, 50), Some(1.5));
        assert_eq!(cpu_at(&s, 200), Some(2.0));
        assert_eq!(cpu_at(&s, 350), Some(4.0));
        assert_eq!(cpu_at(&s, 400), Some(6.0));
        assert_eq!(cpu_at(&s, -1), None);
        assert_eq!(cpu_at(&s, 401), None);
        assert_eq!(cpu_at(&[], 0), None);
    }

    #[test]
    fn live555_banner() {
        let b = "Play streams from this server using the URL\n\trtsp://192.0.2.2/<filename>\n";
        assert_eq!(live555_port(b), Some(554));
        assert_eq!(
            live555_port("\trtsp://10.0.0.1:8554/<filename>"),
            Some(8554)
        );
        assert_eq!(
            live555_port("\trtsp://[fd00::2]:8554/<filename>"),
            Some(8554)
        );
        assert_eq!(live555_port("\trtsp://[fd00::2]/<filename>"), Some(554));
        assert_eq!(live555_port("LIVE555 Media Server"), None);
        let v = "\tversion 1.16 (LIVE555 Streaming Media library version 2026.10.24).";
        assert_eq!(live555_version(v).as_deref(), Some("2026.10.24"));
        assert_eq!(live555_version("nothing"), None);
    }

    #[test]
    fn title_outlasts_the_run() {
        assert_eq!(title_seconds(10.0), 60);
        assert_eq!(title_seconds(40.0), 60);
        assert_eq!(title_seconds(41.0), 90);
        assert_eq!(title_seconds(100.0), 120);
    }

    fn report() -> PeersReport {
        let run = |rep, us: f64| Run {
            rep,
            sessions: 20,
            playing: 20,
            packets: 85_000,
            bytes: 85_000 * 1328,
            cpu_s: us * 85_000.0 / 1e6,
            window_s: 10.0,
            us_per_packet: us,
            mbps_per_session: 4.6,
            ..Run::default()
        };
        PeersReport {
            config: PeersConfig {
                sessions: 20,
                seconds: 10.0,
                tcp: false,
                reps: 3,
                cpu: 0,
                realtime: false,
                gro: false,
                fjord_exe: "fjord".into(),
                media_dir: "m".into(),
                floor_bursts: vec![1, 16],
                servers: Peer::ALL.to_vec(),
                udp_sockets: "shared".into(),
            },
            load_cpu: 1,
            title: "t.ts".into(),
            results: vec![
                PeerResult {
                    peer: Peer::Fjord,
                    version: "fjord 0.1.0".into(),
                    runs: vec![
                        Run {
                            burst: Some(13.0),
                            ..run(0, 1.0)
                        },
                        Run {
                            burst: Some(12.0),
                            ..run(1, 1.2)
                        },
                        Run {
                            burst: Some(14.0),
                            ..run(2, 0.9)
                        },
                    ],
                    skipped: None,
                },
                PeerResult {
                    peer: Peer::Live555,
                    version: "LIVE555 2026.10.24".into(),
                    runs: vec![
                        run(0, 12.0),
                        Run {
                            error: Some("no packets arrived".into()),
                            ..run(1, 0.0)
                        },
                        run(2, 14.0),
                    ],
                    skipped: None,
                },
                PeerResult {
                    peer: Peer::Gst,
                    version: String::new(),
                    runs: vec![],
                    skipped: Some("GStreamer rtsp-server: skipped, not installed".into()),
                },
                PeerResult {
                    peer: Peer::Floor(1),
                    version: floor::label(1, 20, false),
                    runs: vec![run(0, 4.0)],
                    skipped: None,
                },
                PeerResult {
                    peer: Peer::Floor(16),
                    version: floor::label(16, 20, false),
                    runs: vec![run(0, 0.5)],
                    skipped: None,
                },
            ],
            notes: vec![MEDIAMTX_SKIP.into()],
        }
    }

    #[test]
    fn markdown_has_medians_ratios_and_skips() {
        let md = markdown(&report(), "fjord bench peers", "a 2 vCPU shared VM");
        assert!(md.contains("Command: `fjord bench peers`"), "{md}");
        assert!(
            md.contains("| fjord 0.1.0 | 20 | 85000 | 1328 | 0.085 | 1 % | 0.000 | 1.00 "),
            "{md}"
        );
        // live555: the failed run is left out, median of 12 and 14.
        assert!(md.contains("(2 of 3 runs counted)"), "{md}");
        assert!(md.contains("| 13.00 ["), "{md}");
        assert!(md.contains("| 13.0× |"), "{md}");
        assert!(
            md.contains("live555MediaServer run 2 does not count"),
            "{md}"
        );
        assert!(md.contains("GStreamer rtsp-server: skipped"), "{md}");
        assert!(md.contains("MediaMTX: skipped"), "{md}");
        // fjord's 13 packets per send: the floor there is 0.762 µs, log-
        // linear between B=1 (4.0) and B=16 (0.5); 16 is the nearest row.
        assert!(
            md.contains(
                "| 1.3× (measured 13.0 packets/send; floor at 13.0 interpolated from B=1 and \
                 B=16); 2.0× the nearest row, B=16 |"
            ),
            "{md}"
        );
        assert!(md.contains("13.00 packets per send (median"), "{md}");
        assert!(
            md.contains(
                "| kernel floor: prebuilt packets, GSO bursts of 16, 20 plain receivers | 20 |"
            ),
            "{md}"
        );
        assert!(md.contains("| 0.50 ["), "{md}");
        assert!(md.contains("Bursts measured: 1, 16."), "{md}");
    }

    #[test]
    fn fjord_against_the_floor_at_its_measured_burst() {
        let mut r = report();
        let f = fjord_floor(&r).unwrap();
        assert_eq!((f.burst, f.nearest, f.at.lo, f.at.hi), (13.0, 16, 1, 16));
        assert!((f.x_nearest - 2.0).abs() < 1e-9, "{f:?}");
        let floor13 = 4.0 - 3.5 * 13f64.ln() / 16f64.ln();
        assert!((f.x_at - 1.0 / floor13).abs() < 1e-9, "{f:?}");
        // Past the largest floor burst: that row, both ways.
        for x in &mut r.results[0].runs {
            x.burst = Some(20.0);
        }
        let f = fjord_floor(&r).unwrap();
        assert_eq!((f.at.lo, f.at.hi, f.x_at), (16, 16, f.x_nearest));
        assert!(
            f.describe()
                .contains("floor at 20.0 taken as B=16's, the nearest measured")
        );
        // Not read: no comparison, and the report says why.
        for x in &mut r.results[0].runs {
            x.burst = None;
            x.burst_note = Some("GET /metrics: refused".into());
        }
        assert_eq!(fjord_floor(&r), None);
        let md = markdown(&r, "c", "m");
        assert!(
            md.contains("- fjord run 2: packets per send not read: GET /metrics: refused"),
            "{md}"
        );
        assert!(md.contains("not read (see above)"), "{md}");
    }

    #[test]
    fn a_floor_row_that_fell_behind_is_not_compared_with() {
        let mut r = report();
        let b1 = (r.results.iter_mut())
            .find(|p| p.peer == Peer::Floor(1))
            .unwrap();
        for x in &mut b1.runs {
            x.loss_percent = 25.0;
        }
        // Only B=16 is left: fjord's 13 is compared with it.
        let f = fjord_floor(&r).unwrap();
        assert_eq!((f.at.lo, f.at.hi, f.x_at), (16, 16, f.x_nearest));
    }

    #[test]
    fn csv_has_a_row_per_run() {
        let csv = csv(&report());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 3 + 3 + 2);
        let cols = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols), "{csv}");
        assert!(lines[5].ends_with("no packets arrived"), "{csv}");
        assert!(lines[0].ends_with(",packets_per_send,error"), "{csv}");
        assert!(lines[1].ends_with(",13.000,"), "{csv}");
        assert!(lines[4].ends_with(",,"), "{csv}");
        assert!(
            lines[8].starts_with("kernel floor,kernel floor: prebuilt packets; GSO bursts of 16;"),
            "{csv}"
        );
    }
}

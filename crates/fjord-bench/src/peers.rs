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
//! MediaMTX ([`mediamtx`]) has no video on demand: its row is a live
//! fan-out of the title pushed once by ffmpeg to the same receivers,
//! labelled so. A peer that is not installed is skipped with the package
//! that provides it (MediaMTX with [`MEDIAMTX_SKIP`]). Children
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
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{
    capacity::{available_cpus, pin_current_thread, raise_fd_limit},
    stats::{Summary, median},
};

pub mod burst;
pub mod curve;
pub mod floor;
pub mod idle;
pub mod mediamtx;
mod report;
mod sampler;
mod server;

pub use mediamtx::MEDIAMTX_SKIP;
pub use report::{FjordFloor, csv, fjord_burst, fjord_floor, machine, markdown};
pub use sampler::{CpuSampler, cpu_at};
use server::START_TIMEOUT;
pub use server::{
    REALTIME_PRIORITY, ServerChild, find_gst_python, find_live555, live555_port, live555_version,
};

/// The GStreamer server program, written to a temporary file at run time.
pub const GST_SCRIPT: &str = include_str!("../../../bench/peers/gst_rtsp_vod.py");

/// The title's mux rate, bits per second.
pub const BITRATE: u64 = 4_500_000;

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
    /// fjord over RTSPS (`--tcp` only: RTP interleaved inside TLS).
    FjordTls,
    Live555,
    Gst,
    /// A live relay of one pushed copy, not video on demand.
    MediaMtx,
    Floor(usize),
}

impl Peer {
    pub const ALL: [Peer; 5] = [
        Peer::Fjord,
        Peer::FjordTls,
        Peer::Live555,
        Peer::Gst,
        Peer::MediaMtx,
    ];

    /// The server named `name` on the command line: fjord, live555, gst.
    pub fn parse(name: &str) -> Option<Peer> {
        match name {
            "fjord" => Some(Peer::Fjord),
            "fjord-tls" => Some(Peer::FjordTls),
            "live555" => Some(Peer::Live555),
            "gst" | "gstreamer" => Some(Peer::Gst),
            "mediamtx" => Some(Peer::MediaMtx),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Peer::Fjord => "fjord",
            Peer::FjordTls => "fjord over RTSPS",
            Peer::Live555 => "live555MediaServer",
            Peer::Gst => "GStreamer rtsp-server",
            Peer::MediaMtx => "MediaMTX",
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

/// A server ready to be measured, with what it serves.
struct Prepared {
    peer: Peer,
    start: Start,
}

fn prepare(
    peer: Peer,
    cfg: &PeersConfig,
    title: &Path,
    scratch: &Path,
) -> Result<(Prepared, String), String> {
    let (cpu, rt) = (cfg.cpu, cfg.realtime);
    let name = title_name(title);
    match peer {
        Peer::Fjord => {
            fjord(cfg, title, scratch, false).map(|(start, v)| (Prepared { peer, start }, v))
        }
        Peer::FjordTls if !cfg.tcp => {
            Err("fjord over RTSPS: skipped, RTSPS carries RTP interleaved (--tcp)".into())
        }
        Peer::FjordTls => {
            fjord(cfg, title, scratch, true).map(|(start, v)| (Prepared { peer, start }, v))
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
        Peer::MediaMtx => {
            let exe = mediamtx::find()?;
            let (title, dir) = (title.to_path_buf(), scratch.to_path_buf());
            let publisher_cpu = (cpu + 1) % available_cpus();
            let start = move || mediamtx::start(&exe, &dir, &title, cpu, publisher_cpu, rt);
            let version = format!(
                "{} (live relay: the title's video pushed once by ffmpeg, fanned out; no disk)",
                mediamtx::version(&mediamtx::find()?)
            );
            Ok((
                Prepared {
                    peer,
                    start: Box::new(start),
                },
                version,
            ))
        }
        Peer::Floor(_) => Err("the kernel floor is no server".into()),
    }
}

/// Makes a fresh server; returns it and the title's URL.
type Start = Box<dyn Fn() -> anyhow::Result<(ServerChild, String)>>;

/// `fjord serve` with one engine thread; with `tls`, a certificate made by
/// `fjord cert` and the title's `rtsps://` URL.
fn fjord(
    cfg: &PeersConfig,
    title: &Path,
    scratch: &Path,
    tls: bool,
) -> Result<(Start, String), String> {
    let (cpu, rt) = (cfg.cpu, cfg.realtime);
    let name = title_name(title);
    let config = scratch.join(format!("fjord-serve{}.toml", if tls { "-tls" } else { "" }));
    let root = title.parent().unwrap_or(Path::new(".")).to_path_buf();
    // Admission control must not refuse sessions: no saved budget.
    let mut toml = format!(
        "root = {root:?}\nbind = \"127.0.0.1\"\nport = 0\nthreads = 1\n\
         capacity_pps_per_core = 1000000000000\nmax_sessions = 100000\n\
         max_connections = 100000\nmax_connections_per_address = 0\nmax_sessions_per_address = 0\n\
         udp_sockets = {:?}\n",
        cfg.udp_sockets
    );
    if tls {
        let out = Command::new(&cfg.fjord_exe)
            .args(["cert", "--out"])
            .arg(scratch)
            .output()
            .map_err(|e| format!("fjord cert: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "fjord cert: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        toml.push_str(&String::from_utf8_lossy(&out.stdout));
        toml.push_str("\nrtsps_port = 0\n");
    }
    std::fs::write(&config, toml).map_err(|e| format!("fjord: {e}"))?;
    let exe = cfg.fjord_exe.clone();
    let scheme = if tls { "rtsps" } else { "rtsp" };
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
            // Printed before the RTSP lines.
            if let Some(a) = l.strip_prefix("fjord: status page on http://") {
                admin = Some(a.trim_end_matches('/').to_string());
                return None;
            }
            let addr = l
                .strip_prefix(&format!("fjord: listening on {scheme}://"))?
                .trim_end_matches('/');
            Some(format!("{scheme}://{addr}/{name}"))
        })?;
        server.admin = admin;
        Ok((server, url))
    };
    let version = format!(
        "fjord {}{}",
        env!("CARGO_PKG_VERSION"),
        if tls {
            " over RTSPS (rustls, ring; the client's first suite)"
        } else {
            ""
        }
    );
    Ok((Box::new(start), version))
}

fn title_name(title: &Path) -> String {
    title
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("peers.ts")
        .to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_outlasts_the_run() {
        assert_eq!(title_seconds(10.0), 60);
        assert_eq!(title_seconds(40.0), 60);
        assert_eq!(title_seconds(41.0), 90);
        assert_eq!(title_seconds(100.0), 120);
    }
}

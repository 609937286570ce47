//! `fjord bench live`: one ffmpeg publisher, N viewers of its live stream,
//! and, in the same run, N viewers of the same file as a VOD title.
//!
//! The source is made once with ffmpeg (lavfi `testsrc2` + `sine`, 720p25
//! H.264 at 5 Mbit/s CBR and AAC, MP4) and kept. For each viewer count:
//! - **fjord live**: `fjord serve` (one engine thread, pinned, as `bench
//!   peers` runs it) takes ffmpeg publishing the source (`-re`, RTSP over
//!   UDP, `-c copy`); N plain receivers (`fjord load`) view the live path.
//! - **fjord VOD**: the same server, N receivers playing the source file.
//! - **kernel floor** ([`floor`]): a relay with no server, one thread
//!   sending each gathered frame to the same N plain receivers as fjord's
//!   engine does (video only).
//! - **MediaMTX** (where a binary is found, [`peers::mediamtx::find`]):
//!   the same publisher to it, the same N receivers.
//!
//! CPU per packet is the server's CPU over the receive window over the
//! packets the receivers got (as `bench peers`). Memory per viewer is the
//! server's anonymous resident memory at its highest while the viewers play, less
//! before they came, over N. Latency added by the server: the publisher is
//! an ffmpeg `tee` that writes each video packet to the server and, the
//! same packet, to a probe socket here; [`PROBES`] more viewers, set up
//! after the N so they are the last the server sends to, receive the
//! stream; a packet's latency is its kernel arrival time at a viewer less
//! at the probe, matched by the payload's hash (the RTP header differs per
//! viewer, the payload does not).

mod floor;
mod probe;
pub mod report;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context;

use crate::{
    capacity::{available_cpus, pin_current_thread, raise_fd_limit},
    peers::{self, CpuSampler, ServerChild, cpu_at},
};

/// Viewers set up after the load, whose packets give the latency.
pub const PROBES: usize = 2;
/// The source's video bit rate, kbit/s (with 128 kbit/s of AAC: 5 Mbit/s).
const VIDEO_KBPS: u64 = 4872;

#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// Viewer counts, each measured in turn.
    pub viewers: Vec<usize>,
    /// Receive seconds per row.
    pub seconds: f64,
    /// The CPU the server is pinned to (the receivers take the next one).
    pub cpu: usize,
    pub realtime: bool,
    pub fjord_exe: PathBuf,
    pub media_dir: PathBuf,
    /// Measure MediaMTX too, where a binary is found.
    pub mediamtx: bool,
}

/// One server at one viewer count.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub server: String,
    pub viewers: usize,
    pub playing: usize,
    pub packets: u64,
    pub loss_percent: f64,
    pub cpu_s: f64,
    pub window_s: f64,
    pub us_per_packet: f64,
    /// Resident memory added per viewer, KiB.
    pub kib_per_viewer: f64,
    /// Latency added, ms: p50, p99, max and how many packets were matched.
    pub latency: Option<(f64, f64, f64, usize)>,
    pub error: Option<String>,
}

pub struct LiveReport {
    pub config: LiveConfig,
    /// The viewers', the publisher's and the relay's receivers' CPU.
    pub load_cpu: usize,
    pub source: String,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

/// Makes the source with ffmpeg unless it is there.
pub fn make_source(dir: &Path, seconds: u64) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("live-5mbit-{seconds}s.mp4"));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".live-5mbit-{seconds}s.tmp.mp4"));
    let kbps = VIDEO_KBPS.to_string() + "k";
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", &seconds.to_string(), "-c:v", "libx264"])
        .args(["-preset", "veryfast", "-tune", "zerolatency", "-g", "50"])
        .args(["-b:v", &kbps, "-minrate", &kbps, "-maxrate", &kbps])
        .args(["-bufsize", "2500k", "-x264-params", "nal-hrd=cbr"])
        .args(["-c:a", "aac", "-b:a", "128k", "-movflags", "+faststart"])
        .arg(&tmp)
        .output()
        .context("running ffmpeg")?;
    anyhow::ensure!(
        out.status.success(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// ffmpeg publishing `source` in real time, looped, to `url` over RTSP,
/// its RTP over UDP from ports `ports` (which the tap watches).
fn publisher(source: &Path, url: &str, (lo, hi): (u16, u16)) -> Command {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-nostdin", "-loglevel", "warning"])
        .args(["-re", "-stream_loop", "-1", "-i"])
        .arg(source)
        .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "udp"])
        .args(["-min_port", &lo.to_string(), "-max_port", &hi.to_string()])
        .arg(url);
    cmd
}

/// A range of UDP ports for the publisher, likely free: above one the
/// kernel just gave out.
fn publisher_ports() -> anyhow::Result<(u16, u16)> {
    let p = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let lo = (p & !1).min(65_535 - 100);
    Ok((lo, lo + 99))
}

/// `fjord serve` with one engine thread, a publisher `pub` for `live/**`,
/// anyone reading; returns it and its RTSP base URL.
fn start_fjord(
    cfg: &LiveConfig,
    root: &Path,
    scratch: &Path,
) -> anyhow::Result<(ServerChild, String)> {
    let config = scratch.join("fjord-live.toml");
    let toml = format!(
        "root = {root:?}\nbind = \"127.0.0.1\"\nport = 0\nthreads = 1\n\
         capacity_pps_per_core = 1000000000000\nmax_sessions = 100000\n\
         max_connections = 100000\nmax_connections_per_address = 0\n\
         max_sessions_per_address = 0\n\
         [[user]]\nname = \"pub\"\npassword = \"secret\"\npaths = [\"**\"]\npublish = [\"live/**\"]\n\
         [[user]]\npaths = [\"**\"]\n"
    );
    std::fs::write(&config, toml)?;
    let mut cmd = Command::new(&cfg.fjord_exe);
    cmd.arg("serve")
        .args([
            "--http-port",
            "0",
            "--admin-bind",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config);
    ServerChild::spawn(cmd, cfg.cpu, cfg.realtime, Duration::from_secs(15), |l| {
        let addr = l.trim().strip_prefix("fjord: listening on rtsp://")?;
        Some(format!("rtsp://{}", addr.trim_end_matches('/')))
    })
}

/// MediaMTX on loopback; returns it and its RTSP base URL.
fn start_mediamtx(
    cfg: &LiveConfig,
    exe: &Path,
    scratch: &Path,
) -> anyhow::Result<(ServerChild, String)> {
    let rtsp = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let (rtp, _) = fjord_client::bind_pair("127.0.0.1".parse()?)?;
    let port = rtp.local_addr()?.port();
    drop(rtp);
    let yml = scratch.join("mediamtx.yml");
    std::fs::write(&yml, peers::mediamtx::config(rtsp, port))?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(scratch).arg(&yml);
    let (server, _) =
        ServerChild::spawn(cmd, cfg.cpu, cfg.realtime, Duration::from_secs(15), |l| {
            l.contains("[RTSP] started").then(String::new)
        })?;
    Ok((server, format!("rtsp://127.0.0.1:{rtsp}")))
}

/// Starts the publisher to `url` with its probe, waiting until the server
/// serves the path (a DESCRIBE answers 200).
fn publish(
    server: &mut ServerChild,
    source: &Path,
    (publish_url, view_url): (&str, &str),
    cpu: usize,
) -> anyhow::Result<probe::Tap> {
    let tap = probe::Tap::open(publisher_ports()?)?;
    let (push, _) = ServerChild::launch(publisher(source, publish_url, tap.ports), cpu, false)?;
    server.helpers.push(push);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let described = fjord_client::RtspClient::connect(view_url)
            .and_then(|mut c| c.describe())
            .is_ok();
        if described {
            // A GOP (2 s) in the join ring before memory is measured.
            std::thread::sleep(Duration::from_secs(3));
            return Ok(tap);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline && server.helpers[0].child_alive(),
            "the publisher did not come online: {} | ffmpeg: {}",
            server.log_text(),
            server.helpers[0].log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs every row of `cfg`.
pub fn run(cfg: &LiveConfig) -> anyhow::Result<LiveReport> {
    anyhow::ensure!(
        !cfg.viewers.is_empty() && cfg.viewers.iter().all(|&n| n > 0),
        "--viewers must be at least 1"
    );
    anyhow::ensure!(
        cfg.seconds.is_finite() && cfg.seconds >= 2.0,
        "--seconds must be at least 2"
    );
    raise_fd_limit();
    let source = make_source(&cfg.media_dir, peers::title_seconds(cfg.seconds))?;
    // Ingested ahead, so the VOD row's first viewer does not wait for it.
    let ingest = Command::new(&cfg.fjord_exe)
        .arg("ingest")
        .arg(&source)
        .output()?;
    anyhow::ensure!(
        ingest.status.success(),
        "fjord ingest: {}",
        String::from_utf8_lossy(&ingest.stderr)
    );
    let scratch = tempfile::tempdir()?;
    let mut notes = vec![];
    let mediamtx = match (cfg.mediamtx, peers::mediamtx::find()) {
        (true, Ok(exe)) => Some((peers::mediamtx::version(&exe), exe)),
        (true, Err(why)) => {
            notes.push(why);
            None
        }
        (false, _) => None,
    };
    // The next CPU the process may use: found before it is pinned to it.
    let load_cpu = (cfg.cpu + 1) % available_cpus();
    let at = Rows {
        cfg,
        source: &source,
        scratch: scratch.path(),
        mediamtx: mediamtx.as_ref(),
        load_cpu,
    };
    pin_current_thread(load_cpu);
    let load_before = load_average();
    let mut rows = vec![];
    for &n in &cfg.viewers {
        rows.extend(at.rows(n)?);
    }
    notes.push(format!(
        "1-minute load average {load_before} before the rows, {} after (a shared machine: \
         other work competes with the viewers for their CPU, and their loss inflates the \
         server's CPU per packet received)",
        load_average()
    ));
    Ok(LiveReport {
        config: cfg.clone(),
        load_cpu,
        source: format!(
            "{} (1280x720 25 fps testsrc2, H.264 CBR {VIDEO_KBPS} kbit/s, AAC 128 kbit/s; made by ffmpeg)",
            source.display()
        ),
        rows,
        notes,
    })
}

/// What every viewer count's rows share.
struct Rows<'a> {
    cfg: &'a LiveConfig,
    source: &'a Path,
    scratch: &'a Path,
    /// MediaMTX's version and executable, when it is measured.
    mediamtx: Option<&'a (String, PathBuf)>,
    /// The viewers', the publisher's and this process's CPU.
    load_cpu: usize,
}

impl Rows<'_> {
    /// fjord live, fjord VOD, the floor, MediaMTX at `n` viewers.
    fn rows(&self, n: usize) -> anyhow::Result<Vec<Row>> {
        let (cfg, source) = (self.cfg, self.source);
        let root = source.parent().unwrap_or(Path::new("."));
        let (mut server, base) = start_fjord(cfg, root, self.scratch)?;
        let live = format!("{base}/live/bench");
        let publish_url = live.replacen("rtsp://", "rtsp://pub:secret@", 1);
        let row = publish(&mut server, source, (&publish_url, &live), self.load_cpu)
            .and_then(|tap| measure(&server, &live, n, cfg, Some(tap)));
        let mut rows = vec![named(row, "fjord live", n)];
        let name = (source.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        server.helpers.clear();
        let vod = measure(&server, &format!("{base}/{name}"), n, cfg, None);
        rows.push(named(vod, "fjord VOD (the same file)", n));
        drop(server);
        let relay = floor::row(source, n, cfg, self.load_cpu);
        rows.push(named(relay, "kernel floor: a relay, no server (video)", n));
        if let Some((version, exe)) = self.mediamtx {
            let row = start_mediamtx(cfg, exe, self.scratch).and_then(|(mut server, base)| {
                let url = format!("{base}/bench");
                let tap = publish(&mut server, source, (&url, &url), self.load_cpu)?;
                measure(&server, &url, n, cfg, Some(tap))
            });
            rows.push(named(row, version, n));
        }
        Ok(rows)
    }
}

fn load_average() -> String {
    let avg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    avg.split_whitespace().next().unwrap_or("?").to_string()
}

fn named(row: anyhow::Result<Row>, server: &str, viewers: usize) -> Row {
    let mut row = row.unwrap_or_else(|e| Row {
        error: Some(format!("{e:#}")),
        ..Row::default()
    });
    row.server = server.to_string();
    row.viewers = viewers;
    eprintln!("{}", report::line(&row));
    row
}

/// N receivers on `url` for the run; with `tap`, the probes too.
fn measure(
    server: &ServerChild,
    url: &str,
    n: usize,
    cfg: &LiveConfig,
    tap: Option<probe::Tap>,
) -> anyhow::Result<Row> {
    let pid = server.pid();
    let rss_before = probe::rss_kib(pid);
    let rss = probe::RssPeak::start(pid);
    let sampler = CpuSampler::start(pid, Duration::from_millis(20));
    let seconds = Duration::from_secs_f64(cfg.seconds);
    let probes = tap.map(|tap| {
        let url = url.to_string();
        // After the receivers' setup: the probes are the last viewers.
        let delay = seconds / 4;
        std::thread::spawn(move || probe::latency(tap, &url, delay, seconds - delay))
    });
    let mut load = fjord_client::load::LoadConfig::new(url.to_string(), n, seconds);
    load.gro = false;
    load.setup_timeout = Duration::from_secs(30);
    let report = fjord_client::load::run(&load);
    let samples = sampler.finish();
    let peak = rss.finish();
    let latency = probes.map(|p| {
        p.join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("probe panicked")))
    });
    let report = report.with_context(|| format!("load on {url}"))?;
    let end = report.started_unix_ns + (report.wall_s * 1e9) as i64;
    let window_s = (report.sessions.iter())
        .filter(|s| s.playing)
        .map(|s| s.seconds)
        .fold(0.0, f64::max);
    let start = end - (window_s * 1e9) as i64;
    let series: Vec<(i64, f64)> = samples.iter().map(|&(t, c, _)| (t, c)).collect();
    let cpu_s = match (cpu_at(&series, start), cpu_at(&series, end)) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    };
    let t = &report.totals;
    let mut error = (report.sessions_playing < n).then(|| {
        format!(
            "{} of {n} played: {}",
            report.sessions_playing,
            report.errors.join("; ")
        )
    });
    let latency = match latency {
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => {
            error
                .get_or_insert_with(String::new)
                .push_str(&format!(" latency: {e:#}"));
            None
        }
        None => None,
    };
    Ok(Row {
        playing: report.sessions_playing,
        packets: t.packets,
        loss_percent: t.loss_percent,
        cpu_s,
        window_s,
        us_per_packet: cpu_s * 1e6 / t.packets.max(1) as f64,
        kib_per_viewer: peak.saturating_sub(rss_before) as f64 / n as f64,
        latency,
        error,
        ..Row::default()
    })
}

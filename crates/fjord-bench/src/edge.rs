//! `fjord bench edge`: an edge serving a library it can hold a fifth of,
//! from an origin a round trip away.
//!
//! A library made as `bench storage` makes one (titles looped from one
//! clip, ingested) is published with `fjord publish` to versitygw (a real
//! S3 server; `make deps` installs it), which the edge reaches through a
//! forwarder that holds every segment `--hold-ms` each way ([`proxy`]: this
//! kernel has no `netem`). `fjord serve` with `origin` and `cache_gb` =
//! `--cache-share` of the library plays `--sessions` viewers arriving
//! `--stagger-ms` apart at titles of Zipf(`--zipf`) popularity, each from
//! the start, to `fjord load` receivers (plain UDP, no `UDP_GRO`).
//!
//! Reported: time to first packet (every session, and those whose title
//! no earlier session asked for), packets late over 50 and 200 ms, bytes
//! fetched from the origin beside the distinct slices the sessions needed
//! (collapsing), the cache's byte hit ratio, and on the same plan of slice
//! reads replayed offline the hit ratios of S4LRU (fjord's), LRU and
//! Belady's optimum, and the origin bytes each would fetch: Belady's is
//! the floor for that cache on that plan. Then the server's CPU per packet of the most popular
//! title, `--cpu-sessions` viewers for `--cpu-seconds`, from the edge's
//! cache beside a local server of the same files. The S3 server runs in a
//! network namespace of its own whose veth sends at `--origin-mbit` (tbf).

pub mod proxy;
pub mod trace;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fjord_client::load::{self, LoadConfig, SessionStart};
use serde::Serialize;

use crate::sink::VethPair;
use crate::storage::library::{self, Library};

/// What to run.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    pub titles: usize,
    pub title_mb: u64,
    pub library_cache: PathBuf,
    /// The edge's cache as a share of the library's media bytes.
    pub cache_share: f64,
    pub sessions: usize,
    pub stagger: Duration,
    /// How long the last session to start receives.
    pub seconds: f64,
    pub zipf: f64,
    pub hold: Duration,
    /// The origin link's rate (tbf in a namespace); 0: loopback, unshaped.
    pub origin_mbit: u64,
    pub seed: u64,
    /// Viewers of the CPU comparison (0: none).
    pub cpu_sessions: usize,
    pub cpu_seconds: f64,
    pub fjord_exe: PathBuf,
}

/// What a run measured.
#[derive(Debug, Default, Serialize)]
pub struct EdgeReport {
    pub command: String,
    /// How the origin was reached (rate, round trip).
    pub origin_link: String,
    pub titles: usize,
    pub library_media_bytes: u64,
    pub cache_bytes: u64,
    pub sessions: usize,
    pub sessions_playing: usize,
    pub distinct_titles: usize,
    pub ttfp_ms: Percentiles,
    pub ttfp_uncached_ms: Percentiles,
    /// The server's opens of an origin title it did not hold (at a
    /// DESCRIBE: the HEADs, the index's head and the media's first slice),
    /// from its log.
    pub origin_open_ms: Percentiles,
    pub packets: u64,
    pub late_over_50ms: u64,
    pub late_over_200ms: u64,
    pub max_lateness_ms: f64,
    pub origin_requests: u64,
    pub origin_bytes: u64,
    /// Bytes of the distinct slices the sessions' plan reads (of the
    /// packet files they send from).
    pub distinct_slice_bytes: u64,
    /// Bytes of the indexes of the titles played.
    pub index_bytes: u64,
    pub hit_ratio_served: f64,
    /// The plan replayed offline with the cache's capacity.
    pub s4lru: trace::Replayed,
    pub lru: trace::Replayed,
    pub belady: trace::Replayed,
    pub cpu: Option<CpuBeside>,
    pub errors: Vec<String>,
}

/// The server process's CPU per packet its viewers receive, ns, for one
/// title: from the edge's cache and from a local server of the same
/// media, index, packet and parity files, in turns ([`CPU_TURNS`] each,
/// so a change in the machine's load falls on both).
#[derive(Debug, Default, Serialize)]
pub struct CpuBeside {
    pub title: String,
    pub sessions: usize,
    pub seconds: f64,
    pub edge_ns: Vec<f64>,
    pub local_ns: Vec<f64>,
}

const CPU_TURNS: usize = 3;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// p50, p99 and max, ms.
#[derive(Debug, Default, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(mut v: Vec<f64>) -> Percentiles {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| match v.len() {
            0 => 0.0,
            n => v[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
        };
        Percentiles {
            count: v.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// Runs the benchmark.
pub fn run(cfg: &EdgeConfig, command: &str) -> anyhow::Result<EdgeReport> {
    if cfg.sessions == 0 || cfg.titles == 0 || !(cfg.cache_share > 0.0 && cfg.cache_share <= 1.0) {
        bail!("--sessions and --titles must be positive, --cache-share in (0, 1]");
    }
    let lib = library::made(
        &cfg.library_cache,
        cfg.titles,
        cfg.title_mb,
        &cfg.fjord_exe,
        true,
    )?;
    let scratch = tempfile::Builder::new()
        .prefix("fjord-bench-edge")
        .tempdir()?;
    let link = match cfg.origin_mbit {
        0 => None,
        mbit => Some(origin_link(mbit)?),
    };
    let s3 = S3::start(scratch.path(), link.as_ref())?;
    publish(cfg, &lib, &s3)?;
    let proxy = proxy::start(s3.addr, cfg.hold)?;
    let cache_bytes = (lib.media_bytes() as f64 * cfg.cache_share) as u64;
    let server = Edge::start(cfg, scratch.path(), "edge", Some((proxy.addr, cache_bytes)))?;
    let plan = trace::plan(&lib, cfg);
    let starts: Vec<SessionStart> = (plan.sessions.iter())
        .map(|s| SessionStart {
            url: format!("{}{}", server.url, lib.titles[s.title].name),
            npt_s: 0.0,
        })
        .collect();
    let mut lc = LoadConfig::new(
        &starts[0].url,
        cfg.sessions,
        Duration::from_secs_f64(cfg.seconds),
    );
    lc.gro = false;
    lc.replay = false;
    lc.starts = starts;
    lc.stagger = cfg.stagger;
    lc.setup_timeout = Duration::from_secs(30);
    let loaded = load::run(&lc).context("playing the sessions")?;
    let metrics = server.metrics()?;
    let cpu = match cfg.cpu_sessions {
        0 => None,
        n => Some(cpu_beside(cfg, &lib, &server, scratch.path(), n)?),
    };
    let (served, policies) = (&metrics, trace::hit_ratios(&plan, cache_bytes));
    let mut seen = HashSet::new();
    let (mut all, mut uncached) = (Vec::new(), Vec::new());
    for (s, r) in plan.sessions.iter().zip(&loaded.sessions) {
        let first = seen.insert(s.title);
        if let Some(ms) = r.first_packet_ms {
            all.push(ms);
            if first {
                uncached.push(ms);
            }
        }
    }
    let late = |i: usize| {
        loaded
            .sessions
            .iter()
            .map(|s| {
                [
                    s.late_over.over_2ms,
                    s.late_over.over_50ms,
                    s.late_over.over_200ms,
                ][i]
            })
            .sum()
    };
    Ok(EdgeReport {
        command: command.to_owned(),
        origin_link: format!(
            "{}, {} ms round trip (the forwarder)",
            match cfg.origin_mbit {
                0 => "on loopback, unshaped".to_owned(),
                m => format!("in a network namespace, its link shaped to {m} Mbit/s (tbf)"),
            },
            2 * cfg.hold.as_millis()
        ),
        titles: lib.titles.len(),
        library_media_bytes: lib.media_bytes(),
        cache_bytes,
        sessions: cfg.sessions,
        sessions_playing: loaded.sessions_playing,
        distinct_titles: seen.len(),
        ttfp_ms: Percentiles::of(all),
        ttfp_uncached_ms: Percentiles::of(uncached),
        origin_open_ms: Percentiles::of(server.opens()),
        packets: loaded.totals.packets,
        late_over_50ms: late(1),
        late_over_200ms: late(2),
        max_lateness_ms: loaded.totals.max_lateness_ms,
        origin_requests: served.value("fjord_origin_requests_total"),
        origin_bytes: served.value("fjord_origin_bytes_total"),
        distinct_slice_bytes: plan.distinct_bytes(),
        index_bytes: plan.index_bytes,
        hit_ratio_served: served.hit_ratio(),
        s4lru: policies.s4lru,
        lru: policies.lru,
        belady: policies.belady,
        cpu,
        errors: loaded.errors.clone(),
    })
}

/// The CPU per packet of the most popular title (played by the run, so
/// cached) from `edge` and from a local server of its files, in turns.
fn cpu_beside(
    cfg: &EdgeConfig,
    lib: &Library,
    edge: &Edge,
    scratch: &Path,
    sessions: usize,
) -> anyhow::Result<CpuBeside> {
    let title = &lib.titles[0];
    let root = scratch.join("local");
    std::fs::create_dir_all(&root)?;
    let media = &title.path;
    let files = [
        media.clone(),
        fjord_media::index::index_path_for(media),
        fjord_media::prefab::prefab_path_for(media),
        fjord_fec::sidecar_path_for(media),
    ];
    for f in files.iter().filter(|f| f.exists()) {
        std::fs::copy(f, root.join(f.file_name().context("a file name")?))?;
    }
    let local = Edge::start(cfg, scratch, "local", None)?;
    let (mut edge_ns, mut local_ns) = (Vec::new(), Vec::new());
    for _ in 0..CPU_TURNS {
        edge_ns.push(cpu_per_packet(
            edge,
            &title.name,
            sessions,
            cfg.cpu_seconds,
        )?);
        local_ns.push(cpu_per_packet(
            &local,
            &title.name,
            sessions,
            cfg.cpu_seconds,
        )?);
    }
    Ok(CpuBeside {
        title: title.name.clone(),
        sessions,
        seconds: cfg.cpu_seconds,
        edge_ns,
        local_ns,
    })
}

/// ns of `server`'s CPU per packet its viewers receive: `sessions` of
/// `title` for `seconds`, after a play of a second that is not counted.
fn cpu_per_packet(
    server: &Edge,
    title: &str,
    sessions: usize,
    seconds: f64,
) -> anyhow::Result<f64> {
    let url = format!("{}{title}", server.url);
    let mut warm = LoadConfig::new(&url, 1, Duration::from_secs(1));
    warm.gro = false;
    load::run(&warm).context("warming the title")?;
    let mut lc = LoadConfig::new(&url, sessions, Duration::from_secs_f64(seconds));
    lc.gro = false;
    let pid = server.child.id();
    let before = crate::procfs::process_cpu(pid)?;
    let r = load::run(&lc).context("measuring CPU per packet")?;
    let used = crate::procfs::process_cpu(pid)?.saturating_sub(before);
    Ok(used.as_nanos() as f64 / r.totals.packets.max(1) as f64)
}

/// `fjord publish` of every title to `s3://bench/lib`.
fn publish(cfg: &EdgeConfig, lib: &Library, s3: &S3) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut cmd = Command::new(&cfg.fjord_exe);
    cmd.args(["publish", "--endpoint", &format!("http://{}", s3.addr)])
        .args(lib.titles.iter().map(|t| &t.path))
        .arg("s3://bench/lib")
        .envs(S3::credentials())
        .stdout(Stdio::null());
    let status = cmd.status().context("running fjord publish")?;
    if !status.success() {
        bail!("fjord publish failed ({status})");
    }
    eprintln!(
        "published {} titles in {:.1} s",
        lib.titles.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// versitygw on a free loopback port, its buckets under a scratch
/// directory; killed when dropped.
struct S3 {
    child: Child,
    addr: SocketAddr,
}

impl S3 {
    fn credentials() -> [(&'static str, &'static str); 2] {
        [
            ("AWS_ACCESS_KEY_ID", "fjordbench"),
            ("AWS_SECRET_ACCESS_KEY", "fjord-bench-secret"),
        ]
    }

    /// On loopback, or inside `link`'s namespace at its far address.
    fn start(scratch: &Path, link: Option<&VethPair>) -> anyhow::Result<S3> {
        let root = scratch.join("s3");
        std::fs::create_dir_all(root.join("bench"))?;
        let addr = match link {
            Some(l) => SocketAddr::from((l.remote, free_addr()?.port())),
            None => free_addr()?,
        };
        let [(_, key), (_, secret)] = S3::credentials();
        // `ip netns exec` execs the server: killing the child kills it.
        let mut cmd = match link {
            Some(l) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &l.netns]).arg(versitygw()?);
                c
            }
            None => Command::new(versitygw()?),
        };
        let child = cmd
            .args([
                "--port",
                &addr.to_string(),
                "--access",
                key,
                "--secret",
                secret,
                "--quiet",
            ])
            .arg("posix")
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting versitygw")?;
        let s3 = S3 { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                bail!("versitygw not listening on {addr} after 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s3)
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A veth pair to a namespace of the origin's own, whose far end sends at
/// `mbit` (tbf; the burst a 4 ms tick lets through at that rate).
fn origin_link(mbit: u64) -> anyhow::Result<VethPair> {
    let link = VethPair::create().map_err(anyhow::Error::msg)?;
    let burst = format!("{}", (mbit * 1_000_000 / 8 / 250).max(64 * 1024));
    let rate = format!("{mbit}mbit");
    let ns = ["-n", link.netns.as_str()];
    let shape = [
        "qdisc", "add", "dev", &link.peer, "root", "tbf", "rate", &rate,
    ];
    let args: Vec<&str> = ns
        .iter()
        .chain(&shape)
        .copied()
        .chain(["burst", &burst, "latency", "50ms"])
        .collect();
    link.tc(&args).map_err(anyhow::Error::msg)?;
    Ok(link)
}

/// `$VERSITYGW`, else on the PATH, else where `go install` puts it.
fn versitygw() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("VERSITYGW") {
        return Ok(p.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/bin"));
    (std::env::split_paths(&path).chain(home))
        .map(|d| d.join("versitygw"))
        .find(|p| p.is_file())
        .context("versitygw not found (PATH, ~/go/bin): `make deps` installs it")
}

fn free_addr() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// `fjord serve` of the root `NAME` under the scratch directory: an edge
/// of `s3://bench/lib` through `origin` with a cache of `cache` bytes, or
/// (no origin) a server of its local files.
struct Edge {
    child: Child,
    url: String,
    admin: SocketAddr,
    /// The `ms` of each "origin title ready" line of its log.
    opens: mpsc::Receiver<f64>,
}

impl Edge {
    fn start(
        cfg: &EdgeConfig,
        scratch: &Path,
        name: &str,
        origin: Option<(SocketAddr, u64)>,
    ) -> anyhow::Result<Edge> {
        let (root, config) = (scratch.join(name), scratch.join(format!("{name}.toml")));
        std::fs::create_dir_all(&root)?;
        let admin = free_addr()?;
        let mut text = format!(
            "admin_bind = \"{admin}\"\nhttp_port = 0\naccess_log = false\n\
             max_connections = {room}\nmax_sessions = {room}\nmax_connections_per_address = {room}\n\
             max_sessions_per_address = {room}\n",
            // Every viewer comes from loopback.
            room = cfg.sessions.max(cfg.cpu_sessions) + 64,
        );
        if let Some((origin, cache)) = origin {
            text += &format!(
                "origin = \"s3://bench/lib\"\norigin_endpoint = \"http://{origin}\"\norigin_region = \"us-east-1\"\n\
                 cache_dir = \"{}\"\ncache_gb = {}\n",
                scratch.join("cache").display(),
                cache as f64 / 1e9,
            );
            if cfg.origin_mbit > 0 {
                // Admission counts the link at the rate it is shaped to.
                text += &format!("origin_mbit_s = {}\n", cfg.origin_mbit);
            }
        }
        std::fs::write(&config, text)?;
        let mut child = Command::new(&cfg.fjord_exe)
            .args(["serve", "--bind", "127.0.0.1", "--port", "0", "--root"])
            .arg(&root)
            .arg("--config")
            .arg(&config)
            .envs(S3::credentials())
            .env("FJORD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting fjord serve")?;
        let log = child.stderr.take().context("its stderr")?;
        let (opened, opens) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(log).lines().map_while(Result::ok) {
                let ms = line
                    .contains("origin title ready")
                    .then(|| field(&line, "ms="));
                if let Some(ms) = ms.flatten() {
                    let _ = opened.send(ms);
                }
            }
        });
        let out = child.stdout.take().context("its stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(a) = line.strip_prefix("fjord: listening on rtsp://") {
                    let _ = tx.send(format!("rtsp://{}/", a.trim().trim_end_matches('/')));
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(20))
            .context("fjord serve did not start")?;
        Ok(Edge {
            child,
            url,
            admin,
            opens,
        })
    }

    /// How long each open of an origin title took so far, ms.
    fn opens(&self) -> Vec<f64> {
        self.opens.try_iter().collect()
    }

    /// The server's `/metrics`.
    fn metrics(&self) -> anyhow::Result<Metrics> {
        let mut s = TcpStream::connect(self.admin)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(Metrics(text))
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The number after `key` in a log line (`ms=12`).
fn field(line: &str, key: &str) -> Option<f64> {
    let at = line.find(key)? + key.len();
    let digits: String = (line[at..].chars())
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().ok()
}

struct Metrics(String);

impl Metrics {
    fn value(&self, name: &str) -> u64 {
        (self.0.lines())
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0) as u64
    }

    fn hit_ratio(&self) -> f64 {
        let hit = self.value("fjord_cache_hit_bytes_total") as f64;
        let miss = self.value("fjord_cache_miss_bytes_total") as f64;
        if hit + miss > 0.0 {
            hit / (hit + miss)
        } else {
            0.0
        }
    }
}

/// The report as Markdown.
pub fn markdown(r: &EdgeReport) -> String {
    let gb = |b: u64| b as f64 / 1e9;
    let p = |p: &Percentiles| format!("{:.0} / {:.0} / {:.0} (n={})", p.p50, p.p99, p.max, p.count);
    let late = |n: u64| format!("{n} ({:.4} %)", 100.0 * n as f64 / r.packets.max(1) as f64);
    let mut md = format!(
        "# fjord bench edge\n\n`{}`\n\nOrigin: versitygw {}. {} titles, {:.2} GB of media; cache {:.2} GB; {} sessions ({} playing) on {} titles.\n\n",
        r.command,
        r.origin_link,
        r.titles,
        gb(r.library_media_bytes),
        gb(r.cache_bytes),
        r.sessions,
        r.sessions_playing,
        r.distinct_titles
    );
    md += "| figure | value |\n|---|---:|\n";
    md += &format!(
        "| time to first packet, ms, p50 / p99 / max | {} |\n",
        p(&r.ttfp_ms)
    );
    md += &format!(
        "| … of sessions on a title uncached at their start | {} |\n",
        p(&r.ttfp_uncached_ms)
    );
    md += &format!(
        "| open of an uncached title at DESCRIBE (HEADs, index head, first slice), ms | {} |\n",
        p(&r.origin_open_ms)
    );
    md += &format!(
        "| packets | {} |\n| late > 50 ms | {} |\n| late > 200 ms | {} |\n",
        r.packets,
        late(r.late_over_50ms),
        late(r.late_over_200ms)
    );
    md += &format!("| worst lateness, ms | {:.1} |\n", r.max_lateness_ms);
    md += &format!(
        "| origin requests | {} |\n| origin bytes | {:.3} GB |\n",
        r.origin_requests,
        gb(r.origin_bytes)
    );
    let needed = (r.distinct_slice_bytes + r.index_bytes).max(1) as f64;
    md += &format!(
        "| distinct bytes the sessions needed: packet-file slices + indexes | {:.3} + {:.3} GB |\n",
        gb(r.distinct_slice_bytes),
        gb(r.index_bytes)
    );
    let ratio = r.origin_bytes as f64 / needed;
    md += &format!("| origin bytes / distinct bytes needed | {ratio:.3} |\n");
    md += &format!(
        "| byte hit ratio served (cache's own counters) | {:.3} |\n",
        r.hit_ratio_served
    );
    let policies = [r.s4lru, r.lru, r.belady];
    let each = |f: &dyn Fn(&trace::Replayed) -> f64| -> String {
        let v: Vec<String> = policies.iter().map(|p| format!("{:.3}", f(p))).collect();
        v.join(" / ")
    };
    md += &format!(
        "| byte hit ratio on the sessions' plan, offline: S4LRU / LRU / Belady | {} |\n",
        each(&|p| p.hit_ratio)
    );
    md += &format!(
        "| origin bytes / distinct bytes needed, the plan replayed offline with this cache: S4LRU / LRU / Belady (the floor) | {} |\n",
        each(&|p| (p.fetched + r.index_bytes) as f64 / needed)
    );
    if let Some(c) = &r.cpu {
        let turns = |v: &[f64]| {
            let each: Vec<String> = v.iter().map(|n| format!("{n:.0}")).collect();
            format!("{:.0} ({})", mean(v), each.join(", "))
        };
        md += &format!(
            "\nServer CPU per packet received, {} sessions of {} for {:.0} s, the two servers in turns:\n\n\
             | server | ns per packet, mean (each turn) | × local |\n|---|---:|---:|\n\
             | local disk | {} | 1.00 |\n| edge, from its cache | {} | {:.3} |\n",
            c.sessions,
            c.title,
            c.seconds,
            turns(&c.local_ns),
            turns(&c.edge_ns),
            mean(&c.edge_ns) / mean(&c.local_ns).max(1.0)
        );
    }
    if !r.errors.is_empty() {
        md += &format!("\nErrors: {}\n", r.errors.join("; "));
    }
    md
}

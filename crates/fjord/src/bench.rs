//! `fjord bench`: the CLI of the experiments in `fjord-bench`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use fjord_bench::{
    DatapathConfig, parse_bytes, parse_paths, report, run_datapath, sink::SinkChoice, summarise,
    summarise_download,
};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// CPU, system calls and copies per packet for every data path (the
    /// seeds' streaming experiment, 004 Figs. 4-5).
    ///
    /// Streams a cached file, sliced into RTP packets of each payload size,
    /// through each path into a veth + `pfifo limit 0` namespace sink (made
    /// and removed here; needs root, else loopback), and the same number of
    /// prebuilt packets through each path's floor. Writes datapath.csv,
    /// datapath.svg and datapath.md to --out and prints the table.
    Datapath(DatapathArgs),
    /// The download experiment alone (004 Fig. 3): read+write, mmap+write
    /// and sendfile of a cached file over loopback TCP.
    Download(DownloadArgs),
    /// The most concurrent 4.5 Mbit/s sessions one pinned engine thread keeps
    /// on time (< 0.01 % of packets > 2 ms late, none unsent), into the
    /// sink; saves the packet rate for admission control.
    Capacity(CapacityArgs),
    /// The same load against fjord, live555MediaServer and GStreamer's
    /// rtsp-server: server CPU per packet side by side.
    ///
    /// Makes (once, with ffmpeg, kept in --media) a 4.5 Mbit/s H.264 + AAC
    /// MPEG-TS title; for each installed server, starts it afresh per run,
    /// pinned to one CPU, plays N sessions of the title to `fjord load`
    /// receivers on another CPU over loopback, and reads the server
    /// process's CPU over the receive window. A peer that is not installed
    /// is skipped with the package to install (`make peers` installs them);
    /// MediaMTX is skipped (not installable here; a live relay). In the same
    /// runs, the kernel floor (unless --no-floor): prebuilt packets sent
    /// at the same rate to the same kind of receivers with no server, in
    /// bursts of each --floor-bursts. Writes peers.md and peers.csv to
    /// --out and prints the table.
    Peers(PeersArgs),
    /// What fjord costs beyond its packets: an idle server (--sessions 0,
    /// the default) or one with a few sessions, thread by thread.
    ///
    /// Starts `fjord serve` as `fjord bench peers` does (pinned to --cpu,
    /// one engine thread), plays --sessions of its title to plain `fjord
    /// load` receivers on the next CPU, and after 3 s of warm-up reads each
    /// of its threads' time on a CPU and wake-ups over --seconds. With
    /// sessions, the kernel floor of the same packets runs after each run
    /// (prebuilt packets at fjord's measured burst), and the report gives
    /// fjord's share of a core beyond it. Writes idle.md to --out.
    Idle(IdleArgs),
    /// What the disk under a media root sustains: sequential and random
    /// reads past the page cache (O_DIRECT), MB/s, IOPS and latency.
    ///
    /// Writes a scratch file of --size-mb in --root (hidden; removed at the
    /// end and on Ctrl-C), then reads it for --seconds per pattern:
    /// sequential 1 MiB, random 1 MiB at depth 1 and 4, random 4 KiB at
    /// depth 1 and 4. Prints the table, writes disk.md and disk.json to
    /// --out if given, and saves the figures in
    /// $XDG_STATE_HOME/fjord/disks.toml, keyed by the root's device
    /// (major:minor) and path, for admission control.
    Disk(DiskArgs),
    /// Sessions on time when the library does not fit in memory and the
    /// disk is slow.
    ///
    /// Serves a library (--library, or --titles N --title-mb M made once
    /// with ffmpeg and `fjord ingest`, kept in --library-cache) with
    /// `fjord serve` inside a memory cgroup of --cache-mb (page cache
    /// included) whose reads from the library's disk are throttled to
    /// --disk-mbps and --disk-iops, caches dropped first (cgroup v1 memory +
    /// blkio, or v2 memory.max + io.max; needs root). Plays --sessions at
    /// random titles and positions for --seconds to `fjord load` receivers
    /// without UDP_GRO. Reports packets, loss, lateness over 2/50/200 ms,
    /// the worst stall, time to first packet, each engine thread's major
    /// faults and time blocked on I/O, disk reads, and the server's
    /// storage figures from --stats-file when it writes them. Writes
    /// storage.md, storage.json and storage.svg to --out.
    Storage(StorageArgs),
    /// HTTP downloads: fjord beside nginx.
    ///
    /// One file of --mb MiB (in the page cache) downloaded whole, over
    /// and over, by --clients keep-alive clients over loopback from fjord's
    /// HTTP listener and from nginx (`sendfile on`, started in a scratch
    /// directory; `apt-get install nginx-light` or `make peers`), --rounds
    /// rounds of --seconds each, alternating. Reports each server's CPU
    /// (all its processes) per GB delivered; writes http.md to --out.
    Http(HttpArgs),
    /// Session churn against one server for a long while: does its memory,
    /// fds or the kernel's slab grow, do packets go late?
    ///
    /// Makes a 720p25 H.264 + AAC title of --title-seconds at 600 kbit/s
    /// (MPEG-TS) and its MP4 remux with ffmpeg, starts `fjord serve` on
    /// loopback, and keeps --sessions viewers busy for --minutes: each
    /// lives one seeded random life after another (DESCRIBE, SETUP over
    /// UDP or, for --tcp-share of them, TCP interleaved, PLAY, 5-60 s of
    /// receiving with seeks, pauses and Scale 2 trick play, then TEARDOWN,
    /// a close without it, or play to the end). Samples the server's RSS
    /// (heap and mapped files apart), fds, threads and CPU, the kernel's
    /// slab (system-wide), its /metrics (sessions, packets sent and late),
    /// each engine thread's run-queue wait, faults and block I/O delay,
    /// the machine's steal, and the viewers' errors and loss every 10 s;
    /// each sample's late packets are attributed to the server or the
    /// machine. Writes soak.csv (as it goes), soak.md and soak.svg
    /// (every minute, and with the verdict at the end) to --out; at the
    /// end checks that the sessions drain and the server exits 0 on
    /// SIGTERM. Ctrl-C ends the run early, still reporting.
    Soak(SoakArgs),
    /// Periodic broadcasting of one title, simulated (no network):
    /// staggered, pyramid, skyscraper, harmonic and cautious harmonic.
    ///
    /// Plans each scheme for a title (synthetic: constant bit rate,
    /// 1316-byte packets, a key frame every --gop s; or --title FILE, whose
    /// index is made beside it if missing) with segments cut at its sync
    /// points, and plays --arrivals random clients (plus the worst-placed
    /// ones) against the channels' send schedules: formula and measured
    /// bandwidth, worst and mean wait, client buffer, underruns. Also the
    /// same without sync constraints, other key-frame spacings, and
    /// bandwidth over the start-up wait. Prints the table and writes
    /// broadcast.md and broadcast.svg to --out.
    Broadcast(BroadcastArgs),
}

#[derive(Args, Clone, Debug)]
pub struct BroadcastArgs {
    /// Length of the synthetic title
    #[arg(long, default_value_t = 180)]
    pub title_seconds: u64,
    /// Rate of the synthetic title, Mbit/s
    #[arg(long, default_value_t = 3.5)]
    pub mbps: f64,
    /// Longest start-up wait, seconds
    #[arg(long, default_value_t = 5.0)]
    pub max_start: f64,
    /// Seconds between the synthetic title's key frames
    #[arg(long, default_value_t = 1.0)]
    pub gop: f64,
    /// Random client arrivals per scheme
    #[arg(long, default_value_t = 1000)]
    pub arrivals: usize,
    /// Seed of the arrivals
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A media file (.ts, .mp4, ...) instead of the synthetic title
    #[arg(long)]
    pub title: Option<PathBuf>,
    /// Directory for broadcast.md and broadcast.svg
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
}

fn broadcast(a: BroadcastArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::broadcast::BroadcastConfig {
        title_seconds: a.title_seconds,
        mbps: a.mbps,
        max_start_s: a.max_start,
        gop_s: a.gop,
        arrivals: a.arrivals,
        seed: a.seed,
        title: a.title,
        out: a.out.clone(),
    };
    let command = std::env::args()
        .enumerate()
        .map(|(i, s)| if i == 0 { "fjord".to_string() } else { s })
        .collect::<Vec<_>>()
        .join(" ");
    let report = fjord_bench::broadcast::run(&cfg, &command)?;
    println!("{}", report.markdown());
    println!("written: {}", a.out.join("broadcast.md").display());
    Ok(())
}

#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// Concurrent viewers (each a session at a time)
    #[arg(long, default_value_t = 500)]
    pub sessions: usize,
    /// How long the viewers run
    #[arg(long, default_value_t = 60.0)]
    pub minutes: f64,
    /// Share of lives over TCP interleaved, the rest over UDP
    #[arg(long, default_value_t = 0.3)]
    pub tcp_share: f64,
    /// Length of the made title
    #[arg(long, default_value_t = 60)]
    pub title_seconds: u64,
    /// Seed of the viewers' lives
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for soak.md, soak.svg and soak.csv
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// The server's engine threads under SCHED_FIFO (`realtime = true`), so
    /// the viewers sharing its cores cannot delay its packets (root)
    #[arg(long)]
    pub realtime: bool,
    /// The viewers in a network namespace of their own across a veth pair
    /// (198.18.2.0/24) whose receive path runs in kernel threads, as for
    /// remote viewers, instead of on loopback, where the engine threads run
    /// it (root, `ip`, `ethtool`)
    #[arg(long)]
    pub veth: bool,
}

fn soak(a: SoakArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::soak::SoakConfig {
        sessions: a.sessions,
        minutes: a.minutes,
        tcp_share: a.tcp_share,
        title_seconds: a.title_seconds,
        seed: a.seed,
        out: a.out.clone(),
        fjord_exe: std::env::current_exe()?,
        progress: true,
        realtime: a.realtime,
        veth: a.veth,
    };
    let command = std::env::args()
        .enumerate()
        .map(|(i, s)| if i == 0 { "fjord".to_string() } else { s })
        .collect::<Vec<_>>()
        .join(" ");
    let report = fjord_bench::soak::run(&cfg, &command)?;
    for line in report.verdict() {
        println!("{line}");
    }
    println!("written: {}", a.out.join("soak.md").display());
    Ok(())
}

#[derive(Args, Clone, Debug)]
pub struct HttpArgs {
    #[arg(long, default_value_t = 256)]
    pub mb: u64,
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

#[derive(Args, Clone, Debug)]
pub struct DiskArgs {
    /// A directory on the disk to measure (a media root)
    #[arg(long)]
    pub root: PathBuf,
    /// Scratch file size in MiB: larger than the disk's own cache
    #[arg(long, default_value_t = 1024)]
    pub size_mb: u64,
    /// Seconds per read pattern
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Buffered reads (each range dropped from the page cache) instead of
    /// O_DIRECT
    #[arg(long)]
    pub buffered: bool,
    /// Directory for disk.md and disk.json
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not save the figures for admission control
    #[arg(long)]
    pub no_save: bool,
}

fn disk(a: DiskArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::disk::DiskConfig {
        root: a.root.clone(),
        size: a.size_mb << 20,
        seconds: a.seconds,
        direct: !a.buffered,
        progress: true,
    };
    let r = fjord_bench::disk::run(&cfg)?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let md = r.markdown(&command);
    println!("{md}");
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        for (name, text) in [("disk.md", md), ("disk.json", r.json())] {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("written: {}", path.display());
        }
    }
    if !a.no_save {
        let path = fjord_server::config::capacity_state_file()
            .context("no HOME or XDG_STATE_HOME to save the result in")?
            .with_file_name("disks.toml");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let text = save_disk(&old, &r).with_context(|| format!("updating {}", path.display()))?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!(
            "saved the figures of device {} ({}) to {} for admission control",
            r.device_id(),
            r.root.display(),
            path.display()
        );
    }
    Ok(())
}

/// `disks.toml` with `r` in it: one `[[disk]]` per (device, root), a new
/// measurement replacing the old one of the same pair, others kept.
fn save_disk(old: &str, r: &fjord_bench::disk::DiskReport) -> anyhow::Result<String> {
    use fjord_bench::disk::Access::{RandRead, SeqRead, SeqWrite};
    use toml::Value;
    let mut doc: toml::Table = old.parse().context("not TOML")?;
    let root = r.root.to_string_lossy().into_owned();
    let mut entry = toml::Table::new();
    entry.insert("device".into(), Value::from(r.device_id()));
    entry.insert("root".into(), Value::from(root.clone()));
    entry.insert("o_direct".into(), Value::from(r.direct));
    let figures = [
        ("seq_write_mb_s", SeqWrite, 1 << 20, 1, false),
        ("seq_read_mb_s", SeqRead, 1 << 20, 1, false),
        ("rand_1m_qd1_mb_s", RandRead, 1 << 20, 1, false),
        ("rand_1m_qd4_mb_s", RandRead, 1 << 20, 4, false),
        ("rand_4k_qd1_iops", RandRead, 4096, 1, true),
        ("rand_4k_qd4_iops", RandRead, 4096, 4, true),
    ];
    for (key, access, block, depth, iops) in figures {
        if let Some(p) = r.phase(access, block, depth) {
            let v = if iops { p.iops() } else { p.mb_per_s() };
            entry.insert(key.into(), Value::from((v * 10.0).round() / 10.0));
        }
    }
    if let Some(p99) = r.phase(RandRead, 1 << 20, 1).and_then(|p| p.p99) {
        let ms = (p99.as_secs_f64() * 1e4).round() / 10.0;
        entry.insert("rand_1m_qd1_p99_ms".into(), Value::from(ms));
    }
    let same = |d: &Value| {
        d.get("device").and_then(Value::as_str) == Some(&r.device_id())
            && d.get("root").and_then(Value::as_str) == Some(&root)
    };
    let disks = doc
        .entry("disk")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .context("`disk` is not an array of tables")?;
    disks.retain(|d| !same(d));
    disks.push(Value::Table(entry));
    Ok(toml::to_string(&doc)?)
}

#[derive(Args, Clone, Debug)]
pub struct StorageArgs {
    /// Existing titles to serve (every file below DIR; those without an
    /// index are ingested first)
    #[arg(long, value_name = "DIR", conflicts_with_all = ["titles", "title_mb"])]
    pub library: Option<PathBuf>,
    /// Titles to make (4.5 Mbit/s H.264 + AAC MPEG-TS)
    #[arg(long, default_value_t = 8)]
    pub titles: usize,
    /// Size of each made title, MB
    #[arg(long, default_value_t = 1000)]
    pub title_mb: u64,
    /// Where made libraries are kept and reused [default:
    /// $XDG_CACHE_HOME/fjord/storage-library]
    #[arg(long, value_name = "DIR")]
    pub library_cache: Option<PathBuf>,
    /// Memory of the server's cgroup, page cache included, MiB
    #[arg(long, default_value_t = 1024)]
    pub cache_mb: u64,
    /// Read bandwidth allowed on the library's disk, MB/s
    #[arg(long, default_value_t = 120)]
    pub disk_mbps: u64,
    /// Read operations per second allowed on the library's disk
    #[arg(long, default_value_t = 300)]
    pub disk_iops: u64,
    /// Concurrent sessions
    #[arg(long, default_value_t = 48)]
    pub sessions: usize,
    /// Seconds every session receives
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// While the sessions play, write a new title of N MB into the library
    /// and `fjord ingest` it inside the same cgroup (bulk I/O beside the
    /// streams); reports how long it took
    #[arg(long, value_name = "N")]
    pub ingest_mb: Option<u64>,
    /// Also run the same scenario with everything cached and nothing
    /// limited, for comparison
    #[arg(long)]
    pub baseline: bool,
    /// Seed of the sessions' titles and positions
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Milliseconds between two sessions' starts (5: all at once, the
    /// harshest case; larger spreads them like arriving viewers)
    #[arg(long, default_value_t = 5)]
    pub stagger_ms: u64,
    /// Engine threads of the server [default: its own, one per core]
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Directory for storage.md, storage.json and storage.svg
    #[arg(long, default_value = "bench/results/storage")]
    pub out: PathBuf,
    /// Only make (or check) the library, then stop
    #[arg(long)]
    pub prepare_only: bool,
}

fn storage(a: StorageArgs) -> anyhow::Result<()> {
    use fjord_bench::storage::{self, LibrarySource, StorageConfig};
    let library = match &a.library {
        Some(d) => LibrarySource::Dir(d.clone()),
        None => LibrarySource::Made {
            titles: a.titles,
            mb: a.title_mb,
            cache: a
                .library_cache
                .clone()
                .unwrap_or_else(storage::library::default_cache),
        },
    };
    let cfg = StorageConfig {
        library,
        cache_mb: a.cache_mb,
        disk_mbps: a.disk_mbps,
        disk_iops: a.disk_iops,
        sessions: a.sessions,
        stagger: std::time::Duration::from_millis(a.stagger_ms),
        seconds: a.seconds,
        ingest_mb: a.ingest_mb,
        baseline: a.baseline,
        seed: a.seed,
        threads: a.threads,
        fjord_exe: std::env::current_exe()?,
        progress: true,
    };
    let command = std::env::args()
        .enumerate()
        .map(|(i, s)| if i == 0 { "fjord".to_string() } else { s })
        .collect::<Vec<_>>()
        .join(" ");
    if a.prepare_only {
        let lib = storage::prepare_library(&cfg)?;
        println!(
            "library ready: {} titles, {:.2} GB with sidecars, at {}",
            lib.titles.len(),
            lib.total_bytes() as f64 / 1e9,
            lib.root.display()
        );
        return Ok(());
    }
    let report = storage::run(&cfg, &command)?;
    let md = storage::report::write(&report, &a.out)
        .with_context(|| format!("writing results to {}", a.out.display()))?;
    println!("{md}");
    println!("written: {}", a.out.display());
    Ok(())
}

#[derive(Args, Clone, Debug)]
pub struct PeersArgs {
    /// Concurrent sessions per run
    #[arg(long, default_value_t = 20)]
    pub sessions: usize,
    /// Seconds the receivers receive per run
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// RTP interleaved on the RTSP connections instead of UDP
    #[arg(long)]
    pub tcp: bool,
    /// Runs per server (interleaved between servers); medians over these
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// CPU the servers are pinned to (the receivers take the next one)
    #[arg(long, default_value_t = 0)]
    pub cpu: usize,
    /// Every server, all its threads, under SCHED_FIFO at one low
    /// priority (the same for all), so other work on a shared machine does
    /// not take their CPU; needs root or CAP_SYS_NICE
    #[arg(long)]
    pub realtime: bool,
    /// Receivers with UDP GRO (the kernel hands them bursts as one
    /// datagram): cheaper for the server than players' plain sockets, which
    /// the default measures; the report says which
    #[arg(long)]
    pub gro: bool,
    /// Directory for peers.md and peers.csv
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Where the title is made and kept [default: $XDG_CACHE_HOME/fjord/peers]
    #[arg(long)]
    pub media: Option<PathBuf>,
    /// Packets per session per send of the kernel floor rows (prebuilt
    /// packets sent to the same kind of receivers with no server): 1 is a
    /// `send` per packet, more one GSO `sendmsg` per burst
    #[arg(long, value_delimiter = ',', default_values_t = fjord_bench::peers::floor::DEFAULT_BURSTS)]
    pub floor_bursts: Vec<usize>,
    /// No kernel floor rows
    #[arg(long)]
    pub no_floor: bool,
    /// Sessions of each load of a curve (e.g. 10,20,100,500,1000): the
    /// whole comparison at each, in order, instead of one at --sessions;
    /// writes peers-N.md and peers-N.csv per load and peers-curve.md,
    /// peers-curve.csv and peers-curve.svg
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<usize>,
    /// The servers to measure beside the floor: fjord, live555, gst
    #[arg(long, value_delimiter = ',', default_values_t = ["fjord".to_string(), "live555".into(), "gst".into()])]
    pub servers: Vec<String>,
}

fn http(a: HttpArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::http::HttpConfig {
        fjord_exe: std::env::current_exe()?,
        mb: a.mb,
        clients: a.clients,
        seconds: a.seconds,
        rounds: a.rounds,
    };
    let report = fjord_bench::http::run(&cfg)?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let md = fjord_bench::http::markdown(&cfg, &command, &report);
    std::fs::create_dir_all(&a.out)?;
    let path = a.out.join("http.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    println!("{md}\nwritten: {}", path.display());
    Ok(())
}

/// Where `bench peers` and `bench idle` keep their title.
fn peers_media(asked: Option<PathBuf>) -> PathBuf {
    asked.unwrap_or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("fjord")
            .join("peers")
    })
}

#[derive(Args, Clone, Debug)]
pub struct IdleArgs {
    /// Sessions playing while fjord is measured (0: an idle server)
    #[arg(long, default_value_t = 0)]
    pub sessions: usize,
    /// Seconds measured per run (after 3 s of warm-up)
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Runs (a fresh server each); medians over these
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// CPU the server is pinned to (the receivers take the next one)
    #[arg(long, default_value_t = 0)]
    pub cpu: usize,
    /// The server, all its threads, and the floor's sender under
    /// SCHED_FIFO at one low priority; needs root or CAP_SYS_NICE
    #[arg(long)]
    pub realtime: bool,
    /// The server's `udp_sockets`: `shared` (its default: one unconnected
    /// socket per engine thread, each send names its destination) or
    /// `per-session` (a connected socket per session, as the floor's)
    #[arg(long, default_value = "shared", value_parser = ["shared", "per-session"])]
    pub udp_sockets: String,
    /// Directory for idle.md
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Where the title is made and kept [default: $XDG_CACHE_HOME/fjord/peers]
    #[arg(long)]
    pub media: Option<PathBuf>,
}

fn idle(a: IdleArgs) -> anyhow::Result<()> {
    use fjord_bench::peers::{Peer, PeersConfig, idle};
    anyhow::ensure!(a.reps > 0, "--reps must be at least 1");
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0,
        "--seconds must be positive"
    );
    let cfg = PeersConfig {
        sessions: a.sessions,
        seconds: a.seconds,
        tcp: false,
        reps: a.reps,
        cpu: a.cpu,
        realtime: a.realtime,
        gro: false,
        fjord_exe: std::env::current_exe()?,
        media_dir: peers_media(a.media.clone()),
        floor_bursts: Vec::new(),
        servers: vec![Peer::Fjord],
        udp_sockets: a.udp_sockets.clone(),
    };
    let runs = idle::run(&cfg)?;
    let command = format!(
        "fjord bench idle --sessions {} --seconds {} --reps {} --cpu {}{} --udp-sockets {} --out {}",
        a.sessions,
        a.seconds,
        a.reps,
        a.cpu,
        if a.realtime { " --realtime" } else { "" },
        a.udp_sockets,
        a.out.display()
    );
    let md = idle::markdown(&runs, &cfg, &command);
    std::fs::create_dir_all(&a.out)?;
    let path = a.out.join("idle.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    println!("{md}\nwritten: {}", path.display());
    Ok(())
}

fn peers(a: PeersArgs) -> anyhow::Result<()> {
    use fjord_bench::peers::{self, PeersConfig, PeersReport, curve};
    use fjord_bench::procfs::CpuTimes;
    let media = peers_media(a.media.clone());
    let servers = (a.servers.iter())
        .map(|n| {
            peers::Peer::parse(n)
                .with_context(|| format!("--servers: no server {n:?} (fjord, live555, gst)"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cfg = PeersConfig {
        sessions: a.sessions,
        seconds: a.seconds,
        tcp: a.tcp,
        reps: a.reps,
        cpu: a.cpu,
        realtime: a.realtime,
        gro: a.gro,
        fjord_exe: std::env::current_exe()?,
        media_dir: media,
        floor_bursts: if a.no_floor {
            Vec::new()
        } else {
            a.floor_bursts.clone()
        },
        servers,
        udp_sockets: "shared".into(),
    };
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let floor = match a.no_floor {
        true => " --no-floor".to_string(),
        false => format!(" --floor-bursts {}", list(&a.floor_bursts)),
    };
    let command = format!(
        "fjord bench peers {} --seconds {}{}{}{}{} --reps {} --servers {} --out {}",
        match a.loads.is_empty() {
            true => format!("--sessions {}", a.sessions),
            false => format!("--loads {}", list(&a.loads)),
        },
        a.seconds,
        if a.tcp { " --tcp" } else { "" },
        if a.realtime { " --realtime" } else { "" },
        if a.gro { " --gro" } else { "" },
        floor,
        a.reps,
        a.servers.join(","),
        a.out.display()
    );
    let load_avg = || {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "?".into())
    };
    // The machine note of one comparison: load and steal over its runs.
    let measure = |cfg: &PeersConfig| -> anyhow::Result<(PeersReport, String)> {
        let (load_before, steal_before) = (load_avg(), CpuTimes::now());
        let report = peers::run(cfg)?;
        let steal = match (steal_before, CpuTimes::now()) {
            (
                Some(CpuTimes {
                    total: t0,
                    steal: s0,
                    ..
                }),
                Some(CpuTimes {
                    total: t1,
                    steal: s1,
                    ..
                }),
            ) if t1 > t0 => format!(
                "; the hypervisor took {:.0} % of the virtual CPUs' time during the runs (steal)",
                100.0 * (s1 - s0) as f64 / (t1 - t0) as f64
            ),
            _ => String::new(),
        };
        let machine = format!(
            "{} (a shared virtual machine: other work may run beside the benchmark; \
             1-minute load average {load_before} before the runs, {} after{steal})",
            peers::machine(),
            load_avg()
        );
        Ok((report, machine))
    };
    std::fs::create_dir_all(&a.out)?;
    let write = |name: &str, text: String| -> anyhow::Result<()> {
        let path = a.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("written: {}", path.display());
        Ok(())
    };
    // One comparison: printed, and written as peers{suffix}.md and .csv.
    let compare = |cfg: &PeersConfig, suffix: &str| -> anyhow::Result<PeersReport> {
        let (report, machine) = measure(cfg)?;
        let md = peers::markdown(&report, &command, &machine);
        println!("{md}");
        write(&format!("peers{suffix}.md"), md)?;
        write(&format!("peers{suffix}.csv"), peers::csv(&report))?;
        Ok(report)
    };
    if a.loads.is_empty() {
        return compare(&cfg, "").map(drop);
    }
    let curve = curve::run(&cfg, &a.loads, |cfg| {
        compare(cfg, &format!("-{}", cfg.sessions))
    })?;
    let md = curve.markdown(&command, &peers::machine());
    println!("{md}");
    write("peers-curve.csv", curve.csv())?;
    let svg = a.out.join("peers-curve.svg");
    curve.svg(&svg)?;
    println!("written: {}", svg.display());
    write("peers-curve.md", md)
}

#[derive(Args, Clone)]
pub struct DatapathArgs {
    /// RTP payload sizes in bytes (at most 1456: MTU 1500)
    #[arg(long, value_delimiter = ',', default_value = "256,512,1024,1316,1456")]
    pub sizes: Vec<usize>,
    /// `all` or a comma-separated list of data paths
    #[arg(long, default_value = "all")]
    pub paths: String,
    /// Bytes streamed per path, size and repetition (the file's size): 1G, 256M, …
    #[arg(long, default_value = "1G")]
    pub bytes: String,
    /// Repetitions per cell (median, MAD and bootstrap CI over these)
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Packets per session per tick
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Sessions (connected UDP sockets) per tick
    #[arg(long, default_value_t = 8)]
    pub sessions: usize,
    /// Directory for datapath.csv, datapath.svg, datapath.md
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Use loopback even when the namespace sink could be made
    #[arg(long)]
    pub loopback: bool,
    /// Skip the floors
    #[arg(long)]
    pub no_floor: bool,
    /// Every path builds its headers, none sends prefabricated packets (as
    /// for a title ingested with --prefab off)
    #[arg(long)]
    pub built_headers: bool,
    /// Also run the download experiment
    #[arg(long)]
    pub download: bool,
    /// Where the temporary media file goes [default: the system temp dir]
    #[arg(long)]
    pub tmpdir: Option<PathBuf>,
    /// A few seconds' run: sizes 256,1316, 2 MiB, 3 repetitions (overrides
    /// --sizes, --bytes and --reps)
    #[arg(long)]
    pub quick: bool,
}

#[derive(Args, Clone)]
pub struct DownloadArgs {
    /// Operation sizes in bytes (sendfile-whole ignores them)
    #[arg(long, value_delimiter = ',', default_value = "512,1024,2048,65536")]
    pub sizes: Vec<usize>,
    /// File size: 1G, 256M, …
    #[arg(long, default_value = "1G")]
    pub bytes: String,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Directory for download.csv and datapath.md
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    #[arg(long)]
    pub tmpdir: Option<PathBuf>,
}

impl DatapathArgs {
    pub fn config(&self) -> anyhow::Result<DatapathConfig> {
        let mut cfg = DatapathConfig {
            sizes: self.sizes.clone(),
            paths: parse_paths(&self.paths)?,
            bytes: parse_bytes(&self.bytes)?,
            reps: self.reps,
            burst: self.burst,
            sessions: self.sessions,
            out: self.out.clone(),
            sink: if self.loopback {
                SinkChoice::Loopback
            } else {
                SinkChoice::Auto
            },
            floors: !self.no_floor,
            prefab: !self.built_headers,
            download: self.download,
            progress: true,
            tmpdir: self.tmpdir.clone(),
        };
        if self.quick {
            let q = DatapathConfig::quick();
            cfg.sizes = q.sizes;
            cfg.bytes = q.bytes;
            cfg.reps = q.reps;
        }
        Ok(cfg)
    }
}

#[derive(clap::Args, Debug)]
pub struct CapacityArgs {
    /// Measured seconds per run (each run also warms up for 1 s)
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Stop searching at this many sessions
    #[arg(long, default_value_t = 20_000)]
    max: usize,
    /// Run once at exactly this many sessions instead of searching (e.g. to
    /// compare --burst-ms values at one load)
    #[arg(long)]
    sessions: Option<usize>,
    /// How far ahead of schedule a packet may leave (the server's burst_ms);
    /// smaller bursts mean more wake-ups and smaller batches
    #[arg(long, default_value_t = 40)]
    burst_ms: u64,
    /// Data path of the engine thread (auto: the server's default)
    #[arg(long, default_value = "auto")]
    datapath: String,
    /// CPU to pin the engine thread to
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    /// Send into a discarding loopback receiver instead of the veth sink
    #[arg(long)]
    loopback: bool,
    /// Measure with real receivers instead: a `fjord serve` child (one
    /// engine thread, pinned to --cpu) and `fjord load` on another CPU
    #[arg(long)]
    receivers: bool,
    /// With --receivers: receivers with UDP GRO (the default is players'
    /// plain sockets, a datagram per packet)
    #[arg(long, requires = "receivers")]
    gro: bool,
    /// Leave the engine thread in the normal scheduling class (default:
    /// SCHED_FIFO, as `realtime = true` runs the server)
    #[arg(long)]
    no_realtime: bool,
    /// Do not save the result for the server's admission control
    #[arg(long)]
    no_save: bool,
    /// Every session also sends a repair stream of this layout from a
    /// parity sidecar (packet counts and CPU per packet then include the
    /// repair packets); compare with a run without it at --sessions N
    #[arg(long, value_name = "K:M")]
    fec: Option<fjord_fec::FecChoice>,
    /// With --fec: every session encodes its repair packets on the fly as
    /// its source packets leave (a server without stored parity), instead
    /// of sending the sidecar's; data paths gso, gso-zerocopy, sendmmsg,
    /// mmap-writev or uring
    #[arg(long, requires = "fec")]
    fec_live: bool,
    /// The title has no prefabricated packets: every session builds its
    /// headers (as for a title ingested with --prefab off)
    #[arg(long)]
    built_headers: bool,
    /// UDP sockets of the sessions: `shared` (one unconnected socket, an
    /// address per message, as `fjord serve` by default) or `per-session`
    /// (a connected socket each)
    #[arg(long, default_value = "shared", value_parser = ["shared", "per-session"])]
    udp_sockets: String,
    /// Directory for capacity.md and capacity.json (every run)
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn capacity(a: CapacityArgs) -> anyhow::Result<()> {
    let fec = match a.fec {
        None | Some(fjord_fec::FecChoice::Off) => None,
        Some(fjord_fec::FecChoice::Fixed(p)) => Some(p),
        Some(_) => anyhow::bail!("--fec takes K:M"),
    };
    anyhow::ensure!(
        fec.is_none() || !a.receivers,
        "--fec measures the engine alone; leave out --receivers"
    );
    anyhow::ensure!(
        !a.fec_live
            || [
                "auto",
                "gso",
                "gso-zerocopy",
                "sendmmsg",
                "mmap-writev",
                "uring"
            ]
            .contains(&a.datapath.as_str()),
        "--fec-live sends repair symbols from memory: use a data path that sends by reference (gso, gso-zerocopy, sendmmsg, mmap-writev, uring)"
    );
    let cfg = fjord_bench::capacity::CapacityConfig {
        fec,
        fec_live: a.fec_live,
        prefab: !a.built_headers,
        seconds: a.seconds,
        max_sessions: a.max,
        datapath: a.datapath,
        cpu: a.cpu,
        realtime: !a.no_realtime,
        gro: a.gro,
        burst: std::time::Duration::from_millis(a.burst_ms),
        fixed: a.sessions,
        udp_sockets: a.udp_sockets.clone(),
        sink: if a.loopback {
            SinkChoice::Loopback
        } else {
            SinkChoice::Auto
        },
        ..Default::default()
    };
    let c = if a.receivers {
        fjord_bench::capacity::run_loopback(&cfg)?
    } else {
        fjord_bench::capacity::run(&cfg)?
    };
    println!("sink: {}", c.sink);
    println!("data path: {}", c.datapath);
    println!("UDP sockets: {}", c.udp_sockets);
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        std::fs::write(dir.join("capacity.md"), c.markdown(&command))?;
        std::fs::write(dir.join("capacity.json"), c.json())?;
        println!("wrote capacity.md and capacity.json to {}", dir.display());
    }
    let kernel = c
        .runs
        .iter()
        .map(|r| {
            (
                r.slab_per_session,
                r.sunreclaim_per_session,
                r.socket_slab_per_session,
            )
        })
        .fold((0.0, 0.0, 0.0), |a, b| {
            (f64::max(a.0, b.0), f64::max(a.1, b.1), f64::max(a.2, b.2))
        });
    let kernel = format!(
        "at most {:.0} bytes of kernel slab per session ({:.0} unreclaimable, {:.0} in the socket caches; /proc/meminfo and /proc/slabinfo growth, system-wide{})",
        kernel.0,
        kernel.1,
        kernel.2,
        if a.receivers {
            ", receivers' sockets included"
        } else {
            ""
        }
    );
    let Some(best) = c.best else {
        anyhow::bail!("no run kept its deadlines on one core");
    };
    let memory = c
        .runs
        .iter()
        .map(|r| r.bytes_per_session)
        .fold(0.0, f64::max);
    let memory = format!(
        "at most {memory:.0} bytes of memory per session (anonymous RSS growth per added session{}), {kernel}",
        if a.receivers {
            ", of the fjord serve child"
        } else {
            ""
        }
    );
    println!(
        "capacity: {} concurrent 4.5 Mbit/s sessions on one core ({:.2} Gbit/s), {:.0} ns CPU per packet, {:.0} % of the core, {memory}, {} of {} packets late (> 2 ms)",
        best.sessions,
        best.gbps,
        best.ns_per_packet,
        best.cpu * 100.0,
        best.late,
        best.packets
    );
    if a.sessions.is_some() {
        // A single measurement, not a capacity: nothing to save.
        return Ok(());
    }
    println!(
        "capacity: {} concurrent 4.5 Mbit/s sessions on one core ({:.2} Gbit/s), {:.0} ns CPU per packet, {:.0} % of the core, at most {:.0} bytes of memory per session (anonymous RSS; each run's growth over the sessions it added), {kernel}, {} of {} packets late (> 2 ms)",
        best.sessions,
        best.gbps,
        best.ns_per_packet,
        best.cpu * 100.0,
        c.runs
            .iter()
            .map(|r| r.bytes_per_session)
            .fold(0.0, f64::max),
        best.late,
        best.packets
    );
    if !a.no_save {
        let pps = (best.sessions as f64 * c.packets_per_second_per_session * 0.9) as u64;
        let path = fjord_server::config::capacity_state_file()
            .context("no HOME or XDG_STATE_HOME to save the result in")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let saved = fjord_server::config::SavedCapacity { pps_per_core: pps };
        std::fs::write(&path, toml::to_string(&saved)?)?;
        println!(
            "saved {} packets/s per core (90 % of the measured capacity) to {} for admission control",
            pps,
            path.display()
        );
    }
    Ok(())
}

pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    let cfg = match cmd {
        BenchCmd::Capacity(a) => return capacity(a),
        BenchCmd::Peers(a) => return peers(a),
        BenchCmd::Idle(a) => return idle(a),
        BenchCmd::Disk(a) => return disk(a),
        BenchCmd::Storage(a) => return storage(a),
        BenchCmd::Http(a) => return http(a),
        BenchCmd::Soak(a) => return soak(a),
        BenchCmd::Broadcast(a) => return broadcast(a),
        BenchCmd::Datapath(a) => a.config()?,
        BenchCmd::Download(a) => {
            let mut cfg = DatapathConfig {
                sizes: a.sizes,
                bytes: parse_bytes(&a.bytes)?,
                reps: a.reps,
                out: a.out,
                tmpdir: a.tmpdir,
                download: true,
                ..DatapathConfig::default()
            };
            // Download only: no streaming cells.
            cfg.paths.clear();
            cfg
        }
    };
    let results = run_datapath(&cfg)?;
    let rows = summarise(&results);
    let dl = summarise_download(&results);
    let md = report::write(&results, &rows, &dl, &cfg.out)
        .with_context(|| format!("writing results to {}", cfg.out.display()))?;
    println!("{md}");
    println!("written: {}", cfg.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: BenchCmd,
    }

    fn report(root: &str, seq_mb: u64) -> fjord_bench::disk::DiskReport {
        use fjord_bench::disk::{Access, Phase};
        let phase = |access, block, depth| Phase {
            access,
            block,
            depth,
            ops: seq_mb,
            bytes: seq_mb * block as u64,
            elapsed: std::time::Duration::from_secs(1),
            p50: None,
            p99: Some(std::time::Duration::from_micros(12_345)),
        };
        fjord_bench::disk::DiskReport {
            root: root.into(),
            device: (253, 0),
            device_name: Some("vda".into()),
            filesystem: "ext4".into(),
            size: 1 << 30,
            seconds: 5.0,
            direct: true,
            note: None,
            phases: vec![
                phase(Access::SeqRead, 1 << 20, 1),
                phase(Access::RandRead, 1 << 20, 1),
                phase(Access::RandRead, 4096, 4),
            ],
        }
    }

    #[test]
    fn disk_figures_replace_their_own_entry_and_keep_others() {
        let first = save_disk("", &report("/a", 100)).unwrap();
        let both = save_disk(&first, &report("/b", 200)).unwrap();
        let again = save_disk(&both, &report("/a", 300)).unwrap();
        let doc: toml::Table = again.parse().unwrap();
        let disks = doc["disk"].as_array().unwrap();
        let by_root = |root: &str| {
            disks
                .iter()
                .find(|d| d["root"].as_str() == Some(root))
                .unwrap()
        };
        assert_eq!(disks.len(), 2);
        assert_eq!(by_root("/a")["device"].as_str(), Some("253:0"));
        assert_eq!(by_root("/a")["seq_read_mb_s"].as_float(), Some(314.6)); // 300 MiB in 1 s
        assert_eq!(by_root("/b")["seq_read_mb_s"].as_float(), Some(209.7));
        assert_eq!(by_root("/a")["rand_4k_qd4_iops"].as_float(), Some(300.0));
        assert_eq!(by_root("/a")["rand_1m_qd1_p99_ms"].as_float(), Some(12.3));
        assert!(save_disk("disk = 3", &report("/a", 1)).is_err());
    }

    #[test]
    fn flags_parse_into_a_config() {
        let cli = Cli::try_parse_from([
            "bench",
            "datapath",
            "--sizes",
            "256,1316",
            "--paths",
            "gso,read-writev",
            "--bytes",
            "64M",
            "--reps",
            "7",
            "--burst",
            "16",
            "--out",
            "x",
        ])
        .unwrap();
        let BenchCmd::Datapath(a) = cli.cmd else {
            panic!("not datapath")
        };
        let c = a.config().unwrap();
        assert_eq!(c.sizes, [256, 1316]);
        assert_eq!(c.paths, ["gso", "read-writev"]);
        assert_eq!(c.bytes, 64 << 20);
        assert_eq!((c.reps, c.burst), (7, 16));
        let cli = Cli::try_parse_from(["bench", "datapath", "--paths", "nope"]).unwrap();
        let BenchCmd::Datapath(a) = cli.cmd else {
            panic!()
        };
        assert!(a.config().is_err());
    }
}

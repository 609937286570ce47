//! `fjord`: a video-on-demand server for stored media.

#![deny(clippy::undocumented_unsafe_blocks)]

use std::{
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

mod cluster;
mod load;
mod play;
mod play_broadcast;
mod publish;

use clap::{Parser, Subcommand};
use fjord_media::{ingest, ts::TsOptions};
use fjord_server::Config;
use indicatif::{ProgressBar, ProgressStyle};

/// Counts what the server's code holds (`fjord_heap_live_bytes`).
#[global_allocator]
static HEAP: fjord_server::heap_count::Counting = fjord_server::heap_count::Counting;

#[derive(Parser)]
#[command(
    name = "fjord",
    version,
    about = "Stream stored audio and video over RTSP/RTP, at the lowest cost per stream"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve every media file under the media root over RTSP.
    ///
    /// MPEG-TS, MP4/MOV (H.264, H.265, AAC, Opus), MPEG-1/2 program and video
    /// elementary streams, ADTS AAC and MP3, detected by content. Play with
    /// e.g. `ffplay rtsp://HOST:8554/NAME.mp4`. Settings come from
    /// --config (TOML, see docs/config.md) with these flags on top.
    Serve(ServeArgs),
    /// Packetize media files once, writing FILE.fjidx beside each (and
    /// FILE.fjfec, FILE.fjpkt).
    ///
    /// `serve` does this on demand; ingesting ahead keeps the first client
    /// from waiting.
    Ingest {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// MPEG-TS packets per RTP packet
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u8).range(1..=7))]
        ts_per_rtp: u8,
        /// Parity sidecar FILE.fjfec: K source and M repair packets per
        /// block (K + M ≤ 255, RFC 6865 Reed-Solomon over GF(2^8)), "auto"
        /// (12.5 %, ≤ 300 ms per block, at most 223:32) or "off"
        #[arg(long, default_value = "auto", value_name = "K:M|auto|off")]
        fec: fjord_fec::FecChoice,
        /// Prefabricated packets FILE.fjpkt: every RTP packet, header and
        /// payload, back to back, so a burst leaves as one run of the file
        /// (less CPU per packet; costs about the file's size again on disk)
        #[arg(long, default_value = "on", value_name = "on|off", value_parser = on_off, action = clap::ArgAction::Set)]
        prefab: bool,
    },
    Publish(publish::PublishArgs),
    /// A cluster of nodes (docs/cluster.md): `fjord cluster status`.
    Cluster(cluster::ClusterArgs),
    /// Check a media file against the parity written at ingest; names damaged
    /// blocks and byte ranges. Exit 0 intact, 1 damaged, 2 cannot check.
    Verify {
        path: PathBuf,
        /// The parity sidecar, when not beside the media file (a server
        /// with a pool of disks keeps it on another disk and names it in
        /// its log)
        #[arg(long, value_name = "FILE")]
        parity: Option<PathBuf>,
    },
    /// Rebuild damaged packets of a media file from its parity, bit-exact,
    /// replacing the file atomically. Exit 0 intact or repaired, 1 beyond
    /// repair, 2 cannot check.
    Repair {
        path: PathBuf,
        /// The parity sidecar, when not beside the media file
        #[arg(long, value_name = "FILE")]
        parity: Option<PathBuf>,
    },
    /// Many RTSP sessions at once, each checked as it arrives: loss,
    /// reordering, lateness against its schedule, jitter, throughput.
    Load(load::LoadArgs),
    Play(play::PlayArgs),
    /// Print a `[[user]]` table for the config with the password stored as
    /// its Digest hashes (MD5 and SHA-256), not in the clear. Reads the
    /// password from the first line of stdin.
    Passwd {
        /// The user's name
        name: String,
        /// The config's `auth_realm` (the hashes bind it)
        #[arg(long, default_value = fjord_proto::auth::DEFAULT_REALM)]
        realm: String,
    },
    /// Make a self-signed TLS certificate and key (PEM) for `rtsps://` and
    /// HTTPS, and print the config lines that use them. For tests and
    /// trials: players must be told to accept it.
    Cert {
        /// Directory for cert.pem and key.pem
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Names the certificate is for (DNS names or IP addresses)
        #[arg(long, default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned()])]
        name: Vec<String>,
        /// The server's config: `--out` is refused inside its media roots
        #[arg(long)]
        config: Option<PathBuf>,
        /// A media root `--out` must not be inside [default: ./media, and
        /// the config's roots]
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// The experiments: CPU, system calls and copies per packet of every
    /// data path (the seeds' streaming and download tests), side by side;
    /// capacity, disks, the peers, soaks. `fjord bench --help` lists them.
    ///
    /// They are a program of their own, `fjord-bench`, beside this one
    /// (`cargo build --release` builds both): `fjord bench ARGS` runs
    /// `fjord-bench ARGS`.
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark and its flags
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(clap::Args, Clone)]
struct ServeArgs {
    /// Directory of titles [default: ./media]
    #[arg(long)]
    root: Option<PathBuf>,
    /// RTSP port [default: 8554]; 0 picks a free one
    #[arg(long)]
    port: Option<u16>,
    /// HTTP download port [default: 8080]; 0 turns HTTP off
    #[arg(long)]
    http_port: Option<u16>,
    /// Admin listener: status page, /metrics, JSON API [default:
    /// 127.0.0.1:9090]; "" turns it off
    #[arg(long, value_name = "ADDR:PORT")]
    admin_bind: Option<String>,
    /// Address to listen on [default: 0.0.0.0]
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// Engine threads [default: one per core]
    #[arg(long)]
    threads: Option<usize>,
    /// How packets leave [default: auto, the best this kernel supports]
    #[arg(long)]
    datapath: Option<String>,
    /// FEC block layout of titles ingested on demand (their parity is
    /// made in the background): auto, K:M or off [default: auto]
    #[arg(long, value_name = "auto|K:M|off")]
    fec: Option<String>,
    /// TOML file with the settings documented in docs/config.md
    #[arg(long)]
    config: Option<PathBuf>,
    /// How far ahead of each session its packets are kept resident, in
    /// milliseconds; 0 serves straight from the mapped files [default: 4000]
    #[arg(long)]
    readahead_ms: Option<u64>,
    /// Rewrite this file every second with the server's counters (JSON)
    #[arg(long)]
    stats_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FJORD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    // The verbs that map files (serve, ingest, verify, repair) survive a
    // file truncated underneath: see fjord_media::guard.
    if matches!(
        cli.command,
        Cmd::Serve { .. }
            | Cmd::Ingest { .. }
            | Cmd::Publish(_)
            | Cmd::Verify { .. }
            | Cmd::Repair { .. }
    ) {
        fjord_media::guard::install();
    }
    // Ingest, verify and repair are bulk I/O: in the kernel's idle class, a
    // disk scheduler that honours it (BFQ, mq-deadline) serves a running
    // server's stream reads first. (A cgroup throttle does not look at it;
    // a server ingesting titles itself paces them by its own scheduler.)
    if matches!(
        cli.command,
        Cmd::Ingest { .. } | Cmd::Publish(_) | Cmd::Verify { .. } | Cmd::Repair { .. }
    ) {
        fjord_storage::ioprio::bulk();
    }
    let result = match cli.command {
        Cmd::Serve(args) => serve(args),
        Cmd::Ingest {
            paths,
            ts_per_rtp,
            fec,
            prefab,
        } => ingest_all(&paths, ts_per_rtp, fec, prefab),
        Cmd::Publish(args) => publish::run(args),
        Cmd::Cluster(args) => cluster::run(args),
        Cmd::Verify { path, parity } => return storage(&path, parity, false),
        Cmd::Repair { path, parity } => return storage(&path, parity, true),
        Cmd::Bench { args } => bench(args),
        Cmd::Load(args) => load::run(args),
        Cmd::Play(args) => play::run(args),
        Cmd::Passwd { name, realm } => passwd(&name, &realm),
        Cmd::Cert {
            out,
            name,
            config,
            root,
        } => outside_roots(&out, config, root).and_then(|()| cert(&out, name)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fjord: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `fjord-bench ARGS` in place of this process: the `fjord-bench`
/// beside this executable.
fn bench(args: Vec<std::ffi::OsString>) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().context("locating the fjord executable")?;
    let bench = me.with_file_name("fjord-bench");
    anyhow::ensure!(
        bench.is_file(),
        "the benchmarks are a program of their own and there is no {} beside {}: build it with \
         `cargo build --release -p fjord-bench` (`make build` builds both)",
        bench.display(),
        me.display()
    );
    // Usage lines and errors then read `fjord bench …`.
    let err = std::process::Command::new(&bench)
        .arg0("fjord bench")
        .args(args)
        .exec();
    Err(err).with_context(|| format!("running {}", bench.display()))
}

/// Refuses a key directory inside a media root: keys beside the titles
/// are one misconfiguration away from being served.
fn outside_roots(
    out: &std::path::Path,
    config: Option<PathBuf>,
    root: Option<PathBuf>,
) -> anyhow::Result<()> {
    let mut cfg = match config {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    if let Some(r) = root {
        cfg.root = r;
    }
    // The directory may not exist yet: its nearest existing ancestor says
    // where it will be.
    let absolute = std::path::absolute(out)?;
    let existing = (absolute.ancestors()).find_map(|a| Some((a, a.canonicalize().ok()?)));
    let Some((ancestor, canonical)) = existing else {
        return Ok(());
    };
    let place = canonical.join(absolute.strip_prefix(ancestor)?);
    for root in cfg.roots() {
        let Ok(root) = root.canonicalize() else {
            continue;
        };
        anyhow::ensure!(
            !place.starts_with(&root),
            "{} is inside the media root {}: a private key does not belong beside the \
             titles; choose a directory outside every root (e.g. /etc/fjord)",
            out.display(),
            root.display()
        );
    }
    Ok(())
}

fn cert(out: &std::path::Path, names: Vec<String>) -> anyhow::Result<()> {
    let made = rcgen::generate_simple_self_signed(names)?;
    std::fs::create_dir_all(out)?;
    let (cert, key) = (out.join("cert.pem"), out.join("key.pem"));
    std::fs::write(&cert, made.cert.pem())?;
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key)?;
        std::io::Write::write_all(&mut f, made.signing_key.serialize_pem().as_bytes())?;
    }
    println!(
        "tls_cert = {:?}\ntls_key = {:?}",
        cert.canonicalize()?,
        key.canonicalize()?
    );
    Ok(())
}

fn passwd(name: &str, realm: &str) -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']);
    anyhow::ensure!(!password.is_empty(), "no password on stdin");
    let hash = fjord_proto::auth::hashed_secret(name, realm, password);
    println!("[[user]]\nname = {name:?}\npassword = \"{hash}\"\npaths = [\"**\"]");
    Ok(())
}

/// The config file with the command line's flags on top: at start, and
/// again on every SIGHUP.
fn load_config(args: ServeArgs) -> Result<Config, fjord_server::ConfigError> {
    let ServeArgs {
        root,
        port,
        http_port,
        admin_bind,
        bind,
        threads,
        datapath,
        fec,
        config,
        readahead_ms,
        stats_file,
    } = args;
    let mut cfg = match config {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    if let Some(r) = root {
        cfg.root = r;
    }
    if let Some(p) = port {
        cfg.port = p;
    }
    if let Some(p) = http_port {
        cfg.http_port = p;
    }
    if let Some(a) = admin_bind {
        cfg.admin_bind = a;
    }
    if let Some(b) = bind {
        cfg.bind = b;
    }
    if let Some(t) = threads {
        cfg.threads = t;
    }
    if let Some(d) = datapath {
        cfg.datapath = d;
    }
    if let Some(f) = fec {
        cfg.fec = f;
    }
    if let Some(r) = readahead_ms {
        cfg.readahead_ms = r;
    }
    if let Some(f) = stats_file {
        cfg.stats_file = f;
    }
    Ok(cfg)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = load_config(args.clone())?;
    // One malloc arena for the whole server, set before any thread starts:
    // only the control plane allocates (the engine's sending never does),
    // and glibc's arena per thread kept ~0.7 KB per session apart in
    // memory the other threads could not reuse.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a malloc parameter; no thread runs yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    // The blocking pool runs index lookups, file opens and statistics: a
    // few at a time. Its threads are kept a minute (not tokio's 10 s), so
    // a steady load keeps a steady set instead of starting threads all the
    // time, and bounded, so a stall cannot pile up hundreds.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .thread_keep_alive(std::time::Duration::from_secs(60))
        .enable_all()
        .build()?;
    let source = Box::new(move || load_config(args.clone()));
    rt.block_on(fjord_server::serve(cfg, source))?;
    Ok(())
}

/// `fjord verify` / `fjord repair`: 0 intact or repaired, 1 damaged or
/// beyond repair, 2 cannot check.
fn storage(path: &std::path::Path, parity: Option<PathBuf>, repair: bool) -> ExitCode {
    use fjord_fec::{FecError, RepairOutcome};
    let shown = path.display();
    let parity = parity.unwrap_or_else(|| fjord_fec::sidecar_path_for(path));
    let code = if repair {
        match fjord_fec::repair_with(path, &parity) {
            Ok(RepairOutcome::Clean) => {
                println!("{shown}: intact, nothing to repair");
                0
            }
            Ok(RepairOutcome::Repaired {
                blocks,
                packets,
                bytes,
                packet_file,
            }) => {
                if packets > 0 {
                    println!(
                        "{shown}: repaired {packets} packets ({bytes} bytes) in {blocks} blocks; bit-exact to the ingested file again"
                    );
                }
                if packet_file {
                    println!("{shown}: prefabricated packets rewritten from the media");
                }
                0
            }
            Err(e @ FecError::BeyondRepair(_)) => {
                eprintln!("fjord: {shown}: {e}");
                1
            }
            Err(e) => {
                eprintln!("fjord: {shown}: {e}");
                2
            }
        }
    } else {
        match fjord_fec::verify_with(path, &parity) {
            Ok(report) if report.is_clean() => {
                println!("{shown}: intact, every packet matches its parity");
                0
            }
            Ok(report) => {
                print!("{report}");
                match report.beyond_repair() {
                    Some(why) => println!("{shown}: damaged beyond repair: {why}"),
                    None if parity == fjord_fec::sidecar_path_for(path) => {
                        println!("{shown}: damaged; run `fjord repair {shown}`")
                    }
                    None => println!(
                        "{shown}: damaged; run `fjord repair --parity {} {shown}`",
                        parity.display()
                    ),
                }
                1
            }
            Err(e) => {
                eprintln!("fjord: {shown}: {e}");
                2
            }
        }
    };
    ExitCode::from(code)
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: say on or off")),
    }
}

fn ingest_all(
    paths: &[PathBuf],
    ts_per_rtp: u8,
    fec: fjord_fec::FecChoice,
    prefab: bool,
) -> anyhow::Result<()> {
    let options = TsOptions {
        ts_per_rtp,
        ..Default::default()
    };
    let layouts = fjord_fec::layouts(fec);
    let mut failed = 0;
    for path in paths {
        let started = Instant::now();
        let mut bar: Option<ProgressBar> = None;
        let mut progress = |done: u64, total: u64| {
            // A bar only when the file takes more than a moment.
            if bar.is_none() && started.elapsed() > Duration::from_millis(300) {
                let b = ProgressBar::new(total).with_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                b.set_message(path.display().to_string());
                bar = Some(b);
            }
            if let Some(b) = &bar {
                b.set_position(done);
            }
        };
        let result =
            ingest::ingest_file(path, &options, &layouts, &mut progress).map_err(|e| e.to_string());
        let result = result.and_then(|r| {
            let parity = fjord_fec::protect(path, &mut |_, _| {});
            let parity = parity.map_err(|e| format!("{}: parity: {e}", path.display()))?;
            let packets = if prefab {
                fjord_media::prefab::prefabricate(path, &mut |_, _| {}).map(Some)
            } else {
                fjord_media::prefab::remove(path)
                    .map(|()| None)
                    .map_err(Into::into)
            };
            let packets =
                packets.map_err(|e| format!("{}: prefabricated packets: {e}", path.display()))?;
            Ok((r, parity, packets))
        });
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        match result {
            Ok((r, parity, packets)) => {
                let secs = started.elapsed().as_secs_f64();
                let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                let index =
                    fjord_media::index::Index::open(&fjord_media::index::index_path_for(path));
                let duration_ns = index.as_ref().map_or(0, |i| i.duration_ns());
                let tracks: Vec<String> = index.as_ref().map_or(Vec::new(), |i| {
                    i.tracks()
                        .map(|t| match t.channels() {
                            0 => format!("{}/{}", t.encoding(), t.clock_rate()),
                            n => format!("{}/{}/{n}", t.encoding(), t.clock_rate()),
                        })
                        .collect()
                });
                println!(
                    "{}: {} [{}]: {} RTP packets, {:.3} s of media, {:.2} Mbit/s, timing from {:?}; ingested in {:.3} s ({:.0} MB/s)",
                    path.display(),
                    r.format,
                    tracks.join(", "),
                    r.rtp_packets,
                    duration_ns as f64 / 1e9,
                    r.bitrate_bps as f64 / 1e6,
                    r.timing,
                    secs,
                    size as f64 / 1e6 / secs.max(1e-9),
                );
                if let Some(p) = parity {
                    let layouts: Vec<String> =
                        p.tracks.iter().map(|(l, _)| l.to_string()).collect();
                    println!(
                        "{}: parity {} (K:M per track), {:.1} MB in {}",
                        path.display(),
                        layouts.join(" "),
                        p.repair_bytes as f64 / 1e6,
                        fjord_fec::sidecar_path_for(path).display(),
                    );
                }
                if let Some(bytes) = packets {
                    println!(
                        "{}: prefabricated packets, {:.1} MB in {}",
                        path.display(),
                        bytes as f64 / 1e6,
                        fjord_media::prefab::prefab_path_for(path).display(),
                    );
                }
                for w in &r.warnings {
                    println!("{}: warning: {w}", path.display());
                }
            }
            Err(e) => {
                eprintln!("fjord: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} files could not be ingested", paths.len());
    }
    Ok(())
}

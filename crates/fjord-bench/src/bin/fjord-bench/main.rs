//! `fjord-bench`: the experiments of the `fjord-bench` library on the
//! command line. A program of its own, so the server (`fjord`) does not
//! link them; `fjord bench ARGS` runs it with ARGS. The benchmarks that
//! start a server or ingest titles (peers, idle, storage, http, soak,
//! capacity --receivers) run the `fjord` beside it; `disk` and `capacity`
//! save what they measured where `fjord serve`'s admission control reads
//! it.

#![deny(clippy::undocumented_unsafe_blocks)]

mod broadcast;
mod capacity;
mod cluster;
mod datapath;
mod disk;
mod edge;
mod http;
mod live;
mod peers;
mod soak;
mod storage;

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Parser, Subcommand};

use broadcast::BroadcastArgs;
use capacity::CapacityArgs;
use cluster::ClusterArgs;
use datapath::{DatapathArgs, DownloadArgs};
use disk::DiskArgs;
use edge::EdgeArgs;
use http::HttpArgs;
use peers::{IdleArgs, PeersArgs};
use soak::SoakArgs;
use storage::StorageArgs;

#[derive(Parser)]
#[command(
    name = "fjord-bench",
    version,
    about = "fjord's experiments: CPU, system calls and copies per packet of every data path, \
             capacity, disks, the peers, soaks (also run as `fjord bench`)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: BenchCmd,
}

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
    /// The same load against fjord, live555MediaServer, GStreamer's
    /// rtsp-server and MediaMTX: server CPU per packet side by side.
    ///
    /// Makes (once, with ffmpeg, kept in --media) a 4.5 Mbit/s H.264 + AAC
    /// MPEG-TS title; for each installed server, starts it afresh per run,
    /// pinned to one CPU, plays N sessions of the title to `fjord load`
    /// receivers on another CPU over loopback, and reads the server
    /// process's CPU over the receive window. A peer that is not installed
    /// is skipped with the package to install (`make peers` installs them);
    /// MediaMTX (not installable here: from $FJORD_MEDIAMTX, the PATH or
    /// shared/peers/, else skipped) is a live relay of the title pushed
    /// once by ffmpeg, read by the same receivers. In the same
    /// runs, the kernel floor (unless --no-floor): prebuilt packets sent
    /// at the same rate to the same kind of receivers with no server, in
    /// bursts of each --floor-bursts. Writes peers.md and peers.csv to
    /// --out and prints the table.
    Peers(PeersArgs),
    /// One ffmpeg publisher and N viewers of its live stream: latency
    /// added, CPU per packet beside the same viewers of a VOD title, memory
    /// per viewer, MediaMTX beside. Writes live.md to --out.
    Live(live::LiveArgs),
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
    /// An edge serving a library it holds a fifth of, from an origin a
    /// round trip away.
    ///
    /// Makes (once) --titles titles of --title-mb MB as `bench storage`
    /// does, publishes them with `fjord publish` to versitygw (`make deps`)
    /// behind a forwarder that holds every segment --hold-ms each way, and
    /// starts `fjord serve` as its edge with cache_gb = --cache-share of
    /// the library. --sessions viewers arrive --stagger-ms apart at titles
    /// of Zipf(--zipf) popularity, each playing from the start to plain UDP
    /// receivers. Reports time to first packet (all, and on titles
    /// uncached at the session's start), late packets, origin bytes beside
    /// the distinct slices read, and the byte hit ratio served beside
    /// S4LRU, LRU and Belady replayed on the same plan. Writes edge.md and
    /// edge.json to --out.
    Edge(EdgeArgs),
    /// A cluster of edges in network namespaces, with etcd and a SeaweedFS
    /// origin: content-affine routing against none, failover (docs/cluster.md).
    Cluster(ClusterArgs),
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FJORD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match Cli::parse().cmd {
        BenchCmd::Datapath(a) => datapath::datapath(a),
        BenchCmd::Download(a) => datapath::download(a),
        BenchCmd::Capacity(a) => capacity::run(a),
        BenchCmd::Peers(a) => peers::peers(a),
        BenchCmd::Live(a) => live::run(a),
        BenchCmd::Idle(a) => peers::idle(a),
        BenchCmd::Disk(a) => disk::run(a),
        BenchCmd::Storage(a) => storage::run(a),
        BenchCmd::Edge(a) => edge::run(a),
        BenchCmd::Cluster(a) => cluster::run(a),
        BenchCmd::Http(a) => http::run(a),
        BenchCmd::Soak(a) => soak::run(a),
        BenchCmd::Broadcast(a) => broadcast::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fjord bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The `fjord` beside this program: the server the benchmarks start, and
/// the `fjord ingest` they make titles with.
pub(crate) fn fjord_exe() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("locating the fjord-bench executable")?;
    let fjord = me.with_file_name("fjord");
    anyhow::ensure!(
        fjord.is_file(),
        "this benchmark runs the fjord server, and there is no {} beside {}: build it with \
         `cargo build --release -p fjord`",
        fjord.display(),
        me.display()
    );
    Ok(fjord)
}

/// The command line as the reports give it: `fjord bench ARGS`, however
/// this program was started.
pub(crate) fn command_line() -> String {
    std::iter::once("fjord bench".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ")
}

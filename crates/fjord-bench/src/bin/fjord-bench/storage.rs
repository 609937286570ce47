//! `fjord bench storage`: sessions on time when the library does not fit
//! in memory and the disk is slow.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

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
    /// Disks of the storage pool: 1 serves the library from its own disk;
    /// more copies it once onto that many loop devices (images beside the
    /// library, title k on disk k mod N), each throttled to --disk-mbps and
    /// --disk-iops, served as `roots`
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=8))]
    pub roots: u64,
    /// Zipf exponent of the titles' popularity, the first title the most
    /// asked for (0: every title alike)
    #[arg(long, default_value_t = 0.0)]
    pub zipf: f64,
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

pub fn run(a: StorageArgs) -> anyhow::Result<()> {
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
        fjord_exe: crate::fjord_exe()?,
        progress: true,
        roots: a.roots as usize,
        zipf: a.zipf,
    };
    let command = crate::command_line();
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

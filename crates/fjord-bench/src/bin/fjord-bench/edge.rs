//! `fjord bench edge`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub struct EdgeArgs {
    /// Titles of the library (4.5 Mbit/s H.264 + AAC MPEG-TS)
    #[arg(long, default_value_t = 100)]
    pub titles: usize,
    /// Size of each title, MB
    #[arg(long, default_value_t = 12)]
    pub title_mb: u64,
    /// Where made libraries are kept and reused [default:
    /// $XDG_CACHE_HOME/fjord/storage-library]
    #[arg(long, value_name = "DIR")]
    pub library_cache: Option<PathBuf>,
    /// The edge's cache as a share of the library's bytes
    #[arg(long, default_value_t = 0.2)]
    pub cache_share: f64,
    /// Viewers
    #[arg(long, default_value_t = 100)]
    pub sessions: usize,
    /// Milliseconds between two viewers' arrivals
    #[arg(long, default_value_t = 100)]
    pub stagger_ms: u64,
    /// Seconds the last viewer to arrive receives
    #[arg(long, default_value_t = 15.0)]
    pub seconds: f64,
    /// Zipf exponent of the titles' popularity
    #[arg(long, default_value_t = 0.8)]
    pub zipf: f64,
    /// Milliseconds the forwarder holds each segment, each way (half the
    /// origin's round trip)
    #[arg(long, default_value_t = 10)]
    pub hold_ms: u64,
    /// Rate of the origin's link, Mbit/s: the S3 server runs in a network
    /// namespace behind a veth pair whose far end shapes it with `tbf`
    /// (needs root; 0: on loopback, unshaped)
    #[arg(long, default_value_t = 1000)]
    pub origin_mbit: u64,
    /// Seed of the viewers' titles
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Viewers of the one title whose server CPU per packet is measured
    /// from the edge and from local disk (0: not measured)
    #[arg(long, default_value_t = 100)]
    pub cpu_sessions: usize,
    /// Seconds each CPU measurement plays
    #[arg(long, default_value_t = 10.0)]
    pub cpu_seconds: f64,
    /// Directory for edge.md and edge.json
    #[arg(long, default_value = "bench/results/edge")]
    pub out: PathBuf,
}

pub fn run(a: EdgeArgs) -> anyhow::Result<()> {
    use fjord_bench::edge::{self, EdgeConfig};
    let cfg = EdgeConfig {
        titles: a.titles,
        title_mb: a.title_mb,
        library_cache: (a.library_cache.clone())
            .unwrap_or_else(fjord_bench::storage::library::default_cache),
        cache_share: a.cache_share,
        sessions: a.sessions,
        stagger: Duration::from_millis(a.stagger_ms),
        seconds: a.seconds,
        zipf: a.zipf,
        hold: Duration::from_millis(a.hold_ms),
        origin_mbit: a.origin_mbit,
        seed: a.seed,
        cpu_sessions: a.cpu_sessions,
        cpu_seconds: a.cpu_seconds,
        fjord_exe: crate::fjord_exe()?,
    };
    let report = edge::run(&cfg, &crate::command_line())?;
    let md = edge::markdown(&report);
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    std::fs::write(a.out.join("edge.md"), &md)?;
    std::fs::write(
        a.out.join("edge.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    println!("{md}");
    Ok(())
}

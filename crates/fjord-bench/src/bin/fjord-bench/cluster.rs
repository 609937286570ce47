//! `fjord bench cluster`'s arguments.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub struct ClusterArgs {
    /// fjord nodes, each in a network namespace of its own (2 to 5)
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Titles of the library (4.5 Mbit/s H.264 + AAC MPEG-TS)
    #[arg(long, default_value_t = 200)]
    pub titles: usize,
    /// Size of each title, MB
    #[arg(long, default_value_t = 2)]
    pub title_mb: u64,
    /// Where made libraries are kept and reused [default:
    /// $XDG_CACHE_HOME/fjord/cluster-library]
    #[arg(long, value_name = "DIR")]
    pub library_cache: Option<PathBuf>,
    /// Viewers of the routed and the alone phases
    #[arg(long, default_value_t = 600)]
    pub sessions: usize,
    /// Viewers of the failover phase
    #[arg(long, default_value_t = 300)]
    pub failover_sessions: usize,
    /// Milliseconds between two viewers' arrivals
    #[arg(long, default_value_t = 50)]
    pub gap_ms: u64,
    /// Zipf exponent of the titles' popularity
    #[arg(long, default_value_t = 0.8)]
    pub zipf: f64,
    /// Rate limit of each node's veth, each way, Mbit/s
    #[arg(long, default_value_t = 300)]
    pub mbit: u32,
    /// The nodes' cluster_ttl_s
    #[arg(long, default_value_t = 3)]
    pub ttl_s: u32,
    /// The nodes' cluster_hot_rps
    #[arg(long, default_value_t = 1.5)]
    pub hot_rps: f64,
    /// The nodes' cluster_balance_pct (ε of bounded loads; 0: no bound)
    #[arg(long, default_value_t = fjord_server::Config::default().cluster_balance_pct)]
    pub balance_pct: u32,
    /// The nodes' cluster_copy_share_pct (a title's homes by its share of
    /// the sessions; 0: not by sessions)
    #[arg(long, default_value_t = fjord_server::Config::default().cluster_copy_share_pct)]
    pub copy_share_pct: u32,
    /// Seed of the viewers' plan
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Keep the scratch directory (the processes' logs and configs)
    #[arg(long)]
    pub keep: bool,
    /// Directory for cluster.md and cluster.json
    #[arg(long, default_value = "bench/results/cluster")]
    pub out: PathBuf,
}

pub fn run(a: ClusterArgs) -> anyhow::Result<()> {
    use fjord_bench::cluster::{self, ClusterConfig};
    let cfg = ClusterConfig {
        nodes: a.nodes,
        titles: a.titles,
        title_mb: a.title_mb,
        library_cache: a
            .library_cache
            .clone()
            .unwrap_or_else(cluster::library::default_cache),
        sessions: a.sessions,
        failover_sessions: a.failover_sessions,
        gap: Duration::from_millis(a.gap_ms),
        zipf: a.zipf,
        mbit: a.mbit,
        ttl_s: a.ttl_s,
        hot_rps: a.hot_rps,
        balance_pct: a.balance_pct,
        copy_share_pct: a.copy_share_pct,
        seed: a.seed,
        fjord_exe: crate::fjord_exe()?,
        keep: a.keep,
    };
    let report = cluster::run(&cfg, &crate::command_line())?;
    let md = cluster::report::markdown(&report);
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    std::fs::write(a.out.join("cluster.md"), &md)?;
    // Compact: it holds every viewer's outcome (1,500 of them by default).
    let json = serde_json::to_string(&report)? + "\n";
    std::fs::write(a.out.join("cluster.json"), json)?;
    println!("{md}");
    Ok(())
}

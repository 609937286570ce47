//! `fjord bench broadcast`: periodic broadcasting schemes simulated.

use std::path::PathBuf;

use clap::Args;

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

pub fn run(a: BroadcastArgs) -> anyhow::Result<()> {
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
    let command = crate::command_line();
    let report = fjord_bench::broadcast::run(&cfg, &command)?;
    println!("{}", report.markdown());
    println!("written: {}", a.out.join("broadcast.md").display());
    Ok(())
}

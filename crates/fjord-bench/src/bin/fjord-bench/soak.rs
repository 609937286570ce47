//! `fjord bench soak`: session churn against one server for a long while.

use std::path::PathBuf;

use clap::Args;

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

pub fn run(a: SoakArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::soak::SoakConfig {
        sessions: a.sessions,
        minutes: a.minutes,
        tcp_share: a.tcp_share,
        title_seconds: a.title_seconds,
        seed: a.seed,
        out: a.out.clone(),
        fjord_exe: crate::fjord_exe()?,
        progress: true,
        realtime: a.realtime,
        veth: a.veth,
    };
    let command = crate::command_line();
    let report = fjord_bench::soak::run(&cfg, &command)?;
    for line in report.verdict() {
        println!("{line}");
    }
    println!("written: {}", a.out.join("soak.md").display());
    Ok(())
}

//! `fjord load`: many RTSP sessions against a server, verified as they arrive.

use std::time::Duration;

use fjord_client::load::{self, LoadConfig};

/// Play one title in many sessions at once and check what arrives.
///
/// Opens N sessions (each on its own RTSP connection, started 1 ms apart),
/// receives for SECONDS after the last one started, then tears them down and
/// reports loss, reordering, duplicates, packets more than 2 ms late, RFC 3550
/// jitter, throughput and its own CPU. Titles shorter than the run are
/// played again from the start. Exits non-zero if any session failed to set up.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// The title, e.g. rtsp://127.0.0.1:8554/clip.ts
    pub url: String,
    /// Concurrent sessions
    #[arg(short = 'n', long = "sessions", default_value_t = 1)]
    pub n: usize,
    /// Seconds to receive
    #[arg(short = 't', long = "time", default_value_t = 10.0)]
    pub t: f64,
    /// RTP interleaved on the RTSP connection instead of UDP
    #[arg(long)]
    pub tcp: bool,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.n > 0, "-n must be at least 1");
    anyhow::ensure!(
        args.t.is_finite() && args.t > 0.0,
        "-t must be a positive number of seconds"
    );
    let mut config = LoadConfig::new(&args.url, args.n, Duration::from_secs_f64(args.t));
    config.tcp = args.tcp;
    let report = load::run(&config)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    anyhow::ensure!(
        report.setup_failures == 0,
        "{} of {} sessions failed to set up",
        report.setup_failures,
        report.sessions_requested
    );
    Ok(())
}

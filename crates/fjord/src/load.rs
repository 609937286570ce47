//! `fjord load`: many RTSP sessions against a server, verified as they arrive.

use std::time::Duration;

use fjord_client::load::{self, FecOptions, LoadConfig};

/// Play one title in many sessions at once and check what arrives.
///
/// Opens N sessions (each on its own RTSP connection, started 1 ms apart),
/// receives for SECONDS after the last one started, then tears them down and
/// reports loss, reordering, duplicates, packets more than 2 ms late, RFC 3550
/// jitter, throughput and its own CPU. Titles shorter than the run are
/// played again from the start. Exits non-zero if any session failed to set up.
///
/// With --fec, each session also receives the repair stream the title offers
/// (a title ingested with `fjord ingest --fec`) and rebuilds lost packets;
/// --drop / --burst drop received packets before that, for testing. The
/// report then adds packets dropped, recovered and unrecoverable, and the
/// receive thread's CPU time in decoding. Rebuilt packets are not lost, and
/// not counted in throughput, lateness or jitter.
#[derive(clap::Args, Debug, Clone)]
pub struct LoadArgs {
    /// The title, e.g. rtsp://127.0.0.1:8554/clip.ts (rtsps:// speaks TLS,
    /// the certificate not checked; with --tcp); with --random-start, one
    /// or more titles
    #[arg(required = true)]
    pub urls: Vec<String>,
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
    /// Receive the repair streams and rebuild lost packets
    #[arg(long)]
    pub fec: bool,
    /// Testing, with --fec: drop each received packet (source or repair)
    /// with this probability before recovery
    #[arg(long, default_value_t = 0.0, value_name = "P", requires = "fec")]
    pub drop: f64,
    /// Testing, with --drop P: drop runs of exactly N source packets
    /// instead, a run starting with probability P after at least K kept
    /// source packets (so a block of K loses at most N); repair packets kept
    #[arg(long, value_name = "N", requires = "drop")]
    pub burst: Option<u32>,
    /// Seed of the loss model (session i uses SEED + i), and of
    /// --random-start
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Receive as players do: no UDP_GRO on the RTP sockets (every packet
    /// its own datagram)
    #[arg(long)]
    pub no_gro: bool,
    /// Each session plays a random one of the URLs from a random position
    /// (PLAY Range: npt=X-, X uniform in [0, duration - time])
    #[arg(long)]
    pub random_start: bool,
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.n > 0, "-n must be at least 1");
    anyhow::ensure!(
        args.t.is_finite() && args.t > 0.0,
        "-t must be a positive number of seconds"
    );
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.drop),
        "--drop must be a probability between 0 and 1"
    );
    anyhow::ensure!(args.burst != Some(0), "--burst must be at least 1");
    anyhow::ensure!(
        args.random_start || args.urls.len() == 1,
        "several URLs need --random-start"
    );
    let mut config = LoadConfig::new(&args.urls[0], args.n, Duration::from_secs_f64(args.t));
    config.tcp = args.tcp;
    config.gro = !args.no_gro;
    if args.random_start {
        let titles = args
            .urls
            .iter()
            .map(|u| Ok((u.clone(), load::title_duration_s(u)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        config.starts = load::random_starts(&titles, args.n, args.t, args.seed);
    }
    config.fec = args.fec.then_some(FecOptions {
        drop: args.drop,
        burst: args.burst,
        seed: args.seed,
    });
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

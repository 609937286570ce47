//! `fjord bench datapath` and `fjord bench download`: the seeds'
//! streaming and download experiments.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use fjord_bench::{
    DatapathConfig, parse_bytes, parse_paths, report, run_datapath, sink::SinkChoice, summarise,
    summarise_download,
};

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

pub fn datapath(a: DatapathArgs) -> anyhow::Result<()> {
    run(&a.config()?)
}

pub fn download(a: DownloadArgs) -> anyhow::Result<()> {
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
    run(&cfg)
}

fn run(cfg: &DatapathConfig) -> anyhow::Result<()> {
    let results = run_datapath(cfg)?;
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

    use crate::BenchCmd;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: BenchCmd,
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

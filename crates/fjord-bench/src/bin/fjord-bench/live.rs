//! `fjord bench live`: one ffmpeg publisher, N viewers, fjord's CPU per
//! packet beside the same viewers of a VOD title, latency, memory.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct LiveArgs {
    /// Viewer counts, each measured in turn (live, VOD, MediaMTX)
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 100, 1000])]
    pub viewers: Vec<usize>,
    /// Seconds the viewers receive per row
    #[arg(long, default_value_t = 12.0)]
    pub seconds: f64,
    /// CPU the servers are pinned to (the viewers and the publisher take the next one)
    #[arg(long, default_value_t = 0)]
    pub cpu: usize,
    /// The servers under SCHED_FIFO at one low priority (needs CAP_SYS_NICE)
    #[arg(long)]
    pub realtime: bool,
    /// No MediaMTX rows
    #[arg(long)]
    pub no_mediamtx: bool,
    /// Directory for live.md
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Where the source is made and kept [default: $XDG_CACHE_HOME/fjord/live]
    #[arg(long)]
    pub media: Option<PathBuf>,
}

pub fn run(a: LiveArgs) -> anyhow::Result<()> {
    use fjord_bench::live::{self, LiveConfig};
    let media = a.media.clone().unwrap_or_else(|| {
        (std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from))
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("fjord/live")
    });
    let cfg = LiveConfig {
        viewers: a.viewers.clone(),
        seconds: a.seconds,
        cpu: a.cpu,
        realtime: a.realtime,
        fjord_exe: crate::fjord_exe()?,
        media_dir: media,
        mediamtx: !a.no_mediamtx,
    };
    let list = a.viewers.iter().map(usize::to_string).collect::<Vec<_>>();
    let command = format!(
        "fjord bench live --viewers {} --seconds {} --cpu {}{}{} --out {}",
        list.join(","),
        a.seconds,
        a.cpu,
        if a.realtime { " --realtime" } else { "" },
        if a.no_mediamtx { " --no-mediamtx" } else { "" },
        a.out.display()
    );
    let report = live::run(&cfg)?;
    let md = live::report::markdown(&report, &command);
    std::fs::create_dir_all(&a.out)?;
    std::fs::write(a.out.join("live.md"), &md)?;
    println!("{md}");
    Ok(())
}

//! `fjord bench peers` (fjord beside live555, GStreamer and MediaMTX, and the
//! kernel floor) and `fjord bench idle` (fjord's cost beyond its packets,
//! thread by thread).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct PeersArgs {
    /// Concurrent sessions per run
    #[arg(long, default_value_t = 20)]
    pub sessions: usize,
    /// Seconds the receivers receive per run
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// RTP interleaved on the RTSP connections instead of UDP
    #[arg(long)]
    pub tcp: bool,
    /// Runs per server (interleaved between servers); medians over these
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// CPU the servers are pinned to (the receivers take the next one)
    #[arg(long, default_value_t = 0)]
    pub cpu: usize,
    /// Every server, all its threads, under SCHED_FIFO at one low
    /// priority (the same for all), so other work on a shared machine does
    /// not take their CPU; needs root or CAP_SYS_NICE
    #[arg(long)]
    pub realtime: bool,
    /// Receivers with UDP GRO (the kernel hands them bursts as one
    /// datagram): cheaper for the server than players' plain sockets, which
    /// the default measures; the report says which
    #[arg(long)]
    pub gro: bool,
    /// Directory for peers.md and peers.csv
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Where the title is made and kept [default: $XDG_CACHE_HOME/fjord/peers]
    #[arg(long)]
    pub media: Option<PathBuf>,
    /// Packets per session per send of the kernel floor rows (prebuilt
    /// packets sent to the same kind of receivers with no server): 1 is a
    /// `send` per packet, more one GSO `sendmsg` per burst
    #[arg(long, value_delimiter = ',', default_values_t = fjord_bench::peers::floor::DEFAULT_BURSTS)]
    pub floor_bursts: Vec<usize>,
    /// No kernel floor rows
    #[arg(long)]
    pub no_floor: bool,
    /// Sessions of each load of a curve (e.g. 10,20,100,500,1000): the
    /// whole comparison at each, in order, instead of one at --sessions;
    /// writes peers-N.md and peers-N.csv per load and peers-curve.md,
    /// peers-curve.csv and peers-curve.svg
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<usize>,
    /// The servers to measure beside the floor: fjord, live555, gst,
    /// mediamtx (a live relay of one copy ffmpeg pushes); fjord-tls (fjord
    /// over RTSPS, with --tcp) is measured only when asked for
    #[arg(long, value_delimiter = ',', default_values_t = ["fjord".to_string(), "live555".into(), "gst".into(), "mediamtx".into()])]
    pub servers: Vec<String>,
}

/// Where `bench peers` and `bench idle` keep their title.
fn peers_media(asked: Option<PathBuf>) -> PathBuf {
    asked.unwrap_or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("fjord")
            .join("peers")
    })
}

#[derive(Args, Clone, Debug)]
pub struct IdleArgs {
    /// Sessions playing while fjord is measured (0: an idle server)
    #[arg(long, default_value_t = 0)]
    pub sessions: usize,
    /// Seconds measured per run (after 3 s of warm-up)
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Runs (a fresh server each); medians over these
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// CPU the server is pinned to (the receivers take the next one)
    #[arg(long, default_value_t = 0)]
    pub cpu: usize,
    /// The server, all its threads, and the floor's sender under
    /// SCHED_FIFO at one low priority; needs root or CAP_SYS_NICE
    #[arg(long)]
    pub realtime: bool,
    /// The server's `udp_sockets`: `shared` (its default: one unconnected
    /// socket per engine thread, each send names its destination) or
    /// `per-session` (a connected socket per session, as the floor's)
    #[arg(long, default_value = "shared", value_parser = ["shared", "per-session"])]
    pub udp_sockets: String,
    /// Directory for idle.md
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Where the title is made and kept [default: $XDG_CACHE_HOME/fjord/peers]
    #[arg(long)]
    pub media: Option<PathBuf>,
}

pub fn idle(a: IdleArgs) -> anyhow::Result<()> {
    use fjord_bench::peers::{Peer, PeersConfig, idle};
    anyhow::ensure!(a.reps > 0, "--reps must be at least 1");
    anyhow::ensure!(
        a.seconds.is_finite() && a.seconds > 0.0,
        "--seconds must be positive"
    );
    let cfg = PeersConfig {
        sessions: a.sessions,
        seconds: a.seconds,
        tcp: false,
        reps: a.reps,
        cpu: a.cpu,
        realtime: a.realtime,
        gro: false,
        fjord_exe: crate::fjord_exe()?,
        media_dir: peers_media(a.media.clone()),
        floor_bursts: Vec::new(),
        servers: vec![Peer::Fjord],
        udp_sockets: a.udp_sockets.clone(),
    };
    let runs = idle::run(&cfg)?;
    let command = format!(
        "fjord bench idle --sessions {} --seconds {} --reps {} --cpu {}{} --udp-sockets {} --out {}",
        a.sessions,
        a.seconds,
        a.reps,
        a.cpu,
        if a.realtime { " --realtime" } else { "" },
        a.udp_sockets,
        a.out.display()
    );
    let md = idle::markdown(&runs, &cfg, &command);
    std::fs::create_dir_all(&a.out)?;
    let path = a.out.join("idle.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    println!("{md}\nwritten: {}", path.display());
    Ok(())
}

pub fn peers(a: PeersArgs) -> anyhow::Result<()> {
    use fjord_bench::peers::{self, PeersConfig, PeersReport, curve};
    use fjord_bench::procfs::CpuTimes;
    let media = peers_media(a.media.clone());
    let servers = (a.servers.iter())
        .map(|n| {
            peers::Peer::parse(n).with_context(|| {
                format!("--servers: no server {n:?} (fjord, live555, gst, mediamtx)")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cfg = PeersConfig {
        sessions: a.sessions,
        seconds: a.seconds,
        tcp: a.tcp,
        reps: a.reps,
        cpu: a.cpu,
        realtime: a.realtime,
        gro: a.gro,
        fjord_exe: match servers.contains(&peers::Peer::Fjord)
            || servers.contains(&peers::Peer::FjordTls)
        {
            true => crate::fjord_exe()?,
            false => "fjord".into(),
        },
        media_dir: media,
        floor_bursts: if a.no_floor {
            Vec::new()
        } else {
            a.floor_bursts.clone()
        },
        servers,
        udp_sockets: "shared".into(),
    };
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let floor = match a.no_floor {
        true => " --no-floor".to_string(),
        false => format!(" --floor-bursts {}", list(&a.floor_bursts)),
    };
    let command = format!(
        "fjord bench peers {} --seconds {}{}{}{}{} --reps {} --servers {} --out {}",
        match a.loads.is_empty() {
            true => format!("--sessions {}", a.sessions),
            false => format!("--loads {}", list(&a.loads)),
        },
        a.seconds,
        if a.tcp { " --tcp" } else { "" },
        if a.realtime { " --realtime" } else { "" },
        if a.gro { " --gro" } else { "" },
        floor,
        a.reps,
        a.servers.join(","),
        a.out.display()
    );
    let load_avg = || {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "?".into())
    };
    // The machine note of one comparison: load and steal over its runs.
    let measure = |cfg: &PeersConfig| -> anyhow::Result<(PeersReport, String)> {
        let (load_before, steal_before) = (load_avg(), CpuTimes::now());
        let report = peers::run(cfg)?;
        let steal = match (steal_before, CpuTimes::now()) {
            (
                Some(CpuTimes {
                    total: t0,
                    steal: s0,
                    ..
                }),
                Some(CpuTimes {
                    total: t1,
                    steal: s1,
                    ..
                }),
            ) if t1 > t0 => format!(
                "; the hypervisor took {:.0} % of the virtual CPUs' time during the runs (steal)",
                100.0 * (s1 - s0) as f64 / (t1 - t0) as f64
            ),
            _ => String::new(),
        };
        let machine = format!(
            "{} (a shared virtual machine: other work may run beside the benchmark; \
             1-minute load average {load_before} before the runs, {} after{steal})",
            peers::machine(),
            load_avg()
        );
        Ok((report, machine))
    };
    std::fs::create_dir_all(&a.out)?;
    let write = |name: &str, text: String| -> anyhow::Result<()> {
        let path = a.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("written: {}", path.display());
        Ok(())
    };
    // One comparison: printed, and written as peers{suffix}.md and .csv.
    let compare = |cfg: &PeersConfig, suffix: &str| -> anyhow::Result<PeersReport> {
        let (report, machine) = measure(cfg)?;
        let md = peers::markdown(&report, &command, &machine);
        println!("{md}");
        write(&format!("peers{suffix}.md"), md)?;
        write(&format!("peers{suffix}.csv"), peers::csv(&report))?;
        Ok(report)
    };
    if a.loads.is_empty() {
        return compare(&cfg, "").map(drop);
    }
    let curve = curve::run(&cfg, &a.loads, |cfg| {
        compare(cfg, &format!("-{}", cfg.sessions))
    })?;
    let md = curve.markdown(&command, &peers::machine());
    println!("{md}");
    write("peers-curve.csv", curve.csv())?;
    let svg = a.out.join("peers-curve.svg");
    curve.svg(&svg)?;
    println!("written: {}", svg.display());
    write("peers-curve.md", md)
}

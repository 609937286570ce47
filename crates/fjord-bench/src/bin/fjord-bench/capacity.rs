//! `fjord bench capacity`: the most concurrent sessions one pinned engine
//! thread keeps on time, saved (90 % of it, in packets per second) in
//! `$XDG_STATE_HOME/fjord/capacity.toml` for the server's admission
//! control (`fjord_server::config` reads it).

use anyhow::Context;
use fjord_bench::sink::SinkChoice;

#[derive(clap::Args, Debug)]
pub struct CapacityArgs {
    /// Measured seconds per run (each run also warms up for 1 s)
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Stop searching at this many sessions
    #[arg(long, default_value_t = 20_000)]
    max: usize,
    /// Run once at exactly this many sessions instead of searching (e.g. to
    /// compare --burst-ms values at one load)
    #[arg(long)]
    sessions: Option<usize>,
    /// How far ahead of schedule a packet may leave (the server's burst_ms);
    /// smaller bursts mean more wake-ups and smaller batches (default: the
    /// server's)
    #[arg(long, default_value_t = fjord_engine::DEFAULT_BURST.as_millis() as u64)]
    burst_ms: u64,
    /// Data path of the engine thread (auto: the server's default)
    #[arg(long, default_value = "auto")]
    datapath: String,
    /// CPU to pin the engine thread to
    #[arg(long, default_value_t = 0)]
    cpu: usize,
    /// Send into a discarding loopback receiver instead of the veth sink
    #[arg(long)]
    loopback: bool,
    /// Measure with real receivers instead: a `fjord serve` child (one
    /// engine thread, pinned to --cpu) and `fjord load` on another CPU
    #[arg(long)]
    receivers: bool,
    /// With --receivers: receivers with UDP GRO (the default is players'
    /// plain sockets, a datagram per packet)
    #[arg(long, requires = "receivers")]
    gro: bool,
    /// Leave the engine thread in the normal scheduling class (default:
    /// SCHED_FIFO, as `realtime = true` runs the server)
    #[arg(long)]
    no_realtime: bool,
    /// Do not save the result for the server's admission control
    #[arg(long)]
    no_save: bool,
    /// Every session also sends a repair stream of this layout from a
    /// parity sidecar (packet counts and CPU per packet then include the
    /// repair packets); compare with a run without it at --sessions N
    #[arg(long, value_name = "K:M")]
    fec: Option<fjord_fec::FecChoice>,
    /// With --fec: every session encodes its repair packets on the fly as
    /// its source packets leave (a server without stored parity), instead
    /// of sending the sidecar's; data paths gso, gso-zerocopy, sendmmsg,
    /// mmap-writev or uring
    #[arg(long, requires = "fec")]
    fec_live: bool,
    /// The title has no prefabricated packets: every session builds its
    /// headers (as for a title ingested with --prefab off)
    #[arg(long)]
    built_headers: bool,
    /// UDP sockets of the sessions: `shared` (one unconnected socket, an
    /// address per message, as `fjord serve` by default) or `per-session`
    /// (a connected socket each)
    #[arg(long, default_value = "shared", value_parser = ["shared", "per-session"])]
    udp_sockets: String,
    /// Directory for capacity.md and capacity.json (every run)
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

pub fn run(a: CapacityArgs) -> anyhow::Result<()> {
    let fec = match a.fec {
        None | Some(fjord_fec::FecChoice::Off) => None,
        Some(fjord_fec::FecChoice::Fixed(p)) => Some(p),
        Some(_) => anyhow::bail!("--fec takes K:M"),
    };
    anyhow::ensure!(
        fec.is_none() || !a.receivers,
        "--fec measures the engine alone; leave out --receivers"
    );
    anyhow::ensure!(
        !a.fec_live
            || [
                "auto",
                "gso",
                "gso-zerocopy",
                "sendmmsg",
                "mmap-writev",
                "uring"
            ]
            .contains(&a.datapath.as_str()),
        "--fec-live sends repair symbols from memory: use a data path that sends by reference (gso, gso-zerocopy, sendmmsg, mmap-writev, uring)"
    );
    let cfg = fjord_bench::capacity::CapacityConfig {
        fec,
        fec_live: a.fec_live,
        prefab: !a.built_headers,
        seconds: a.seconds,
        max_sessions: a.max,
        datapath: a.datapath,
        cpu: a.cpu,
        realtime: !a.no_realtime,
        gro: a.gro,
        burst: std::time::Duration::from_millis(a.burst_ms),
        fixed: a.sessions,
        udp_sockets: a.udp_sockets.clone(),
        fjord_exe: match a.receivers {
            true => crate::fjord_exe()?,
            false => "fjord".into(),
        },
        sink: if a.loopback {
            SinkChoice::Loopback
        } else {
            SinkChoice::Auto
        },
        ..Default::default()
    };
    let c = if a.receivers {
        fjord_bench::capacity::run_loopback(&cfg)?
    } else {
        fjord_bench::capacity::run(&cfg)?
    };
    println!("sink: {}", c.sink);
    println!("data path: {}", c.datapath);
    println!("UDP sockets: {}", c.udp_sockets);
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        let command = crate::command_line();
        std::fs::write(dir.join("capacity.md"), c.markdown(&command))?;
        std::fs::write(dir.join("capacity.json"), c.json())?;
        println!("wrote capacity.md and capacity.json to {}", dir.display());
    }
    let kernel = c
        .runs
        .iter()
        .map(|r| {
            (
                r.slab_per_session,
                r.sunreclaim_per_session,
                r.socket_slab_per_session,
            )
        })
        .fold((0.0, 0.0, 0.0), |a, b| {
            (f64::max(a.0, b.0), f64::max(a.1, b.1), f64::max(a.2, b.2))
        });
    let kernel = format!(
        "at most {:.0} bytes of kernel slab per session ({:.0} unreclaimable, {:.0} in the socket caches; /proc/meminfo and /proc/slabinfo growth, system-wide{})",
        kernel.0,
        kernel.1,
        kernel.2,
        if a.receivers {
            ", receivers' sockets included"
        } else {
            ""
        }
    );
    let Some(best) = c.best else {
        anyhow::bail!("no run kept its deadlines on one core");
    };
    let memory = c
        .runs
        .iter()
        .map(|r| r.bytes_per_session)
        .fold(0.0, f64::max);
    let memory = format!(
        "at most {memory:.0} bytes of memory per session (anonymous RSS growth per added session{}), {kernel}",
        if a.receivers {
            ", of the fjord serve child"
        } else {
            ""
        }
    );
    println!(
        "capacity: {} concurrent 4.5 Mbit/s sessions on one core ({:.2} Gbit/s), {:.0} ns CPU per packet, {:.0} % of the core, {memory}, {} of {} packets late (> 2 ms)",
        best.sessions,
        best.gbps,
        best.ns_per_packet,
        best.cpu * 100.0,
        best.late,
        best.packets
    );
    if a.sessions.is_some() {
        // A single measurement, not a capacity: nothing to save.
        return Ok(());
    }
    println!(
        "capacity: {} concurrent 4.5 Mbit/s sessions on one core ({:.2} Gbit/s), {:.0} ns CPU per packet, {:.0} % of the core, at most {:.0} bytes of memory per session (anonymous RSS; each run's growth over the sessions it added), {kernel}, {} of {} packets late (> 2 ms)",
        best.sessions,
        best.gbps,
        best.ns_per_packet,
        best.cpu * 100.0,
        c.runs
            .iter()
            .map(|r| r.bytes_per_session)
            .fold(0.0, f64::max),
        best.late,
        best.packets
    );
    if !a.no_save {
        let pps = (best.sessions as f64 * c.packets_per_second_per_session * 0.9) as u64;
        let path = fjord_server::config::capacity_state_file()
            .context("no HOME or XDG_STATE_HOME to save the result in")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let saved = fjord_server::config::SavedCapacity { pps_per_core: pps };
        std::fs::write(&path, toml::to_string(&saved)?)?;
        println!(
            "saved {} packets/s per core (90 % of the measured capacity) to {} for admission control",
            pps,
            path.display()
        );
    }
    Ok(())
}

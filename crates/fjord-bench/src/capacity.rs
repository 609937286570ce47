//! `fjord bench capacity`: how many concurrent 4.5 Mbit/s sessions one
//! pinned engine thread keeps on time (under 0.01 % of packets more than
//! 2 ms late, none left unsent), into the benchmark sink. Sessions are made
//! through the engine's API, each on its own connected socket, as the
//! server makes them; the search doubles the count until a run fails, then
//! bisects.

use std::{
    net::UdpSocket,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_engine::{
    Command, Engine, EngineConfig, Output, RepairSpec, SessionSpec, Start, ThreadStats, Title,
    UdpSocket as FjUdp, Until,
};
use fjord_fec::{FecChoice, FecParams};
use fjord_media::synthetic::write_constant_rate;

use indicatif::{ProgressBar, ProgressStyle};

use crate::sink::{Sink, SinkChoice};

#[derive(Clone, Debug)]
pub struct CapacityConfig {
    /// Measured seconds per run (after a warm-up).
    pub seconds: f64,
    pub max_sessions: usize,
    pub datapath: String,
    /// The CPU the engine thread is pinned to.
    pub cpu: usize,
    pub bitrate: u64,
    pub payload: usize,
    pub burst: Duration,
    pub sink: SinkChoice,
    /// Engine thread under SCHED_FIFO (as `realtime = true` in the server).
    pub realtime: bool,
    /// With real receivers: UDP GRO on their sockets (players' plain
    /// sockets when false).
    pub gro: bool,
    /// Measure once at this many sessions instead of searching.
    pub fixed: Option<usize>,
    /// Every session also sends its repair stream with this layout (the
    /// packet counts then include the repair packets).
    pub fec: Option<FecParams>,
    /// With `fec`: each session encodes its repair symbols as its packets
    /// leave (what a server without stored parity does) instead of sending
    /// the sidecar's; only for data paths that send from memory.
    pub fec_live: bool,
    /// The title has prefabricated packets (sent by the paths that use
    /// them), as after `fjord ingest`.
    pub prefab: bool,
    /// `shared`: the sessions send from one unconnected socket with an
    /// address per message (when the data path can); `per-session`: each
    /// from its own connected socket. As the server's `udp_sockets`.
    pub udp_sockets: String,
    /// The `fjord` executable that serves [`run_loopback`]'s sessions.
    pub fjord_exe: PathBuf,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        Self {
            seconds: 5.0,
            max_sessions: 20_000,
            datapath: "auto".into(),
            cpu: 0,
            bitrate: 4_500_000,
            payload: 1316,
            burst: Duration::from_millis(40),
            sink: SinkChoice::Auto,
            realtime: true,
            gro: false,
            fixed: None,
            fec: None,
            fec_live: false,
            prefab: true,
            udp_sockets: "shared".into(),
            fjord_exe: "fjord".into(),
        }
    }
}

/// One run at a fixed number of sessions.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub sessions: usize,
    pub packets: u64,
    pub expected: u64,
    pub late: u64,
    pub max_late: Duration,
    /// Engine thread CPU over wall time (1.0 = the whole core).
    pub cpu: f64,
    pub ns_per_packet: f64,
    pub gbps: f64,
    /// Anonymous resident memory added per session (the page cache of the
    /// title and kernel socket memory are not in it).
    pub bytes_per_session: f64,
    /// Kernel memory per session: growth of `/proc/meminfo` `Slab` (and of
    /// its unreclaimable part `SUnreclaim`) from before the sessions were
    /// made to while they all play, over the sessions. System-wide: other
    /// processes add noise, and with real receivers their sockets count too.
    pub slab_per_session: f64,
    pub sunreclaim_per_session: f64,
    /// The part of it in the socket caches of `/proc/slabinfo` (`UDP`,
    /// `UDPv6`, `sock_inode_cache`: a socket's own objects; needs root):
    /// far less noise from other processes.
    pub socket_slab_per_session: f64,
    pub pass: bool,
}

/// Under this share of late packets a run passes.
pub const MAX_LATE_SHARE: f64 = 1e-4;

pub struct Capacity {
    pub sink: String,
    pub datapath: String,
    /// `shared` or `per-session`: how the sessions' UDP sockets were.
    pub udp_sockets: &'static str,
    pub runs: Vec<Run>,
    pub best: Option<Run>,
    pub packets_per_second_per_session: f64,
}

/// Doubles the session count from 250 until a run fails, then bisects to
/// within 5 %; `probe(n)` runs once at `n` sessions (a failed run is
/// repeated once). With `fixed`, one run.
fn search(
    max: usize,
    fixed: Option<usize>,
    mut probe: impl FnMut(usize) -> anyhow::Result<Run>,
) -> anyhow::Result<Vec<Run>> {
    let mut runs: Vec<Run> = Vec::new();
    let (mut pass, mut fail): (Option<usize>, Option<usize>) = (None, None);
    let mut n = fixed.unwrap_or(250).min(max);
    let bar = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    loop {
        bar.set_message(format!("running {n} sessions"));
        let mut r = probe(n)?;
        if !r.pass && fixed.is_none() {
            // One retry: a shared machine stalls now and then (hypervisor
            // steal of tens of ms); a load fails when it fails twice.
            bar.suspend(|| {
                eprintln!(
                    "{n:>6} sessions: failed once ({} late of {}); again",
                    r.late, r.packets
                )
            });
            r = probe(n)?;
        }
        bar.suspend(|| eprintln!(
            "{:>6} sessions: {}/{} packets, {} late ({:.4} %), max late {:.2} ms, CPU {:.0} %, {:.0} ns/packet, {:.0} B/session RSS, {:.0} B/session kernel slab ({:.0} unreclaimable, {:.0} in socket caches; system-wide): {}",
            r.sessions,
            r.packets,
            r.expected,
            r.late,
            100.0 * r.late as f64 / r.packets.max(1) as f64,
            r.max_late.as_secs_f64() * 1e3,
            r.cpu * 100.0,
            r.ns_per_packet,
            r.bytes_per_session,
            r.slab_per_session,
            r.sunreclaim_per_session,
            r.socket_slab_per_session,
            if r.pass { "pass" } else { "FAIL" }
        ));
        runs.push(r);
        if r.pass {
            pass = Some(n);
        } else {
            fail = Some(n);
        }
        n = match (pass, fail) {
            _ if fixed.is_some() => break,
            (Some(p), None) if p >= max => break,
            (Some(p), None) => (p * 2).min(max),
            (None, Some(f)) if f <= 1 => break,
            (None, Some(f)) => f / 2,
            (Some(p), Some(f)) if f - p <= (p / 20).max(1) => break,
            (Some(p), Some(f)) => (p + f) / 2,
            (None, None) => break,
        };
    }
    bar.finish_and_clear();
    Ok(runs)
}

fn best(runs: &[Run]) -> Option<Run> {
    runs.iter()
        .filter(|r| r.pass)
        .max_by_key(|r| r.sessions)
        .copied()
}

/// Capacity with real receivers: a `fjord serve` child pinned to `cfg.cpu`
/// with one engine thread, and `fjord load` in this process on another CPU,
/// both over loopback; a run passes with no loss and under 0.01 % of
/// packets more than 2 ms late at the receivers.
pub fn run_loopback(cfg: &CapacityConfig) -> anyhow::Result<Capacity> {
    raise_fd_limit();
    let dir = tempfile::tempdir()?;
    let pps = cfg.bitrate as f64 / (cfg.payload as f64 * 8.0);
    let gap_ns = (1e9 / pps) as u64;
    title(
        dir.path(),
        cfg.payload,
        gap_ns,
        cfg.seconds + 30.0,
        None,
        false,
        cfg.prefab,
    )?;
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "root = {:?}\nbind = \"127.0.0.1\"\nport = 0\nthreads = 1\ndatapath = {:?}\nudp_sockets = {:?}\nmax_sessions = 100000\nmax_connections = 100000\nmax_connections_per_address = 0\nmax_sessions_per_address = 0\nburst_ms = {}\nrealtime = {}\n",
            dir.path(),
            cfg.datapath,
            cfg.udp_sockets,
            cfg.burst.as_millis(),
            cfg.realtime
        ),
    )?;
    let server = ServerChild::start(&cfg.fjord_exe, &config, cfg.cpu)?;
    pin_current_thread((cfg.cpu + 1) % available_cpus());
    let url = format!("rtsp://{}/capacity.ts", server.addr);
    let datapath = fjord_engine::datapath::resolve(&cfg.datapath)?.to_string();
    let runs = search(cfg.max_sessions, cfg.fixed, |n| {
        let cpu0 = server.cpu()?;
        let t0 = Instant::now();
        let (mem0, rss0) = (meminfo(), rss_of(server.child.id()));
        // The peak while the sessions play, sampled beside the receivers.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (stop, pid) = (stop.clone(), server.child.id());
            std::thread::spawn(move || {
                let mut peak = (mem0, rss0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    let m = meminfo();
                    peak.0 = Meminfo {
                        slab: peak.0.slab.max(m.slab),
                        sunreclaim: peak.0.sunreclaim.max(m.sunreclaim),
                        sockets: peak.0.sockets.max(m.sockets),
                    };
                    peak.1 = peak.1.max(rss_of(pid));
                }
                peak
            })
        };
        let mut load = fjord_client::load::LoadConfig::new(
            url.clone(),
            n,
            Duration::from_secs_f64(cfg.seconds),
        );
        load.gro = cfg.gro;
        let report = fjord_client::load::run(&load);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mem1, rss1) = sampler.join().unwrap_or((mem0, rss0));
        let report = report?;
        let cpu = (server.cpu()? - cpu0).as_secs_f64();
        let wall = t0.elapsed().as_secs_f64();
        let t = &report.totals;
        let expected = (n as f64 * pps * report.duration_s) as u64;
        Ok(Run {
            sessions: n,
            packets: t.packets,
            expected,
            late: t.late,
            max_late: Duration::from_secs_f64(t.max_lateness_ms.max(0.0) / 1e3),
            cpu: cpu / wall,
            ns_per_packet: cpu * 1e9 / t.packets.max(1) as f64,
            gbps: t.mbps / 1e3,
            bytes_per_session: rss1.saturating_sub(rss0) as f64 / n as f64,
            slab_per_session: mem1.per_session(&mem0, n).0,
            sunreclaim_per_session: mem1.per_session(&mem0, n).1,
            socket_slab_per_session: mem1.per_session(&mem0, n).2,
            pass: report.setup_failures == 0
                && report.sessions_playing == n
                && t.lost == 0
                && (t.late as f64) < MAX_LATE_SHARE * t.packets.max(1) as f64,
        })
    })?;
    Ok(Capacity {
        sink: format!(
            "loopback: fjord serve (1 engine thread, pinned) -> fjord load receivers (pinned to another CPU; {})",
            if cfg.gro {
                "UDP GRO, --gro"
            } else {
                "plain sockets, no UDP GRO, as players"
            }
        ),
        udp_sockets: udp_sockets(cfg, &datapath),
        datapath,
        best: best(&runs),
        runs,
        packets_per_second_per_session: pps,
    })
}

/// A `fjord serve` child process for the loopback capacity run.
struct ServerChild {
    child: std::process::Child,
    addr: String,
}

impl ServerChild {
    fn start(fjord_exe: &Path, config: &Path, cpu: usize) -> anyhow::Result<Self> {
        use std::{io::BufRead, os::unix::process::CommandExt};
        let mut cmd = std::process::Command::new(fjord_exe);
        cmd.arg("serve")
            .args(["--http-port", "0", "--admin-bind", ""])
            .arg("--config")
            .arg(config)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        // SAFETY: only an async-signal-safe system call between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                pin_current_thread(cpu);
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("fjord: listening on rtsp://")
            .and_then(|a| a.strip_suffix('/'))
            .ok_or_else(|| anyhow::anyhow!("fjord serve did not start: {line:?}"))?
            .to_string();
        Ok(Self { child, addr })
    }

    /// CPU the server process has used (user + system).
    fn cpu(&self) -> anyhow::Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<u64> = after
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        // Fields 14 and 15 (utime, stime); `after` starts at field 3.
        let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Ok(Duration::from_nanos(ticks * 1_000_000_000 / hz))
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the calling thread (or, before exec, the process) to one CPU.
pub(crate) fn pin_current_thread(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Finds the most sessions that pass.
pub fn run(cfg: &CapacityConfig) -> anyhow::Result<Capacity> {
    raise_fd_limit();
    let dir = tempfile::tempdir()?;
    let pps = cfg.bitrate as f64 / (cfg.payload as f64 * 8.0);
    let gap_ns = (1e9 / pps) as u64;
    let title = title(
        dir.path(),
        cfg.payload,
        gap_ns,
        cfg.seconds + 10.0,
        cfg.fec,
        cfg.fec_live,
        cfg.prefab,
    )?;
    let sink = Sink::create(cfg.sink)?;
    let datapath = fjord_engine::datapath::resolve(&cfg.datapath)?.to_string();
    eprintln!("sink: {}", sink.describe());
    let runs = search(cfg.max_sessions, cfg.fixed, |n| {
        run_once(cfg, &sink, &title, &datapath, n, pps)
    })?;
    Ok(Capacity {
        sink: sink.describe(),
        udp_sockets: udp_sockets(cfg, &datapath),
        datapath,
        best: best(&runs),
        runs,
        packets_per_second_per_session: pps,
    })
}

/// `shared` when asked for and the path can address each message.
fn udp_sockets(cfg: &CapacityConfig, datapath: &str) -> &'static str {
    if cfg.udp_sockets == "shared" && fjord_engine::datapath::addresses_each_message(datapath) {
        "shared"
    } else {
        "per-session"
    }
}

fn run_once(
    cfg: &CapacityConfig,
    sink: &Sink,
    title: &Arc<Title>,
    datapath: &str,
    n: usize,
    pps: f64,
) -> anyhow::Result<Run> {
    let engine = Engine::start(EngineConfig {
        threads: 1,
        burst: cfg.burst,
        rtcp_interval: Duration::from_secs(5),
        cname: "fjord-bench".into(),
        datapath: datapath.into(),
        cpus: vec![cfg.cpu],
        realtime: cfg.realtime,
        stall_timeout: Duration::from_secs(10),
        storage: None,
    })?;
    let rss_before = rss_bytes();
    let mem_before = meminfo();
    let streams = if cfg.fec.is_some() { 2 * n } else { n };
    let shared = udp_sockets(cfg, datapath) == "shared";
    // Shared: every stream sends from one unconnected socket, as the
    // server's engine thread does; else each from its own connected one.
    let (mut sockets, shared_socket) = if shared {
        let s = sink.unconnected_socket()?;
        fjord_engine::datapath::prepare_shared(&s)?;
        (Vec::new(), Some(Arc::new(s)))
    } else {
        (sink.session_sockets(streams)?, None)
    };
    let repair_sockets = sockets.split_off(sockets.len().min(n));
    let rtcp = UdpSocket::bind("127.0.0.1:0")?;
    let rtcp_peer = rtcp.local_addr()?;
    let rtcp_shared = Arc::new(socket2::Socket::from(rtcp.try_clone()?));
    let mut sockets = sockets.into_iter();
    let mut repair_sockets = repair_sockets.into_iter();
    let out = |own: Option<socket2::Socket>| -> anyhow::Result<FjUdp> {
        Ok(match (&shared_socket, own) {
            (Some(s), _) => FjUdp::Shared(s.clone()),
            (None, Some(s)) => {
                s.set_nonblocking(true)?;
                FjUdp::Own(s)
            }
            (None, None) => anyhow::bail!("no socket for a stream"),
        })
    };
    let prefab = title.prefab_ids(0);
    for i in 0..n {
        let id = i as u64 + 1;
        let rtp = out(sockets.next())?;
        engine.send(
            0,
            Command::Add(Box::new(SessionSpec {
                id,
                title: title.clone(),
                track: 0,
                ssrc: prefab.map_or(i as u32, |p| p.ssrc),
                seq0: prefab.map_or(0, |p| p.seq0),
                ts0: prefab.map_or(0, |p| p.ts0),
                output: Output::Udp {
                    rtp,
                    rtp_peer: sink.dest(i),
                    rtcp: FjUdp::Shared(rtcp_shared.clone()),
                    rtcp_peer,
                },
            })),
        );
        if cfg.fec.is_some() {
            let repair = out(repair_sockets.next())?;
            engine.send(
                0,
                Command::AttachRepair {
                    id,
                    repair: Box::new(RepairSpec {
                        ssrc: !(i as u32),
                        seq0: 0,
                        payload_type: 96,
                        output: Output::Udp {
                            rtp: repair,
                            rtp_peer: sink.dest(n + i),
                            rtcp: FjUdp::Shared(rtcp_shared.clone()),
                            rtcp_peer,
                        },
                    }),
                },
            );
        }
        engine.send(
            0,
            Command::Play {
                id,
                start: Start::Resume,
                until: Until::Previous,
                scale: 1,
                speed: fjord_engine::REAL_TIME,
                queue: false,
                reply: Box::new(|_| {}),
            },
        );
    }
    // Start the sessions spread over one burst period, as clients arrive.
    let spread = cfg.burst.max(Duration::from_millis(10));
    let t = Instant::now();
    for i in 0..n {
        let at = t + spread.mul_f64(i as f64 / n as f64);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        engine.send(
            0,
            Command::Start {
                id: i as u64 + 1,
                at: std::time::Instant::now(),
                origin_ns: 0,
            },
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let s0 = one(&engine);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(cfg.seconds));
    let s1 = one(&engine);
    let wall = t0.elapsed().as_secs_f64();
    let rss_after = rss_bytes();
    let mem_after = meminfo();
    engine.shutdown();

    let packets = s1.packets - s0.packets;
    let late = s1.late - s0.late;
    let cpu = ((s1.user + s1.system) - (s0.user + s0.system)).as_secs_f64();
    let repair_share = cfg.fec.map_or(0.0, |p| f64::from(p.m) / f64::from(p.k));
    let expected = (n as f64 * pps * (1.0 + repair_share) * wall) as u64;
    let pass = packets > 0
        && (late as f64) < MAX_LATE_SHARE * packets as f64
        && packets as f64 >= 0.995 * expected as f64
        && cpu / wall < 0.98;
    Ok(Run {
        sessions: n,
        packets,
        expected,
        late,
        max_late: s1.max_late,
        cpu: cpu / wall,
        ns_per_packet: cpu * 1e9 / packets.max(1) as f64,
        gbps: packets as f64 * cfg.payload as f64 * 8.0 / wall / 1e9,
        bytes_per_session: (rss_after.saturating_sub(rss_before)) as f64 / n as f64,
        slab_per_session: mem_after.per_session(&mem_before, n).0,
        sunreclaim_per_session: mem_after.per_session(&mem_before, n).1,
        socket_slab_per_session: mem_after.per_session(&mem_before, n).2,
        pass,
    })
}

fn one(engine: &Engine) -> ThreadStats {
    engine.stats().into_iter().next().unwrap_or_default()
}

/// A constant-rate title of `seconds`: `payload`-byte packets every
/// `gap_ns`, written as `capacity.ts` (and its index, with `fec` its
/// parity sidecar, with `prefab` its prefabricated packets) in `dir`.
fn title(
    dir: &Path,
    payload: usize,
    gap_ns: u64,
    seconds: f64,
    fec: Option<FecParams>,
    fec_live: bool,
    prefab: bool,
) -> anyhow::Result<Arc<Title>> {
    let media = dir.join("capacity.ts");
    let packets = (seconds * 1e9 / gap_ns as f64) as u64;
    let layouts = fjord_fec::layouts(fec.map_or(FecChoice::Off, FecChoice::Fixed));
    let index = write_constant_rate(&media, payload, gap_ns, packets, &layouts)?;
    let mut title = Title::new(index, &media)?;
    if fec.is_some() {
        fjord_fec::protect(&media, &mut |_, _| {})?;
        title.attach_fec(
            &fjord_fec::sidecar_path_for(&media),
            &fjord_media::index::index_path_for(&media),
            fjord_media::index::Check::Now,
        )?;
        if fec_live {
            title.encode_parity_live();
        }
    }
    if prefab {
        fjord_media::prefab::prefabricate(&media, &mut |_, _| {})?;
        title.attach_prefab(
            &fjord_media::prefab::prefab_path_for(&media),
            fjord_media::index::Check::Now,
        )?;
    }
    Ok(Arc::new(title))
}

/// Anonymous resident memory of this process: the server's own memory,
/// not the page cache the mapped titles share.
fn rss_bytes() -> u64 {
    kb_field("/proc/self/status", "RssAnon:")
}

/// Anonymous resident memory of process `pid` (the `fjord serve` child).
fn rss_of(pid: u32) -> u64 {
    kb_field(&format!("/proc/{pid}/status"), "RssAnon:")
}

/// The kernel's slab memory, system-wide (`/proc/meminfo`), in bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Meminfo {
    slab: u64,
    sunreclaim: u64,
    sockets: u64,
}

fn meminfo() -> Meminfo {
    Meminfo {
        slab: kb_field("/proc/meminfo", "Slab:"),
        sunreclaim: kb_field("/proc/meminfo", "SUnreclaim:"),
        sockets: socket_slab(),
    }
}

/// Bytes of slab pages the socket caches hold (`/proc/slabinfo`: UDP and
/// UDPv6 socket objects and their inodes); 0 when unreadable (not root).
fn socket_slab() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/slabinfo") else {
        return 0;
    };
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if !matches!(f.first(), Some(&("UDP" | "UDPv6" | "sock_inode_cache"))) {
                return None;
            }
            // name active_objs num_objs objsize objperslab pagesperslab :
            // tunables ... : slabdata active_slabs num_slabs sharedavail
            let pages: u64 = f.get(5)?.parse().ok()?;
            let slabs: u64 = f.get(14)?.parse().ok()?;
            Some(slabs * pages * 4096)
        })
        .sum()
}

impl Meminfo {
    /// Growth from `before`, per session.
    fn per_session(&self, before: &Meminfo, n: usize) -> (f64, f64, f64) {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / n.max(1) as f64;
        (
            d(self.slab, before.slab),
            d(self.sunreclaim, before.sunreclaim),
            d(self.sockets, before.sockets),
        )
    }
}

/// A `NAME: N kB` line of a /proc file, in bytes (0 when absent).
fn kb_field(path: &str, name: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Thousands of sessions need thousands of sockets.
pub(crate) fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit fill and read a valid struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

impl Capacity {
    /// Every run as a markdown table, with how it was made.
    pub fn markdown(&self, command: &str) -> String {
        let mut s = format!(
            "# fjord bench capacity\n\n`{command}`\n\nsink: {}  \ndata path: {}  \nUDP sockets: {}\n\n\
             Kernel slab per session is the growth of `/proc/meminfo` `Slab` \
             (`SUnreclaim`: its unreclaimable part) from before the sessions were \
             made to while they all play, divided by the sessions. It is \
             system-wide: other processes add noise{}. Socket caches: the part \
             in the `UDP`, `UDPv6` and `sock_inode_cache` slabs (`/proc/slabinfo`), \
             with far less noise.\n\n\
             | sessions | packets | late | max late ms | CPU % | ns/packet | RSS B/session | slab B/session | SUnreclaim B/session | socket caches B/session | result |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
            self.sink,
            self.datapath,
            self.udp_sockets,
            if self.sink.starts_with("loopback: fjord serve") {
                ", and the receivers' own sockets and RTSP connections count too"
            } else {
                ""
            }
        );
        for r in &self.runs {
            s += &format!(
                "| {} | {} | {} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} |\n",
                r.sessions,
                r.packets,
                r.late,
                r.max_late.as_secs_f64() * 1e3,
                r.cpu * 100.0,
                r.ns_per_packet,
                r.bytes_per_session,
                r.slab_per_session,
                r.sunreclaim_per_session,
                r.socket_slab_per_session,
                if r.pass { "pass" } else { "FAIL" }
            );
        }
        s
    }

    /// Every run as JSON (no serde in this crate's output path: flat numbers).
    pub fn json(&self) -> String {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                format!(
                    "{{\"sessions\":{},\"packets\":{},\"expected\":{},\"late\":{},\"max_late_ms\":{:.3},\"cpu\":{:.4},\"ns_per_packet\":{:.1},\"gbps\":{:.3},\"rss_bytes_per_session\":{:.1},\"slab_bytes_per_session\":{:.1},\"sunreclaim_bytes_per_session\":{:.1},\"socket_slab_bytes_per_session\":{:.1},\"pass\":{}}}",
                    r.sessions,
                    r.packets,
                    r.expected,
                    r.late,
                    r.max_late.as_secs_f64() * 1e3,
                    r.cpu,
                    r.ns_per_packet,
                    r.gbps,
                    r.bytes_per_session,
                    r.slab_per_session,
                    r.sunreclaim_per_session,
                    r.socket_slab_per_session,
                    r.pass
                )
            })
            .collect();
        format!(
            "{{\"sink\":{:?},\"datapath\":{:?},\"udp_sockets\":{:?},\"kernel_memory\":\"system-wide /proc/meminfo Slab and SUnreclaim growth per session\",\"runs\":[{}]}}\n",
            self.sink,
            self.datapath,
            self.udp_sockets,
            runs.join(",")
        )
    }
}

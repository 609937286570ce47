//! `fjord bench txtime`: does `SO_TXTIME` with the `fq` qdisc smooth the
//! engine's bursts, and at what CPU cost?
//!
//! N sessions of a constant-rate stream (4.5 Mbit/s of 1316-byte payloads,
//! ~427 packets/s each, phases spread over one packet period) are sent in
//! the engine's shape: a session wakes a quarter burst before its next
//! packet is due, on a 1 ms grid, and sends everything due within the burst
//! limit. The sender thread models the engine (it does not run it) so that
//! every variant differs only in how a tick's packets are handed to the
//! kernel:
//!
//! - `gso`: one `sendmsg` with `UDP_SEGMENT` per session burst (≤ 64
//!   segments), as the engine's `gso` path;
//! - `gso+txtime`: the same with one `SCM_TXTIME` per send (the first
//!   packet's due time): fq can only release the whole super-packet;
//! - `sendmmsg`: every packet of the tick in `sendmmsg` calls from one
//!   shared socket, as the engine's `sendmmsg` path;
//! - `sendmmsg+txtime`: the same with an `SCM_TXTIME` per message, its own
//!   due time: fq releases each packet when it is due.
//!
//! The packets go through a veth pair whose near end has `fq` as its root
//! qdisc (when the kernel has it) to a receiver in the far end's network
//! namespace, which reads the kernel's receive timestamps
//! (`SO_TIMESTAMPNS`). Each packet carries its session and due time, so the
//! receiver gets arrival − due per packet and, per session, the most
//! packets within any 1 ms. Receive processing is steered (RPS) to the
//! receiver's CPU, so the sender's CPU time is its own; the sender runs
//! under SCHED_FIFO, as the engine does with `realtime = true`.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    fmt::Write as _,
    fs::File,
    io, mem,
    net::{Ipv4Addr, SocketAddrV4},
    os::fd::AsRawFd,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::Duration,
};

use anyhow::{Context, bail};
use fjord_proto::rtp::{RTP_HEADER_LEN, write_header};
use indicatif::{ProgressBar, ProgressStyle};
use socket2::{Domain, SockAddr, Socket, Type};

use crate::{cpu::ThreadCpu, sink::VethPair, stats::quantile_sorted, workload::PT};

/// Segments per GSO send (the engine's limit).
const MAX_SEGMENTS: usize = 64;
/// Messages per `sendmmsg` (`UIO_MAXIOV`).
const MAX_MESSAGES: usize = 1024;
/// Bytes after the RTP header that identify a packet: session (u32),
/// packet number (u32), due time (u64 ns, `CLOCK_MONOTONIC`).
const TAG_LEN: usize = 16;
const HEAD_LEN: usize = RTP_HEADER_LEN + TAG_LEN;
/// The wake-up grid of the engine.
const GRID_NS: u64 = 1_000_000;
/// The window of the burstiness measure.
const WINDOW_NS: i64 = 1_000_000;
/// The receiver's UDP port in the namespace.
const PORT: u16 = 5004;

#[derive(Clone, Debug)]
pub struct TxtimeConfig {
    /// Sending time per variant.
    pub seconds: f64,
    pub sessions: usize,
    /// Payload bits per second of one session.
    pub bitrate: u64,
    /// RTP payload bytes.
    pub payload: usize,
    /// The engine's default burst limit.
    pub burst: Duration,
    /// The small burst `gso` is also run with.
    pub small_burst: Duration,
    pub progress: bool,
}

impl Default for TxtimeConfig {
    fn default() -> Self {
        Self {
            seconds: 5.0,
            sessions: 200,
            bitrate: 4_500_000,
            payload: 1316,
            burst: Duration::from_millis(40),
            small_burst: Duration::from_millis(2),
            progress: true,
        }
    }
}

impl TxtimeConfig {
    /// Nanoseconds between two packets of a session.
    pub fn period_ns(&self) -> u64 {
        self.payload as u64 * 8 * 1_000_000_000 / self.bitrate
    }
}

/// How a tick's packets reach the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Gso,
    GsoTxtime,
    Sendmmsg,
    SendmmsgTxtime,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Gso => "gso",
            Method::GsoTxtime => "gso+txtime",
            Method::Sendmmsg => "sendmmsg",
            Method::SendmmsgTxtime => "sendmmsg+txtime",
        }
    }

    fn txtime(self) -> bool {
        matches!(self, Method::GsoTxtime | Method::SendmmsgTxtime)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub method: Method,
    pub burst: Duration,
}

impl Variant {
    pub fn name(&self) -> String {
        format!("{} {} ms", self.method.name(), self.burst.as_millis())
    }
}

/// The variants of one run, in order.
pub fn variants(cfg: &TxtimeConfig) -> Vec<Variant> {
    let v = |method, burst| Variant { method, burst };
    vec![
        v(Method::Gso, cfg.burst),
        v(Method::Gso, cfg.small_burst),
        v(Method::GsoTxtime, cfg.burst),
        v(Method::Sendmmsg, cfg.burst),
        v(Method::SendmmsgTxtime, cfg.burst),
    ]
}

/// Percentiles of arrival − due, milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lateness {
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Lateness {
    pub fn of(mut ns: Vec<i64>) -> Option<Self> {
        ns.sort_unstable();
        let ms: Vec<f64> = ns.iter().map(|&x| x as f64 / 1e6).collect();
        Some(Self {
            min: *ms.first()?,
            p50: quantile_sorted(&ms, 0.5),
            p99: quantile_sorted(&ms, 0.99),
            max: *ms.last()?,
        })
    }
}

/// The most of `sorted` (ascending times) within any half-open window
/// `[t, t + window)`.
pub fn max_in_window(sorted: &[i64], window: i64) -> usize {
    let mut best = 0;
    let mut lo = 0;
    for (hi, &t) in sorted.iter().enumerate() {
        while t - sorted[lo] >= window {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best
}

/// Sum of the `dropped N` counters in `tc -s qdisc show` output.
pub fn parse_dropped(tc: &str) -> u64 {
    let words: Vec<&str> = tc.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0].trim_start_matches('(') == "dropped")
        .filter_map(|w| w[1].trim_end_matches(',').parse::<u64>().ok())
        .sum()
}

/// One packet as the receiver saw it.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    session: u32,
    due: u64,
    /// `CLOCK_MONOTONIC` ns.
    at: i64,
}

/// What one variant did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub variant: Variant,
    pub sent: u64,
    /// Packets the kernel refused (a full socket buffer).
    pub unsent: u64,
    pub received: u64,
    pub syscalls: u64,
    pub cpu_ns_per_packet: f64,
    pub lateness: Option<Lateness>,
    /// Per session, the most packets within 1 ms: median and max over the
    /// sessions.
    pub burst_median: f64,
    pub burst_max: usize,
    /// Drops counted by the qdisc during the variant (None: no counter).
    pub qdisc_drops: Option<u64>,
}

pub struct TxtimeReport {
    pub qdisc: String,
    /// fq is the root qdisc: txtime stamps are honoured.
    pub paced: bool,
    /// Why txtime rows measure only the cost of the stamp, when they do.
    pub notes: Vec<String>,
    pub config: TxtimeConfig,
    pub outcomes: Vec<Outcome>,
}

/// The namespace the packets go to, with the receiver's qdisc and RPS set.
struct Bed {
    pair: VethPair,
    qdisc: String,
    paced: bool,
    notes: Vec<String>,
    sender_cpu: usize,
    receiver_cpu: usize,
}

fn make_bed(cfg: &TxtimeConfig) -> anyhow::Result<Bed> {
    let pair = VethPair::create().map_err(|e| anyhow::anyhow!("making the namespace: {e}"))?;
    let mut notes = Vec::new();
    // Room for a whole burst of every session in one flow (sendmmsg's
    // shared socket), twice over.
    let per_session = cfg.burst.as_nanos() as u64 / cfg.period_ns() + 2;
    let limit = (2 * cfg.sessions as u64 * per_session)
        .max(10_000)
        .to_string();
    let fq = [
        "qdisc",
        "replace",
        "dev",
        &pair.veth,
        "root",
        "fq",
        "limit",
        &limit,
        "flow_limit",
        &limit,
    ];
    let paced = match pair.tc(&fq) {
        Ok(()) => true,
        Err(e) => {
            notes.push(format!(
                "fq is unavailable on this kernel ({e}); the veth keeps its default qdisc, \
                 which ignores txtime stamps: the txtime rows measure only the cost of \
                 stamping, and their arrivals are those of the unstamped rows"
            ));
            false
        }
    };
    let qdisc = pair
        .qdisc_stats()
        .ok()
        .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    let (sender_cpu, receiver_cpu) = (0, if cpus > 1 { 1 } else { 0 });
    let rps = format!(
        "echo {:x} > /sys/class/net/{}/queues/rx-0/rps_cpus",
        1u64 << receiver_cpu,
        pair.peer
    );
    if let Err(e) = pair.sh_in_netns(&rps) {
        notes.push(format!(
            "RPS could not be set ({e}): receive processing is charged to the sender"
        ));
    }
    Ok(Bed {
        pair,
        qdisc,
        paced,
        notes,
        sender_cpu,
        receiver_cpu,
    })
}

fn progress_bar(n: usize, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} variants  {msg}")
            .unwrap(),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Runs every variant once and removes the namespace.
pub fn run(cfg: &TxtimeConfig) -> anyhow::Result<TxtimeReport> {
    if cfg.sessions == 0 || cfg.seconds <= 0.0 || cfg.small_burst.is_zero() {
        bail!("sessions, seconds and the burst must be positive");
    }
    if cfg.payload < TAG_LEN || cfg.payload > 1456 {
        bail!("payload must be {TAG_LEN}..=1456 bytes");
    }
    let bed = make_bed(cfg)?;
    let mut notes = bed.notes.clone();
    if let Err(e) = txtime_socket() {
        notes.push(format!(
            "SO_TXTIME is refused ({e}): the txtime rows are skipped"
        ));
    }
    let variants: Vec<Variant> = variants(cfg)
        .into_iter()
        .filter(|v| !v.method.txtime() || txtime_socket().is_ok())
        .collect();
    let pb = progress_bar(variants.len(), cfg.progress);
    pb.println(format!(
        "veth {} -> netns {}: {}; sender on CPU {}, receiver (and RPS) on CPU {}",
        bed.pair.veth, bed.pair.netns, bed.qdisc, bed.sender_cpu, bed.receiver_cpu
    ));
    for n in &notes {
        pb.println(format!("note: {n}"));
    }
    let mut outcomes = Vec::new();
    for v in variants {
        pb.set_message(format!("{} for {} s", v.name(), cfg.seconds));
        outcomes.push(run_variant(cfg, &bed, v).with_context(|| v.name())?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(TxtimeReport {
        qdisc: bed.qdisc.clone(),
        paced: bed.paced,
        notes,
        config: cfg.clone(),
        outcomes,
    })
}

fn run_variant(cfg: &TxtimeConfig, bed: &Bed, v: Variant) -> anyhow::Result<Outcome> {
    let drops_before = bed.pair.qdisc_stats().ok().map(|s| parse_dropped(&s));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let netns = bed.pair.netns.clone();
    let stop2 = stop.clone();
    let rx_cpu = bed.receiver_cpu;
    let receiver = thread::Builder::new()
        .name("txtime-rx".into())
        .spawn(move || receive(&netns, rx_cpu, &stop2, ready_tx))?;
    if let Err(e) = ready_rx.recv().context("receiver thread died")? {
        stop.store(true, Ordering::Relaxed);
        let _ = receiver.join();
        return Err(e).context("receiver");
    }
    let dest = SocketAddrV4::new(bed.pair.remote, PORT);
    let local = bed.pair.local;
    let (c, tx_cpu) = (cfg.clone(), bed.sender_cpu);
    let sent = thread::Builder::new()
        .name("txtime-tx".into())
        .spawn(move || send(&c, v, local, dest, tx_cpu))?
        .join()
        .map_err(|_| anyhow::anyhow!("sender panicked"));
    // fq holds a txtime packet until it is due: up to a burst after it
    // was sent.
    thread::sleep(v.burst + Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let arrivals = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))?;
    let sent = sent??;
    let drops_after = bed.pair.qdisc_stats().ok().map(|s| parse_dropped(&s));
    let received = arrivals.len() as u64;
    let lateness = Lateness::of(
        arrivals
            .iter()
            .map(|a| a.at - a.due as i64)
            .collect::<Vec<_>>(),
    );
    let bursts = per_session_bursts(arrivals, cfg.sessions);
    let mut sorted: Vec<f64> = bursts.iter().map(|&b| b as f64).collect();
    sorted.sort_by(f64::total_cmp);
    Ok(Outcome {
        variant: v,
        sent: sent.packets,
        unsent: sent.unsent,
        received,
        syscalls: sent.syscalls,
        cpu_ns_per_packet: sent.cpu.as_nanos() as f64 / sent.packets.max(1) as f64,
        lateness,
        burst_median: quantile_sorted(&sorted, 0.5),
        burst_max: bursts.iter().copied().max().unwrap_or(0),
        qdisc_drops: drops_after.zip(drops_before).map(|(a, b)| a - b),
    })
}

/// Per session, the most packets that arrived within 1 ms.
fn per_session_bursts(mut arrivals: Vec<Arrival>, sessions: usize) -> Vec<usize> {
    arrivals.sort_unstable_by_key(|a| (a.session, a.at));
    let mut out = vec![0; sessions];
    for run in arrivals.chunk_by(|a, b| a.session == b.session) {
        let times: Vec<i64> = run.iter().map(|a| a.at).collect();
        if let Some(slot) = out.get_mut(run[0].session as usize) {
            *slot = max_in_window(&times, WINDOW_NS);
        }
    }
    out
}

fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn sleep_until(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; an early return (a signal) only wakes the
    // loop early, which re-checks the time.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays inside it.
    unsafe {
        let mut set: libc::cpu_set_t = mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// SCHED_FIFO at the engine's priority (the server's `realtime = true`), so
/// the machine's other work delays the sender as little as it does the
/// engine. Without CAP_SYS_NICE the thread stays in the normal class.
fn realtime() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: a valid sched_param for the calling thread (pid 0).
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
}

fn setsockopt<T>(fd: libc::c_int, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid value of the option's type.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A UDP socket whose sends may carry `SCM_TXTIME` (`CLOCK_MONOTONIC`).
fn txtime_socket() -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    let cfg = libc::sock_txtime {
        clockid: libc::CLOCK_MONOTONIC,
        flags: libc::SOF_TXTIME_REPORT_ERRORS,
    };
    setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TXTIME, &cfg)?;
    Ok(s)
}

fn sender_socket(txtime: bool, local: Ipv4Addr) -> io::Result<Socket> {
    let s = if txtime {
        txtime_socket()?
    } else {
        Socket::new(Domain::IPV4, Type::DGRAM, None)?
    };
    s.bind(&SockAddr::from(SocketAddrV4::new(local, 0)))?;
    Ok(s)
}

/// Appends a control message to `msg` (whose `msg_control` points at a
/// zeroed, u64-aligned buffer of at least the new `msg_controllen`).
///
/// # Safety
/// The buffer must have room for the cmsgs already there plus this one.
unsafe fn push_cmsg<T: Copy>(msg: &mut libc::msghdr, level: libc::c_int, kind: libc::c_int, v: T) {
    let len = mem::size_of::<T>() as u32;
    // SAFETY: the caller's buffer holds the message; CMSG_* walk inside
    // it.
    unsafe {
        let at = msg.msg_controllen;
        msg.msg_controllen = at + libc::CMSG_SPACE(len) as usize;
        let cmsg = msg.msg_control.cast::<u8>().add(at).cast::<libc::cmsghdr>();
        (*cmsg).cmsg_level = level;
        (*cmsg).cmsg_type = kind;
        (*cmsg).cmsg_len = libc::CMSG_LEN(len) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<T>(), v);
    }
}

struct Sent {
    packets: u64,
    unsent: u64,
    syscalls: u64,
    cpu: Duration,
}

/// One packet of a tick: its session, number and due time.
#[derive(Clone, Copy)]
struct Due {
    session: u32,
    k: u32,
    due: u64,
}

fn head(d: Due, period_ns: u64) -> [u8; HEAD_LEN] {
    let mut h = [0u8; HEAD_LEN];
    let rtp: &mut [u8; RTP_HEADER_LEN] = (&mut h[..RTP_HEADER_LEN]).try_into().unwrap();
    // 90 kHz RTP clock.
    let ts = (d.k as u64 * period_ns * 9 / 100_000) as u32;
    write_header(rtp, PT, false, d.k as u16, ts, d.session);
    h[12..16].copy_from_slice(&d.session.to_be_bytes());
    h[16..20].copy_from_slice(&d.k.to_be_bytes());
    h[20..28].copy_from_slice(&d.due.to_be_bytes());
    h
}

fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut libc::c_void,
        iov_len: b.len(),
    }
}

fn is_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
}

/// The sender: the engine's pacing, variant `v`'s way of sending.
fn send(
    cfg: &TxtimeConfig,
    v: Variant,
    local: Ipv4Addr,
    dest: SocketAddrV4,
    cpu: usize,
) -> anyhow::Result<Sent> {
    pin(cpu);
    realtime();
    let n = cfg.sessions;
    let period = cfg.period_ns();
    let burst = v.burst.as_nanos() as u64;
    let txtime = v.method.txtime();
    let gso = matches!(v.method, Method::Gso | Method::GsoTxtime);
    let sockets: Vec<Socket> = if gso {
        (0..n)
            .map(|_| {
                let s = sender_socket(txtime, local)?;
                s.connect(&SockAddr::from(dest))?;
                Ok(s)
            })
            .collect::<io::Result<_>>()?
    } else {
        let s = sender_socket(txtime, local)?;
        // A burst of every session can wait in fq at once.
        let buf: libc::c_int = 64 << 20;
        setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &buf)?;
        vec![s]
    };
    let dest_addr = SockAddr::from(dest);
    let filler = vec![0x47u8; cfg.payload - TAG_LEN];
    let seg = (HEAD_LEN + filler.len()) as u16;
    let t0 = mono_ns() + 20_000_000;
    let end = t0 + (cfg.seconds * 1e9) as u64;
    let due_of = |s: usize, k: u64| t0 + s as u64 * period / n as u64 + k * period;
    let mut next = vec![0u64; n];
    // The engine's wheel: (wake-up time, session).
    let mut wheel: BinaryHeap<Reverse<(u64, usize)>> = (0..n)
        .map(|s| Reverse((t0.saturating_sub(burst / 4), s)))
        .collect();
    let mut tick: Vec<Due> = Vec::with_capacity(n * MAX_SEGMENTS);
    let mut heads: Vec<[u8; HEAD_LEN]> = Vec::with_capacity(n * MAX_SEGMENTS);
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(2 * MAX_MESSAGES);
    let mut controls: Vec<[u64; 3]> = Vec::with_capacity(MAX_MESSAGES);
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(MAX_MESSAGES);
    let (mut packets, mut unsent, mut syscalls) = (0u64, 0u64, 0u64);
    let cpu0 = ThreadCpu::now();
    while let Some(&Reverse((wake, _))) = wheel.peek() {
        sleep_until(wake);
        let now = mono_ns();
        tick.clear();
        // Bursts of the tick: (session, range in `tick`).
        let mut bursts: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        while let Some(&Reverse((w, s))) = wheel.peek() {
            if w > now {
                break;
            }
            wheel.pop();
            let first = tick.len();
            while tick.len() - first < MAX_SEGMENTS {
                let due = due_of(s, next[s]);
                if due > now + burst || due >= end {
                    break;
                }
                tick.push(Due {
                    session: s as u32,
                    k: next[s] as u32,
                    due,
                });
                next[s] += 1;
            }
            bursts.push((s, first..tick.len()));
            let due = due_of(s, next[s]);
            if due < end {
                // A quarter burst early, down to the grid, as the engine.
                let w = due.saturating_sub(burst / 4);
                wheel.push(Reverse((w - w % GRID_NS, s)));
            }
        }
        heads.clear();
        heads.extend(tick.iter().map(|&d| head(d, period)));
        if gso {
            for (s, range) in bursts.iter().filter(|(_, r)| !r.is_empty()) {
                iovs.clear();
                for h in &heads[range.clone()] {
                    iovs.push(iovec(h));
                    iovs.push(iovec(&filler));
                }
                let mut control = [0u64; 6];
                // SAFETY: all-zero is a valid msghdr.
                let mut msg: libc::msghdr = unsafe { mem::zeroed() };
                msg.msg_iov = iovs.as_mut_ptr();
                msg.msg_iovlen = iovs.len();
                msg.msg_control = control.as_mut_ptr().cast();
                // SAFETY: `control` (48 bytes) holds a u16 and a u64 cmsg
                // (24 bytes each).
                unsafe {
                    if range.len() > 1 {
                        push_cmsg(&mut msg, libc::SOL_UDP, libc::UDP_SEGMENT, seg);
                    }
                    if txtime {
                        push_cmsg(
                            &mut msg,
                            libc::SOL_SOCKET,
                            libc::SCM_TXTIME,
                            tick[range.start].due,
                        );
                    }
                }
                if msg.msg_controllen == 0 {
                    msg.msg_control = std::ptr::null_mut();
                }
                syscalls += 1;
                // SAFETY: the msghdr points at live iovecs and control.
                let r = unsafe { libc::sendmsg(sockets[*s].as_raw_fd(), &msg, libc::MSG_DONTWAIT) };
                if r >= 0 {
                    packets += range.len() as u64;
                } else {
                    let e = io::Error::last_os_error();
                    if !is_full(&e) {
                        return Err(e).context("sendmsg");
                    }
                    unsent += range.len() as u64;
                }
            }
        } else {
            for (ci, chunk) in heads.chunks(MAX_MESSAGES).enumerate() {
                let base = ci * MAX_MESSAGES;
                iovs.clear();
                controls.clear();
                msgs.clear();
                for h in chunk {
                    iovs.push(iovec(h));
                    iovs.push(iovec(&filler));
                    controls.push([0; 3]);
                }
                for (i, c) in controls.iter_mut().enumerate() {
                    // SAFETY: all-zero is a valid mmsghdr.
                    let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                    m.msg_hdr.msg_name = dest_addr.as_ptr() as *mut libc::c_void;
                    m.msg_hdr.msg_namelen = dest_addr.len();
                    m.msg_hdr.msg_iov = iovs[2 * i..].as_mut_ptr();
                    m.msg_hdr.msg_iovlen = 2;
                    if txtime {
                        m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                        // SAFETY: `c` (24 bytes) holds one u64 cmsg.
                        unsafe {
                            push_cmsg(
                                &mut m.msg_hdr,
                                libc::SOL_SOCKET,
                                libc::SCM_TXTIME,
                                tick[base + i].due,
                            )
                        };
                    }
                    msgs.push(m);
                }
                syscalls += 1;
                // SAFETY: every header points at live iovecs, control and
                // the destination.
                let r = unsafe {
                    libc::sendmmsg(
                        sockets[0].as_raw_fd(),
                        msgs.as_mut_ptr(),
                        msgs.len() as libc::c_uint,
                        libc::MSG_DONTWAIT,
                    )
                };
                let done = if r >= 0 {
                    r as usize
                } else {
                    let e = io::Error::last_os_error();
                    if !is_full(&e) {
                        return Err(e).context("sendmmsg");
                    }
                    0
                };
                packets += done as u64;
                unsent += (chunk.len() - done) as u64;
            }
        }
    }
    Ok(Sent {
        packets,
        unsent,
        syscalls,
        cpu: ThreadCpu::now().since(cpu0).total(),
    })
}

/// The receiver, in namespace `netns`: records every packet with its
/// kernel receive timestamp until `stop`. Says on `ready` once it listens.
fn receive(
    netns: &str,
    cpu: usize,
    stop: &AtomicBool,
    ready: mpsc::Sender<anyhow::Result<()>>,
) -> Vec<Arrival> {
    let socket = match listen(netns, cpu) {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return Vec::new();
        }
    };
    // CLOCK_REALTIME (the timestamps' clock) less CLOCK_MONOTONIC: steady
    // over a few seconds.
    let offset = clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
    const BATCH: usize = 256;
    let mut bufs = vec![[0u8; 2048]; BATCH];
    let mut controls = [[0u64; 8]; BATCH];
    let mut iovs: Vec<libc::iovec> = Vec::with_capacity(BATCH);
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(BATCH);
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        iovs.clear();
        msgs.clear();
        iovs.extend(bufs.iter_mut().map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        }));
        for (i, c) in controls.iter_mut().enumerate() {
            // SAFETY: all-zero is a valid mmsghdr.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            m.msg_hdr.msg_iov = iovs[i..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = mem::size_of_val(c);
            msgs.push(m);
        }
        // SAFETY: the headers point at live buffers; the socket's receive
        // timeout bounds the wait.
        let r = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if r <= 0 {
            continue;
        }
        let now = clock_ns(libc::CLOCK_MONOTONIC);
        for (m, b) in msgs.iter().zip(&bufs).take(r as usize) {
            if (m.msg_len as usize) < HEAD_LEN {
                continue;
            }
            let at = rx_timestamp(&m.msg_hdr).map_or(now, |t| t - offset);
            out.push(Arrival {
                session: u32::from_be_bytes(b[12..16].try_into().unwrap()),
                due: u64::from_be_bytes(b[20..28].try_into().unwrap()),
                at,
            });
        }
    }
    out
}

fn listen(netns: &str, cpu: usize) -> anyhow::Result<Socket> {
    let ns = File::open(Path::new("/run/netns").join(netns)).context("opening the namespace")?;
    // SAFETY: a namespace descriptor; setns moves only this thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error()).context("setns");
    }
    pin(cpu);
    let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    let buf: libc::c_int = 64 << 20;
    setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &buf)?;
    let on: libc::c_int = 1;
    setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &on)?;
    s.set_read_timeout(Some(Duration::from_millis(20)))?;
    s.bind(&SockAddr::from(SocketAddrV4::new(
        Ipv4Addr::UNSPECIFIED,
        PORT,
    )))?;
    Ok(s)
}

/// The `SCM_TIMESTAMPNS` of a received message, `CLOCK_REALTIME` ns.
fn rx_timestamp(msg: &libc::msghdr) -> Option<i64> {
    // SAFETY: the kernel filled the control buffer the msghdr points at;
    // CMSG_* walk inside msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                return Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// The markdown note: what ran, the table and the conclusion's numbers.
pub fn markdown(r: &TxtimeReport, command: &str) -> String {
    let c = &r.config;
    let mut s = String::new();
    let nominal = 1e6 / c.period_ns() as f64;
    let _ = writeln!(s, "# SO_TXTIME + fq: smoothing the engine's bursts\n");
    let _ = writeln!(s, "Command: `{command}`\n");
    let _ = writeln!(
        s,
        "{} sessions × {:.1} Mbit/s ({} B payloads, {:.0} packets/s each, nominal {:.2} \
         packets per ms), {} s per variant. Qdisc on the sending veth: `{}`.\n",
        c.sessions,
        c.bitrate as f64 / 1e6,
        c.payload,
        1e9 / c.period_ns() as f64,
        nominal,
        c.seconds,
        r.qdisc
    );
    for n in &r.notes {
        let _ = writeln!(s, "**Note:** {n}.\n");
    }
    s.push_str(
        "| variant | sent | lost | unsent | qdisc drops | sender ns/packet | syscalls/packet \
         | arrival − due p50 / p99 / max (ms) | max packets of a session in 1 ms: median / max |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---|---|\n");
    for o in &r.outcomes {
        let late = o.lateness.map_or_else(
            || "-".to_string(),
            |l| format!("{:.2} / {:.2} / {:.2}", l.p50, l.p99, l.max),
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.0} | {:.3} | {late} | {:.0} / {} |",
            o.variant.name(),
            o.sent,
            o.sent.saturating_sub(o.received),
            o.unsent,
            o.qdisc_drops.map_or_else(|| "-".into(), |d| d.to_string()),
            o.cpu_ns_per_packet,
            o.syscalls as f64 / o.sent.max(1) as f64,
            o.burst_median,
            o.burst_max,
        );
    }
    s.push_str(
        "\nArrival − due: kernel receive timestamp (`SO_TIMESTAMPNS`) less the packet's due \
         time; negative is early. Lost: sent but never received. Sender ns/packet: CPU time \
         of the sending thread over packets sent.\n\n",
    );
    s.push_str(&conclusion(r));
    s.push('\n');
    s
}

/// Per session, a paced stream has at most this many packets in 1 ms.
const SMOOTH: f64 = 2.0;

/// The conclusion paragraph, from the numbers.
pub fn conclusion(r: &TxtimeReport) -> String {
    let find = |m: Method, burst: Duration| {
        r.outcomes
            .iter()
            .find(|o| o.variant.method == m && o.variant.burst == burst)
    };
    let c = &r.config;
    let (Some(base), Some(small)) = (find(Method::Gso, c.burst), find(Method::Gso, c.small_burst))
    else {
        return "No conclusion: the GSO rows are missing.".into();
    };
    let vs = |o: &Outcome| o.cpu_ns_per_packet / base.cpu_ns_per_packet;
    let row = |o: &Outcome| {
        format!(
            "{} sends a session's packets at most {:.0} per ms (median over sessions) at {:.2}× \
             the CPU per packet of {}",
            o.variant.name(),
            o.burst_median,
            vs(o),
            base.variant.name()
        )
    };
    let stamped: Vec<&Outcome> = r
        .outcomes
        .iter()
        .filter(|o| o.variant.method.txtime())
        .collect();
    let mut s = format!(
        "**Conclusion.** {} sends bursts of up to {:.0} packets of a session within 1 ms \
         (nominal {:.2}); {}. ",
        base.variant.name(),
        base.burst_median,
        1e6 / c.period_ns() as f64,
        row(small)
    );
    if stamped.is_empty() {
        s.push_str("SO_TXTIME was refused here, so nothing can be said about it.");
        return s;
    }
    let rows: Vec<String> = stamped.iter().map(|o| row(o)).collect();
    if !r.paced {
        let _ = write!(
            s,
            "Whether SO_TXTIME smooths bursts could not be measured: this kernel has no fq \
             qdisc, so the stamps were accepted (sends carrying SCM_TXTIME succeed) \
             but nothing held the packets until their time, and the stamped rows arrive as \
             bursty as the unstamped ones ({}). What the run does show is the cost: one stamp per \
             GSO send keeps GSO's batching, but a stamp per packet needs one message per \
             packet (sendmmsg) and gives that batching up. Not worth an engine data path option \
             on this evidence; rerun on a kernel with `CONFIG_NET_SCH_FQ` before deciding.",
            rows.join("; ")
        );
        return s;
    }
    let smoothed: Vec<&&Outcome> = stamped
        .iter()
        .filter(|o| o.burst_median <= SMOOTH)
        .collect();
    let _ = write!(s, "With fq honouring the stamps: {}. ", rows.join("; "));
    match smoothed.iter().min_by(|a, b| vs(a).total_cmp(&vs(b))) {
        Some(best) => {
            let _ = write!(
                s,
                "SO_TXTIME smoothed the bursts ({} at ≤ {SMOOTH:.0} packets per ms) for {:.2}× \
                 the sender CPU of {} (against {:.2}× for the small burst without it); it is \
                 worth an engine data path option if that CPU is affordable at the target load.",
                best.variant.name(),
                vs(best),
                base.variant.name(),
                vs(small)
            );
        }
        None => s.push_str(
            "SO_TXTIME did not bring any variant down to 2 packets per ms per session: not worth \
             an engine data path option.",
        ),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_the_densest_millisecond() {
        assert_eq!(max_in_window(&[], WINDOW_NS), 0);
        assert_eq!(max_in_window(&[5], WINDOW_NS), 1);
        // 0, 0.5 and 0.999 ms share a window; 1.0 ms starts the next.
        let t = [0, 500_000, 999_999, 1_000_000, 3_000_000];
        assert_eq!(max_in_window(&t, WINDOW_NS), 3);
        let paced: Vec<i64> = (0..100).map(|k| k * 2_339_000).collect();
        assert_eq!(max_in_window(&paced, WINDOW_NS), 1);
    }

    #[test]
    fn lateness_percentiles() {
        let l = Lateness::of((0..=100).map(|x| x * 1_000_000).rev().collect()).unwrap();
        assert_eq!((l.min, l.p50, l.p99, l.max), (0.0, 50.0, 99.0, 100.0));
        assert!(Lateness::of(vec![]).is_none());
    }

    #[test]
    fn dropped_counters_are_summed() {
        let tc = "qdisc fq 8001: root refcnt 2 limit 10000p flow_limit 10000p\n \
                  Sent 1356 bytes 1 pkt (dropped 3, overlimits 0 requeues 0)\n \
                  backlog 0b 0p requeues 0\n  flows 1 (inactive 1 throttled 0)\n\
                  qdisc pfifo 0: parent 8001: Sent 0 bytes 0 pkt (dropped 4, overlimits 0)";
        assert_eq!(parse_dropped(tc), 7);
        assert_eq!(parse_dropped("nothing"), 0);
    }

    #[test]
    fn cmsgs_are_laid_out_one_after_the_other() {
        let mut control = [0u64; 6];
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: 48 bytes hold a u16 and a u64 cmsg.
        unsafe {
            push_cmsg(&mut msg, libc::SOL_UDP, libc::UDP_SEGMENT, 1328u16);
            push_cmsg(
                &mut msg,
                libc::SOL_SOCKET,
                libc::SCM_TXTIME,
                0x0102_0304_0506_0708u64,
            );
        }
        assert_eq!(msg.msg_controllen, 48);
        // SAFETY: walking the two cmsgs just written.
        unsafe {
            let a = libc::CMSG_FIRSTHDR(&msg);
            assert_eq!(
                ((*a).cmsg_level, (*a).cmsg_type),
                (libc::SOL_UDP, libc::UDP_SEGMENT)
            );
            assert_eq!(
                std::ptr::read_unaligned(libc::CMSG_DATA(a).cast::<u16>()),
                1328
            );
            let b = libc::CMSG_NXTHDR(&msg, a);
            assert_eq!((*b).cmsg_type, libc::SCM_TXTIME);
            assert_eq!((*b).cmsg_len, libc::CMSG_LEN(8) as usize);
            assert_eq!(
                std::ptr::read_unaligned(libc::CMSG_DATA(b).cast::<u64>()),
                0x0102_0304_0506_0708
            );
            assert!(libc::CMSG_NXTHDR(&msg, b).is_null());
        }
    }

    #[test]
    fn the_conclusion_says_whether_txtime_was_honoured() {
        let cfg = TxtimeConfig::default();
        let outcome = |v: Variant, ns: f64, burst: f64| Outcome {
            variant: v,
            sent: 1000,
            unsent: 0,
            received: 1000,
            syscalls: 10,
            cpu_ns_per_packet: ns,
            lateness: None,
            burst_median: burst,
            burst_max: burst as usize,
            qdisc_drops: Some(0),
        };
        let vs = variants(&cfg);
        let paced_bursts = [13.0, 2.0, 13.0, 13.0, 1.0];
        let mut r = TxtimeReport {
            qdisc: "fq".into(),
            paced: true,
            notes: vec![],
            config: cfg,
            outcomes: vs
                .iter()
                .zip(paced_bursts)
                .map(|(&v, b)| outcome(v, 1000.0, b))
                .collect(),
        };
        let c = conclusion(&r);
        assert!(
            c.contains("SO_TXTIME smoothed the bursts (sendmmsg+txtime 40 ms"),
            "{c}"
        );
        r.paced = false;
        assert!(conclusion(&r).contains("could not be measured"));
    }

    #[test]
    fn a_session_paced_at_its_rate_has_one_packet_per_millisecond() {
        let cfg = TxtimeConfig::default();
        assert_eq!(cfg.period_ns(), 2_339_555);
        let arrivals: Vec<Arrival> = (0..2u32)
            .flat_map(|s| {
                (0..50).map(move |k| Arrival {
                    session: s,
                    due: 0,
                    // Session 1 arrives in bursts of 10.
                    at: if s == 0 {
                        k * 2_339_555
                    } else {
                        (k / 10) * 23_395_550 + k
                    },
                })
            })
            .collect();
        assert_eq!(per_session_bursts(arrivals, 3), [1, 10, 0]);
    }
}

//! The kernel floor of `fjord bench peers`: the servers' kernel path with no
//! server in it. A thread pinned to the servers' CPU sends prebuilt RTP
//! packets (12-byte header and 1316 bytes of the title) over loopback to N
//! UDP receivers at the title's rate, each session's bursts due on their own
//! schedule: one `sendmsg` with `UDP_SEGMENT` per burst, a `send` per packet
//! for bursts of 1, sleeping to the next due time in between. The receivers
//! drain the way `fjord load`'s do, with its code ([`fjord_client::recv`]:
//! one thread on the receivers' CPU, epoll at most every millisecond,
//! `recvmmsg` of 32 with kernel timestamps), so
//! the wake-ups the sender pays for are the same. CPU per packet is the
//! sender thread's CPU over the window over the packets the receivers
//! counted in it.

use std::{
    fs::File,
    io::{self, Read},
    net::UdpSocket,
    os::fd::{AsRawFd, RawFd},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use fjord_client::{
    load::DEFAULT_STAGGER,
    recv::{BATCH, Epoll, RecvBatch, receive_options},
};
use fjord_engine::{
    DEFAULT_BURST,
    datapath::cmsg::{MAX_SEGMENTED_BYTES, MAX_SEGMENTS, send_segmented},
    wake_grid,
};
use fjord_proto::rtp::{RTP_HEADER_LEN, write_header};

use super::{BITRATE, PeersConfig, REALTIME_PRIORITY, Run};
use crate::{capacity::pin_current_thread, cpu::ThreadCpu, procfs::Schedstat, workload::PT};

/// RTP payload per packet: 7 TS packets, as the servers send.
pub const PAYLOAD: usize = 1316;
pub const PACKET: usize = RTP_HEADER_LEN + PAYLOAD;
/// Floor bursts when none are asked for: fjord's measured burst (from its
/// `/metrics`) falls between them and is compared by interpolation; 24 is
/// its usual burst at the default 80 ms limit (24.0 packets per send at
/// 100 sessions), so that comparison does not lean on rows far from it.
pub const DEFAULT_BURSTS: [usize; 4] = [1, 4, 24, 32];
/// Wake-ups fall on fjord's engine's grid at its default burst limit (10 ms):
/// bursts due within one step leave in one tick, as the engine's sessions
/// share its wake-ups. A finer grid would charge the floor wake-ups fjord
/// does not pay, and put it above fjord at light loads.
pub const GRID_NS: u64 = wake_grid(DEFAULT_BURST).as_nanos() as u64;
// `fjord load`'s receive shape (fjord-client's load/sys.rs).
const RCVBUF: usize = 4 << 20;
const MIN_POLL: Duration = Duration::from_millis(1);
/// Sending before the window: sockets, caches and the schedule settle.
const WARMUP: Duration = Duration::from_millis(500);
/// After the window, for what was sent in it to be read.
const GRACE: Duration = Duration::from_millis(5);
const RING_BYTES: usize = 64 << 20;
const LATE_NS: u64 = 2_000_000;

/// Packets per second of one session: the title's rate in RTP packets.
pub fn session_pps() -> f64 {
    BITRATE as f64 / (PAYLOAD * 8) as f64
}

/// When each burst is due. Sessions share one period (`burst` packets at
/// the title's rate) and are phased evenly over it, as sessions started at
/// unrelated times are: burst event `e` is session `e % N`'s burst `e / N`,
/// due `e · period / N` after the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub sessions: u64,
    pub burst: u64,
    pub period_ns: u64,
}

impl Schedule {
    pub fn new(sessions: usize, burst: usize, pps: f64) -> Self {
        let burst = burst.max(1);
        Self {
            sessions: sessions.max(1) as u64,
            burst: burst as u64,
            period_ns: ((burst as f64 * 1e9 / pps).round() as u64).max(1),
        }
    }

    pub fn due_ns(&self, e: u64) -> u64 {
        (u128::from(e) * u128::from(self.period_ns) / u128::from(self.sessions)) as u64
    }

    pub fn session(&self, e: u64) -> usize {
        (e % self.sessions) as usize
    }

    /// The session's number of the burst's first packet.
    pub fn first_packet(&self, e: u64) -> u64 {
        e / self.sessions * self.burst
    }

    /// How many bursts are due before `t_ns`.
    pub fn due_before(&self, t_ns: u64) -> u64 {
        (u128::from(t_ns) * u128::from(self.sessions)).div_ceil(u128::from(self.period_ns)) as u64
    }
}

/// How many packets session `s` is behind the first when sessions start
/// `stagger` apart, as the receivers start the servers' sessions, in whole
/// bursts (a burst stays contiguous in the ring). So the floor's sessions
/// read as much of the title as a server's do (1,000 sessions: a second
/// of it, 0.57 MB) rather than the same burst all together.
pub fn lag(s: usize, burst: u64, stagger: Duration, pps: f64) -> u64 {
    let packets = (s as f64 * stagger.as_secs_f64() * pps) as u64;
    packets / burst.max(1) * burst.max(1)
}

/// The tick of a burst due at `due_ns`: wake at the start of its grid
/// step, send every burst due before its end.
pub fn tick(due_ns: u64) -> (u64, u64) {
    let start = due_ns / GRID_NS * GRID_NS;
    (start, start + GRID_NS)
}

/// Packets per `sendmsg` of a burst, cut at the kernel's GSO limits.
pub fn gso_sends(burst: usize) -> impl Iterator<Item = usize> {
    let max = (MAX_SEGMENTED_BYTES / PACKET).clamp(1, MAX_SEGMENTS);
    (0..burst.div_ceil(max)).map(move |i| max.min(burst - i * max))
}

/// The burst of `bursts` nearest `target`, by ratio.
pub fn nearest_burst(bursts: &[usize], target: f64) -> Option<usize> {
    let dist = |b: usize| (b as f64 / target).ln().abs();
    bursts
        .iter()
        .copied()
        .filter(|&b| b > 0)
        .min_by(|&a, &b| dist(a).total_cmp(&dist(b)))
}

/// The floor at a burst no row was measured at, and the rows it is from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FloorAt {
    /// CPU per packet, µs.
    pub us: f64,
    /// The measured bursts around it; equal when it is one of them, or
    /// outside them (the nearest).
    pub lo: usize,
    pub hi: usize,
}

/// The floor's CPU per packet at `burst` from rows `(burst, µs)` in any
/// order: linear in log(burst) between the two around it, since cost per
/// packet falls about geometrically with the burst; outside them the
/// nearest, as extrapolating a fall could go below zero.
pub fn floor_at(rows: &[(usize, f64)], burst: f64) -> Option<FloorAt> {
    let mut p: Vec<(usize, f64)> = rows
        .iter()
        .copied()
        .filter(|&(b, us)| b > 0 && us.is_finite())
        .collect();
    p.sort_by_key(|&(b, _)| b);
    if !(burst.is_finite() && burst > 0.0) {
        return None;
    }
    let at = |(b, us): (usize, f64)| FloorAt { us, lo: b, hi: b };
    let (first, last) = (*p.first()?, *p.last()?);
    if burst <= first.0 as f64 {
        return Some(at(first));
    }
    if burst >= last.0 as f64 {
        return Some(at(last));
    }
    let i = p.partition_point(|&(b, _)| (b as f64) < burst);
    let ((b0, u0), (b1, u1)) = (p[i - 1], p[i]);
    if b1 as f64 == burst {
        return Some(at(p[i]));
    }
    let (l0, l1) = ((b0 as f64).ln(), (b1 as f64).ln());
    let t = (burst.ln() - l0) / (l1 - l0);
    Some(FloorAt {
        us: u0 + (u1 - u0) * t,
        lo: b0,
        hi: b1,
    })
}

/// How many times its floor a server's CPU per packet is.
pub fn times_floor(us: f64, floor_us: f64) -> Option<f64> {
    (us.is_finite() && floor_us.is_finite() && floor_us > 0.0).then(|| us / floor_us)
}

/// What a floor row is, in the report.
pub fn label(burst: usize, sessions: usize, gro: bool) -> String {
    let how = match burst {
        1 => "a send per packet".to_string(),
        b => format!("GSO bursts of {b}"),
    };
    let rx = if gro {
        "receivers with UDP GRO"
    } else {
        "plain receivers"
    };
    format!("kernel floor: prebuilt packets, {how}, {sessions} {rx}")
}

/// Prebuilt packets: the title's bytes in order, each behind an RTP header.
/// Every session sends its packet k from slot k plus its [`lag`], as
/// sessions started a millisecond apart read the title that far apart.
pub struct Ring {
    bytes: Vec<u8>,
}

impl Ring {
    pub fn from_title(title: &Path) -> anyhow::Result<Self> {
        let max = RING_BYTES / PACKET;
        let mut data = Vec::new();
        File::open(title)
            .and_then(|f| f.take((max * PAYLOAD) as u64).read_to_end(&mut data))
            .with_context(|| format!("reading {}", title.display()))?;
        // At least one largest burst, however short the title.
        let packets = (data.len() / PAYLOAD).clamp(MAX_SEGMENTS, max);
        let mut bytes = vec![0u8; packets * PACKET];
        for (k, slot) in bytes.chunks_exact_mut(PACKET).enumerate() {
            let Some((head, payload)) = slot.split_first_chunk_mut::<RTP_HEADER_LEN>() else {
                continue;
            };
            write_header(head, PT, false, k as u16, k as u32 * 3000, 0x464c_4f52);
            let src = data.get(k * PAYLOAD..(k + 1) * PAYLOAD).unwrap_or(&[]);
            payload[..src.len()].copy_from_slice(src);
        }
        Ok(Self { bytes })
    }

    /// The burst of `burst` packets from the session's packet `first` (a
    /// multiple of `burst`): contiguous, the ring cut to whole bursts.
    fn burst(&self, first: u64, burst: usize) -> &[u8] {
        let slots = (self.bytes.len() / PACKET / burst * burst).max(burst) as u64;
        let at = (first % slots) as usize * PACKET;
        &self.bytes[at..at + burst * PACKET]
    }
}

/// What the sender did over the run and the window.
#[derive(Default)]
struct Sent {
    total: u64,
    in_window: u64,
    late: u64,
    max_late_ns: u64,
    cpu: Duration,
    wait: Duration,
    window: Duration,
}

struct Plan {
    sched: Schedule,
    start: Instant,
    warm: Instant,
    end: Instant,
    cpu: usize,
    realtime: bool,
}

/// One floor run at `burst`, on `cfg`'s CPUs; the calling thread receives
/// (the caller pins it where the servers' receivers run).
pub fn run_once(cfg: &PeersConfig, ring: &Ring, burst: usize, rep: usize) -> anyhow::Result<Run> {
    let (rx, tx) = sockets(cfg.sessions, cfg.gro)?;
    let start = Instant::now() + Duration::from_millis(20);
    let warm = start + WARMUP;
    let plan = Plan {
        sched: Schedule::new(cfg.sessions, burst, session_pps()),
        start,
        warm,
        end: warm + Duration::from_secs_f64(cfg.seconds),
        cpu: cfg.cpu,
        realtime: cfg.realtime,
    };
    let (got, sent, total) = std::thread::scope(|s| -> anyhow::Result<_> {
        let sender = s.spawn(|| send_loop(&plan, &tx, ring));
        let got = receive(&rx, cfg.gro, plan.warm, plan.end + GRACE);
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("the floor's sender panicked"))??;
        let got = got?;
        // Whatever is still queued, for loss over the whole run.
        let mut batch = RecvBatch::new();
        let rest: u64 = rx
            .iter()
            .map(|r| drain(r.as_raw_fd(), &mut batch, cfg.gro))
            .sum();
        Ok((got, sent, got.1 + rest))
    })?;
    Ok(run_of(cfg, rep, got.0, &sent, total))
}

fn run_of(cfg: &PeersConfig, rep: usize, packets: u64, s: &Sent, received: u64) -> Run {
    let (cpu_s, window_s) = (s.cpu.as_secs_f64(), s.window.as_secs_f64());
    let lost = s.total.saturating_sub(received);
    let bytes = packets * PACKET as u64;
    Run {
        rep,
        sessions: cfg.sessions,
        playing: cfg.sessions,
        packets,
        bytes,
        lost,
        loss_percent: 100.0 * lost as f64 / s.total.max(1) as f64,
        late: s.late,
        late_percent: 100.0 * s.late as f64 / s.in_window.max(1) as f64,
        max_late_ms: s.max_late_ns as f64 / 1e6,
        mbps_per_session: bytes as f64 * 8.0 / window_s.max(1e-9) / cfg.sessions as f64 / 1e6,
        cpu_s,
        wait_s: s.wait.as_secs_f64(),
        window_s,
        us_per_packet: cpu_s * 1e6 / packets.max(1) as f64,
        setup_s: 0.0,
        error: (packets == 0).then(|| "no packets arrived".to_string()),
        // Its burst is its row's, known.
        ..Run::default()
    }
}

/// N receivers and N senders, each sender connected to its receiver as a
/// server's session socket is to its client.
pub(crate) fn sockets(n: usize, gro: bool) -> anyhow::Result<(Vec<UdpSocket>, Vec<UdpSocket>)> {
    let (mut rx, mut tx) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let r = UdpSocket::bind("127.0.0.1:0").context("binding a floor receiver")?;
        r.set_nonblocking(true)?;
        // As `fjord load`'s.
        receive_options(r.as_raw_fd(), RCVBUF, gro);
        let t = UdpSocket::bind("127.0.0.1:0").context("binding a floor sender")?;
        t.connect(r.local_addr()?)?;
        t.set_nonblocking(true)?;
        rx.push(r);
        tx.push(t);
    }
    Ok((rx, tx))
}

/// The sender: pinned (and under SCHED_FIFO) as the servers are, it sleeps
/// to each tick and sends the bursts due in it.
fn send_loop(plan: &Plan, socks: &[UdpSocket], ring: &Ring) -> anyhow::Result<Sent> {
    pin_current_thread(plan.cpu);
    if plan.realtime {
        make_realtime()?;
    }
    let (sched, b) = (plan.sched, plan.sched.burst as usize);
    let mut s = Sent::default();
    let mut mark = None;
    let mut e = 0u64;
    loop {
        let (wake, tick_end) = tick(sched.due_ns(e));
        let at = plan.start + Duration::from_nanos(wake);
        if at >= plan.end {
            break;
        }
        sleep_until(at);
        let now = Instant::now();
        if mark.is_none() && now >= plan.warm {
            mark = Some((ThreadCpu::now(), thread_wait(), now, s.total));
        }
        let now_ns = now.duration_since(plan.start).as_nanos() as u64;
        let last = sched.due_before(tick_end);
        for ev in e..last {
            let (session, first) = (sched.session(ev), sched.first_packet(ev));
            let first = first + lag(session, sched.burst, DEFAULT_STAGGER, session_pps());
            send_burst(socks[session].as_raw_fd(), ring.burst(first, b), b)?;
            s.total += b as u64;
            // Late as the servers' packets are: leaving over 2 ms after due.
            let late = now_ns.saturating_sub(sched.due_ns(ev));
            if mark.is_some() {
                s.late += if late > LATE_NS { b as u64 } else { 0 };
                s.max_late_ns = s.max_late_ns.max(late);
            }
        }
        e = last;
    }
    let (cpu0, wait0, t0, total0) = mark.context("the floor run ended before its warm-up")?;
    s.cpu = ThreadCpu::now().since(cpu0).total();
    s.wait = thread_wait().saturating_sub(wait0);
    s.window = t0.elapsed();
    s.in_window = s.total - total0;
    Ok(s)
}

fn sleep_until(at: Instant) {
    let left = at.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

pub(crate) fn make_realtime() -> anyhow::Result<()> {
    let param = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: a valid sched_param; 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        bail!(
            "the floor's sender under SCHED_FIFO: {}",
            io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Run-queue wait of the calling thread.
fn thread_wait() -> Duration {
    Schedstat::this_thread().map_or(Duration::ZERO, |s| Duration::from_nanos(s.wait_ns))
}

/// One burst: a `send` for one packet, else a `sendmsg` with `UDP_SEGMENT`
/// per GSO-sized group.
fn send_burst(fd: RawFd, bytes: &[u8], burst: usize) -> anyhow::Result<()> {
    let mut at = 0;
    for n in gso_sends(burst) {
        let buf = &bytes[at * PACKET..(at + n) * PACKET];
        at += n;
        let r = if n == 1 {
            // SAFETY: a valid buffer of buf.len() bytes.
            match unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) } {
                r if r < 0 => Err(io::Error::last_os_error()),
                _ => Ok(()),
            }
        } else {
            let iov = libc::iovec {
                iov_base: buf.as_ptr().cast_mut().cast(),
                iov_len: buf.len(),
            };
            send_segmented(fd, &[iov], PACKET as u16, 0)
        };
        if let Err(e) = r {
            transient(e)?;
        }
    }
    Ok(())
}

/// Errors that lose a packet (the receivers count the loss) but are no
/// failure of the floor.
pub(crate) fn transient(e: io::Error) -> anyhow::Result<()> {
    match e.raw_os_error() {
        Some(libc::ENOBUFS | libc::ECONNREFUSED | libc::EAGAIN) => Ok(()),
        _ => bail!("floor send: {e}"),
    }
}

/// The receivers until `stop`: packets counted from `warm` on, and in all.
pub(crate) fn receive(
    socks: &[UdpSocket],
    gro: bool,
    warm: Instant,
    stop: Instant,
) -> anyhow::Result<(u64, u64)> {
    let mut ep = Epoll::new(socks.len().clamp(1, 1024)).context("epoll_create1")?;
    for (i, s) in socks.iter().enumerate() {
        ep.add(s.as_raw_fd(), i as u64, false)
            .context("epoll_ctl")?;
    }
    let mut batch = RecvBatch::new();
    let drain_all = |batch: &mut RecvBatch| -> u64 {
        socks.iter().map(|s| drain(s.as_raw_fd(), batch, gro)).sum()
    };
    let (mut total, mut at_warm) = (0u64, None);
    let mut last_wait = Instant::now();
    loop {
        let now = Instant::now();
        if at_warm.is_none() && now >= warm {
            total += drain_all(&mut batch);
            at_warm = Some(total);
        }
        if now >= stop {
            break;
        }
        // As `fjord load` with kernel timestamps: at least MIN_POLL between
        // waits, so each recvmmsg reads more.
        if let Some(rest) = MIN_POLL.checked_sub(now - last_wait) {
            std::thread::sleep(rest);
        }
        last_wait = Instant::now();
        let until = if at_warm.is_none() { warm } else { stop };
        let ms = until
            .saturating_duration_since(last_wait)
            .as_micros()
            .div_ceil(1000);
        let n = ep.wait(ms.min(20) as i32).context("epoll_wait")?;
        for i in 0..n {
            let fd = socks[ep.event(i).0 as usize].as_raw_fd();
            total += drain(fd, &mut batch, gro);
        }
    }
    total += drain_all(&mut batch);
    Ok((total - at_warm.unwrap_or(total), total))
}

/// Reads a socket as `fjord load` does: `recvmmsg` until a short batch.
fn drain(fd: RawFd, batch: &mut RecvBatch, gro: bool) -> u64 {
    let mut packets = 0;
    for _ in 0..64 {
        // An error (the loss count shows it) reads as nothing.
        let n = batch.recv(fd).unwrap_or(0);
        packets += (0..n)
            .map(|i| match gro {
                true => batch.msg_len(i).div_ceil(PACKET) as u64,
                false => 1,
            })
            .sum::<u64>();
        if n < BATCH {
            break;
        }
    }
    packets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_are_due_round_robin_evenly_phased() {
        // 4 sessions, bursts of 16 at the title's 427.4 packets/s: 37.4 ms.
        let s = Schedule::new(4, 16, session_pps());
        assert_eq!(s.period_ns, 37_432_889);
        let due: Vec<u64> = (0..6).map(|e| s.due_ns(e)).collect();
        assert_eq!(
            due,
            [0, 9_358_222, 18_716_444, 28_074_666, 37_432_889, 46_791_111]
        );
        assert_eq!(
            (0..6).map(|e| s.session(e)).collect::<Vec<_>>(),
            [0, 1, 2, 3, 0, 1]
        );
        // Session 1's second burst starts at its packet 16, one period on.
        assert_eq!(s.first_packet(5), 16);
        assert_eq!(s.due_ns(5) - s.due_ns(1), s.period_ns);
    }

    #[test]
    fn bursts_due_before_a_time() {
        let s = Schedule::new(3, 1, 1000.0);
        // Due at 0, 333_333, 666_666, 1_000_000, …
        assert_eq!(s.due_before(0), 0);
        assert_eq!(s.due_before(1), 1);
        assert_eq!(s.due_before(333_333), 1);
        assert_eq!(s.due_before(333_334), 2);
        assert_eq!(s.due_before(1_000_000), 3);
        assert_eq!(s.due_before(1_000_001), 4);
        for t in [5, 999_999, 7_654_321] {
            let n = s.due_before(t);
            assert!(s.due_ns(n - 1) < t && s.due_ns(n) >= t, "{t}");
        }
    }

    #[test]
    fn a_tick_is_its_grid_step() {
        let g = GRID_NS;
        assert_eq!(tick(0), (0, g));
        assert_eq!(tick(g - 1), (0, g));
        assert_eq!(tick(g * 5 / 2), (2 * g, 3 * g));
    }

    #[test]
    fn bursts_are_cut_at_the_gso_limits() {
        // 65,000 bytes hold 48 packets of 1328.
        assert_eq!(gso_sends(1).collect::<Vec<_>>(), [1]);
        assert_eq!(gso_sends(16).collect::<Vec<_>>(), [16]);
        assert_eq!(gso_sends(48).collect::<Vec<_>>(), [48]);
        assert_eq!(gso_sends(100).collect::<Vec<_>>(), [48, 48, 4]);
        assert_eq!(gso_sends(0).count(), 0);
    }

    #[test]
    fn fjord_is_compared_with_the_nearest_floor() {
        assert_eq!(nearest_burst(&[1, 4, 16], 12.8), Some(16));
        // 8 is 2× from 4 and from 16: just below is 4's, just above 16's.
        assert_eq!(nearest_burst(&[1, 4, 16], 7.9), Some(4));
        assert_eq!(nearest_burst(&[1, 4, 16], 8.1), Some(16));
        assert_eq!(nearest_burst(&[1, 4, 16], 2.5), Some(4));
        assert_eq!(nearest_burst(&[1, 4, 16], 1.5), Some(1));
        assert_eq!(nearest_burst(&[], 3.0), None);
        assert_eq!(
            times_floor(3.55, 0.79).map(|x| (x * 100.0).round()),
            Some(449.0)
        );
        assert_eq!(times_floor(3.55, 0.0), None);
        assert_eq!(times_floor(f64::NAN, 1.0), None);
    }

    #[test]
    fn the_floor_at_a_measured_burst_is_that_row() {
        let rows = [(16, 0.5), (1, 4.0), (4, 1.5)];
        for (b, us) in rows {
            let at = floor_at(&rows, b as f64).unwrap();
            assert_eq!(at, FloorAt { us, lo: b, hi: b });
        }
    }

    #[test]
    fn the_floor_between_rows_is_linear_in_log_burst() {
        let rows = [(1, 4.0), (4, 1.5), (16, 0.5)];
        // 2 is halfway from 1 to 4 in log: halfway from 4.0 to 1.5.
        let at = floor_at(&rows, 2.0).unwrap();
        assert_eq!((at.lo, at.hi), (1, 4));
        assert!((at.us - 2.75).abs() < 1e-12, "{at:?}");
        // 8 is halfway from 4 to 16.
        let at = floor_at(&rows, 8.0).unwrap();
        assert_eq!((at.lo, at.hi), (4, 16));
        assert!((at.us - 1.0).abs() < 1e-12, "{at:?}");
        // 3.4: log-linear, not linear in the burst (which gives 2.0).
        let at = floor_at(&rows, 3.4).unwrap();
        let t = 3.4f64.ln() / 4f64.ln();
        assert!((at.us - (4.0 - 2.5 * t)).abs() < 1e-12, "{at:?}");
        assert!((at.us - (4.0 - 2.5 * 2.4 / 3.0)).abs() > 0.1, "{at:?}");
    }

    #[test]
    fn the_floor_outside_the_rows_is_the_nearest() {
        let rows = [(4, 1.5), (16, 0.5)];
        assert_eq!(
            floor_at(&rows, 1.3),
            Some(FloorAt {
                us: 1.5,
                lo: 4,
                hi: 4
            })
        );
        assert_eq!(
            floor_at(&rows, 40.0),
            Some(FloorAt {
                us: 0.5,
                lo: 16,
                hi: 16
            })
        );
        // Rows that were not measured do not count.
        assert_eq!(floor_at(&[(4, f64::NAN), (16, 0.5)], 8.0).unwrap().us, 0.5);
        assert_eq!(floor_at(&[], 8.0), None);
        assert_eq!(floor_at(&rows, f64::NAN), None);
        assert_eq!(floor_at(&rows, 0.0), None);
    }

    #[test]
    fn rows_say_what_they_are() {
        assert_eq!(
            label(16, 100, false),
            "kernel floor: prebuilt packets, GSO bursts of 16, 100 plain receivers"
        );
        assert_eq!(
            label(1, 20, true),
            "kernel floor: prebuilt packets, a send per packet, 20 receivers with UDP GRO"
        );
    }

    #[test]
    fn sessions_lag_a_stagger_of_the_title_each_in_whole_bursts() {
        let ms = Duration::from_millis(1);
        let pps = session_pps();
        assert_eq!(lag(0, 24, ms, pps), 0);
        // 427 packets a second: session 100 started 100 ms later, 42.7
        // packets behind, read from the start of the burst it is in.
        assert_eq!(lag(100, 24, ms, pps), 24);
        assert_eq!(lag(100, 1, ms, pps), 42);
        // 1,000 sessions span a second of the title.
        let last = lag(999, 24, ms, pps);
        assert!(
            (400..=427).contains(&last) && last.is_multiple_of(24),
            "{last}"
        );
    }

    #[test]
    fn a_ring_burst_is_contiguous_whole_packets() {
        let ring = Ring {
            bytes: vec![0; 100 * PACKET],
        };
        assert_eq!(ring.burst(0, 16).len(), 16 * PACKET);
        // 96 slots of whole bursts: packet 96 wraps to slot 0.
        assert_eq!(ring.burst(96, 16).as_ptr(), ring.bytes.as_ptr());
        assert_eq!(
            ring.burst(99, 1).as_ptr(),
            ring.bytes[99 * PACKET..].as_ptr()
        );
    }
}

//! Per-disk request scheduling, sans-IO: no threads, no clocks, no I/O.
//!
//! One [`Scheduler`] per disk decides what that disk's worker threads do next.
//! Time is whatever the caller passes as `now_ns` (any monotonic origin).
//!
//! Contract:
//! - Real-time (RT) requests ([`Scheduler::push_rt`]) are bytes a playing
//!   session needs before a deadline; among themselves they are served
//!   earliest deadline first. Bulk requests ([`Scheduler::push_bulk`]) ask
//!   permission for background I/O (ingest, parity, packet files, verify) and
//!   are served first in, first out.
//! - [`Scheduler::next`] says what a free worker should do, or `None`: at most
//!   `depth` requests are in flight, and at most `bulk_depth` of them bulk.
//! - Between the two queues, Deficit Round Robin with quanta in bytes (as in
//!   MARS): while both are backlogged, bulk gets at least
//!   `bulk_quantum / (rt_quantum + bulk_quantum)` of the bytes. An RT request
//!   whose deadline is within `urgent_ns` goes before bulk whatever the
//!   deficits say. A queue alone gets everything (work-conserving).
//! - Every dispatch is ended by exactly one [`Scheduler::complete`], which
//!   frees its slot and feeds the counters and the bandwidth, service-time
//!   and queue-delay estimates. Queued (not in-flight) requests can be
//!   cancelled; their tags are handed back.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// Weight of a new sample in the moving averages: 1/8, as TCP's RTT
/// estimator, so one odd request moves the estimate little but a real change
/// of the disk shows within a few dozen requests.
const EWMA_WEIGHT: f64 = 0.125;

/// How a disk's scheduler shares it. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Requests in flight at most (the disk's useful queue depth).
    pub depth: usize,
    /// Bulk requests in flight at most (1..=depth): below `depth`, a slot is
    /// always left for an RT read, so it never waits behind a full set of
    /// long bulk writes.
    pub bulk_depth: usize,
    /// RT queue's quantum per round, bytes.
    pub rt_quantum: u64,
    /// Bulk queue's quantum per round, bytes; the ratio of the quanta is
    /// bulk's guaranteed share while RT is backlogged.
    pub bulk_quantum: u64,
    /// An RT request whose deadline is at most this far from now is urgent:
    /// served before bulk regardless of deficits.
    pub urgent_ns: u64,
}

impl Default for Config {
    /// Four in flight, one of them kept for RT; bulk at least 10 % of the
    /// bytes (1 MiB of 10 MiB per round); urgent within 50 ms.
    fn default() -> Self {
        Config {
            depth: 4,
            bulk_depth: 3,
            rt_quantum: 9 << 20,
            bulk_quantum: 1 << 20,
            urgent_ns: 50_000_000,
        }
    }
}

/// Names one pushed request, from push to completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Which queue a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Real-time: needed by `deadline_ns`.
    Rt { deadline_ns: u64 },
    /// Background I/O.
    Bulk,
}

/// What a free worker should do now; hand `ticket` back to
/// [`Scheduler::complete`] when done.
#[derive(Debug, PartialEq, Eq)]
pub struct Dispatch<T> {
    pub ticket: Ticket,
    pub tag: T,
    pub class: Class,
    pub bytes: u64,
    /// Served ahead of its DRR turn because its deadline was near.
    pub urgent: bool,
}

/// What [`Scheduler::complete`] learned about one finished request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub class: Class,
    pub bytes: u64,
    /// From dispatch to completion.
    pub service_ns: u64,
    /// An RT request that completed after its deadline.
    pub missed_deadline: bool,
}

/// Counters since the scheduler was made; requests and bytes count
/// completions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub rt_requests: u64,
    pub rt_bytes: u64,
    pub bulk_requests: u64,
    pub bulk_bytes: u64,
    /// RT requests completed after their deadline.
    pub missed_deadlines: u64,
    /// RT requests dispatched ahead of their turn because urgent.
    pub urgent_dispatches: u64,
    /// Queued requests dropped by a cancel.
    pub cancelled: u64,
}

/// A queued RT request, ordered so the heap's top is the earliest deadline
/// (ties: the earlier push).
struct RtEntry<T> {
    deadline_ns: u64,
    ticket: Ticket,
    bytes: u64,
    tag: T,
}

impl<T> RtEntry<T> {
    fn key(&self) -> (u64, Ticket) {
        (self.deadline_ns, self.ticket)
    }
}

impl<T> PartialEq for RtEntry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for RtEntry<T> {}

impl<T> PartialOrd for RtEntry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for RtEntry<T> {
    /// Reversed: `BinaryHeap` is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

struct BulkEntry<T> {
    ticket: Ticket,
    bytes: u64,
    tag: T,
}

struct InFlight {
    ticket: Ticket,
    class: Class,
    bytes: u64,
    dispatched_ns: u64,
}

/// Index of the queues in per-queue arrays.
const RT: usize = 0;
const BULK: usize = 1;

/// One disk's request scheduler; `T` is whatever the caller needs back with
/// a dispatch (a session's buffer slot, a job's channel, ...).
pub struct Scheduler<T> {
    config: Config,
    rt: BinaryHeap<RtEntry<T>>,
    bulk: VecDeque<BulkEntry<T>>,
    queued_bytes: [u64; 2],
    in_flight: Vec<InFlight>,
    bulk_in_flight: usize,
    next_ticket: u64,
    /// DRR state: whose turn, whether it got this turn's quantum, and each
    /// queue's deficit in bytes (RT's may be negative: see `charge_urgent`).
    turn: usize,
    credited: bool,
    deficit: [i128; 2],
    stats: Stats,
    estimates: Estimates,
}

/// Moving averages fed by completions.
#[derive(Default)]
struct Estimates {
    /// Bytes completed and disk-busy time per completion, averaged apart:
    /// their ratio is the throughput while busy, right for any depth (a
    /// single request's bytes/latency would undercount overlapping ones).
    bytes: f64,
    busy_ns: f64,
    service_ns: f64,
    samples: u64,
    /// Start of the busy time not yet counted: last completion or the
    /// dispatch that ended an idle spell.
    busy_mark_ns: u64,
}

impl<T> Scheduler<T> {
    /// # Panics
    /// If `depth` is 0, `bulk_depth` is outside `1..=depth` or a quantum is
    /// 0: such a scheduler could never serve one of its queues.
    pub fn new(config: Config) -> Self {
        assert!(config.depth >= 1, "sched: depth must be at least 1");
        assert!(
            (1..=config.depth).contains(&config.bulk_depth),
            "sched: bulk_depth must be in 1..=depth"
        );
        assert!(
            config.rt_quantum > 0 && config.bulk_quantum > 0,
            "sched: quanta must be positive"
        );
        Scheduler {
            config,
            rt: BinaryHeap::new(),
            bulk: VecDeque::new(),
            queued_bytes: [0; 2],
            in_flight: Vec::with_capacity(config.depth),
            bulk_in_flight: 0,
            next_ticket: 0,
            turn: RT,
            credited: false,
            deficit: [0; 2],
            stats: Stats::default(),
            estimates: Estimates::default(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Queues `bytes` of real-time reading needed by `deadline_ns`.
    pub fn push_rt(&mut self, tag: T, bytes: u64, deadline_ns: u64) -> Ticket {
        let ticket = self.new_ticket();
        self.queued_bytes[RT] = self.queued_bytes[RT].saturating_add(bytes);
        self.rt.push(RtEntry {
            deadline_ns,
            ticket,
            bytes,
            tag,
        });
        ticket
    }

    /// Queues a request for `bytes` of background I/O.
    pub fn push_bulk(&mut self, tag: T, bytes: u64) -> Ticket {
        let ticket = self.new_ticket();
        self.queued_bytes[BULK] = self.queued_bytes[BULK].saturating_add(bytes);
        self.bulk.push_back(BulkEntry { ticket, bytes, tag });
        ticket
    }

    fn new_ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// The request a free worker should start now, if any may start.
    pub fn next(&mut self, now_ns: u64) -> Option<Dispatch<T>> {
        if self.in_flight.len() >= self.config.depth {
            return None;
        }
        self.forget_idle_credit();
        let rt_ready = !self.rt.is_empty();
        let bulk_ready = !self.bulk.is_empty() && self.bulk_in_flight < self.config.bulk_depth;
        let urgent = rt_ready && self.rt_head_urgent(now_ns);
        let queue = match (rt_ready, bulk_ready) {
            (false, false) => return None,
            // Alone, a queue takes the disk without spending credit: nobody
            // waits for it, and it must not owe for it when the other returns.
            (true, false) => RT,
            (false, true) => BULK,
            (true, true) if urgent => {
                self.charge_urgent();
                RT
            }
            (true, true) => self.pick_drr(),
        };
        Some(match queue {
            RT => self.dispatch_rt(now_ns, urgent),
            _ => self.dispatch_bulk(now_ns),
        })
    }

    /// An empty queue loses its credit (standard DRR): it must not bank
    /// service while it has nothing to ask for, and gets a fresh quantum on
    /// its next turn once it is back.
    fn forget_idle_credit(&mut self) {
        for (q, empty) in [(RT, self.rt.is_empty()), (BULK, self.bulk.is_empty())] {
            if empty {
                self.deficit[q] = 0;
                if self.turn == q {
                    self.credited = false;
                }
            }
        }
    }

    fn rt_head_urgent(&self, now_ns: u64) -> bool {
        self.rt
            .peek()
            .is_some_and(|e| e.deadline_ns <= now_ns.saturating_add(self.config.urgent_ns))
    }

    /// An urgent read jumps the round but is still paid from RT's deficit,
    /// so bulk gets those bytes back later from RT's slack. The debt is
    /// capped at one RT quantum: after a long urgent spell, RT must not then
    /// wait for bulk until its reads turn urgent again.
    fn charge_urgent(&mut self) {
        let bytes = i128::from(self.rt.peek().map_or(0, |e| e.bytes));
        let floor = -i128::from(self.config.rt_quantum);
        self.deficit[RT] = (self.deficit[RT] - bytes).max(floor);
    }

    /// Deficit Round Robin between two backlogged queues: the queue whose
    /// turn it is gets its quantum once per turn and is served while its
    /// deficit covers its head request; then the turn passes.
    fn pick_drr(&mut self) -> usize {
        let quantum = [self.config.rt_quantum, self.config.bulk_quantum].map(i128::from);
        let head = [self.head_bytes(RT), self.head_bytes(BULK)].map(i128::from);
        let mut misses = 0;
        loop {
            let q = self.turn;
            if !self.credited {
                self.deficit[q] += quantum[q];
                self.credited = true;
            }
            if self.deficit[q] >= head[q] {
                self.deficit[q] -= head[q];
                return q;
            }
            self.turn = 1 - q;
            self.credited = false;
            misses += 1;
            if misses == 2 {
                self.skip_empty_rounds(head, quantum);
            }
        }
    }

    /// A whole round went by with neither head affordable: add at once the
    /// further rounds that would go by the same way, so requests far larger
    /// than the quanta cost O(1), not one loop per quantum.
    fn skip_empty_rounds(&mut self, head: [i128; 2], quantum: [i128; 2]) {
        let rounds = |q: usize| (head[q] - self.deficit[q] - 1).div_euclid(quantum[q]) + 1;
        let skip = rounds(RT).min(rounds(BULK)) - 1;
        for q in [RT, BULK] {
            self.deficit[q] += skip * quantum[q];
        }
    }

    fn head_bytes(&self, q: usize) -> u64 {
        match q {
            RT => self.rt.peek().map_or(0, |e| e.bytes),
            _ => self.bulk.front().map_or(0, |e| e.bytes),
        }
    }

    fn dispatch_rt(&mut self, now_ns: u64, urgent: bool) -> Dispatch<T> {
        let e = self
            .rt
            .pop()
            .expect("sched: RT dispatch from an empty queue");
        self.queued_bytes[RT] -= e.bytes;
        self.stats.urgent_dispatches += u64::from(urgent);
        let class = Class::Rt {
            deadline_ns: e.deadline_ns,
        };
        self.start(e.ticket, class, e.bytes, now_ns);
        Dispatch {
            ticket: e.ticket,
            tag: e.tag,
            class,
            bytes: e.bytes,
            urgent,
        }
    }

    fn dispatch_bulk(&mut self, now_ns: u64) -> Dispatch<T> {
        let e = self
            .bulk
            .pop_front()
            .expect("sched: bulk dispatch from an empty queue");
        self.queued_bytes[BULK] -= e.bytes;
        self.bulk_in_flight += 1;
        self.start(e.ticket, Class::Bulk, e.bytes, now_ns);
        Dispatch {
            ticket: e.ticket,
            tag: e.tag,
            class: Class::Bulk,
            bytes: e.bytes,
            urgent: false,
        }
    }

    fn start(&mut self, ticket: Ticket, class: Class, bytes: u64, now_ns: u64) {
        if self.in_flight.is_empty() {
            // The disk was idle until now: that time is not busy time.
            self.estimates.busy_mark_ns = now_ns;
        }
        self.in_flight.push(InFlight {
            ticket,
            class,
            bytes,
            dispatched_ns: now_ns,
        });
    }

    /// Ends a dispatched request; `None` if `ticket` is not in flight
    /// (already completed, or never dispatched).
    pub fn complete(&mut self, ticket: Ticket, now_ns: u64) -> Option<Completion> {
        let i = self.in_flight.iter().position(|f| f.ticket == ticket)?;
        let f = self.in_flight.swap_remove(i);
        let service_ns = now_ns.saturating_sub(f.dispatched_ns);
        let missed_deadline = matches!(f.class, Class::Rt { deadline_ns } if now_ns > deadline_ns);
        match f.class {
            Class::Rt { .. } => {
                self.stats.rt_requests += 1;
                self.stats.rt_bytes += f.bytes;
                self.stats.missed_deadlines += u64::from(missed_deadline);
            }
            Class::Bulk => {
                self.bulk_in_flight -= 1;
                self.stats.bulk_requests += 1;
                self.stats.bulk_bytes += f.bytes;
            }
        }
        self.estimates.record(f.bytes, service_ns, now_ns);
        Some(Completion {
            class: f.class,
            bytes: f.bytes,
            service_ns,
            missed_deadline,
        })
    }

    /// Drops a queued request, handing its tag back; `None` if it is not
    /// queued (in flight requests run to completion: the disk has them).
    pub fn cancel(&mut self, ticket: Ticket) -> Option<T> {
        let mut rt = self.take_rt(|e| e.ticket == ticket);
        rt.pop()
            .or_else(|| self.take_bulk(|e| e.ticket == ticket).pop())
    }

    /// Drops the queued RT requests whose tag matches (a session that seeks
    /// or ends), handing their tags back.
    pub fn cancel_rt(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<T> {
        self.take_rt(|e| pred(&e.tag))
    }

    /// Drops the queued bulk requests whose tag matches.
    pub fn cancel_bulk(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<T> {
        self.take_bulk(|e| pred(&e.tag))
    }

    fn take_rt(&mut self, mut pred: impl FnMut(&RtEntry<T>) -> bool) -> Vec<T> {
        let mut kept = std::mem::take(&mut self.rt).into_vec();
        let gone: Vec<_> = kept.extract_if(.., |e| pred(e)).collect();
        self.rt = BinaryHeap::from(kept);
        self.stats.cancelled += gone.len() as u64;
        self.queued_bytes[RT] -= gone.iter().map(|e| e.bytes).sum::<u64>();
        gone.into_iter().map(|e| e.tag).collect()
    }

    fn take_bulk(&mut self, mut pred: impl FnMut(&BulkEntry<T>) -> bool) -> Vec<T> {
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.bulk)
            .into_iter()
            .partition(|e| pred(e));
        self.bulk = kept.into();
        self.stats.cancelled += gone.len() as u64;
        self.queued_bytes[BULK] -= gone.iter().map(|e| e.bytes).sum::<u64>();
        gone.into_iter().map(|e| e.tag).collect()
    }

    /// Requests dispatched and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub fn queued_rt(&self) -> usize {
        self.rt.len()
    }

    pub fn queued_bulk(&self) -> usize {
        self.bulk.len()
    }

    /// Nothing queued and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.rt.is_empty() && self.bulk.is_empty() && self.in_flight.is_empty()
    }

    /// The earliest deadline among queued RT requests.
    pub fn next_deadline(&self) -> Option<u64> {
        self.rt.peek().map(|e| e.deadline_ns)
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// What the disk moves while busy, bytes per second (moving average);
    /// `None` before the first completion.
    pub fn estimated_bandwidth(&self) -> Option<f64> {
        let e = &self.estimates;
        (e.samples > 0 && e.busy_ns > 0.0).then(|| e.bytes / e.busy_ns * 1e9)
    }

    /// Dispatch-to-completion time of a request (moving average, ns).
    pub fn service_time_estimate(&self) -> Option<u64> {
        (self.estimates.samples > 0).then_some(self.estimates.service_ns as u64)
    }

    /// How long until an RT request pushed now (with the latest deadline)
    /// would start, ns: the disk must first move what is in flight, the
    /// queued RT bytes and bulk's DRR share beside them, at the estimated
    /// bandwidth. Add its own bytes over the bandwidth for its completion.
    pub fn queue_delay_estimate(&self) -> Option<u64> {
        let bandwidth = self.estimated_bandwidth()?;
        let rt = u128::from(self.queued_bytes[RT]);
        let bulk_share =
            rt * u128::from(self.config.bulk_quantum) / u128::from(self.config.rt_quantum);
        let bulk = bulk_share.min(u128::from(self.queued_bytes[BULK]));
        let in_flight: u128 = self.in_flight.iter().map(|f| u128::from(f.bytes)).sum();
        Some(((in_flight + rt + bulk) as f64 / bandwidth * 1e9) as u64)
    }
}

impl Estimates {
    fn record(&mut self, bytes: u64, service_ns: u64, now_ns: u64) {
        let busy_ns = now_ns.saturating_sub(self.busy_mark_ns);
        self.busy_mark_ns = now_ns;
        let w = if self.samples == 0 { 1.0 } else { EWMA_WEIGHT };
        let mix = |old: f64, new: u64| old + w * (new as f64 - old);
        self.bytes = mix(self.bytes, bytes);
        self.busy_ns = mix(self.busy_ns, busy_ns);
        self.service_ns = mix(self.service_ns, service_ns);
        self.samples += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn config(depth: usize, bulk_depth: usize, rt_quantum: u64, bulk_quantum: u64) -> Config {
        Config {
            depth,
            bulk_depth,
            rt_quantum,
            bulk_quantum,
            urgent_ns: 50 * MS,
        }
    }

    /// Dispatches one request at a time, completing each at once: the order
    /// in which the scheduler hands the queued work out.
    fn serve_order<T>(s: &mut Scheduler<T>, now_ns: u64) -> Vec<T> {
        let mut order = Vec::new();
        while let Some(d) = s.next(now_ns) {
            s.complete(d.ticket, now_ns).unwrap();
            order.push(d.tag);
        }
        order
    }

    #[test]
    fn rt_in_deadline_order() {
        let mut s = Scheduler::new(config(1, 1, MIB, MIB));
        for (tag, deadline) in [("c", 30 * S), ("a", 10 * S), ("b", 20 * S), ("b2", 20 * S)] {
            s.push_rt(tag, 4096, deadline);
        }
        assert_eq!(s.next_deadline(), Some(10 * S));
        assert_eq!(serve_order(&mut s, 0), ["a", "b", "b2", "c"]);
    }

    /// RT's head (2 MiB) exceeds its 1 MiB quantum, so DRR's first pick is
    /// bulk; only urgency puts the RT read first.
    fn bulk_first_by_drr(deadline_ns: u64) -> Dispatch<&'static str> {
        let mut s = Scheduler::new(config(4, 3, MIB, MIB));
        s.push_bulk("bulk", 64 * 1024);
        s.push_rt("rt", 2 * MIB, deadline_ns);
        s.next(S).unwrap()
    }

    #[test]
    fn urgent_rt_goes_before_queued_bulk() {
        let calm = bulk_first_by_drr(10 * S);
        assert_eq!((calm.tag, calm.urgent), ("bulk", false));
        let urgent = bulk_first_by_drr(S + 50 * MS);
        assert_eq!((urgent.tag, urgent.urgent), ("rt", true));
        let late = bulk_first_by_drr(S / 2);
        assert_eq!((late.tag, late.urgent), ("rt", true));
    }

    /// A disk of fixed bandwidth serving its requests one after another.
    struct FakeDisk {
        bytes_per_s: u64,
        free_at_ns: u64,
        pending: Vec<(u64, Ticket)>,
    }

    impl FakeDisk {
        fn new(bytes_per_s: u64) -> Self {
            FakeDisk {
                bytes_per_s,
                free_at_ns: 0,
                pending: Vec::new(),
            }
        }

        fn start(&mut self, now_ns: u64, bytes: u64, ticket: Ticket) {
            let took = (u128::from(bytes) * u128::from(S) / u128::from(self.bytes_per_s)) as u64;
            self.free_at_ns = self.free_at_ns.max(now_ns) + took;
            self.pending.push((self.free_at_ns, ticket));
        }

        fn finish_first(&mut self) -> Option<(u64, Ticket)> {
            let i = (0..self.pending.len()).min_by_key(|&i| self.pending[i].0)?;
            Some(self.pending.swap_remove(i))
        }
    }

    /// Runs the scheduler against `disk` until `until_ns`; `refill` tops up
    /// the queues before every round of dispatches.
    fn simulate<T>(
        s: &mut Scheduler<T>,
        disk: &mut FakeDisk,
        until_ns: u64,
        mut refill: impl FnMut(&mut Scheduler<T>, u64),
    ) {
        let mut now = 0;
        while now < until_ns {
            refill(s, now);
            while let Some(d) = s.next(now) {
                disk.start(now, d.bytes, d.ticket);
            }
            let (end, ticket) = disk.finish_first().expect("the disk went idle");
            now = end;
            s.complete(ticket, now).unwrap();
        }
    }

    /// Bulk's share of the bytes with RT kept backlogged (deadlines far, so
    /// never urgent) and bulk backlogged, over 60 simulated seconds.
    fn bulk_share_saturated(rt_quantum: u64, bulk_quantum: u64) -> f64 {
        let mut s = Scheduler::new(config(4, 3, rt_quantum, bulk_quantum));
        let mut disk = FakeDisk::new(100_000_000);
        let mut n = 0u64;
        simulate(&mut s, &mut disk, 60 * S, |s, now| {
            while s.queued_rt() < 16 {
                n += 1;
                // Mixed sizes, 256 KiB..2 MiB, as sessions of several rates.
                s.push_rt((), (n % 8 + 1) * 256 * 1024, now + 10 * S);
            }
            while s.queued_bulk() < 4 {
                n += 1;
                s.push_bulk((), if n.is_multiple_of(3) { 4 * MIB } else { MIB });
            }
        });
        let st = s.stats();
        assert_eq!(st.missed_deadlines, 0);
        st.bulk_bytes as f64 / (st.bulk_bytes + st.rt_bytes) as f64
    }

    #[test]
    fn bulk_keeps_its_drr_share_when_rt_is_saturated() {
        let tenth = bulk_share_saturated(9 * MIB, MIB);
        assert!((0.097..0.12).contains(&tenth), "bulk got {tenth}");
        let half = bulk_share_saturated(MIB, MIB);
        assert!((0.47..0.53).contains(&half), "bulk got {half}");
    }

    #[test]
    fn bulk_gets_the_whole_disk_when_rt_is_idle() {
        let mut s = Scheduler::new(config(4, 3, 9 * MIB, MIB));
        let mut disk = FakeDisk::new(100_000_000);
        simulate(&mut s, &mut disk, 10 * S, |s, _| {
            while s.queued_bulk() < 2 {
                // Far above the bulk quantum: alone, it needs no credit.
                s.push_bulk((), 8 * MIB);
            }
        });
        let moved = s.stats().bulk_bytes;
        assert!(
            moved >= 1_000_000_000 - 8 * MIB,
            "bulk moved {moved} in 10 s"
        );
        assert_eq!(s.stats().rt_bytes, 0);
    }

    #[test]
    fn depth_limits_requests_in_flight() {
        let mut s = Scheduler::new(config(3, 2, MIB, MIB));
        let bulk: Vec<Ticket> = (0..5).map(|i| s.push_bulk(i, MIB)).collect();
        let first: Vec<_> = std::iter::from_fn(|| s.next(0)).map(|d| d.tag).collect();
        assert_eq!(first, [0, 1], "bulk stops at bulk_depth");
        s.push_rt(10, MIB, 10 * S);
        s.push_rt(11, MIB, 10 * S);
        assert_eq!(s.next(0).map(|d| d.tag), Some(10), "the slot kept for RT");
        assert!(s.next(0).is_none(), "depth 3 reached");
        assert_eq!(s.in_flight(), 3);
        s.complete(bulk[0], 1).unwrap();
        assert!(s.next(1).is_some());
        assert!(s.next(1).is_none());
    }

    #[test]
    fn cancel_drops_queued_requests_and_returns_tags() {
        let mut s = Scheduler::new(config(1, 1, MIB, MIB));
        // Owned tags: the scheduler needs neither Copy nor Clone.
        for (session, part) in [(1, 0), (2, 0), (1, 1), (2, 1)] {
            s.push_rt(format!("s{session}p{part}"), MIB, 10 * S + part);
        }
        let job = s.push_bulk("job".to_string(), MIB);
        let mut gone = s.cancel_rt(|t| t.starts_with("s1"));
        gone.sort();
        assert_eq!(gone, ["s1p0", "s1p1"]);
        assert_eq!(s.cancel(job).as_deref(), Some("job"));
        assert_eq!(s.cancel(job), None, "already gone");
        let d = s.next(0).unwrap();
        assert_eq!(d.tag, "s2p0");
        assert_eq!(s.cancel(d.ticket), None, "in flight: not cancellable");
        assert_eq!(s.cancel_bulk(|_| true), Vec::<String>::new());
        s.complete(d.ticket, 0).unwrap();
        assert_eq!(serve_order(&mut s, 0), ["s2p1"]);
        assert_eq!(s.stats().cancelled, 3);
        assert!(s.is_idle());
    }

    #[test]
    fn completions_count_bytes_requests_and_missed_deadlines() {
        let mut s = Scheduler::new(config(3, 3, MIB, MIB));
        s.push_rt("late", 1000, 100);
        s.push_rt("on time", 2000, 500);
        s.push_bulk("bulk", 3000);
        let d: Vec<_> = std::iter::from_fn(|| s.next(0)).collect();
        assert_eq!(d.len(), 3);
        let by_tag = |tag| d.iter().find(|d| d.tag == tag).unwrap().ticket;
        let late = s.complete(by_tag("late"), 101).unwrap();
        assert!(late.missed_deadline);
        assert_eq!((late.bytes, late.service_ns), (1000, 101));
        assert!(!s.complete(by_tag("on time"), 500).unwrap().missed_deadline);
        let bulk = s.complete(by_tag("bulk"), 900).unwrap();
        assert_eq!((bulk.class, bulk.missed_deadline), (Class::Bulk, false));
        assert_eq!(s.complete(by_tag("bulk"), 900), None, "completed twice");
        let expected = Stats {
            rt_requests: 2,
            rt_bytes: 3000,
            bulk_requests: 1,
            bulk_bytes: 3000,
            missed_deadlines: 1,
            urgent_dispatches: 2, // deadlines within 50 ms of 0
            cancelled: 0,
        };
        assert_eq!(s.stats(), expected);
    }

    #[test]
    fn estimates_follow_the_disk() {
        let mut s = Scheduler::new(config(4, 3, 9 * MIB, MIB));
        assert_eq!(s.estimated_bandwidth(), None);
        let mut disk = FakeDisk::new(200_000_000);
        simulate(&mut s, &mut disk, 2 * S, |s, now| {
            while s.queued_rt() < 4 {
                s.push_rt((), MIB, now + S);
            }
        });
        let bw = s.estimated_bandwidth().unwrap();
        assert!((bw / 200e6 - 1.0).abs() < 0.01, "bandwidth {bw}");
        // Just after a completion: three queued, three in flight, 1 MiB each.
        assert_eq!((s.queued_rt(), s.in_flight()), (3, 3));
        let delay = s.queue_delay_estimate().unwrap() as f64;
        let expected = (6 * MIB) as f64 / 200e6 * 1e9;
        assert!((delay / expected - 1.0).abs() < 0.01, "delay {delay}");
        // Each request waits behind three others on the serial disk.
        let service = s.service_time_estimate().unwrap() as f64;
        let expected = 4.0 * MIB as f64 / 200e6 * 1e9;
        assert!((service / expected - 1.0).abs() < 0.02, "service {service}");
    }

    #[test]
    fn queue_delay_counts_bulks_share_beside_queued_rt() {
        let mut s = Scheduler::new(config(1, 1, 4 * MIB, MIB));
        s.push_rt((), MIB, 0);
        let d = s.next(0).unwrap();
        s.complete(d.ticket, 10 * MS).unwrap(); // 1 MiB in 10 ms
        s.push_rt((), 8 * MIB, 10 * S);
        s.push_bulk((), 100 * MIB);
        // 8 MiB of RT and a quarter of it for bulk: 10 MiB, 100 ms.
        assert_eq!(s.queue_delay_estimate(), Some(100 * MS));
    }

    #[test]
    fn requests_far_above_the_quanta_alternate() {
        let mut s = Scheduler::new(config(1, 1, 1, 1));
        for i in 0..3 {
            s.push_rt(("rt", i), 1 << 40, 100 * S);
            s.push_bulk(("bulk", i), 1 << 40);
        }
        let order: Vec<_> = serve_order(&mut s, 0).into_iter().map(|t| t.0).collect();
        // RT holds the first turn; then one request per turn each.
        assert_eq!(order, ["rt", "bulk", "rt", "bulk", "rt", "bulk"]);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Rt { bytes: u64, slack_ms: u64 },
            Bulk { bytes: u64 },
            Next,
            Complete(usize),
            Advance(u64),
            Cancel(usize),
            CancelRt(u64),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (0..4 * MIB, 0..200u64).prop_map(|(bytes, slack_ms)| Op::Rt { bytes, slack_ms }),
                2 => (0..8 * MIB).prop_map(|bytes| Op::Bulk { bytes }),
                4 => Just(Op::Next),
                3 => any::<usize>().prop_map(Op::Complete),
                1 => (0..100 * MS).prop_map(Op::Advance),
                1 => any::<usize>().prop_map(Op::Cancel),
                1 => (0..3u64).prop_map(Op::CancelRt),
            ]
        }

        fn scheduler_config() -> impl Strategy<Value = Config> {
            (1..6usize, 1..6usize, 1..4 * MIB, 1..4 * MIB, 0..100 * MS).prop_map(
                |(depth, bulk, rt_quantum, bulk_quantum, urgent_ns)| Config {
                    depth,
                    bulk_depth: bulk.min(depth),
                    rt_quantum,
                    bulk_quantum,
                    urgent_ns,
                },
            )
        }

        #[derive(Clone, Copy, Debug, PartialEq)]
        enum State {
            Queued,
            InFlight,
            Done,
            Cancelled,
        }

        /// What the test knows of every pushed request; the tag is its index.
        struct Model {
            s: Scheduler<usize>,
            tickets: Vec<Ticket>,
            state: Vec<State>,
            deadline: Vec<Option<u64>>,
            now: u64,
        }

        impl Model {
            fn count(&self, pred: impl Fn(usize) -> bool) -> usize {
                (0..self.state.len()).filter(|&i| pred(i)).count()
            }

            fn queued(&self, rt: bool) -> usize {
                self.count(|i| self.state[i] == State::Queued && self.deadline[i].is_some() == rt)
            }

            fn next(&mut self) -> Result<(), TestCaseError> {
                let (rt_queued, bulk_queued) = (self.queued(true), self.queued(false));
                let bulk_in_flight =
                    self.count(|i| self.state[i] == State::InFlight && self.deadline[i].is_none());
                let Some(d) = self.s.next(self.now) else {
                    // Work-conserving: idle only when full or nothing may start.
                    let c = self.s.config();
                    let full = self.s.in_flight() == c.depth;
                    let bulk_blocked = bulk_queued == 0 || bulk_in_flight == c.bulk_depth;
                    prop_assert!(full || (rt_queued == 0 && bulk_blocked));
                    return Ok(());
                };
                prop_assert_eq!(self.tickets[d.tag], d.ticket);
                prop_assert_eq!(self.state[d.tag], State::Queued, "dispatched twice");
                if let Class::Rt { deadline_ns } = d.class {
                    let earliest = (0..self.state.len())
                        .filter(|&i| self.state[i] == State::Queued)
                        .filter_map(|i| self.deadline[i])
                        .min();
                    prop_assert_eq!(Some(deadline_ns), earliest, "not EDF");
                }
                self.state[d.tag] = State::InFlight;
                let c = *self.s.config();
                prop_assert!(self.s.in_flight() <= c.depth);
                prop_assert!(
                    self.count(|i| self.state[i] == State::InFlight && self.deadline[i].is_none())
                        <= c.bulk_depth
                );
                Ok(())
            }

            fn complete(&mut self, pick: usize) -> Result<(), TestCaseError> {
                let flying: Vec<usize> = (0..self.state.len())
                    .filter(|&i| self.state[i] == State::InFlight)
                    .collect();
                if flying.is_empty() {
                    return Ok(());
                }
                let i = flying[pick % flying.len()];
                prop_assert!(self.s.complete(self.tickets[i], self.now).is_some());
                prop_assert!(self.s.complete(self.tickets[i], self.now).is_none());
                self.state[i] = State::Done;
                Ok(())
            }
        }

        proptest! {
            #[test]
            fn no_request_lost_or_served_twice_and_depth_kept(
                config in scheduler_config(),
                ops in proptest::collection::vec(op(), 0..300),
            ) {
                let mut m = Model {
                    s: Scheduler::new(config),
                    tickets: Vec::new(),
                    state: Vec::new(),
                    deadline: Vec::new(),
                    now: 0,
                };
                for op in ops {
                    match op {
                        Op::Rt { bytes, slack_ms } => {
                            let deadline = m.now + slack_ms * MS;
                            m.tickets.push(m.s.push_rt(m.state.len(), bytes, deadline));
                            m.deadline.push(Some(deadline));
                            m.state.push(State::Queued);
                        }
                        Op::Bulk { bytes } => {
                            m.tickets.push(m.s.push_bulk(m.state.len(), bytes));
                            m.deadline.push(None);
                            m.state.push(State::Queued);
                        }
                        Op::Next => m.next()?,
                        Op::Complete(pick) => m.complete(pick)?,
                        Op::Advance(ns) => m.now += ns,
                        Op::Cancel(pick) if !m.state.is_empty() => {
                            let i = pick % m.state.len();
                            let got = m.s.cancel(m.tickets[i]);
                            let queued = m.state[i] == State::Queued;
                            prop_assert_eq!(got, queued.then_some(i));
                            if queued {
                                m.state[i] = State::Cancelled;
                            }
                        }
                        Op::Cancel(_) => {}
                        Op::CancelRt(r) => {
                            let mut gone = m.s.cancel_rt(|&t| t as u64 % 3 == r);
                            gone.sort();
                            let expected: Vec<usize> = (0..m.state.len())
                                .filter(|&i| m.state[i] == State::Queued && m.deadline[i].is_some())
                                .filter(|&i| i as u64 % 3 == r)
                                .collect();
                            prop_assert_eq!(&gone, &expected);
                            for i in gone {
                                m.state[i] = State::Cancelled;
                            }
                        }
                    }
                }
                // Drain: everything queued is eventually served exactly once.
                while !m.s.is_idle() {
                    let before = m.s.in_flight();
                    m.next()?;
                    if m.s.in_flight() == before {
                        m.complete(0)?;
                    }
                    m.now += MS;
                }
                prop_assert!(m.state.iter().all(|s| matches!(s, State::Done | State::Cancelled)));
                let st = m.s.stats();
                let done = m.count(|i| m.state[i] == State::Done) as u64;
                prop_assert_eq!(st.rt_requests + st.bulk_requests, done);
                prop_assert_eq!(st.cancelled, m.count(|i| m.state[i] == State::Cancelled) as u64);
            }
        }
    }
}

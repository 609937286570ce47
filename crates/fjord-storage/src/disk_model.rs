//! What a disk has been doing lately (sans-IO): each finished refill's time
//! in the queue and at the disk, and its bytes, in; the worst recent
//! latency, the mean queue delay and service time, and the bandwidth read,
//! out. Nothing here reads a clock: times are passed in, nanoseconds.
//!
//! Observations are kept in time buckets over a sliding window, so memory
//! is bounded (a bucket per eighth of the window) whatever the read rate,
//! and an old slowness is forgotten once it leaves the window.

use std::collections::VecDeque;
use std::time::Duration;

/// Buckets per window: an observation is forgotten between one window
/// and one window plus a bucket after it was made.
const BUCKETS: u64 = 8;

/// One finished read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    /// When it finished.
    pub at_ns: u64,
    /// From being queued to a worker taking it.
    pub queued_ns: u64,
    /// From being taken to being resident.
    pub service_ns: u64,
    pub bytes: u64,
}

/// What the window says about the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    /// The longest any read took, queue included; `None`: no read in the
    /// window.
    pub worst_latency: Option<Duration>,
    pub mean_queue: Duration,
    pub mean_service: Duration,
    /// Bytes per second the reads of the window covered.
    pub bytes_per_s: u64,
    pub reads: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    start_ns: u64,
    worst_ns: u64,
    reads: u64,
    bytes: u64,
    queued_ns: u64,
    service_ns: u64,
}

#[derive(Debug)]
pub struct DiskModel {
    window_ns: u64,
    buckets: VecDeque<Bucket>,
}

impl DiskModel {
    pub fn new(window: Duration) -> Self {
        Self {
            window_ns: (window.as_nanos() as u64).max(BUCKETS),
            buckets: VecDeque::new(),
        }
    }

    fn width(&self) -> u64 {
        self.window_ns / BUCKETS
    }

    pub fn observe(&mut self, o: Observation) {
        self.expire(o.at_ns);
        let start = o.at_ns - o.at_ns % self.width();
        if self.buckets.back().is_none_or(|b| b.start_ns < start) {
            self.buckets.push_back(Bucket {
                start_ns: start,
                ..Default::default()
            });
        }
        // An observation older than the newest bucket (reads finish out of
        // order on several workers) joins the newest: a bucket late at most.
        let Some(b) = self.buckets.back_mut() else {
            return;
        };
        let latency = o.queued_ns.saturating_add(o.service_ns);
        b.worst_ns = b.worst_ns.max(latency);
        b.reads += 1;
        b.bytes = b.bytes.saturating_add(o.bytes);
        b.queued_ns = b.queued_ns.saturating_add(o.queued_ns);
        b.service_ns = b.service_ns.saturating_add(o.service_ns);
    }

    /// Drops buckets wholly older than the window before `now_ns`.
    fn expire(&mut self, now_ns: u64) {
        let width = self.width();
        while self
            .buckets
            .front()
            .is_some_and(|b| b.start_ns + width + self.window_ns <= now_ns)
        {
            self.buckets.pop_front();
        }
    }

    pub fn estimate(&self, now_ns: u64) -> Estimate {
        let width = self.width();
        let live = || {
            self.buckets
                .iter()
                .filter(move |b| b.start_ns + width + self.window_ns > now_ns)
        };
        let mut total = Bucket::default();
        let mut first = None;
        for b in live() {
            first.get_or_insert(b.start_ns);
            total.worst_ns = total.worst_ns.max(b.worst_ns);
            total.reads += b.reads;
            total.bytes = total.bytes.saturating_add(b.bytes);
            total.queued_ns = total.queued_ns.saturating_add(b.queued_ns);
            total.service_ns = total.service_ns.saturating_add(b.service_ns);
        }
        let Some(first) = first else {
            return Estimate::default();
        };
        let span = now_ns
            .saturating_sub(first)
            .clamp(width, self.window_ns + width);
        let n = total.reads.max(1);
        Estimate {
            worst_latency: Some(Duration::from_nanos(total.worst_ns)),
            mean_queue: Duration::from_nanos(total.queued_ns / n),
            mean_service: Duration::from_nanos(total.service_ns / n),
            bytes_per_s: (u128::from(total.bytes) * 1_000_000_000 / u128::from(span)) as u64,
            reads: total.reads,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    fn read(at_ms: u64, queued_ms: u64, service_ms: u64) -> Observation {
        Observation {
            at_ns: at_ms * MS,
            queued_ns: queued_ms * MS,
            service_ns: service_ms * MS,
            bytes: 1 << 20,
        }
    }

    #[test]
    fn a_slow_read_counts_for_a_window_then_is_forgotten() {
        let mut m = DiskModel::new(Duration::from_secs(8));
        assert_eq!(m.estimate(0).worst_latency, None, "nothing seen yet");
        m.observe(read(1_000, 10, 20));
        m.observe(read(1_500, 300, 200));
        m.observe(read(2_000, 5, 15));
        let e = m.estimate(2_000 * MS);
        assert_eq!(e.worst_latency, Some(Duration::from_millis(500)));
        assert_eq!(e.reads, 3);
        assert_eq!(e.mean_queue, Duration::from_nanos(315 * MS / 3));
        assert_eq!(e.mean_service, Duration::from_nanos(235 * MS / 3));
        // Fast reads since; the slow ones are over 9 s old: gone.
        for t in (3_000..11_100).step_by(100) {
            m.observe(read(t, 1, 9));
        }
        let e = m.estimate(11_100 * MS);
        assert_eq!(e.worst_latency, Some(Duration::from_millis(10)));
        // And with no read for a window, nothing is known.
        assert_eq!(m.estimate(30_000 * MS), Estimate::default());
    }

    #[test]
    fn bandwidth_is_bytes_over_the_time_seen() {
        let mut m = DiskModel::new(Duration::from_secs(8));
        // 10 MiB a second for 20 s.
        for t in (0..20_000).step_by(100) {
            m.observe(read(t, 0, 1));
        }
        let bps = m.estimate(20_000 * MS).bytes_per_s;
        let want = 10 << 20;
        assert!(bps.abs_diff(want) < want / 10, "{bps} vs {want}");
    }

    proptest! {
        /// The worst latency is that of the observations in the window, up
        /// to a bucket's slack at its old end; memory stays bounded.
        #[test]
        fn the_worst_is_the_window_s_worst(
            reads in prop::collection::vec((0u64..500, 0u64..2_000, 0u64..2_000), 1..300),
            window_s in 1u64..20,
        ) {
            let mut m = DiskModel::new(Duration::from_secs(window_s));
            let mut at = 0;
            let mut seen = Vec::new();
            for (gap, q, s) in reads {
                at += gap;
                m.observe(read(at, q, s));
                seen.push((at, q + s));
            }
            let window = window_s * 1000;
            let width = window / BUCKETS;
            let now = at;
            let worst = m.estimate(now * MS).worst_latency.unwrap().as_millis() as u64;
            let surely = seen.iter().filter(|(t, _)| t + window > now).map(|&(_, l)| l).max();
            let maybe = seen.iter().filter(|(t, _)| t + window + 2 * width > now).map(|&(_, l)| l).max();
            prop_assert!(worst >= surely.unwrap_or(0));
            prop_assert!(worst <= maybe.unwrap());
            prop_assert!(m.buckets.len() as u64 <= BUCKETS + 2);
        }
    }
}

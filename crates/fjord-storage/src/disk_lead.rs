//! One disk's lead as its workers use it: the disk's model fed with every
//! finished refill, and the `low` it gives the disk's sessions now (see
//! [`crate::lead`]), kept in an atomic so that planning and admission read
//! it without a lock.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use crate::{
    disk_model::{DiskModel, Estimate, Observation},
    lead::{self, LeadConfig},
};

/// How long a slow read keeps the lead up: long enough to see a slow
/// spell's worst, short enough to give the memory back soon after.
pub const WINDOW: Duration = Duration::from_secs(10);

pub(crate) struct DiskLead {
    cfg: LeadConfig,
    model: Mutex<DiskModel>,
    low_ns: AtomicU64,
    /// The worst latency of the window, for the workers' hand-off.
    worst_ns: AtomicU64,
    epoch: Instant,
}

impl DiskLead {
    pub fn new(cfg: LeadConfig, epoch: Instant) -> Self {
        Self {
            cfg,
            model: Mutex::new(DiskModel::new(WINDOW)),
            low_ns: AtomicU64::new(cfg.floor.as_nanos() as u64),
            worst_ns: AtomicU64::new(0),
            epoch,
        }
    }

    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn model(&self) -> std::sync::MutexGuard<'_, DiskModel> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A refill queued at `asked`, taken by a worker at `taken`, resident
    /// at `done`, of `bytes`.
    pub fn observe(
        &self,
        asked: Instant,
        taken: Instant,
        done: Instant,
        bytes: u64,
        cap: Duration,
    ) {
        let mut m = self.model();
        m.observe(Observation {
            at_ns: self.ns(done),
            queued_ns: taken.saturating_duration_since(asked).as_nanos() as u64,
            service_ns: done.saturating_duration_since(taken).as_nanos() as u64,
            bytes,
        });
        self.set_low(&m, done, cap);
    }

    /// Recomputes `low` at `now` (a slow read leaving the window lowers
    /// it; the memory cap moved).
    pub fn refresh(&self, now: Instant, cap: Duration) {
        let m = self.model();
        self.set_low(&m, now, cap);
    }

    fn set_low(&self, m: &DiskModel, now: Instant, cap: Duration) {
        let worst = m.estimate(self.ns(now)).worst_latency;
        let low = lead::low(&self.cfg, worst, cap);
        self.low_ns.store(low.as_nanos() as u64, Relaxed);
        let worst = worst.unwrap_or_default().as_nanos();
        self.worst_ns
            .store(u64::try_from(worst).unwrap_or(u64::MAX), Relaxed);
    }

    /// The disk's worst latency in the window (zero before any read).
    pub fn worst(&self) -> Duration {
        Duration::from_nanos(self.worst_ns.load(Relaxed))
    }

    pub fn low(&self) -> Duration {
        Duration::from_nanos(self.low_ns.load(Relaxed))
    }

    /// The lead of a session moving through `bytes_per_s` of its files.
    pub fn lead(&self, bytes_per_s: u64) -> lead::Lead {
        lead::lead(&self.cfg, self.low(), bytes_per_s)
    }

    pub fn estimate(&self, now: Instant) -> Estimate {
        self.model().estimate(self.ns(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_grows_when_reads_slow_and_shrinks_after() {
        let cfg = LeadConfig::default();
        let t0 = Instant::now();
        let d = DiskLead::new(cfg, t0);
        let ms = Duration::from_millis;
        assert_eq!(d.low(), cfg.floor, "nothing measured: the floor");
        let read = |at: Duration, queued: u64, service: u64| {
            let done = t0 + at;
            let taken = done - ms(service);
            d.observe(taken - ms(queued), taken, done, 1 << 19, Duration::MAX);
        };
        read(ms(1000), 5, 10);
        assert_eq!(d.low(), cfg.floor, "fast reads: the floor");
        read(ms(2000), 400, 800);
        assert_eq!(d.low(), ms(2400), "twice the slow read");
        assert_eq!(d.lead(562_500).high.as_millis(), 2400 + 1864);
        // The budget caps it.
        d.refresh(t0 + ms(2100), ms(1000));
        assert_eq!(d.low(), ms(1000));
        // Fast reads for a window after: back to the floor.
        for s in 3..14 {
            read(ms(s * 1000), 5, 10);
        }
        assert_eq!(d.low(), cfg.floor);
        let e = d.estimate(t0 + ms(13_000));
        assert_eq!(e.worst_latency, Some(ms(15)));
    }
}

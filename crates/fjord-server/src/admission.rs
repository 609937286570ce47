//! Admission control, the seeds' QoS guarantee: a stream is admitted only
//! when the engine thread that will send it can still meet every deadline.
//! Each thread has a budget in packets per second (what one core sustains,
//! measured by `fjord bench capacity` or configured); a SETUP that would
//! exceed it gets 453 Not Enough Bandwidth, so admitted streams stay on time.
//!
//! Plain counts, no lock or atomic inside: the server keeps them in the
//! session table ([`crate::session::Sessions`]) of the control core, under
//! its one lock, beside the streams whose reservations they add up.

pub struct Admission {
    /// Packets per second one engine thread may promise; `None`: no limit.
    capacity: Option<u64>,
    load: Vec<u64>,
}

/// One thread, no limit (tests).
impl Default for Admission {
    fn default() -> Self {
        Self::new(1, None)
    }
}

/// Packets per second promised on one engine thread.
#[derive(Debug)]
pub struct Reservation {
    pub thread: usize,
    pps: u64,
    /// The stream's rate in real time; `pps` is more while it is delivered
    /// faster (RFC 2326 `Speed`).
    base: u64,
}

impl Admission {
    pub fn new(threads: usize, capacity: Option<u64>) -> Self {
        Self {
            capacity,
            load: vec![0; threads.max(1)],
        }
    }

    pub fn threads(&self) -> usize {
        self.load.len()
    }

    pub fn capacity(&self) -> Option<u64> {
        self.capacity
    }

    /// Packets per second promised on each thread now.
    pub fn loads(&self) -> Vec<u64> {
        self.load.clone()
    }

    /// Reserves `pps` on `thread`, or on the least loaded thread when any
    /// will do; `None` when that would exceed the capacity.
    pub fn reserve(&mut self, thread: Option<usize>, pps: u64) -> Option<Reservation> {
        let thread = thread.map(|t| t % self.load.len()).unwrap_or_else(|| {
            (0..self.load.len())
                .min_by_key(|&t| self.load[t])
                .unwrap_or(0)
        });
        let next = self.load[thread].checked_add(pps)?;
        if self.capacity.is_some_and(|cap| next > cap) {
            return None;
        }
        self.load[thread] = next;
        Some(Reservation {
            thread,
            pps,
            base: pps,
        })
    }

    /// Resizes `r` for delivery at `speed` millionths of real time, on
    /// its thread; false (and `r` unchanged) when that would exceed the
    /// capacity.
    pub fn resize(&mut self, r: &mut Reservation, speed: u32) -> bool {
        let want = (r.base * u64::from(speed)).div_ceil(u64::from(fjord_engine::REAL_TIME));
        if want > r.pps {
            let Some(more) = self.reserve(Some(r.thread), want - r.pps) else {
                return false;
            };
            r.pps += more.pps;
        } else {
            self.load[r.thread] -= r.pps - want;
            r.pps = want;
        }
        true
    }

    pub fn release(&mut self, r: &Reservation) {
        self.load[r.thread] = self.load[r.thread].saturating_sub(r.pps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_capacity_and_come_back_on_release() {
        let mut a = Admission::new(2, Some(1000));
        let r1 = a.reserve(None, 600).unwrap();
        let r2 = a.reserve(None, 600).unwrap();
        assert_ne!(r1.thread, r2.thread, "spread over the least loaded thread");
        assert!(
            a.reserve(None, 600).is_none(),
            "both threads would exceed 1000 pps"
        );
        assert!(
            a.reserve(Some(r1.thread), 400).is_some(),
            "exactly at capacity is fine"
        );
        assert!(a.reserve(Some(r1.thread), 1).is_none());
        a.release(&r2);
        assert!(a.reserve(None, 600).is_some());
    }

    #[test]
    fn a_faster_delivery_reserves_more_on_its_thread_and_gives_it_back() {
        let mut a = Admission::new(1, Some(1000));
        let mut r = a.reserve(None, 300).unwrap();
        let x = fjord_engine::REAL_TIME;
        assert!(a.resize(&mut r, 3 * x), "900 pps");
        assert!(!a.resize(&mut r, 4 * x), "1200 pps would exceed 1000");
        assert!(a.reserve(None, 101).is_none(), "still 900 held");
        assert!(a.resize(&mut r, x));
        assert!(a.reserve(None, 700).is_some(), "back to 300");
    }

    #[test]
    fn without_a_capacity_everything_is_admitted() {
        let mut a = Admission::new(1, None);
        for _ in 0..100 {
            assert!(a.reserve(None, u32::MAX as u64).is_some());
        }
    }
}

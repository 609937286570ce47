//! A playing session's clock: which stream time is due when. Stream time
//! `origin_ns` is due at `t0`, and stream time runs at `speed` millionths
//! of wall time (RFC 2326 `Speed`: 1,000,000 is real time, 2,000,000 twice
//! as fast; a broadcast channel's slow rates need the fine grain).

use std::time::{Duration, Instant};

/// Real time, in the millionths [`Clock::speed`] counts (the storage layer
/// counts how fast a session moves through its title in the same unit).
pub const REAL_TIME: u32 = fjord_storage::REAL_TIME;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Clock {
    pub t0: Instant,
    pub origin_ns: u64,
    pub speed: u32,
}

impl Clock {
    /// Wall time for `ns` of stream time.
    #[inline]
    pub fn wall(&self, ns: u64) -> Duration {
        if self.speed == REAL_TIME {
            return Duration::from_nanos(ns);
        }
        let wall = u128::from(ns) * u128::from(REAL_TIME) / u128::from(self.speed.max(1));
        Duration::from_nanos(u64::try_from(wall).unwrap_or(u64::MAX))
    }

    /// Stream time for `d` of wall time.
    #[inline]
    fn stream(&self, d: Duration) -> u64 {
        let ns = d.as_nanos();
        let ns = if self.speed == REAL_TIME {
            ns
        } else {
            ns * u128::from(self.speed) / u128::from(REAL_TIME)
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// When stream time `ns` is due.
    pub fn due(&self, ns: u64) -> Instant {
        self.t0 + self.wall(ns.saturating_sub(self.origin_ns))
    }

    /// The latest stream time due by `horizon` (a packet is due by it iff
    /// its time is at most this), or `None` when nothing is: computed once
    /// per burst instead of a `due` per packet.
    pub fn due_by(&self, horizon: Instant) -> Option<u64> {
        let ahead = horizon.checked_duration_since(self.t0)?;
        Some(self.origin_ns.saturating_add(self.stream(ahead)))
    }

    /// Where stream time stands at `now`.
    pub fn at(&self, now: Instant) -> u64 {
        self.origin_ns + self.stream(now.saturating_duration_since(self.t0))
    }

    /// How late stream time `ns` is when the clock stands at `now_ns`
    /// ([`Clock::at`], taken once for a burst of packets). Times before the
    /// origin are due at `t0` ([`Clock::due`]), as the packets of a seek's
    /// key frame sent ahead of its time are: late only by what passed since.
    #[inline]
    pub fn lateness(&self, ns: u64, now_ns: u64) -> Duration {
        self.wall(now_ns.saturating_sub(ns.max(self.origin_ns)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn stream_time_runs_at_its_speed() {
        let t0 = Instant::now();
        for (speed, wall_ms) in [(REAL_TIME, 100), (2 * REAL_TIME, 50), (REAL_TIME / 2, 200)] {
            let c = Clock {
                t0,
                origin_ns: 1_000 * MS,
                speed,
            };
            assert_eq!(c.due(1_100 * MS), t0 + Duration::from_millis(wall_ms));
            let at = t0 + Duration::from_millis(wall_ms);
            assert_eq!(c.at(at), 1_100 * MS);
            assert_eq!(c.due_by(at), Some(1_100 * MS));
            assert_eq!(c.due(900 * MS), t0, "before the origin: due at once");
            assert_eq!(
                c.lateness(900 * MS, c.at(t0 + Duration::from_millis(1))),
                Duration::from_millis(1),
                "and late by what passed since t0"
            );
            let later = c.at(at + Duration::from_millis(3));
            assert_eq!(c.lateness(1_100 * MS, later), Duration::from_millis(3));
        }
        let c = Clock {
            t0,
            origin_ns: 0,
            speed: REAL_TIME,
        };
        assert_eq!(c.due_by(t0 - Duration::from_millis(1)), None);
        // A broadcast channel's 1/35 of real time keeps its rate to 2e-5.
        let slow = Clock {
            t0,
            origin_ns: 0,
            speed: REAL_TIME / 35,
        };
        let wall = slow.wall(1_000 * MS).as_secs_f64();
        assert!((wall / 35.0 - 1.0).abs() < 2e-5, "{wall}");
    }
}

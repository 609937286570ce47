//! CPU time of the calling thread, split into user and system time: what
//! one engine thread spends.
//!
//! The total comes from `CLOCK_THREAD_CPUTIME_ID` (nanoseconds, exact); the
//! split from `getrusage(RUSAGE_THREAD)`, whose user/system attribution is
//! sampled at the scheduler tick, so the split of a short run is rough
//! while its total is not.

use std::{mem, time::Duration};

/// User and system CPU time; `user + sys` is the exact thread CPU time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCpu {
    pub user: Duration,
    pub sys: Duration,
    /// Exact CPU time (clock), `user + sys` after [`ThreadCpu::since`].
    clock: Duration,
}

impl ThreadCpu {
    /// Now, for the calling thread.
    pub fn now() -> Self {
        // SAFETY: all-zero is a valid rusage; getrusage fills it.
        let mut ru: libc::rusage = unsafe { mem::zeroed() };
        // SAFETY: a valid pointer to a rusage.
        let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        assert_eq!(r, 0, "getrusage(RUSAGE_THREAD)");
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec pointer.
        let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Self {
            user: tv(ru.ru_utime),
            sys: tv(ru.ru_stime),
            clock: Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
        }
    }

    /// What was spent since `earlier`: the exact total, split in the
    /// proportion getrusage saw (all system time when it saw nothing).
    pub fn since(self, earlier: Self) -> Self {
        let total = self.clock.saturating_sub(earlier.clock);
        let u = self.user.saturating_sub(earlier.user).as_nanos() as f64;
        let s = self.sys.saturating_sub(earlier.sys).as_nanos() as f64;
        let user = if u + s > 0.0 {
            total.mul_f64(u / (u + s))
        } else {
            Duration::ZERO
        };
        Self {
            user,
            sys: total.saturating_sub(user),
            clock: total,
        }
    }

    pub fn total(self) -> Duration {
        self.user + self.sys
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_loop_shows_up_as_user_time() {
        let start = ThreadCpu::now();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        // Spin until the thread's CPU clock has moved (other tests share the
        // cores, so wall time says little).
        while ThreadCpu::now().since(start).total() < Duration::from_millis(20) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "CPU time never moved"
            );
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
        }
        let spent = ThreadCpu::now().since(start);
        assert!(spent.user > Duration::ZERO, "{spent:?}");
    }
}

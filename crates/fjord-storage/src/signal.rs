//! Wakes a disk's workers without a lock: an event count on a futex word.
//!
//! A worker reads the count, looks for work, and sleeps only if the count
//! has not moved since; whoever makes work bumps the count and wakes one
//! sleeper. No wake-up is lost between a worker's look and its sleep, so a
//! worker needs no timeout for work it was not woken for (with timeouts as
//! a safety net, one session cost its disk's workers nine wake-ups a
//! second). Written by hand because std's `Condvar` is race-free only for
//! a waker that holds the waiter's mutex, and the engine must not take a
//! lock a storage worker may hold (see `Disk::added`); this is the kernel's
//! own primitive, a few lines.

use std::{
    sync::atomic::{AtomicU32, Ordering::SeqCst},
    time::Duration,
};

#[derive(Default)]
pub(crate) struct Signal {
    count: AtomicU32,
}

impl Signal {
    /// The count to pass to [`Signal::wait`]: read before looking for work.
    pub(crate) fn seen(&self) -> u32 {
        self.count.load(SeqCst)
    }

    /// There is work: one sleeping worker wakes (or the next to look sees
    /// the count moved and does not sleep).
    pub(crate) fn notify_one(&self) {
        self.count.fetch_add(1, SeqCst);
        self.futex(libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1, None);
    }

    /// Sleeps unless the count moved since `seen`, until woken or for at
    /// most `timeout` (none: until woken). Returns early on a signal or a
    /// spurious wake-up: the caller looks again.
    pub(crate) fn wait(&self, seen: u32, timeout: Option<Duration>) {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        self.futex(
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            ts.as_ref(),
        );
    }

    fn futex(&self, op: libc::c_int, val: u32, timeout: Option<&libc::timespec>) {
        let ts = timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: the address is a live, aligned u32 owned by `self`; the
        // timeout, when given, points at a live timespec. FUTEX_WAIT only
        // sleeps while the word equals `val`; FUTEX_WAKE touches no memory.
        unsafe {
            libc::syscall(libc::SYS_futex, self.count.as_ptr(), op, val, ts);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, Instant},
    };

    use super::Signal;

    #[test]
    fn a_wait_after_a_notify_returns_at_once() {
        let s = Signal::default();
        let seen = s.seen();
        s.notify_one();
        let t = Instant::now();
        s.wait(seen, Some(Duration::from_secs(5)));
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "not lost: {:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_wait_times_out_without_a_notify() {
        let s = Signal::default();
        let t = Instant::now();
        s.wait(s.seen(), Some(Duration::from_millis(50)));
        assert!(t.elapsed() >= Duration::from_millis(45));
    }

    #[test]
    fn a_sleeper_is_woken_before_its_timeout() {
        let s = Arc::new(Signal::default());
        let seen = s.seen();
        let waiter = {
            let s = s.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                s.wait(seen, Some(Duration::from_secs(10)));
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        s.notify_one();
        let slept = waiter.join().unwrap();
        assert!(slept < Duration::from_secs(5));
    }
}

//! Failed-attempt rate limiting per client address, sans-IO: the caller
//! passes the time as milliseconds of any monotonic clock.

use std::{collections::HashMap, net::IpAddr};

/// Failures that lock an address out when they fall within [`WINDOW_MS`]
/// of the first failure counted (a fixed window, started anew by the
/// first failure after it ends).
pub const MAX_FAILURES: u32 = 5;
/// The span [`MAX_FAILURES`] are counted over.
pub const WINDOW_MS: u64 = 60_000;
/// How long a locked-out address is refused, from its last failure.
pub const LOCKOUT_MS: u64 = 60_000;
/// Addresses tracked at most; past it the one whose last failure is the
/// oldest is forgotten, so memory stays bounded under a spray of addresses.
pub const MAX_TRACKED: usize = 4096;

/// Counts failed attempts per address and refuses an address that failed
/// [`MAX_FAILURES`] times within [`WINDOW_MS`] for [`LOCKOUT_MS`].
/// IPv4-mapped IPv6 addresses count as their IPv4 address.
#[derive(Debug, Default)]
pub struct Throttle {
    entries: HashMap<IpAddr, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// When the counted window began.
    first_ms: u64,
    last_ms: u64,
    failures: u32,
    /// Refused until then (0: not locked).
    locked_until_ms: u64,
}

impl Entry {
    fn new(now_ms: u64) -> Entry {
        Entry {
            first_ms: now_ms,
            last_ms: now_ms,
            failures: 0,
            locked_until_ms: 0,
        }
    }

    /// Neither locked nor counting any more.
    fn spent(&self, now_ms: u64) -> bool {
        now_ms >= self.locked_until_ms && now_ms.saturating_sub(self.first_ms) >= WINDOW_MS
    }
}

impl Throttle {
    pub fn new() -> Throttle {
        Throttle::default()
    }

    /// Whether to try authenticating a request from `ip` at all.
    pub fn allow(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        let ip = ip.to_canonical();
        let Some(entry) = self.entries.get(&ip) else {
            return true;
        };
        let allowed = now_ms >= entry.locked_until_ms;
        if entry.spent(now_ms) {
            self.entries.remove(&ip);
        }
        allowed
    }

    /// Records a failed attempt from `ip`.
    pub fn failed(&mut self, ip: IpAddr, now_ms: u64) {
        let ip = ip.to_canonical();
        if !self.entries.contains_key(&ip) && self.entries.len() >= MAX_TRACKED {
            self.forget_oldest();
        }
        let entry = self.entries.entry(ip).or_insert_with(|| Entry::new(now_ms));
        if entry.spent(now_ms) {
            *entry = Entry::new(now_ms);
        }
        entry.failures += 1;
        entry.last_ms = now_ms;
        if entry.failures >= MAX_FAILURES {
            entry.locked_until_ms = now_ms.saturating_add(LOCKOUT_MS);
        }
    }

    /// Addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }

    /// O(tracked), only when the table is full and a new address fails.
    fn forget_oldest(&mut self) {
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.last_ms)
            .map(|(ip, _)| *ip);
        if let Some(ip) = oldest {
            self.entries.remove(&ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn fail(t: &mut Throttle, ip: IpAddr, times: u32, now_ms: u64) {
        for _ in 0..times {
            t.failed(ip, now_ms);
        }
    }

    #[test]
    fn locks_after_max_failures_and_releases() {
        let mut t = Throttle::new();
        fail(&mut t, A, MAX_FAILURES - 1, 1_000);
        assert!(t.allow(A, 1_000));
        t.failed(A, 2_000);
        assert!(!t.allow(A, 2_000));
        assert!(!t.allow(A, 2_000 + LOCKOUT_MS - 1));
        assert!(t.allow(B, 2_000), "other addresses are not affected");
        assert!(t.allow(A, 2_000 + LOCKOUT_MS));
        assert_eq!(t.tracked(), 0, "a released address is forgotten");
        t.failed(A, 2_000 + LOCKOUT_MS);
        assert!(t.allow(A, 2_000 + LOCKOUT_MS), "counting starts over");
    }

    #[test]
    fn failures_spread_over_more_than_the_window_do_not_lock() {
        let mut t = Throttle::new();
        for i in 0..u64::from(MAX_FAILURES) * 3 {
            t.failed(A, i * WINDOW_MS / 4);
            assert!(t.allow(A, i * WINDOW_MS / 4), "failure {i}");
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_is_the_ipv4_address() {
        let mut t = Throttle::new();
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        fail(&mut t, mapped, MAX_FAILURES, 0);
        assert!(!t.allow(A, 1));
        assert!(t.allow(IpAddr::V6(Ipv6Addr::LOCALHOST), 1));
        assert_eq!(t.tracked(), 1);
    }

    #[test]
    fn table_is_bounded_and_forgets_the_oldest() {
        let mut t = Throttle::new();
        fail(&mut t, A, MAX_FAILURES, 0);
        for i in 0..MAX_TRACKED as u32 + 100 {
            t.failed(
                IpAddr::V6(Ipv6Addr::from(u128::from(i) + 1)),
                1 + u64::from(i),
            );
            assert!(t.tracked() <= MAX_TRACKED);
        }
        assert_eq!(t.tracked(), MAX_TRACKED);
        assert!(t.allow(A, 10), "the oldest entry was forgotten");
    }
}

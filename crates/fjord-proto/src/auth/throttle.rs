//! Failed-attempt rate limiting per client address, sans-IO: the caller
//! passes the time as milliseconds of any monotonic clock.
//!
//! A locked address is refused only what could be guessing: failing
//! attempts, and the right password of a user who failed from there (or
//! of anyone, once more than [`MAX_USERS`] users failed from there), since
//! letting it through would tell the guesser they found it. Everyone else
//! behind the address (one NAT, one office) still gets in, and anonymous
//! reads still pass.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    net::{IpAddr, Ipv6Addr},
};

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
/// Users remembered as failed per address; past it, every user is
/// refused while the address is locked (a spray over many names).
pub const MAX_USERS: usize = 4;

/// Counts failed attempts per address and locks an address that failed
/// [`MAX_FAILURES`] times within [`WINDOW_MS`] for [`LOCKOUT_MS`].
/// IPv4-mapped IPv6 addresses count as their IPv4 address; IPv6
/// addresses count per /64, what one host or site is given.
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
    /// Locked until then (0: not locked).
    locked_until_ms: u64,
    /// Hashes of the names of the users who failed in this window.
    users: Vec<u64>,
    /// More than [`MAX_USERS`] did.
    sprayed: bool,
}

impl Entry {
    fn new(now_ms: u64) -> Entry {
        Entry {
            first_ms: now_ms,
            last_ms: now_ms,
            failures: 0,
            locked_until_ms: 0,
            users: Vec::new(),
            sprayed: false,
        }
    }

    /// Neither locked nor counting any more.
    fn spent(&self, now_ms: u64) -> bool {
        now_ms >= self.locked_until_ms && now_ms.saturating_sub(self.first_ms) >= WINDOW_MS
    }

    fn note(&mut self, user: u64) {
        if self.users.contains(&user) {
            return;
        }
        match self.users.len() < MAX_USERS {
            true => self.users.push(user),
            false => self.sprayed = true,
        }
    }
}

/// The key an address is counted under.
fn key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let net = u128::from(v6) & !(u128::MAX >> 64);
            IpAddr::V6(Ipv6Addr::from(net))
        }
        v4 => v4,
    }
}

/// A user's name, shortened; a collision only refuses more.
fn user_key(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

impl Throttle {
    pub fn new() -> Throttle {
        Throttle::default()
    }

    /// Whether `ip` is locked out: its failing attempts are refused.
    pub fn locked(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        let ip = key(ip);
        let Some(entry) = self.entries.get(&ip) else {
            return false;
        };
        let locked = now_ms < entry.locked_until_ms;
        if entry.spent(now_ms) {
            self.entries.remove(&ip);
        }
        locked
    }

    /// Whether to refuse `user`'s right password from `ip`: while `ip` is
    /// locked, if that user failed from there.
    pub fn refuses(&mut self, ip: IpAddr, user: &str, now_ms: u64) -> bool {
        if !self.locked(ip, now_ms) {
            return false;
        }
        let entry = self.entries.get(&key(ip));
        entry.is_some_and(|e| e.sprayed || e.users.contains(&user_key(user)))
    }

    /// Records a failed attempt from `ip`, for `user` if it names one.
    pub fn failed(&mut self, ip: IpAddr, user: Option<&str>, now_ms: u64) {
        let ip = key(ip);
        if !self.entries.contains_key(&ip) && self.entries.len() >= MAX_TRACKED {
            self.forget_oldest();
        }
        let entry = self.entries.entry(ip).or_insert_with(|| Entry::new(now_ms));
        if entry.spent(now_ms) {
            *entry = Entry::new(now_ms);
        }
        entry.failures = entry.failures.saturating_add(1);
        entry.last_ms = now_ms;
        if let Some(user) = user {
            entry.note(user_key(user));
        }
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
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn fail(t: &mut Throttle, ip: IpAddr, times: u32, now_ms: u64) {
        for _ in 0..times {
            t.failed(ip, None, now_ms);
        }
    }

    #[test]
    fn locks_after_max_failures_and_releases() {
        let mut t = Throttle::new();
        fail(&mut t, A, MAX_FAILURES - 1, 1_000);
        assert!(!t.locked(A, 1_000));
        t.failed(A, None, 2_000);
        assert!(t.locked(A, 2_000));
        assert!(t.locked(A, 2_000 + LOCKOUT_MS - 1));
        assert!(!t.locked(B, 2_000), "other addresses are not affected");
        assert!(!t.locked(A, 2_000 + LOCKOUT_MS));
        assert_eq!(t.tracked(), 0, "a released address is forgotten");
        t.failed(A, None, 2_000 + LOCKOUT_MS);
        assert!(!t.locked(A, 2_000 + LOCKOUT_MS), "counting starts over");
    }

    #[test]
    fn a_lockout_refuses_only_the_users_who_failed() {
        let mut t = Throttle::new();
        assert!(!t.refuses(A, "alice", 0), "not locked");
        for _ in 0..MAX_FAILURES {
            t.failed(A, Some("alice"), 0);
        }
        t.failed(A, None, 0);
        assert!(t.locked(A, 1));
        assert!(t.refuses(A, "alice", 1), "alice's guesser learns nothing");
        assert!(!t.refuses(A, "bob", 1), "bob, behind the same NAT, passes");
        assert!(!t.refuses(B, "alice", 1));
        assert!(!t.refuses(A, "alice", LOCKOUT_MS), "released");
    }

    #[test]
    fn a_spray_over_many_users_refuses_all() {
        let mut t = Throttle::new();
        for i in 0..=MAX_USERS {
            t.failed(A, Some(&format!("user{i}")), 0);
        }
        assert!(t.locked(A, 1));
        assert!(t.refuses(A, "user0", 1));
        assert!(t.refuses(A, "anyone", 1));
    }

    #[test]
    fn failures_spread_over_more_than_the_window_do_not_lock() {
        let mut t = Throttle::new();
        for i in 0..u64::from(MAX_FAILURES) * 3 {
            t.failed(A, Some("alice"), i * WINDOW_MS / 4);
            assert!(!t.locked(A, i * WINDOW_MS / 4), "failure {i}");
        }
    }

    #[test]
    fn ipv4_mapped_ipv6_is_the_ipv4_address() {
        let mut t = Throttle::new();
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        fail(&mut t, mapped, MAX_FAILURES, 0);
        assert!(t.locked(A, 1));
        assert!(!t.locked(IpAddr::V6(Ipv6Addr::LOCALHOST), 1));
        assert_eq!(t.tracked(), 1);
    }

    #[test]
    fn ipv6_counts_per_64() {
        let mut t = Throttle::new();
        let host = |n: u128| IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | n));
        for i in 0..u128::from(MAX_FAILURES) {
            t.failed(host(i << 20), None, 0);
        }
        assert_eq!(t.tracked(), 1, "one /64");
        assert!(t.locked(host(u128::from(u64::MAX)), 1));
        assert!(!t.locked(host(1 << 64), 1), "the next /64");
    }

    #[test]
    fn table_is_bounded_and_forgets_the_oldest() {
        let mut t = Throttle::new();
        fail(&mut t, A, MAX_FAILURES, 0);
        for i in 0..MAX_TRACKED as u32 + 100 {
            // One per /64.
            let ip = IpAddr::V6(Ipv6Addr::from((u128::from(i) + 1) << 64));
            t.failed(ip, Some("alice"), 1 + u64::from(i));
            assert!(t.tracked() <= MAX_TRACKED);
        }
        assert_eq!(t.tracked(), MAX_TRACKED);
        assert!(!t.locked(A, 10), "the oldest entry was forgotten");
    }

    proptest! {
        /// Whatever happens, an address that never failed is never locked,
        /// and a user who never failed anywhere is refused only in a spray.
        #[test]
        fn innocents_are_not_refused(
            events in prop::collection::vec((0u8..4, prop::option::of(0u8..8), 0u64..200_000), 0..100),
        ) {
            let mut t = Throttle::new();
            let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
            let mut now = 0;
            for (n, user, dt) in events {
                now += dt;
                t.failed(ip(n), user.map(|u| format!("u{u}")).as_deref(), now);
                prop_assert!(!t.locked(ip(9), now));
                let sprayed = t.entries.get(&ip(n)).is_some_and(|e| e.sprayed);
                prop_assert_eq!(t.refuses(ip(n), "innocent", now), sprayed && t.locked(ip(n), now));
                prop_assert!(t.entries.values().all(|e| e.users.len() <= MAX_USERS));
            }
        }
    }
}

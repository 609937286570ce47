//! The highest `nc` seen per nonce, so a captured `Authorization` cannot
//! be sent again: a nonce's `nc` must grow with every request (RFC 7616
//! §3.4). Bounded: past [`DEFAULT_MAX_NONCES`] the nonce issued first is
//! forgotten, and any nonce issued no later than one forgotten is refused
//! as stale (the client retries at once with a fresh one), since it may
//! have been forgotten after use. Only nonces of ours, fresh, made for
//! the client and with the right password get here, so a stranger cannot
//! fill the table.

use std::collections::HashMap;

use super::nonce::{Fresh, TAG};

/// Nonces tracked at most by default: a nonce per playing client, for
/// many more clients than a server plays to. About 40 bytes each.
pub const DEFAULT_MAX_NONCES: usize = 8192;

/// The `nc` seen last per nonce; the caller owns it, like
/// [`Throttle`](super::Throttle), and passes it to every
/// [`Auth::check`](super::Auth::check).
#[derive(Debug)]
pub struct NonceCounts {
    last: HashMap<[u8; TAG], Seen>,
    max: usize,
    /// The latest issue time of a nonce forgotten to make room.
    forgot_upto: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    issued: u64,
    nc: u32,
}

impl Default for NonceCounts {
    fn default() -> Self {
        NonceCounts::new(DEFAULT_MAX_NONCES)
    }
}

impl NonceCounts {
    /// Tracks `max` nonces at most (at least one).
    pub fn new(max: usize) -> NonceCounts {
        NonceCounts {
            last: HashMap::new(),
            max: max.max(1),
            forgot_upto: None,
        }
    }

    /// Nonces tracked now.
    pub fn tracked(&self) -> usize {
        self.last.len()
    }

    /// Records a request with `nc` on `nonce`; `false` when `nc` is not
    /// above the last one seen (a replay) or the nonce may have been
    /// forgotten.
    pub(super) fn advance(&mut self, nonce: Fresh, nc: u32) -> bool {
        if let Some(seen) = self.last.get_mut(&nonce.id) {
            let newer = nc > seen.nc;
            if newer {
                seen.nc = nc;
            }
            return newer;
        }
        if nc == 0 || self.forgot_upto.is_some_and(|t| nonce.issued <= t) {
            return false;
        }
        if self.last.len() >= self.max {
            self.forget_first_issued();
        }
        let seen = Seen {
            issued: nonce.issued,
            nc,
        };
        self.last.insert(nonce.id, seen);
        true
    }

    /// O(tracked), only when the table is full and a new nonce comes.
    fn forget_first_issued(&mut self) {
        let first = self.last.iter().min_by_key(|(_, s)| s.issued);
        let Some((&id, &seen)) = first else {
            return;
        };
        self.last.remove(&id);
        self.forgot_upto = Some(self.forgot_upto.unwrap_or(0).max(seen.issued));
    }
}

/// `nc`: 1 to 8 hex digits (RFC 7616 sends exactly 8).
pub(super) fn parse_nc(nc: &str) -> Option<u32> {
    let digits = !nc.is_empty() && nc.len() <= 8 && nc.bytes().all(|b| b.is_ascii_hexdigit());
    digits.then(|| u32::from_str_radix(nc, 16).ok())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nonce(issued: u64, n: u8) -> Fresh {
        Fresh {
            issued,
            id: [n; TAG],
        }
    }

    #[test]
    fn nc_must_grow() {
        let mut c = NonceCounts::default();
        let a = nonce(100, 1);
        assert!(c.advance(a, 1));
        assert!(!c.advance(a, 1), "replayed");
        assert!(c.advance(a, 3), "gaps are fine");
        assert!(!c.advance(a, 2), "lower");
        assert!(c.advance(nonce(100, 2), 1), "another nonce counts apart");
        assert!(!c.advance(nonce(100, 3), 0), "nc starts at 1");
        assert_eq!(c.tracked(), 2);
    }

    #[test]
    fn bounded_and_a_forgotten_nonce_is_refused() {
        let mut c = NonceCounts::new(3);
        for n in 1..=3 {
            assert!(c.advance(nonce(100 + u64::from(n), n), 1));
        }
        assert!(c.advance(nonce(200, 9), 1), "room made");
        assert_eq!(c.tracked(), 3);
        // 101 was forgotten: it and anything issued no later is refused,
        // even if never seen, since it cannot be told from a replay.
        assert!(!c.advance(nonce(101, 1), 2));
        assert!(!c.advance(nonce(100, 7), 1));
        assert!(c.advance(nonce(102, 2), 2), "still tracked");
        assert!(c.advance(nonce(201, 8), 1), "issued later: new");
        assert_eq!(c.tracked(), 3);
        assert_eq!(NonceCounts::new(0).max, 1);
    }

    #[test]
    fn nc_syntax() {
        assert_eq!(parse_nc("00000001"), Some(1));
        assert_eq!(parse_nc("ffffffff"), Some(u32::MAX));
        assert_eq!(parse_nc("A"), Some(10));
        for bad in ["", "+1", "-1", "000000001", "0x1", "g", " 1"] {
            assert_eq!(parse_nc(bad), None, "{bad}");
        }
    }

    proptest! {
        /// Whatever the order, each (nonce, nc) pair passes at most once
        /// and the table never outgrows its bound.
        #[test]
        fn no_pair_passes_twice(uses in prop::collection::vec((0u8..12, 0u32..6), 0..200)) {
            let mut c = NonceCounts::new(4);
            let mut passed = std::collections::HashSet::new();
            for (n, nc) in uses {
                // A nonce's issue time is part of it, in no particular order.
                let issued = u64::from(n) * 7 % 12;
                if c.advance(nonce(issued, n), nc) {
                    prop_assert!(passed.insert((n, nc)));
                }
                prop_assert!(c.tracked() <= 4);
            }
        }
    }
}

//! Stateless nonces: base64(t ‖ HMAC-SHA256(key, t)[..16]), t the issue
//! time in unix seconds as 8 big-endian bytes. The server remembers
//! nothing: a nonce proves itself ours and tells its own age.

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Bytes of the MAC kept in a nonce: 128 bits cannot be guessed.
const TAG: usize = 16;

/// The shortest server key accepted.
pub const MIN_KEY: usize = 16;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Age {
    Fresh,
    Stale,
}

#[derive(Clone)]
pub(super) struct Nonces {
    mac: Hmac<Sha256>,
    /// Seconds a nonce is fresh for.
    pub(super) lifetime: u64,
}

impl Nonces {
    /// `None` when `key` is shorter than [`MIN_KEY`].
    pub(super) fn new(key: &[u8], lifetime: u64) -> Option<Nonces> {
        if key.len() < MIN_KEY {
            return None;
        }
        let mac = Hmac::new_from_slice(key).ok()?;
        Some(Nonces { mac, lifetime })
    }

    fn tag(&self, data: &[u8]) -> Hmac<Sha256> {
        self.mac.clone().chain_update(data)
    }

    pub(super) fn make(&self, now_unix: u64) -> String {
        let stamp = now_unix.to_be_bytes();
        let mut raw = stamp.to_vec();
        raw.extend_from_slice(&self.tag(&stamp).finalize().into_bytes()[..TAG]);
        STANDARD.encode(raw)
    }

    /// How old a nonce is, `None` if it is not one of ours. A nonce from
    /// the future (the clock stepped back) ages the same way.
    pub(super) fn age(&self, nonce: &str, now_unix: u64) -> Option<Age> {
        let raw = STANDARD.decode(nonce).ok()?;
        let (stamp, tag) = raw.split_first_chunk::<8>()?;
        if tag.len() != TAG {
            return None;
        }
        self.tag(stamp).verify_truncated_left(tag).ok()?;
        let fresh = now_unix.abs_diff(u64::from_be_bytes(*stamp)) <= self.lifetime;
        Some(if fresh { Age::Fresh } else { Age::Stale })
    }

    /// The `opaque` of every challenge: fixed per key, revealing nothing.
    /// Clients echo it; fjord does not check it (the nonce is checked).
    pub(super) fn opaque(&self) -> String {
        STANDARD.encode(&self.tag(b"fjord opaque").finalize().into_bytes()[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    fn nonces() -> Nonces {
        Nonces::new(&[7; 32], 300).unwrap()
    }

    #[test]
    fn fresh_then_stale() {
        let n = nonces();
        let nonce = n.make(NOW);
        assert_eq!(nonce.len(), 32);
        assert_eq!(n.age(&nonce, NOW), Some(Age::Fresh));
        assert_eq!(n.age(&nonce, NOW + 300), Some(Age::Fresh));
        assert_eq!(n.age(&nonce, NOW + 301), Some(Age::Stale));
        assert_eq!(n.age(&nonce, NOW - 301), Some(Age::Stale));
    }

    #[test]
    fn foreign_or_tampered_nonces_are_not_ours() {
        let n = nonces();
        let nonce = n.make(NOW);
        let other = Nonces::new(&[8; 32], 300).unwrap().make(NOW);
        assert_eq!(n.age(&other, NOW), None);
        let raw = STANDARD.decode(&nonce).unwrap();
        let mut tampered = raw.clone();
        tampered[7] ^= 1;
        assert_eq!(n.age(&STANDARD.encode(&tampered), NOW), None);
        // A shorter tag must not pass as a prefix of the real one.
        assert_eq!(n.age(&STANDARD.encode(&raw[..9]), NOW), None);
        assert_eq!(n.age(&STANDARD.encode(&raw[..8]), NOW), None);
        for bad in ["", "!", "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v"] {
            assert_eq!(n.age(bad, NOW), None, "{bad}");
        }
    }

    #[test]
    fn short_keys_are_refused() {
        assert!(Nonces::new(&[1; MIN_KEY - 1], 300).is_none());
        assert!(Nonces::new(&[1; MIN_KEY], 300).is_some());
    }

    #[test]
    fn opaque_depends_on_the_key_only() {
        let n = nonces();
        assert_eq!(n.opaque(), nonces().opaque());
        assert_ne!(n.opaque(), Nonces::new(&[8; 32], 300).unwrap().opaque());
    }
}

//! Stateless nonces bound to a client address:
//! base64(t ‖ s ‖ HMAC-SHA256(key, t ‖ s ‖ ip)[..16]), t the issue time in
//! unix seconds and s a salt the caller makes unique per challenge, both
//! as 8 big-endian bytes, ip the client's address as 16 bytes (IPv4
//! mapped). A nonce proves itself ours, made for this address, and tells
//! its own age; the salt keeps two challenges in one second apart, since
//! each nonce's `nc` counts from 1. What was done with a nonce is
//! [`NonceCounts`]'s job.
//!
//! [`NonceCounts`]: super::NonceCounts

use std::net::IpAddr;

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Bytes of the MAC kept in a nonce: 128 bits cannot be guessed.
pub(super) const TAG: usize = 16;

/// Bytes of issue time and salt ahead of the MAC.
const STAMP: usize = 16;

/// The shortest server key accepted.
pub const MIN_KEY: usize = 16;

/// A nonce of ours, made for this client, within its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fresh {
    /// Issue time, unix seconds.
    pub(super) issued: u64,
    /// Its MAC: names the nonce in [`NonceCounts`](super::NonceCounts).
    pub(super) id: [u8; TAG],
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

    fn tag(&self, stamp: &[u8; STAMP], client: IpAddr) -> [u8; TAG] {
        let ip = match client.to_canonical() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let full = self.mac.clone().chain_update(stamp).chain_update(ip);
        let mut tag = [0; TAG];
        tag.copy_from_slice(&full.finalize().into_bytes()[..TAG]);
        tag
    }

    /// A nonce for `client`; `salt` must differ from the last challenge's.
    pub(super) fn make(&self, now_unix: u64, salt: u64, client: IpAddr) -> String {
        let mut stamp = [0; STAMP];
        stamp[..8].copy_from_slice(&now_unix.to_be_bytes());
        stamp[8..].copy_from_slice(&salt.to_be_bytes());
        let mut raw = stamp.to_vec();
        raw.extend_from_slice(&self.tag(&stamp, client));
        STANDARD.encode(raw)
    }

    /// The nonce if it is ours, made for `client` and fresh; `None` when
    /// it is expired, of another key (another process), for another
    /// address or not a nonce at all. A nonce from the future (the clock
    /// stepped back) ages the same way.
    pub(super) fn verify(&self, nonce: &str, now_unix: u64, client: IpAddr) -> Option<Fresh> {
        let raw = STANDARD.decode(nonce).ok()?;
        let (stamp, tag) = raw.split_first_chunk::<STAMP>()?;
        let expected = self.tag(stamp, client);
        // Constant time: the MAC must not leak byte by byte.
        if tag.len() != TAG || !bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], tag)) {
            return None;
        }
        let (time, _salt) = stamp.split_first_chunk::<8>()?;
        let issued = u64::from_be_bytes(*time);
        let fresh = now_unix.abs_diff(issued) <= self.lifetime;
        fresh.then_some(Fresh {
            issued,
            id: expected,
        })
    }

    /// The `opaque` of every challenge: fixed per key, revealing nothing.
    /// Clients echo it; fjord does not check it (the nonce is checked).
    pub(super) fn opaque(&self) -> String {
        let tag = self.mac.clone().chain_update(b"fjord opaque").finalize();
        STANDARD.encode(&tag.into_bytes()[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const NOW: u64 = 1_700_000_000;
    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    fn nonces() -> Nonces {
        Nonces::new(&[7; 32], 300).unwrap()
    }

    fn fresh(n: &Nonces, nonce: &str, now: u64, client: IpAddr) -> bool {
        n.verify(nonce, now, client).is_some()
    }

    #[test]
    fn fresh_then_stale() {
        let n = nonces();
        let nonce = n.make(NOW, 1, A);
        assert_eq!(nonce.len(), 44);
        assert_ne!(nonce, n.make(NOW, 2, A), "the salt tells them apart");
        let got = n.verify(&nonce, NOW, A).unwrap();
        assert_eq!(got.issued, NOW);
        assert!(fresh(&n, &nonce, NOW + 300, A));
        assert!(!fresh(&n, &nonce, NOW + 301, A));
        assert!(!fresh(&n, &nonce, NOW - 301, A));
    }

    #[test]
    fn bound_to_the_client_address() {
        let n = nonces();
        let nonce = n.make(NOW, 1, A);
        assert!(!fresh(&n, &nonce, NOW, B));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        assert!(fresh(&n, &nonce, NOW, mapped), "IPv4-mapped is the same");
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert!(fresh(&n, &n.make(NOW, 1, v6), NOW, v6));
        assert!(!fresh(&n, &n.make(NOW, 1, v6), NOW, A));
        assert_ne!(n.make(NOW, 1, A), n.make(NOW, 1, B));
    }

    #[test]
    fn foreign_or_tampered_nonces_are_not_ours() {
        let n = nonces();
        let nonce = n.make(NOW, 1, A);
        let other = Nonces::new(&[8; 32], 300).unwrap().make(NOW, 1, A);
        assert!(!fresh(&n, &other, NOW, A));
        let raw = STANDARD.decode(&nonce).unwrap();
        let mut tampered = raw.clone();
        tampered[7] ^= 1;
        assert!(!fresh(&n, &STANDARD.encode(&tampered), NOW, A));
        // A shorter tag must not pass as a prefix of the real one.
        assert!(!fresh(&n, &STANDARD.encode(&raw[..17]), NOW, A));
        assert!(!fresh(&n, &STANDARD.encode(&raw[..16]), NOW, A));
        assert!(!fresh(&n, &STANDARD.encode(&raw[..8]), NOW, A));
        for bad in ["", "!", "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v"] {
            assert!(!fresh(&n, bad, NOW, A), "{bad}");
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

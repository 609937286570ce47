//! The Digest computations of RFC 7616 §3.4 (and RFC 2069's form without
//! `qop`), and the stored form of a user's HA1s.

use std::fmt;

use md5::Md5;
use sha2::{Digest, Sha256, digest::Output};

/// A Digest `algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Algorithm {
    Md5,
    Sha256,
}

impl Algorithm {
    /// The algorithm a header names (absent means MD5, RFC 7616 §3.4) and
    /// whether it is the `-sess` variant; `None` for one fjord does not do.
    pub(super) fn parse(name: Option<&str>) -> Option<(Algorithm, bool)> {
        let name = name.unwrap_or("MD5");
        let (base, sess) = match name.len().checked_sub(5) {
            Some(at) if name.is_char_boundary(at) && name[at..].eq_ignore_ascii_case("-sess") => {
                (&name[..at], true)
            }
            _ => (name, false),
        };
        let alg = if base.eq_ignore_ascii_case("MD5") {
            Algorithm::Md5
        } else if base.eq_ignore_ascii_case("SHA-256") {
            Algorithm::Sha256
        } else {
            return None;
        };
        Some((alg, sess))
    }
}

/// A user's HA1 = H(name:realm:password) under both algorithms: all a
/// server needs to check either Digest algorithm or a Basic password, so
/// the password itself is never stored. Password-equivalent for Digest, so
/// `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Ha1 {
    md5: [u8; 16],
    sha256: [u8; 32],
}

/// The stored form's prefix: `digest:<32 hex MD5 HA1>:<64 hex SHA-256 HA1>`.
const STORED_PREFIX: &str = "digest:";

impl Ha1 {
    pub fn new(name: &str, realm: &str, password: &str) -> Ha1 {
        let parts = [name.as_bytes(), realm.as_bytes(), password.as_bytes()];
        Ha1 {
            md5: joined::<Md5>(&parts).into(),
            sha256: joined::<Sha256>(&parts).into(),
        }
    }

    /// Reads the stored form [`hashed_secret`](super::hashed_secret)
    /// prints (hex digits of either case).
    pub fn parse(stored: &str) -> Option<Ha1> {
        let (md5, sha256) = stored.strip_prefix(STORED_PREFIX)?.split_once(':')?;
        Some(Ha1 {
            md5: unhex(md5)?.try_into().ok()?,
            sha256: unhex(sha256)?.try_into().ok()?,
        })
    }

    pub(super) fn get(&self, alg: Algorithm) -> &[u8] {
        match alg {
            Algorithm::Md5 => &self.md5,
            Algorithm::Sha256 => &self.sha256,
        }
    }
}

/// The stored form.
impl fmt::Display for Ha1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (md5, sha256) = (hex(&self.md5), hex(&self.sha256));
        write!(f, "{STORED_PREFIX}{md5}:{sha256}")
    }
}

impl fmt::Debug for Ha1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ha1(..)")
    }
}

/// H(parts joined by ':').
pub(super) fn h(alg: Algorithm, parts: &[&[u8]]) -> Vec<u8> {
    match alg {
        Algorithm::Md5 => joined::<Md5>(parts).to_vec(),
        Algorithm::Sha256 => joined::<Sha256>(parts).to_vec(),
    }
}

fn joined<D: Digest>(parts: &[&[u8]]) -> Output<D> {
    let mut d = D::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            d.update(b":");
        }
        d.update(part);
    }
    d.finalize()
}

/// The `-sess` HA1: H(HA1:nonce:cnonce) (RFC 7616 §3.4.2).
pub(super) fn session_ha1(alg: Algorithm, ha1: &[u8], nonce: &str, cnonce: &str) -> Vec<u8> {
    h(
        alg,
        &[hex(ha1).as_bytes(), nonce.as_bytes(), cnonce.as_bytes()],
    )
}

/// What a request's `qop` brings into the response: `(nc, cnonce, qop)` as
/// the client sent them; `None` for RFC 2069's form.
pub(super) type Qop<'a> = Option<(&'a str, &'a str, &'a str)>;

/// The `response` a client with this HA1 sends (binary, not hex):
/// H(HA1:nonce:nc:cnonce:qop:HA2) with a `qop` (RFC 7616 §3.4.1), or
/// H(HA1:nonce:HA2) without (RFC 2069); HA2 = H(method:uri).
pub(super) fn response(
    alg: Algorithm,
    ha1: &[u8],
    nonce: &str,
    qop: Qop<'_>,
    method: &str,
    uri: &str,
) -> Vec<u8> {
    let ha1 = hex(ha1);
    let ha2 = hex(&h(alg, &[method.as_bytes(), uri.as_bytes()]));
    match qop {
        Some((nc, cnonce, qop)) => h(
            alg,
            &[
                ha1.as_bytes(),
                nonce.as_bytes(),
                nc.as_bytes(),
                cnonce.as_bytes(),
                qop.as_bytes(),
                ha2.as_bytes(),
            ],
        ),
        None => h(alg, &[ha1.as_bytes(), nonce.as_bytes(), ha2.as_bytes()]),
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Hex digits of either case to bytes; `None` on anything else.
pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    let nibble = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7616 §3.9.1.
    const NONCE: &str = "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v";
    const CNONCE: &str = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ";

    fn rfc7616(alg: Algorithm) -> String {
        let ha1 = Ha1::new("Mufasa", "http-auth@example.org", "Circle of Life");
        let qop = Some(("00000001", CNONCE, "auth"));
        hex(&response(
            alg,
            ha1.get(alg),
            NONCE,
            qop,
            "GET",
            "/dir/index.html",
        ))
    }

    #[test]
    fn rfc7616_md5_response() {
        assert_eq!(rfc7616(Algorithm::Md5), "8ca523f5e9506fed4657c9700eebdbec");
    }

    #[test]
    fn rfc7616_sha256_response() {
        assert_eq!(
            rfc7616(Algorithm::Sha256),
            "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"
        );
    }

    /// RFC 2617 §3.5's example (qop=auth, MD5).
    #[test]
    fn rfc2617_response() {
        let ha1 = Ha1::new("Mufasa", "testrealm@host.com", "Circle Of Life");
        let nonce = "dcd98b7102dd2f0e8b11d0f600bfb0c093";
        let qop = Some(("00000001", "0a4f113b", "auth"));
        let r = response(
            Algorithm::Md5,
            ha1.get(Algorithm::Md5),
            nonce,
            qop,
            "GET",
            "/dir/index.html",
        );
        assert_eq!(hex(&r), "6629fae49393a05397450978507c4ef1");
    }

    #[test]
    fn stored_form_round_trips() {
        let ha1 = Ha1::new("alice", "fjord", "s3cret");
        let stored = ha1.to_string();
        assert!(stored.starts_with("digest:"));
        assert_eq!(stored.len(), 7 + 32 + 1 + 64);
        assert_eq!(Ha1::parse(&stored), Some(ha1.clone()));
        assert_eq!(
            Ha1::parse(&stored.to_uppercase().replacen("DIGEST", "digest", 1)),
            Some(ha1)
        );
        assert_eq!(format!("{:?}", Ha1::new("a", "b", "c")), "Ha1(..)");
    }

    #[test]
    fn stored_form_refuses_malformed() {
        let good = Ha1::new("a", "b", "c").to_string();
        for bad in [
            "",
            "digest:",
            &good[..good.len() - 1],
            &good.replacen("digest:", "md5:", 1),
            &good.replacen(':', ";", 2),
            &format!("{good}0"),
            &good.replacen('a', "g", 1),
        ] {
            assert_eq!(Ha1::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn algorithm_names() {
        use Algorithm::*;
        assert_eq!(Algorithm::parse(None), Some((Md5, false)));
        assert_eq!(Algorithm::parse(Some("md5")), Some((Md5, false)));
        assert_eq!(Algorithm::parse(Some("MD5-sess")), Some((Md5, true)));
        assert_eq!(Algorithm::parse(Some("SHA-256")), Some((Sha256, false)));
        assert_eq!(Algorithm::parse(Some("sha-256-SESS")), Some((Sha256, true)));
        for bad in [
            "",
            "-sess",
            "SHA-512-256",
            "SHA-256-sess-sess",
            "MD5é",
            "ésess",
        ] {
            assert_eq!(Algorithm::parse(Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
        assert_eq!(unhex("00ABff"), Some(vec![0, 0xab, 0xff]));
        for bad in ["0", "0g", "é0", "+1"] {
            assert_eq!(unhex(bad), None, "{bad}");
        }
    }
}

//! The `Authorization` header's value (RFC 9110 §11.6.2): a scheme, then
//! Basic's token68 or Digest's comma-separated `name=value` parameters,
//! values plain tokens or quoted-strings with `\` escapes.

use std::borrow::Cow;

use base64::{Engine, engine::general_purpose::STANDARD};

/// Longer values are refused unparsed (real ones are a few hundred bytes).
pub const MAX_HEADER: usize = 4096;

/// An `Authorization` value, parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum Credentials<'a> {
    Basic { user: String, password: String },
    Digest(Params<'a>),
}

/// Digest parameters in the order sent, values unquoted and unescaped;
/// names are unique (compared without case).
#[derive(Debug, PartialEq, Eq)]
pub struct Params<'a>(Vec<(&'a str, Cow<'a, str>)>);

impl Params<'_> {
    /// The value of the parameter named `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        let (_, value) = self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        Some(value)
    }
}

/// Parses an `Authorization` value; `None` for a scheme other than Basic
/// or Digest, a value over [`MAX_HEADER`] bytes, or any malformation
/// (a repeated parameter among them, so a value cannot mean two things).
pub fn parse_authorization(value: &str) -> Option<Credentials<'_>> {
    if value.len() > MAX_HEADER {
        return None;
    }
    let value = value.trim_matches(is_ws);
    let (scheme, rest) = value.split_once(is_ws).unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("Digest") {
        parse_params(rest).map(Credentials::Digest)
    } else if scheme.eq_ignore_ascii_case("Basic") {
        basic(rest.trim_matches(is_ws))
    } else {
        None
    }
}

/// `user:password`, base64 (RFC 7617); the user is everything before the
/// first `:`.
fn basic(token: &str) -> Option<Credentials<'static>> {
    let decoded = String::from_utf8(STANDARD.decode(token).ok()?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some(Credentials::Basic {
        user: user.to_owned(),
        password: password.to_owned(),
    })
}

/// Whitespace between elements: RFC 9110's SP and HTAB, and CR/LF left by
/// a folded header.
fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// RFC 9110 §5.6.2 tchar.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

fn parse_params(list: &str) -> Option<Params<'_>> {
    let mut params: Vec<(&str, Cow<'_, str>)> = Vec::new();
    let mut rest = list;
    loop {
        // Empty list elements are allowed (RFC 9110 §5.6.1).
        rest = rest.trim_start_matches(|c| c == ',' || is_ws(c));
        if rest.is_empty() {
            return Some(Params(params));
        }
        let (name, value, after) = param(rest)?;
        if params.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return None;
        }
        params.push((name, value));
        rest = after.trim_start_matches(is_ws);
        if !rest.is_empty() && !rest.starts_with(',') {
            return None;
        }
    }
}

/// One `name = value` at the start of `s`, and what follows it.
fn param(s: &str) -> Option<(&str, Cow<'_, str>, &str)> {
    let end = s.find(|c| !is_tchar(c)).unwrap_or(s.len());
    let (name, rest) = s.split_at(end);
    let rest = rest.trim_start_matches(is_ws).strip_prefix('=')?;
    let rest = rest.trim_start_matches(is_ws);
    let (value, after) = match rest.strip_prefix('"') {
        Some(quoted) => quoted_string(quoted)?,
        None => token(rest)?,
    };
    (!name.is_empty()).then_some((name, value, after))
}

/// An unquoted value, up to a comma or whitespace. Laxer than `token`:
/// clients send `/` and `=` unquoted (base64 nonces, `uri=/x`).
fn token(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let end = s
        .find(|c| c == ',' || c == '"' || is_ws(c))
        .unwrap_or(s.len());
    (end > 0).then(|| (Cow::Borrowed(&s[..end]), &s[end..]))
}

/// The body of a quoted-string after its opening `"`, unescaped, and what
/// follows the closing `"`; `None` when it is not closed.
fn quoted_string(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let mut unescaped: Option<String> = None;
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                let value = unescaped.map_or(Cow::Borrowed(&s[..i]), Cow::Owned);
                return Some((value, &s[i + 1..]));
            }
            '\\' => {
                let (_, escaped) = chars.next()?;
                unescaped
                    .get_or_insert_with(|| s[..i].to_owned())
                    .push(escaped);
            }
            _ => {
                if let Some(u) = &mut unescaped {
                    u.push(c);
                }
            }
        }
    }
    None
}

/// `s` as a quoted-string, escaping `"` and `\`.
pub(super) fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digest(value: &str) -> Params<'_> {
        match parse_authorization(value) {
            Some(Credentials::Digest(p)) => p,
            other => panic!("{value:?} → {other:?}"),
        }
    }

    #[test]
    fn ffmpeg_shape() {
        let p = digest(
            r#"Digest username="u", realm="fjord", nonce="a/b+c=", uri="rtsp://h/x", response="00ff", algorithm="MD5", opaque="o", qop="auth", cnonce="0123456789abcdef", nc=00000001"#,
        );
        assert_eq!(p.get("username"), Some("u"));
        assert_eq!(p.get("nonce"), Some("a/b+c="));
        assert_eq!(p.get("uri"), Some("rtsp://h/x"));
        assert_eq!(p.get("algorithm"), Some("MD5"));
        assert_eq!(p.get("qop"), Some("auth"));
        assert_eq!(p.get("nc"), Some("00000001"));
        assert_eq!(p.get("missing"), None);
    }

    #[test]
    fn commas_escapes_whitespace_and_case() {
        let p = digest("  dIgEsT\tUserName = \"a, \\\"b\\\\\" ,,\r\n uri=/x,NC=1 ,  ");
        assert_eq!(p.get("username"), Some("a, \"b\\"));
        assert_eq!(p.get("URI"), Some("/x"));
        assert_eq!(p.get("nc"), Some("1"));
        assert_eq!(digest("Digest").get("x"), None);
        assert!(matches!(p.0[0].1, Cow::Owned(_)));
        assert!(matches!(p.0[1].1, Cow::Borrowed(_)));
    }

    #[test]
    fn malformed_digest_is_refused() {
        for bad in [
            r#"Digest a="unterminated"#,
            r#"Digest a="ends in escape\"#,
            r#"Digest a="1" b="2""#,
            r#"Digest a=1 b=2"#,
            r#"Digest a="1", A="2""#,
            r#"Digest a"#,
            r#"Digest a="#,
            r#"Digest =1"#,
            r#"Digest a=x"y""#,
            r#"Digest a@b=1"#,
            "Bearer abc",
            "",
        ] {
            assert_eq!(parse_authorization(bad), None, "{bad}");
        }
    }

    #[test]
    fn basic() {
        assert_eq!(
            parse_authorization("basic  dXNlcjpwYTpzcw== "),
            Some(Credentials::Basic {
                user: "user".into(),
                password: "pa:ss".into()
            })
        );
        for bad in ["Basic", "Basic !!", "Basic dXNlcg==", "Basic /w=="] {
            assert_eq!(parse_authorization(bad), None, "{bad}");
        }
    }

    #[test]
    fn too_long_is_refused() {
        let long = format!("Digest a=\"{}\"", "x".repeat(MAX_HEADER));
        assert_eq!(parse_authorization(&long), None);
        let fits = format!("Digest a=\"{}\"", "x".repeat(MAX_HEADER - 11));
        assert_eq!(digest(&fits).get("a").map(str::len), Some(MAX_HEADER - 11));
    }

    proptest! {
        /// Arbitrary values quoted by `quote`, between arbitrary
        /// whitespace and empty list elements, parse back to themselves.
        #[test]
        fn quoted_values_round_trip(
            values in prop::collection::btree_map("[a-z][a-z0-9_-]{0,8}", any::<String>(), 0..8),
            gaps in prop::collection::vec("[ \t]{0,2},[ \t,]{0,3}", 8),
        ) {
            let list: Vec<String> = values
                .iter()
                .zip(&gaps)
                .map(|((n, v), gap)| format!("{n} = {}{gap}", quote(v)))
                .collect();
            let header = format!("Digest {}", list.concat());
            prop_assume!(header.len() <= MAX_HEADER);
            let p = digest(&header);
            prop_assert_eq!(p.0.len(), values.len());
            for (n, v) in &values {
                prop_assert_eq!(p.get(n), Some(v.as_str()));
            }
        }

        #[test]
        fn never_panics(s in "(Digest|Basic|digest) [ -~\t\"\\\\,=]{0,200}") {
            let _ = parse_authorization(&s);
        }
    }
}

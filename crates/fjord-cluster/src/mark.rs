//! The mark a redirect puts on the URL it sends a viewer to: a query
//! parameter, `fjord-placed=NODE[,NODE]`, naming the nodes placement sent
//! the request on from ([`crate::placement::choose`] serves a marked
//! request where it lands unless that node is full, and never sends it
//! back). The title is named by the path alone: RTSP and HTTP both drop
//! the query from it, and a playlist's relative URIs resolve without it.
//!
//! Read strictly: one parameter of exactly this name, one to
//! [`HOPS`] names, each percent-encoded UTF-8, not empty. Anything else is
//! no mark (the request is placed as any other). A client that forges a
//! mark skips balancing for itself; it cannot make a node loop or fail.

use crate::placement::HOPS;

/// The query parameter's name.
pub const KEY: &str = "fjord-placed";

/// The nodes the mark in `query` (after the `?`, without it) names, first
/// first; empty: no well-formed mark.
pub fn read(query: &str) -> Vec<String> {
    let mut values = (query.split('&'))
        .filter(|p| key_of(p) == KEY)
        .map(|p| p.split_once('=').map(|(_, v)| v));
    let (Some(Some(value)), None) = (values.next(), values.next()) else {
        return Vec::new();
    };
    let names: Option<Vec<String>> = value.split(',').map(decode).collect();
    match names {
        Some(names) if names.len() <= HOPS => names,
        _ => Vec::new(),
    }
}

/// `path` (a request's path and query, `/P?Q`) with its query's mark, if
/// any, replaced by one naming `via`.
pub fn put(path: &str, via: &[&str]) -> String {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let kept = (query.split('&')).filter(|p| !p.is_empty() && key_of(p) != KEY);
    let names: Vec<String> = via.iter().map(|n| encode(n)).collect();
    let mark = format!("{KEY}={}", names.join(","));
    let query: Vec<&str> = kept.chain([mark.as_str()]).collect();
    format!("{path}?{}", query.join("&"))
}

fn key_of(param: &str) -> &str {
    param.split_once('=').map_or(param, |(k, _)| k)
}

/// RFC 3986's unreserved characters stay; every other byte is `%XX`.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What [`encode`] wrote back to the name: `None` for an empty name, a
/// byte neither unreserved nor `%XX`, or bytes that are not UTF-8.
fn decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            bytes.push(b);
            continue;
        }
        let hex = (rest.get(..2)).filter(|h| b == b'%' && h.iter().all(u8::is_ascii_hexdigit))?;
        bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
        rest = &rest[2..];
    }
    String::from_utf8(bytes).ok().filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests;

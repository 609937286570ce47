//! Mapping a request-URI to a catalog title and track, safely.
//!
//! Every accepted title is relative, `/`-separated, with no empty, `.` or
//! `..` component and no NUL, backslash or control character, so joining it
//! under the media root cannot leave the root. The split is done on the raw
//! path *before* percent-decoding, and a component that decodes to a `/` is
//! refused, so `%2F` tricks cannot create components.
//!
//! By hand rather than via `url::Url`: Url resolves `..` itself and keeps
//! `%2F` encoded, so the checks we need would happen on a rewritten path.

use percent_encoding::percent_decode_str;

/// A title (catalog-relative path) and an optional track control suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TitleRef {
    /// Percent-decoded, relative, `/`-separated.
    pub title: String,
    /// `track1`, `trackID=1`, `streamid=0`; `None` = aggregate control.
    pub track: Option<String>,
}

/// Why a request-URI does not name a title.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not `rtsp://host[:port]/path` or `/path`.
    #[error("not an rtsp URI or absolute path")]
    BadUri,
    /// No title in the path (`*`, `rtsp://host/`).
    #[error("no title in URI")]
    Empty,
    /// Invalid percent-encoding or UTF-8.
    #[error("invalid percent-encoding")]
    InvalidEncoding,
    /// A component that could leave the media root or alias another name.
    #[error("path escapes the media root")]
    Escapes,
}

impl PathError {
    /// 400 for a URI that is not one; 404 for the rest (without touching
    /// the filesystem).
    pub fn status(&self) -> u16 {
        match self {
            PathError::BadUri => 400,
            _ => 404,
        }
    }
}

/// Split `uri` (as sent on the request line) into title and track.
pub fn title_path(uri: &str) -> Result<TitleRef, PathError> {
    let path = strip_authority(uri)?;
    let path = path.split(['?', '#']).next().unwrap_or("");
    let Some(path) = path.strip_prefix('/') else {
        return Err(PathError::Empty);
    };
    let mut raw: Vec<&str> = path.split('/').collect();
    if raw.last() == Some(&"") {
        raw.pop(); // trailing slash: aggregate
    }
    let mut parts = Vec::with_capacity(raw.len());
    for c in raw {
        parts.push(decode_component(c)?);
    }
    let mut track = None;
    if parts.last().is_some_and(|p| p == "*") {
        parts.pop();
    } else if parts.len() >= 2 && parts.last().is_some_and(|p| is_track_control(p)) {
        track = parts.pop();
    }
    if parts.is_empty() {
        return Err(PathError::Empty);
    }
    Ok(TitleRef {
        title: parts.join("/"),
        track,
    })
}

/// The one canonical form of a title path as sent (percent-encoded, no
/// leading `/`, no query): its components decoded and joined by `/`, or
/// why it names no title. Every listener names titles by this form, so a
/// title has one name whatever the spelling (`a//b`, `a/./b` are refused,
/// never aliases of `a/b`).
pub fn canonical_path(raw: &str) -> Result<String, PathError> {
    if raw.is_empty() {
        return Err(PathError::Empty);
    }
    let parts = raw
        .split('/')
        .map(decode_component)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(parts.join("/"))
}

/// `rtsp://[user@]host[:port]` (also rtsps, rtspu; any case) → the rest.
fn strip_authority(uri: &str) -> Result<&str, PathError> {
    if uri.starts_with('/') {
        return Ok(uri);
    }
    if uri == "*" || uri.is_empty() {
        return Err(PathError::Empty);
    }
    let (scheme, rest) = uri.split_once("://").ok_or(PathError::BadUri)?;
    if !["rtsp", "rtsps", "rtspu"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(scheme))
    {
        return Err(PathError::BadUri);
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if end == 0 {
        return Err(PathError::BadUri);
    }
    Ok(&rest[end..])
}

fn decode_component(raw: &str) -> Result<String, PathError> {
    let b = raw.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err(PathError::InvalidEncoding);
        }
    }
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| PathError::InvalidEncoding)?;
    if decoded.is_empty()
        || decoded == "."
        || decoded == ".."
        || decoded
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_control())
    {
        return Err(PathError::Escapes);
    }
    Ok(decoded.into_owned())
}

/// `track<N>`, `trackID=<N>`, `streamid=<N>` (any case).
/// `track1`, `trackID=1`, `streamid=1`, and a track's repair stream
/// `track1-fec` (see `docs/fec.md`).
fn is_track_control(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let lower = lower.strip_suffix("-fec").unwrap_or(&lower);
    ["trackid=", "streamid=", "track"].iter().any(|p| {
        lower
            .strip_prefix(p)
            .is_some_and(|n| !n.is_empty() && n.len() <= 5 && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(uri: &str, title: &str, track: Option<&str>) {
        assert_eq!(
            title_path(uri),
            Ok(TitleRef {
                title: title.into(),
                track: track.map(Into::into)
            }),
            "{uri}"
        );
    }

    #[test]
    fn accepted() {
        ok("rtsp://host/clip.ts", "clip.ts", None);
        ok("rtsp://host:8554/clip.ts", "clip.ts", None);
        ok(
            "RTSP://user@host:8554/dir/clip.ts?x=1#f",
            "dir/clip.ts",
            None,
        );
        ok("rtsp://[::1]:554/a/b/c.ts", "a/b/c.ts", None);
        ok("rtsp://h/clip.ts/track1-fec", "clip.ts", Some("track1-fec"));
        ok("/clip.ts", "clip.ts", None);
        ok("/clip.ts/", "clip.ts", None);
        ok("/clip.ts/*", "clip.ts", None);
        ok("rtsp://h/clip.ts/track1", "clip.ts", Some("track1"));
        ok("rtsp://h/clip.ts/trackID=2", "clip.ts", Some("trackID=2"));
        ok("rtsp://h/clip.ts/streamid=0", "clip.ts", Some("streamid=0"));
        ok(
            "rtsp://h/dir/clip.ts/track1/",
            "dir/clip.ts",
            Some("track1"),
        );
        ok("rtsp://h/my%20clip.ts", "my clip.ts", None);
        ok("rtsp://h/caf%C3%A9.ts", "café.ts", None);
        ok("rtsp://h/a..b/..c", "a..b/..c", None);
        ok("rtsp://h/track1", "track1", None);
        ok("rtsp://h/clip.ts/track", "clip.ts/track", None);
        ok("rtsp://h/clip.ts/track123456", "clip.ts/track123456", None);
    }

    #[test]
    fn escapes() {
        for uri in [
            "rtsp://h/../etc/passwd",
            "rtsp://h/a/../../etc",
            "rtsp://h/a/%2e%2e/b",
            "rtsp://h/%2E%2E",
            "rtsp://h/a/./b",
            "rtsp://h/%2F%2Fetc/passwd",
            "rtsp://h/a%2F..%2Fb",
            "rtsp://h//etc/passwd",
            "//etc/passwd",
            "rtsp://h/a//b",
            "rtsp://h/a%5C..%5Cb",
            "rtsp://h/a\\b",
            "rtsp://h/a%00b",
            "rtsp://h/a%0Ab",
            "/..",
            "/../track1",
        ] {
            assert_eq!(title_path(uri), Err(PathError::Escapes), "{uri}");
        }
        assert_eq!(PathError::Escapes.status(), 404);
    }

    #[test]
    fn a_path_has_one_canonical_spelling() {
        assert_eq!(canonical_path("d/a%20b.ts"), Ok("d/a b.ts".into()));
        assert_eq!(
            canonical_path("d/t.ts/index.m3u8"),
            Ok("d/t.ts/index.m3u8".into())
        );
        for alias in [
            "d//a.ts",
            "d/./a.ts",
            "./a.ts",
            "a.ts/",
            "d/%2e/a.ts",
            "d%2Fa.ts",
        ] {
            assert_eq!(canonical_path(alias), Err(PathError::Escapes), "{alias}");
        }
        assert_eq!(canonical_path(""), Err(PathError::Empty));
        assert_eq!(canonical_path("a%zz"), Err(PathError::InvalidEncoding));
    }

    #[test]
    fn other_errors() {
        for uri in [
            "*",
            "",
            "rtsp://h",
            "rtsp://h/",
            "rtsp://h/*",
            "rtsp://h?x",
            "/",
        ] {
            assert_eq!(title_path(uri), Err(PathError::Empty), "{uri}");
        }
        for uri in [
            "http://h/a",
            "clip.ts",
            "rtsp:/h/a",
            "rtsp:///a",
            "file:///etc/passwd",
        ] {
            assert_eq!(title_path(uri), Err(PathError::BadUri), "{uri}");
        }
        for uri in [
            "rtsp://h/a%",
            "rtsp://h/a%2",
            "rtsp://h/a%zz",
            "rtsp://h/%ff%fe",
        ] {
            assert_eq!(title_path(uri), Err(PathError::InvalidEncoding), "{uri}");
        }
        assert_eq!(PathError::BadUri.status(), 400);
        assert_eq!(PathError::Empty.status(), 404);
        assert_eq!(PathError::InvalidEncoding.status(), 404);
    }

    fn assert_safe(t: &TitleRef) -> Result<(), TestCaseError> {
        prop_assert!(!t.title.is_empty());
        prop_assert!(!t.title.starts_with('/'));
        prop_assert!(!t.title.contains('\\') && !t.title.contains('\0'));
        for c in t.title.split('/') {
            prop_assert!(!c.is_empty() && c != ".." && c != ".", "{:?}", t.title);
        }
        let joined = std::path::Path::new("/srv/media").join(&t.title);
        for c in joined.components() {
            prop_assert!(!matches!(c, std::path::Component::ParentDir));
        }
        prop_assert!(joined.starts_with("/srv/media"));
        Ok(())
    }

    proptest! {
        #[test]
        fn accepted_titles_are_safe(s in "\\PC{0,80}") {
            if let Ok(t) = title_path(&s) { assert_safe(&t)?; }
        }

        #[test]
        fn accepted_titles_are_safe_pathish(
            parts in proptest::collection::vec(
                "(\\.|\\.\\.|%2[eEfF]|%5[cC]|%00|/|[a-z]|track1|\\*|%)*", 0..8),
            prefix in "(rtsp://h|/|rtsp://h/|)",
        ) {
            let uri = format!("{prefix}{}", parts.join("/"));
            if let Ok(t) = title_path(&uri) { assert_safe(&t)?; }
        }

        /// Accepted spellings differ from their canonical form only by
        /// percent-encoding: nothing is collapsed, so no two structurally
        /// different paths name one title.
        #[test]
        fn the_canonical_form_is_the_decoded_spelling(
            parts in proptest::collection::vec(
                "(\\.|\\.\\.|%2[eEfF]|%5[cC]|%00|%41|/|[a-zA-Z]|\\\\|%)*", 0..8),
        ) {
            let raw = parts.join("/");
            if let Ok(c) = canonical_path(&raw) {
                let decoded = percent_decode_str(&raw).decode_utf8().unwrap();
                prop_assert_eq!(&c, &decoded);
                assert_safe(&TitleRef { title: c, track: None })?;
            }
        }
    }
}

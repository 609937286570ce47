//! What a request names, so a Digest answer made for one request-target
//! does not open another: the `uri` parameter is compared with it.

use percent_encoding::percent_decode_str;

use crate::rtsp::url::title_path;

/// The request's target, as the Digest `uri` parameter must name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// HTTP: the target's path, percent-decoded, without its leading `/`
    /// (as [`target_path`] gives it). The `uri` must name this very path;
    /// its query is not compared.
    Path(&'a str),
    /// RTSP: the title ([`title_path`]'s). The `uri` must name the same
    /// title; its track may differ, since players send the aggregate's
    /// URL, a track's, or the DESCRIBE URL on any request.
    Title(&'a str),
}

impl Target<'_> {
    /// Whether a Digest `uri` parameter names this target.
    pub fn named_by(&self, uri: &str) -> bool {
        match self {
            Target::Path(path) => target_path(uri).is_some_and(|p| p == *path),
            Target::Title(title) => title_path(uri).is_ok_and(|t| t.title == *title),
        }
    }
}

/// The path of an HTTP origin-form (`/a/b?q`) or absolute-form
/// (`http://host/a/b`) target, percent-decoded, without the leading `/`;
/// `None` for anything else.
pub fn target_path(target: &str) -> Option<String> {
    let path = &crate::http::raw_path(target)?[1..];
    let decoded = percent_decode_str(path).decode_utf8().ok()?;
    Some(decoded.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn http_paths() {
        let t = Target::Path("movies/a b.ts");
        for uri in [
            "/movies/a%20b.ts",
            "/movies/a b.ts?x=1",
            "http://h:8080/movies/a%20b.ts",
        ] {
            assert!(t.named_by(uri), "{uri}");
        }
        for uri in [
            "/movies/a%20b.ts/index.m3u8",
            "/movies/",
            "movies/a b.ts",
            "",
            "*",
            "/movies/a%ff.ts",
        ] {
            assert!(!t.named_by(uri), "{uri}");
        }
        assert!(Target::Path("").named_by("/"));
    }

    #[test]
    fn rtsp_titles_any_track() {
        let t = Target::Title("movies/a.ts");
        for uri in [
            "rtsp://h:554/movies/a.ts",
            "rtsp://h/movies/a.ts/",
            "rtsp://h/movies/a.ts/trackID=1",
            "RTSP://other/movies/a.ts/track2?x",
            "/movies/a.ts",
        ] {
            assert!(t.named_by(uri), "{uri}");
        }
        for uri in [
            "rtsp://h/movies/b.ts",
            "rtsp://h/movies/a.ts/x",
            "rtsp://h/",
            "*",
            "http://h/movies/a.ts",
        ] {
            assert!(!t.named_by(uri), "{uri}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(uri in any::<String>(), path in "[a-z/]{0,8}") {
            let _ = Target::Path(&path).named_by(&uri);
            let _ = Target::Title(&path).named_by(&uri);
        }
    }
}

//! What of a title's adaptive streaming a request path names:
//! `NAME/index.m3u8`, `NAME/media.m3u8` and `NAME/iframes.m3u8` (HLS),
//! `NAME/manifest.mpd`
//! (DASH), and the segments they list: fragmented MP4 `init.mp4` and
//! `seg-N.m4s` with every track, `init-K.mp4` and `seg-K-N.m4s` with
//! track K alone; DASH WebM `init-K.webm` and `seg-K-N.webm` (track K);
//! packed audio `seg-N.aac`, `seg-N.mp3`.

/// Which playlist of a title.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Playlist {
    Multivariant,
    Media,
    /// `EXT-X-I-FRAMES-ONLY`, for trick play.
    IFrames,
}

/// What of a title a request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Playlist(Playlist),
    Manifest,
    /// The init segment of a fragmented title: every track, or one.
    Init(Option<usize>),
    /// Media segment N: every track, or one.
    Segment(Option<usize>, usize),
    /// The WebM init segment of track K.
    WebmInit(usize),
    /// WebM media segment N of track K.
    WebmSegment(usize, usize),
}

/// The title and what of it `path` names.
pub(crate) fn route_of(path: &str) -> Option<(&str, Route)> {
    let (title, leaf) = path.rsplit_once('/')?;
    let route = match leaf {
        "index.m3u8" => Route::Playlist(Playlist::Multivariant),
        "media.m3u8" => Route::Playlist(Playlist::Media),
        "iframes.m3u8" => Route::Playlist(Playlist::IFrames),
        "manifest.mpd" => Route::Manifest,
        "init.mp4" => Route::Init(None),
        _ => {
            if let Some(k) = leaf
                .strip_prefix("init-")
                .and_then(|l| l.strip_suffix(".mp4"))
            {
                Route::Init(Some(number(k)?))
            } else if let Some(k) = leaf
                .strip_prefix("init-")
                .and_then(|l| l.strip_suffix(".webm"))
            {
                Route::WebmInit(number(k)?)
            } else if let Some(kn) = leaf
                .strip_prefix("seg-")
                .and_then(|l| l.strip_suffix(".webm"))
            {
                let (k, n) = kn.split_once('-')?;
                Route::WebmSegment(number(k)?, number(n)?)
            } else {
                let seg = leaf.strip_prefix("seg-")?;
                if let Some(n) = seg
                    .strip_suffix(".aac")
                    .or_else(|| seg.strip_suffix(".mp3"))
                {
                    Route::Segment(None, number(n)?)
                } else {
                    let n = seg.strip_suffix(".m4s")?;
                    match n.split_once('-') {
                        Some((k, n)) => Route::Segment(Some(number(k)?), number(n)?),
                        None => Route::Segment(None, number(n)?),
                    }
                }
            }
        }
    };
    (!title.is_empty()).then_some((title, route))
}

/// A decimal number of digits only (no sign, no `+`).
fn number(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn playlists_manifests_and_segments_are_named_under_their_title() {
        use Route::*;
        let cases = [
            (
                "a b.ts/index.m3u8",
                "a b.ts",
                Playlist(super::Playlist::Multivariant),
            ),
            (
                "d/t.ts/media.m3u8",
                "d/t.ts",
                Playlist(super::Playlist::Media),
            ),
            ("t.mp4/manifest.mpd", "t.mp4", Manifest),
            (
                "t.mp4/iframes.m3u8",
                "t.mp4",
                Playlist(super::Playlist::IFrames),
            ),
            ("t.mp4/init.mp4", "t.mp4", Init(None)),
            ("t.mp4/init-1.mp4", "t.mp4", Init(Some(1))),
            ("t.mp4/seg-12.m4s", "t.mp4", Segment(None, 12)),
            ("t.mp4/seg-0-12.m4s", "t.mp4", Segment(Some(0), 12)),
            ("a.aac/seg-3.aac", "a.aac", Segment(None, 3)),
            ("a.mp3/seg-3.mp3", "a.mp3", Segment(None, 3)),
            ("v.webm/init-1.webm", "v.webm", WebmInit(1)),
            ("v.webm/seg-1-7.webm", "v.webm", WebmSegment(1, 7)),
        ];
        for (path, title, route) in cases {
            assert_eq!(route_of(path), Some((title, route)), "{path}");
        }
        for no in [
            "t.ts",
            "index.m3u8",
            "/index.m3u8",
            "t.mp4/seg-.m4s",
            "t.mp4/seg-+1.m4s",
            "t.mp4/seg-1.mp4",
            "t.mp4/seg-1-.m4s",
            "t.mp4/seg--1.m4s",
            "t.mp4/init-.mp4",
            "t.mp4/init-x.mp4",
            "a.aac/seg-0-1.aac",
            "v.webm/seg-1.webm",
            "v.webm/init.webm",
            "v.webm/seg-1-x.webm",
        ] {
            assert_eq!(route_of(no), None, "{no}");
        }
    }
}

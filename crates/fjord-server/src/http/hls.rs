//! HLS of a stored MPEG-TS title: `NAME/index.m3u8` (multivariant) and
//! `NAME/media.m3u8`, whose segments are byte ranges of `NAME` itself
//! (`fjord_proto::hls`), cut at the random access points ingest found
//! (each starts with the PAT before its key frame), so segments are served
//! as downloads: nothing generated but the playlists.

use std::sync::Arc;

use crate::Server;

/// Which playlist of a title a request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Playlist {
    Multivariant,
    Media,
}

/// The title and playlist `path` names (`NAME/index.m3u8`,
/// `NAME/media.m3u8`).
pub(crate) fn playlist_of(path: &str) -> Option<(&str, Playlist)> {
    if let Some(title) = path.strip_suffix("/index.m3u8") {
        return Some((title, Playlist::Multivariant));
    }
    path.strip_suffix("/media.m3u8")
        .map(|title| (title, Playlist::Media))
}

/// The playlist's text, or the status and why not.
pub(crate) async fn playlist(
    server: &Arc<Server>,
    title: &str,
    which: Playlist,
) -> Result<String, (u16, String)> {
    let (_, t) = server
        .catalog
        .open(title)
        .await
        .map_err(|e| (e.status(), e.to_string()))?;
    let is_ts =
        t.index().track_count() == 1 && t.index().track(0).is_some_and(|k| k.encoding() == "MP2T");
    if !is_ts {
        let why = format!(
            "HLS is built for MPEG-TS titles only so far; this one is {}",
            t.index().format()
        );
        return Err((415, why));
    }
    let target_ns = server.config.hls_segment_s.max(1) * 1_000_000_000;
    let name = title.rsplit('/').next().unwrap_or(title).to_owned();
    // The boundaries' records may be read from the disk.
    let segments = tokio::task::spawn_blocking(move || {
        let index = t.index();
        let track = index.track(0)?;
        let points: Vec<_> = track.sync_points().collect();
        let times: Vec<u64> = points.iter().map(|p| p.time_ns).collect();
        let offset_of = |i: usize| Some(track.packet(points[i].packet as usize)?.offset);
        Some(fjord_proto::hls::cut(
            &times,
            offset_of,
            t.media_len(),
            index.duration_ns(),
            target_ns,
        ))
    })
    .await
    .ok()
    .flatten()
    .ok_or((500, "the title's index could not be read".to_owned()))?;
    Ok(match which {
        Playlist::Multivariant => fjord_proto::hls::multivariant_playlist(&segments, "media.m3u8"),
        Playlist::Media => {
            let uri = percent_encoding::utf8_percent_encode(&name, SEGMENT_URI).to_string();
            fjord_proto::hls::media_playlist(&segments, &format!("../{uri}"))
        }
    })
}

/// What a title's name escapes in a relative URI.
const SEGMENT_URI: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn playlists_are_named_under_their_title() {
        assert_eq!(
            playlist_of("a b.ts/index.m3u8"),
            Some(("a b.ts", Playlist::Multivariant))
        );
        assert_eq!(
            playlist_of("d/t.ts/media.m3u8"),
            Some(("d/t.ts", Playlist::Media))
        );
        assert_eq!(playlist_of("t.ts"), None);
        assert_eq!(playlist_of("index.m3u8"), None);
    }
}

//! DASH of a stored title: `NAME/manifest.mpd` (`fjord_proto::dash`). An
//! MP4, Matroska or WebM title has one representation per track, whose
//! segments are the fragmented MP4 of that track alone ([`super::fmp4`]:
//! `init-K.mp4`, `seg-K-N.m4s`), cut at the same key frames for every
//! track; a WebM title of VP8, VP9 and Opus the same in WebM
//! (`init-K.webm`, `seg-K-N.webm`: Chromium plays VP8 from WebM only); an
//! MPEG-TS title one representation whose segments are the byte ranges
//! of the file HLS uses.

use std::sync::Arc;

use fjord_proto::dash::{self, Representation};

use super::fmp4::Cache;
use super::hls::{Form, form};
use crate::Server;

/// The manifest's text, or the status and why not.
pub(crate) async fn manifest(
    server: &Arc<Server>,
    cache: &Arc<Cache>,
    title: &str,
) -> Result<String, (u16, String)> {
    let all = match form(server, cache, title).await? {
        Form::Fragmented(all) if all.packed.is_some() => {
            return Err((
                415,
                "DASH carries MP4, WebM and MPEG-TS segments; this title is packed audio, for HLS"
                    .to_owned(),
            ));
        }
        Form::Fragmented(all) => all,
        Form::Ranges { segments, uri, .. } => {
            let ranges: Vec<_> = segments
                .iter()
                .map(|s| s.offset..s.offset + s.len)
                .collect();
            let durations: Vec<_> = segments.iter().map(|s| s.duration_ns).collect();
            return Ok(dash::mpd_of_ranges(&durations, &ranges, &uri));
        }
    };
    let durations: Vec<u64> = all.title.fragments.iter().map(|f| f.duration_ns).collect();
    let webm = is_webm(server, title).await
        && (all.title.tracks.iter())
            .all(|t| t.codec == "vp8" || t.codec == "opus" || t.codec.starts_with("vp09."));
    let mut reps = Vec::new();
    for (k, info) in all.title.tracks.iter().enumerate() {
        let one = cache.get(server, title, Some(k), webm).await?;
        reps.push(Representation {
            video: info.video,
            segment_bytes: one.title.fragments.iter().map(|f| f.len()).collect(),
            resolution: info.video.then_some(all.title.resolution).flatten(),
            codecs: info.codec.clone(),
            frame_rate: info.video.then_some(all.title.frame_rate).flatten(),
            sample_rate: info.sample_rate,
            webm,
        });
    }
    Ok(dash::mpd(&durations, &reps))
}

/// Whether ingest found the title a WebM file.
async fn is_webm(server: &Arc<Server>, title: &str) -> bool {
    match server.catalog.open(title).await {
        Ok((_, t)) => t.index().format().starts_with("WebM"),
        Err(_) => false,
    }
}

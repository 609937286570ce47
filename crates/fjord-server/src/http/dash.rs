//! DASH of a stored title: `NAME/manifest.mpd` (`fjord_proto::dash`). An
//! MP4, Matroska or WebM title has one representation per track, whose
//! segments are the fragmented MP4 of that track alone ([`super::fmp4`]:
//! `init-K.mp4`, `seg-K-N.m4s`), cut at the same key frames for every
//! track; a WebM title of VP8, VP9 and Opus the same in WebM
//! (`init-K.webm`, `seg-K-N.webm`: Chromium plays VP8 from WebM only); an
//! MPEG-TS title one representation whose segments are the byte ranges
//! of the file HLS uses.
//!
//! A live recording still being written has a dynamic manifest of the
//! segments no later snapshot changes (those its HLS playlist lists),
//! fetched again by players as it grows; once it ends, a static one, which
//! players that followed it take as its end (DASH-IF IOP 4.6.4).

use std::sync::Arc;
use std::time::SystemTime;

use fjord_proto::dash::{self, Presentation, Representation};
use fjord_proto::hls::Segment;

use super::fmp4::Cache;
use super::hls::{Form, form, settled, settled_of};
use crate::Server;
use crate::catalog::growing::started_at;

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
        Form::Ranges { segments, uri, .. } => return Ok(of_ranges(server, title, &segments, &uri)),
    };
    let webm = is_webm(server, title).await
        && (all.title.tracks.iter())
            .all(|t| t.codec == "vp8" || t.codec == "opus" || t.codec.starts_with("vp09."));
    let mut tracks = Vec::new();
    for k in 0..all.title.tracks.len() {
        tracks.push(cache.get(server, title, Some(k), webm).await?);
    }
    // A growing recording's segments that will not change, in every
    // track (each track's are served only once settled too).
    let n = (tracks.iter().map(|t| settled_of(t)))
        .chain([settled_of(&all)])
        .min()
        .unwrap_or(0);
    let durations: Vec<u64> = (all.title.fragments[..n].iter())
        .map(|f| f.duration_ns)
        .collect();
    let mut reps = Vec::new();
    for (info, one) in all.title.tracks.iter().zip(&tracks) {
        reps.push(Representation {
            video: info.video,
            segment_bytes: (one.title.fragments.iter().take(n))
                .map(|f| f.len())
                .collect(),
            resolution: info.video.then_some(all.title.resolution).flatten(),
            codecs: info.codec.clone(),
            frame_rate: info.video.then_some(all.title.frame_rate).flatten(),
            sample_rate: info.sample_rate,
            webm,
        });
    }
    let clock = Clock::of(server, title, all.growing.is_some());
    Ok(dash::mpd(&durations, &reps, clock.presentation(server)))
}

/// The manifest of an MPEG-TS title whose segments are `segments` of
/// the file at `uri`: of a growing recording, those that will not change.
fn of_ranges(server: &Server, title: &str, segments: &[Segment], uri: &str) -> String {
    let growing = server.catalog.growing().durable(title).is_some();
    let durations: Vec<_> = segments.iter().map(|s| s.duration_ns).collect();
    let n = match growing {
        true => settled(&durations),
        false => durations.len(),
    };
    let ranges: Vec<_> = (segments[..n].iter())
        .map(|s| s.offset..s.offset + s.len)
        .collect();
    let clock = Clock::of(server, title, growing);
    dash::mpd_of_ranges(&durations[..n], &ranges, uri, clock.presentation(server))
}

/// A growing recording's times (when it began, now), for its dynamic
/// manifest; `None`: a stored title's, static.
struct Clock(Option<(String, String)>);

impl Clock {
    /// `title`'s, if it is a recording that still grows (`growing`): its
    /// file's name (`latest.EXT` resolved) says when it began.
    fn of(server: &Server, title: &str, growing: bool) -> Clock {
        if !growing {
            return Clock(None);
        }
        let file = server.catalog.growing().latest(title);
        let since = started_at(file.as_deref().unwrap_or(title));
        let now = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        Clock(since.map(|since| (since, now)))
    }

    fn presentation(&self, server: &Server) -> Presentation<'_> {
        match &self.0 {
            None => Presentation::Static,
            Some((since, now)) => Presentation::Dynamic {
                available_since: since,
                now,
                // Segments are cut about this far apart.
                update_s: server.config().hls_segment_s.max(1),
            },
        }
    }
}

/// Whether ingest found the title a WebM file.
async fn is_webm(server: &Arc<Server>, title: &str) -> bool {
    match server.catalog.open(title).await {
        Ok((_, t)) => t.index().format().starts_with("WebM"),
        Err(_) => false,
    }
}

//! HLS of a stored title: `NAME/index.m3u8` (multivariant) and
//! `NAME/media.m3u8`. An MPEG-TS title's segments are byte ranges of
//! `NAME` itself (`fjord_proto::hls`), cut at the random access points
//! ingest found (each starts with the PAT before its key frame), so they
//! are served as downloads: nothing generated but the playlists. An MP4,
//! Matroska or WebM title's are fragmented MP4 ([`super::fmp4`]) with every
//! track in each:
//! `NAME/init.mp4` and `NAME/seg-N.m4s`; an ADTS or MP3 title's packed
//! audio ([`super::packed`]): `NAME/seg-N.aac`, `NAME/seg-N.mp3`.
//! A live recording still being written has an EVENT media playlist of
//! the segments no later snapshot changes ([`settled`]), fetched again by
//! players as it grows, and `#EXT-X-ENDLIST` appended once it ends.

use std::sync::Arc;

use fjord_engine::Title;
use fjord_media::plan::FLAG_KEY_FRAME_END;
use fjord_proto::hls::{IFrame, Segment, Variant};

use super::fmp4::{self, Cache};
use super::routes::Playlist;
use crate::Server;

/// How a title is segmented for adaptive streaming.
pub(crate) enum Form {
    /// MPEG-TS: byte ranges of the file, whose URI relative to the
    /// title's playlists is `uri`.
    Ranges {
        segments: Vec<Segment>,
        uri: String,
        title: Arc<Title>,
    },
    /// MP4, Matroska, WebM: fragmented MP4, every track in each segment;
    /// ADTS, MP3:
    /// packed audio.
    Fragmented(Arc<fmp4::Fragments>),
}

/// The title's segments, or the status and why it has none.
pub(crate) async fn form(
    server: &Arc<Server>,
    cache: &Arc<Cache>,
    title: &str,
) -> Result<Form, (u16, String)> {
    let (_, t) = server
        .catalog
        .open(title)
        .await
        .map_err(|e| super::refused(&e))?;
    if fmp4::is_fragmentable(&t.index().format()) || super::packed::kind_of(&t).is_some() {
        return Ok(Form::Fragmented(
            cache.get(server, title, None, false).await?,
        ));
    }
    let is_ts =
        t.index().track_count() == 1 && t.index().track(0).is_some_and(|k| k.encoding() == "MP2T");
    if !is_ts {
        let why = format!(
            "HLS is built for MPEG-TS, MP4, Matroska, WebM, ADTS and MP3 titles, DASH for \
             MPEG-TS, MP4, Matroska and WebM; this one is {}",
            t.index().format()
        );
        return Err((415, why));
    }
    let target_ns = server.config().hls_segment_s.max(1) * 1_000_000_000;
    // The boundaries' records may be read from the disk.
    let opened = t.clone();
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
    let name = title.rsplit('/').next().unwrap_or(title);
    let uri = percent_encoding::utf8_percent_encode(name, SEGMENT_URI);
    Ok(Form::Ranges {
        title: opened,
        segments,
        uri: format!("../{uri}"),
    })
}

/// The playlist's text, or the status and why not. A multivariant
/// playlist lists the media playlist at `backups` too (other nodes).
pub(crate) async fn playlist(
    server: &Arc<Server>,
    cache: &Arc<Cache>,
    title: &str,
    (which, backups): (Playlist, Vec<String>),
) -> Result<String, (u16, String)> {
    let target_s = server.config().hls_segment_s.max(1);
    Ok(match form(server, cache, title).await? {
        Form::Fragmented(f) => {
            let ended_here = server.catalog.growing().ended_here(title);
            fragmented_playlist(&f, (which, backups), (target_s, ended_here))?
        }
        Form::Ranges {
            segments,
            uri,
            title: t,
        } => {
            let growing = server.catalog.growing();
            let live = (growing.durable(title).is_some(), growing.ended_here(title));
            ts_playlist(&segments, (&uri, t), (which, backups), (target_s, live)).await?
        }
    })
}

/// A playlist of a TS title whose segments are `segments` of the file at
/// `uri`. A live recording (`live`: growing, or ended here) has an EVENT
/// media playlist, as a fragmented one has.
async fn ts_playlist(
    segments: &[Segment],
    (uri, title): (&str, Arc<Title>),
    (which, backups): (Playlist, Vec<String>),
    (target_s, (growing, ended_here)): (u64, (bool, bool)),
) -> Result<String, (u16, String)> {
    match which {
        Playlist::Media if growing || ended_here => {
            let durations: Vec<u64> = segments.iter().map(|s| s.duration_ns).collect();
            let listed = if growing {
                settled(&durations)
            } else {
                segments.len()
            };
            // Twice the target: segments end at key frames past it.
            let event = (2 * target_s, !growing);
            return Ok(fjord_proto::hls::event_media_playlist(
                &segments[..listed],
                uri,
                event,
            ));
        }
        Playlist::Media => return Ok(fjord_proto::hls::media_playlist(segments, uri)),
        Playlist::IFrames if growing => {
            let why = "no I-frame playlist while the recording grows; there is one once it ends";
            return Err((404, why.to_owned()));
        }
        _ => {}
    }
    // Every key frame's records, and the bytes the codecs are read from,
    // may be read from the disk.
    let u = uri.to_owned();
    let (frames, params) = tokio::task::spawn_blocking(move || {
        let frames = ts_i_frames(&title, &u).unwrap_or_default();
        let params = match which {
            Playlist::Multivariant => ts_params(&title),
            _ => Default::default(),
        };
        (frames, params)
    })
    .await
    .unwrap_or_default();
    Ok(match which {
        Playlist::IFrames if frames.is_empty() => {
            let why = "this title's index does not say where its key frames end: \
                       ingest it again (fjord ingest) for an I-frame playlist";
            return Err((404, why.to_owned()));
        }
        Playlist::IFrames => fjord_proto::hls::i_frame_playlist(&frames, None),
        _ => {
            let codecs = params.codecs.as_deref().unwrap_or_default();
            let video = codecs
                .split(',')
                .find(|c| c.starts_with("avc") || c.starts_with("hvc"));
            let variant = Variant {
                i_frames: (!frames.is_empty() && !growing).then(|| {
                    let bps = fjord_proto::hls::i_frame_bandwidth(&frames);
                    (
                        "iframes.m3u8".to_owned(),
                        bps,
                        video.unwrap_or_default().to_owned(),
                    )
                }),
                codecs: params.codecs.clone(),
                resolution: params.resolution,
                frame_rate: params.frame_rate,
                backups,
            };
            fjord_proto::hls::multivariant_playlist(segments, "media.m3u8", &variant)
        }
    })
}

/// A TS title's key frames: from each random access point's packet (its
/// PAT) through the packet its key frame ends in, lasting until the next;
/// none when ingest did not mark where key frames end.
fn ts_i_frames(t: &Title, uri: &str) -> Option<Vec<IFrame>> {
    let index = t.index();
    let track = index.track(0)?;
    let points: Vec<_> = track.sync_points().collect();
    let mut frames = Vec::with_capacity(points.len());
    for (i, p) in points.iter().enumerate() {
        let next = points.get(i + 1);
        let stop = next.map_or(track.packet_count(), |n| n.packet as usize);
        let start = track.packet(p.packet as usize)?;
        let Some(end) = (p.packet as usize..stop)
            .filter_map(|k| track.packet(k))
            .find(|r| r.flags & FLAG_KEY_FRAME_END != 0)
        else {
            continue;
        };
        let until = next.map_or(index.duration_ns(), |n| n.time_ns);
        frames.push(IFrame {
            uri: uri.to_owned(),
            offset: start.offset,
            len: end.file_end() - start.offset,
            duration_ns: until.saturating_sub(p.time_ns),
        });
    }
    Some(frames)
}

/// What a TS title's playlist names of its codecs: read from the first
/// bytes at its first key frame (the PAT, PMT, the key frame's parameter
/// sets and the first audio frames lie there).
fn ts_params(t: &Title) -> fjord_media::ts::params::Params {
    /// Enough for the key frame and an audio PES of every stream.
    const READ: u64 = 256 << 10;
    let at = (t.index().track(0))
        .and_then(|k| Some(k.packet(k.sync_points().nth(1)?.packet as usize)?.offset))
        .unwrap_or(0);
    let len = READ.min(t.media_len().saturating_sub(at)) as usize;
    let mut buf = vec![0u8; len];
    let Ok(file) = t.fd().try_clone_to_owned().map(std::fs::File::from) else {
        return Default::default();
    };
    use std::os::unix::fs::FileExt;
    match file.read_exact_at(&mut buf, at) {
        Ok(()) => fjord_media::ts::params::params(&buf),
        Err(_) => Default::default(),
    }
}

/// A playlist of a fragmented title, whose segments are cut
/// `target_s` apart; a multivariant one lists the media playlist at
/// `backups` too. A live recording's media playlist is an EVENT one,
/// growing or `ended_here` (its players may have followed it as it grew).
fn fragmented_playlist(
    f: &fmp4::Fragments,
    (which, backups): (Playlist, Vec<String>),
    (target_s, ended_here): (u64, bool),
) -> Result<String, (u16, String)> {
    let all: Vec<Segment> = (f.title.fragments.iter())
        .map(|s| Segment {
            offset: 0,
            len: s.len(),
            duration_ns: s.duration_ns,
        })
        .collect();
    let segments = &all[..settled_of(f)];
    let growing = f.growing.is_some();
    let frames: Vec<IFrame> = (f.title.fragments.iter().enumerate())
        .filter_map(|(i, s)| {
            Some(IFrame {
                uri: format!("seg-{i}.m4s"),
                offset: 0,
                len: s.key_frame_end?,
                duration_ns: s.duration_ns,
            })
        })
        .collect();
    let video = f.title.tracks.iter().find(|t| t.video);
    Ok(match which {
        Playlist::Media if growing || ended_here => {
            // Twice the target: segments end at key frames past it.
            let uri = |i| format!("seg-{i}.m4s");
            let event = (2 * target_s, !growing);
            fjord_proto::hls::event_playlist(segments, Some("init.mp4"), uri, event)
        }
        Playlist::Media => match f.packed {
            Some(p) => fjord_proto::hls::segment_playlist(segments, None, |i| {
                format!("seg-{i}.{}", p.ext())
            }),
            None => fjord_proto::hls::segment_playlist(segments, Some("init.mp4"), |i| {
                format!("seg-{i}.m4s")
            }),
        },
        // I-frame playlists are VOD only.
        Playlist::IFrames if growing => {
            let why = "no I-frame playlist while the recording grows; there is one once it ends";
            return Err((404, why.to_owned()));
        }
        Playlist::IFrames if video.is_some() && !frames.is_empty() => {
            fjord_proto::hls::i_frame_playlist(&frames, Some("init.mp4"))
        }
        Playlist::IFrames => return Err((404, "this title has no video key frames".to_owned())),
        Playlist::Multivariant => {
            let i_frames = video.filter(|_| !frames.is_empty() && !growing).map(|v| {
                let bps = fjord_proto::hls::i_frame_bandwidth(&frames);
                ("iframes.m3u8".to_owned(), bps, v.codec.clone())
            });
            let variant = Variant {
                codecs: Some(f.title.codecs.clone()),
                resolution: f.title.resolution,
                frame_rate: f.title.frame_rate,
                i_frames,
                backups,
            };
            // Its bandwidth from every segment, a growing one's last too.
            fjord_proto::hls::multivariant_playlist(&all, "media.m3u8", &variant)
        }
    })
}

/// How many of a title's segments its playlist lists: all, or of a
/// growing recording those [`settled`].
pub(super) fn settled_of(f: &fmp4::Fragments) -> usize {
    let fragments = &f.title.fragments;
    match f.growing {
        Some(_) => settled(&fragments.iter().map(|s| s.duration_ns).collect::<Vec<_>>()),
        None => fragments.len(),
    }
}

/// How close to a growing recording's end a segment may end and still be
/// listed: a track's samples that fall in it may lie in a later fragment
/// of the file (audio arriving after the video key frame that cuts it).
const SETTLED_NS: u64 = 1_000_000_000;

/// How many of a growing recording's segments (of these durations) no
/// later snapshot changes: its last takes the rest of the file, and grows
/// with it; the ones before it, unless they end within [`SETTLED_NS`] of
/// the end.
pub(super) fn settled(durations_ns: &[u64]) -> usize {
    let total: u64 = durations_ns.iter().sum();
    let mut end = 0;
    (durations_ns[..durations_ns.len().saturating_sub(1)].iter())
        .take_while(|d| {
            end += **d;
            end + SETTLED_NS <= total
        })
        .count()
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
    fn a_growing_recordings_playlist_lists_the_segments_that_will_not_change() {
        const S: u64 = 1_000_000_000;
        assert_eq!(settled(&[]), 0);
        // The last segment grows with the file.
        assert_eq!(settled(&[6 * S]), 0);
        assert_eq!(settled(&[6 * S, 6 * S, 3 * S]), 2);
        // One ending within a second of the end may still gain samples.
        assert_eq!(settled(&[6 * S, 6 * S, S / 2]), 1);
        assert_eq!(settled(&[6 * S, 6 * S, S]), 2);
    }
}

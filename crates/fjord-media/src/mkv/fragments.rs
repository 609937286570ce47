//! A Matroska or WebM title as fragmented MP4 for HLS and DASH
//! ([`crate::cmaf`]): the tracks of the title's index (H.264, H.265, VP8,
//! VP9, AV1, AAC, Opus), in the same order, their frames left in the file as the
//! samples' byte ranges, and sample entries made from each track's
//! CodecPrivate ([`crate::cmaf::entry`]). Reads what ingest reads (the
//! EBML structure, block headers, a VP9 key frame's header); never a
//! sample's other bytes, no I/O.
//!
//! Matroska stores presentation times only: a video track's decode times
//! are its presentation times in order, moved earlier by the most any
//! frame is shown after its place in that order (so no frame is shown
//! before it is decoded: composition offsets stay positive, as players
//! read most alike), and an edit list starts the track at its first
//! presentation time, as MP4 writers do.

use super::demux::{self, Frame, Kind, TrackEntry};
use super::{Codec, audio_ticks, codec_of, mean_gap};
use crate::cmaf::entry::{self, Config, TrackHead, Vp9Facts};
use crate::cmaf::{self, Fragmented, Sample, TrackInfo};
use crate::format::FormatError;
use crate::vpx::{self, Vpx};

/// Video media time: 90 kHz, exact for millisecond container times.
const VIDEO_TIMESCALE: u32 = 90_000;

/// A served track: its entry, codec and frames.
pub(super) struct Served<'a> {
    pub entry: &'a TrackEntry,
    pub codec: Codec,
    pub frames: &'a [Frame],
}

/// A title's served tracks, read once for either form (fragmented MP4,
/// WebM): each with its frames as samples on the title's timeline.
pub(super) struct Title<'a> {
    pub served: Vec<Served<'a>>,
    pub tracks: Vec<cmaf::Track>,
    /// The title's start on the file's timeline, ns.
    pub t0: i64,
}

/// The served tracks of the demuxed file `d` of `data`; `only` must name
/// one of them.
pub(super) fn title<'a>(
    data: &[u8],
    d: &'a demux::Demuxed,
    only: Option<usize>,
) -> Result<Title<'a>, FormatError> {
    let mut served = Vec::new();
    for (t, frames) in d.tracks.iter().zip(&d.frames) {
        if t.kind == Kind::Other || frames.is_empty() {
            continue;
        }
        if let Ok(codec) = codec_of(data, t)? {
            served.push(Served {
                entry: t,
                codec,
                frames,
            });
        }
    }
    if served.is_empty() {
        return Err(demux::invalid(
            "no H.264, H.265, VP8, VP9, AV1, AAC or Opus track",
        ));
    }
    if only.is_some_and(|k| k >= served.len()) {
        return Err(demux::invalid(format!("no track {}", only.unwrap_or(0))));
    }
    let t0 = served
        .iter()
        .filter_map(|s| s.frames.iter().map(|f| f.time_ns).min())
        .min()
        .unwrap_or(0);
    let tracks = (served.iter().enumerate())
        .map(|(k, s)| {
            let pts: Vec<u64> = (s.frames.iter())
                .map(|f| f.time_ns.saturating_sub(t0).max(0) as u64)
                .collect();
            let track = match s.codec {
                Codec::Aac { rate, .. } => audio_track(s, &pts, rate),
                Codec::Opus { .. } => audio_track(s, &pts, 48_000),
                _ => video_track(s, &pts),
            };
            cmaf::Track {
                id: k as u32 + 1,
                ..track
            }
        })
        .collect();
    Ok(Title { served, tracks, t0 })
}

/// The fragmented form of the Matroska or WebM file `data`, segments of
/// at least `target_ns`, every served track in each (`only`: just that
/// one, cut at the same places as all of them).
pub fn fragment(
    data: &[u8],
    target_ns: u64,
    only: Option<usize>,
) -> Result<Fragmented, FormatError> {
    fragment_demuxed(data, &demux::demux(data, &mut |_| {})?, target_ns, only)
}

/// [`fragment`] of the file `data` demuxed as `d` (by [`demux::demux`],
/// or from its frame table: [`super::table::Table::demuxed`]). Of `data`
/// it reads the head (its tracks' elements) and a VP9 track's first key
/// frame, nothing else.
pub fn fragment_demuxed(
    data: &[u8],
    d: &demux::Demuxed,
    target_ns: u64,
    only: Option<usize>,
) -> Result<Fragmented, FormatError> {
    let Title { served, tracks, .. } = title(data, d, only)?;
    let configs = (served.iter().zip(&tracks))
        .map(|(s, t)| config(data, s, t))
        .collect::<Result<Vec<_>, _>>()?;
    let fragments = cmaf::segments(&tracks, target_ns, only);
    let keep = only.map_or(0..tracks.len(), |k| k..k + 1);
    let (tracks, configs, served) = (&tracks[keep.clone()], &configs[keep.clone()], &served[keep]);
    let infos = configs
        .iter()
        .map(|c| {
            Ok(TrackInfo {
                video: c.is_video(),
                codec: c
                    .codec_name()
                    .ok_or_else(|| demux::invalid("a codec configuration too short to name"))?,
                sample_rate: c.sample_rate(),
            })
        })
        .collect::<Result<Vec<_>, FormatError>>()?;
    let video = tracks.iter().position(|t| t.video);
    let ids: Vec<u32> = tracks.iter().map(|t| t.id).collect();
    let init = cmaf::init_segment(&ids, |o, k| {
        entry::trak(
            o,
            &TrackHead {
                id: tracks[k].id,
                timescale: tracks[k].timescale,
                size: served[k].entry.size,
                media_start: tracks[k].media_start,
                config: &configs[k],
            },
        );
        Ok::<(), FormatError>(())
    })?;
    Ok(Fragmented::new(
        init,
        fragments,
        infos,
        video.map(|v| served[v].entry.size),
        video.and_then(|v| tracks[v].frame_rate()),
    ))
}

/// What [`fragment_demuxed`] and [`super::webm::track_demuxed`] read of
/// the frames of `d` (besides the file's head, which has its tracks): a
/// VP9 track's first key frame, whose header its sample entry is made
/// from ([`config`]).
pub fn frame_reads(d: &demux::Demuxed) -> Vec<std::ops::Range<u64>> {
    (d.tracks.iter().zip(&d.frames))
        .filter(|(t, _)| t.codec_id == "V_VP9")
        .filter_map(|(_, frames)| {
            let f = frames
                .iter()
                .find(|f| f.key && Vpx::Vp9.is_key_frame(f.lead[0]))?;
            Some(f.offset..f.offset + u64::from(f.size))
        })
        .collect()
}

/// A video track: decode times are the presentation times in order,
/// `shift` earlier; media time is title time plus `shift`, so decode
/// times stay positive.
fn video_track(s: &Served, pts: &[u64]) -> cmaf::Track {
    let ticks: Vec<i64> = (pts.iter())
        .map(|&p| (u128::from(p) * u128::from(VIDEO_TIMESCALE) / 1_000_000_000) as i64)
        .collect();
    let mut dts = ticks.clone();
    dts.sort_unstable();
    let shift = (dts.iter().zip(&ticks))
        .map(|(d, p)| d - p)
        .max()
        .unwrap_or(0)
        .max(0);
    let last = s.entry.default_duration_ns.unwrap_or_else(|| mean_gap(pts));
    let last = (u128::from(last) * u128::from(VIDEO_TIMESCALE) / 1_000_000_000) as u32;
    let samples = (s.frames.iter().enumerate())
        .map(|(i, f)| {
            let key = match s.codec {
                Codec::Vpx(v) => f.key && v.is_key_frame(f.lead[0]),
                _ => f.key,
            };
            let dur = dts.get(i + 1).map_or(last, |n| (n - dts[i]) as u32);
            Sample {
                offset: f.offset,
                size: f.size,
                dts: dts[i],
                cts: ticks[i] + shift,
                dur,
                sync: key,
            }
        })
        .collect();
    cmaf::Track {
        media_start: shift,
        ..track(true, VIDEO_TIMESCALE, samples)
    }
}

/// An audio track counted in samples at `rate` (as RTSP stamps it); its
/// CodecDelay (Opus's pre-skip) an edit list that starts it past the
/// samples the decoder primes with, as block times count them.
fn audio_track(s: &Served, pts: &[u64], rate: u32) -> cmaf::Track {
    let times = audio_ticks(&s.codec, s.frames, pts, rate);
    let samples = (s.frames.iter().enumerate())
        .map(|(i, f)| {
            let (at, dur) = times[i];
            let dur = match times.get(i + 1) {
                Some(&(next, _)) => (next - at).max(0) as u32,
                None => dur.unwrap_or(0),
            };
            Sample {
                offset: f.offset,
                size: f.size,
                dts: at,
                cts: at,
                dur,
                sync: true,
            }
        })
        .collect();
    let delay = u128::from(s.entry.codec_delay_ns) * u128::from(rate) / 1_000_000_000;
    cmaf::Track {
        media_start: i64::try_from(delay).unwrap_or(0),
        ..track(false, rate, samples)
    }
}

fn track(video: bool, timescale: u32, samples: Vec<Sample>) -> cmaf::Track {
    cmaf::Track {
        id: 0,
        video,
        timescale,
        delay_ns: 0,
        media_start: 0,
        samples,
    }
}

/// What the track's sample entry is made of: its CodecPrivate, or for
/// VP9 its first key frame's header.
pub(super) fn config(data: &[u8], s: &Served, track: &cmaf::Track) -> Result<Config, FormatError> {
    let private = s.entry.private.map_or(&[][..], |(a, b)| &data[a..b]);
    Ok(match &s.codec {
        Codec::H264(_) => Config::Avc(private.to_vec()),
        Codec::H265(_) => Config::Hevc(private.to_vec()),
        Codec::Vpx(Vpx::Vp8) => Config::Vp8(s.entry.colour),
        Codec::Av1(record) => Config::Av1(record.clone()),
        Codec::Vpx(Vpx::Vp9) => {
            let (profile, bit_depth, chroma, full_range) = (track.samples.iter())
                .filter(|x| x.sync)
                .find_map(|x| {
                    let end = (x.offset + u64::from(x.size)) as usize;
                    vpx::vp9_format(&data[x.offset as usize..end])
                })
                .ok_or_else(|| demux::invalid("a VP9 track without a key frame"))?;
            let (w, h) = s.entry.size;
            Config::Vp9(Vp9Facts {
                profile,
                level: entry::vp9_level(w, h, track.frame_rate().unwrap_or(30.0)),
                bit_depth,
                chroma,
                full_range,
                colour: s.entry.colour,
            })
        }
        Codec::Aac {
            asc,
            rate,
            channels,
        } => Config::Aac {
            asc: asc.clone(),
            rate: *rate,
            channels: *channels,
        },
        Codec::Opus { .. } => Config::Opus(private.to_vec()),
    })
}

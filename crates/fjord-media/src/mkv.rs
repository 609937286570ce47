//! Matroska (`.mkv`) and WebM (`.webm`) files: every H.264, H.265, VP8,
//! VP9, AAC and Opus track becomes an RTP track; frames stay in the file,
//! referenced by offset ([`demux`] finds them, the codecs' packetizers cut
//! them); [`fragments`] makes the same tracks fragmented MP4 for HLS and
//! DASH, from the file or from its frame table and head ([`table`]). An
//! AV1 track is served by HLS and DASH only: its index track has no
//! packets ([`crate::av1`]: no RTSP player here depacketizes it, so it
//! could not be tested).

use crate::format::{FormatError, MAX_RTP_PAYLOAD};
use crate::h264::{self, AvcConfig};
use crate::h265::{self, HevcConfig};
use crate::index::TrackDesc;
use crate::nal::{self, NalCodec};
use crate::plan::{
    FLAG_RANDOM_ACCESS, IngestReport, MediaPlan, PacketRecord, SyncPoint, TrackPlan, rtp_ticks,
    ticks_to_ns,
};
use crate::vpx::{self, Vpx};
use crate::{aac, av1, opus};

pub mod demux;
pub mod ebml;
pub mod fragments;
pub mod table;
#[cfg(test)]
mod testfile;
pub mod webm;

use demux::{Demuxed, Frame, Kind, TrackEntry};

/// What fjord sends of a track.
enum Codec {
    H264(AvcConfig),
    H265(HevcConfig),
    Vpx(Vpx),
    /// The AV1CodecConfigurationRecord (CodecPrivate): HLS and DASH only.
    Av1(Vec<u8>),
    Aac {
        asc: Vec<u8>,
        rate: u32,
        channels: u8,
    },
    Opus {
        channels: u8,
    },
}

impl Codec {
    fn name(&self) -> &'static str {
        match self {
            Codec::H264(_) => "H.264",
            Codec::H265(_) => "H.265",
            Codec::Vpx(Vpx::Vp8) => "VP8",
            Codec::Vpx(Vpx::Vp9) => "VP9",
            Codec::Av1(_) => "AV1",
            Codec::Aac { .. } => "AAC",
            Codec::Opus { .. } => "Opus",
        }
    }
}

/// The plan of a Matroska or WebM file.
pub fn plan(data: &[u8], progress: &mut dyn FnMut(u64, u64)) -> Result<MediaPlan, FormatError> {
    let total = data.len() as u64;
    let d = demux::demux(data, &mut |at| progress(at.min(total), total))?;
    let mut warnings = d.warnings.clone();
    let mut served = Vec::new();
    let mut found = Vec::new();
    for (t, frames) in d.tracks.iter().zip(&d.frames) {
        if t.kind == Kind::Other {
            continue;
        }
        found.push(t.codec_id.clone());
        match codec_of(data, t)? {
            Ok(c @ Codec::Av1(_)) if !frames.is_empty() => {
                warnings.push(format!(
                    "track {} (AV1) is served over HLS and DASH only; RTSP answers 415",
                    t.number
                ));
                served.push((t, c, frames));
            }
            Ok(c) if !frames.is_empty() => served.push((t, c, frames)),
            Ok(_) => warnings.push(format!("track {} ({}) has no frames", t.number, t.codec_id)),
            Err(why) => warnings.push(format!("track {} skipped: {why}", t.number)),
        }
    }
    let container = if d.doc_type == "webm" {
        "WebM"
    } else {
        "Matroska"
    };
    if served.is_empty() {
        return Err(FormatError::Unsupported(if found.is_empty() {
            format!("{container} file with no audio or video track")
        } else {
            format!(
                "no track fjord can serve in this {container} file (found {}); fjord serves \
                 H.264, H.265, VP8, VP9, AV1 (HLS and DASH only), AAC and Opus",
                found.join(", ")
            )
        }));
    }
    let t0 = served
        .iter()
        .filter_map(|(_, _, f)| f.iter().map(|f| f.time_ns).min())
        .min()
        .unwrap_or(0);
    let mut plans = Vec::new();
    let mut duration_ns = 0u64;
    for (i, (t, codec, frames)) in served.iter().enumerate() {
        let pt = 96 + i as u8;
        let (plan, end) = track_plan(data, t, codec, frames, t0, pt, &mut warnings)?;
        duration_ns = duration_ns.max(end);
        plans.push(plan);
    }
    let names: Vec<&str> = served.iter().map(|(_, c, _)| c.name()).collect();
    let report = report(&d, container, &names, &plans, duration_ns, warnings)?;
    Ok(MediaPlan {
        tracks: plans,
        duration_ns,
        ts_per_rtp: 0,
        report,
    })
}

fn report(
    d: &Demuxed,
    container: &str,
    names: &[&str],
    plans: &[TrackPlan],
    duration_ns: u64,
    mut warnings: Vec<String>,
) -> Result<IngestReport, FormatError> {
    let rtp_packets: u64 = plans.iter().map(|p| p.packets.len() as u64).sum();
    if rtp_packets > u64::from(u32::MAX) {
        return Err(FormatError::TooLarge);
    }
    let media_bytes: u64 = d.frames.iter().flatten().map(|f| u64::from(f.size)).sum();
    let bitrate = (u128::from(media_bytes) * 8_000_000_000)
        .checked_div(u128::from(duration_ns))
        .unwrap_or(0) as u64;
    if d.cues_rebuilt {
        warnings.push("no Cues in the file; seek points rebuilt from its key frames".to_owned());
    }
    if d.truncated_bytes > 0 {
        warnings.push(format!(
            "the file ends inside a cluster (truncated?); the last {} bytes are not served",
            d.truncated_bytes
        ));
    }
    if d.resyncs > 0 {
        warnings.push(format!(
            "{} broken clusters; {} bytes skipped to the next cluster",
            d.resyncs, d.skipped_bytes
        ));
    }
    let mut r = IngestReport::new(
        format!("{container} ({})", names.join(", ")),
        rtp_packets,
        bitrate,
    );
    r.truncated_tail_bytes = d.truncated_bytes;
    r.skipped_bytes = d.skipped_bytes;
    r.resyncs = d.resyncs;
    r.warnings = warnings;
    Ok(r)
}

/// The codec of a track: `Ok(Err(why))` when fjord skips it, `Err` when
/// the whole file is refused (a broken codec configuration).
fn codec_of(data: &[u8], t: &TrackEntry) -> Result<Result<Codec, String>, FormatError> {
    let private = t.private.map_or(&[][..], |(s, e)| &data[s..e]);
    let base = t.private.map_or(0, |(s, _)| s as u64);
    if t.encoded {
        return Ok(Err(format!(
            "{} with ContentEncodings (compressed or encrypted frames)",
            t.codec_id
        )));
    }
    let bad = |what: &str| demux::invalid(format!("track {}: malformed {what}", t.number));
    Ok(Ok(match t.codec_id.as_str() {
        "V_MPEG4/ISO/AVC" => {
            Codec::H264(h264::parse_avcc(private, base).ok_or_else(|| bad("avcC"))?)
        }
        "V_MPEGH/ISO/HEVC" => {
            Codec::H265(h265::parse_hvcc(private, base).ok_or_else(|| bad("hvcC"))?)
        }
        "V_VP8" => Codec::Vpx(Vpx::Vp8),
        "V_VP9" => Codec::Vpx(Vpx::Vp9),
        "V_AV1" => {
            av1::Av1Config::parse(private).ok_or_else(|| bad("AV1CodecConfigurationRecord"))?;
            Codec::Av1(private.to_vec())
        }
        id if id.starts_with("A_AAC") => match aac::asc_info(private) {
            Some((rate, ch)) => Codec::Aac {
                asc: private.to_vec(),
                rate,
                channels: if ch == 0 { t.channels } else { ch },
            },
            None => return Ok(Err("AAC without an AudioSpecificConfig".to_owned())),
        },
        "A_OPUS" => match opus::head_channels(private) {
            Ok(channels) => Codec::Opus { channels },
            Err(why) => return Ok(Err(why)),
        },
        other => return Ok(Err(format!("codec {other} is not served"))),
    }))
}

/// The packets of one track and the end of its last presented frame.
fn track_plan(
    data: &[u8],
    t: &TrackEntry,
    codec: &Codec,
    frames: &[Frame],
    t0: i64,
    pt: u8,
    warnings: &mut Vec<String>,
) -> Result<(TrackPlan, u64), FormatError> {
    let bytes: u64 = frames.iter().map(|f| u64::from(f.size)).sum();
    let mut packets =
        Vec::with_capacity(frames.len() * 2 + (bytes / (MAX_RTP_PAYLOAD as u64 - 3)) as usize);
    let mut sync = Vec::new();
    let pts: Vec<u64> = frames
        .iter()
        .map(|f| f.time_ns.saturating_sub(t0).max(0) as u64)
        .collect();
    let (desc, end, dropped) = match codec {
        Codec::Aac { .. } | Codec::Opus { .. } => audio(codec, frames, &pts, pt, &mut packets),
        _ => {
            let (desc, dropped) = video(data, codec, frames, &pts, pt, &mut packets, &mut sync)?;
            let step = t.default_duration_ns.unwrap_or_else(|| mean_gap(&pts));
            let end = pts.iter().max().map_or(0, |&p| p.saturating_add(step));
            (desc, end, dropped)
        }
    };
    if dropped > 0 {
        warnings.push(format!(
            "{}: {dropped} frames malformed or too large for RTP; not served",
            codec.name()
        ));
    }
    Ok((
        TrackPlan {
            desc,
            packets,
            sync,
            fec: None,
        },
        end,
    ))
}

/// Video frames: sent at their decode time, which Matroska does not store:
/// the earliest presentation time of this and every later frame, which is
/// never after this frame's own and never goes back.
fn video(
    data: &[u8],
    codec: &Codec,
    frames: &[Frame],
    pts: &[u64],
    pt: u8,
    packets: &mut Vec<PacketRecord>,
    sync: &mut Vec<SyncPoint>,
) -> Result<(TrackDesc, u64), FormatError> {
    let desc = match codec {
        Codec::H264(cfg) => video_desc(pt, "H264", h264::fmtp(cfg, data)),
        Codec::H265(cfg) => video_desc(pt, "H265", h265::fmtp(cfg, data)),
        Codec::Vpx(v) => v.track_desc(pt),
        Codec::Av1(_) => av1::track_desc(pt),
        _ => unreachable!("audio is planned by `audio`"),
    };
    let mut send = pts.to_vec();
    for i in (0..send.len().saturating_sub(1)).rev() {
        send[i] = send[i].min(send[i + 1]);
    }
    let mut nals = Vec::new();
    let mut dropped = 0;
    for ((f, &p), &s) in frames.iter().zip(pts).zip(&send) {
        let rtp = rtp_ticks(p, 90_000);
        let first = packets.len();
        let mut key = f.key;
        match codec {
            Codec::H264(cfg) => nal::packetize_length_prefixed(
                NalCodec::H264,
                data,
                (f.offset, f.size, cfg.length_size),
                |n| h264::insert_params(data, cfg, n),
                (&mut nals, &mut dropped),
                (s, rtp),
                packets,
            ),
            Codec::H265(cfg) => nal::packetize_length_prefixed(
                NalCodec::H265,
                data,
                (f.offset, f.size, cfg.length_size),
                |n| h265::insert_params(data, cfg, n),
                (&mut nals, &mut dropped),
                (s, rtp),
                packets,
            ),
            Codec::Vpx(v) => {
                // The bitstream decides: a block flagged key that is not
                // (or a superframe starting with a hidden inter frame)
                // cannot start playback.
                key &= v.is_key_frame(f.lead[0]);
                vpx::packetize_frame(*v, key, f.offset, f.size, s, rtp, packets);
            }
            _ => {}
        }
        if key && packets.len() > first && sync.last().is_none_or(|l: &SyncPoint| l.time_ns < p) {
            packets[first].flags |= FLAG_RANDOM_ACCESS;
            sync.push(SyncPoint {
                packet: u32::try_from(first).map_err(|_| FormatError::TooLarge)?,
                time_ns: p,
            });
        }
    }
    Ok((desc, dropped))
}

fn video_desc(pt: u8, encoding: &str, fmtp: String) -> TrackDesc {
    TrackDesc {
        kind: crate::index::TrackKind::Video,
        payload_type: pt,
        clock_rate: 90_000,
        encoding: encoding.to_owned(),
        channels: 0,
        fmtp,
    }
}

/// Mean gap between presentation times (a frame's duration when the track
/// states none).
fn mean_gap(pts: &[u64]) -> u64 {
    let (lo, hi) = (pts.iter().min(), pts.iter().max());
    match (lo, hi) {
        (Some(lo), Some(hi)) if pts.len() > 1 => (hi - lo) / (pts.len() as u64 - 1),
        _ => 0,
    }
}

/// Audio frames: RTP timestamps from [`audio_ticks`]; sent at their
/// presentation time. Returns the description, the end of the last
/// frame and how many frames were dropped.
fn audio(
    codec: &Codec,
    frames: &[Frame],
    pts: &[u64],
    pt: u8,
    packets: &mut Vec<PacketRecord>,
) -> (TrackDesc, u64, u64) {
    let (desc, clock) = match codec {
        Codec::Aac {
            asc,
            rate,
            channels,
        } => (aac::track_desc(pt, *rate, *channels, asc), *rate),
        Codec::Opus { channels } => (opus::track_desc(pt, *channels), 48_000),
        _ => unreachable!("video is planned by `video`"),
    };
    let (mut dropped, mut last_send, mut end) = (0, 0u64, 0u64);
    for (f, (ticks, dur)) in frames.iter().zip(audio_ticks(codec, frames, pts, clock)) {
        let send = ticks_to_ns(ticks.max(0) as u64, clock).max(last_send);
        last_send = send;
        end = end.max(ticks_to_ns(
            (ticks + i64::from(dur.unwrap_or(0))).max(0) as u64,
            clock,
        ));
        let rtp = ticks as u32;
        match codec {
            Codec::Aac { .. } if f.size <= aac::MAX_AU => {
                aac::packetize_au(f.offset, f.size, send, rtp, packets)
            }
            Codec::Opus { .. } if f.size as usize <= MAX_RTP_PAYLOAD => {
                packets.push(PacketRecord::file_run(send, rtp, f.offset, f.size))
            }
            _ => dropped += 1,
        }
    }
    (desc, end, dropped)
}

/// Audio frames' times in `clock` ticks (at presentation times `pts`, ns)
/// and their durations when the codec says: counted from the frame
/// durations, taking the container's time instead only where it strays
/// from the count by more than its own rounding (a gap in the audio).
fn audio_ticks(
    codec: &Codec,
    frames: &[Frame],
    pts: &[u64],
    clock: u32,
) -> Vec<(i64, Option<u32>)> {
    // Container times are whole ticks of TimestampScale (1 ms by default):
    // a count within a millisecond and a tick of them is the same instant.
    let tolerance = i64::from(clock / 1000) + 1;
    let mut next: Option<i64> = None;
    let mut out = Vec::with_capacity(frames.len());
    for (f, &p) in frames.iter().zip(pts) {
        let stamped = unwrapped_ticks(p, clock);
        let ticks = match next {
            Some(n) if f.laced || (stamped - n).abs() <= tolerance => n,
            _ => stamped,
        };
        let dur = match codec {
            Codec::Opus { .. } => {
                opus::packet_ticks(f.lead[0], Some(f.lead[1]).filter(|_| f.size > 1))
            }
            _ => Some(1024),
        };
        next = dur.map(|d| ticks + i64::from(d));
        out.push((ticks, dur));
    }
    out
}

/// [`rtp_ticks`] before it wraps at 2^32.
fn unwrapped_ticks(ns: u64, clock: u32) -> i64 {
    ((u128::from(ns) * u128::from(clock) + 500_000_000) / 1_000_000_000) as i64
}

#[cfg(test)]
#[path = "mkv/tests.rs"]
mod tests;

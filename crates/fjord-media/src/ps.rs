//! MPEG-1/2 program streams (`.mpg`, `.vob`): demultiplexed into elementary
//! streams referenced in place, one RTP track each: video (0xE0–0xEF) as MPV,
//! MPEG audio (0xC0–0xDF) as MPA, and AC-3 in private stream 1 (DVD
//! substreams 0x80–0x87) per RFC 4184.
//!
//! Times come from PES timestamps (33-bit, unwrapped); the SCR is not needed
//! since send times follow the presentation/decoding times. Data straddling
//! two PES packets goes out as a packet with two file runs.

use memchr::memmem;

use crate::es::{Es, MAX_FILE_LEN, Timed, mul_div};
use crate::format::FormatError;
use crate::plan::{IngestReport, MediaPlan, TrackPlan};
use crate::{ac3, mpeg_audio, mpeg_video};

const PACK: u8 = 0xba;
const END: u8 = 0xb9;
const PRIVATE_1: u8 = 0xbd;
const PTS_WRAP: i64 = 1 << 33;
/// Audio PES timestamps within this of the frame count are rounding, not a gap.
const AUDIO_TOLERANCE_NS: i64 = 5_000_000;
/// First dynamic RTP payload type.
const DYNAMIC_PT: u8 = 96;

/// Whether `head` starts with an MPEG-1 or MPEG-2 pack header.
pub fn looks_like_ps(head: &[u8]) -> bool {
    head.len() >= 12
        && head.starts_with(&[0, 0, 1, PACK])
        && (head[4] >> 6 == 1 || head[4] >> 4 == 2)
}

/// The elementary streams fjord serves from a program stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Video(u8),
    Mpa(u8),
    Ac3(u8),
}

/// Reads a 5-byte PES timestamp.
fn timestamp(b: &[u8]) -> i64 {
    (i64::from(b[0] >> 1 & 7) << 30)
        | (i64::from(b[1]) << 22)
        | (i64::from(b[2] >> 1) << 15)
        | (i64::from(b[3]) << 7)
        | i64::from(b[4] >> 1)
}

/// PES header: where the payload starts and its timestamps (raw 90 kHz).
fn pes_header(p: &[u8]) -> Option<(usize, Option<i64>, Option<i64>)> {
    if p.first()? & 0xc0 == 0x80 {
        // MPEG-2.
        let flags = *p.get(1)?;
        let start = 3 + usize::from(*p.get(2)?);
        let pts = (flags & 0x80 != 0).then(|| p.get(3..8).map(timestamp));
        let dts = (flags & 0xc0 == 0xc0).then(|| p.get(8..13).map(timestamp));
        return (start <= p.len()).then_some((start, pts.flatten(), dts.flatten()));
    }
    // MPEG-1: stuffing, optional STD buffer size, then the timestamps.
    let mut i = p.iter().take(17).take_while(|&&b| b == 0xff).count();
    if p.get(i)? & 0xc0 == 0x40 {
        i += 2;
    }
    let b = *p.get(i)?;
    match b >> 4 {
        2 => Some((i + 5, Some(timestamp(p.get(i..i + 5)?)), None)),
        3 => Some((
            i + 10,
            Some(timestamp(p.get(i..i + 5)?)),
            Some(timestamp(p.get(i + 5..i + 10)?)),
        )),
        _ if b == 0x0f => Some((i + 1, None, None)),
        _ => None,
    }
}

/// 90 kHz ticks (any sign) to ns.
fn ticks_ns(t: i64) -> i64 {
    let v = mul_div(t.unsigned_abs(), 1_000_000_000, 90_000);
    if t < 0 { -v } else { v }
}

/// Demultiplexed streams and what was skipped.
struct Demux<'a> {
    streams: Vec<(Kind, Es<'a>)>,
    skipped: u64,
    resyncs: u64,
    truncated: u64,
    ignored: Vec<u8>,
}

fn demux(data: &[u8]) -> Demux<'_> {
    let mut d = Demux {
        streams: Vec::new(),
        skipped: 0,
        resyncs: 0,
        truncated: 0,
        ignored: Vec::new(),
    };
    let finder = memmem::Finder::new(&[0, 0, 1]);
    let mut last_ts: Option<i64> = None;
    let mut unwrap = |raw: i64| {
        let v = match last_ts {
            Some(l) => {
                l + ((raw - l).rem_euclid(PTS_WRAP) + PTS_WRAP / 2) % PTS_WRAP - PTS_WRAP / 2
            }
            None => raw,
        };
        last_ts = Some(v);
        ticks_ns(v)
    };
    let len = data.len();
    let mut pos = 0;
    while pos + 4 <= len {
        let code = data[pos + 3];
        let ok = data[pos..pos + 3] == [0, 0, 1] && code >= END;
        let next = if !ok {
            None
        } else if code == END {
            Some(pos + 4)
        } else if code == PACK {
            match data.get(pos + 4).map(|b| b >> 4) {
                Some(4..=7) => data.get(pos + 13).map(|s| pos + 14 + usize::from(s & 7)),
                Some(2) => Some(pos + 12),
                _ => None,
            }
        } else {
            data.get(pos + 4..pos + 6)
                .map(|l| pos + 6 + usize::from(u16::from_be_bytes([l[0], l[1]])))
                .filter(|&e| e > pos + 6)
        };
        let Some(next) = next else {
            if ok && pos + 14 > len {
                break;
            }
            // Lost: find the next system start code.
            let from = pos + 1;
            let found = finder
                .find_iter(&data[from..])
                .map(|k| from + k)
                .find(|&k| data.get(k + 3).is_some_and(|&c| c >= END));
            let to = found.unwrap_or(len);
            d.skipped += (to - pos) as u64;
            d.resyncs += 1;
            pos = to;
            continue;
        };
        if next > len {
            break;
        }
        if code != PACK && code != END {
            let body = &data[pos + 6..next];
            let kind = match code {
                0xe0..=0xef => Some(Kind::Video(code)),
                0xc0..=0xdf => Some(Kind::Mpa(code)),
                PRIVATE_1 => None,
                _ => {
                    pos = next;
                    continue;
                }
            };
            if let Some((start, pts, dts)) = pes_header(body) {
                let (kind, start) = match kind {
                    Some(k) => (Some(k), start),
                    // DVD substream: id, frame count, first access unit pointer.
                    None => match body.get(start) {
                        Some(&sub @ 0x80..=0x87) => (Some(Kind::Ac3(sub)), start + 4),
                        Some(&sub) => {
                            if !d.ignored.contains(&sub) {
                                d.ignored.push(sub);
                            }
                            (None, start)
                        }
                        None => (None, start),
                    },
                };
                if let Some(kind) = kind.filter(|_| start <= body.len()) {
                    let pts = pts.map(&mut unwrap);
                    let dts = dts.map(&mut unwrap);
                    let i = match d.streams.iter().position(|s| s.0 == kind) {
                        Some(i) => i,
                        None => {
                            d.streams.push((kind, Es::pieces(data)));
                            d.streams.len() - 1
                        }
                    };
                    let file = (pos + 6 + start) as u64;
                    d.streams[i]
                        .1
                        .push(file, (body.len() - start) as u64, pts, dts);
                }
            }
        }
        pos = next;
    }
    d.truncated = (len - pos.min(len)) as u64;
    d.streams.sort_by_key(|s| s.0);
    d
}

/// A plan for a program stream file.
pub fn plan(data: &[u8]) -> Result<MediaPlan, FormatError> {
    if data.len() as u64 >= MAX_FILE_LEN {
        return Err(FormatError::TooLarge);
    }
    let d = demux(data);
    let mut report = IngestReport::new("MPEG-PS", 0, 0);
    report.skipped_bytes = d.skipped;
    report.resyncs = d.resyncs;
    report.truncated_tail_bytes = d.truncated;
    let mut tracks: Vec<(Timed, crate::index::TrackDesc)> = Vec::new();
    let mut codecs: Vec<String> = Vec::new();
    let mut next_pt = DYNAMIC_PT;
    for (kind, es) in &d.streams {
        let done = match *kind {
            Kind::Video(_) => mpeg_video::packetize(es).map(|(mut t, info)| {
                report.skipped_bytes += info.skipped;
                report.truncated_tail_bytes += info.truncated;
                report.warnings.extend(info.warnings.iter().cloned());
                let ok = t.anchor(es, 0);
                codecs.push(info.codec().to_owned());
                (t, mpeg_video::track_desc(), ok)
            }),
            Kind::Mpa(_) => mpeg_audio::packetize(es, false).map(|(mut t, info)| {
                report.skipped_bytes += info.skipped;
                report.resyncs += info.resyncs;
                report.truncated_tail_bytes += info.truncated;
                let ok = t.anchor(es, AUDIO_TOLERANCE_NS);
                codecs.push(info.first.codec());
                (t, mpeg_audio::track_desc(info.first.layer), ok)
            }),
            Kind::Ac3(_) => ac3::packetize(es).map(|(mut t, info)| {
                report.skipped_bytes += info.skipped;
                report.truncated_tail_bytes += info.truncated;
                let ok = t.anchor(es, AUDIO_TOLERANCE_NS);
                codecs.push("AC-3".to_owned());
                let desc = ac3::track_desc(next_pt, info.first.sample_rate, info.first.channels);
                next_pt += 1;
                (t, desc, ok)
            }),
        };
        let name = match kind {
            Kind::Video(_) => "video",
            Kind::Mpa(_) => "MPEG audio",
            Kind::Ac3(_) => "AC-3",
        };
        match done {
            Ok((t, desc, ok)) => {
                if !ok {
                    report.warnings.push(format!(
                        "{name} stream has no PES timestamps; timed from its own frame rate"
                    ));
                }
                tracks.push((t, desc));
            }
            Err(e) => report
                .warnings
                .push(format!("{name} stream not served: {e}")),
        }
    }
    if !d.ignored.is_empty() {
        report.warnings.push(format!(
            "private stream 1 substreams not served (only AC-3 is): {:02x?}",
            d.ignored
        ));
    }
    if tracks.is_empty() {
        return Err(FormatError::Unsupported(format!(
            "MPEG program stream without a servable MPEG video, MPEG audio or AC-3 stream{}",
            report
                .warnings
                .first()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default()
        )));
    }
    // Title timeline 0 = the first presented sample of any track.
    let t0 = tracks.iter().filter_map(|t| t.0.start()).min().unwrap_or(0);
    let mut duration_ns = 0;
    let mut plans = Vec::with_capacity(tracks.len());
    for (mut t, desc) in tracks {
        let (sync, end) = t.finish(t0, desc.clock_rate);
        duration_ns = duration_ns.max(end);
        plans.push(TrackPlan {
            desc,
            packets: t.packets,
            sync,
            fec: None,
        });
    }
    report.format = format!("MPEG-PS ({})", codecs.join(", "));
    report.rtp_packets = plans.iter().map(|p| p.packets.len() as u64).sum();
    report.bitrate_bps = mul_div(data.len() as u64, 8_000_000_000, duration_ns).max(0) as u64;
    Ok(MediaPlan {
        tracks: plans,
        duration_ns,
        ts_per_rtp: 0,
        report,
    })
}

//! AC-3 audio and its RTP packetization (RFC 4184, `ac3/<sample rate>`,
//! dynamic payload type): a 2-byte header (6 zero bits, FT, NF) then as many
//! whole frames as fit, or one frame in fragments when it does not fit alone.
//! The clock rate is the sample rate; a frame is 1536 samples.

use crate::es::{Es, Timed, Unit, mul_div};
use crate::format::{FormatError, MAX_RTP_PAYLOAD};
use crate::index::{TrackDesc, TrackKind};
use crate::plan::FLAG_MARKER;

const SAMPLES: u64 = 1536;
const HEADER_LEN: u64 = 2;
/// Channels by `acmod` (without LFE).
const CHANNELS: [u8; 8] = [2, 1, 2, 3, 3, 4, 4, 5];
/// kbit/s by `frmsizecod / 2`.
const BITRATES: [u32; 19] = [
    32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 576, 640,
];

/// The parts of a sync frame header that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ac3Header {
    pub sample_rate: u32,
    pub channels: u8,
    /// Whole frame in bytes.
    pub len: u32,
}

impl Ac3Header {
    /// Parses a sync frame header; `None` unless it is plain AC-3 (not E-AC-3).
    pub fn parse(b: [u8; 8]) -> Option<Ac3Header> {
        if b[0] != 0x0b || b[1] != 0x77 {
            return None;
        }
        let fscod = b[4] >> 6;
        let code = usize::from(b[4] & 0x3f);
        let bsid = b[5] >> 3;
        let kbps = *BITRATES.get(code / 2)?;
        if fscod == 3 || bsid > 8 {
            return None;
        }
        let (sample_rate, words) = match fscod {
            0 => (48_000, kbps * 2),
            1 => (44_100, kbps * 96_000 / 44_100 + (code & 1) as u32),
            _ => (32_000, kbps * 3),
        };
        let acmod = b[6] >> 5;
        let bits = u16::from_be_bytes([b[6], b[7]]);
        let mut at = 3;
        if acmod & 1 != 0 && acmod != 1 {
            at += 2;
        }
        if acmod & 4 != 0 {
            at += 2;
        }
        if acmod == 2 {
            at += 2;
        }
        let lfe = u8::from(bits & (0x8000 >> at) != 0);
        Some(Ac3Header {
            sample_rate,
            channels: CHANNELS[usize::from(acmod)] + lfe,
            len: words * 2,
        })
    }
}

/// The SDP description of an AC-3 track.
pub fn track_desc(payload_type: u8, sample_rate: u32, channels: u8) -> TrackDesc {
    TrackDesc {
        kind: TrackKind::Audio,
        payload_type,
        clock_rate: sample_rate,
        encoding: "ac3".to_owned(),
        channels,
        fmtp: String::new(),
    }
}

/// What the scan found.
#[derive(Debug, Clone)]
pub(crate) struct Ac3Info {
    pub first: Ac3Header,
    pub skipped: u64,
    pub truncated: u64,
}

/// A frame at `pos` of the stream's kind (once known), within the stream.
/// `Err(())` when it runs past the end.
fn frame_at(es: &Es, pos: u64, kind: Option<&Ac3Header>) -> Result<Option<Ac3Header>, ()> {
    let Some(h) = es.get::<8>(pos).and_then(Ac3Header::parse) else {
        return Ok(None);
    };
    if kind.is_some_and(|k| k.sample_rate != h.sample_rate) {
        return Ok(None);
    }
    if pos + u64::from(h.len) > es.len {
        return Err(());
    }
    Ok(Some(h))
}

/// Packets of every frame; times count frames from 0.
pub(crate) fn packetize(es: &Es) -> Result<(Timed, Ac3Info), FormatError> {
    let mut timed = Timed::default();
    let mut first: Option<Ac3Header> = None;
    let (mut skipped, mut truncated) = (0, 0);
    let mut frames = 0u64;
    let max = MAX_RTP_PAYLOAD as u64 - HEADER_LEN;
    let mut pos = 0;
    let mut frags = Vec::new();
    let mut starts = Vec::new();
    while pos < es.len {
        let h = match frame_at(es, pos, first.as_ref()) {
            Ok(Some(h)) => h,
            Err(()) if first.is_some() => {
                truncated = es.len - pos;
                break;
            }
            _ => {
                let next = es.find_byte(pos + 1, 0x0b).unwrap_or(es.len);
                skipped += next - pos;
                pos = next;
                continue;
            }
        };
        let rate = u64::from(first.get_or_insert(h).sample_rate);
        let first_pkt = timed.packets.len() as u32;
        let len = u64::from(h.len);
        // Whole frames while they fit (and need at most two file runs).
        starts.clear();
        let mut end = pos;
        while let Ok(Some(f)) = frame_at(es, end, first.as_ref()) {
            let e = end + u64::from(f.len);
            if e - pos > max || es.runs(pos, e - pos).is_none() || starts.len() == 255 {
                break;
            }
            starts.push(end);
            end = e;
        }
        if starts.is_empty() {
            frags.clear();
            let mut p = pos;
            while p < pos + len {
                let n = es.fit(p, (pos + len - p).min(max));
                if n == 0 {
                    break;
                }
                frags.push((p, n));
                p += n;
            }
            let nf = frags.len().min(255) as u8;
            for (k, &(p, n)) in frags.iter().enumerate() {
                let ft = match k {
                    0 if n * 8 >= len * 5 => 1,
                    0 => 2,
                    _ => 3,
                };
                let mut r = es.record(&[ft, nf], p, n);
                if k + 1 == frags.len() {
                    r.flags = FLAG_MARKER;
                }
                timed.packets.push(r);
            }
            starts.push(pos);
            end = pos + len;
        } else {
            let mut r = es.record(&[0, starts.len() as u8], pos, end - pos);
            r.flags = FLAG_MARKER;
            timed.packets.push(r);
        }
        // One unit per frame (for PES timestamps); all but the first of a
        // packet own no packet, so the packet carries the first one's time.
        for (k, &at) in starts.iter().enumerate() {
            let pts = mul_div(frames * SAMPLES, 1_000_000_000, rate);
            frames += 1;
            timed.units.push(Unit {
                first_pkt: if k == 0 {
                    first_pkt
                } else {
                    timed.packets.len() as u32
                },
                pos: at,
                pts,
                dts: pts,
                dur: mul_div(frames * SAMPLES, 1_000_000_000, rate) - pts,
                key: false,
            });
        }
        pos = end;
    }
    match first {
        Some(first) if !timed.units.is_empty() => Ok((
            timed,
            Ac3Info {
                first,
                skipped,
                truncated,
            },
        )),
        _ => Err(FormatError::Invalid(
            "AC-3: no complete frame found".to_owned(),
        )),
    }
}

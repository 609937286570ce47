//! MPEG-1/2/2.5 audio (layers I–III, so MP2 and MP3) and its RTP
//! packetization (RFC 2250 §3.5, payload type 14 `MPA/90000`): one frame per
//! packet after a 4-byte header (16 zero bits, 16-bit fragment offset), a
//! frame too big for one packet split with increasing offsets.
//!
//! `.mp3` files: ID3v2 tags at the start and ID3v1/APEv2 tags at the end are
//! skipped, as is a Xing/Info/VBRI header frame (it is metadata; demuxers such
//! as ffmpeg's do not return it as audio). Garbage between frames is skipped
//! by resyncing: a frame counts only when the next one follows it.

use crate::es::{Es, Timed, Unit, mul_div};
use crate::format::{FormatError, MAX_RTP_PAYLOAD};
use crate::index::{TrackDesc, TrackKind};
use crate::plan::{IngestReport, MediaPlan, TrackPlan};

const HEADER_LEN: u64 = 4;
/// A sniffed file must show this many frames in a row.
const SNIFF_FRAMES: usize = 3;

/// kbit/s by [version is MPEG-1][layer index 0..3 = I, II, III][bitrate_index].
const BITRATES: [[[u16; 15]; 3]; 2] = [
    [
        [
            0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256,
        ],
        [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
        [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
    ],
    [
        [
            0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448,
        ],
        [
            0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
        ],
        [
            0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
        ],
    ],
];
const SAMPLE_RATES: [u32; 3] = [44_100, 48_000, 32_000];

/// The parts of a frame header that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    /// 1 (MPEG-1), 2 (MPEG-2) or 25 (MPEG-2.5).
    pub version: u8,
    /// 1, 2 or 3.
    pub layer: u8,
    pub sample_rate: u32,
    pub mono: bool,
    /// Whole frame, header included.
    pub len: u32,
    pub samples: u32,
}

impl FrameHeader {
    /// Parses a header; `None` for anything invalid, reserved or free-format.
    pub fn parse(b: [u8; 4]) -> Option<FrameHeader> {
        if b[0] != 0xff || b[1] & 0xe0 != 0xe0 {
            return None;
        }
        let version = match (b[1] >> 3) & 3 {
            0 => 25,
            2 => 2,
            3 => 1,
            _ => return None,
        };
        let layer = match (b[1] >> 1) & 3 {
            1 => 3,
            2 => 2,
            3 => 1,
            _ => return None,
        };
        let br_index = usize::from(b[2] >> 4);
        let sr_index = usize::from((b[2] >> 2) & 3);
        if br_index == 0 || br_index == 15 || sr_index == 3 || b[3] & 3 == 2 {
            return None;
        }
        let kbps = u32::from(BITRATES[usize::from(version == 1)][usize::from(layer - 1)][br_index]);
        let sample_rate = SAMPLE_RATES[sr_index]
            / match version {
                1 => 1,
                2 => 2,
                _ => 4,
            };
        let pad = u32::from((b[2] >> 1) & 1);
        let bps = kbps * 1000;
        let (len, samples) = match (layer, version) {
            (1, _) => ((12 * bps / sample_rate + pad) * 4, 384),
            (2, _) | (3, 1) => (144 * bps / sample_rate + pad, 1152),
            _ => (72 * bps / sample_rate + pad, 576),
        };
        Some(FrameHeader {
            version,
            layer,
            sample_rate,
            mono: b[3] >> 6 == 3,
            len,
            samples,
        })
    }

    /// Same stream parameters (a false sync in garbage rarely matches).
    fn same_stream(&self, o: &FrameHeader) -> bool {
        (self.version, self.layer, self.sample_rate) == (o.version, o.layer, o.sample_rate)
    }

    /// A LAME/Xing "Xing"/"Info" or Fraunhofer "VBRI" header frame.
    fn is_vbr_header(&self, es: &Es, pos: u64) -> bool {
        if self.layer != 3 {
            return false;
        }
        let side = match (self.version == 1, self.mono) {
            (true, false) => 32,
            (true, true) | (false, false) => 17,
            (false, true) => 9,
        };
        let tag = |at: u64| es.get::<4>(pos + HEADER_LEN + at);
        matches!(tag(side), Some(t) if &t == b"Xing" || &t == b"Info")
            || tag(32).is_some_and(|t| &t == b"VBRI")
    }

    pub fn codec(&self) -> String {
        let v = match self.version {
            1 => "MPEG-1",
            2 => "MPEG-2",
            _ => "MPEG-2.5",
        };
        let l = ["I", "II", "III"][usize::from(self.layer - 1)];
        format!("{v} audio layer {l}")
    }
}

/// The SDP description of an MPA track.
pub fn track_desc(layer: u8) -> TrackDesc {
    TrackDesc {
        kind: TrackKind::Audio,
        payload_type: 14,
        clock_rate: 90_000,
        encoding: "MPA".to_owned(),
        channels: 0,
        fmtp: format!("layer={layer}"),
    }
}

/// What the audio scan found.
#[derive(Debug, Clone)]
pub(crate) struct AudioInfo {
    pub first: FrameHeader,
    pub skipped: u64,
    pub resyncs: u64,
    pub truncated: u64,
}

/// The frame header at `pos` if it is valid, of the stream's kind (once
/// known) and followed by another such header or by the end of the stream.
/// `Err(())` when the frame runs past the end.
fn frame_at(es: &Es, pos: u64, kind: Option<&FrameHeader>) -> Result<Option<FrameHeader>, ()> {
    let Some(h) = es.get::<4>(pos).and_then(FrameHeader::parse) else {
        return Ok(None);
    };
    if kind.is_some_and(|k| !k.same_stream(&h)) {
        return Ok(None);
    }
    let next = pos + u64::from(h.len);
    if next > es.len {
        return Err(());
    }
    if next == es.len {
        return Ok(Some(h));
    }
    let follows = es
        .get::<4>(next)
        .and_then(FrameHeader::parse)
        .is_some_and(|n| n.same_stream(&h));
    Ok(follows.then_some(h))
}

/// Packets of every frame of an MPEG audio stream; times count frames from 0.
pub(crate) fn packetize(es: &Es, skip_vbr_header: bool) -> Result<(Timed, AudioInfo), FormatError> {
    let mut timed = Timed::default();
    let mut first: Option<FrameHeader> = None;
    let (mut skipped, mut resyncs, mut truncated) = (0, 0, 0);
    let mut samples = 0u64;
    let mut pos = 0;
    let mut in_sync = true;
    let max = MAX_RTP_PAYLOAD as u64 - HEADER_LEN;
    while pos < es.len {
        let h = match frame_at(es, pos, first.as_ref()) {
            Ok(Some(h)) => h,
            Err(()) if first.is_some() => {
                truncated = es.len - pos;
                break;
            }
            _ => {
                let next = es.find_byte(pos + 1, 0xff).unwrap_or(es.len);
                skipped += next - pos;
                if in_sync && first.is_some() {
                    resyncs += 1;
                }
                in_sync = false;
                pos = next;
                continue;
            }
        };
        in_sync = true;
        let len = u64::from(h.len);
        if first.is_none() {
            first = Some(h);
            if skip_vbr_header && h.is_vbr_header(es, pos) {
                pos += len;
                continue;
            }
        }
        let pts = mul_div(samples, 1_000_000_000, u64::from(h.sample_rate));
        samples += u64::from(h.samples);
        timed.units.push(Unit {
            first_pkt: timed.packets.len() as u32,
            pos,
            pts,
            dts: pts,
            dur: mul_div(samples, 1_000_000_000, u64::from(h.sample_rate)) - pts,
            key: false,
        });
        let mut p = pos;
        while p < pos + len {
            let n = es.fit(p, (pos + len - p).min(max));
            if n == 0 {
                break;
            }
            let frag = u16::try_from(p - pos).unwrap_or(u16::MAX).to_be_bytes();
            timed
                .packets
                .push(es.record(&[0, 0, frag[0], frag[1]], p, n));
            p += n;
        }
        pos += len;
    }
    match first {
        Some(first) if !timed.units.is_empty() => Ok((
            timed,
            AudioInfo {
                first,
                skipped,
                resyncs,
                truncated,
            },
        )),
        _ => Err(FormatError::Invalid(
            "MPEG audio: no complete frame found".to_owned(),
        )),
    }
}

/// Length of the ID3v2 tags at the start of `data`.
fn id3v2_len(data: &[u8]) -> usize {
    let mut at = 0;
    while let Some(h) = data.get(at..at + 10).filter(|h| h.starts_with(b"ID3")) {
        let size = h[6..10]
            .iter()
            .fold(0usize, |a, &b| (a << 7) | usize::from(b & 0x7f));
        let footer = if h[5] & 0x10 != 0 { 10 } else { 0 };
        at += 10 + size + footer;
    }
    at.min(data.len())
}

/// End of the audio once ID3v1 and APEv2 tags at the end of `data` are cut.
fn tags_end(data: &[u8], start: usize) -> usize {
    let mut end = data.len();
    loop {
        let tail = &data[start..end];
        if tail.len() >= 128 && tail[tail.len() - 128..].starts_with(b"TAG") {
            end -= 128;
            continue;
        }
        if let Some(f) = tail
            .len()
            .checked_sub(32)
            .map(|at| &tail[at..])
            .filter(|f| f.starts_with(b"APETAGEX"))
        {
            // The size counts the 32-byte footer: at least that much goes,
            // so a bogus size cannot stall the loop.
            let size = u32::from_le_bytes([f[12], f[13], f[14], f[15]]) as usize;
            let header = if f[23] & 0x80 != 0 { 32 } else { 0 };
            end -= size.saturating_add(header).clamp(32, tail.len());
            continue;
        }
        return end;
    }
}

/// Whether `head` starts like an MPEG audio file: an ID3v2 tag, or a few
/// frames in a row near the start.
pub fn looks_like_mpeg_audio(head: &[u8]) -> bool {
    let start = id3v2_len(head);
    if start > 0 {
        return true;
    }
    let es = Es::contiguous(head, 0, head.len());
    let mut pos = 0;
    while let Some(p) = es.find_byte(pos, 0xff).filter(|&p| p < 4096) {
        let mut at = p;
        let mut kind = None;
        let mut n = 0;
        while n < SNIFF_FRAMES {
            match es.get::<4>(at).and_then(FrameHeader::parse) {
                Some(h) if kind.is_none_or(|k: FrameHeader| k.same_stream(&h)) => {
                    kind = Some(h);
                    at += u64::from(h.len);
                    n += 1;
                }
                _ => break,
            }
        }
        if n == SNIFF_FRAMES {
            return true;
        }
        pos = p + 1;
    }
    false
}

/// A plan for an MPEG audio file (`.mp3`, `.mp2`).
pub fn plan(data: &[u8]) -> Result<MediaPlan, FormatError> {
    let start = id3v2_len(data);
    let end = tags_end(data, start);
    let es = Es::contiguous(data, start, end);
    let (mut timed, info) = packetize(&es, true)?;
    let (_, duration_ns) = timed.finish(0, 90_000);
    let mut report = IngestReport::new(
        info.first.codec(),
        timed.packets.len() as u64,
        mul_div((end - start) as u64, 8_000_000_000, duration_ns).max(0) as u64,
    );
    report.skipped_bytes = info.skipped;
    report.resyncs = info.resyncs;
    report.truncated_tail_bytes = info.truncated;
    if info.truncated > 0 {
        report.warnings.push(format!(
            "the last frame is cut short ({} bytes); not served",
            info.truncated
        ));
    }
    if info.skipped > 0 {
        report.warnings.push(format!(
            "skipped {} bytes that are not audio frames",
            info.skipped
        ));
    }
    Ok(MediaPlan {
        tracks: vec![TrackPlan {
            desc: track_desc(info.first.layer),
            packets: timed.packets,
            sync: Vec::new(),
            fec: None,
        }],
        duration_ns,
        ts_per_rtp: 0,
        report,
    })
}

//! MPEG-1/2 video elementary streams and their RTP packetization (RFC 2250
//! §3, payload type 32 `MPV/90000`).
//!
//! A picture's sequence, GOP and picture headers open its first packet;
//! packets then carry whole slices, and only a slice too big for one packet
//! is split (B/E bits). Every packet starts with the 4-byte MPEG video header
//! and, for MPEG-2 pictures, the 4-byte extension header copied from the
//! picture coding extension. The marker bit ends each picture.
//!
//! Timing: presentation order comes from `temporal_reference` (reset by each
//! GOP header, else continued modulo 1024), durations from the frame rate,
//! `repeat_first_field` adding a field (progressive sequences: a frame or two)
//! so 3:2 pulldown keeps the true time. The two field pictures of a frame
//! share its timestamp (each still ends with the marker bit: it is a picture).
//! Decoding times trail presentation by the stream's reorder delay.

use crate::es::{Es, Timed, Unit, mul_div};
use crate::format::{FormatError, MAX_RTP_PAYLOAD};
use crate::index::{TrackDesc, TrackKind};
use crate::plan::{FLAG_MARKER, IngestReport, MediaPlan, TrackPlan};

const SEQUENCE_HEADER: u8 = 0xb3;
const EXTENSION: u8 = 0xb5;
const GOP: u8 = 0xb8;
const PICTURE: u8 = 0x00;
const SLICES: std::ops::RangeInclusive<u8> = 0x01..=0xaf;
/// Frame rates by `frame_rate_code` (numerator, denominator).
const FRAME_RATES: [(u64, u64); 9] = [
    (0, 1),
    (24000, 1001),
    (24, 1),
    (25, 1),
    (30000, 1001),
    (30, 1),
    (50, 1),
    (60000, 1001),
    (60, 1),
];

/// The SDP description of an MPV track.
pub fn track_desc() -> TrackDesc {
    TrackDesc {
        kind: TrackKind::Video,
        payload_type: 32,
        clock_rate: 90_000,
        encoding: "MPV".to_owned(),
        channels: 0,
        fmtp: String::new(),
    }
}

/// What the video stream turned out to be.
#[derive(Debug, Clone, Default)]
pub(crate) struct VideoInfo {
    pub mpeg2: bool,
    /// Bytes before the first sequence header, not served.
    pub skipped: u64,
    /// Bytes after the last whole picture (headers without slices).
    pub truncated: u64,
    pub warnings: Vec<String>,
}

impl VideoInfo {
    pub fn codec(&self) -> &'static str {
        if self.mpeg2 {
            "MPEG-2 video"
        } else {
            "MPEG-1 video"
        }
    }
}

/// A plan for a video elementary stream file.
pub fn plan(data: &[u8]) -> Result<MediaPlan, FormatError> {
    let es = Es::contiguous(data, 0, data.len());
    let (mut timed, info) = packetize(&es)?;
    let t0 = timed.start().unwrap_or(0);
    let (sync, duration_ns) = timed.finish(t0, 90_000);
    let mut report = IngestReport::new(
        info.codec(),
        timed.packets.len() as u64,
        mul_div(data.len() as u64, 8_000_000_000, duration_ns).max(0) as u64,
    );
    report.skipped_bytes = info.skipped;
    report.truncated_tail_bytes = info.truncated;
    report.warnings = info.warnings;
    Ok(MediaPlan {
        tracks: vec![TrackPlan {
            desc: track_desc(),
            packets: timed.packets,
            sync,
            fec: None,
        }],
        duration_ns,
        ts_per_rtp: 0,
        report,
    })
}

/// Reads up to 8 bytes at `pos` as a big-endian bit string.
fn bits64(es: &Es, pos: u64) -> u64 {
    let mut b = [0; 8];
    es.read(pos, &mut b);
    u64::from_be_bytes(b)
}

/// `w` bits starting `at` bits into `v` (MSB first).
fn field(v: u64, at: u32, w: u32) -> u32 {
    ((v >> (64 - at - w)) & ((1 << w) - 1)) as u32
}

/// Frame-rate changes: field counts on the decode/display axis to ns.
struct Clock {
    /// (first field, ns at it, rate numerator, denominator).
    spans: Vec<(i64, i64, u64, u64)>,
}

impl Clock {
    fn set_rate(&mut self, at: i64, num: u64, den: u64) {
        if self.spans.last().is_some_and(|s| (s.2, s.3) == (num, den)) {
            return;
        }
        let ns = self.ns(at);
        self.spans.push((at, ns, num, den));
    }

    fn ns(&self, fields: i64) -> i64 {
        let i = self.spans.partition_point(|s| s.0 <= fields).max(1) - 1;
        let Some(&(f0, ns0, num, den)) = self.spans.get(i) else {
            return 0;
        };
        let d = fields - f0;
        let v = mul_div(d.unsigned_abs(), den * 1_000_000_000, 2 * num);
        if d < 0 {
            ns0 - v
        } else {
            ns0.saturating_add(v)
        }
    }
}

/// One coded picture's header fields.
#[derive(Debug, Clone, Copy, Default)]
struct Picture {
    pos: u64,
    tr: u32,
    ptype: u32,
    /// FBV, BFC, FFV, FFC as the RFC 2250 header's low byte.
    vectors: u32,
    /// The picture coding extension as RFC 2250's extension header.
    ext: Option<u32>,
    structure: u32,
    tff: bool,
    rff: bool,
}

impl Picture {
    fn parse(es: &Es, pos: u64) -> Picture {
        let v = bits64(es, pos + 4);
        let ptype = field(v, 10, 3);
        let mut vectors = 0;
        if ptype == 2 || ptype == 3 {
            vectors |= field(v, 29, 4);
        }
        if ptype == 3 {
            vectors |= field(v, 33, 4) << 4;
        }
        Picture {
            pos,
            tr: field(v, 0, 10),
            ptype,
            vectors,
            ext: None,
            structure: 3,
            tff: false,
            rff: false,
        }
    }

    fn coding_extension(&mut self, v: u64) {
        self.ext = Some(field(v, 4, 30));
        self.structure = field(v, 22, 2);
        self.tff = field(v, 24, 1) == 1;
        self.rff = field(v, 30, 1) == 1;
    }

    fn header(&self, s: bool, b: bool, e: bool) -> ([u8; 8], usize) {
        let w = (u32::from(self.ext.is_some()) << 26)
            | (self.tr << 16)
            | (u32::from(s) << 13)
            | (u32::from(b) << 12)
            | (u32::from(e) << 11)
            | (self.ptype << 8)
            | self.vectors;
        let mut out = [0; 8];
        out[..4].copy_from_slice(&w.to_be_bytes());
        match self.ext {
            Some(x) => {
                out[4..].copy_from_slice(&x.to_be_bytes());
                (out, 8)
            }
            None => (out, 4),
        }
    }
}

/// A picture's bytes: the headers before it, then its slices.
struct Item {
    start: u64,
    end: u64,
    slice: bool,
}

/// Decode-order facts per frame, for the presentation-time pass.
struct FrameTiming {
    /// Temporal reference continued across GOPs (frame units).
    order: i64,
    /// Display length in fields.
    fields: i64,
    /// Fields decoded before it.
    decoded: i64,
}

/// Packets and (relative) times of every picture of a video stream.
pub(crate) fn packetize(es: &Es) -> Result<(Timed, VideoInfo), FormatError> {
    let codes = es.start_codes();
    let Some(first) = codes.iter().position(|c| c.1 == SEQUENCE_HEADER) else {
        return Err(FormatError::Invalid(
            "MPEG video: no sequence header found".to_owned(),
        ));
    };
    let mut info = VideoInfo {
        skipped: codes[first].0,
        ..VideoInfo::default()
    };
    let mut timed = Timed::default();
    let mut frames: Vec<FrameTiming> = Vec::new();
    let mut clock = Clock { spans: Vec::new() };
    let mut base = (0, 1);
    let mut rate = base;
    let mut progressive_seq = false;
    let mut decoded = 0i64;
    let mut tr_base = 0i64;
    let mut last_order: Option<(i64, u32)> = None;
    let mut open_field: Option<u32> = None;
    let mut items: Vec<Item> = Vec::new();
    let mut orphan_slices = 0u64;

    let mut i = first;
    while i < codes.len() {
        // Headers up to the first slice.
        let hdr_start = codes[i].0;
        let mut has_seq = false;
        let mut gop = false;
        let mut pic: Option<Picture> = None;
        while i < codes.len() && !SLICES.contains(&codes[i].1) {
            let (pos, code) = codes[i];
            match code {
                SEQUENCE_HEADER => {
                    has_seq = true;
                    let code = field(bits64(es, pos + 4), 28, 4) as usize;
                    base = FRAME_RATES.get(code).copied().unwrap_or((0, 1));
                    rate = base;
                }
                EXTENSION => {
                    let v = bits64(es, pos + 4);
                    match (field(v, 0, 4), pic.as_mut()) {
                        (1, _) => {
                            info.mpeg2 = true;
                            progressive_seq = field(v, 12, 1) == 1;
                            let (n, d) = (field(v, 41, 2), field(v, 43, 5));
                            rate = (base.0 * u64::from(n + 1), base.1 * u64::from(d + 1));
                        }
                        (8, Some(p)) => p.coding_extension(v),
                        _ => {}
                    }
                }
                GOP => gop = true,
                PICTURE => pic = Some(Picture::parse(es, pos)),
                _ => {}
            }
            i += 1;
        }
        let Some(pic) = pic.filter(|_| i < codes.len()) else {
            if i < codes.len() {
                // Slices without a picture header: undecodable, skip them.
                i += codes[i..]
                    .iter()
                    .position(|c| !SLICES.contains(&c.1))
                    .unwrap_or(codes.len() - i);
                orphan_slices += codes.get(i).map_or(es.len, |c| c.0) - hdr_start;
                continue;
            }
            info.truncated = es.len - hdr_start;
            break;
        };
        if rate.0 == 0 {
            return Err(FormatError::Invalid(
                "MPEG video: invalid frame rate in the sequence header".to_owned(),
            ));
        }
        // The picture's slices, then anything that is not a header
        // (sequence end, user data) rides with the last slice.
        items.clear();
        items.push(Item {
            start: hdr_start,
            end: codes[i].0,
            slice: false,
        });
        while i < codes.len() && !matches!(codes[i].1, SEQUENCE_HEADER | GOP | PICTURE) {
            if SLICES.contains(&codes[i].1) {
                if let Some(last) = items.last_mut() {
                    last.end = codes[i].0;
                }
                items.push(Item {
                    start: codes[i].0,
                    end: es.len,
                    slice: true,
                });
            }
            i += 1;
        }
        let end = codes.get(i).map_or(es.len, |c| c.0);
        if let Some(last) = items.last_mut() {
            last.end = end;
        }

        // A second field shares its frame's unit and time.
        let field_pic = pic.structure != 3;
        let second_field = field_pic && open_field.is_some_and(|s| s != pic.structure);
        open_field = (field_pic && !second_field).then_some(pic.structure);
        let first_pkt = timed.packets.len() as u32;
        emit_picture(es, &pic, &items, has_seq, &mut timed);
        if second_field {
            continue;
        }
        clock.set_rate(decoded, rate.0, rate.1);
        if gop {
            tr_base = frames.len() as i64;
            last_order = None;
        }
        let order = match last_order {
            Some((o, tr)) => o + ((i64::from(pic.tr) - i64::from(tr) + 512).rem_euclid(1024) - 512),
            None => tr_base + i64::from(pic.tr),
        };
        last_order = Some((order, pic.tr));
        let fields = match (pic.rff, progressive_seq, pic.tff) {
            (false, _, _) => 2,
            (true, false, _) => 3,
            (true, true, false) => 4,
            (true, true, true) => 6,
        };
        frames.push(FrameTiming {
            order,
            fields,
            decoded,
        });
        decoded += fields;
        timed.units.push(Unit {
            first_pkt,
            pos: pic.pos,
            pts: 0,
            dts: 0,
            dur: 0,
            key: pic.ptype == 1,
        });
    }
    if timed.units.is_empty() {
        return Err(FormatError::Invalid(
            "MPEG video: no complete picture found".to_owned(),
        ));
    }
    if orphan_slices > 0 {
        info.skipped += orphan_slices;
        info.warnings.push(format!(
            "skipped {orphan_slices} bytes of slices without a picture header"
        ));
    }

    // Presentation order: sort by continued temporal reference; each frame
    // shows after the ones before it, for their durations.
    let mut display: Vec<usize> = (0..frames.len()).collect();
    display.sort_by_key(|&k| (frames[k].order, k));
    let mut shown = vec![0i64; frames.len()];
    let mut at = 0i64;
    for &k in &display {
        shown[k] = at;
        at += frames[k].fields;
    }
    let delay = frames
        .iter()
        .zip(&shown)
        .map(|(f, &s)| f.decoded - s)
        .max()
        .unwrap_or(0)
        .max(0);
    for ((u, f), &s) in timed.units.iter_mut().zip(&frames).zip(&shown) {
        u.pts = clock.ns(s);
        u.dts = clock.ns(f.decoded - delay);
        u.dur = clock.ns(s + f.fields) - u.pts;
    }
    Ok((timed, info))
}

/// Packs one picture: headers and whole slices while they fit, a slice too
/// big for a packet alone in fragments. In a program stream a packet also
/// ends where it would need a third file run.
fn emit_picture(es: &Es, pic: &Picture, items: &[Item], has_seq: bool, timed: &mut Timed) {
    let plen = pic.header(false, false, false).1;
    let max = (MAX_RTP_PAYLOAD - plen) as u64;
    let mut push = |s: bool, b: bool, e: bool, pos: u64, n: u64| {
        let (h, l) = pic.header(s, b, e);
        timed.packets.push(es.record(&h[..l], pos, n));
    };
    let mut k = 0;
    while k < items.len() {
        let start = items[k].start;
        let mut j = k;
        while j < items.len()
            && items[j].end - start <= max
            && es.runs(start, items[j].end - start).is_some()
        {
            j += 1;
        }
        if j > k {
            let b = items[k].slice || j > k + 1;
            push(
                k == 0 && has_seq,
                b,
                items[j - 1].slice,
                start,
                items[j - 1].end - start,
            );
            k = j;
            continue;
        }
        let it = &items[k];
        let mut p = it.start;
        while p < it.end {
            let n = es.fit(p, (it.end - p).min(max));
            if n == 0 {
                break;
            }
            push(
                k == 0 && has_seq && p == it.start,
                it.slice && p == it.start,
                it.slice && p + n == it.end,
                p,
                n,
            );
            p += n;
        }
        k += 1;
    }
    if let Some(last) = timed.packets.last_mut() {
        last.flags |= FLAG_MARKER;
    }
}

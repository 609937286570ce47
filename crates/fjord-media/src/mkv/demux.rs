//! Matroska/WebM structure to frames: the tracks, every frame's track,
//! presentation time, key-frame flag and byte range in the file (blocks of
//! SimpleBlock and BlockGroup, Xiph, EBML and fixed lacing, clusters of
//! known or unknown size), and the seek index (Cues, or rebuilt from key
//! frames when the file has none). Of a frame's payload only its first two
//! bytes are read ([`Frame::lead`]: what fragmenting asks of them, so a
//! frame table can carry it, [`super::table`]).

use memchr::memmem;

use super::ebml::{self, Children, Element, HeaderError};
use crate::format::FormatError;

const EBML: u32 = 0x1a45_dfa3;
const DOC_TYPE: u32 = 0x4282;
const SEGMENT: u32 = 0x1853_8067;
const INFO: u32 = 0x1549_a966;
const TIMESTAMP_SCALE: u32 = 0x2a_d7b1;
const DURATION: u32 = 0x4489;
const TRACKS: u32 = 0x1654_ae6b;
const TRACK_ENTRY: u32 = 0xae;
const TRACK_NUMBER: u32 = 0xd7;
const TRACK_TYPE: u32 = 0x83;
const CODEC_ID: u32 = 0x86;
const CODEC_PRIVATE: u32 = 0x63a2;
const DEFAULT_DURATION: u32 = 0x23_e383;
const VIDEO: u32 = 0xe0;
const PIXEL_WIDTH: u32 = 0xb0;
const PIXEL_HEIGHT: u32 = 0xba;
const COLOUR: u32 = 0x55b0;
const MATRIX_COEFFICIENTS: u32 = 0x55b1;
const TRANSFER_CHARACTERISTICS: u32 = 0x55ba;
const PRIMARIES: u32 = 0x55bb;
const CODEC_DELAY: u32 = 0x56aa;
const AUDIO: u32 = 0xe1;
const SAMPLING_FREQUENCY: u32 = 0xb5;
const CHANNELS: u32 = 0x9f;
const CONTENT_ENCODINGS: u32 = 0x6d80;
const CLUSTER: u32 = 0x1f43_b675;
const CLUSTER_TIMESTAMP: u32 = 0xe7;
const SIMPLE_BLOCK: u32 = 0xa3;
const BLOCK_GROUP: u32 = 0xa0;
const BLOCK: u32 = 0xa1;
const REFERENCE_BLOCK: u32 = 0xfb;
const CUES: u32 = 0x1c53_bb6b;
const CUE_POINT: u32 = 0xbb;
const CUE_TIME: u32 = 0xb3;
const CUE_TRACK_POSITIONS: u32 = 0xb7;
const CUE_TRACK: u32 = 0xf7;
const CUE_CLUSTER_POSITION: u32 = 0xf1;
/// Elements that end a cluster of unknown size (the segment's children).
const LEVEL1: [u32; 10] = [
    CLUSTER,
    CUES,
    INFO,
    TRACKS,
    0x114d_9b74, // SeekHead
    0x1043_a770, // Chapters
    0x1254_c367, // Tags
    0x1941_a469, // Attachments
    EBML,
    SEGMENT,
];

pub(crate) fn invalid(msg: impl Into<String>) -> FormatError {
    FormatError::Invalid(format!("Matroska: {}", msg.into()))
}

/// Whether `head` starts with an EBML header naming a Matroska or WebM
/// document.
pub fn looks_like_matroska(head: &[u8]) -> bool {
    let Ok((e, _)) = ebml::header_cut(head, 0, head.len()) else {
        return false;
    };
    e.id == EBML && doc_type(head, &e).is_some()
}

/// The DocType of an EBML header if it is "matroska" or "webm".
fn doc_type(data: &[u8], header: &Element) -> Option<String> {
    Children::of(data, header)
        .map_while(Result::ok)
        .find(|c| c.id == DOC_TYPE)
        .and_then(|c| ebml::string(data, &c))
        .filter(|t| matches!(*t, "matroska" | "webm"))
        .map(str::to_owned)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Video,
    Audio,
    Other,
}

/// One TrackEntry.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackEntry {
    /// Byte range of the whole TrackEntry element in the file.
    pub element: (usize, usize),
    pub number: u64,
    pub kind: Kind,
    pub codec_id: String,
    /// Byte range of CodecPrivate in the file.
    pub private: Option<(usize, usize)>,
    pub default_duration_ns: Option<u64>,
    pub sampling_rate: f64,
    pub channels: u8,
    /// Video: PixelWidth and PixelHeight (0 when the file says none).
    pub size: (u16, u16),
    /// Video: the Colour element's primaries, transfer characteristics and
    /// matrix coefficients (ITU-T H.273 code points; 2, unspecified, when
    /// the file says none).
    pub colour: [u8; 3],
    /// CodecDelay, ns: what the decoder's output starts with and a player
    /// drops (Opus's pre-skip); block times include it.
    pub codec_delay_ns: u64,
    /// Has ContentEncodings (compression, encryption): its frames are not
    /// the codec's bytes.
    pub encoded: bool,
}

/// One frame: where it is and when it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Presentation time, ns (the file's own origin; may be negative).
    pub time_ns: i64,
    pub offset: u64,
    pub size: u32,
    pub key: bool,
    /// A lace's second or later frame: its time is the block's plus the
    /// track's default duration per frame, or the block's when it has none.
    pub laced: bool,
    /// Its first two bytes (the second 0 in a one-byte frame): a VP8/VP9
    /// frame's key flag, an Opus packet's TOC and frame count.
    pub lead: [u8; 2],
}

/// A place to start playing: a key frame's time and its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cue {
    pub time_ns: i64,
    pub track: u64,
    /// File offset of the cluster's header.
    pub cluster: u64,
}

/// What a Matroska file holds.
#[derive(Debug, Clone, Default)]
pub struct Demuxed {
    pub doc_type: String,
    pub tracks: Vec<TrackEntry>,
    /// Per track (same order), in file order.
    pub frames: Vec<Vec<Frame>>,
    /// From the file's Cues, or rebuilt from key frames ([`Demuxed::cues_rebuilt`]).
    pub cues: Vec<Cue>,
    pub cues_rebuilt: bool,
    pub duration_ns: Option<u64>,
    /// Where the first Cluster starts: what is before it (the EBML header,
    /// Info, Tracks) is the file's head.
    pub clusters_at: Option<u64>,
    /// Bytes of blocks cut off by the end of the file.
    pub truncated_bytes: u64,
    /// Bytes skipped to find the next cluster after a broken one.
    pub skipped_bytes: u64,
    pub resyncs: u64,
    pub warnings: Vec<String>,
}

/// Reads the whole file's structure.
pub fn demux(data: &[u8], progress: &mut dyn FnMut(u64)) -> Result<Demuxed, FormatError> {
    let (head, _) = ebml::header_cut(data, 0, data.len()).map_err(|_| invalid("no EBML header"))?;
    let doc_type = doc_type(data, &head)
        .filter(|_| head.id == EBML)
        .ok_or_else(|| invalid("the EBML header names no Matroska or WebM document"))?;
    let (segment, _) = ebml::header_cut(data, head.end, data.len())
        .map_err(|_| invalid("the file ends before its Segment"))?;
    if segment.id != SEGMENT {
        return Err(invalid(format!(
            "a Segment should follow the EBML header; found element 0x{:x}",
            segment.id
        )));
    }
    let mut d = Demuxer {
        data,
        segment,
        scale: 1_000_000,
        out: Demuxed {
            doc_type,
            ..Demuxed::default()
        },
        raw_cues: Vec::new(),
        broken_laces: 0,
    };
    d.walk(progress)?;
    d.finish()
}

struct Demuxer<'a> {
    data: &'a [u8],
    segment: Element,
    /// TimestampScale: ns per tick.
    scale: u64,
    out: Demuxed,
    /// CueTime ticks, track, position relative to the segment body.
    raw_cues: Vec<(u64, u64, u64)>,
    /// Blocks whose lacing does not fit them (skipped).
    broken_laces: u64,
}

impl Demuxer<'_> {
    /// The segment's children in order; a broken cluster is skipped up to
    /// the next cluster ID.
    fn walk(&mut self, progress: &mut dyn FnMut(u64)) -> Result<(), FormatError> {
        let (data, end) = (self.data, self.segment.end);
        let mut pos = self.segment.body;
        while pos < end {
            let (e, cut) = match ebml::header_cut(data, pos, end) {
                Ok(h) => h,
                Err(HeaderError::Truncated) => {
                    self.out.truncated_bytes += (end - pos) as u64;
                    break;
                }
                Err(HeaderError::Malformed) => {
                    pos = self.resync(pos + 1)?;
                    continue;
                }
            };
            pos = match e.id {
                CLUSTER => {
                    self.out.clusters_at.get_or_insert(e.start as u64);
                    self.cluster(&e, cut)?
                }
                INFO | TRACKS | CUES if cut => return Err(truncated_in(e.id)),
                INFO => self.info(&e),
                TRACKS => self.tracks(&e)?,
                CUES => self.cues(&e),
                _ if e.unknown_size => {
                    return Err(invalid("an element of unknown size other than a Cluster"));
                }
                _ => e.end,
            };
            progress(pos as u64);
        }
        Ok(())
    }

    /// Where the next cluster starts at or after `from`, counting what is
    /// skipped; the segment's end when there is none.
    fn resync(&mut self, from: usize) -> Result<usize, FormatError> {
        if self.out.tracks.is_empty() {
            return Err(invalid(format!("unreadable element at byte {}", from - 1)));
        }
        let end = self.segment.end.min(self.data.len());
        let from = from.min(end);
        let at =
            memmem::find(&self.data[from..end], &CLUSTER.to_be_bytes()).map_or(end, |k| from + k);
        self.out.skipped_bytes += (at - from + 1) as u64;
        self.out.resyncs += 1;
        Ok(at)
    }

    fn info(&mut self, e: &Element) -> usize {
        let mut duration = None;
        for c in Children::of(self.data, e).map_while(Result::ok) {
            match c.id {
                TIMESTAMP_SCALE => {
                    self.scale = ebml::uint(self.data, &c)
                        .filter(|&s| s > 0)
                        .unwrap_or(self.scale);
                }
                DURATION => duration = ebml::float(self.data, &c),
                _ => {}
            }
        }
        // Duration counts in TimestampScale ticks, whichever came first.
        self.out.duration_ns = duration
            .filter(|d| d.is_finite() && *d > 0.0)
            .map(|d| (d * self.scale as f64) as u64);
        e.end
    }

    fn tracks(&mut self, e: &Element) -> Result<usize, FormatError> {
        for c in Children::of(self.data, e) {
            let c = c.map_err(|_| invalid("unreadable Tracks"))?;
            if c.id != TRACK_ENTRY {
                continue;
            }
            let t = track_entry(self.data, &c)?;
            if self.out.tracks.iter().any(|o| o.number == t.number) {
                return Err(invalid(format!("two tracks numbered {}", t.number)));
            }
            self.out.tracks.push(t);
            self.out.frames.push(Vec::new());
        }
        Ok(e.end)
    }

    fn cues(&mut self, e: &Element) -> usize {
        for point in Children::of(self.data, e).map_while(Result::ok) {
            if point.id != CUE_POINT {
                continue;
            }
            let mut time = None;
            for c in Children::of(self.data, &point).map_while(Result::ok) {
                match c.id {
                    CUE_TIME => time = ebml::uint(self.data, &c),
                    CUE_TRACK_POSITIONS => {
                        let (mut track, mut cluster) = (None, None);
                        for p in Children::of(self.data, &c).map_while(Result::ok) {
                            match p.id {
                                CUE_TRACK => track = ebml::uint(self.data, &p),
                                CUE_CLUSTER_POSITION => cluster = ebml::uint(self.data, &p),
                                _ => {}
                            }
                        }
                        if let (Some(t), Some(track), Some(cluster)) = (time, track, cluster) {
                            self.raw_cues.push((t, track, cluster));
                        }
                    }
                    _ => {}
                }
            }
        }
        e.end
    }

    /// Reads one cluster; returns where the next element starts.
    fn cluster(&mut self, e: &Element, cut: bool) -> Result<usize, FormatError> {
        let data = self.data;
        let mut ts = 0u64;
        let mut pos = e.body;
        let mut cue_pending = true;
        while pos < e.end {
            let (c, child_cut) = match ebml::header_cut(data, pos, e.end) {
                Ok(h) => h,
                Err(HeaderError::Truncated) if cut || e.unknown_size => {
                    self.out.truncated_bytes += (e.end - pos) as u64;
                    return Ok(e.end);
                }
                Err(_) => return self.resync(pos + 1),
            };
            if e.unknown_size && LEVEL1.contains(&c.id) {
                return Ok(pos);
            }
            if child_cut && !(cut || e.unknown_size) {
                return self.resync(pos + 1);
            }
            if child_cut {
                self.out.truncated_bytes += (c.end - c.start) as u64;
                return Ok(e.end);
            }
            let block = match c.id {
                CLUSTER_TIMESTAMP => {
                    ts = ebml::uint(data, &c).unwrap_or(0);
                    None
                }
                SIMPLE_BLOCK => Some((c.body, c.end, None)),
                BLOCK_GROUP => block_group(data, &c),
                _ => None,
            };
            if let Some((start, end, key)) = block {
                let first_key = self.block(start, end, ts, key)?;
                if let Some(track) = first_key.filter(|_| cue_pending) {
                    cue_pending = !self.rebuilt_cue(track, e.start);
                }
            }
            pos = c.end;
        }
        Ok(e.end)
    }

    /// Notes a cue for a cluster whose first key frame of the cue track
    /// (the first video track, else the first track) was just read;
    /// whether it was one.
    fn rebuilt_cue(&mut self, track: usize, cluster: usize) -> bool {
        let cue_track = self
            .out
            .tracks
            .iter()
            .position(|t| t.kind == Kind::Video)
            .unwrap_or(0);
        if track != cue_track {
            return false;
        }
        let Some(f) = self.out.frames[track].last() else {
            return false;
        };
        self.out.cues.push(Cue {
            time_ns: f.time_ns,
            track: self.out.tracks[track].number,
            cluster: cluster as u64,
        });
        true
    }

    /// Reads the block at `data[start..end]` in a cluster at `cluster_ts`;
    /// `key` is `None` for a SimpleBlock (its flags say). Returns the track
    /// index when the block was a key frame.
    fn block(
        &mut self,
        start: usize,
        end: usize,
        cluster_ts: u64,
        key: Option<bool>,
    ) -> Result<Option<usize>, FormatError> {
        let data = self.data;
        let Ok((number, n, _)) = ebml::vint(&data[..end], start) else {
            return Ok(None);
        };
        let Some(track) = self.out.tracks.iter().position(|t| t.number == number) else {
            return Ok(None);
        };
        let Some(&[hi, lo, flags]) = data[..end].get(start + n..start + n + 3) else {
            return Ok(None);
        };
        let rel = i64::from(i16::from_be_bytes([hi, lo]));
        let ticks = i64::try_from(cluster_ts)
            .unwrap_or(i64::MAX)
            .saturating_add(rel);
        let time_ns = ticks.saturating_mul(i64::try_from(self.scale).unwrap_or(i64::MAX));
        let key = key.unwrap_or(flags & 0x80 != 0);
        let Some(sizes) = lace(data, start + n + 3, end, (flags >> 1) & 3) else {
            self.broken_laces += 1;
            return Ok(None);
        };
        let step = self.out.tracks[track].default_duration_ns.unwrap_or(0);
        let mut offset = (start + n + 3 + sizes.header) as u64;
        for (i, &size) in sizes.frames.iter().enumerate() {
            if size > 0 {
                self.out.frames[track].push(Frame {
                    time_ns: time_ns.saturating_add((step as i64).saturating_mul(i as i64)),
                    offset,
                    size: u32::try_from(size).map_err(|_| FormatError::TooLarge)?,
                    key: key && i == 0,
                    laced: i > 0,
                    lead: lead(data, offset as usize, size),
                });
            }
            offset += size as u64;
        }
        Ok(key.then_some(track))
    }

    /// The result, with times in ns and the cues rebuilt if the file had none.
    fn finish(mut self) -> Result<Demuxed, FormatError> {
        if self.out.tracks.is_empty() {
            return Err(invalid("no Tracks before the end of the file (truncated?)"));
        }
        if self.broken_laces > 0 {
            self.out.warnings.push(format!(
                "{} blocks with broken lacing; skipped",
                self.broken_laces
            ));
        }
        if !self.raw_cues.is_empty() {
            let base = self.segment.body as u64;
            let scale = i64::try_from(self.scale).unwrap_or(i64::MAX);
            self.out.cues = self
                .raw_cues
                .iter()
                .map(|&(t, track, pos)| Cue {
                    time_ns: i64::try_from(t).unwrap_or(i64::MAX).saturating_mul(scale),
                    track,
                    cluster: base.saturating_add(pos),
                })
                .collect();
        } else {
            self.out.cues_rebuilt = true;
        }
        Ok(self.out)
    }
}

/// The first two bytes of the frame at `data[at..at + size]`.
fn lead(data: &[u8], at: usize, size: usize) -> [u8; 2] {
    let byte = |k: usize| data.get(at + k).copied().filter(|_| k < size).unwrap_or(0);
    [byte(0), byte(1)]
}

fn truncated_in(id: u32) -> FormatError {
    let what = match id {
        INFO => "Info",
        TRACKS => "Tracks",
        _ => "Cues",
    };
    invalid(format!("the file ends inside its {what} (truncated?)"))
}

/// The Block of a BlockGroup and whether it is a key frame (no
/// ReferenceBlock).
fn block_group(data: &[u8], g: &Element) -> Option<(usize, usize, Option<bool>)> {
    let mut block = None;
    let mut key = true;
    for c in Children::of(data, g).map_while(Result::ok) {
        match c.id {
            BLOCK => block = Some((c.body, c.end)),
            REFERENCE_BLOCK => key = false,
            _ => {}
        }
    }
    block.map(|(s, e)| (s, e, Some(key)))
}

fn track_entry(data: &[u8], e: &Element) -> Result<TrackEntry, FormatError> {
    let mut t = TrackEntry {
        element: (e.start, e.end),
        number: 0,
        kind: Kind::Other,
        codec_id: String::new(),
        private: None,
        default_duration_ns: None,
        sampling_rate: 8000.0,
        channels: 1,
        size: (0, 0),
        colour: [2; 3],
        codec_delay_ns: 0,
        encoded: false,
    };
    for c in Children::of(data, e) {
        let c = c.map_err(|_| invalid("unreadable TrackEntry"))?;
        match c.id {
            TRACK_NUMBER => t.number = ebml::uint(data, &c).unwrap_or(0),
            TRACK_TYPE => {
                t.kind = match ebml::uint(data, &c) {
                    Some(1) => Kind::Video,
                    Some(2) => Kind::Audio,
                    _ => Kind::Other,
                }
            }
            CODEC_ID => t.codec_id = ebml::string(data, &c).unwrap_or_default().to_owned(),
            CODEC_PRIVATE => t.private = Some((c.body, c.end)),
            DEFAULT_DURATION => t.default_duration_ns = ebml::uint(data, &c).filter(|&d| d > 0),
            CONTENT_ENCODINGS => t.encoded = true,
            CODEC_DELAY => t.codec_delay_ns = ebml::uint(data, &c).unwrap_or(0),
            VIDEO => (t.size, t.colour) = video(data, &c),
            AUDIO => {
                for a in Children::of(data, &c).map_while(Result::ok) {
                    match a.id {
                        SAMPLING_FREQUENCY => {
                            t.sampling_rate = ebml::float(data, &a).unwrap_or(t.sampling_rate)
                        }
                        CHANNELS => {
                            t.channels = ebml::uint(data, &a).map_or(1, |n| n.min(255) as u8)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if t.number == 0 {
        return Err(invalid("a TrackEntry without a TrackNumber"));
    }
    Ok(t)
}

/// PixelWidth and PixelHeight of a Video element, and its Colour.
fn video(data: &[u8], video: &Element) -> ((u16, u16), [u8; 3]) {
    let (mut size, mut colour) = ((0, 0), [2; 3]);
    for c in Children::of(data, video).map_while(Result::ok) {
        let v = || ebml::uint(data, &c).map_or(0, |n| n.min(u64::from(u16::MAX)) as u16);
        match c.id {
            PIXEL_WIDTH => size.0 = v(),
            PIXEL_HEIGHT => size.1 = v(),
            COLOUR => colour = colour_of(data, &c),
            _ => {}
        }
    }
    (size, colour)
}

/// A Colour element's primaries, transfer and matrix (code points past
/// 255 are none H.273 defines: unspecified).
fn colour_of(data: &[u8], colour: &Element) -> [u8; 3] {
    let mut out = [2; 3];
    for c in Children::of(data, colour).map_while(Result::ok) {
        let at = match c.id {
            PRIMARIES => 0,
            TRANSFER_CHARACTERISTICS => 1,
            MATRIX_COEFFICIENTS => 2,
            _ => continue,
        };
        out[at] = ebml::uint(data, &c).map_or(2, |v| u8::try_from(v).unwrap_or(2));
    }
    out
}

/// The frame sizes of a block's payload at `data[pos..end]`.
struct Laced {
    /// Bytes of lacing header before the first frame.
    header: usize,
    frames: Vec<usize>,
}

/// Reads the lacing (0 none, 1 Xiph, 2 fixed, 3 EBML) of the payload at
/// `data[pos..end]`; `None` if the sizes do not fit it.
fn lace(data: &[u8], pos: usize, end: usize, lacing: u8) -> Option<Laced> {
    let b = data.get(pos..end)?;
    if lacing == 0 {
        return Some(Laced {
            header: 0,
            frames: vec![b.len()],
        });
    }
    let count = usize::from(*b.first()?) + 1;
    let mut at = 1;
    let mut frames = Vec::with_capacity(count);
    match lacing {
        1 => {
            for _ in 1..count {
                let mut size = 0;
                loop {
                    let v = *b.get(at)?;
                    at += 1;
                    size += usize::from(v);
                    if v != 255 {
                        break;
                    }
                }
                frames.push(size);
            }
        }
        3 if count > 1 => {
            let (first, n, _) = ebml::vint(b, at).ok()?;
            at += n;
            let mut size = i64::try_from(first).ok()?;
            frames.push(first as usize);
            for _ in 2..count {
                let (raw, n, _) = ebml::vint(b, at).ok()?;
                at += n;
                // Signed: the value minus half its range.
                size = size.checked_add(raw as i64 - ((1i64 << (7 * n - 1)) - 1))?;
                frames.push(usize::try_from(size).ok()?);
            }
        }
        3 => {}
        _ => {
            let left = b.len() - at;
            if left % count != 0 {
                return None;
            }
            frames = vec![left / count; count];
            return Some(Laced { header: at, frames });
        }
    }
    let used = frames.iter().try_fold(at, |a, &f| a.checked_add(f))?;
    frames.push(b.len().checked_sub(used)?);
    Some(Laced { header: at, frames })
}

#[cfg(test)]
#[path = "demux_tests.rs"]
mod tests;

//! One track of a WebM title (VP8, VP9, Opus) as DASH WebM segments by
//! reference, for players whose MSE plays these codecs from WebM only
//! (Chromium plays VP8 from WebM, not from MP4): an init segment (EBML
//! header, a Segment of unknown size, Info, and the file's own
//! TrackEntry copied) and, per segment, Clusters of SimpleBlocks whose
//! headers are generated and whose frames are byte ranges of the file.
//! A muxed file's clusters cannot serve a track alone (and dash.js plays
//! no muxed representation), hence the generated clusters. Segments are
//! cut where the fragmented MP4 ones are ([`crate::cmaf::windows`]).

use super::Codec;
use super::demux::{self, Frame};
use super::fragments::{Served, Title, config, title};
use crate::cmaf::{self, Fragment, Fragmented, Part, TrackInfo};
use crate::format::FormatError;

const EBML: u32 = 0x1a45_dfa3;
const SEGMENT: u32 = 0x1853_8067;
const INFO: u32 = 0x1549_a966;
const TRACKS: u32 = 0x1654_ae6b;
const CLUSTER: u32 = 0x1f43_b675;
/// Block times count in milliseconds (TimestampScale 1 000 000 ns).
const MS: i64 = 1_000_000;

/// Track `k` of the WebM title `data` as DASH WebM segments of at least
/// `target_ns`, cut where its fragmented MP4 is.
pub fn track(data: &[u8], target_ns: u64, k: usize) -> Result<Fragmented, FormatError> {
    track_demuxed(data, &demux::demux(data, &mut |_| {})?, target_ns, k)
}

/// [`track`] of the file `data` demuxed as `d` (reading of `data` what
/// [`super::fragments::fragment_demuxed`] does).
pub fn track_demuxed(
    data: &[u8],
    d: &demux::Demuxed,
    target_ns: u64,
    k: usize,
) -> Result<Fragmented, FormatError> {
    if d.doc_type != "webm" {
        return Err(demux::invalid("DASH WebM is made of WebM files only"));
    }
    let Title {
        served, tracks, t0, ..
    } = title(data, d, Some(k))?;
    let s = &served[k];
    if !matches!(s.codec, Codec::Vpx(_) | Codec::Opus { .. }) {
        return Err(demux::invalid("DASH WebM carries VP8, VP9 and Opus only"));
    }
    // The names fragmented MP4 gives them (`vp09.PP.LL.DD`: browsers take
    // no bare `vp9`).
    let codec = config(data, s, &tracks[k])?
        .codec_name()
        .ok_or_else(|| demux::invalid("a codec configuration too short to name"))?;
    let (_, windows) = cmaf::windows(&tracks, target_ns, Some(k));
    let fragments = windows
        .iter()
        .map(|(runs, duration_ns)| Fragment {
            duration_ns: *duration_ns,
            parts: runs
                .first()
                .map_or_else(Vec::new, |(_, r)| clusters(s, &s.frames[r.clone()], t0)),
            key_frame_end: None,
        })
        .collect();
    let video = tracks[k].video;
    let total_ns: u64 = windows.iter().map(|w| w.1).sum();
    Ok(Fragmented::new(
        init(data, s, total_ns),
        fragments,
        vec![TrackInfo {
            video,
            codec,
            sample_rate: (!video).then_some(48_000),
        }],
        video.then_some(s.entry.size),
        video.then(|| tracks[k].frame_rate()).flatten(),
    ))
}

/// EBML header, Segment of unknown size, Info, Tracks with the file's
/// TrackEntry.
fn init(data: &[u8], s: &Served, total_ns: u64) -> Vec<u8> {
    let mut o = Vec::new();
    element(&mut o, EBML, |o| {
        uint(o, 0x4286, 1); // EBMLVersion
        uint(o, 0x42f7, 1); // EBMLReadVersion
        uint(o, 0x42f2, 4); // EBMLMaxIDLength
        uint(o, 0x42f3, 8); // EBMLMaxSizeLength
        element(o, 0x4282, |o| o.extend_from_slice(b"webm"));
        uint(o, 0x4287, 4); // DocTypeVersion
        uint(o, 0x4285, 2); // DocTypeReadVersion
    });
    o.extend_from_slice(&SEGMENT.to_be_bytes());
    o.extend_from_slice(&[0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    element(&mut o, INFO, |o| {
        uint(o, 0x2a_d7b1, MS as u64); // TimestampScale
        element(o, 0x4489, |o| {
            o.extend_from_slice(&(total_ns as f64 / MS as f64).to_be_bytes())
        });
        element(o, 0x4d80, |o| o.extend_from_slice(b"fjord")); // MuxingApp
        element(o, 0x5741, |o| o.extend_from_slice(b"fjord")); // WritingApp
    });
    let (a, b) = s.entry.element;
    element(&mut o, TRACKS, |o| o.extend_from_slice(&data[a..b]));
    o
}

/// `frames` as Clusters: a new one when a block's time no longer fits
/// the 16-bit offset from its cluster's.
fn clusters(s: &Served, frames: &[Frame], t0: i64) -> Vec<Part> {
    let ms = |f: &Frame| (f.time_ns.saturating_sub(t0).max(0) + MS / 2) / MS;
    let mut parts = Vec::with_capacity(frames.len() * 2);
    let mut at = 0;
    while at < frames.len() {
        let base = ms(&frames[at]);
        let n = frames[at..]
            .iter()
            .take_while(|f| ms(f) - base <= i64::from(i16::MAX) && ms(f) >= base)
            .count()
            .max(1);
        cluster(s, &frames[at..at + n], base, &ms, &mut parts);
        at += n;
    }
    parts
}

/// One Cluster at `base` ms holding `frames`, each a SimpleBlock.
fn cluster(
    s: &Served,
    frames: &[Frame],
    base: i64,
    ms: &dyn Fn(&Frame) -> i64,
    parts: &mut Vec<Part>,
) {
    let track = vint(s.entry.number);
    let block_head = 3 + track.len();
    let body: u64 = frames
        .iter()
        .map(|f| 1 + 8 + block_head as u64 + u64::from(f.size))
        .sum();
    let mut head = Vec::new();
    head.extend_from_slice(&CLUSTER.to_be_bytes());
    size8(&mut head, 1 + 8 + 8 + body);
    head.push(0xe7); // Timestamp, 8 bytes
    size8(&mut head, 8);
    head.extend_from_slice(&(base as u64).to_be_bytes());
    for f in frames {
        head.push(0xa3); // SimpleBlock
        size8(&mut head, (block_head as u64) + u64::from(f.size));
        head.extend_from_slice(&track);
        head.extend_from_slice(&((ms(f) - base) as i16).to_be_bytes());
        let key = match s.codec {
            Codec::Vpx(v) => f.key && v.is_key_frame(f.lead[0]),
            _ => true,
        };
        head.push(if key { 0x80 } else { 0 });
        parts.push(Part::Made(std::mem::take(&mut head)));
        parts.push(Part::File {
            offset: f.offset,
            len: u64::from(f.size),
        });
    }
}

/// An element whose body `body` writes (size as 8 bytes).
fn element(o: &mut Vec<u8>, id: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let id = id.to_be_bytes();
    let skip = id.iter().position(|&b| b != 0).unwrap_or(3);
    o.extend_from_slice(&id[skip..]);
    let at = o.len();
    size8(o, 0);
    body(o);
    let len = (o.len() - at - 8) as u64;
    let mut size = Vec::with_capacity(8);
    size8(&mut size, len);
    o[at..at + 8].copy_from_slice(&size);
}

fn uint(o: &mut Vec<u8>, id: u32, v: u64) {
    element(o, id, |o| o.extend_from_slice(&v.to_be_bytes()));
}

/// An EBML size in 8 bytes.
fn size8(o: &mut Vec<u8>, n: u64) {
    let mut b = n.to_be_bytes();
    b[0] = 0x01;
    o.extend_from_slice(&b);
}

/// A track number as the shortest EBML variable-length integer.
fn vint(n: u64) -> Vec<u8> {
    for len in 1..=8u32 {
        if n < (1u64 << (7 * len)) - 1 {
            let mut b = n.to_be_bytes()[8 - len as usize..].to_vec();
            b[0] |= 0x80 >> (len - 1);
            return b;
        }
    }
    vec![0x01, 0, 0, 0, 0, 0, 0, 0]
}

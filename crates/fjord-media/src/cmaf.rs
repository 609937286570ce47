//! Fragmented MP4 (CMAF-style) written by reference, for HLS and DASH: a
//! title's tracks as one init segment (`ftyp` + `moov`) and media
//! segments, each a generated `moof` + `mdat` head followed by byte ranges
//! of the source file. The containers read their own files into
//! [`Track`]s ([`crate::mp4::fragments`] from an MP4's `moov`,
//! [`crate::mkv::fragments`] from a Matroska file's blocks); this module
//! cuts them and writes every box but the tracks' `trak`s. Pure code: never
//! reads a sample's bytes, does no I/O.
//!
//! Segments start at a video sync sample (at least `target_ns` after the
//! previous start) and hold every sample of every track whose decode time
//! falls before the next one; a title without video is cut by time.

pub(crate) mod entry;
pub mod write;

const NS: i128 = 1_000_000_000;

/// A piece of a segment: bytes made here, or bytes of the source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Made(Vec<u8>),
    File { offset: u64, len: u64 },
}

impl Part {
    pub fn len(&self) -> u64 {
        match self {
            Part::Made(b) => b.len() as u64,
            Part::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One media segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub duration_ns: u64,
    pub parts: Vec<Part>,
    /// How many of its bytes, from its start, hold its `moof` and its first
    /// video sample when that is a key frame (an I-frame playlist's byte
    /// range).
    pub key_frame_end: Option<u64>,
}

impl Fragment {
    /// The segment's length in bytes.
    pub fn len(&self) -> u64 {
        self.parts.iter().map(Part::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A title as an init segment and media segments.
#[derive(Clone, Debug)]
pub struct Fragmented {
    pub init: Vec<u8>,
    pub fragments: Vec<Fragment>,
    /// The tracks in the segments, in order.
    pub tracks: Vec<TrackInfo>,
    /// RFC 6381 codec names, comma-separated (`avc1.64001f,mp4a.40.2`).
    pub codecs: String,
    /// Width and height of the video track, if any.
    pub resolution: Option<(u16, u16)>,
    /// Video frames per second, if there is video.
    pub frame_rate: Option<f64>,
}

/// What a manifest says of a track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackInfo {
    pub video: bool,
    /// RFC 6381 name.
    pub codec: String,
    /// Audio: samples per second.
    pub sample_rate: Option<u32>,
}

/// One sample of a track: where its bytes are in the source file and when
/// it is decoded and shown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub offset: u64,
    pub size: u32,
    /// Decode and composition time, media timescale.
    pub dts: i64,
    pub cts: i64,
    pub dur: u32,
    pub sync: bool,
}

/// A track as the segments carry it.
#[derive(Clone)]
pub(crate) struct Track {
    /// Its `track_ID` in the init segment and every `tfhd`.
    pub id: u32,
    pub video: bool,
    /// Media time units per second.
    pub timescale: u32,
    /// Where media time `media_start` lies on the title's timeline, ns.
    pub delay_ns: i128,
    pub media_start: i64,
    pub samples: Vec<Sample>,
}

impl Track {
    /// Media time `t` on the title's timeline, ns.
    fn ns(&self, t: i64) -> i128 {
        let d = (i128::from(t) - i128::from(self.media_start)) * NS;
        let ts = i128::from(self.timescale.max(1));
        self.delay_ns + (d + ts / 2).div_euclid(ts)
    }

    /// Frames per second, from the span of its samples.
    pub fn frame_rate(&self) -> Option<f64> {
        let first = self.samples.first()?;
        let last = self.samples.last()?;
        let span = (self.ns(last.dts + i64::from(last.dur)) - self.ns(first.dts)) as f64;
        (span > 0.0).then(|| self.samples.len() as f64 * NS as f64 / span)
    }
}

/// The media segments of `tracks` (`only`: of that track alone, cut at
/// the same places as all of them, so the tracks' segments align).
pub(crate) fn segments(tracks: &[Track], target_ns: u64, only: Option<usize>) -> Vec<Fragment> {
    let (chosen, windows) = windows(tracks, target_ns, only);
    let mut fragments = Vec::with_capacity(windows.len());
    for (runs, duration_ns) in windows {
        let mut f = media_segment(chosen, &runs, fragments.len() as u32 + 1);
        f.duration_ns = duration_ns;
        fragments.push(f);
    }
    fragments
}

/// The samples of a segment, per track (its place among the chosen
/// ones, and a range of its samples), and the segment's duration.
pub(crate) type Window = (Vec<(usize, std::ops::Range<usize>)>, u64);

/// Where [`segments`] cuts: the tracks chosen (all, or `only`) and each
/// segment's samples of them.
pub(crate) fn windows(
    tracks: &[Track],
    target_ns: u64,
    only: Option<usize>,
) -> (&[Track], Vec<Window>) {
    let video = tracks.iter().position(|t| t.video);
    let bounds = boundaries(tracks, video, target_ns);
    let chosen = match only {
        Some(k) => &tracks[k.min(tracks.len())..(k + 1).min(tracks.len())],
        None => tracks,
    };
    (chosen, cut(chosen, &bounds))
}

/// Decode time of a sample on the title's timeline, ns.
fn dts_ns(t: &Track, s: &Sample) -> i128 {
    t.ns(s.dts)
}

/// Where segments start and the last ends, in ns of the title's
/// timeline: the first sample, then video sync samples at least
/// `target_ns` apart (without video, samples of the first track), then
/// the end of the latest sample.
fn boundaries(sources: &[Track], video: Option<usize>, target_ns: u64) -> Vec<i128> {
    let target = i128::from(target_ns.max(1));
    let first = sources
        .iter()
        .filter_map(|s| s.samples.first().map(|x| dts_ns(s, x)))
        .min()
        .unwrap_or(0);
    let end = sources
        .iter()
        .filter_map(|s| {
            let x = s.samples.last()?;
            Some(s.ns(x.dts + i64::from(x.dur)))
        })
        .max()
        .unwrap_or(first);
    let mut starts = vec![first];
    // Cut at the video's sync samples, or without video at any sample of
    // the first track (all are sync samples): never more segments than
    // samples, whatever the target.
    let t = &sources[video.unwrap_or(0)];
    let mut last = first;
    for s in t.samples.iter().filter(|s| s.sync) {
        let at = dts_ns(t, s);
        if at >= last + target {
            starts.push(at);
            last = at;
        }
    }
    starts.push(end.max(*starts.last().unwrap_or(&first)));
    starts
}

/// The segments between consecutive `bounds`: every track's samples
/// decoded from one to the next (the last takes the rest), lasting from
/// one to the next; none where no track has a sample.
fn cut(sources: &[Track], bounds: &[i128]) -> Vec<Window> {
    let mut next_sample = vec![0usize; sources.len()];
    let mut windows = Vec::with_capacity(bounds.len());
    let last = bounds.len().saturating_sub(2);
    for (k, w) in bounds.windows(2).enumerate() {
        let end = if k == last { i128::MAX } else { w[1] };
        let runs: Vec<(usize, std::ops::Range<usize>)> = sources
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let from = next_sample[i];
                let n = s.samples[from..]
                    .iter()
                    .take_while(|x| dts_ns(s, x) < end)
                    .count();
                next_sample[i] = from + n;
                (i, from..from + n)
            })
            .filter(|(_, r)| !r.is_empty())
            .collect();
        if !runs.is_empty() {
            windows.push((runs, (w[1] - w[0]).max(0) as u64));
        }
    }
    windows
}

/// A `moof` + `mdat` head for `runs` (track, samples) and the sample bytes
/// as file ranges; [`segments`] sets the duration. The `mdat` holds the samples
/// in the file's order, so samples of all tracks that lie together in the
/// file (an interleaved MP4's chunks) are one range, sent by one
/// `sendfile`; each track's `traf` has a `trun` per stretch of its
/// samples that lie together in the `mdat`.
fn media_segment(
    sources: &[Track],
    runs: &[(usize, std::ops::Range<usize>)],
    sequence: u32,
) -> Fragment {
    let sample = |(i, k): (usize, usize)| &sources[i].samples[k];
    let mut order: Vec<(usize, usize)> = runs
        .iter()
        .flat_map(|(i, r)| r.clone().map(move |k| (*i, k)))
        .collect();
    order.sort_by_key(|&ik| sample(ik).offset);
    // Where each sample lands in the mdat's body.
    let mut at = std::collections::HashMap::with_capacity(order.len());
    let mut data_len = 0u64;
    for &ik in &order {
        at.insert(ik, data_len);
        data_len += u64::from(sample(ik).size);
    }
    // Per track, stretches of samples adjacent in the mdat.
    let truns: Vec<(usize, Stretches)> = runs
        .iter()
        .map(|(i, r)| {
            let mut t: Stretches = Vec::new();
            let mut next = None;
            for k in r.clone() {
                let pos = at[&(*i, k)];
                match t.last_mut() {
                    Some((_, range)) if next == Some(pos) => range.end = k + 1,
                    _ => t.push((pos, k..k + 1)),
                }
                next = Some(pos + u64::from(sources[*i].samples[k].size));
            }
            (*i, t)
        })
        .collect();
    let mdat_head = if data_len + 8 > u64::from(u32::MAX) {
        16
    } else {
        8
    };
    // The moof's length does not depend on the data offsets: write it
    // once with zeros to learn it, then for real.
    let moof_len = moof(sources, &truns, sequence, 0).len() as u64;
    let mut head = moof(sources, &truns, sequence, moof_len + mdat_head);
    if mdat_head == 16 {
        head.extend_from_slice(&1u32.to_be_bytes());
        head.extend_from_slice(b"mdat");
        head.extend_from_slice(&(data_len + 16).to_be_bytes());
    } else {
        head.extend_from_slice(&((data_len + 8) as u32).to_be_bytes());
        head.extend_from_slice(b"mdat");
    }
    let key_frame_end = runs
        .iter()
        .find(|(i, _)| sources[*i].video)
        .filter(|(i, r)| sources[*i].samples[r.start].sync)
        .map(|(i, r)| {
            head.len() as u64 + at[&(*i, r.start)] + u64::from(sources[*i].samples[r.start].size)
        });
    let mut parts = vec![Part::Made(head)];
    for ik in order {
        let s = sample(ik);
        match parts.last_mut() {
            Some(Part::File { offset, len }) if *offset + *len == s.offset => {
                *len += u64::from(s.size);
            }
            _ => parts.push(Part::File {
                offset: s.offset,
                len: u64::from(s.size),
            }),
        }
    }
    Fragment {
        duration_ns: 0,
        parts,
        key_frame_end,
    }
}

/// A track's samples in a segment as stretches that lie together in the
/// `mdat`: where each begins in the mdat's body, and its samples.
type Stretches = Vec<(u64, std::ops::Range<usize>)>;

/// Writes a box: its header, then what `body` writes.
pub(crate) fn boxed(out: &mut Vec<u8>, kind: &[u8; 4], body: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(kind);
    body(out);
    let len = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub(crate) fn full(out: &mut Vec<u8>, version: u8, flags: u32) {
    out.push(version);
    out.extend_from_slice(&flags.to_be_bytes()[1..]);
}

/// Sample flags (ISO 14496-12 §8.8.3.1): a sync sample depends on no
/// other; any other depends on others and is not a sync sample.
fn sample_flags(sync: bool) -> u32 {
    if sync { 0x0200_0000 } else { 0x0101_0000 }
}

/// The `moof` of `truns` (per track, stretches of samples and where each
/// lies in the mdat's body), the mdat's body at `body_at` from the start
/// of the `moof`.
fn moof(sources: &[Track], truns: &[(usize, Stretches)], sequence: u32, body_at: u64) -> Vec<u8> {
    let mut out = Vec::new();
    boxed(&mut out, b"moof", |o| {
        boxed(o, b"mfhd", |o| {
            full(o, 0, 0);
            o.extend_from_slice(&sequence.to_be_bytes());
        });
        for (i, stretches) in truns {
            let src = &sources[*i];
            let Some(first) = stretches.first().map(|(_, r)| r.start) else {
                continue;
            };
            boxed(o, b"traf", |o| {
                boxed(o, b"tfhd", |o| {
                    // default-base-is-moof
                    full(o, 0, 0x02_0000);
                    o.extend_from_slice(&src.id.to_be_bytes());
                });
                boxed(o, b"tfdt", |o| {
                    full(o, 1, 0);
                    let dts = src.samples[first].dts.max(0) as u64;
                    o.extend_from_slice(&dts.to_be_bytes());
                });
                for (pos, r) in stretches {
                    trun(o, &src.samples[r.clone()], body_at + pos);
                }
            });
        }
    });
    out
}

/// A `trun` of `samples`, the first one's data at `data_offset` from the
/// start of the `moof`.
fn trun(o: &mut Vec<u8>, samples: &[Sample], data_offset: u64) {
    boxed(o, b"trun", |o| {
        // data offset; per sample duration, size, flags and (signed,
        // version 1) composition offset.
        full(o, 1, 0x0001 | 0x0100 | 0x0200 | 0x0400 | 0x0800);
        o.extend_from_slice(&(samples.len() as u32).to_be_bytes());
        o.extend_from_slice(&(data_offset as u32).to_be_bytes());
        for s in samples {
            o.extend_from_slice(&s.dur.to_be_bytes());
            o.extend_from_slice(&s.size.to_be_bytes());
            o.extend_from_slice(&sample_flags(s.sync).to_be_bytes());
            let cto = (s.cts - s.dts).clamp(i64::from(i32::MIN), i64::from(i32::MAX));
            o.extend_from_slice(&(cto as i32).to_be_bytes());
        }
    });
}

/// `ftyp` + `moov` of tracks `ids`: the `mvhd`, each track's `trak` as
/// `trak` writes it (given the track's place in `ids`), and `mvex`.
pub(crate) fn init_segment<E>(
    ids: &[u32],
    mut trak: impl FnMut(&mut Vec<u8>, usize) -> Result<(), E>,
) -> Result<Vec<u8>, E> {
    let mut out = Vec::new();
    boxed(&mut out, b"ftyp", |o| {
        o.extend_from_slice(b"iso6");
        o.extend_from_slice(&0u32.to_be_bytes());
        o.extend_from_slice(b"iso6cmfcmp41");
    });
    let mut failed = None;
    boxed(&mut out, b"moov", |o| {
        boxed(o, b"mvhd", |o| {
            full(o, 0, 0);
            o.extend_from_slice(&[0; 8]); // creation, modification
            o.extend_from_slice(&1000u32.to_be_bytes());
            o.extend_from_slice(&0u32.to_be_bytes()); // duration: fragments say
            o.extend_from_slice(&0x0001_0000u32.to_be_bytes()); // rate 1.0
            o.extend_from_slice(&0x0100u16.to_be_bytes()); // volume 1.0
            o.extend_from_slice(&[0; 10]);
            matrix(o);
            o.extend_from_slice(&[0; 24]);
            let next = ids.iter().max().unwrap_or(&0) + 1;
            o.extend_from_slice(&next.to_be_bytes());
        });
        for k in 0..ids.len() {
            if let Err(e) = trak(o, k) {
                failed.get_or_insert(e);
            }
        }
        boxed(o, b"mvex", |o| {
            for id in ids {
                boxed(o, b"trex", |o| {
                    full(o, 0, 0);
                    o.extend_from_slice(&id.to_be_bytes());
                    o.extend_from_slice(&1u32.to_be_bytes());
                    o.extend_from_slice(&[0; 12]);
                });
            }
        });
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The identity matrix of `mvhd` and `tkhd`.
pub(crate) fn matrix(o: &mut Vec<u8>) {
    for m in [0x0001_0000u32, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] {
        o.extend_from_slice(&m.to_be_bytes());
    }
}

/// Empty `stts`, `stsc`, `stco` and `stsz`: the samples are in the
/// fragments.
pub(crate) fn empty_sample_tables(o: &mut Vec<u8>) {
    for kind in [b"stts", b"stsc", b"stco"] {
        boxed(o, kind, |o| {
            full(o, 0, 0);
            o.extend_from_slice(&0u32.to_be_bytes());
        });
    }
    boxed(o, b"stsz", |o| {
        full(o, 0, 0);
        o.extend_from_slice(&[0; 8]);
    });
}

impl Fragmented {
    /// The title of `tracks` (their `init` and segments), its codecs listed
    /// in their order.
    pub(crate) fn new(
        init: Vec<u8>,
        fragments: Vec<Fragment>,
        tracks: Vec<TrackInfo>,
        resolution: Option<(u16, u16)>,
        frame_rate: Option<f64>,
    ) -> Self {
        let codecs = tracks
            .iter()
            .map(|t| t.codec.as_str())
            .collect::<Vec<_>>()
            .join(",");
        Fragmented {
            init,
            fragments,
            tracks,
            codecs,
            resolution,
            frame_rate,
        }
    }
}

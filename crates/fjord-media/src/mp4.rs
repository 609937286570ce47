//! MP4/MOV (ISO BMFF, QuickTime) files: every H.264, H.265, AAC and Opus
//! track becomes an RTP track; samples stay in the file, referenced by offset.
//!
//! The box parser is hand-written: packetizing needs the file offsets of the
//! samples and of the parameter sets inside `avcC`/`hvcC`, which box-decoding
//! crates do not expose, and they read `mdat` into memory. Only the box
//! headers of the top level, the `moov` tree and the `moof` trees of a
//! fragmented file (`fragmented`) are read; `mdat` is touched only at the
//! NAL length fields of video samples. A fragmented file still being
//! written is planned on from a plan of a shorter prefix ([`growing`]).

use crate::format::FormatError;
use crate::h264::{self, AvcConfig};
use crate::h265::{self, HevcConfig};
use crate::index::{TrackDesc, TrackKind};
use crate::nal::{self, NalCodec};
use crate::plan::{
    FLAG_RANDOM_ACCESS, IngestReport, MediaPlan, PacketRecord, SyncPoint, TrackPlan,
};
use crate::{aac, av1};

mod fragmented;
pub mod fragments;
pub mod growing;

const NS: i128 = 1_000_000_000;
/// Report progress every this many sample bytes.
const PROGRESS_STEP: u64 = 8 << 20;

fn invalid(msg: impl Into<String>) -> FormatError {
    FormatError::Invalid(format!("MP4: {}", msg.into()))
}

/// Sniffs an MP4/MOV file: the first box is `ftyp` or `moov`, or a box a
/// QuickTime file may start with followed by another well-formed box.
pub fn looks_like_mp4(head: &[u8]) -> bool {
    const FIRST: [&[u8; 4]; 5] = [b"mdat", b"free", b"skip", b"wide", b"pnot"];
    let Some(b) = Boxes::new(head, 0, head.len())
        .truncating()
        .next()
        .and_then(Result::ok)
    else {
        return false;
    };
    if &b.kind == b"ftyp" || &b.kind == b"moov" {
        return true;
    }
    FIRST.contains(&&b.kind)
        && (b.end >= head.len()
            || Boxes::new(head, b.end, head.len())
                .truncating()
                .next()
                .and_then(Result::ok)
                .is_some_and(|n| n.kind.iter().all(u8::is_ascii_alphanumeric)))
}

/// One box: its type and the byte range of its body in the file.
#[derive(Debug, Clone, Copy)]
struct BoxRef {
    kind: [u8; 4],
    start: usize,
    end: usize,
}

/// The boxes in `data[pos..end]`, in order.
struct Boxes<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    /// A last box running past `end` is cut there instead of an error
    /// (top level: a truncated `mdat`).
    truncate: bool,
}

impl<'a> Boxes<'a> {
    fn new(data: &'a [u8], pos: usize, end: usize) -> Self {
        Boxes {
            data,
            pos,
            end: end.min(data.len()),
            truncate: false,
        }
    }

    fn truncating(mut self) -> Self {
        self.truncate = true;
        self
    }

    fn of(data: &'a [u8], parent: BoxRef) -> Self {
        Boxes::new(data, parent.start, parent.end)
    }
}

impl Iterator for Boxes<'_> {
    type Item = Result<BoxRef, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos + 8 > self.end {
            return None;
        }
        let at = self.pos;
        let h = &self.data[at..at + 8];
        let size32 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let kind = [h[4], h[5], h[6], h[7]];
        let (header, size) = match size32 {
            0 => (8, (self.end - at) as u64),
            1 => match self
                .data
                .get(at + 8..at + 16)
                .filter(|_| at + 16 <= self.end)
            {
                Some(b) => (16, u64::from_be_bytes(b.try_into().unwrap_or_default())),
                None => {
                    self.pos = self.end;
                    return Some(Err(invalid(format!(
                        "box at {at} has a cut-off 64-bit size"
                    ))));
                }
            },
            n => (8, u64::from(n)),
        };
        let name = String::from_utf8_lossy(&kind).into_owned();
        if size < header {
            self.pos = self.end;
            return Some(Err(invalid(format!(
                "box '{name}' at {at} has size {size}"
            ))));
        }
        let end = match usize::try_from(size).ok().and_then(|s| at.checked_add(s)) {
            Some(e) if e <= self.end => e,
            _ if self.truncate => self.end,
            _ => {
                self.pos = self.end;
                return Some(Err(invalid(format!(
                    "box '{name}' at {at} (size {size}) runs past its parent, which ends at {}",
                    self.end
                ))));
            }
        };
        self.pos = end;
        Some(Ok(BoxRef {
            kind,
            start: at + header as usize,
            end,
        }))
    }
}

/// The first child of `parent` of type `kind`.
fn child(data: &[u8], parent: BoxRef, kind: &[u8; 4]) -> Result<Option<BoxRef>, FormatError> {
    for b in Boxes::of(data, parent) {
        let b = b?;
        if &b.kind == kind {
            return Ok(Some(b));
        }
    }
    Ok(None)
}

/// The box at the end of a path of children, e.g. `mdia/minf/stbl`.
fn path(data: &[u8], mut b: BoxRef, kinds: &[&[u8; 4]]) -> Result<Option<BoxRef>, FormatError> {
    for kind in kinds {
        match child(data, b, kind)? {
            Some(c) => b = c,
            None => return Ok(None),
        }
    }
    Ok(Some(b))
}

/// A big-endian reader over one box body; reading past it is an error.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], b: BoxRef, what: &'static str) -> Self {
        Reader {
            b: &data[b.start..b.end],
            pos: 0,
            what,
        }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let s = self
            .pos
            .checked_add(n)
            .and_then(|e| self.b.get(self.pos..e))
            .ok_or_else(|| invalid(format!("'{}' box is cut short", self.what)))?;
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, FormatError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        Ok((u64::from(self.u32()?) << 32) | u64::from(self.u32()?))
    }

    /// Version of a full box (flags skipped).
    fn version(&mut self) -> Result<u8, FormatError> {
        let v = self.u8()?;
        self.bytes(3)?;
        Ok(v)
    }

    /// A table's entry count, checked against the bytes left for it.
    fn count(&mut self, entry_len: usize) -> Result<usize, FormatError> {
        let n = self.u32()? as usize;
        if n > (self.b.len() - self.pos) / entry_len {
            return Err(invalid(format!(
                "'{}' claims {n} entries, more than the box holds",
                self.what
            )));
        }
        Ok(n)
    }
}

/// What a track's sample description says.
enum Codec {
    H264(AvcConfig),
    H265(HevcConfig),
    /// HLS and DASH only ([`crate::av1`]).
    Av1(av1::Av1Config),
    Aac {
        asc: Vec<u8>,
        rate: u32,
        channels: u8,
    },
    Opus {
        channels: u8,
    },
    /// Not served: a name for the report.
    Other(String),
}

impl Codec {
    fn name(&self) -> &str {
        match self {
            Codec::H264(_) => "H.264",
            Codec::H265(_) => "H.265",
            Codec::Av1(_) => "AV1",
            Codec::Aac { .. } => "AAC",
            Codec::Opus { .. } => "Opus",
            Codec::Other(n) => n,
        }
    }

    fn is_video(&self) -> bool {
        matches!(self, Codec::H264(_) | Codec::H265(_) | Codec::Av1(_))
    }
}

use crate::cmaf::Sample;

/// Maps media time of one track to the title timeline.
#[derive(Debug, Clone, Copy)]
struct Timing {
    timescale: u32,
    /// Start of the first non-empty edit on the movie timeline, ns.
    delay_ns: i128,
    /// Media time presented at `delay_ns`.
    media_start: i64,
}

impl Timing {
    fn ns(&self, t: i64) -> i128 {
        let d = (i128::from(t) - i128::from(self.media_start)) * NS;
        let ts = i128::from(self.timescale);
        self.delay_ns + (d + ts / 2).div_euclid(ts)
    }

    /// Exact ticks of a `clock` Hz RTP clock, wrapped to 32 bits.
    fn rtp(&self, t: i64, clock: u32) -> u32 {
        let c = i128::from(clock);
        let ts = i128::from(self.timescale);
        let delay = (self.delay_ns * c + NS / 2).div_euclid(NS);
        let media = ((i128::from(t) - i128::from(self.media_start)) * c + ts / 2).div_euclid(ts);
        (delay + media) as u32
    }
}

fn clamp_ns(ns: i128) -> u64 {
    ns.clamp(0, i128::from(u64::MAX)) as u64
}

struct Track {
    codec: Codec,
    timing: Timing,
    samples: Vec<Sample>,
}

/// The plan of an MP4/MOV file.
pub fn plan(data: &[u8], progress: &mut dyn FnMut(u64, u64)) -> Result<MediaPlan, FormatError> {
    plan_whole(data, progress).map(|(plan, _)| plan)
}

/// The plan of the whole of `data`, and where it stopped if a plan of a
/// longer prefix can resume there.
fn plan_whole(
    data: &[u8],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(MediaPlan, Option<growing::Resume>), FormatError> {
    // Only a plan resumed is ever refused.
    plan_from(data, None, progress)?.ok_or_else(|| invalid("no plan"))
}

/// What a plan found worth saying, and how much of it is a fault of the
/// samples (not a fact of the `moov`): a plan with faults is not resumed.
#[derive(Default)]
struct Notes {
    warnings: Vec<String>,
    truncated: u64,
    faults: usize,
}

/// The plan of `data`: whole (`from` `None`), or only what lies past
/// where `from` stopped (tracks of the new packets only, the rest the
/// whole file's: [`growing`]); and where it stopped, if a later plan
/// can resume there. `Ok(None)`: `from` cannot be resumed here.
fn plan_from(
    data: &[u8],
    from: Option<&growing::Resume>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<(MediaPlan, Option<growing::Resume>)>, FormatError> {
    let (moov, moofs, whole) = top_level(data, from.map_or(0, growing::Resume::bytes))?;
    let moov = match from {
        Some(r) => r.moov(),
        None => moov.ok_or_else(|| invalid("no 'moov' box (the file may be incomplete)"))?,
    };
    let mut notes = Notes::default();
    let Some((mut tracks, served)) = read_tracks(data, moov, &moofs, from, &mut notes)? else {
        return Ok(None);
    };
    let mut plans = Vec::new();
    let mut media_bytes = from.map_or(0, growing::Resume::media_bytes);
    let mut done = 0u64;
    let total = data.len() as u64;
    for (i, (t, carry)) in tracks.iter_mut().enumerate() {
        let pt = 96 + i as u8;
        let said = notes.warnings.len();
        let plan = track_plan(data, t, pt, carry, &mut notes.warnings, &mut |n| {
            done += n;
            progress(done.min(total), total);
        })?;
        notes.faults += notes.warnings.len() - said;
        media_bytes += t.samples.iter().map(|s| u64::from(s.size)).sum::<u64>();
        plans.push(plan);
    }
    let rtp_packets: u64 = tracks.iter().map(|(_, c)| c.packets).sum();
    if rtp_packets > u64::from(u32::MAX) {
        return Err(FormatError::TooLarge);
    }
    let duration_ns = tracks.iter().map(|(_, c)| c.end_ns).max().unwrap_or(0);
    let names: Vec<&str> = tracks.iter().map(|(t, _)| t.codec.name()).collect();
    let bitrate = growing::bitrate(media_bytes, duration_ns);
    let mut report = IngestReport::new(format!("MP4 ({})", names.join(", ")), rtp_packets, bitrate);
    let resume = (whole && notes.faults == 0 && notes.truncated == 0).then(|| {
        let mut carries = tracks.iter().map(|(_, c)| *c);
        let traks = served.iter().map(|&s| s.then(|| carries.next()).flatten());
        growing::Resume::new(data.len(), moov, traks.collect(), media_bytes)
    });
    report.truncated_tail_bytes = notes.truncated;
    report.warnings = notes.warnings;
    let plan = MediaPlan {
        tracks: plans,
        duration_ns,
        ts_per_rtp: 0,
        report,
    };
    Ok(Some((plan, resume)))
}

/// A served track, with the state its plan starts from.
type Served = (Track, growing::Carry);
/// The served tracks, and per audio or video track whether it is served.
type Tracks = (Vec<Served>, Vec<bool>);

/// The served tracks of `moov` with their samples in `moofs` (and the
/// `moov`'s own, unless resuming `from`), and for each audio or video
/// track whether it is served. `None`: a track `from` did not serve has
/// samples now (its payload type and every later track's would change).
fn read_tracks(
    data: &[u8],
    moov: BoxRef,
    moofs: &[Moof],
    from: Option<&growing::Resume>,
    notes: &mut Notes,
) -> Result<Option<Tracks>, FormatError> {
    let trex = fragmented::defaults(data, moov)?;
    let movie_timescale = movie_timescale(data, moov)?;
    let mut tracks = Vec::new();
    let (mut found, mut served) = (Vec::new(), Vec::new());
    for trak in Boxes::of(data, moov) {
        let trak = trak?;
        if &trak.kind != b"trak" {
            continue;
        }
        let (w, cut) = (&mut notes.warnings, &mut notes.truncated);
        let Some(mut t) = read_track(data, trak, movie_timescale, w, cut)? else {
            continue;
        };
        // Resuming: the moov's samples are in the plan resumed.
        let was = from.map(|r| r.track(served.len()));
        let mut carry = match was {
            Some(c) => {
                t.samples.clear();
                c.unwrap_or_default()
            }
            None => growing::Carry::after(&t.samples),
        };
        let said = notes.warnings.len();
        let frags = (moofs, &trex[..]);
        let (w, cut) = (&mut notes.warnings, &mut notes.truncated);
        add_fragments(data, trak, frags, &mut t, &mut carry.next_dts, cut, w)?;
        notes.faults += notes.warnings.len() - said;
        found.push(t.codec.name().to_owned());
        let serve = match was {
            Some(c) => c.is_some(),
            None => !t.samples.is_empty(),
        };
        served.push(serve && !matches!(t.codec, Codec::Other(_)));
        if let Codec::Other(name) = &t.codec {
            notes.warnings.push(format!(
                "track with codec {name} skipped: fjord serves H.264, H.265, AV1 (HLS and DASH \
                 only), AAC and Opus"
            ));
        } else if serve {
            if let Codec::Av1(_) = t.codec {
                notes.warnings.push(
                    "the AV1 track is served over HLS and DASH only; RTSP answers 415".to_owned(),
                );
            }
            tracks.push((t, carry));
        } else if !t.samples.is_empty() {
            return Ok(None);
        }
    }
    if tracks.is_empty() {
        return Err(FormatError::Unsupported(if found.is_empty() {
            "MP4 file with no audio or video track".to_owned()
        } else {
            format!(
                "no track fjord can serve in this MP4 (found {}); fjord serves H.264, H.265, AV1 \
                 (HLS and DASH only), AAC and Opus",
                found.join(", ")
            )
        }));
    }
    Ok(Some((tracks, served)))
}

/// A `moof` box and the file offset of its header.
type Moof = (u64, BoxRef);

/// The first `moov` and every `moof` at the top level from byte `from`
/// (a box's start), and whether the boxes end at the end of `data`, each
/// whole (none cut short, none sized "to the end of the file"): where a
/// later plan of a longer prefix can resume.
fn top_level(data: &[u8], from: usize) -> Result<(Option<BoxRef>, Vec<Moof>, bool), FormatError> {
    let mut moov = None;
    let mut moofs = Vec::new();
    let mut at = from;
    let mut whole = true;
    for b in Boxes::new(data, from, data.len()).truncating() {
        let b = b?;
        whole &= declared_end(data, at) == Some(b.end);
        match &b.kind {
            b"moov" if moov.is_none() => moov = Some(b),
            b"moof" => moofs.push((at as u64, b)),
            _ => {}
        }
        at = b.end;
    }
    Ok((moov, moofs, whole && at == data.len()))
}

/// Where the box whose header is at `at` says it ends (`None`: it runs to
/// the end of the file, or its header is cut).
fn declared_end(data: &[u8], at: usize) -> Option<usize> {
    let word = |i: usize| Some(u32::from_be_bytes(data.get(i..i + 4)?.try_into().ok()?));
    let size = match word(at)? {
        0 => return None,
        1 => (u64::from(word(at + 8)?) << 32) | u64::from(word(at + 12)?),
        n => u64::from(n),
    };
    at.checked_add(usize::try_from(size).ok()?)
}

/// The fragments of a fragmented file and the `trex` defaults.
type Fragments<'a> = (&'a [Moof], &'a [(u32, fragmented::Defaults)]);

/// Appends a served track's samples in the fragments of a fragmented file
/// (none in other files); `next_dts` is the decode time of a fragment's
/// first sample when the fragment does not say (`tfdt`).
fn add_fragments(
    data: &[u8],
    trak: BoxRef,
    (moofs, trex): Fragments<'_>,
    t: &mut Track,
    next_dts: &mut i64,
    truncated: &mut u64,
    warnings: &mut Vec<String>,
) -> Result<(), FormatError> {
    if moofs.is_empty() || matches!(t.codec, Codec::Other(_)) {
        return Ok(());
    }
    let id = fragments::track_id(data, trak)?;
    fragmented::append(data, moofs, id, trex, next_dts, &mut t.samples, warnings)?;
    drop_past_end(data, &mut t.samples, truncated, warnings);
    Ok(())
}

/// The timescale of the movie's own timeline (`mvhd`), in which edit
/// lists count.
fn movie_timescale(data: &[u8], moov: BoxRef) -> Result<u32, FormatError> {
    let mvhd = child(data, moov, b"mvhd")?.ok_or_else(|| invalid("no 'mvhd' box"))?;
    u32_after_times(data, mvhd, "mvhd")
}

/// The first field after a `mvhd`/`tkhd`/`mdhd` box's creation and
/// modification times (32 or 64 bits each, by version): the movie's or
/// media's timescale, or the track's ID.
fn u32_after_times(data: &[u8], b: BoxRef, what: &'static str) -> Result<u32, FormatError> {
    let mut r = Reader::new(data, b, what);
    let v = r.version()?;
    r.bytes(if v == 1 { 16 } else { 8 })?;
    r.u32()
}

/// One `trak`: codec, timing and sample table; `None` for tracks that are
/// neither audio nor video.
fn read_track(
    data: &[u8],
    trak: BoxRef,
    movie_timescale: u32,
    warnings: &mut Vec<String>,
    truncated: &mut u64,
) -> Result<Option<Track>, FormatError> {
    let Some(mdia) = child(data, trak, b"mdia")? else {
        return Ok(None);
    };
    let Some(hdlr) = child(data, mdia, b"hdlr")? else {
        return Ok(None);
    };
    let mut r = Reader::new(data, hdlr, "hdlr");
    r.bytes(8)?;
    let handler = r.bytes(4)?;
    if handler != b"vide" && handler != b"soun" {
        return Ok(None);
    }
    let mdhd = child(data, mdia, b"mdhd")?.ok_or_else(|| invalid("track without 'mdhd'"))?;
    let timescale = u32_after_times(data, mdhd, "mdhd")?;
    if timescale == 0 {
        return Err(invalid("track timescale is 0"));
    }
    let stbl =
        path(data, mdia, &[b"minf", b"stbl"])?.ok_or_else(|| invalid("track without 'stbl'"))?;
    let stsd = child(data, stbl, b"stsd")?.ok_or_else(|| invalid("track without 'stsd'"))?;
    let codec = read_codec(data, stsd)?;
    let timing = read_edits(data, trak, timescale, movie_timescale, warnings)?;
    let samples = if matches!(codec, Codec::Other(_)) {
        Vec::new()
    } else {
        read_samples(data, stbl, truncated, warnings)?
    };
    Ok(Some(Track {
        codec,
        timing,
        samples,
    }))
}

/// The first sample description.
fn read_codec(data: &[u8], stsd: BoxRef) -> Result<Codec, FormatError> {
    let entries = BoxRef {
        start: (stsd.start + 8).min(stsd.end),
        ..stsd
    };
    let Some(entry) = Boxes::of(data, entries).next().transpose()? else {
        return Err(invalid("empty sample description ('stsd')"));
    };
    let name = String::from_utf8_lossy(&entry.kind).trim().to_owned();
    // Visual sample entries have 78 bytes before their child boxes.
    let visual = |skip: usize| BoxRef {
        start: (entry.start + skip).min(entry.end),
        ..entry
    };
    Ok(match &entry.kind {
        b"avc1" | b"avc3" => {
            let b = child(data, visual(78), b"avcC")?
                .ok_or_else(|| invalid("H.264 track without 'avcC'"))?;
            Codec::H264(
                h264::parse_avcc(&data[b.start..b.end], b.start as u64)
                    .ok_or_else(|| invalid("malformed 'avcC'"))?,
            )
        }
        b"hvc1" | b"hev1" => {
            let b = child(data, visual(78), b"hvcC")?
                .ok_or_else(|| invalid("H.265 track without 'hvcC'"))?;
            Codec::H265(
                h265::parse_hvcc(&data[b.start..b.end], b.start as u64)
                    .ok_or_else(|| invalid("malformed 'hvcC'"))?,
            )
        }
        b"av01" => {
            let b = child(data, visual(78), b"av1C")?
                .ok_or_else(|| invalid("AV1 track without 'av1C'"))?;
            Codec::Av1(
                av1::Av1Config::parse(&data[b.start..b.end])
                    .ok_or_else(|| invalid("malformed 'av1C'"))?,
            )
        }
        b"mp4a" => {
            let mut r = Reader::new(data, entry, "mp4a");
            r.bytes(8)?;
            // QuickTime sound description versions 1 and 2 add fields.
            let skip = match r.u16()? {
                1 => 44,
                2 => 64,
                _ => 28,
            };
            let channels = Reader::new(data, entry, "mp4a").bytes(18)?[17];
            let audio = visual(skip);
            let esds = match child(data, audio, b"esds")? {
                Some(e) => Some(e),
                None => match child(data, audio, b"wave")? {
                    Some(w) => child(data, w, b"esds")?,
                    None => None,
                },
            };
            let esds = esds.ok_or_else(|| invalid("'mp4a' without 'esds'"))?;
            match read_esds(&data[esds.start..esds.end]) {
                Some((0x40 | 0x66..=0x68, asc)) => match aac::asc_info(asc) {
                    Some((rate, ch)) => Codec::Aac {
                        asc: asc.to_vec(),
                        rate,
                        channels: if ch == 0 { channels } else { ch },
                    },
                    None => return Err(invalid("malformed AudioSpecificConfig")),
                },
                Some((0x69 | 0x6b, _)) => Codec::Other("MP3".to_owned()),
                Some((oti, _)) => Codec::Other(format!("mp4a object type 0x{oti:02x}")),
                None => return Err(invalid("malformed 'esds'")),
            }
        }
        b"Opus" => {
            let d = child(data, visual(28), b"dOps")?
                .ok_or_else(|| invalid("Opus track without 'dOps'"))?;
            let mut r = Reader::new(data, d, "dOps");
            r.bytes(1)?;
            let channels = r.u8()?;
            r.bytes(8)?;
            let family = r.u8()?;
            if family != 0 || channels > 2 {
                Codec::Other(format!(
                    "Opus with {channels} channels (RFC 7587 carries at most 2)"
                ))
            } else {
                Codec::Opus { channels }
            }
        }
        _ => Codec::Other(name),
    })
}

/// objectTypeIndication and DecoderSpecificInfo of an `esds` body.
fn read_esds(b: &[u8]) -> Option<(u8, &[u8])> {
    // Descriptor: tag, length in 1–4 bytes of 7 bits, body.
    fn descriptor(b: &[u8], pos: usize) -> Option<(u8, usize, usize)> {
        let tag = *b.get(pos)?;
        let mut len = 0usize;
        let mut p = pos + 1;
        for _ in 0..4 {
            let c = *b.get(p)?;
            p += 1;
            len = (len << 7) | usize::from(c & 0x7f);
            if c & 0x80 == 0 {
                break;
            }
        }
        let end = p.checked_add(len)?.min(b.len());
        Some((tag, p, end))
    }
    let (tag, mut p, es_end) = descriptor(b, 4)?;
    if tag != 3 {
        return None;
    }
    let flags = *b.get(p + 2)?;
    p += 3;
    if flags & 0x80 != 0 {
        p += 2;
    }
    if flags & 0x40 != 0 {
        p += 1 + usize::from(*b.get(p)?);
    }
    if flags & 0x20 != 0 {
        p += 2;
    }
    let (tag, dc, dc_end) = descriptor(&b[..es_end], p)?;
    if tag != 4 {
        return None;
    }
    let oti = *b.get(dc)?;
    let (tag, ds, ds_end) = descriptor(&b[..dc_end], dc + 13)?;
    if tag != 5 || ds > ds_end {
        return None;
    }
    Some((oti, &b[ds..ds_end]))
}

/// The track's place on the movie timeline from its edit list: leading
/// empty edits delay it, the first real edit says which media time shows first.
fn read_edits(
    data: &[u8],
    trak: BoxRef,
    timescale: u32,
    movie_timescale: u32,
    warnings: &mut Vec<String>,
) -> Result<Timing, FormatError> {
    let mut timing = Timing {
        timescale,
        delay_ns: 0,
        media_start: 0,
    };
    let Some(elst) = path(data, trak, &[b"edts", b"elst"])? else {
        return Ok(timing);
    };
    let mut r = Reader::new(data, elst, "elst");
    let v = r.version()?;
    let n = r.count(if v == 1 { 20 } else { 12 })?;
    let mut empty = 0u64;
    let mut real = 0;
    for _ in 0..n {
        let (dur, media_time) = if v == 1 {
            (r.u64()?, r.u64()? as i64)
        } else {
            (u64::from(r.u32()?), i64::from(r.u32()? as i32))
        };
        r.bytes(4)?;
        if media_time < 0 {
            if real == 0 {
                empty = empty.saturating_add(dur);
            }
        } else {
            if real == 0 {
                timing.media_start = media_time;
            }
            real += 1;
        }
    }
    if movie_timescale > 0 {
        timing.delay_ns = i128::from(empty) * NS / i128::from(movie_timescale);
    }
    if real > 1 {
        warnings.push(format!(
            "edit list with {real} segments; only the first is honoured, the track plays straight through"
        ));
    }
    Ok(timing)
}

/// Every sample's place, size, times and sync flag, from the sample tables.
fn read_samples(
    data: &[u8],
    stbl: BoxRef,
    truncated: &mut u64,
    warnings: &mut Vec<String>,
) -> Result<Vec<Sample>, FormatError> {
    let need = |kind: &[u8; 4]| -> Result<BoxRef, FormatError> {
        child(data, stbl, kind)?
            .ok_or_else(|| invalid(format!("track without '{}'", String::from_utf8_lossy(kind))))
    };
    let stsz = need(b"stsz")?;
    let mut sz = Reader::new(data, stsz, "stsz");
    sz.version()?;
    let uniform = sz.u32()?;
    let n = if uniform == 0 {
        sz.count(4)?
    } else {
        let n = sz.u32()? as usize;
        // Bounded by what the file can hold, so tables stay file-sized.
        if n > data.len() / uniform as usize {
            return Err(invalid(format!(
                "{n} samples of {uniform} bytes do not fit in the file"
            )));
        }
        n
    };
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let size = if uniform == 0 { sz.u32()? } else { uniform };
        samples.push(Sample {
            offset: 0,
            size,
            dts: 0,
            cts: 0,
            dur: 0,
            sync: false,
        });
    }

    let mut r = Reader::new(data, need(b"stts")?, "stts");
    r.version()?;
    let entries = r.count(8)?;
    let mut i = 0;
    let mut t = 0i64;
    for _ in 0..entries {
        let count = r.u32()? as usize;
        let delta = r.u32()?;
        for s in samples.iter_mut().skip(i).take(count) {
            s.dts = t;
            s.dur = delta;
            t = t.saturating_add(i64::from(delta));
        }
        i = i.saturating_add(count);
    }
    if i < n {
        return Err(invalid(format!("'stts' times {i} of {n} samples")));
    }

    for s in &mut samples {
        s.cts = s.dts;
    }
    if let Some(ctts) = child(data, stbl, b"ctts")? {
        let mut r = Reader::new(data, ctts, "ctts");
        r.version()?;
        let entries = r.count(8)?;
        let mut i = 0;
        for _ in 0..entries {
            let count = r.u32()? as usize;
            // Signed in version 1; version 0 writers put negative values too.
            let off = i64::from(r.u32()? as i32);
            for s in samples.iter_mut().skip(i).take(count) {
                s.cts = s.dts.saturating_add(off);
            }
            i = i.saturating_add(count);
        }
    }

    match child(data, stbl, b"stss")? {
        Some(stss) => {
            let mut r = Reader::new(data, stss, "stss");
            r.version()?;
            for _ in 0..r.count(4)? {
                let k = r.u32()? as usize;
                if let Some(s) = k.checked_sub(1).and_then(|k| samples.get_mut(k)) {
                    s.sync = true;
                }
            }
        }
        None => samples.iter_mut().for_each(|s| s.sync = true),
    }

    let (chunks, wide) = match child(data, stbl, b"stco")? {
        Some(b) => (b, false),
        None => (need(b"co64")?, true),
    };
    let mut co = Reader::new(data, chunks, if wide { "co64" } else { "stco" });
    co.version()?;
    let chunk_count = co.count(if wide { 8 } else { 4 })?;
    let mut sc = Reader::new(data, need(b"stsc")?, "stsc");
    sc.version()?;
    let stsc_n = sc.count(12)?;
    let mut stsc = Vec::with_capacity(stsc_n);
    for _ in 0..stsc_n {
        let first = sc.u32()?;
        let per = sc.u32()?;
        sc.u32()?;
        stsc.push((first, per));
    }
    let mut next = 0;
    let mut entry = 0;
    for chunk in 1..=chunk_count as u64 {
        let mut offset = if wide {
            co.u64()?
        } else {
            u64::from(co.u32()?)
        };
        while entry + 1 < stsc.len() && u64::from(stsc[entry + 1].0) <= chunk {
            entry += 1;
        }
        let per = stsc.get(entry).map_or(0, |e| e.1) as usize;
        for s in samples.iter_mut().skip(next).take(per) {
            s.offset = offset;
            offset = offset.saturating_add(u64::from(s.size));
        }
        next = next.saturating_add(per);
        if next >= n {
            break;
        }
    }
    if next < n {
        return Err(invalid(format!("chunk tables place {next} of {n} samples")));
    }
    drop_past_end(data, &mut samples, truncated, warnings);
    Ok(samples)
}

/// Drops the samples from the first that lies past the end of the file
/// (a truncated file), counting their bytes.
fn drop_past_end(
    data: &[u8],
    samples: &mut Vec<Sample>,
    truncated: &mut u64,
    warnings: &mut Vec<String>,
) {
    let len = data.len() as u64;
    if let Some(cut) = samples
        .iter()
        .position(|s| s.offset.saturating_add(u64::from(s.size)) > len)
    {
        let lost: u64 = samples[cut..].iter().map(|s| u64::from(s.size)).sum();
        *truncated += lost;
        warnings.push(format!(
            "{} samples lie past the end of the file (truncated?); not served",
            samples.len() - cut
        ));
        samples.truncate(cut);
    }
}

/// Packets of one track, planned on from `carry` (the packets before,
/// for a plan resumed; updated to after these).
fn track_plan(
    data: &[u8],
    t: &Track,
    pt: u8,
    carry: &mut growing::Carry,
    warnings: &mut Vec<String>,
    passed: &mut dyn FnMut(u64),
) -> Result<TrackPlan, FormatError> {
    let timing = t.timing;
    let video = t.codec.is_video();
    let (desc, clock) = match &t.codec {
        Codec::H264(cfg) => (video_desc(pt, "H264", h264::fmtp(cfg, data)), 90_000),
        Codec::H265(cfg) => (video_desc(pt, "H265", h265::fmtp(cfg, data)), 90_000),
        Codec::Av1(_) => (av1::track_desc(pt), 90_000),
        Codec::Aac {
            asc,
            rate,
            channels,
        } => (aac::track_desc(pt, *rate, *channels, asc), *rate),
        Codec::Opus { channels } => (crate::opus::track_desc(pt, *channels), 48_000),
        Codec::Other(_) => unreachable!("unserved tracks are filtered out"),
    };
    // Sized once from the sample table (a few NAL units per sample, plus
    // fragments): growing a table of millions of records by doubling would
    // hold the old and the new copy at once.
    let bytes: u64 = t.samples.iter().map(|s| u64::from(s.size)).sum();
    let mut packets = Vec::with_capacity(
        t.samples.len() * 3 + (bytes / (crate::format::MAX_RTP_PAYLOAD as u64 - 3)) as usize,
    );
    let mut sync = Vec::new();
    let (mut last_send, mut end_ns) = (carry.last_send, carry.end_ns);
    let mut nals = Vec::new();
    let mut dropped = 0u64;
    let mut unreported = 0u64;
    for s in &t.samples {
        // Sample bytes done so far, for progress (and ingest's memory bound).
        unreported += u64::from(s.size);
        if unreported >= PROGRESS_STEP {
            passed(unreported);
            unreported = 0;
        }
        let pts = timing.ns(s.cts);
        let send = clamp_ns(if video { timing.ns(s.dts) } else { pts }).max(last_send);
        last_send = send;
        end_ns = end_ns.max(clamp_ns(timing.ns(s.cts.saturating_add(i64::from(s.dur)))));
        let rtp = timing.rtp(s.cts, clock);
        let first = packets.len();
        match &t.codec {
            Codec::H264(cfg) => nal::packetize_length_prefixed(
                NalCodec::H264,
                data,
                (s.offset, s.size, cfg.length_size),
                |n| h264::insert_params(data, cfg, n),
                (&mut nals, &mut dropped),
                (send, rtp),
                &mut packets,
            ),
            Codec::H265(cfg) => nal::packetize_length_prefixed(
                NalCodec::H265,
                data,
                (s.offset, s.size, cfg.length_size),
                |n| h265::insert_params(data, cfg, n),
                (&mut nals, &mut dropped),
                (send, rtp),
                &mut packets,
            ),
            Codec::Aac { .. } if s.size > aac::MAX_AU => dropped += 1,
            Codec::Aac { .. } => aac::packetize_au(s.offset, s.size, send, rtp, &mut packets),
            Codec::Opus { .. }
                if s.size as usize > crate::format::MAX_RTP_PAYLOAD || s.size == 0 =>
            {
                dropped += 1
            }
            Codec::Opus { .. } => packets.push(PacketRecord::file_run(send, rtp, s.offset, s.size)),
            Codec::Av1(_) | Codec::Other(_) => {}
        }
        if video && s.sync && packets.len() > first {
            packets[first].flags |= FLAG_RANDOM_ACCESS;
            let packet = carry.packets + first as u64;
            sync.push(SyncPoint {
                packet: u32::try_from(packet).map_err(|_| FormatError::TooLarge)?,
                time_ns: clamp_ns(pts),
            });
        }
    }
    if dropped > 0 {
        warnings.push(format!(
            "{}: {dropped} samples malformed or too large for RTP; not served",
            t.codec.name()
        ));
    }
    // Seeking needs entry times that grow with the packet index.
    let mut latest = carry.latest_sync;
    sync.retain(|p| {
        let keep = p.time_ns >= latest;
        latest = latest.max(p.time_ns);
        keep
    });
    *carry = growing::Carry {
        next_dts: carry.next_dts,
        last_send,
        end_ns,
        latest_sync: latest,
        packets: carry.packets + packets.len() as u64,
    };
    Ok(TrackPlan {
        desc,
        packets,
        sync,
        fec: None,
    })
}

fn video_desc(pt: u8, encoding: &str, fmtp: String) -> TrackDesc {
    TrackDesc {
        kind: TrackKind::Video,
        payload_type: pt,
        clock_rate: 90_000,
        encoding: encoding.to_owned(),
        channels: 0,
        fmtp,
    }
}

//! A live stream recorded as a title: [`recorder`] chooses the format by
//! the stream's tracks. A stream with an MP2T track is recorded as the
//! MPEG-TS it carries ([`ts`]); any other as fragmented MP4 ([`Recorder`]),
//! described here. Both are a [`Record`]: RTP packets in, the file's
//! bytes out in runs each of which leaves the file whole.
//!
//! The fragmented MP4: a publisher's RTP
//! packets in ([`crate::depacketize`] makes the frames), the file's bytes
//! out: the init segment (`ftyp` + `moov`, from the SDP's codec
//! configuration: `sprop-parameter-sets`, `sprop-vps`/`-sps`/`-pps`,
//! `config`), then a `moof` + `mdat` fragment each time the video
//! reaches a key frame at least [`RecordLimits::fragment_ms`] after the
//! last cut (without video: by time), so a file cut short by a crash is whole up to its last fragment.
//! The boxes are `fjord_media::cmaf::write`'s, the ones HLS and DASH serve.
//!
//! Each track's times start at 0 with its first recorded frame (RTP
//! timestamps unwrapped; the server's renumbering keeps a continued stream
//! continuous); with video, recording starts at its first key frame and
//! other tracks' earlier frames are left out. RTP carries presentation
//! times only: a fragment's decode times are its video presentation times
//! in order, each frame's composition offset the difference (negative
//! for frames shown before they would be decoded, as `trun` version 1
//! allows). No clocks, files or threads; memory within the limits.

use base64::{Engine, engine::general_purpose::STANDARD};
use fjord_media::cmaf::write::{self, Codec, Run, Sample, TrackSpec};

use crate::depacketize::{AuHeaders, Counts, Depacketizer, Frame, Payload};
use crate::sdp::Track;

/// A recording's writer, of the format [`recorder`] chose.
pub trait Record: Send + std::fmt::Debug {
    /// The file's name extension: `mp4`, `ts`.
    fn extension(&self) -> &'static str;
    /// The file's first bytes.
    fn init(&self) -> Vec<u8>;
    /// Takes an RTP packet of track `track`; a run of bytes it completes
    /// is appended to `out`, after which the file is whole.
    fn push(&mut self, track: usize, packet: &[u8], out: &mut Vec<u8>);
    /// The stream ended: what is held becomes the last run.
    fn finish(&mut self, out: &mut Vec<u8>);
    /// Another publisher continues the stream, its packets renumbered to
    /// follow on.
    fn next_publisher(&mut self);
    /// Frames (MP4) or payloads (TS) written, and those dropped.
    fn counts(&self) -> Counts;
    /// The runs handed out so far: fragments, or runs of TS packets.
    fn cuts(&self) -> u32;
}

/// The recording of a stream of `tracks` (the ANNOUNCE's), and why tracks
/// are left out; `Err` when none can be recorded. With an MP2T track, its
/// TS packets are the file (`.ts`) and every other track is left out (a
/// TS carries its own program); else a fragmented MP4 of the tracks it
/// can hold.
pub fn recorder(
    tracks: &[Track],
    limits: RecordLimits,
) -> Result<(Box<dyn Record>, Vec<String>), String> {
    let Some(mp2t) = tracks
        .iter()
        .position(|t| t.codec == crate::sdp::Codec::Mp2t)
    else {
        let (r, left_out) = Recorder::new(tracks, limits)?;
        return Ok((Box::new(r), left_out));
    };
    let left_out = (tracks.iter().enumerate())
        .filter(|&(i, _)| i != mp2t)
        .map(|(i, t)| {
            format!(
                "track {i} ({}) is not recorded: the stream is recorded as the MPEG-TS of track {mp2t}",
                t.encoding
            )
        })
        .collect();
    Ok((
        Box::new(ts::TsRecorder::new(tracks, mp2t, limits)),
        left_out,
    ))
}

/// The bounds of one recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLimits {
    /// A frame larger is dropped and counted.
    pub max_frame_bytes: usize,
    /// Samples held for the next fragment; past it the fragment is cut
    /// wherever the stream is.
    pub max_fragment_bytes: usize,
    /// The shortest fragment (cut at the next key frame after it).
    pub fragment_ms: u32,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_frame_bytes: 8 << 20,
            max_fragment_bytes: 32 << 20,
            fragment_ms: 1000,
        }
    }
}

/// One recorded track.
#[derive(Debug)]
struct Rec {
    id: u32,
    clock: u32,
    video: bool,
    depack: Depacketizer,
    /// The last timestamp seen and its unwrapped value.
    last: Option<(u32, i64)>,
    /// The unwrapped timestamp of the first recorded frame: time 0.
    origin: Option<i64>,
    /// The next fragment's samples: presentation time, key, size.
    held: Vec<(i64, bool, u32)>,
    data: Vec<u8>,
    /// The last sample's duration, for the next fragment's last.
    last_dur: u32,
}

/// A recording of one stream.
#[derive(Debug)]
pub struct Recorder {
    /// By the stream's track number; `None`: not recorded.
    tracks: Vec<Option<Rec>>,
    specs: Vec<TrackSpec>,
    /// The track fragments are cut by: the video, or the first.
    lead: usize,
    started: bool,
    /// The lead's presentation time at the last cut.
    cut_at: i64,
    sequence: u32,
    limits: RecordLimits,
    /// Frames before the first key frame, left out.
    pub skipped: u64,
}

impl Recorder {
    /// A recording of `tracks` (the ANNOUNCE's), and why tracks are left
    /// out; `Err` when none can be recorded.
    pub fn new(tracks: &[Track], limits: RecordLimits) -> Result<(Self, Vec<String>), String> {
        let mut recs = Vec::with_capacity(tracks.len());
        let (mut specs, mut left_out) = (Vec::new(), Vec::new());
        for (i, t) in tracks.iter().enumerate() {
            match codec_of(t) {
                Ok((codec, payload)) => {
                    let id = specs.len() as u32 + 1;
                    let video = codec.is_video();
                    let last_dur = match payload {
                        Payload::H264 | Payload::H265 => t.clock_rate / 25,
                        Payload::Aac { frame, .. } | Payload::Latm { frame, .. } => frame,
                        Payload::Opus => 960,
                    };
                    let size = match &codec {
                        Codec::Avc(c) => avc_size(c),
                        _ => (0, 0),
                    };
                    specs.push(TrackSpec {
                        id,
                        timescale: t.clock_rate,
                        size,
                        codec,
                    });
                    recs.push(Some(Rec {
                        id,
                        clock: t.clock_rate,
                        video,
                        depack: Depacketizer::new(payload, limits.max_frame_bytes),
                        last: None,
                        origin: None,
                        held: Vec::new(),
                        data: Vec::new(),
                        last_dur: last_dur.max(1),
                    }));
                }
                Err(why) => {
                    left_out.push(format!("track {i} ({}) is not recorded: {why}", t.encoding));
                    recs.push(None);
                }
            }
        }
        let lead = (recs
            .iter()
            .position(|r| r.as_ref().is_some_and(|r| r.video)))
        .or_else(|| recs.iter().position(Option::is_some))
        .ok_or_else(|| format!("no track can be recorded ({})", left_out.join("; ")))?;
        let recorder = Recorder {
            tracks: recs,
            specs,
            lead,
            started: false,
            cut_at: 0,
            sequence: 0,
            limits,
            skipped: 0,
        };
        Ok((recorder, left_out))
    }

    /// The file's first bytes: `ftyp` + `moov`.
    pub fn init(&self) -> Vec<u8> {
        write::init(&self.specs)
    }

    /// Takes an RTP packet of track `track`; a fragment it completes is
    /// appended to `out`.
    pub fn push(&mut self, track: usize, packet: &[u8], out: &mut Vec<u8>) {
        let Some(Some(rec)) = self.tracks.get_mut(track) else {
            return;
        };
        let Some(h) = header(packet) else {
            return;
        };
        let mut frames = Vec::new();
        let fields = (h.seq, h.timestamp, h.marker);
        rec.depack.push(fields, &packet[h.payload], &mut frames);
        for f in frames {
            self.frame(track, f, out);
        }
    }

    /// The stream ended: what is held becomes the last fragment.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        for track in 0..self.tracks.len() {
            let mut frames = Vec::new();
            if let Some(Some(rec)) = self.tracks.get_mut(track) {
                rec.depack.flush(&mut frames);
            }
            for f in frames {
                self.frame(track, f, out);
            }
        }
        self.cut(None, out);
    }

    /// Another publisher continues the stream (its packets renumbered to
    /// follow on, so no loss shows): a frame the last one left unfinished
    /// is dropped, and the recording goes on at the next key frame, as it
    /// started.
    pub fn next_publisher(&mut self) {
        for r in self.tracks.iter_mut().flatten() {
            r.depack.break_off();
        }
        self.started = false;
    }

    /// Frames made and dropped, over all tracks.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for r in self.tracks.iter().flatten() {
            c.frames += r.depack.counts.frames;
            c.dropped += r.depack.counts.dropped;
        }
        c
    }

    /// Fragments written.
    pub fn fragments(&self) -> u32 {
        self.sequence
    }

    fn frame(&mut self, track: usize, f: Frame, out: &mut Vec<u8>) {
        let lead = track == self.lead;
        if !self.started {
            let lead_is_video = self.tracks[self.lead].as_ref().is_some_and(|r| r.video);
            if lead_is_video && !(lead && f.key) {
                self.skipped += 1;
                return;
            }
            self.started = true;
        }
        let Some(Some(rec)) = self.tracks.get_mut(track) else {
            return;
        };
        let t = match rec.last {
            Some((ts, at)) => at + i64::from(f.ts.wrapping_sub(ts) as i32),
            None => 0,
        };
        rec.last = Some((f.ts, t));
        let pts = t - *rec.origin.get_or_insert(t);
        let (clock, video) = (i64::from(rec.clock.max(1)), rec.video);
        let held: usize = self.tracks.iter().flatten().map(|r| r.data.len()).sum();
        let due = lead
            && (f.key || !video)
            && (pts - self.cut_at) * 1000 >= i64::from(self.limits.fragment_ms) * clock;
        if due || held + f.data.len() > self.limits.max_fragment_bytes {
            self.cut(lead.then_some(pts), out);
            if lead {
                self.cut_at = pts;
            }
        }
        if let Some(Some(rec)) = self.tracks.get_mut(track) {
            rec.held.push((pts, f.key, f.data.len() as u32));
            rec.data.extend_from_slice(&f.data);
        }
    }

    /// Writes what is held as one fragment; `next`: the lead track's
    /// next presentation time, the end of its last sample.
    fn cut(&mut self, next: Option<i64>, out: &mut Vec<u8>) {
        let lead = self.lead;
        let samples: Vec<Vec<Sample>> = (self.tracks.iter_mut().enumerate())
            .map(|(i, r)| match r {
                Some(r) => samples(r, next.filter(|_| i == lead)),
                None => Vec::new(),
            })
            .collect();
        let runs: Vec<Run> = (self.tracks.iter().zip(&samples))
            .filter_map(|(r, s)| {
                let r = r.as_ref()?;
                (!s.is_empty()).then_some(Run {
                    id: r.id,
                    video: r.video,
                    samples: s,
                })
            })
            .collect();
        if runs.is_empty() {
            return;
        }
        self.sequence += 1;
        out.extend(write::fragment_head(&runs, self.sequence));
        for r in self.tracks.iter_mut().flatten() {
            out.extend_from_slice(&r.data);
            r.data.clear();
            r.held.clear();
        }
    }
}

/// A track's held samples for a fragment: decode times its presentation
/// times in order, durations to the next (the last to `next`, else as
/// the one before).
fn samples(r: &mut Rec, next: Option<i64>) -> Vec<Sample> {
    let mut dts: Vec<i64> = r.held.iter().map(|s| s.0).collect();
    dts.sort_unstable();
    let mut out = Vec::with_capacity(dts.len());
    for (k, &(pts, key, size)) in r.held.iter().enumerate() {
        let after = dts.get(k + 1).copied().or(next);
        let dur = match after.map(|a| a - dts[k]) {
            Some(d) if d > 0 && d <= i64::from(u32::MAX) => d as u32,
            _ => r.last_dur,
        };
        r.last_dur = dur;
        out.push(Sample {
            size,
            dts: dts[k],
            cts: pts,
            dur,
            sync: key,
        });
    }
    out
}

impl Record for Recorder {
    fn extension(&self) -> &'static str {
        "mp4"
    }

    fn init(&self) -> Vec<u8> {
        Recorder::init(self)
    }

    fn push(&mut self, track: usize, packet: &[u8], out: &mut Vec<u8>) {
        Recorder::push(self, track, packet, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        Recorder::finish(self, out)
    }

    fn next_publisher(&mut self) {
        Recorder::next_publisher(self)
    }

    fn counts(&self) -> Counts {
        Recorder::counts(self)
    }

    fn cuts(&self) -> u32 {
        self.fragments()
    }
}

/// The header of an RTP packet the intake took (checked against its own
/// size limit there), or `None`.
fn header(packet: &[u8]) -> Option<crate::rtp::Header> {
    let limits = crate::Limits {
        max_packet_bytes: u16::MAX as usize,
        ..crate::Limits::default()
    };
    crate::rtp::parse(packet, &limits).ok()
}

/// The sample entry and depacketizer of a track, or why it is left out.
fn codec_of(t: &Track) -> Result<(Codec, Payload), String> {
    let fmtp = t.fmtp.as_deref().unwrap_or_default();
    match t.encoding.as_str() {
        "H264" => {
            let sets =
                param(fmtp, "sprop-parameter-sets").ok_or("no sprop-parameter-sets in its fmtp")?;
            Ok((Codec::Avc(avcc(sets)?), Payload::H264))
        }
        "H265" => Ok((Codec::Hevc(hevc::hvcc(fmtp)?), Payload::H265)),
        "MPEG4-GENERIC" => aac(t, fmtp),
        "MP4A-LATM" => latm(t, fmtp),
        "OPUS" => {
            let channels = t.channels.unwrap_or(2).clamp(1, 2);
            let mut head = b"OpusHead".to_vec();
            head.extend_from_slice(&[1, channels, 0, 0]);
            head.extend_from_slice(&48_000u32.to_le_bytes());
            head.extend_from_slice(&[0, 0, 0]);
            Ok((Codec::Opus(head), Payload::Opus))
        }
        _ => Err("its codec is not recorded yet".to_owned()),
    }
}

/// AAC in RFC 3640 AU headers (`mode=AAC-hbr` or `AAC-lbr`).
fn aac(t: &Track, fmtp: &str) -> Result<(Codec, Payload), String> {
    let num = |k: &str| {
        param(fmtp, k).map_or(Ok(0), |v| v.parse::<u8>().map_err(|_| format!("a bad {k}")))
    };
    let headers = AuHeaders {
        size_bits: num("sizelength")?,
        index_bits: num("indexlength")?,
        delta_bits: num("indexdeltalength")?,
    };
    if headers.size_bits == 0
        || headers.size_bits > 16
        || num("ctsdeltalength")? + num("dtsdeltalength")? > 0
    {
        return Err("AU headers other than sizes and indexes".to_owned());
    }
    let asc = hex(param(fmtp, "config").ok_or("no config in its fmtp")?)?;
    if asc.len() < 2 {
        return Err("its config is too short".to_owned());
    }
    let channels = t.channels.unwrap_or((asc[1] >> 3) & 0xf).max(1);
    let codec = Codec::Aac {
        asc,
        rate: t.clock_rate,
        channels,
    };
    Ok((
        codec,
        Payload::Aac {
            headers,
            frame: 1024,
        },
    ))
}

/// AAC in LATM with its StreamMuxConfig in the SDP (`cpresent=0`).
fn latm(t: &Track, fmtp: &str) -> Result<(Codec, Payload), String> {
    if param(fmtp, "cpresent").is_some_and(|v| v != "0") {
        return Err("LATM with its config in the stream (cpresent=1)".to_owned());
    }
    let smc = hex(param(fmtp, "config").ok_or("no config in its fmtp")?)?;
    let c = crate::latm::config(&smc).map_err(|e| format!("its LATM config: {e}"))?;
    let channels = t.channels.unwrap_or((c.asc[1] >> 3) & 0xf).max(1);
    let codec = Codec::Aac {
        asc: c.asc,
        rate: t.clock_rate,
        channels,
    };
    let payload = Payload::Latm {
        sub_frames: c.sub_frames,
        frame: 1024,
    };
    Ok((codec, payload))
}

/// The bytes a hexadecimal `config` says.
fn hex(hex: &str) -> Result<Vec<u8>, String> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("x"), 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| "its config is not hex".to_owned())
}

/// An `a=fmtp` parameter's value (names are case-insensitive).
fn param<'a>(fmtp: &'a str, key: &str) -> Option<&'a str> {
    fmtp.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then_some(v.trim())
    })
}

/// The `avcC` of `sprop-parameter-sets` (RFC 6184 §8.1: base64 NAL units,
/// comma-separated; ISO 14496-15 §5.3.3.1).
fn avcc(sets: &str) -> Result<Vec<u8>, String> {
    let nals = (sets.split(','))
        .map(|s| {
            STANDARD
                .decode(s.trim())
                .map_err(|_| "sprop-parameter-sets is not base64")
        })
        .collect::<Result<Vec<_>, _>>()?;
    let of = |t: u8| -> Vec<&Vec<u8>> {
        nals.iter()
            .filter(|n| n.first().is_some_and(|b| b & 0x1f == t))
            .collect()
    };
    let (sps, pps) = (of(7), of(8));
    let first = sps
        .first()
        .filter(|s| s.len() >= 4)
        .ok_or("no SPS in sprop-parameter-sets")?;
    if pps.is_empty() || sps.len() > 31 || pps.len() > 255 {
        return Err("sprop-parameter-sets without a PPS, or too many".to_owned());
    }
    let mut c = vec![
        1,
        first[1],
        first[2],
        first[3],
        0xff,
        0xe0 | sps.len() as u8,
    ];
    for (k, set) in sps.iter().chain(&pps).enumerate() {
        if k == sps.len() {
            c.push(pps.len() as u8);
        }
        let len = u16::try_from(set.len()).map_err(|_| "a parameter set over 64 KiB")?;
        c.extend_from_slice(&len.to_be_bytes());
        c.extend_from_slice(set);
    }
    Ok(c)
}

/// Width and height from the first SPS of an `avcC` (what HLS and DASH
/// manifests say of the title); (0, 0) when it cannot be read: decoders
/// read the SPS anyway.
fn avc_size(avcc: &[u8]) -> (u16, u16) {
    use h264_reader::{nal::sps::SeqParameterSet, rbsp};
    let Some(len) = avcc
        .get(6..8)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    else {
        return (0, 0);
    };
    let Some(sps) = avcc.get(8..8 + len) else {
        return (0, 0);
    };
    let Ok(bytes) = rbsp::decode_nal(sps) else {
        return (0, 0);
    };
    let size = SeqParameterSet::from_bits(rbsp::BitReader::new(&bytes[..]))
        .ok()
        .and_then(|s| s.pixel_dimensions().ok());
    match size {
        Some((w, h)) => (u16::try_from(w).unwrap_or(0), u16::try_from(h).unwrap_or(0)),
        None => (0, 0),
    }
}

mod hevc;
#[cfg(test)]
mod tests;
pub mod ts;

//! Which container a file is, by content (the extension only breaks ties),
//! and the one entry point that turns any supported file into a [`MediaPlan`].

use crate::plan::MediaPlan;
use crate::ts::{self, TsError, TsOptions};
use crate::{mpeg_audio, mpeg_video, ps};

/// Largest RTP payload a packetizer makes (payload header included): a
/// 1500-byte MTU minus IPv4, UDP and RTP headers, with room for IP options
/// and tunnels.
pub const MAX_RTP_PAYLOAD: usize = 1400;

/// Why a file cannot be planned. The reason is shown to the operator and
/// sent to RTSP clients with `415 Unsupported Media Type`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("the file is empty")]
    Empty,
    #[error("too large to index (over 256 TiB or 2^32 RTP packets); split the file")]
    TooLarge,
    /// Recognised but not servable (codec, feature), or not recognised at all.
    #[error("{0}")]
    Unsupported(String),
    /// Recognised but broken beyond use.
    #[error("{0}")]
    Invalid(String),
}

/// What fjord knows how to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    MpegTs,
    /// MP4/MOV (`.mp4`, `.m4v`, `.mov`).
    Mp4,
    /// Matroska or WebM (`.mkv`, `.webm`).
    Matroska,
    /// MPEG-1/2 program stream (`.mpg`, `.vob`).
    MpegPs,
    /// MPEG-1/2 video elementary stream (`.m1v`, `.m2v`).
    MpegVideo,
    /// AAC in ADTS frames (`.aac`).
    Adts,
    /// MPEG audio frames (`.mp3`, `.mp2`).
    MpegAudio,
}

impl Container {
    /// Sniffs the first bytes of a file (at least a few KiB when available).
    pub fn detect(head: &[u8]) -> Option<Container> {
        if ts::looks_like_ts(head) {
            return Some(Container::MpegTs);
        }
        if crate::mp4::looks_like_mp4(head) {
            return Some(Container::Mp4);
        }
        if crate::mkv::demux::looks_like_matroska(head) {
            return Some(Container::Matroska);
        }
        if ps::looks_like_ps(head) {
            return Some(Container::MpegPs);
        }
        if head.starts_with(&[0, 0, 1, 0xb3]) {
            return Some(Container::MpegVideo);
        }
        // ADTS before MPEG audio: both may start with an ID3v2 tag, and only
        // the ADTS check looks at what follows it for AAC.
        if crate::aac::looks_like_adts(head) {
            return Some(Container::Adts);
        }
        if mpeg_audio::looks_like_mpeg_audio(head) {
            return Some(Container::MpegAudio);
        }
        None
    }

    /// [`Container::detect`], or why the file is not one fjord serves.
    pub fn sniff(data: &[u8]) -> Result<Container, FormatError> {
        if data.is_empty() {
            return Err(FormatError::Empty);
        }
        Container::detect(data).ok_or_else(|| {
            FormatError::Unsupported(
                "not a media file fjord can serve: nothing in its first bytes looks like \
                 MPEG-TS, MP4/MOV, Matroska/WebM, an MPEG-1/2 program or video elementary stream, ADTS AAC \
                 or MP3"
                    .to_owned(),
            )
        })
    }
}

/// The packet plan of a whole file held in memory; `progress(done, total)`
/// is called every few MiB.
pub fn plan(
    data: &[u8],
    opts: &TsOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<MediaPlan, FormatError> {
    match Container::sniff(data)? {
        Container::MpegTs => ts::packetize_with_progress(data, opts, progress)
            .map(ts::Packetization::into_plan)
            .map_err(ts_error),
        Container::Mp4 => crate::mp4::plan(data, progress),
        Container::Matroska => crate::mkv::plan(data, progress),
        Container::MpegPs => ps::plan(data),
        Container::MpegVideo => mpeg_video::plan(data),
        Container::Adts => crate::aac::plan_adts(data),
        Container::MpegAudio => mpeg_audio::plan(data),
    }
}

fn ts_error(e: TsError) -> FormatError {
    match e {
        TsError::Empty => FormatError::Empty,
        TsError::TooLarge => FormatError::TooLarge,
        TsError::NotTs => FormatError::Unsupported(e.to_string()),
    }
}

/// Where the plan of a prefix of a file still being written stopped, for
/// a plan of a longer prefix to go on from ([`plan_on`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    Mp4(crate::mp4::growing::Resume),
    Ts(ts::growing::Resume),
}

impl Resume {
    /// Bytes planned.
    pub fn bytes(&self) -> usize {
        match self {
            Resume::Mp4(r) => r.bytes(),
            Resume::Ts(r) => r.bytes(),
        }
    }

    /// Packets planned, per served track.
    pub fn packets(&self) -> Vec<u64> {
        match self {
            Resume::Mp4(r) => r.packets().collect(),
            Resume::Ts(r) => vec![r.packets()],
        }
    }
}

/// [`plan`] for a file still being written: also, for a fragmented MP4
/// ([`crate::mp4::growing`]) or an MPEG-TS ([`ts::growing`], whose plan
/// is then cut where it is final), where a plan of a longer prefix may go
/// on from.
pub fn plan_growing(
    data: &[u8],
    opts: &TsOptions,
) -> Result<(MediaPlan, Option<Resume>), FormatError> {
    match Container::sniff(data)? {
        Container::Mp4 => {
            crate::mp4::growing::plan_whole(data).map(|(p, r)| (p, r.map(Resume::Mp4)))
        }
        Container::MpegTs => ts::growing::plan_whole(data, opts)
            .map(|(p, r)| (p.into_plan(), r.map(Resume::Ts)))
            .map_err(ts_error),
        _ => Ok((plan(data, opts, &mut |_, _| {})?, None)),
    }
}

/// What planning `data`, a longer prefix of the file `from` was planned
/// from, adds to that plan, and where it stopped; `None` if it cannot be
/// planned on from there (plan the whole prefix).
pub fn plan_on(data: &[u8], opts: &TsOptions, from: &Resume) -> Option<(MediaPlan, Resume)> {
    match from {
        Resume::Mp4(r) => crate::mp4::growing::plan_on(data, r).map(|(p, r)| (p, Resume::Mp4(r))),
        Resume::Ts(r) => {
            ts::growing::plan_on(data, opts, r).map(|(p, r)| (p.into_plan(), Resume::Ts(r)))
        }
    }
}

//! fjord-live: live input, sans-IO. A publisher's ANNOUNCE body and RTP
//! packets in; what the server keeps and tells viewers out.
//!
//! - [`sdp`]: the ANNOUNCE SDP read into tracks (codec, clock, the
//!   publisher's control URLs) under [`Limits`], and the SDP viewers get.
//! - [`rtp`]: a publisher's RTP packet checked (version, length, header
//!   within the packet) and its header fields read.
//! - [`keyframe`]: whether a packet's payload starts a frame a decoder can
//!   start from (H.264 and H.265 IDR/parameter sets, MPEG-TS random access).
//! - [`loss`]: packets a publisher's track lost on the way in, counted
//!   from sequence numbers as a receiver report counts them.
//! - [`reception`]: what a receiver report tells the publisher of a
//!   track: loss, highest sequence number, jitter, its last sender report.
//! - [`ring`]: the packets since the last key frame, which a viewer that
//!   joins is sent first, within a byte budget.
//! - [`publish`]: a publishing session's steps (ANNOUNCE, SETUP of each
//!   track with `mode=record`, RECORD) and the paths in use.
//! - [`depacketize`]: RTP payloads back into frames (H.264, H.265, AAC
//!   in RFC 3640 AU headers or in LATM ([`latm`]), Opus), a frame
//!   damaged by loss dropped and counted.
//! - [`record`]: a stream recorded as a title: packets in, the file's
//!   bytes out. Fragmented MP4, a fragment per key frame a second or more
//!   apart; or, for an MP2T track, its TS packets as they came
//!   ([`record::ts`]), in runs a second of media apart.
//! - [`handover`]: a stream whose publisher went, held for the next one
//!   (`live_grace_s`): whether a new ANNOUNCE continues it, and the
//!   renumbering that keeps its viewers' sequence numbers and timestamps
//!   continuous, which a publisher's sender report's RTP time goes through
//!   too (instants are given, never read from a clock).
//!
//! The contract: no sockets, clocks or threads; nothing panics on any
//! input; every buffer is bounded by a [`Limits`] field. The server holds
//! each packet once and the engine sends it to every viewer by reference.

#![forbid(unsafe_code)]

pub mod depacketize;
pub mod handover;
pub mod keyframe;
pub mod latm;
pub mod loss;
pub mod publish;
pub mod reception;
pub mod record;
pub mod ring;
pub mod rtp;
pub mod sdp;

/// The bounds of one publisher's input; each has a default and a config key
/// (`docs/config.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of an ANNOUNCE body (`live_max_sdp_bytes`).
    pub max_sdp_bytes: usize,
    /// Media sections of an ANNOUNCE (`live_max_tracks`).
    pub max_tracks: usize,
    /// Bytes of one RTP packet (`live_max_packet_bytes`).
    pub max_packet_bytes: usize,
    /// Bytes held per stream for joining viewers (`live_max_buffer_bytes`).
    pub max_buffer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sdp_bytes: 16 * 1024,
            max_tracks: 8,
            max_packet_bytes: 1500,
            max_buffer_bytes: 16 << 20,
        }
    }
}

/// Why a publisher's input is refused; each maps to an RTSP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LiveError {
    #[error("the SDP is {0} bytes, more than the limit of {1}")]
    SdpTooLarge(usize, usize),
    #[error("the SDP cannot be read: {0}")]
    BadSdp(String),
    #[error("the SDP has {0} media sections, more than the limit of {1}")]
    TooManyTracks(usize, usize),
    #[error("the SDP has no media section")]
    NoTracks,
    #[error("the RTP packet is {0} bytes, more than the limit of {1}")]
    PacketTooLarge(usize, usize),
    #[error("not an RTP packet: {0}")]
    BadRtp(&'static str),
}

impl LiveError {
    /// The RTSP status a request failing this way gets.
    pub fn status(&self) -> u16 {
        match self {
            LiveError::SdpTooLarge(..) => 413,
            LiveError::TooManyTracks(..) => 453,
            _ => 400,
        }
    }
}

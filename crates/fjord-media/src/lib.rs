//! fjord-media: ingest (the prefabrication step) and the packetization index.
//!
//! [`ts`] turns an MPEG transport stream into a [`plan`] of RTP packets (pure,
//! no I/O), [`index`] stores that plan in a checksummed, mmap-able file, and
//! [`ingest`] glues the two to the filesystem. Serving never parses media: it
//! reads records from the index and sends byte ranges of the media file.
//! [`mkv`] reads Matroska and WebM (the EBML reader and demuxer are ours:
//! frames must stay byte ranges of the file), [`vpx`] and [`opus`] packetize
//! VP8, VP9 and Opus; an AV1 track ([`av1`]) is indexed without packets,
//! for HLS and DASH only, and RTSP refuses its title
//! ([`Index::not_over_rtp`]).
//! [`cmaf`] writes the fragmented MP4 that HLS and DASH serve (generated
//! heads and byte ranges), [`mp4::fragments`] reads an MP4's `moov` and
//! [`mkv::fragments`] a Matroska file's blocks (never their samples) into
//! it; [`mp4::growing`] plans a fragmented MP4 still being written on from
//! the plan of a shorter prefix of it, and [`ts::growing`] an MPEG-TS (its
//! plan cut where it is final), the index [`ingest::snapshot`] writes then
//! the one planning the whole prefix makes;
//! [`ts::params`] reads the codec facts an HLS playlist names from a TS's
//! first key frame.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod aac;
pub mod ac3;
pub mod av1;
pub mod cmaf;
pub mod durable;
mod es;
pub mod format;
pub mod guard;
pub mod h264;
pub mod h265;
pub mod index;
pub mod ingest;
pub mod mkv;
pub mod mp4;
pub mod mpeg_audio;
pub mod mpeg_video;
pub mod nal;
pub mod opus;
pub mod plan;
pub mod prefab;
pub mod ps;
pub mod synthetic;
pub mod time_search;
pub mod ts;
pub mod vpx;

pub use format::{Container, FormatError};
pub use index::{Index, IndexError, SourceId, Track, TrackDesc, TrackKind};
pub use ingest::{IngestError, ingest_file, open_or_ingest};
pub use plan::{
    BlockLayout, ChooseLayouts, FLAG_MARKER, FLAG_RANDOM_ACCESS, IngestReport, MediaPlan,
    PacketRecord, SyncPoint, TimingSource, TrackPlan, no_parity,
};
pub use ts::{Packetization, TsOptions, looks_like_ts, packetize};

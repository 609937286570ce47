//! The engine: the data path of fjord, the threads that stream playing
//! sessions.
//!
//! In: [`Title`]s (a packetization index and its media file, mapped, with
//! the parity sidecar and the prefabricated packets written at ingest when
//! there are any), and the control plane's [`Command`]s, the seeds'
//! `mediastream` call made a queue: a session to add (title, track, header
//! fields, an [`Output`]: UDP sockets or the client's RTSP connection),
//! where a PLAY starts and stops ([`Start`], [`Until`], RFC 2326 `Scale` and
//! `Speed`), when it starts, PAUSE, pause points, BYE; an RTSP connection's
//! write side with the reply bytes for it. Out: each session's RTP packets
//! by the index's send times (at most the burst limit early), every packet
//! due in a tick in one batch through a [`DataPath`](datapath::DataPath) or
//! as `$` frames on the connection (over RTSPS through its
//! [`seal::Seal`], which encrypts them); RTCP sender reports and BYE; a track's
//! FEC repair packets after each block; the [`PlayInfo`] a PLAY reply
//! reports; per-thread [`ThreadStats`] and [`Totals`].
//!
//! It never parses media (a PLAY at a `Scale` other than 1 sends key frames
//! chosen from the index's sync table), never waits for a disk (the storage
//! layer reads ahead; a packet not resident yet is looked at again shortly)
//! and, once sessions play, allocates nothing and takes no lock per packet
//! (an RTSPS connection's seal takes its TLS state's lock once per burst,
//! which its control task holds only to decrypt what the client sent).
//! Payload leaves by reference into the mapping (only the `read-*` data
//! paths, the seeds' kept for comparison, read it into a buffer; a TCP
//! connection that takes part of a frame keeps the rest). The control plane
//! never touches a socket of a playing session.
//!
//! Live streams (`live.rs`): the control plane hands a thread each viewer
//! of a live track ([`LiveViewer`]) and the packets the publisher sent, a
//! receive batch at a time ([`LiveBatch`] of [`LivePacket`]s, each held
//! once, reference-counted); the thread sends them to all its viewers in
//! the batches of its data path, with only the 12-byte RTP header
//! rewritten per viewer, the rest by reference. Each viewer gets RTCP
//! sender reports of the publisher's own mapping ([`LiveSync`], from
//! [`Command::LiveSync`]) in its numbering, once the publisher sent one.

#![deny(clippy::undocumented_unsafe_blocks)]

mod clock;
pub mod command;
pub mod datapath;
mod files;
mod inbox;
mod interleaved;
mod lateness;
mod live;
mod prefault;
mod rebuild;
pub mod seal;
mod session;
mod storage;
mod thread;
pub mod title;
mod totals;
mod trick;
mod wheel;

pub use command::{
    Backlog, Command, LATE, LiveBatch, LivePacket, LiveSync, LiveViewer, MAX_SCALE, Output,
    PlayInfo, REAL_TIME, RepairSpec, SessionSpec, Start, ThreadStats, Until,
};
pub use datapath::UdpSocket;
pub use thread::{DEFAULT_BURST, Engine, EngineConfig, wake_grid};
pub use title::{Title, VerifyError};
pub use totals::Totals;

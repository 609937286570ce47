//! fjord's storage layer: an engine thread never waits for a disk.
//!
//! In: titles as [`Source`]s (their mapped files, which bytes a run of
//! packets touches and which table bytes that is found from), sessions
//! registered as [`ReadAhead`]s with their position and the rate they move
//! through the title at (fast forward and RTSP `Speed` move faster), a
//! memory budget. Out: per session a window of packets whose bytes are
//! resident and locked ([`Cursor::ready_from`], a few atomic loads, never a
//! lock or a wait), kept ahead of the session by worker threads per disk,
//! earliest deadline first: refilled when its lead falls to what covers its
//! disk's worst recent latency ([`lead`], [`disk_model`]: a slow or busy
//! disk gets more lead, an idle fast one less, within a floor, a ceiling and
//! the memory budget), by a read of `read_bytes`, from its first
//! position on (nothing is read for a session never played); a failed mark
//! when a title's files changed or could not be read. A paused session, or
//! a stalled one (playing, its engine taking none of its resident packets
//! for 3 s: a client that reads nothing), keeps only half a first read of
//! it. The first seconds and the
//! tables of every loaded title stay resident ([`HeadPin`]). Admission
//! ([`Storage::reserve`]) promises a stream its disk's bandwidth (80 %) and
//! the memory of its lead at its disk's latency now, or refuses it, naming
//! the limit. Per disk, promised and measured bandwidth, queue delay and the
//! lead are reported ([`Storage::disk_stats`]).
//!
//! A title's tables (index records, offset tables) are read as whole
//! requests ahead of the refills planned from them, so a title may be mapped
//! for random access and no planning waits for a fault.
//!
//! It never parses media, never copies payload (pages are locked where the
//! engine already maps them) and never blocks the caller of
//! [`Cursor::ready_from`]. Registering a session takes no lock a worker
//! holds (the entry reaches the workers through a channel), only the disk
//! map's, briefly, and starts the disk's workers the first time; loading a
//! title's head may wait for the disk.
//!
//! A chunk the disk fails to read (EIO) is rebuilt by its title
//! ([`Source::rebuild`], from parity) into memory laid over the chunk
//! ([`overlay`]); its sessions play on. Only what cannot be rebuilt ends
//! the sessions reading it.
//!
//! A title whose files are not all on local disk (an edge's, fetched in
//! slices from an origin) says so through [`Source::fill`]: a worker waits
//! for the bytes it is about to read ahead, and they stay on disk while
//! they are pinned. A fill that fails ends the sessions reading them, as a
//! read that cannot be rebuilt does.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod admission;
mod budget;
mod cursor;
mod disk_lead;
pub mod disk_model;
pub mod ioprio;
pub mod lead;
pub mod overlay;
pub mod pin;
pub mod sched;
mod service;
mod signal;
mod source;
mod still;
mod timeline;

pub use admission::Refusal;
pub use budget::default_budget;
pub use cursor::{Cursor, Mode, REAL_TIME};
pub use lead::LeadConfig;
pub use service::{
    BulkGrant, BulkPacer, DiskStats, HeadPin, ReadAhead, Storage, StorageConfig,
    StorageReservation, StorageStats, device_of,
};
pub use source::{Extent, Filled, Hold, MappedFile, Source, Uses};

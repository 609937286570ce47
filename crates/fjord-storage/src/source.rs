//! What the storage layer needs to know of a title: its mapped files, and
//! which bytes of them a run of packets touches. The engine's `Title`
//! implements it; this crate never parses media or index formats.

use std::{ops::Range, os::fd::RawFd};

/// Which of a title's files a session reads, as bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Uses(pub u8);

impl Uses {
    /// Packet records of the index (every session).
    pub const INDEX: Uses = Uses(1);
    /// The media file's runs (sessions that build headers).
    pub const MEDIA: Uses = Uses(2);
    /// Prefabricated packets and their offset table.
    pub const PREFAB: Uses = Uses(4);
    /// Repair symbols of the parity sidecar.
    pub const PARITY: Uses = Uses(8);

    pub fn has(self, other: Uses) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Uses {
    type Output = Uses;
    fn bitor(self, rhs: Uses) -> Uses {
        Uses(self.0 | rhs.0)
    }
}

/// One file of a title as it is mapped: the storage layer pins pages of the
/// mapping (`base..base + len`) and reads ahead through `fd`.
#[derive(Clone, Copy, Debug)]
pub struct MappedFile {
    pub base: *const u8,
    pub len: usize,
    pub fd: RawFd,
}

// SAFETY: a MappedFile only names a mapping and a descriptor that the
// `Source` owning them keeps alive; the storage layer passes them to the
// kernel (mlock, readahead) and never dereferences `base`.
unsafe impl Send for MappedFile {}
// SAFETY: as for Send: shared, it is only read as a plain address.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// The offsets of `bytes` (a slice of this mapping) in the file, or
    /// `None` when it is not inside the mapping.
    pub fn offsets_of(&self, bytes: &[u8]) -> Option<Range<usize>> {
        let start = (bytes.as_ptr() as usize).checked_sub(self.base as usize)?;
        let end = start.checked_add(bytes.len())?;
        (end <= self.len).then_some(start..end)
    }
}

/// Bytes `range` of file `file` (an index into [`Source::files`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    pub file: usize,
    pub range: Range<usize>,
}

/// Keeps bytes a [`Source::fill`] brought onto local disk there while it
/// lives.
pub type Hold = Box<dyn Send + Sync>;

/// A file kept on local disk in part and filled on demand (an edge
/// title's media, a sparse file of slices fetched from the origin).
pub trait Filled: Send + Sync {
    /// Makes bytes `range` present in the file and keeps them there while
    /// the hold lives; waits for them. Its error says why they cannot be.
    fn fill(&self, range: Range<u64>) -> Result<Hold, String>;
    /// Whether every byte of the file is on local disk now: reading it
    /// would fetch nothing.
    fn complete(&self) -> bool {
        false
    }
}

/// A title as the storage layer sees it. Implementations may read their
/// own mapped index here: these calls run on storage threads, which may
/// wait for the disk.
pub trait Source: Send + Sync {
    /// The title's mapped files; indices into this slice name them.
    fn files(&self) -> &[MappedFile];
    /// The device holding the title (`st_dev`): its disk's queue serves it.
    fn device(&self) -> u64;
    fn track_count(&self) -> usize;
    /// The files a session of this title reads unless told otherwise (what
    /// the title's head is pinned for).
    fn default_uses(&self) -> Uses;
    /// Packets of track `t`.
    fn packet_count(&self, t: usize) -> u32;
    /// The title's duration on its timeline (known from its head).
    fn duration_ns(&self) -> u64;
    /// When packet `i` of track `t` is due on the title timeline.
    fn send_time_ns(&self, t: usize, i: u32) -> Option<u64>;
    /// Appends the bytes packets `packets` of track `t` touch when sent
    /// the way `uses` says.
    fn extents(&self, t: usize, packets: Range<u32>, uses: Uses, out: &mut Vec<Extent>);
    /// Appends the bytes of the title's tables (index records, offset
    /// tables) that [`Source::extents`] and [`Source::send_time_ns`] read
    /// for packets `packets` of track `t`, found without reading them: the
    /// storage layer reads them in one request each, so that planning and
    /// [`Source::extents`] never fault them in through the mapping a page
    /// at a time, or under a disk's lock.
    fn tables(&self, t: usize, packets: Range<u32>, uses: Uses, out: &mut Vec<Extent>) {
        let _ = (t, packets, uses, out);
    }
    /// Bytes of those tables per packet of track `t` read the way `uses`
    /// says (what a refill pins of them besides the packets).
    fn table_bytes(&self, t: usize, uses: Uses) -> u64;
    /// How many packets behind its position a session may still read
    /// (records of a block whose repair packets are still to go).
    fn trailing_packets(&self, t: usize) -> u32;
    /// Bytes that stay resident while the title is loaded: headers and
    /// seek tables the engine reads at PLAY, whatever the position.
    fn head(&self, out: &mut Vec<Extent>);
    /// Whether a file of the title changed on disk (truncated, replaced,
    /// deleted) or a mapped page vanished since it was loaded: its sessions
    /// must end.
    fn changed(&self) -> bool;
    /// Makes bytes `range` of file `file` present in the file on local disk
    /// before they are read and locked, and keeps them there while the
    /// returned hold lives (`None`: the file is whole on disk, as a local
    /// title's is). An edge title's media is a sparse file of slices
    /// fetched from its origin: this waits for them. Called on storage
    /// threads, which may wait; an error ends the sessions reading those
    /// bytes.
    fn fill(&self, file: usize, range: Range<usize>) -> Result<Option<Hold>, String> {
        let _ = (file, range);
        Ok(None)
    }
    /// Whether [`Source::fill`] may bring the bytes a stream of the title
    /// reads from an origin (a title filled from one and not all on local
    /// disk): its streams are admitted against the origin's link too.
    fn filled(&self) -> bool {
        false
    }
    /// Fills `out` with bytes `range` of file `file` when the disk failed
    /// to read some of them (EIO): the readable pages as read (never through
    /// the mapping, whose failed pages would fault), the others rebuilt
    /// (from the title's parity). Returns how many packets it rebuilt, or
    /// why it cannot; then the sessions reading those bytes end. `range`
    /// starts on a page; called on storage threads, which may wait.
    fn rebuild(&self, file: usize, range: Range<usize>, out: &mut [u8]) -> Result<usize, String> {
        let _ = (file, range, out);
        Err("this title has nothing to rebuild lost bytes from".into())
    }
}

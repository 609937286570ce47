//! A title's files as it loaded them: their paths, what each file was
//! then (to tell when one changes on disk), their mappings, and reads that
//! go through a file's descriptor instead of its mapping (a disk error is
//! then an error, not a fault). The title, the storage layer's view of it
//! and the rebuild of unreadable bytes all use them.

use std::{
    fs::File,
    io,
    os::{
        fd::{AsRawFd, FromRawFd, RawFd},
        unix::fs::{FileExt, MetadataExt},
    },
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

use fjord_storage::{Extent, MappedFile};

/// The files of a title, by their place in [`fjord_storage::Source::files`].
#[derive(Clone, Copy)]
pub(crate) enum Slot {
    Index = 0,
    Media = 1,
    Prefab = 2,
    Parity = 3,
}

/// What a file was when the title loaded it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    compare: Compare,
}

/// What of a file's identity tells that it changed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compare {
    /// Everything: it is never written while served.
    All,
    /// All but its modification time: it is written while served (an
    /// edge title's, whose slices land as they are fetched).
    NotMtime,
    /// Its device and inode, and that it did not shrink: a file that
    /// grows while served (a live recording's media), of which the title
    /// reads only what it had when loaded.
    Appended,
    /// Nothing: it is replaced by rename while served (a growing
    /// recording's index, by the next snapshot's), the title keeping its
    /// mapping of the file it loaded.
    Never,
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            compare: Compare::All,
        }
    }

    /// Whether `meta` is still the file this was taken of.
    fn matches(&self, meta: &std::fs::Metadata) -> bool {
        let now = Identity {
            compare: self.compare,
            ..Identity::of(meta)
        };
        let same_file = (now.dev, now.ino) == (self.dev, self.ino);
        match self.compare {
            Compare::All => now == *self,
            Compare::NotMtime => same_file && now.size == self.size,
            Compare::Appended => same_file && now.size >= self.size,
            Compare::Never => true,
        }
    }
}

pub(crate) struct Files {
    paths: [Option<(PathBuf, Identity)>; 4],
    mapped: [MappedFile; 4],
    /// The index, open for read-ahead (the index keeps only its mapping).
    index: File,
    device: u64,
    /// When the files were last compared with the disk (ms since `loaded`)
    /// and whether one had changed: every session's refills ask, the disk
    /// is asked at most every [`RECHECK_MS`].
    loaded: std::time::Instant,
    checked_ms: AtomicU64,
    changed: AtomicBool,
}

/// A title's file read whole by file I/O ([`Files::whole_reader`]).
pub(crate) struct WholeReader {
    /// The file's mapping, with the descriptor below.
    mapped: MappedFile,
    _file: File,
}

impl WholeReader {
    /// Reads `piece` of the file's mapping into the page cache by file
    /// I/O, so that a disk error is returned here rather than met as a
    /// fault in the mapping; in bounded requests
    /// (`fjord_storage::pin::read_in_requests`).
    pub(crate) fn read_into_cache(&self, piece: &[u8]) -> io::Result<()> {
        let range = self
            .mapped
            .offsets_of(piece)
            .ok_or_else(|| io::Error::other("not a piece of the file's mapping"))?;
        let (start, len) = (range.start as u64, range.len() as u64);
        fjord_storage::pin::read_in_requests(self.mapped.fd, start, len).map_err(pin_error)
    }
}

/// Reads `piece` of `m`'s mapping into the page cache through `m`'s
/// descriptor, so that a disk error is returned here rather than met as a
/// fault in the mapping.
fn piece_into_cache(m: &MappedFile, piece: &[u8]) -> io::Result<()> {
    let start = (piece.as_ptr() as usize)
        .checked_sub(m.base as usize)
        .filter(|s| s + piece.len() <= m.len)
        .ok_or_else(|| io::Error::other("not a piece of the file's mapping"))?;
    fjord_storage::pin::read_into_cache(m, start, piece.len()).map_err(pin_error)
}

fn pin_error(e: fjord_storage::pin::PinError) -> io::Error {
    match e {
        fjord_storage::pin::PinError::Read(e) | fjord_storage::pin::PinError::Other(e) => e,
        fjord_storage::pin::PinError::Truncated => io::ErrorKind::UnexpectedEof.into(),
        fjord_storage::pin::PinError::Fill(why) => io::Error::other(why),
    }
}

/// How often a title's files are compared with what was loaded.
const RECHECK_MS: u64 = 500;

const NONE: MappedFile = MappedFile {
    base: std::ptr::null(),
    len: 0,
    fd: -1,
};

impl Files {
    /// The index at `index_path` and the media; `filled`: both are written
    /// while they are served (slices landing), so only their identity and
    /// size say whether they changed, not their modification time.
    pub(crate) fn new(
        (media_path, media, media_bytes): (&Path, &File, &[u8]),
        (index_path, index_bytes): (&Path, &[u8]),
        filled: bool,
    ) -> io::Result<Self> {
        let index = File::open(index_path)?;
        let meta = media.metadata()?;
        let mut files = Self {
            paths: [None, None, None, None],
            mapped: [NONE; 4],
            device: meta.dev(),
            index,
            loaded: std::time::Instant::now(),
            checked_ms: AtomicU64::new(0),
            changed: AtomicBool::new(false),
        };
        files.set(Slot::Media, media_path, media, media_bytes)?;
        let index = files.index.try_clone()?;
        files.set(Slot::Index, index_path, &index, index_bytes)?;
        if filled {
            files.written_while_served(Slot::Media);
            files.written_while_served(Slot::Index);
        }
        Ok(files)
    }

    /// File `slot` is written while it is served (slices landing): only
    /// its identity and size say whether it changed.
    pub(crate) fn written_while_served(&mut self, slot: Slot) {
        self.compare(slot, Compare::NotMtime);
    }

    /// The title is a growing recording's snapshot: its media file grows
    /// (only its identity, and that it did not shrink, are compared), its
    /// index is replaced by the next snapshot's (not compared).
    pub(crate) fn grows(&mut self) {
        self.compare(Slot::Media, Compare::Appended);
        self.replaced(Slot::Index);
    }

    /// File `slot` may be replaced or rewritten while the title is served
    /// (a growing recording's parity): the title keeps its mapping.
    pub(crate) fn replaced(&mut self, slot: Slot) {
        self.compare(slot, Compare::Never);
    }

    fn compare(&mut self, slot: Slot, compare: Compare) {
        if let Some((_, id)) = &mut self.paths[slot as usize] {
            id.compare = compare;
        }
    }

    /// Records file `slot` at `path`, open as `file` and mapped as `bytes`.
    pub(crate) fn set(
        &mut self,
        slot: Slot,
        path: &Path,
        file: &File,
        bytes: &[u8],
    ) -> io::Result<()> {
        let fd: RawFd = match slot {
            Slot::Index => self.index.as_raw_fd(),
            _ => file.as_raw_fd(),
        };
        self.paths[slot as usize] = Some((path.to_owned(), Identity::of(&file.metadata()?)));
        self.mapped[slot as usize] = MappedFile {
            base: bytes.as_ptr(),
            len: bytes.len(),
            fd,
        };
        Ok(())
    }

    /// File `slot` for reading it whole, without the kernel's read-ahead
    /// (up to the device's read_ahead_kb, 8 MB on virtio disks), so bulk
    /// work puts in the disk's queue what it was paced for, not more. A
    /// duplicate of the title's descriptor, not the file opened anew: on
    /// FUSE an open drops the file's page cache, pages locked for sessions
    /// too (without `keep_cache`), and the engine then faulted them in. It
    /// shares the title's open file, which thus reads only what it is asked
    /// (the storage layer asks with `readahead(2)`; faults of the mapping
    /// do not look at it).
    pub(crate) fn whole_reader(&self, slot: Slot) -> io::Result<WholeReader> {
        let mapped = self.mapped[slot as usize];
        if mapped.fd < 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the title has no such file",
            ));
        }
        // SAFETY: the descriptor is open while the title is (see `read_at`);
        // it is only duplicated here.
        let file = unsafe { std::os::fd::BorrowedFd::borrow_raw(mapped.fd) }
            .try_clone_to_owned()
            .map(File::from)?;
        // SAFETY: a plain syscall on a descriptor we own.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        Ok(WholeReader {
            mapped: MappedFile {
                fd: file.as_raw_fd(),
                ..mapped
            },
            _file: file,
        })
    }

    /// Reads `piece` of file `slot`'s mapping into the page cache by file
    /// I/O (no copy; the kernel's read-ahead for a small read, not a
    /// fault's read-around).
    pub(crate) fn read_into_cache(&self, slot: Slot, piece: &[u8]) -> io::Result<()> {
        piece_into_cache(&self.mapped[slot as usize], piece)
    }

    /// Reads `buf.len()` bytes of file `slot` at `offset` with `pread`
    /// (never through the mapping, where a page the disk fails to read
    /// would be SIGBUS).
    pub(crate) fn read_at(&self, slot: Slot, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let fd = self.mapped[slot as usize].fd;
        if fd < 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the title has no such file",
            ));
        }
        // SAFETY: the descriptor is open while the title is (the Title owns
        // the File behind it); ManuallyDrop never closes it.
        let file = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
        file.read_exact_at(buf, offset)
    }

    /// Which of the title's files `bytes` are a slice of the mapping of.
    pub(crate) fn slot_of(&self, bytes: &[u8]) -> Option<Slot> {
        let slots = [Slot::Index, Slot::Media, Slot::Prefab, Slot::Parity];
        slots
            .into_iter()
            .find(|&s| self.mapped[s as usize].offsets_of(bytes).is_some())
    }

    /// The path of file `slot`, when the title has it.
    pub(crate) fn path(&self, slot: Slot) -> Option<&Path> {
        self.paths[slot as usize].as_ref().map(|(p, _)| p.as_path())
    }

    /// The mappings, by their place in [`fjord_storage::Source::files`].
    pub(crate) fn mapped(&self) -> &[MappedFile] {
        &self.mapped
    }

    /// The device the media file is on.
    pub(crate) fn device(&self) -> u64 {
        self.device
    }

    /// Appends the extent of `bytes`, a slice of file `slot`'s mapping.
    pub(crate) fn extent(&self, slot: Slot, bytes: &[u8], out: &mut Vec<Extent>) {
        if let Some(range) = self.mapped[slot as usize].offsets_of(bytes) {
            out.push(Extent {
                file: slot as usize,
                range,
            });
        }
    }

    /// Whether a file is no longer what was loaded: deleted, replaced,
    /// truncated or written.
    pub(crate) fn changed(&self) -> bool {
        let now = self.loaded.elapsed().as_millis() as u64 + RECHECK_MS;
        let last = self.checked_ms.load(Ordering::Relaxed);
        if self.changed.load(Ordering::Relaxed)
            || now < last + RECHECK_MS
            || self
                .checked_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return self.changed.load(Ordering::Relaxed);
        }
        let changed = self
            .paths
            .iter()
            .flatten()
            .any(|(path, was)| std::fs::metadata(path).map_or(true, |m| !was.matches(&m)));
        self.changed.fetch_or(changed, Ordering::Relaxed);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(path: &Path, compare: Compare) -> Identity {
        Identity {
            compare,
            ..Identity::of(&std::fs::metadata(path).unwrap())
        }
    }

    /// A growing recording's media may grow under its snapshot, not
    /// shrink or be replaced; its index may be replaced (the next
    /// snapshot's); any other file may not change at all.
    #[test]
    fn a_growing_file_may_be_appended_to_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (media, index) = (dir.path().join("r.mp4"), dir.path().join("r.mp4.fjidx"));
        std::fs::write(&media, b"fragment").unwrap();
        std::fs::write(&index, b"index").unwrap();
        let appended = identity(&media, Compare::Appended);
        let fixed = identity(&media, Compare::All);
        let replaced = identity(&index, Compare::Never);
        let now = |p: &Path| std::fs::metadata(p).unwrap();
        use std::io::Write;
        let mut f = File::options().append(true).open(&media).unwrap();
        f.write_all(b" and the next").unwrap();
        assert!(appended.matches(&now(&media)));
        assert!(!fixed.matches(&now(&media)));
        f.set_len(3).unwrap();
        assert!(!appended.matches(&now(&media)));
        std::fs::write(dir.path().join("new"), b"fragment and more").unwrap();
        std::fs::rename(dir.path().join("new"), &media).unwrap();
        assert!(!appended.matches(&now(&media)), "another file");
        std::fs::write(dir.path().join("next"), b"the next index").unwrap();
        std::fs::rename(dir.path().join("next"), &index).unwrap();
        assert!(replaced.matches(&now(&index)));
    }
}

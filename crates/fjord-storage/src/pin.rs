//! Resident, pinned chunks of mapped files, counted by reference.
//!
//! A chunk is [`CHUNK`] bytes of one mapping. The first holder reads it
//! ahead (`readahead(2)`: one large request; nothing when the page cache
//! holds it up to date, as `mincore(2)` tells) and locks it (`mlock(2)`: the
//! pages are read if they are not yet, mapped into the process and kept
//! from eviction); the last holder unlocks it (the pages stay in the page
//! cache, evictable). mlock is not counted — one `munlock` unlocks for
//! everybody — so sessions sharing a chunk share one count here.
//!
//! Why mlock on the mapping rather than reads into owned buffers: the data
//! paths already send by reference from these mappings (and the same page
//! serves every session of a title), so a locked page is exactly "known to
//! be resident" with no change to how packets leave. Where locking is not
//! allowed (`RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`), chunks are only
//! populated (`MADV_POPULATE_READ`): resident when handed over, but the
//! kernel may evict them under memory pressure; the server says so at start.
//!
//! A chunk the disk fails to read (EIO) is rebuilt when the caller says
//! how ([`Rebuild`]: the title's parity) and laid over the mapping
//! ([`crate::overlay`]): it then counts as resident like the others, and
//! stays so (anonymous memory, locked again by the next holder).
//!
//! A file whose bytes are not all on local disk (an edge title's media: a
//! sparse file of slices fetched from an origin) is filled first
//! ([`Fill`]): the chunks a pin loads are fetched before they are read,
//! and the hold the fill returns lives as long as the chunks are held, so
//! nothing evicts bytes from under a locked chunk.

use std::{
    io,
    ops::Range,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use std::os::fd::RawFd;

// A chunk table is looked up for every chunk a refill pins, holds and
// releases: foldhash (seeded per table) instead of SipHash, a tenth of the
// storage workers' CPU at 100 sessions.
use foldhash::HashMap;

use crate::source::{Hold, MappedFile};

/// Bytes per chunk: what is locked, counted and released as one. A refill
/// is read as one request whatever the chunk, so the chunk only sets how
/// much a session holds beyond what it needs: a partial chunk at each end of
/// each run it pins (its packets, and the index and offset tables they are
/// found from, 48 bytes a packet). 256 KiB chunks held 0.4-0.6 MB of tables
/// per 4.5 Mbit/s session for the 40 KB a refill's tables span.
pub const CHUNK: usize = 64 * 1024;

/// Rebuilds bytes `range` of the file being pinned into the buffer given
/// (`Source::rebuild` for that file) when the disk fails to read them:
/// how many packets it rebuilt, or why it cannot.
pub type Rebuild<'a> = &'a dyn Fn(Range<usize>, &mut [u8]) -> Result<usize, String>;

/// Makes bytes `range` of the file being pinned present on local disk
/// (`Source::fill` for that file), keeping them there while the hold it
/// returns lives; or says why it cannot.
pub type Fill<'a> = &'a dyn Fn(Range<usize>) -> Result<Option<Hold>, String>;

/// Where a chunk's bytes come from when the disk alone does not have them.
#[derive(Clone, Copy, Default)]
pub struct Backing<'a> {
    /// Fetches bytes not yet on local disk before they are read.
    pub fill: Option<Fill<'a>>,
    /// Rebuilds bytes the disk failed to read.
    pub rebuild: Option<Rebuild<'a>>,
}

/// A chunk: the mapping's base address and the chunk's number in it.
pub type ChunkKey = (usize, usize);

#[derive(Debug)]
enum State {
    Loading,
    Resident,
}

struct Entry {
    refs: u32,
    state: State,
    len: usize,
    /// What keeps a filled chunk's bytes on local disk, shared by the
    /// chunks one fill loaded; dropped with the last of them.
    hold: Option<Arc<Hold>>,
}

/// Why a chunk could not be made resident.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The disk failed to read it (EIO).
    #[error("read error: {0}")]
    Read(io::Error),
    /// The file is shorter than the mapping now.
    #[error("the file shrank")]
    Truncated,
    /// The bytes could not be fetched onto local disk.
    #[error("{0}")]
    Fill(String),
    #[error("{0}")]
    Other(io::Error),
}

pub struct Pins {
    table: Mutex<HashMap<ChunkKey, Entry>>,
    loaded: Condvar,
    /// Bytes of resident chunks held.
    pinned: AtomicU64,
    /// Locking is allowed (else chunks are only populated).
    lock: AtomicBool,
    /// Chunks the disk failed to read (EIO), rebuilt or not.
    read_errors: AtomicU64,
    /// Chunks rebuilt and laid over their mapping.
    repaired: AtomicU64,
    /// Chunks a pin found in the table (held or loading for another
    /// holder), and chunks it had to load.
    hits: AtomicU64,
    misses: AtomicU64,
    /// Chunks laid over with rebuilt bytes, and the file each belongs to:
    /// they are not read from the disk again. (A new mapping of the same
    /// file at the same address would be taken for overlaid: rare, and then
    /// it is only not checked before it is locked, as before overlays.)
    overlaid: Mutex<HashMap<ChunkKey, (u64, u64)>>,
}

impl Default for Pins {
    fn default() -> Self {
        Self {
            table: Mutex::new(HashMap::default()),
            loaded: Condvar::new(),
            pinned: AtomicU64::new(0),
            lock: AtomicBool::new(allow_locking()),
            read_errors: AtomicU64::new(0),
            repaired: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            overlaid: Mutex::new(HashMap::default()),
        }
    }
}

impl Pins {
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned.load(Ordering::Relaxed)
    }

    pub fn locks(&self) -> bool {
        self.lock.load(Ordering::Relaxed)
    }

    /// Chunks the disk failed to read (EIO), whether rebuilt or not.
    pub fn read_errors(&self) -> u64 {
        self.read_errors.load(Ordering::Relaxed)
    }

    /// Chunks rebuilt after a read error and laid over their mapping.
    pub fn repaired_chunks(&self) -> u64 {
        self.repaired.load(Ordering::Relaxed)
    }

    /// Chunks a pin found held or loading for another holder.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Chunks a pin had to load.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Makes the chunks covering `range` of `file` resident and holds them
    /// (appending their keys to `held`); blocks for the disk. The chunks it
    /// loads are filled first and a chunk the disk fails to read is rebuilt,
    /// as `backing` says. On error the chunks of this call already held
    /// stay in `held`.
    pub fn pin(
        &self,
        file: &MappedFile,
        range: Range<usize>,
        held: &mut Vec<ChunkKey>,
        backing: Backing<'_>,
    ) -> Result<(), PinError> {
        let range = range.start.min(file.len)..range.end.min(file.len);
        if range.is_empty() {
            return Ok(());
        }
        let chunks = range.start / CHUNK..range.end.div_ceil(CHUNK);
        let mut fresh = Vec::new();
        held.reserve(chunks.len());
        {
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            for c in chunks.clone() {
                let key = (file.base as usize, c);
                let e = table.entry(key).or_insert_with(|| {
                    fresh.push(c);
                    Entry {
                        refs: 0,
                        state: State::Loading,
                        len: chunk_len(file, c),
                        hold: None,
                    }
                });
                e.refs += 1;
                held.push(key);
            }
        }
        let (n, f) = (chunks.len() as u64, fresh.len() as u64);
        self.hits.fetch_add(n - f, Ordering::Relaxed);
        self.misses.fetch_add(f, Ordering::Relaxed);
        // Usually all in the page cache already: then nothing to read.
        let mut cached = true;
        if !fresh.is_empty() {
            let first = fresh[0] * CHUNK;
            let last = (fresh[fresh.len() - 1] * CHUNK + CHUNK).min(file.len);
            if let Some(fill) = backing.fill {
                self.fill(file, &fresh, fill(first..last), held)?;
            }
            cached = in_cache(file, first, last - first);
            if !cached {
                readahead(file, first..last);
            }
        }
        let mut failure = None;
        for &c in &fresh {
            let r = match self.make_resident(file, c, cached) {
                // The disk cannot read the chunk: rebuild its bytes and lay
                // them over the mapping, so the sessions play on; when they
                // cannot be rebuilt, the read error stands (its sessions end).
                Err(PinError::Read(e)) => {
                    self.read_errors.fetch_add(1, Ordering::Relaxed);
                    // (The source says why when it cannot rebuild.)
                    match backing.rebuild.map(|f| self.repair(file, c, f)) {
                        Some(Ok(())) => Ok(()),
                        Some(Err(_)) | None => Err(PinError::Read(e)),
                    }
                }
                r => r,
            };
            let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
            let key = (file.base as usize, c);
            match r {
                Ok(()) => {
                    if let Some(e) = table.get_mut(&key) {
                        e.state = State::Resident;
                        self.pinned.fetch_add(e.len as u64, Ordering::Relaxed);
                    }
                }
                Err(err) => {
                    // Not resident: nobody may take it for resident.
                    table.remove(&key);
                    held.retain(|k| *k != key);
                    failure.get_or_insert(err);
                }
            }
            self.loaded.notify_all();
        }
        if let Some(e) = failure {
            return Err(e);
        }
        self.wait_loaded(held, chunks.len())
    }

    /// Gives the `fresh` chunks of `file` the hold their fill returned, or
    /// drops them (none is resident) when it failed.
    fn fill(
        &self,
        file: &MappedFile,
        fresh: &[usize],
        filled: Result<Option<Hold>, String>,
        held: &mut Vec<ChunkKey>,
    ) -> Result<(), PinError> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let keys = fresh.iter().map(|&c| (file.base as usize, c));
        match filled {
            Ok(hold) => {
                let hold = hold.map(Arc::new);
                for key in keys {
                    if let Some(e) = table.get_mut(&key) {
                        e.hold = hold.clone();
                    }
                }
                Ok(())
            }
            Err(why) => {
                for key in keys {
                    table.remove(&key);
                    held.retain(|k| *k != key);
                }
                self.loaded.notify_all();
                Err(PinError::Fill(why))
            }
        }
    }

    /// Waits until the last `n` keys of `held` (loaded by other threads
    /// perhaps) are resident; a chunk whose load failed is an error.
    fn wait_loaded(&self, held: &mut Vec<ChunkKey>, n: usize) -> Result<(), PinError> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let from = held.len().saturating_sub(n);
        loop {
            let mut loading = false;
            for key in &held[from..] {
                match table.get(key) {
                    Some(Entry {
                        state: State::Loading,
                        ..
                    }) => loading = true,
                    Some(_) => {}
                    None => {
                        let key = *key;
                        drop(table);
                        held.retain(|k| *k != key);
                        return Err(PinError::Other(io::Error::other(
                            "another reader failed to load the chunk",
                        )));
                    }
                }
            }
            if !loading {
                return Ok(());
            }
            table = self.loaded.wait(table).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Reads chunk `c` into the page cache (unless `cached`: known to be
    /// there and up to date) and locks it.
    fn make_resident(&self, file: &MappedFile, c: usize, cached: bool) -> Result<(), PinError> {
        let start = c * CHUNK;
        let len = chunk_len(file, c);
        let nothing_to_read = cached || {
            let set = self.overlaid.lock().unwrap_or_else(|e| e.into_inner());
            set.get(&(file.base as usize, c)) == Some(&file_id(file))
        };
        if !nothing_to_read {
            // Read the chunk into the page cache first, seeing the disk's
            // errors: mlock and MADV_POPULATE_READ must only ever fault in
            // pages already read, because on a page the disk fails to read
            // they retry the read forever (the fault path drops the error
            // when it retries; seen on Linux 6.18 with FUSE). A chunk laid
            // over with rebuilt bytes is anonymous memory: nothing to read.
            read_into_cache(file, start, len)?;
        }
        // SAFETY: start..start+len lies inside the mapping (chunk_len clips
        // it), which the Source keeps mapped while it is pinned.
        let addr = unsafe { file.base.add(start) } as *const libc::c_void;
        if self.locks() {
            // SAFETY: a range of a live mapping; mlock only faults it in.
            if unsafe { libc::mlock(addr, len) } == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EPERM) {
                self.lock.store(false, Ordering::Relaxed);
                tracing::warn!(
                    "cannot lock read-ahead ({e}); pages are populated but may be evicted before they are sent"
                );
            }
        } else {
            // SAFETY: as above; MADV_POPULATE_READ only faults pages in.
            if unsafe { libc::madvise(addr as *mut _, len, libc::MADV_POPULATE_READ) } == 0 {
                return Ok(());
            }
        }
        Err(classify(file, start, len))
    }

    /// Rebuilds chunk `c` of `file` with `rebuild` and lays the bytes over
    /// the mapping ([`crate::overlay`]), locked when locking is allowed.
    fn repair(&self, file: &MappedFile, c: usize, rebuild: Rebuild<'_>) -> Result<(), String> {
        let start = c * CHUNK;
        let mut bytes = vec![0u8; chunk_len(file, c)];
        rebuild(start..start + bytes.len(), &mut bytes)?;
        // SAFETY: the chunk starts on a page (CHUNK is a multiple of the page
        // size, the mapping starts on one) and lies inside the mapping, which
        // the Source keeps mapped; nobody reads it while it is loading.
        unsafe { crate::overlay::replace(file.base.add(start), &bytes, self.locks()) }.map_err(
            |e| {
                tracing::warn!("cannot lay rebuilt bytes over a title's mapping: {e}");
                format!("cannot lay the rebuilt bytes over the mapping: {e}")
            },
        )?;
        self.repaired.fetch_add(1, Ordering::Relaxed);
        let mut set = self.overlaid.lock().unwrap_or_else(|e| e.into_inner());
        set.insert((file.base as usize, c), file_id(file));
        Ok(())
    }

    /// Another holder of the chunks of `range` of `file` that are pinned
    /// already (by the caller's pin of a wider range): no I/O, no hit
    /// counted; chunks not pinned are left out.
    pub fn hold(&self, file: &MappedFile, range: Range<usize>, held: &mut Vec<ChunkKey>) {
        let range = range.start.min(file.len)..range.end.min(file.len);
        if range.is_empty() {
            return;
        }
        let chunks = range.start / CHUNK..range.end.div_ceil(CHUNK);
        held.reserve(chunks.len());
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for c in chunks {
            let key = (file.base as usize, c);
            if let Some(e) = table.get_mut(&key) {
                e.refs += 1;
                held.push(key);
            }
        }
    }

    /// Releases chunks held by one holder.
    pub fn unpin(&self, keys: &[ChunkKey]) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            let Some(e) = table.get_mut(key) else {
                continue;
            };
            e.refs -= 1;
            if e.refs > 0 {
                continue;
            }
            let len = e.len;
            table.remove(key);
            self.pinned.fetch_sub(len as u64, Ordering::Relaxed);
            if self.locks() {
                // SAFETY: the chunk of a live mapping (holders keep it
                // mapped); munlock never faults.
                unsafe { libc::munlock((key.0 + key.1 * CHUNK) as *const libc::c_void, len) };
            }
        }
    }
}

fn chunk_len(file: &MappedFile, c: usize) -> usize {
    (file.len - c * CHUNK).min(CHUNK)
}

/// Starts reading `range` of the file into the page cache as one request
/// (the fault path of mlock would read it in read-around pieces).
fn readahead(file: &MappedFile, range: Range<usize>) {
    // SAFETY: readahead only reads into the page cache.
    unsafe { libc::readahead(file.fd, range.start as i64, range.len()) };
}

/// The file behind a mapping: (device, inode).
fn file_id(file: &MappedFile) -> (u64, u64) {
    // SAFETY: fstat fills the struct it is given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(file.fd, &mut st) == 0 {
            (st.st_dev, st.st_ino)
        } else {
            (0, 0)
        }
    }
}

/// Reads bytes `start..start + len` of the file into the page cache and
/// waits for them, without copying them anywhere: `sendfile` to /dev/null
/// moves page references. The disk's error (EIO) is the read's error.
/// Bytes already in the cache and up to date are not passed again: there
/// is nothing to read, so no error to see.
pub fn read_into_cache(file: &MappedFile, start: usize, len: usize) -> Result<(), PinError> {
    if in_cache(file, start, len) {
        return Ok(());
    }
    read_fd_into_cache(file.fd, start as u64, len as u64)
}

/// Whether every page of bytes `start..start + len` of the mapping is in
/// the page cache and up to date (`mincore(2)`: a walk of the page table
/// and the cache's index, no I/O), so that touching or locking them reads
/// nothing. (`cachestat(2)` also counts pages still being read, or that
/// failed to read.) `false` where the kernel cannot say.
fn in_cache(file: &MappedFile, start: usize, len: usize) -> bool {
    const PAGES: usize = 64;
    let page = crate::overlay::page_size();
    let end = (start + len).min(file.len);
    let mut at = start / page * page;
    let mut seen = [0u8; PAGES];
    while at < end {
        let n = (end - at).min(PAGES * page);
        // SAFETY: a page-aligned range of a live mapping (its end clipped
        // to the file's length); one byte of `seen` per page of it.
        let r = unsafe { libc::mincore(file.base.add(at) as *mut _, n, seen.as_mut_ptr()) };
        if r != 0 || seen[..n.div_ceil(page)].iter().any(|v| v & 1 == 0) {
            return false;
        }
        at += n;
    }
    true
}

/// What bulk work asks a disk for at once: smaller asks cost the disk's
/// IOPS (what first sessions wait for), larger ones sit in its queue ahead
/// of the streams' reads for longer.
pub const BULK_REQUEST: u64 = 256 * 1024;

/// [`read_into_cache`] for bulk work: bytes `start..start + len` of the
/// file open as `fd` (a descriptor without the kernel's read-ahead,
/// `POSIX_FADV_RANDOM`), asked for in requests of [`BULK_REQUEST`]
/// (`readahead(2)`), so that what bulk work puts in a disk's queue ahead
/// of stream reads stays bounded. (`sendfile` alone would ask in 64 KiB
/// pieces, many of a disk's IOPS.)
pub fn read_in_requests(fd: RawFd, start: u64, len: u64) -> Result<(), PinError> {
    let end = start.saturating_add(len);
    let mut at = start;
    while at < end {
        let n = (end - at).min(BULK_REQUEST);
        // SAFETY: readahead only reads into the page cache.
        unsafe { libc::readahead(fd, at as i64, n as usize) };
        read_fd_into_cache(fd, at, n)?;
        at += n;
    }
    Ok(())
}

/// Whether every page of bytes `start..start + len` of the file open as
/// `fd` is in the page cache (`cachestat(2)`, Linux 6.5: a walk of the
/// cache's index, no I/O); `false` where the kernel cannot say.
pub fn resident(fd: RawFd, start: u64, len: u64) -> bool {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // Its number in the common table of newer system calls (libc does not
    // name it for every target).
    const SYS_CACHESTAT: libc::c_long = 451;
    if len == 0 {
        return true;
    }
    let range = Range { off: start, len };
    let mut stat = Stat::default();
    // SAFETY: cachestat reads `range` and fills `stat`, both ours.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, fd, &range, &mut stat, 0) };
    let page = 4096;
    let pages = (start + len).div_ceil(page) - start / page;
    r == 0 && stat.nr_cache >= pages
}

fn read_fd_into_cache(fd: RawFd, start: u64, len: u64) -> Result<(), PinError> {
    static NULL: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let Some(null) = NULL.get_or_init(|| {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .ok()
    }) else {
        return Ok(()); // cannot check: lock as before
    };
    let mut off = start as libc::off_t;
    let end = (start + len) as libc::off_t;
    while off < end {
        // SAFETY: sendfile between two descriptors we hold; it advances off.
        let n = unsafe {
            libc::sendfile(
                std::os::fd::AsRawFd::as_raw_fd(null),
                fd,
                &mut off,
                (end - off) as usize,
            )
        };
        match n {
            0 => return Err(PinError::Truncated),
            n if n > 0 => {}
            _ => {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                    Some(libc::EIO) => Err(PinError::Read(e)),
                    // A file that cannot be spliced: lock as before.
                    Some(libc::EINVAL) | Some(libc::ENOSYS) => Ok(()),
                    _ => Err(PinError::Other(e)),
                };
            }
        }
    }
    Ok(())
}

/// Why a chunk could not be faulted in: the read's own error.
fn classify(file: &MappedFile, start: usize, len: usize) -> PinError {
    let mut buf = vec![0u8; len];
    // SAFETY: buf has len bytes.
    let n = unsafe { libc::pread(file.fd, buf.as_mut_ptr().cast(), len, start as i64) };
    match n {
        n if n < 0 => {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EIO) {
                PinError::Read(e)
            } else {
                PinError::Other(e)
            }
        }
        n if (n as usize) < len => PinError::Truncated,
        _ => PinError::Other(io::Error::other("cannot fault the chunk in")),
    }
}

/// Lifts the soft memory-lock limit to the hard one; whether locking then
/// looks possible (root, CAP_IPC_LOCK or an unlimited limit).
fn allow_locking() -> bool {
    // SAFETY: get/setrlimit on a local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) != 0 {
            return false;
        }
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim);
        lim.rlim_cur == libc::RLIM_INFINITY || libc::geteuid() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{io::Write, os::fd::AsRawFd};

    fn mapped(len: usize) -> (tempfile::NamedTempFile, memmap::Map, MappedFile) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![7u8; len]).unwrap();
        let map = memmap::Map::new(f.as_file(), len);
        let file = MappedFile {
            base: map.ptr,
            len,
            fd: f.as_file().as_raw_fd(),
        };
        (f, map, file)
    }

    /// A read-only shared mapping for the tests (the crate itself only
    /// pins mappings others made).
    mod memmap {
        pub struct Map {
            pub ptr: *const u8,
            len: usize,
        }
        impl Map {
            pub fn new(f: &std::fs::File, len: usize) -> Self {
                use std::os::fd::AsRawFd;
                // SAFETY: maps a file we hold open; unmapped on drop.
                let ptr = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ,
                        libc::MAP_SHARED,
                        f.as_raw_fd(),
                        0,
                    )
                };
                assert_ne!(ptr, libc::MAP_FAILED);
                Map {
                    ptr: ptr as *const u8,
                    len,
                }
            }
        }
        impl Drop for Map {
            fn drop(&mut self) {
                // SAFETY: our own mapping.
                unsafe { libc::munmap(self.ptr as *mut _, self.len) };
            }
        }
    }

    #[test]
    fn shared_chunks_are_counted_once_and_released_by_the_last_holder() {
        let (_f, _m, file) = mapped(3 * CHUNK + 100);
        let pins = Pins::default();
        let (mut a, mut b) = (vec![], vec![]);
        pins.pin(&file, 10..CHUNK + 1, &mut a, Backing::default())
            .unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(pins.pinned_bytes(), 2 * CHUNK as u64);
        pins.pin(&file, CHUNK..3 * CHUNK + 100, &mut b, Backing::default())
            .unwrap();
        assert_eq!(b.len(), 3, "the last chunk is short");
        assert_eq!(pins.pinned_bytes(), (3 * CHUNK + 100) as u64);
        pins.unpin(&a);
        assert_eq!(
            pins.pinned_bytes(),
            (2 * CHUNK + 100) as u64,
            "chunk 1 is still held by b"
        );
        pins.unpin(&b);
        assert_eq!(pins.pinned_bytes(), 0);
    }

    #[test]
    fn residency_is_what_the_page_cache_holds() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        f.as_file().sync_all().unwrap();
        let fd = f.as_file().as_raw_fd();
        assert!(resident(fd, 4096, 100_000), "just written");
        // SAFETY: a plain syscall on our descriptor.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert!(!resident(fd, 0, 1 << 20), "dropped from the cache");
        read_in_requests(fd, 0, 1 << 20).unwrap();
        assert!(resident(fd, 0, 1 << 20), "read back in");
    }

    #[test]
    fn only_pages_read_and_up_to_date_are_in_the_cache() {
        let (f, _m, file) = mapped(2 * CHUNK + 100);
        f.as_file().sync_all().unwrap();
        // SAFETY: a plain syscall on our descriptor.
        unsafe { libc::posix_fadvise(file.fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert!(!in_cache(&file, 0, file.len), "dropped from the cache");
        read_into_cache(&file, CHUNK + 10, CHUNK).unwrap();
        assert!(in_cache(&file, CHUNK, CHUNK + 100), "read to the end");
        assert!(!in_cache(&file, CHUNK - 4096, 4096), "not read");
        assert!(in_cache(&file, 2 * CHUNK + 99, 1), "the last partial page");
    }

    #[test]
    fn pinned_pages_are_resident() {
        let (_f, _m, file) = mapped(2 * CHUNK);
        let pins = Pins::default();
        let mut held = vec![];
        pins.pin(&file, 0..2 * CHUNK, &mut held, Backing::default())
            .unwrap();
        let pages = 2 * CHUNK / 4096;
        let mut vec = vec![0u8; pages];
        // SAFETY: mincore on our mapping into a vector of one byte per page.
        let r = unsafe { libc::mincore(file.base as *mut _, 2 * CHUNK, vec.as_mut_ptr()) };
        assert_eq!(r, 0);
        assert!(vec.iter().all(|v| v & 1 == 1), "every page resident");
        pins.unpin(&held);
    }

    #[test]
    fn a_truncated_file_is_an_error_not_a_crash() {
        let (f, _m, file) = mapped(2 * CHUNK);
        f.as_file().set_len(CHUNK as u64 / 2).unwrap();
        let pins = Pins::default();
        let mut held = vec![];
        let r = pins.pin(&file, CHUNK..2 * CHUNK, &mut held, Backing::default());
        assert!(matches!(r, Err(PinError::Truncated)), "{r:?}");
        assert!(held.is_empty());
        assert_eq!(pins.pinned_bytes(), 0);
    }

    #[test]
    fn a_rebuilt_chunk_is_laid_over_the_mapping_and_counted() {
        let (_f, _m, file) = mapped(2 * CHUNK + 300);
        let pins = Pins::default();
        let rebuild = |range: Range<usize>, out: &mut [u8]| {
            assert_eq!(range, 2 * CHUNK..2 * CHUNK + 300);
            out.fill(9);
            Ok(3)
        };
        pins.repair(&file, 2, &rebuild).unwrap();
        assert_eq!(pins.repaired_chunks(), 1);
        // SAFETY: the test's mapping, still mapped (file pages and overlay).
        let seen = unsafe { std::slice::from_raw_parts(file.base, file.len) };
        assert!(seen[..2 * CHUNK].iter().all(|&b| b == 7), "file bytes");
        assert!(seen[2 * CHUNK..].iter().all(|&b| b == 9), "rebuilt bytes");
        // Pinning it again needs no rebuild: the overlay is resident.
        let mut held = vec![];
        (pins.pin(
            &file,
            2 * CHUNK..2 * CHUNK + 300,
            &mut held,
            Backing::default(),
        ))
        .unwrap();
        pins.unpin(&held);
        let refuse = |_: Range<usize>, _: &mut [u8]| Err("no parity".to_owned());
        assert!(pins.repair(&file, 0, &refuse).is_err());
        assert_eq!(pins.repaired_chunks(), 1);
    }

    /// Counts the holds alive, to see when a fill's hold is dropped.
    struct Counted(Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A fill is asked for exactly the chunks a pin loads, once however
    /// many holders share them; its hold lives until the last holder
    /// lets go, and a fill that fails pins nothing.
    #[test]
    fn a_fill_covers_the_chunks_loaded_and_its_hold_lives_while_they_are_held() {
        let (_f, _m, file) = mapped(4 * CHUNK);
        let pins = Pins::default();
        let alive = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let asked = Mutex::new(Vec::new());
        let fill = |range: Range<usize>| {
            asked.lock().unwrap().push(range);
            alive.fetch_add(1, Ordering::SeqCst);
            Ok(Some(Box::new(Counted(alive.clone())) as Hold))
        };
        let backing = Backing {
            fill: Some(&fill),
            rebuild: None,
        };
        let (mut a, mut b) = (vec![], vec![]);
        pins.pin(&file, 0..2 * CHUNK, &mut a, backing).unwrap();
        pins.pin(&file, CHUNK..3 * CHUNK, &mut b, backing).unwrap();
        assert_eq!(*asked.lock().unwrap(), [0..2 * CHUNK, 2 * CHUNK..3 * CHUNK]);
        assert_eq!(alive.load(Ordering::SeqCst), 2);
        pins.unpin(&a);
        assert_eq!(
            alive.load(Ordering::SeqCst),
            2,
            "chunk 1 is still held by b"
        );
        pins.unpin(&b);
        assert_eq!(alive.load(Ordering::SeqCst), 0);

        let refuse = |_: Range<usize>| Err("origin down".to_owned());
        let backing = Backing {
            fill: Some(&refuse),
            rebuild: None,
        };
        let mut c = vec![];
        let r = pins.pin(&file, 0..CHUNK, &mut c, backing);
        assert!(
            matches!(r, Err(PinError::Fill(ref why)) if why == "origin down"),
            "{r:?}"
        );
        assert!(c.is_empty());
        assert_eq!(pins.pinned_bytes(), 0);
    }
}

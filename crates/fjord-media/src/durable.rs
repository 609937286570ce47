//! Files fjord writes beside the media (index, parity, packets, a repaired
//! copy) appear whole or not at all: written to a temporary file in the
//! same directory, synced, then renamed over the name ([`replace`]: not
//! synced, for a file made again from what is durable anyway). While they
//! are written, [`WriteBehind`] keeps their dirty pages few.

use std::{
    fs::File,
    io::{self, Write},
    os::fd::AsRawFd,
    path::Path,
};

use tempfile::NamedTempFile;

/// The directory `path` is in (`.` for a bare name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A temporary file named `prefix…` in the directory of `path`, so the
/// rename in [`persist`] stays on one filesystem.
pub fn temp_beside(path: &Path, prefix: &str) -> io::Result<NamedTempFile> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempfile_in(dir_of(path))
}

/// Gives `tmp` the permissions `mode` (temporary files are created 0600),
/// syncs it and renames it to `path`, durably.
pub fn persist(tmp: NamedTempFile, path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // Make the rename itself durable; not all filesystems allow syncing a
    // directory.
    if let Ok(d) = File::open(dir_of(path)) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// [`persist`] without syncing: after a crash `path` may hold the old
/// file, the new, or one cut short; for files never taken after a
/// restart, whose loss costs only their making again (a growing
/// recording's snapshot index: its checksum or its source identity
/// refuses it).
pub fn replace(tmp: NamedTempFile, path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Sends the bytes `range` of `file` to the disk without waiting for them
/// (best effort: a failure only leaves them to the kernel's own writeback).
pub fn start_writeback(file: &File, range: std::ops::Range<u64>) {
    let len = range.end.saturating_sub(range.start);
    // SAFETY: sync_file_range takes any fd and range.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            range.start as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// How much of a file [`WriteBehind`] lets be dirty before it starts
/// writing it back.
const WINDOW: u64 = 8 << 20;

/// Writes a large file behind its writer: each [`WINDOW`] written is sent
/// to the disk at once and, once the next one is, waited for and dropped
/// from the page cache. Without it a gigabyte of parity or packets sits
/// dirty until the kernel's thresholds (a fifth of RAM) are reached, then
/// leaves at once, and a memory cgroup's reclaim stalls on those pages
/// (cgroup v1 waits for writeback in reclaim): the streams that share the
/// cgroup's page cache wait with it. Dropping what was written also keeps
/// bulk work from evicting the streams' read-ahead, as MARS keeps bulk out
/// of the real-time queue. No crate does this (it is two syscalls).
pub struct WriteBehind<'a> {
    file: &'a File,
    /// Where the next sequential write ([`Write`]) goes.
    at: u64,
    /// Start of the window not yet sent to the disk.
    unsent: u64,
    /// Start of the window sent but not yet waited for.
    sent: u64,
}

impl<'a> WriteBehind<'a> {
    /// Writing `file` from its start.
    pub fn new(file: &'a File) -> Self {
        WriteBehind {
            file,
            at: 0,
            unsent: 0,
            sent: 0,
        }
    }

    /// The file is written up to `end` (writes at their own offsets must
    /// come in increasing order for this to bound anything).
    pub fn written_to(&mut self, end: u64) {
        if end < self.unsent + WINDOW {
            return;
        }
        let fd = self.file.as_raw_fd();
        start_writeback(self.file, self.unsent..end);
        // Best effort: an error here only loses the bound, and the final
        // sync in [`persist`] reports what matters.
        // SAFETY: sync_file_range and posix_fadvise take any fd and range.
        unsafe {
            let (from, len) = (self.sent as i64, (self.unsent - self.sent) as i64);
            if len > 0 {
                libc::sync_file_range(
                    fd,
                    from,
                    len,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
                libc::posix_fadvise(fd, from, len, libc::POSIX_FADV_DONTNEED);
            }
        }
        self.sent = self.unsent;
        self.unsent = end;
    }
}

impl Write for WriteBehind<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = (&mut &*self.file).write(buf)?;
        self.at += n as u64;
        self.written_to(self.at);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirty_and_cached(f: &File, len: u64) -> (u64, u64) {
        // cachestat(2): cache, dirty, writeback, evicted, recently evicted.
        let range = [0u64, len];
        let mut stat = [0u64; 5];
        // SAFETY: the kernel writes 5 u64 into `stat`; range is two u64.
        let r = unsafe { libc::syscall(451, f.as_raw_fd(), range.as_ptr(), stat.as_mut_ptr(), 0) };
        assert_eq!(r, 0, "cachestat: {}", io::Error::last_os_error());
        (stat[1], stat[0])
    }

    #[test]
    fn a_file_written_behind_leaves_few_pages_dirty_or_cached() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = temp_beside(&dir.path().join("big.fjpkt"), ".t").unwrap();
        let chunk = vec![7u8; 1 << 20];
        let len = 64u64 << 20;
        let mut w = io::BufWriter::new(WriteBehind::new(tmp.as_file()));
        for _ in 0..len >> 20 {
            w.write_all(&chunk).unwrap();
        }
        w.flush().unwrap();
        drop(w);
        let page = 4096;
        let (dirty, cached) = dirty_and_cached(tmp.as_file(), len);
        // SAFETY: statfs fills the struct we own.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: the descriptor is open and `fs` is ours to fill.
        unsafe { libc::fstatfs(tmp.as_file().as_raw_fd(), &mut fs) };
        if fs.f_type == libc::TMPFS_MAGIC {
            eprintln!(
                "skipped: {} is tmpfs, which has no disk to write behind to",
                dir.path().display()
            );
        } else {
            // At most the two windows in flight and the writer's buffer.
            assert!(
                dirty * page <= 2 * WINDOW + (1 << 20),
                "dirty {dirty} pages"
            );
            assert!(
                cached * page <= 2 * WINDOW + (1 << 20),
                "cached {cached} pages"
            );
        }
        assert_eq!(tmp.as_file().metadata().unwrap().len(), len);
        persist(tmp, &dir.path().join("big.fjpkt"), 0o644).unwrap();
        let back = std::fs::read(dir.path().join("big.fjpkt")).unwrap();
        assert!(back.iter().all(|&b| b == 7));
    }
}

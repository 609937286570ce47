//! Rebuilt bytes in place of a chunk of a file mapping the disk cannot read.
//!
//! The engine sends packets by reference from a title's mappings. When a
//! chunk of one fails to read (EIO) and its bytes could be rebuilt (from
//! the title's parity, see `Source::rebuild`), the storage layer puts them
//! where the engine already looks: anonymous memory owned by this process
//! replaces exactly that chunk of the mapping, read-only. Nothing else
//! changes: the mapping stays one address range (unmapping it whole later
//! unmaps the overlay too), pointers into it now read the rebuilt bytes, and
//! the chunk is locked and counted like any other.
//!
//! The replacement is atomic for readers: the bytes are written into a
//! fresh anonymous mapping first, which `mremap` then moves over the chunk
//! in one step, so no thread ever sees half-written (or zero) bytes there.
//! The overlay lives as long as the mapping; a title's damaged chunks cost
//! their size in memory until the title is dropped (re-ingested, repaired).

use std::io;

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(1)
}

/// Replaces the bytes at `at .. at + bytes.len()` of a live mapping with a
/// read-only private copy of `bytes`, locked in memory when `lock`.
///
/// # Safety
/// `at` is page-aligned and `at .. at + bytes.len()` (rounded up to whole
/// pages) lies inside one mapping the caller owns and keeps mapped; no
/// reference into that range may assume its old contents.
pub unsafe fn replace(at: *const u8, bytes: &[u8], lock: bool) -> io::Result<()> {
    let page = page_size();
    if !(at as usize).is_multiple_of(page) || bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an overlay starts on a page and is not empty",
        ));
    }
    let len = bytes.len().div_ceil(page) * page;
    // SAFETY: a new anonymous private mapping somewhere the kernel chooses.
    let fresh = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if fresh == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let undo = |e: io::Error| {
        // SAFETY: our own mapping of len bytes, not yet moved.
        unsafe { libc::munmap(fresh, len) };
        e
    };
    // SAFETY: fresh has len >= bytes.len() writable bytes; they do not
    // overlap `bytes` (a new mapping). The tail past bytes.len() stays zero,
    // as a file mapping reads past the end of the file.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), fresh.cast::<u8>(), bytes.len()) };
    // SAFETY: our own mapping.
    if unsafe { libc::mprotect(fresh, len, libc::PROT_READ) } != 0 {
        return Err(undo(io::Error::last_os_error()));
    }
    // SAFETY: moves our mapping over `at..at+len`, which the caller
    // guarantees is inside a mapping it owns; whatever was mapped there is
    // unmapped by the kernel in the same step.
    let moved = unsafe {
        libc::mremap(
            fresh,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            at as *mut libc::c_void,
        )
    };
    if moved == libc::MAP_FAILED {
        return Err(undo(io::Error::last_os_error()));
    }
    if lock {
        // SAFETY: the range just mapped; mlock only faults it in. Failing
        // to lock leaves anonymous pages, still correct.
        unsafe { libc::mlock(at.cast(), len) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{io::Write, os::fd::AsRawFd};

    #[test]
    fn an_overlaid_chunk_reads_the_new_bytes_and_the_rest_the_file() {
        let page = page_size();
        let len = 8 * page + 100;
        let file_bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&file_bytes).unwrap();
        // SAFETY: maps a file we hold open; unmapped below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_file().as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let base = base as *const u8;
        // Pages 2..4 get other bytes; then the short last page.
        let other = vec![0xA5u8; 2 * page];
        // SAFETY: page-aligned, inside our mapping.
        unsafe { replace(base.add(2 * page), &other, true) }.unwrap();
        let tail = vec![0x5Au8; 100];
        // SAFETY: the last, partial page of our mapping.
        unsafe { replace(base.add(8 * page), &tail, false) }.unwrap();
        // SAFETY: the whole mapping is still mapped (file pages and overlays).
        let seen = unsafe { std::slice::from_raw_parts(base, len) };
        assert_eq!(&seen[..2 * page], &file_bytes[..2 * page]);
        assert!(seen[2 * page..4 * page].iter().all(|&b| b == 0xA5));
        assert_eq!(&seen[4 * page..8 * page], &file_bytes[4 * page..8 * page]);
        assert!(seen[8 * page..].iter().all(|&b| b == 0x5A));
        // The overlay is read-only like the file mapping around it.
        // SAFETY: querying our own range.
        let r = unsafe { libc::mprotect(base.add(2 * page) as *mut _, page, libc::PROT_READ) };
        assert_eq!(r, 0);
        // Unmapping the whole range (as the mapping's owner does) works.
        // SAFETY: our mapping, no references into it remain.
        assert_eq!(unsafe { libc::munmap(base as *mut _, len) }, 0);
    }

    #[test]
    fn an_unaligned_overlay_is_refused() {
        // SAFETY: refused before the address is used.
        let r = unsafe { replace((page_size() + 1) as *const u8, &[1, 2, 3], false) };
        assert!(r.is_err());
    }
}

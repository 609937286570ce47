//! Where slices live on disk: one sparse file per version of an object,
//! as long as the object, each slice written at its own offset, the
//! slices not held left as holes.
//!
//! So an object's cached bytes are one file a server can map and send by
//! reference like a local title's, and evicting a slice gives its blocks
//! back (`fallocate` punching a hole) without touching the others. A
//! hole reads as zeros, which fail the slice's checksum: a read never
//! takes an evicted or half-written slice for a stored one.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::slice;

/// Writes a slice of an object of `size` bytes at `offset` in `path`,
/// making the file (sparse, `size` long) if it is new.
pub fn write_slice(path: &Path, size: u64, offset: u64, bytes: &[u8]) -> io::Result<()> {
    sized(path, size)?.write_all_at(bytes, offset)
}

/// Makes `path` a file of `size` bytes if it is not one: sparse, its
/// slices to be written in.
pub fn make(path: &Path, size: u64) -> io::Result<()> {
    sized(path, size).map(drop)
}

/// `path` open for writing, made `size` bytes long (sparse) if it is not.
fn sized(path: &Path, size: u64) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if f.metadata()?.len() != size {
        f.set_len(size)?;
    }
    Ok(f)
}

/// `len` bytes at `offset` of `path`.
pub fn read_slice(path: &Path, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    File::open(path)?.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// Gives back the blocks of `range` of `path`; its length stays.
pub fn punch(path: &Path, range: Range<u64>) -> io::Result<()> {
    let f = OpenOptions::new().write(true).open(path)?;
    punch_file(&f, range)
}

fn punch_file(f: &File, range: Range<u64>) -> io::Result<()> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    let (at, len) = (
        range.start as libc::off_t,
        (range.end - range.start) as libc::off_t,
    );
    // SAFETY: fallocate on an open descriptor touches only that file.
    match unsafe { libc::fallocate(f.as_raw_fd(), mode, at, len) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// At start: removes the files of `dir` that hold no slice the map names,
/// and punches in the others every slice the map does not name (left by a
/// run that stopped between writing a slice and noting it, or between
/// noting an eviction and punching it), so the disk holds what the map
/// counts.
pub fn tidy(dir: &Path, live: &HashMap<String, HashSet<u64>>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(held) = live.get(name.to_string_lossy().as_ref()) else {
            let _ = std::fs::remove_file(entry.path());
            continue;
        };
        let f = OpenOptions::new().write(true).open(entry.path())?;
        let size = f.metadata()?.len();
        for i in (0..slice::count(size)).filter(|i| !held.contains(i)) {
            punch_file(&f, slice::bounds(i, size))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn slices_land_at_their_offsets_and_holes_give_blocks_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let size = 3 * slice::SLICE_BYTES;
        let s1 = vec![7u8; slice::SLICE_BYTES as usize];
        write_slice(&path, size, slice::SLICE_BYTES, &s1).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        assert_eq!(read_slice(&path, slice::SLICE_BYTES, 4).unwrap(), [7; 4]);
        assert_eq!(read_slice(&path, 0, 4).unwrap(), [0; 4], "a hole");
        let blocks = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
        assert!(blocks(&path) >= slice::SLICE_BYTES);
        punch(&path, slice::bounds(1, size)).unwrap();
        assert!(blocks(&path) < slice::SLICE_BYTES / 2, "{}", blocks(&path));
        assert_eq!(read_slice(&path, slice::SLICE_BYTES, 4).unwrap(), [0; 4]);
    }

    #[test]
    fn tidy_keeps_only_what_the_map_names() {
        let dir = tempfile::tempdir().unwrap();
        let size = 2 * slice::SLICE_BYTES;
        let s = vec![1u8; slice::SLICE_BYTES as usize];
        for (name, i) in [("kept", 0), ("kept", 1), ("gone", 0)] {
            write_slice(&dir.path().join(name), size, i * slice::SLICE_BYTES, &s).unwrap();
        }
        let live = HashMap::from([("kept".to_owned(), HashSet::from([1]))]);
        tidy(dir.path(), &live).unwrap();
        assert!(!dir.path().join("gone").exists());
        let kept = dir.path().join("kept");
        assert_eq!(read_slice(&kept, 0, 2).unwrap(), [0, 0]);
        assert_eq!(read_slice(&kept, slice::SLICE_BYTES, 2).unwrap(), [1, 1]);
    }
}

//! `prefab = "auto"`: which titles get prefabricated packets. A packet file
//! takes about its media file's size again on disk and saves CPU on every
//! packet sent (`bench/results`: GSO 213 ns per packet from packets against
//! 357 ns building headers), so it pays for titles that are played often.
//! A title gets one once it has been played [`MIN_PLAYS`] times, while the
//! packet files this server knows of fit a share of the disk; the rest are
//! served with built headers. The most played titles reach the threshold
//! first, so they are the ones that fill the share.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::Mutex,
};

/// Plays after which a title is worth its packet file.
pub const MIN_PLAYS: u32 = 2;

#[derive(Default)]
pub struct PrefabBudget {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    plays: HashMap<PathBuf, u32>,
    /// Packet files made, being made or queued, and their size.
    packets: HashMap<PathBuf, u64>,
}

impl PrefabBudget {
    /// Counts a play of the title at `path` (its media `size` bytes,
    /// `has_packets`: its packet file exists); whether to make its packet
    /// file now, with packet files allowed `share` bytes in all.
    pub fn played(&self, path: &Path, size: u64, has_packets: bool, share: u64) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let plays = st.plays.entry(path.to_owned()).or_default();
        *plays = plays.saturating_add(1);
        let plays = *plays;
        if has_packets {
            st.packets.insert(path.to_owned(), size);
            return false;
        }
        if plays < MIN_PLAYS || st.packets.contains_key(path) {
            return false;
        }
        let used: u64 = st.packets.values().sum();
        if used.saturating_add(size) > share {
            return false;
        }
        st.packets.insert(path.to_owned(), size);
        true
    }

    /// The packet file of `path` could not be made: its share is free.
    pub fn failed(&self, path: &Path) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.packets.remove(path);
    }
}

/// `percent` of the size of the filesystem holding `path`, in bytes.
pub fn share_of_disk(path: &Path, percent: u64) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs fills the struct it is given from a valid C string.
    let total = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut st) != 0 {
            return 0;
        }
        st.f_blocks as u64 * st.f_frsize as u64
    };
    total / 100 * percent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn popular_titles_get_packets_while_they_fit_the_share() {
        let b = PrefabBudget::default();
        let (a, c, d) = (Path::new("/m/a"), Path::new("/m/c"), Path::new("/m/d"));
        assert!(!b.played(a, 40, false, 100), "one play is not enough");
        assert!(b.played(a, 40, false, 100), "the second play makes them");
        assert!(!b.played(a, 40, false, 100), "made once");
        // An existing packet file counts against the share.
        assert!(!b.played(c, 50, true, 100));
        assert!(!b.played(d, 20, false, 100));
        assert!(!b.played(d, 20, false, 100), "40 + 50 + 20 > 100");
        b.failed(a);
        assert!(b.played(d, 20, false, 100), "a's share came back");
    }

    #[test]
    fn the_share_is_a_part_of_the_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let all = share_of_disk(dir.path(), 100);
        assert!(all > 0);
        assert_eq!(share_of_disk(dir.path(), 25), all / 100 * 25);
    }
}

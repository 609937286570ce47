//! A safety net for mapped files that change under a running process.
//!
//! fjord maps its files (media, index, packets, parity) and reads some of
//! them in user space. When such a file is truncated in place, touching a
//! page past its new end raises SIGBUS, whose default action kills the
//! whole server, every session of every title with it. A [`Guarded`]
//! mapping registers its address range in a process-wide table; the SIGBUS
//! handler [`install`]ed here maps an anonymous zero page over the
//! faulting page of a registered mapping (so the faulting instruction,
//! retried, reads zeros), marks that mapping damaged and returns. Whoever
//! owns the mapping then sees [`Guarded::damaged`] and stops using it (the
//! engine ends the title's sessions; ingest, parity and packet writers
//! fail instead of writing files made of zeros). A SIGBUS at any other
//! address is a bug: the handler restores the default action and the
//! signal kills the process as it would have.
//!
//! Files replaced by rename or deleted need no net: the mapping keeps the
//! old inode alive. The kernel itself never signals: a send whose iovec
//! points at a vanished page fails with EFAULT (the engine's data paths
//! handle that per session).
//!
//! The table is a fixed array of atomic slots, so the handler only does
//! async-signal-safe work: atomic loads and stores, `mmap`, `sigaction`,
//! `raise`.

use std::{
    fs::File,
    io,
    ops::Deref,
    sync::{
        Once,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
};

/// Called by the verifiers with each piece of a mapping before they read
/// it (a MiB or so): waits for the disk's turn (bulk I/O) and may read the
/// piece by file I/O first, so that a disk error is this call's error
/// rather than a fault in the mapping. `&mut |_| Ok(())` reads straight
/// from the mapping.
pub type BeforeRead<'a> = &'a mut dyn FnMut(&[u8]) -> io::Result<()>;

use memmap2::Mmap;

/// Mappings that can be protected at once; beyond it a mapping works, but
/// unprotected (a warning, once).
pub const SLOTS: usize = 8192;

/// A slot's `start` while free; while being claimed it is `CLAIMING`.
const FREE: usize = 0;
const CLAIMING: usize = usize::MAX;

struct Slot {
    /// First byte of the mapping (page-aligned), or `FREE`/`CLAIMING`.
    start: AtomicUsize,
    /// Bytes, rounded up to whole pages.
    len: AtomicUsize,
    damaged: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(FREE),
    len: AtomicUsize::new(0),
    damaged: AtomicBool::new(false),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// One past the highest slot ever claimed: the handler scans no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static FULL_WARNED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// A read-only file mapping whose pages may vanish (the file truncated
/// underneath) without killing the process, once [`install`] has run:
/// such pages read as zeros and [`damaged`](Guarded::damaged) turns true.
pub struct Guarded {
    map: Mmap,
    /// Its slot in the table; `None` when empty or the table was full.
    slot: Option<usize>,
}

impl Guarded {
    /// Maps `file` read-only and registers the mapping.
    ///
    /// # Safety
    /// As [`Mmap::map`]: the file may change under the mapping. A truncated
    /// file is what this type survives; a file written in place still
    /// changes bytes that were handed out as immutable slices.
    pub unsafe fn map(file: &File) -> io::Result<Guarded> {
        // SAFETY: forwarded to the caller.
        let map = unsafe { Mmap::map(file)? };
        Ok(Guarded::new(map))
    }

    /// [`Guarded::map`] for reads of a few pages at a time (`MADV_RANDOM`):
    /// a fault reads its page, not the device's read-ahead window around
    /// it (8 MB on virtio disks), so opening a file for its headers reads
    /// its headers. [`Guarded::read_around`] undoes it.
    ///
    /// # Safety
    /// As [`Guarded::map`].
    pub unsafe fn map_random(file: &File) -> io::Result<Guarded> {
        // SAFETY: forwarded to the caller.
        let guarded = unsafe { Guarded::map(file)? };
        // Only advice: a kernel that ignores it reads more, nothing worse.
        let _ = guarded.map.advise(memmap2::Advice::Random);
        Ok(guarded)
    }

    /// Faults read ahead around them again (the kernel's default), for
    /// reading the whole mapping through it.
    pub fn read_around(&self) {
        let _ = self.map.advise(memmap2::Advice::Normal);
    }

    /// Registers `map` (already made) in the table.
    pub fn new(map: Mmap) -> Guarded {
        let slot = register(map.as_ptr() as usize, map.len());
        Guarded { map, slot }
    }

    /// Whether a page of the mapping vanished (the file shrank) and was
    /// read since: its bytes there read as zeros, so what was read from it
    /// must not be trusted. A vanished page nobody touched does not count.
    #[inline]
    pub fn damaged(&self) -> bool {
        self.slot
            .is_some_and(|i| TABLE[i].damaged.load(Ordering::Relaxed))
    }

    /// Whether the mapping is in the table (false for an empty one, or when
    /// the table was full).
    pub fn protected(&self) -> bool {
        self.slot.is_some()
    }

    /// The mapping itself, for `advise`.
    pub fn mmap(&self) -> &Mmap {
        &self.map
    }
}

impl Deref for Guarded {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.map
    }
}

impl AsRef<[u8]> for Guarded {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("ptr", &self.map.as_ptr())
            .field("len", &self.map.len())
            .field("slot", &self.slot)
            .field("damaged", &self.damaged())
            .finish()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // Out of the table before the range is unmapped (the field drops
        // after this), so the handler never patches an address reused by
        // another mapping.
        if let Some(i) = self.slot {
            TABLE[i].start.store(FREE, Ordering::Release);
        }
    }
}

fn register(start: usize, len: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    let page = PAGE.load(Ordering::Relaxed);
    let len = len.div_ceil(page) * page;
    for (i, s) in TABLE.iter().enumerate() {
        if s.start
            .compare_exchange(FREE, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            s.len.store(len, Ordering::Relaxed);
            s.damaged.store(false, Ordering::Relaxed);
            HIGH.fetch_max(i + 1, Ordering::Release);
            s.start.store(start, Ordering::Release);
            return Some(i);
        }
    }
    if !FULL_WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "fjord: warning: more than {SLOTS} files mapped at once; the rest are not protected \
             against being truncated underneath (a SIGBUS would stop the process)"
        );
    }
    None
}

/// Installs the SIGBUS handler (once per process; later calls do nothing).
/// Until it runs, a [`Guarded`] mapping is as fragile as a plain one.
pub fn install() {
    INSTALL.call_once(|| {
        PAGE.store(page_size(), Ordering::Relaxed);
        // SAFETY: a zeroed sigaction with a valid handler, flags and an
        // empty mask is a valid argument.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
                eprintln!(
                    "fjord: warning: cannot install the SIGBUS handler ({}); a file truncated \
                     under the server will stop it",
                    io::Error::last_os_error()
                );
            }
        }
    });
}

/// The registered mapping holding `addr`, if any.
fn slot_of(addr: usize) -> Option<&'static Slot> {
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    TABLE[..high].iter().find(|s| {
        let start = s.start.load(Ordering::Acquire);
        start != FREE
            && start != CLAIMING
            && addr >= start
            && addr - start < s.len.load(Ordering::Relaxed)
    })
}

/// The handler. Async-signal-safe: atomics, `mmap`, `sigaction`, `raise`.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    // si_code > 0: raised by a fault (not by kill/raise), so si_addr is real.
    if code > 0
        && let Some(slot) = slot_of(addr)
    {
        let page = PAGE.load(Ordering::Relaxed);
        let at = addr & !(page - 1);
        // SAFETY: `at` is a page inside a live mapping this process owns
        // (registered, so not yet unmapped); replacing it with an anonymous
        // read-only zero page changes no other memory.
        let r = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            slot.damaged.store(true, Ordering::Relaxed);
            return;
        }
    }
    // Not ours (or the patch failed): die as without the handler. The
    // signal is blocked while the handler runs, so the raised one arrives
    // as it returns, under the default action.
    // SAFETY: sigaction and raise are async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_truncated_file_reads_zeros_and_is_damaged() {
        install();
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        let page = page_size();
        tmp.write_all(&vec![0xa5; 4 * page]).unwrap();
        tmp.flush().unwrap();
        let file = File::open(tmp.path()).unwrap();
        // SAFETY: a private temp file; its truncation is the point.
        let map = unsafe { Guarded::map(&file) }.unwrap();
        assert!(map.protected());
        assert_eq!(map[3 * page], 0xa5);
        assert!(!map.damaged());
        // Another handle truncates it to nothing.
        std::fs::OpenOptions::new()
            .write(true)
            .open(tmp.path())
            .unwrap()
            .set_len(0)
            .unwrap();
        // SAFETY: a reference into the guarded mapping; the fault this read
        // takes is what the guard turns into a zero page.
        let byte = unsafe { std::ptr::read_volatile(&map[3 * page]) };
        assert_eq!(byte, 0);
        assert!(map.damaged());
        // Pages not touched since stay as they were until touched.
        // SAFETY: as above.
        let first = unsafe { std::ptr::read_volatile(&map[0]) };
        assert_eq!(first, 0);
        drop(map);
    }

    #[test]
    fn slots_are_reused_and_flags_reset() {
        install();
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.write_all(b"hello").unwrap();
        let file = File::open(tmp.path()).unwrap();
        for _ in 0..3 * SLOTS / 2 {
            // SAFETY: nobody changes the file.
            let m = unsafe { Guarded::map(&file) }.unwrap();
            assert!(m.protected() && !m.damaged());
            assert_eq!(&m[..], b"hello");
        }
    }

    /// A SIGBUS at an address no guarded mapping holds still kills: run in
    /// a child (this test binary again), which must die of SIGBUS.
    #[test]
    fn an_unregistered_mapping_still_dies_of_sigbus() {
        use std::os::unix::process::ExitStatusExt;
        if std::env::var_os("FJORD_GUARD_CHILD").is_some() {
            install();
            let mut tmp = tempfile::NamedTempFile::new().unwrap();
            tmp.write_all(&vec![1; 2 * page_size()]).unwrap();
            let file = File::open(tmp.path()).unwrap();
            // SAFETY: the point is to fault on it.
            let map = unsafe { Mmap::map(&file) }.unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(tmp.path())
                .unwrap()
                .set_len(0)
                .unwrap();
            // SAFETY: a reference into the mapping; the fault is the test.
            let b = unsafe { std::ptr::read_volatile(&map[page_size()]) };
            // Not reached.
            std::process::exit(i32::from(b) + 100);
        }
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "guard::tests::an_unregistered_mapping_still_dies_of_sigbus",
                "--nocapture",
            ])
            .env("FJORD_GUARD_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
    }
}

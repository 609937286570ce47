//! A fake title for the storage service's tests: one file of fixed-size
//! packets, one every 10 ms, and a poll with a generous bound.
#![allow(dead_code)] // each test binary uses part of it

use std::{
    fs::File,
    io::Write,
    ops::Range,
    os::fd::AsRawFd,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use fjord_storage::{Extent, MappedFile, Source, Storage, StorageConfig, Uses};

pub const PACKET: usize = 1000;
pub const PACKETS: u32 = 20_000;
pub const STEP_NS: u64 = 10_000_000;

pub struct Fake {
    _file: File,
    pub files: [MappedFile; 1],
    pub changed: AtomicBool,
    /// Packets whose table bytes (here: their own bytes) were asked for by
    /// `tables` or read by the control plane.
    pub read: Mutex<Vec<Range<u32>>>,
    /// Table reads of packets outside `read`: faults through the mapping.
    pub strays: Mutex<Vec<Range<u32>>>,
}

impl Fake {
    pub fn new(dir: &std::path::Path) -> Arc<Fake> {
        let path = dir.join("title");
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![1u8; PACKET * PACKETS as usize]).unwrap();
        let file = File::open(&path).unwrap();
        let len = PACKET * PACKETS as usize;
        // SAFETY: maps a file we keep open for the test's lifetime.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        Arc::new(Fake {
            files: [MappedFile {
                base: base as *const u8,
                len,
                fd: file.as_raw_fd(),
            }],
            _file: file,
            changed: AtomicBool::new(false),
            read: Mutex::new(Vec::new()),
            strays: Mutex::new(Vec::new()),
        })
    }

    pub fn truncate(&self, dir: &std::path::Path) {
        File::options()
            .write(true)
            .open(dir.join("title"))
            .unwrap()
            .set_len(0)
            .unwrap();
    }

    /// Counts a read of packets' table bytes nobody read first.
    pub fn check_read(&self, packets: Range<u32>) {
        let read = self.read.lock().unwrap();
        if !read
            .iter()
            .any(|r| r.start <= packets.start && packets.end <= r.end)
        {
            self.strays.lock().unwrap().push(packets);
        }
    }
}

impl Source for Fake {
    fn files(&self) -> &[MappedFile] {
        &self.files
    }
    fn device(&self) -> u64 {
        1
    }
    fn track_count(&self) -> usize {
        1
    }
    fn default_uses(&self) -> Uses {
        Uses::MEDIA
    }
    fn packet_count(&self, _: usize) -> u32 {
        PACKETS
    }
    fn duration_ns(&self) -> u64 {
        u64::from(PACKETS) * STEP_NS
    }
    fn send_time_ns(&self, _: usize, i: u32) -> Option<u64> {
        self.check_read(i..(i + 1).min(PACKETS));
        (i < PACKETS).then(|| u64::from(i) * STEP_NS)
    }
    fn extents(&self, _: usize, packets: Range<u32>, _: Uses, out: &mut Vec<Extent>) {
        self.check_read(packets.clone());
        out.push(Extent {
            file: 0,
            range: packets.start as usize * PACKET..packets.end as usize * PACKET,
        });
    }
    fn tables(&self, _: usize, packets: Range<u32>, _: Uses, out: &mut Vec<Extent>) {
        self.read.lock().unwrap().push(packets.clone());
        out.push(Extent {
            file: 0,
            range: packets.start as usize * PACKET..packets.end as usize * PACKET,
        });
    }
    fn table_bytes(&self, _: usize, _: Uses) -> u64 {
        PACKET as u64
    }
    fn head(&self, _: &mut Vec<Extent>) {}
    fn trailing_packets(&self, _: usize) -> u32 {
        1
    }
    fn changed(&self) -> bool {
        self.changed.load(Ordering::Relaxed)
    }
}

pub fn storage(budget: u64) -> Storage {
    Storage::new(StorageConfig {
        lead: fjord_storage::LeadConfig::fixed(Duration::from_secs(2)),
        first_read: Duration::from_millis(200),
        budget,
        head: Duration::from_secs(1),
        workers_per_disk: 2,
        disk_capacity: Default::default(),
        origin_capacity: None,
    })
}

/// Polls `f` until it holds, for at most 10 s.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Times the storage workers of this process were put on a CPU.
pub fn worker_runs() -> u64 {
    let mut runs = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("fjord-storage") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        runs += stat
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    runs
}

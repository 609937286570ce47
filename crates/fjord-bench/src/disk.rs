//! `fjord bench disk`: what the disk under a media root sustains, so
//! admission control can know each disk's bandwidth and IOPS.
//!
//! A scratch file (hidden, so never served as a title) is written once in
//! the root, synced and dropped from the page cache, then read with
//! `O_DIRECT` so the cache cannot flatter: sequential 1 MiB reads, random
//! 1 MiB reads at queue depth 1 and 4 (one thread per outstanding read),
//! random 4 KiB reads at depth 1 and 4; each pattern for a fixed time.
//! Where the filesystem refuses `O_DIRECT` (tmpfs), reads are buffered and
//! every range read is dropped again with `posix_fadvise(DONTNEED)`; the
//! report says so. The scratch file is removed at the end, on error and on
//! Ctrl-C.

use std::{
    fs::{File, OpenOptions},
    io::{self, Write},
    os::{
        fd::AsRawFd,
        unix::fs::{FileExt, MetadataExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
    sync::{Mutex, Once},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use indicatif::{ProgressBar, ProgressStyle};

const MIB: usize = 1 << 20;
/// Offsets, lengths and buffers are multiples of this: it satisfies
/// `O_DIRECT` on every logical block size in use (512 B or 4 KiB).
const ALIGN: usize = 4096;

/// What to measure.
#[derive(Clone, Debug)]
pub struct DiskConfig {
    /// A directory on the disk (a media root); the scratch file goes there.
    pub root: PathBuf,
    /// Scratch file size in bytes (rounded down to whole MiB): larger than
    /// the disk's own cache, or random reads hit that cache.
    pub size: u64,
    /// Time per read pattern.
    pub seconds: f64,
    /// Try `O_DIRECT` reads (false: buffered reads with `DONTNEED`, as
    /// where the filesystem refuses `O_DIRECT`).
    pub direct: bool,
    pub progress: bool,
}

impl Default for DiskConfig {
    fn default() -> Self {
        DiskConfig {
            root: PathBuf::from("."),
            size: 1 << 30,
            seconds: 5.0,
            direct: true,
            progress: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The scratch file's single write, buffered, ended by `fdatasync`.
    SeqWrite,
    SeqRead,
    RandRead,
}

impl Access {
    pub fn name(self) -> &'static str {
        match self {
            Access::SeqWrite => "sequential write",
            Access::SeqRead => "sequential read",
            Access::RandRead => "random read",
        }
    }
}

/// The read patterns, in the order they run.
pub const READS: [(Access, usize, usize); 5] = [
    (Access::SeqRead, MIB, 1),
    (Access::RandRead, MIB, 1),
    (Access::RandRead, MIB, 4),
    (Access::RandRead, ALIGN, 1),
    (Access::RandRead, ALIGN, 4),
];

/// One pattern's figures.
#[derive(Clone, Debug)]
pub struct Phase {
    pub access: Access,
    /// Bytes per operation.
    pub block: usize,
    /// Operations outstanding at once (threads).
    pub depth: usize,
    pub ops: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Per-operation latency; `None` for the buffered write, whose calls
    /// only copy into the page cache.
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
}

impl Phase {
    /// Megabytes (10^6 B) per second.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / 1e6
    }

    pub fn iops(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct DiskReport {
    /// The root, canonical.
    pub root: PathBuf,
    /// The root's `st_dev`, (major, minor).
    pub device: (u32, u32),
    /// The block device's kernel name (`/sys/dev/block/MAJ:MIN`), if any.
    pub device_name: Option<String>,
    pub filesystem: String,
    pub size: u64,
    pub seconds: f64,
    /// Reads bypassed the page cache with `O_DIRECT`.
    pub direct: bool,
    /// Why not, when not.
    pub note: Option<String>,
    pub phases: Vec<Phase>,
}

impl DiskReport {
    pub fn phase(&self, access: Access, block: usize, depth: usize) -> Option<&Phase> {
        self.phases
            .iter()
            .find(|p| (p.access, p.block, p.depth) == (access, block, depth))
    }

    /// `MAJ:MIN`, the key of the saved figures.
    pub fn device_id(&self) -> String {
        format!("{}:{}", self.device.0, self.device.1)
    }
}

/// Measures the disk under `cfg.root`.
pub fn run(cfg: &DiskConfig) -> anyhow::Result<DiskReport> {
    let size = cfg.size / MIB as u64 * MIB as u64;
    ensure!(
        size >= MIB as u64,
        "the scratch file must be at least 1 MiB"
    );
    ensure!(cfg.seconds > 0.0, "seconds must be positive");
    let root = cfg
        .root
        .canonicalize()
        .with_context(|| format!("media root {}", cfg.root.display()))?;
    ensure!(root.is_dir(), "{} is not a directory", root.display());
    let dev = std::fs::metadata(&root)?.dev();
    let device = (libc::major(dev), libc::minor(dev));
    let bar = progress_bar(READS.len() as u64 + 1, cfg.progress);
    let scratch = Scratch::new(&root);
    bar.set_message(format!("writing {} MiB", size / MIB as u64));
    let mut phases = vec![write_scratch(&scratch.path, size)?];
    bar.inc(1);
    let (file, note) = open_for_reading(&scratch.path, cfg.direct)?;
    let per_phase = Duration::from_secs_f64(cfg.seconds);
    for (access, block, depth) in READS {
        bar.set_message(format!(
            "{} {} KiB, depth {depth}",
            access.name(),
            block / 1024
        ));
        phases.push(measure_reads(
            &file,
            access,
            block,
            depth,
            size,
            per_phase,
            note.is_none(),
        )?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(scratch);
    Ok(DiskReport {
        filesystem: filesystem(&root),
        device_name: device_name(device),
        root,
        device,
        size,
        seconds: cfg.seconds,
        direct: note.is_none(),
        note,
        phases,
    })
}

fn progress_bar(len: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Scratch files alive now, for the Ctrl-C handler.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// The scratch file's path; removed when dropped (error paths included) or
/// on Ctrl-C.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(root: &Path) -> Self {
        let path = root.join(format!(".fjord-bench-disk-{}.tmp", std::process::id()));
        if let Ok(mut live) = LIVE.lock() {
            live.push(path.clone());
        }
        HANDLER.call_once(|| {
            // Only one handler per process: if another bench owns Ctrl-C,
            // the drop still cleans up on every normal exit.
            let _ = ctrlc::set_handler(|| {
                for path in LIVE.lock().map(|l| l.clone()).unwrap_or_default() {
                    let _ = std::fs::remove_file(path);
                }
                eprintln!("fjord bench: interrupted; scratch file removed");
                std::process::exit(130);
            });
        });
        Scratch { path }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Ok(mut live) = LIVE.lock() {
            live.retain(|p| *p != self.path);
        }
    }
}

/// Writes the file in 1 MiB chunks of pseudo-random bytes (no storage
/// layer can compress or deduplicate them), syncs it, and drops it from the
/// page cache so the reads start cold.
fn write_scratch(path: &Path, size: u64) -> anyhow::Result<Phase> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let mut chunk = vec![0u8; MIB];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let start = Instant::now();
    for _ in 0..size / MIB as u64 {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next().to_le_bytes());
        }
        f.write_all(&chunk)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    f.sync_data()?;
    let elapsed = start.elapsed();
    drop_cached(&f, 0, 0);
    Ok(Phase {
        access: Access::SeqWrite,
        block: MIB,
        depth: 1,
        ops: size / MIB as u64,
        bytes: size,
        elapsed,
        p50: None,
        p99: None,
    })
}

fn drop_cached(f: &File, offset: u64, len: u64) {
    // SAFETY: a plain advice call on an open descriptor; no memory involved.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// Why reads are buffered, and what is done about the page cache.
const BUFFERED: &str = "buffered reads, each range dropped from the page cache \
    (posix_fadvise DONTNEED) before and after it is read";

/// Opens for `O_DIRECT` reads if asked and the filesystem takes them (the
/// open and one aligned read both succeed); else buffered, with the reason.
fn open_for_reading(path: &Path, try_direct: bool) -> anyhow::Result<(File, Option<String>)> {
    if !try_direct {
        let note = format!("O_DIRECT not asked for: {BUFFERED}");
        return Ok((File::open(path)?, Some(note)));
    }
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .and_then(|f| {
            let mut buf = AlignedBuf::new(ALIGN);
            f.read_exact_at(buf.as_mut(), 0).map(|_| f)
        });
    match direct {
        Ok(f) => Ok((f, None)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let f = File::open(path)?;
            let note = format!("the filesystem refused O_DIRECT ({e}): {BUFFERED}");
            Ok((f, Some(note)))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A zeroed buffer whose start and length are multiples of [`ALIGN`], as
/// `O_DIRECT` wants, carved out of a slightly larger `Vec`.
struct AlignedBuf {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + ALIGN];
        let offset = storage.as_ptr().align_offset(ALIGN);
        AlignedBuf {
            storage,
            offset,
            len,
        }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

/// xorshift64*: offsets and filler bytes, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Runs one read pattern for `time`: `depth` threads, each with one read
/// outstanding, so the disk sees `depth` at once.
fn measure_reads(
    file: &File,
    access: Access,
    block: usize,
    depth: usize,
    size: u64,
    time: Duration,
    direct: bool,
) -> anyhow::Result<Phase> {
    if !direct {
        drop_cached(file, 0, 0);
    }
    let start = Instant::now();
    let deadline = start + time;
    let per_thread: Vec<io::Result<Vec<u64>>> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..depth)
            .map(|t| {
                let pattern = Reader {
                    file,
                    access,
                    block,
                    size,
                    direct,
                    seed: t as u64 + 1,
                };
                s.spawn(move || pattern.run(deadline))
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().expect("reader thread panicked"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut latencies = Vec::new();
    for r in per_thread {
        latencies.extend(r.context("reading the scratch file")?);
    }
    if latencies.is_empty() {
        bail!("no read finished within {time:?}");
    }
    latencies.sort_unstable();
    let ops = latencies.len() as u64;
    Ok(Phase {
        access,
        block,
        depth,
        ops,
        bytes: ops * block as u64,
        elapsed,
        p50: Some(percentile(&latencies, 0.50)),
        p99: Some(percentile(&latencies, 0.99)),
    })
}

fn percentile(sorted_ns: &[u64], q: f64) -> Duration {
    let i = ((sorted_ns.len() - 1) as f64 * q).round() as usize;
    Duration::from_nanos(sorted_ns[i])
}

/// One thread's share of a read pattern.
struct Reader<'a> {
    file: &'a File,
    access: Access,
    block: usize,
    size: u64,
    direct: bool,
    seed: u64,
}

impl Reader<'_> {
    /// Reads until `deadline`; returns each read's latency, ns.
    fn run(&self, deadline: Instant) -> io::Result<Vec<u64>> {
        let mut buf = AlignedBuf::new(self.block);
        let mut rng = Rng(self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let block = self.block as u64;
        // Random reads start at any aligned offset that leaves a whole block.
        let slots = (self.size - block) / ALIGN as u64 + 1;
        let mut next_seq = 0;
        let mut latencies = Vec::new();
        while Instant::now() < deadline {
            let offset = match self.access {
                Access::RandRead => rng.next() % slots * ALIGN as u64,
                _ => {
                    let o = next_seq;
                    next_seq = (next_seq + block) % self.size;
                    o
                }
            };
            let t = Instant::now();
            self.file.read_exact_at(buf.as_mut(), offset)?;
            latencies.push(t.elapsed().as_nanos() as u64);
            if !self.direct {
                // Or the next pass over this range would read memory.
                drop_cached(self.file, offset, block);
            }
        }
        Ok(latencies)
    }
}

/// The block device's kernel name (`vda`, `nvme0n1p2`), from sysfs.
fn device_name((major, minor): (u32, u32)) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// The filesystem type of the mount holding `root`, from mountinfo: the
/// longest mount point that is a prefix of it.
fn filesystem(root: &Path) -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            // Fields: id parent dev root mount-point opts... - fstype source
            let mount = l.split(' ').nth(4)?;
            let fstype = l.split(" - ").nth(1)?.split(' ').next()?;
            Some((PathBuf::from(mount.replace("\\040", " ")), fstype))
        })
        .filter(|(mount, _)| root.starts_with(mount))
        .max_by_key(|(mount, _)| mount.as_os_str().len())
        .map_or_else(|| "unknown".into(), |(_, t)| t.to_string())
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "—".into(), |d| format!("{:.2}", d.as_secs_f64() * 1e3))
}

fn kib(block: usize) -> String {
    if block >= MIB {
        format!("{} MiB", block / MIB)
    } else {
        format!("{} KiB", block / 1024)
    }
}

impl DiskReport {
    /// The report as markdown: how it was measured, then one row per pattern.
    pub fn markdown(&self, command: &str) -> String {
        let mut how = match &self.note {
            None => "reads with O_DIRECT (page cache bypassed)".to_string(),
            Some(note) => format!("**{note}**"),
        };
        if ["tmpfs", "ramfs"].contains(&self.filesystem.as_str()) {
            how += "; **a memory filesystem: these are memory's figures, not a disk's**";
        }
        let mut s = format!(
            "# fjord bench disk\n\n`{command}`\n\nroot: {} (device {} {}, {})  \n\
             scratch file: {} MiB, written once; {} s per read pattern; {how}\n\n\
             | pattern | block | depth | MB/s | IOPS | p50 ms | p99 ms | ops |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
            self.root.display(),
            self.device_name.as_deref().unwrap_or("(no block device)"),
            self.device_id(),
            self.filesystem,
            self.size / MIB as u64,
            self.seconds,
        );
        for p in &self.phases {
            s += &format!(
                "| {} | {} | {} | {:.1} | {:.0} | {} | {} | {} |\n",
                p.access.name(),
                kib(p.block),
                p.depth,
                p.mb_per_s(),
                p.iops(),
                ms(p.p50),
                ms(p.p99),
                p.ops
            );
        }
        s + "\nThe write is buffered and ends with fdatasync (its time included): \
             no per-call latency. MB = 10^6 bytes.\n"
    }

    pub fn json(&self) -> String {
        let ms = |d: Option<Duration>| {
            d.map_or("null".into(), |d| format!("{:.4}", d.as_secs_f64() * 1e3))
        };
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{{\"pattern\":{},\"block\":{},\"depth\":{},\"ops\":{},\"bytes\":{},\"seconds\":{:.4},\"mb_per_s\":{:.2},\"iops\":{:.1},\"p50_ms\":{},\"p99_ms\":{}}}",
                    json_string(p.access.name()),
                    p.block,
                    p.depth,
                    p.ops,
                    p.bytes,
                    p.elapsed.as_secs_f64(),
                    p.mb_per_s(),
                    p.iops(),
                    ms(p.p50),
                    ms(p.p99)
                )
            })
            .collect();
        format!(
            "{{\"root\":{},\"device\":{},\"device_name\":{},\"filesystem\":{},\"size_bytes\":{},\"seconds_per_pattern\":{},\"o_direct\":{},\"note\":{},\"phases\":[{}]}}\n",
            json_string(&self.root.to_string_lossy()),
            json_string(&self.device_id()),
            self.device_name
                .as_deref()
                .map_or("null".into(), json_string),
            json_string(&self.filesystem),
            self.size,
            self.seconds,
            self.direct,
            self.note.as_deref().map_or("null".into(), json_string),
            phases.join(",")
        )
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            c if (c as u32) < 0x20 => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out + "\""
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick(root: &Path, direct: bool) -> DiskReport {
        let cfg = DiskConfig {
            root: root.to_path_buf(),
            size: 4 << 20,
            seconds: 0.05,
            direct,
            progress: false,
        };
        run(&cfg).unwrap()
    }

    /// The structure every report has, whatever the disk's speed.
    fn check(r: &DiskReport, dir: &Path) {
        assert_eq!(r.phases.len(), 1 + READS.len());
        assert_eq!(r.phases[0].access, Access::SeqWrite);
        assert_eq!(r.phases[0].bytes, 4 << 20);
        for (access, block, depth) in READS {
            let p = r.phase(access, block, depth).unwrap();
            assert!(p.ops > 0 && p.bytes == p.ops * block as u64);
            assert!(p.mb_per_s() > 0.0 && p.iops() > 0.0);
            assert!(p.p50.unwrap() <= p.p99.unwrap());
        }
        let md = r.markdown("fjord bench disk --root X");
        assert!(md.contains("| pattern | block | depth | MB/s |"));
        assert_eq!(
            md.lines()
                .filter(|l| l.starts_with("| random read"))
                .count(),
            4
        );
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["phases"].as_array().unwrap().len(), 1 + READS.len());
        assert_eq!(json["device"], r.device_id());
        assert!(json["phases"][1]["mb_per_s"].as_f64().unwrap() > 0.0);
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert!(left.is_empty(), "scratch file left behind: {left:?}");
    }

    #[test]
    fn measures_a_small_file_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let r = quick(dir.path(), true);
        check(&r, dir.path());
        assert_eq!(r.direct, r.note.is_none());
    }

    #[test]
    fn buffered_reads_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let r = quick(dir.path(), false);
        check(&r, dir.path());
        assert!(!r.direct);
        assert!(r.markdown("x").contains("posix_fadvise DONTNEED"));
        assert!(r.json().contains("\"o_direct\":false"));
    }
}

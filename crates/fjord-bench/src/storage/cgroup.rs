//! The constrained machine of `fjord bench storage`: a memory cgroup (the
//! page cache the server may hold) and a read throttle on the library's
//! disk, cgroup v1 (`memory` and `blkio` hierarchies) or v2 (`memory.max`,
//! `io.max`); the block device behind a directory; dropping the page cache;
//! per-task delay accounting.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};

/// The cgroups' name under each hierarchy.
pub const NAME: &str = "fjord-bench-storage";

/// A block device, `MAJ:MIN`, with its kernel name (`vda`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub major: u32,
    pub minor: u32,
    pub name: String,
    /// The device holding the directory was a partition of this disk.
    pub partition_of: Option<String>,
}

impl Device {
    pub fn id(&self) -> String {
        format!("{}:{}", self.major, self.minor)
    }
}

/// The whole disk holding `dir` (a partition is mapped to its disk: the
/// throttle is per disk).
pub fn device_of(dir: &Path) -> anyhow::Result<Device> {
    let meta = fs::metadata(dir).with_context(|| format!("stat {}", dir.display()))?;
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if major == 0 {
        bail!(
            "{} is on a filesystem without a block device ({major}:{minor}: tmpfs, overlay, NFS…); \
             the disk throttle needs a library on a disk (--library or --library-cache elsewhere)",
            dir.display()
        );
    }
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let real = fs::canonicalize(&sys).with_context(|| format!("resolving {}", sys.display()))?;
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if real.join("partition").exists() {
        let disk = real.parent().context("a partition without a disk")?;
        let id = fs::read_to_string(disk.join("dev"))?;
        let (ma, mi) = id.trim().split_once(':').context("bad dev file")?;
        return Ok(Device {
            major: ma.parse()?,
            minor: mi.parse()?,
            name: disk
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            partition_of: Some(name),
        });
    }
    Ok(Device {
        major,
        minor,
        name,
        partition_of: None,
    })
}

/// `/sys/block/DEV/stat`: (sectors read, reads completed); whole disk,
/// every process.
pub fn disk_stat(dev: &Device) -> Option<(u64, u64)> {
    let s = fs::read_to_string(format!("/sys/block/{}/stat", dev.name)).ok()?;
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    Some((*f.get(2)?, *f.first()?))
}

/// What the cgroup limits.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// Memory (page cache included), bytes.
    pub memory: Option<u64>,
    /// Read bytes per second and read operations per second on the device.
    pub read_bps: Option<u64>,
    pub read_iops: Option<u64>,
}

#[derive(Debug)]
enum Kind {
    V1 { memory: PathBuf, blkio: PathBuf },
    V2 { dir: PathBuf },
}

/// The cgroup(s) of one run; removed on drop (processes moved out first).
#[derive(Debug)]
pub struct Cgroup {
    kind: Kind,
    devs: Vec<Device>,
}

/// Directories to remove on Ctrl-C.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

const V1_ROOT: &str = "/sys/fs/cgroup";

fn v2_root() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
    })
}

fn write(path: &Path, value: &str) -> anyhow::Result<()> {
    fs::write(path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
}

/// Moves every process of `dir` to `parent` and removes `dir`.
fn remove_dir(dir: &Path) {
    let Some(parent) = dir.parent() else { return };
    for _ in 0..50 {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            let _ = fs::write(parent.join("cgroup.procs"), pid);
        }
        if fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Removes what [`Cgroup::create`] made, for a Ctrl-C handler.
pub fn remove_live() {
    let live = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
    for d in live {
        remove_dir(&d);
    }
}

impl Cgroup {
    /// Makes the cgroup with these limits on each of `devs`: v1 where its
    /// memory and blkio hierarchies are mounted, else v2. A cgroup left by
    /// an earlier run is removed first.
    pub fn create(devs: &[Device], limits: Limits) -> anyhow::Result<Cgroup> {
        let v1_mem = Path::new(V1_ROOT).join("memory");
        let v1_blkio = Path::new(V1_ROOT).join("blkio");
        let cg = if v1_mem.join("memory.limit_in_bytes").exists()
            && v1_blkio.join("blkio.throttle.read_bps_device").exists()
        {
            let (memory, blkio) = (v1_mem.join(NAME), v1_blkio.join(NAME));
            for d in [&memory, &blkio] {
                if d.exists() {
                    remove_dir(d);
                }
                fs::create_dir(d)
                    .with_context(|| format!("creating {} (cgroups need root)", d.display()))?;
                if let Ok(mut l) = LIVE.lock() {
                    l.push(d.clone());
                }
            }
            let cg = Cgroup {
                kind: Kind::V1 {
                    memory: memory.clone(),
                    blkio: blkio.clone(),
                },
                devs: devs.to_vec(),
            };
            if let Some(m) = limits.memory {
                write(&memory.join("memory.limit_in_bytes"), &m.to_string())?;
            }
            for dev in devs {
                if let Some(b) = limits.read_bps {
                    write(
                        &blkio.join("blkio.throttle.read_bps_device"),
                        &format!("{} {b}", dev.id()),
                    )?;
                }
                if let Some(i) = limits.read_iops {
                    write(
                        &blkio.join("blkio.throttle.read_iops_device"),
                        &format!("{} {i}", dev.id()),
                    )?;
                }
            }
            cg
        } else if let Some(root) = v2_root() {
            let controllers = fs::read_to_string(root.join("cgroup.controllers"))
                .with_context(|| format!("reading {}/cgroup.controllers", root.display()))?;
            for c in ["memory", "io"] {
                if !controllers.split_whitespace().any(|x| x == c) {
                    bail!(
                        "cgroup v2 at {} has no {c} controller (and no cgroup v1 memory + blkio)",
                        root.display()
                    );
                }
            }
            write(&root.join("cgroup.subtree_control"), "+memory +io")?;
            let dir = root.join(NAME);
            if dir.exists() {
                remove_dir(&dir);
            }
            fs::create_dir(&dir)
                .with_context(|| format!("creating {} (cgroups need root)", dir.display()))?;
            if let Ok(mut l) = LIVE.lock() {
                l.push(dir.clone());
            }
            let cg = Cgroup {
                kind: Kind::V2 { dir: dir.clone() },
                devs: devs.to_vec(),
            };
            if let Some(m) = limits.memory {
                write(&dir.join("memory.max"), &m.to_string())?;
            }
            let mut io = String::new();
            if let Some(b) = limits.read_bps {
                io += &format!(" rbps={b}");
            }
            if let Some(i) = limits.read_iops {
                io += &format!(" riops={i}");
            }
            for dev in devs.iter().filter(|_| !io.is_empty()) {
                write(&dir.join("io.max"), &format!("{}{io}", dev.id()))?;
            }
            cg
        } else {
            bail!("neither cgroup v1 (memory, blkio) nor cgroup v2 is mounted");
        };
        Ok(cg)
    }

    /// `v1` or `v2`, with the directories.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::V1 { memory, blkio } => format!(
                "cgroup v1: {} (memory.limit_in_bytes), {} (blkio.throttle.read_bps_device, read_iops_device)",
                memory.display(),
                blkio.display()
            ),
            Kind::V2 { dir } => format!("cgroup v2: {} (memory.max, io.max)", dir.display()),
        }
    }

    /// The `cgroup.procs` files a process joins by writing its pid.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        match &self.kind {
            Kind::V1 { memory, blkio } => {
                vec![memory.join("cgroup.procs"), blkio.join("cgroup.procs")]
            }
            Kind::V2 { dir } => vec![dir.join("cgroup.procs")],
        }
    }

    /// (bytes read, read operations) on its devices by the cgroup's
    /// processes so far.
    pub fn io_read(&self) -> Option<(u64, u64)> {
        self.devs.iter().try_fold((0, 0), |(b, o), dev| {
            let (db, dop) = self.io_read_of(dev)?;
            Some((b + db, o + dop))
        })
    }

    /// (bytes read, read operations) on `dev` by the cgroup's processes.
    pub fn io_read_of(&self, dev: &Device) -> Option<(u64, u64)> {
        let id = dev.id();
        match &self.kind {
            Kind::V1 { blkio, .. } => {
                let field = |file: &str| -> Option<u64> {
                    let s = fs::read_to_string(blkio.join(file)).ok()?;
                    parse_v1_read(&s, &id)
                };
                Some((
                    field("blkio.throttle.io_service_bytes")?,
                    field("blkio.throttle.io_serviced")?,
                ))
            }
            Kind::V2 { dir } => {
                let s = fs::read_to_string(dir.join("io.stat")).ok()?;
                parse_v2_read(&s, &id)
            }
        }
    }

    /// Memory charged to the cgroup now (page cache included), bytes.
    pub fn memory_now(&self) -> Option<u64> {
        let p = match &self.kind {
            Kind::V1 { memory, .. } => memory.join("memory.usage_in_bytes"),
            Kind::V2 { dir } => dir.join("memory.current"),
        };
        fs::read_to_string(p).ok()?.trim().parse().ok()
    }

    /// The most memory charged at once (v1; v2 kernels from 5.19 have
    /// `memory.peak`).
    pub fn memory_peak(&self) -> Option<u64> {
        let p = match &self.kind {
            Kind::V1 { memory, .. } => memory.join("memory.max_usage_in_bytes"),
            Kind::V2 { dir } => dir.join("memory.peak"),
        };
        fs::read_to_string(p).ok()?.trim().parse().ok()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let dirs = match &self.kind {
            Kind::V1 { memory, blkio } => vec![memory.clone(), blkio.clone()],
            Kind::V2 { dir } => vec![dir.clone()],
        };
        for d in &dirs {
            remove_dir(d);
        }
        if let Ok(mut l) = LIVE.lock() {
            l.retain(|d| !dirs.contains(d));
        }
    }
}

/// The `Read` line of the device in a v1 `blkio.throttle.*` file
/// (`254:0 Read 4096`).
pub fn parse_v1_read(s: &str, dev: &str) -> Option<u64> {
    let mut total = None;
    for l in s.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 3 && f[0] == dev && f[1] == "Read" {
            *total.get_or_insert(0) += f[2].parse::<u64>().ok()?;
        }
    }
    // A cgroup that has not read yet lists no device: nothing read.
    Some(total.unwrap_or(0))
}

/// (rbytes, rios) of the device in a v2 `io.stat`.
pub fn parse_v2_read(s: &str, dev: &str) -> Option<(u64, u64)> {
    let line = s.lines().find(|l| l.split_whitespace().next() == Some(dev));
    let Some(line) = line else {
        return Some((0, 0));
    };
    let get = |k: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse::<u64>().ok())
    };
    Some((get("rbytes")?, get("rios")?))
}

/// Whether this process can make the cgroups and throttle `dir`'s disk:
/// `Err` says why not. Makes and removes a probe cgroup.
pub fn available(dir: &Path) -> Result<(), String> {
    let dev = device_of(dir).map_err(|e| format!("{e:#}"))?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: cgroups, drop_caches and task_delayacct need root".into());
    }
    if !Path::new("/proc/sys/kernel/task_delayacct").exists() {
        return Err("no /proc/sys/kernel/task_delayacct (kernel before 5.14)".into());
    }
    let probe = Cgroup::create(&[dev], Limits::default()).map_err(|e| format!("{e:#}"))?;
    drop(probe);
    Ok(())
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
pub fn drop_caches() -> anyhow::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    write(Path::new("/proc/sys/vm/drop_caches"), "3")
}

/// What `kernel.task_delayacct` was before [`enable_delayacct`].
static DELAYACCT_BEFORE: Mutex<Option<String>> = Mutex::new(None);

/// Turns `kernel.task_delayacct` on; returns what it was (to restore).
pub fn enable_delayacct() -> anyhow::Result<String> {
    let p = Path::new("/proc/sys/kernel/task_delayacct");
    let before = fs::read_to_string(p)
        .context("reading /proc/sys/kernel/task_delayacct (a kernel before 5.14 has none)")?;
    let before = before.trim().to_string();
    if let Ok(mut b) = DELAYACCT_BEFORE.lock() {
        b.get_or_insert_with(|| before.clone());
    }
    write(p, "1")?;
    Ok(before)
}

pub fn restore_delayacct(before: &str) {
    let _ = fs::write("/proc/sys/kernel/task_delayacct", before);
    if let Ok(mut b) = DELAYACCT_BEFORE.lock() {
        *b = None;
    }
}

/// Puts `kernel.task_delayacct` back if [`enable_delayacct`] changed it
/// (for a Ctrl-C handler).
pub fn restore_delayacct_if_changed() {
    let before = DELAYACCT_BEFORE.lock().ok().and_then(|mut b| b.take());
    if let Some(b) = before {
        let _ = fs::write("/proc/sys/kernel/task_delayacct", b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_read_counters() {
        let v1 = "254:0 Read 8192\n254:0 Write 4096\n254:0 Sync 0\n254:0 Total 12288\n8:0 Read 5\nTotal 12293\n";
        assert_eq!(parse_v1_read(v1, "254:0"), Some(8192));
        assert_eq!(parse_v1_read("Total 0\n", "254:0"), Some(0));
        let v2 = "8:0 rbytes=1 wbytes=2 rios=3 wios=4\n254:0 rbytes=4096 wbytes=0 rios=7 wios=0 dbytes=0 dios=0\n";
        assert_eq!(parse_v2_read(v2, "254:0"), Some((4096, 7)));
        assert_eq!(parse_v2_read("", "254:0"), Some((0, 0)));
    }

    #[test]
    fn the_root_directory_has_a_device_or_says_why_not() {
        match device_of(Path::new("/")) {
            Ok(d) => assert!(d.major > 0 && !d.name.is_empty()),
            Err(e) => assert!(format!("{e:#}").contains("block device"), "{e:#}"),
        }
    }
}

//! What the kernel says about the server's threads (`/proc/PID/task`) and
//! what the server says about itself (`fjord serve --stats-file`).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::procfs::{self, Stat, clock_ticks};

/// One thread at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskStat {
    pub name: String,
    /// Field 12 of `/proc/PID/task/TID/stat`.
    pub major_faults: u64,
    /// Field 42: time blocked on block I/O (delay accounting), clock ticks.
    pub blkio_ticks: u64,
}

/// One thread (or the whole process) from its `stat` line.
fn task_stat(line: &str) -> Option<TaskStat> {
    let s = Stat::parse(line)?;
    Some(TaskStat {
        name: s.name.to_string(),
        major_faults: s.major_faults()?,
        blkio_ticks: s.blkio_ticks()?,
    })
}

/// Every thread of `pid`, by TID.
pub fn tasks(pid: u32) -> BTreeMap<u32, TaskStat> {
    procfs::tasks(pid)
        .into_iter()
        .filter_map(|(tid, dir)| {
            let line = fs::read_to_string(dir.join("stat")).ok()?;
            Some((tid, task_stat(&line)?))
        })
        .collect()
}

/// The whole process (all threads, living and gone).
pub fn process(pid: u32) -> Option<TaskStat> {
    task_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Time blocked on I/O per thread, summed over samples, leaving out
/// impossible increments: a thread cannot block longer than the time
/// between two samples. (The kernel adds its whole uptime once when a
/// wake-up ends an I/O wait whose start it never stamped, e.g. the first
/// one after `task_delayacct` was turned on.)
#[derive(Clone, Debug, Default)]
pub struct BlkioTracker {
    prev: BTreeMap<u32, u64>,
    last: Option<std::time::Instant>,
    /// Per thread: ticks counted.
    pub ticks: BTreeMap<u32, u64>,
    /// Increments left out, per thread.
    pub artefacts: BTreeMap<u32, u64>,
}

impl BlkioTracker {
    pub fn new(tasks: &BTreeMap<u32, TaskStat>, at: std::time::Instant) -> BlkioTracker {
        BlkioTracker {
            prev: tasks.iter().map(|(t, s)| (*t, s.blkio_ticks)).collect(),
            last: Some(at),
            ..BlkioTracker::default()
        }
    }

    pub fn sample(&mut self, tasks: &BTreeMap<u32, TaskStat>, at: std::time::Instant) {
        let hz = clock_ticks();
        let since = self
            .last
            .map_or(0.0, |l| at.duration_since(l).as_secs_f64());
        // Two ticks of slack for rounding.
        let limit = (since * hz as f64).ceil() as u64 + 2;
        for (tid, s) in tasks {
            let before = self.prev.get(tid).copied().unwrap_or(0);
            let d = s.blkio_ticks.saturating_sub(before);
            if d > limit {
                *self.artefacts.entry(*tid).or_default() += 1;
            } else {
                *self.ticks.entry(*tid).or_default() += d;
            }
            self.prev.insert(*tid, s.blkio_ticks);
        }
        self.last = Some(at);
    }

    /// Milliseconds counted for thread `tid`.
    pub fn ms(&self, tid: u32) -> f64 {
        self.ticks.get(&tid).copied().unwrap_or(0) as f64 * 1000.0 / clock_ticks() as f64
    }
}

/// Samples the state of some threads every `period` on a thread of its
/// own and counts the samples in `D` (uninterruptible sleep: waiting for a
/// page to be read, mostly): an estimate of the time each spent blocked on
/// I/O that does not depend on delay accounting.
pub struct DStateSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<DStateCounts>>,
}

/// What a [`DStateSampler`] counted.
#[derive(Clone, Debug, Default)]
pub struct DStateCounts {
    /// Per thread: samples in `D`.
    pub d: BTreeMap<u32, u64>,
    /// Sampling rounds and the time they covered.
    pub rounds: u64,
    pub seconds: f64,
}

impl DStateCounts {
    /// Estimated ms in `D` of thread `tid`.
    pub fn ms(&self, tid: u32) -> f64 {
        if self.rounds == 0 {
            return 0.0;
        }
        self.d.get(&tid).copied().unwrap_or(0) as f64 / self.rounds as f64 * self.seconds * 1e3
    }

    /// Mean time between samples, ms.
    pub fn period_ms(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            self.seconds * 1e3 / self.rounds as f64
        }
    }
}

impl DStateSampler {
    pub fn start(pid: u32, tids: Vec<u32>, period: std::time::Duration) -> DStateSampler {
        use std::io::{Read, Seek};
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut files: Vec<(u32, fs::File)> = tids
                .iter()
                .filter_map(|t| {
                    fs::File::open(format!("/proc/{pid}/task/{t}/stat"))
                        .ok()
                        .map(|f| (*t, f))
                })
                .collect();
            let mut c = DStateCounts::default();
            let t0 = std::time::Instant::now();
            let mut buf = String::with_capacity(1024);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for (tid, f) in files.iter_mut() {
                    buf.clear();
                    if f.rewind().is_ok()
                        && f.read_to_string(&mut buf).is_ok()
                        && Stat::parse(&buf).and_then(|s| s.state()) == Some('D')
                    {
                        *c.d.entry(*tid).or_default() += 1;
                    }
                }
                c.rounds += 1;
                std::thread::sleep(period);
            }
            c.seconds = t0.elapsed().as_secs_f64();
            c
        });
        DStateSampler {
            stop,
            handle: Some(handle),
        }
    }

    pub fn finish(mut self) -> DStateCounts {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for DStateSampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The file `fjord serve --stats-file` rewrites every second.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerStats {
    pub unix_ms: u64,
    pub threads: Vec<ThreadStats>,
    pub storage: Option<StorageStats>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadStats {
    pub name: String,
    pub sessions: u64,
    pub packets: u64,
    pub late: u64,
    pub max_late_us: u64,
    /// Bursts deferred because their data was not resident yet.
    pub not_ready: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StorageStats {
    pub budget_bytes: u64,
    /// Read-ahead memory pinned now.
    pub pinned_bytes: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_errors: u64,
    pub bulk_bytes: u64,
    /// The longest a session waited for its first packets to be made
    /// resident after PLAY or a seek, µs.
    pub first_read_max_us: u64,
}

/// Reads the stats file; `None` if absent or not (yet) valid.
pub fn read_server_stats(path: &Path) -> Option<ServerStats> {
    let s = fs::read_to_string(path).ok()?;
    serde_json::from_str(&s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blkio_tracker_leaves_out_impossible_jumps() {
        let t0 = std::time::Instant::now();
        let stat = |ticks: u64| {
            BTreeMap::from([(
                7u32,
                TaskStat {
                    blkio_ticks: ticks,
                    ..TaskStat::default()
                },
            )])
        };
        let mut b = BlkioTracker::new(&stat(0), t0);
        let hz = clock_ticks();
        // An uptime's worth at once: left out.
        b.sample(&stat(146_778), t0 + std::time::Duration::from_secs(1));
        // Then half a second of waiting in a second.
        b.sample(
            &stat(146_778 + hz / 2),
            t0 + std::time::Duration::from_secs(2),
        );
        assert_eq!(b.artefacts[&7], 1);
        assert!((b.ms(7) - 500.0).abs() < 1e-9);
    }

    #[test]
    fn own_threads_are_readable() {
        let t = tasks(std::process::id());
        assert!(!t.is_empty());
        assert!(process(std::process::id()).is_some());
    }

    #[test]
    fn stats_file_with_missing_fields() {
        let s: ServerStats = serde_json::from_str(
            r#"{"unix_ms": 5, "threads": [{"name": "fjord-engine-0", "not_ready": 3}]}"#,
        )
        .unwrap();
        assert_eq!(s.threads[0].not_ready, 3);
        assert_eq!(s.threads[0].packets, 0);
        assert!(s.storage.is_none());
        let s: ServerStats = serde_json::from_str(
            r#"{"storage": {"budget_bytes": 10, "pinned_bytes": 4, "extra": 1}}"#,
        )
        .unwrap();
        assert_eq!(s.storage.unwrap().pinned_bytes, 4);
    }
}

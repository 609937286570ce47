//! What the kernel says of the server's engine threads (CPU, run-queue
//! wait, context switches, major faults, block I/O delay) and of the
//! machine's CPUs (steal, irq), as deltas per sample; and whose a sample's
//! late packets are, from the causes the engine counts for each one
//! (`fjord_late_packets_by_cause_total`): a thread that woke late is the
//! machine's, one busy past its deadline or a session that held its
//! packets the server's. The kernel's figures stay beside them as context:
//! a 10 s sample cannot place a 3 ms delay, the engine can.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use super::server::{Metrics, proc_field};
use crate::procfs::{self, CpuTimes, Schedstat, Stat, tick_ms};

/// The engine names its threads `fjord-engine-N` (fjord-engine's
/// `thread.rs`); N is the `thread` label of its metrics.
pub const ENGINE_PREFIX: &str = "fjord-engine-";

/// A thread's usual run-queue wait per timeslice needs this many
/// timeslices before (an idle server's few say little).
pub const MIN_SLICES: u64 = 1000;

/// Counters of one thread: cumulative as read, or a delta, or a sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadCounters {
    /// `schedstat`: on a CPU and runnable but waiting on a run queue, ns;
    /// timeslices.
    pub cpu_ns: u64,
    pub wait_ns: u64,
    pub slices: u64,
    /// `status`: context switches.
    pub voluntary: u64,
    pub nonvoluntary: u64,
    /// `stat`: major page faults (field 12) and block I/O delay (field 42,
    /// clock ticks; counted only under kernel.task_delayacct = 1).
    pub majflt: u64,
    pub blkio_ticks: u64,
}

impl ThreadCounters {
    fn zip(&self, o: &Self, f: impl Fn(u64, u64) -> u64) -> Self {
        ThreadCounters {
            cpu_ns: f(self.cpu_ns, o.cpu_ns),
            wait_ns: f(self.wait_ns, o.wait_ns),
            slices: f(self.slices, o.slices),
            voluntary: f(self.voluntary, o.voluntary),
            nonvoluntary: f(self.nonvoluntary, o.nonvoluntary),
            majflt: f(self.majflt, o.majflt),
            blkio_ticks: f(self.blkio_ticks, o.blkio_ticks),
        }
    }

    pub fn since(&self, before: &Self) -> Self {
        self.zip(before, u64::saturating_sub)
    }

    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Self>) -> Self {
        all.into_iter()
            .fold(Self::default(), |a, b| a.zip(b, u64::saturating_add))
    }
}

/// A thread's counters from its `/proc/PID/task/TID` directory.
pub fn read_thread(dir: &Path) -> Option<ThreadCounters> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let sched = Schedstat::of_task(dir)?;
    let status = read("status")?;
    let stat = read("stat")?;
    let stat = Stat::parse(&stat)?;
    Some(ThreadCounters {
        cpu_ns: sched.run_ns,
        wait_ns: sched.wait_ns,
        slices: sched.slices,
        voluntary: proc_field(&status, "voluntary_ctxt_switches")?,
        nonvoluntary: proc_field(&status, "nonvoluntary_ctxt_switches")?,
        majflt: stat.major_faults()?,
        blkio_ticks: stat.blkio_ticks()?,
    })
}

/// The threads of `pid` whose name starts with `prefix`: (name, TID,
/// counters). Threads that end while being read are left out.
pub fn threads_named(pid: u32, prefix: &str) -> Vec<(String, u32, ThreadCounters)> {
    let mut out = Vec::new();
    for (tid, dir) in procfs::tasks(pid) {
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if let (true, Some(c)) = (comm.starts_with(prefix), read_thread(&dir)) {
            out.push((comm.trim_end().to_string(), tid, c));
        }
    }
    out
}

/// The machine in one sample, ms: stolen by the hypervisor, what a
/// sample as long had at the run's rate before it (0 in the first), and
/// irq + softirq.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Machine {
    pub steal_ms: f64,
    pub usual_steal_ms: f64,
    pub irq_ms: f64,
}

/// One engine thread in one sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineThread {
    /// N of `fjord-engine-N`.
    pub index: usize,
    /// Since the previous sample: the kernel's counters, and the late
    /// packets of the thread's `/metrics` counter.
    pub d: ThreadCounters,
    pub late: u64,
    /// Of `late`: sent in ticks that began late because the thread woke
    /// late, or because it was busy (the engine's `late_woke`,
    /// `late_busy`); held by their sessions after waiting for the storage
    /// layer or a full socket (`late_storage`, `late_socket`); the rest
    /// held for no reason their sessions knew of.
    pub woke: u64,
    pub busy: u64,
    pub storage: u64,
    pub socket: u64,
    /// The run-queue wait of `d.slices` timeslices at the thread's mean
    /// per timeslice before this sample, ns (`d.wait_ns` without a mean).
    pub usual_wait_ns: u64,
    /// The thread's worst lateness since the start (its gauge), ms; and
    /// whether it rose in this sample (then it is this sample's worst).
    pub max_late_ms: f64,
    pub rose: bool,
}

/// The threads the evidence of a sample comes from: those that sent late
/// packets in it (a thread's waits cannot delay another's packets); all
/// of them if none did.
pub fn late_threads(all: &[EngineThread]) -> Vec<&EngineThread> {
    let late: Vec<&EngineThread> = all.iter().filter(|t| t.late > 0).collect();
    if late.is_empty() {
        all.iter().collect()
    } else {
        late
    }
}

/// What the kernel saw of a sample's late threads, beside the engine's
/// causes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Evidence {
    /// The most one late thread waited on a run queue beyond its usual,
    /// ms.
    pub extra_wait_ms: f64,
}

impl Evidence {
    pub fn of(threads: &[EngineThread]) -> Evidence {
        let set = late_threads(threads);
        let extra = |t: &&EngineThread| t.d.wait_ns.saturating_sub(t.usual_wait_ns);
        Evidence {
            extra_wait_ms: set.iter().map(extra).max().unwrap_or(0) as f64 / 1e6,
        }
    }
}

/// Late packets by whose they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Their thread slept through its deadline and got the CPU back late
    /// (the kernel, an interrupt, the hypervisor): the machine's.
    pub woke: u64,
    /// Their thread was still at earlier work past its deadline (a tick,
    /// commands): the server's.
    pub busy: u64,
    /// Held by their sessions after waiting for the storage layer (not
    /// read yet): the server's.
    pub storage: u64,
    /// Held by their sessions after a full socket (a viewer that took
    /// nothing more): the client's.
    pub socket: u64,
    /// Held for no reason their sessions knew of, on a thread that had
    /// major faults or block I/O delay in the sample: the server's disk
    /// wait.
    pub disk: u64,
    /// Held for no reason their sessions knew of otherwise: the server's.
    pub held: u64,
}

impl Split {
    pub fn of(threads: &[EngineThread]) -> Split {
        let mut s = Split::default();
        for t in threads {
            let held = t
                .late
                .saturating_sub(t.woke + t.busy + t.storage + t.socket);
            s.woke += t.woke;
            s.busy += t.busy;
            s.storage += t.storage;
            s.socket += t.socket;
            match t.d.majflt > 0 || t.d.blkio_ticks > 0 {
                true => s.disk += held,
                false => s.held += held,
            }
        }
        s
    }

    pub fn add(&mut self, o: &Split) {
        self.woke += o.woke;
        self.busy += o.busy;
        self.storage += o.storage;
        self.socket += o.socket;
        self.disk += o.disk;
        self.held += o.held;
    }

    pub fn server(&self) -> u64 {
        self.busy + self.storage + self.disk + self.held
    }

    pub fn client(&self) -> u64 {
        self.socket
    }

    pub fn machine(&self) -> u64 {
        self.woke
    }

    pub fn late(&self) -> u64 {
        self.server() + self.client() + self.machine()
    }

    /// E.g. `woke late 20 (machine); busy 3 held 1 (server); full socket 2
    /// (client)`: no commas, so it fits a CSV field.
    pub fn name(&self) -> String {
        let server = [
            ("busy", self.busy),
            ("storage", self.storage),
            ("held", self.held),
            ("disk wait", self.disk),
        ];
        let server: Vec<String> = (server.iter().filter(|(_, n)| *n > 0))
            .map(|(what, n)| format!("{what} {n}"))
            .collect();
        let mut parts = Vec::new();
        if self.woke > 0 {
            parts.push(format!("woke late {} (machine)", self.woke));
        }
        if !server.is_empty() {
            parts.push(format!("{} (server)", server.join(" ")));
        }
        if self.socket > 0 {
            parts.push(format!("full socket {} (client)", self.socket));
        }
        parts.join("; ")
    }
}

/// Cumulative figures of a thread at the previous sample.
#[derive(Clone, Copy, Debug, Default)]
struct Before {
    tid: u32,
    counters: ThreadCounters,
    late: u64,
    woke: u64,
    busy: u64,
    storage: u64,
    socket: u64,
    max_late_ms: f64,
}

/// Reads the server's engine threads and the machine's CPU line, and
/// keeps them to make the next sample's deltas.
#[derive(Debug, Default)]
pub struct Watch {
    pid: u32,
    before: BTreeMap<usize, Before>,
    /// The machine's first reading and the latest.
    first: Option<(Instant, CpuTimes)>,
    last: Option<(Instant, CpuTimes)>,
}

impl Watch {
    pub fn new(pid: u32) -> Watch {
        Watch {
            pid,
            ..Watch::default()
        }
    }

    /// The engine threads and the machine since the last call (threads:
    /// since they started, the first time; the machine: nothing); late
    /// packets, their causes and the worst lateness per thread from the
    /// server's `/metrics`.
    pub fn take(&mut self, m: &Metrics) -> (Vec<EngineThread>, Machine) {
        let cause = |c: &str| {
            let label = format!("cause=\"{c}\"");
            m.by_thread_where("fjord_late_packets_by_cause_total", |l| l.contains(&label))
        };
        let late = m.by_thread("fjord_late_packets_total");
        let max_late_s = m.by_thread("fjord_engine_max_lateness_seconds");
        let (woke, busy) = (cause("woke_late"), cause("busy"));
        let (storage, socket) = (cause("storage"), cause("socket"));
        let mut now: BTreeMap<usize, Before> = BTreeMap::new();
        for (name, tid, counters) in threads_named(self.pid, ENGINE_PREFIX) {
            if let Ok(i) = name[ENGINE_PREFIX.len()..].parse() {
                now.insert(
                    i,
                    Before {
                        tid,
                        counters,
                        ..Before::default()
                    },
                );
            }
        }
        for (&i, &v) in &late {
            now.entry(i).or_default().late = v as u64;
        }
        for (&i, &v) in &woke {
            now.entry(i).or_default().woke = v as u64;
        }
        for (&i, &v) in &busy {
            now.entry(i).or_default().busy = v as u64;
        }
        for (&i, &v) in &storage {
            now.entry(i).or_default().storage = v as u64;
        }
        for (&i, &v) in &socket {
            now.entry(i).or_default().socket = v as u64;
        }
        for (&i, &v) in &max_late_s {
            now.entry(i).or_default().max_late_ms = v * 1e3;
        }
        let threads = now.iter().map(|(&i, n)| self.delta(i, n)).collect();
        self.before = now;
        (threads, self.machine())
    }

    fn machine(&mut self) -> Machine {
        let cpu = CpuTimes::now();
        let (Some(cpu), Some((t0, first)), Some((t1, last))) = (cpu, self.first, self.last) else {
            let now = cpu.map(|c| (Instant::now(), c));
            (self.first, self.last) = (now, now);
            return Machine::default();
        };
        let now = Instant::now();
        self.last = Some((now, cpu));
        let tick = tick_ms();
        // The steal rate from the first reading to the previous one.
        let rate =
            last.steal.saturating_sub(first.steal) as f64 / (t1 - t0).as_secs_f64().max(1e-3);
        Machine {
            steal_ms: cpu.steal.saturating_sub(last.steal) as f64 * tick,
            usual_steal_ms: rate * (now - t1).as_secs_f64() * tick,
            irq_ms: cpu.irq.saturating_sub(last.irq) as f64 * tick,
        }
    }

    fn delta(&self, index: usize, now: &Before) -> EngineThread {
        let b = self.before.get(&index).copied().unwrap_or_default();
        // Another thread under the same name starts from nothing.
        let base = if b.tid == now.tid {
            b.counters
        } else {
            ThreadCounters::default()
        };
        let d = now.counters.since(&base);
        let per_slice = base.wait_ns as f64 / base.slices.max(1) as f64;
        let usual_wait_ns = if base.slices < MIN_SLICES {
            d.wait_ns
        } else {
            (per_slice * d.slices as f64) as u64
        };
        EngineThread {
            index,
            d,
            usual_wait_ns,
            late: now.late.saturating_sub(b.late),
            woke: now.woke.saturating_sub(b.woke),
            busy: now.busy.saturating_sub(b.busy),
            storage: now.storage.saturating_sub(b.storage),
            socket: now.socket.saturating_sub(b.socket),
            max_late_ms: now.max_late_ms,
            rose: now.max_late_ms > b.max_late_ms,
        }
    }
}

/// kernel.task_delayacct (block I/O delay in `stat`) turned on for the
/// run and put back as it was when dropped.
#[derive(Debug)]
pub struct DelayAcct {
    /// The value to put back, if it was changed.
    restore: Option<String>,
    /// For the report.
    pub note: String,
}

const DELAYACCT: &str = "/proc/sys/kernel/task_delayacct";

impl DelayAcct {
    pub fn enable() -> DelayAcct {
        let off = |why: String| DelayAcct {
            restore: None,
            note: format!("{why}: block I/O delay reads 0, major faults still count"),
        };
        let was = match std::fs::read_to_string(DELAYACCT) {
            Ok(w) => w.trim().to_string(),
            Err(e) => return off(format!("no kernel.task_delayacct ({e})")),
        };
        if was == "1" {
            return DelayAcct {
                restore: None,
                note: "kernel.task_delayacct was already 1".into(),
            };
        }
        match std::fs::write(DELAYACCT, "1") {
            Ok(()) => DelayAcct {
                note: format!("kernel.task_delayacct set to 1 for the run (was {was})"),
                restore: Some(was),
            },
            Err(e) => off(format!("could not set kernel.task_delayacct ({e})")),
        }
    }
}

impl Drop for DelayAcct {
    fn drop(&mut self) {
        if let Some(w) = &self.restore {
            let _ = std::fs::write(DELAYACCT, w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_context_switches() {
        let status = "Name:\tfjord-engine-0\nState:\tS (sleeping)\n\
                      voluntary_ctxt_switches:\t1520\nnonvoluntary_ctxt_switches:\t33\n";
        assert_eq!(proc_field(status, "voluntary_ctxt_switches"), Some(1520));
        assert_eq!(proc_field(status, "nonvoluntary_ctxt_switches"), Some(33));
    }

    fn thread(index: usize, late: u64, d: ThreadCounters) -> EngineThread {
        EngineThread {
            index,
            d,
            late,
            ..EngineThread::default()
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn late_packets_split_by_their_threads_causes() {
        let faulted = ThreadCounters {
            majflt: 1,
            ..ThreadCounters::default()
        };
        let t = |index, late, woke, busy, d| EngineThread {
            woke,
            busy,
            ..thread(index, late, d)
        };
        // Thread 0: 16 late, 6 woke late, 1 busy, 2 after a storage wait, 4
        // after a full socket, 3 held; thread 1 had a major fault: its 4
        // held are a disk wait.
        let ts = [
            EngineThread {
                storage: 2,
                socket: 4,
                ..t(0, 16, 6, 1, ThreadCounters::default())
            },
            t(1, 5, 0, 1, faulted),
        ];
        let s = Split::of(&ts);
        let want = Split {
            woke: 6,
            busy: 2,
            storage: 2,
            socket: 4,
            disk: 4,
            held: 3,
        };
        assert_eq!(s, want);
        assert_eq!(
            (s.machine(), s.server(), s.client(), s.late()),
            (6, 11, 4, 21)
        );
        assert_eq!(
            s.name(),
            "woke late 6 (machine); busy 2 storage 2 held 3 disk wait 4 (server); full socket 4 (client)"
        );
        let only = Split {
            woke: 3,
            ..Split::default()
        };
        assert_eq!(only.name(), "woke late 3 (machine)");
        let mut sum = only;
        sum.add(&want);
        assert_eq!((sum.woke, sum.server()), (9, 11));
        assert!(!s.name().contains(','));
    }

    #[test]
    fn evidence_beyond_the_usual_from_the_threads_that_went_late() {
        let counters = |wait_ms: u64, majflt| ThreadCounters {
            wait_ns: wait_ms * MS,
            slices: 9000,
            majflt,
            ..ThreadCounters::default()
        };
        let usual = |mut t: EngineThread, ms: u64| {
            t.usual_wait_ns = ms * MS;
            t
        };
        // Thread 1 waited long, but thread 0 sent the late packets, and
        // waited 4 ms where 3 ms is its usual.
        let ts = [
            usual(thread(0, 5, counters(4, 0)), 3),
            usual(thread(1, 0, counters(30, 2)), 3),
        ];
        assert_eq!(Evidence::of(&ts).extra_wait_ms, 1.0);
        // No thread's count known: all of them.
        let ts = [
            thread(0, 0, counters(4, 0)),
            usual(thread(1, 0, counters(30, 0)), 3),
        ];
        assert_eq!(Evidence::of(&ts).extra_wait_ms, 27.0);
        // Below the usual is no wait at all.
        let ts = [usual(thread(0, 5, counters(1, 0)), 3)];
        assert_eq!(Evidence::of(&ts).extra_wait_ms, 0.0);
    }

    #[test]
    fn deltas_and_sums() {
        let a = ThreadCounters {
            cpu_ns: 10,
            wait_ns: 4,
            slices: 3,
            ..ThreadCounters::default()
        };
        let b = ThreadCounters {
            cpu_ns: 25,
            wait_ns: 4,
            slices: 5,
            majflt: 1,
            ..ThreadCounters::default()
        };
        let d = b.since(&a);
        assert_eq!((d.cpu_ns, d.wait_ns, d.slices, d.majflt), (15, 0, 2, 1));
        assert_eq!(a.since(&b).cpu_ns, 0);
        assert_eq!(ThreadCounters::sum([&a, &b]).cpu_ns, 35);
    }

    #[test]
    fn this_process_own_threads_from_proc() {
        let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
        let (done, done_rx) = std::sync::mpsc::channel::<()>();
        let probe = std::thread::Builder::new()
            .name("soak-probe-7".into())
            .spawn(move || {
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_millis(5) {
                    std::hint::black_box(0u64);
                }
                let _ = ready_tx.send(());
                let _ = done_rx.recv();
            })
            .unwrap();
        ready.recv().unwrap();
        let found = threads_named(std::process::id(), "soak-probe-");
        let _ = done.send(());
        probe.join().unwrap();
        // Found: its schedstat, status and stat all parsed.
        assert_eq!(found.len(), 1, "{found:?}");
        let (name, tid, c) = &found[0];
        assert_eq!(name, "soak-probe-7");
        assert!(*tid > 0);
        assert!(c.cpu_ns > 0 && c.slices >= 1, "{c:?}");
        assert!(CpuTimes::now().is_some_and(|c| c.irq > 0));
    }
}

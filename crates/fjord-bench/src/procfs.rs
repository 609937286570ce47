//! What the kernel says under `/proc` about processes, threads and the
//! machine, parsed in one place for every benchmark: a thread's
//! `schedstat` (time on a CPU, run-queue wait, timeslices), the fields of
//! a `stat` line, a process's CPU, and the machine's `cpu` line of
//! `/proc/stat` (steal, irq).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;

/// A thread's `schedstat` (`/proc/PID/task/TID/schedstat`), or a sum of
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedstat {
    /// Time on a CPU, ns.
    pub run_ns: u64,
    /// Time runnable but waiting on a run queue, ns.
    pub wait_ns: u64,
    /// Timeslices run (times put on a CPU).
    pub slices: u64,
}

impl Schedstat {
    /// The line `run_ns wait_ns slices`.
    pub fn parse(s: &str) -> Option<Schedstat> {
        let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some(Schedstat {
            run_ns: f.next()??,
            wait_ns: f.next()??,
            slices: f.next()??,
        })
    }

    /// The `schedstat` of the task directory `dir` (`/proc/PID/task/TID`).
    pub fn of_task(dir: &Path) -> Option<Schedstat> {
        Schedstat::parse(&std::fs::read_to_string(dir.join("schedstat")).ok()?)
    }

    /// The calling thread's.
    pub fn this_thread() -> Option<Schedstat> {
        Schedstat::of_task(Path::new("/proc/thread-self"))
    }

    /// Every live thread of `pid`, summed (a thread that exits takes its
    /// share along).
    pub fn of_process(pid: u32) -> Schedstat {
        tasks(pid)
            .iter()
            .filter_map(|(_, dir)| Schedstat::of_task(dir))
            .fold(Schedstat::default(), |a, b| Schedstat {
                run_ns: a.run_ns + b.run_ns,
                wait_ns: a.wait_ns + b.wait_ns,
                slices: a.slices + b.slices,
            })
    }
}

/// The threads of `pid`: (TID, `/proc/PID/task/TID`). Empty when the
/// process is gone.
pub fn tasks(pid: u32) -> Vec<(u32, PathBuf)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect()
}

/// A `/proc/…/stat` line: the command name (field 2), and the fields after
/// it by their number in proc(5). The name is in parentheses and may hold
/// spaces and parentheses itself, so the fields are counted after its last
/// `)`.
#[derive(Clone, Copy, Debug)]
pub struct Stat<'a> {
    pub name: &'a str,
    /// From field 3 (the state) on.
    rest: &'a str,
}

impl<'a> Stat<'a> {
    pub fn parse(line: &'a str) -> Option<Stat<'a>> {
        let open = line.find('(')?;
        let close = line.rfind(')')?;
        Some(Stat {
            name: line.get(open + 1..close)?,
            rest: line.get(close + 1..)?,
        })
    }

    /// Field `n` (3 or more) as text.
    pub fn text(&self, n: usize) -> Option<&'a str> {
        self.rest.split_whitespace().nth(n.checked_sub(3)?)
    }

    /// Field `n` (3 or more) as a number.
    pub fn field(&self, n: usize) -> Option<u64> {
        self.text(n)?.parse().ok()
    }

    /// The state letter (field 3): `R`, `S`, `D`, …
    pub fn state(&self) -> Option<char> {
        self.text(3)?.chars().next()
    }

    /// Major faults (field 12).
    pub fn major_faults(&self) -> Option<u64> {
        self.field(12)
    }

    /// Time blocked on block I/O (field 42, delay accounting), clock ticks.
    pub fn blkio_ticks(&self) -> Option<u64> {
        self.field(42)
    }

    /// User and system CPU (fields 14 and 15), clock ticks.
    pub fn cpu_ticks(&self) -> Option<(u64, u64)> {
        Some((self.field(14)?, self.field(15)?))
    }
}

/// Clock ticks per second (`USER_HZ`) of `stat` and `/proc/stat`.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// Milliseconds per clock tick.
pub fn tick_ms() -> f64 {
    1e3 / clock_ticks() as f64
}

/// CPU (user + system) a process has used, all its threads, live and
/// exited.
pub fn process_cpu(pid: u32) -> anyhow::Result<Duration> {
    let line = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (u, s) = Stat::parse(&line)
        .and_then(|s| s.cpu_ticks())
        .context("unreadable /proc/PID/stat")?;
    Ok(Duration::from_nanos(
        (u + s) * 1_000_000_000 / clock_ticks(),
    ))
}

/// The machine's CPU time from the first (`cpu `) line of `/proc/stat`,
/// clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + idle + iowait + irq + softirq + steal (guest
    /// time is already in user time).
    pub total: u64,
    /// irq + softirq.
    pub irq: u64,
    /// Stolen: time the hypervisor gave the virtual CPUs to someone else.
    pub steal: u64,
}

impl CpuTimes {
    pub fn parse(proc_stat: &str) -> Option<CpuTimes> {
        let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
        // user nice system idle iowait irq softirq steal [guest guest_nice]
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        Some(CpuTimes {
            total: f.get(..8)?.iter().sum(),
            irq: f[5] + f[6],
            steal: f[7],
        })
    }

    /// The machine's now.
    pub fn now() -> Option<CpuTimes> {
        CpuTimes::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_line() {
        assert_eq!(
            Schedstat::parse("242487906 24247010 1309\n"),
            Some(Schedstat {
                run_ns: 242487906,
                wait_ns: 24247010,
                slices: 1309
            })
        );
        assert_eq!(Schedstat::parse("12 34"), None);
        assert_eq!(Schedstat::parse("x y z"), None);
        assert_eq!(Schedstat::parse(""), None);
        // Our own threads are readable (a thread's time on a CPU is
        // brought up to date when it leaves the CPU: a young one may show 0).
        assert!(Schedstat::this_thread().is_some_and(|s| s.slices > 0));
        let all = Schedstat::of_process(std::process::id());
        assert!(all.run_ns > 0 && all.slices > 0, "{all:?}");
        assert!(!tasks(std::process::id()).is_empty());
    }

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parentheses() {
        // Fields 3-52 of a real line (SCHED_FIFO 50); majflt (12) = 7,
        // utime, stime (14, 15) = 0, 0, blkio ticks (42) = 42.
        let tail = "S 19038 19038 18542 0 -1 4194304 100 0 7 0 0 0 0 0 -51 0 1 0 5824230 \
                    3133440 362 18446744073709551615 93963136765952 93963136785833 \
                    140737479423200 0 0 0 0 0 0 0 0 0 17 1 50 1 42 0 0 93963136801840 \
                    93963136803456 93963433156608 140737479428794 140737479428814 \
                    140737479428814 140737479430123 0";
        let line = format!("4242 (fjord (x) y) z) {tail}\n");
        let s = Stat::parse(&line).unwrap();
        assert_eq!(s.name, "fjord (x) y) z");
        assert_eq!(s.state(), Some('S'));
        assert_eq!((s.major_faults(), s.blkio_ticks()), (Some(7), Some(42)));
        assert_eq!(s.cpu_ticks(), Some((0, 0)));
        let line = "4242 (fjord) S 1 4242 4242 0 -1 4194560 1290 0 0 0 731 129 0 0 20 0 5 0";
        assert_eq!(Stat::parse(line).unwrap().cpu_ticks(), Some((731, 129)));
        let short = Stat::parse("4242 (short) S 1 1").unwrap();
        assert_eq!((short.major_faults(), short.cpu_ticks()), (None, None));
        assert_eq!(short.text(2), None);
        assert_eq!(Stat::parse("9 (a) b) D 1").unwrap().state(), Some('D'));
        assert!(Stat::parse("no parenthesis").is_none());
    }

    #[test]
    fn own_process_cpu_is_readable() {
        let cpu = process_cpu(std::process::id()).unwrap();
        assert!(cpu < Duration::from_secs(100_000));
        assert!(clock_ticks() > 0 && tick_ms() > 0.0);
    }

    #[test]
    fn cpu_line_total_steal_and_irq() {
        let s = "cpu  3201271 201087 1001649 6954601 132901 5 264564 3174 0 0\n\
                 cpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(
            CpuTimes::parse(s),
            Some(CpuTimes {
                total: 3201271 + 201087 + 1001649 + 6954601 + 132901 + 5 + 264564 + 3174,
                irq: 264569,
                steal: 3174,
            })
        );
        assert_eq!(CpuTimes::parse("cpu0 1 2 3\n"), None);
        assert_eq!(CpuTimes::parse("cpu  1 2 3\n"), None);
        assert!(CpuTimes::now().is_some());
    }
}

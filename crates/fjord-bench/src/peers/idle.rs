//! `fjord bench idle`: what fjord costs beyond its packets — an idle
//! server, or one with a few sessions — thread by thread, beside the kernel
//! floor of the same packets.
//!
//! Per run: a fresh `fjord serve` as `fjord bench peers` starts it (pinned,
//! optionally SCHED_FIFO), N plain receivers playing its title (none for an
//! idle server), and after a warm-up each of its threads' time on a CPU
//! and times it was put on one (`/proc/PID/task/*/schedstat`) over the
//! window. With sessions, the floor (prebuilt packets to N plain receivers
//! at the title's rate, [`super::floor`]) runs next at fjord's measured
//! burst, rounded: what is left over is what fjord adds to the kernel's
//! work for those packets. Each fjord run is set against the mean of the
//! floor runs just before and after it (one for the first run), so that
//! the machine's speed drifting over the series does not land on one side.

use std::{collections::BTreeMap, time::Duration};

use anyhow::Context;

use super::{Peer, PeersConfig, ServerChild, burst, floor, make_title, prepare, title_seconds};
use crate::procfs::{self, Schedstat};
use crate::{
    capacity::{available_cpus, pin_current_thread},
    stats::median,
};

/// Before the window: the server has started its threads and the sessions
/// play.
pub const WARMUP: Duration = Duration::from_secs(3);

/// One thread's (or same-named threads') use of a CPU over a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ThreadUse {
    pub threads: usize,
    /// Time on a CPU, seconds.
    pub cpu_s: f64,
    /// Times put on a CPU (wake-ups and preemptions).
    pub runs: u64,
}

/// One run: fjord's threads by name, and the floor's sender if measured.
#[derive(Clone, Debug, Default)]
pub struct IdleRun {
    pub window_s: f64,
    pub threads: BTreeMap<String, ThreadUse>,
    /// fjord's packets per send, with sessions.
    pub burst: Option<f64>,
    /// The floor runs beside it (before and after): burst, CPU over its
    /// window and that window, seconds.
    pub floors: Vec<(usize, f64, f64)>,
}

impl IdleRun {
    /// fjord's share of one core, percent.
    pub fn percent(&self) -> f64 {
        100.0 * self.threads.values().map(|t| t.cpu_s).sum::<f64>() / self.window_s
    }

    /// The floor's share of one core, percent (the mean of the runs
    /// beside it): none when not measured.
    pub fn floor_percent(&self) -> Option<f64> {
        let n = self.floors.len() as f64;
        let each = self.floors.iter().map(|(_, cpu, w)| 100.0 * cpu / w);
        (n > 0.0).then(|| each.sum::<f64>() / n)
    }
}

/// `(tid, name, ns on a CPU, times on a CPU)` of every thread of `pid`.
fn threads(pid: u32) -> Vec<(String, String, u64, u64)> {
    procfs::tasks(pid)
        .into_iter()
        .filter_map(|(tid, dir)| {
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            let s = Schedstat::of_task(&dir)?;
            Some((tid.to_string(), comm.trim().to_string(), s.run_ns, s.slices))
        })
        .collect()
}

/// What each thread name used between two snapshots; a thread born in
/// between counts from zero.
pub fn by_name(
    before: &[(String, String, u64, u64)],
    after: &[(String, String, u64, u64)],
) -> BTreeMap<String, ThreadUse> {
    let mut out: BTreeMap<String, ThreadUse> = BTreeMap::new();
    for (tid, name, run, slices) in after {
        let (r0, s0) = before
            .iter()
            .find(|b| &b.0 == tid)
            .map_or((0, 0), |b| (b.2, b.3));
        let u = out.entry(name.clone()).or_default();
        u.threads += 1;
        u.cpu_s += run.saturating_sub(r0) as f64 / 1e9;
        u.runs += slices.saturating_sub(s0);
    }
    out
}

/// Measures `cfg.reps` runs of fjord with `cfg.sessions` sessions (0: an
/// idle server) for `cfg.seconds` each, and the floor beside each.
pub fn run(cfg: &PeersConfig) -> anyhow::Result<Vec<IdleRun>> {
    let title = make_title(
        &cfg.media_dir,
        title_seconds(cfg.seconds + WARMUP.as_secs_f64()),
    )?;
    let scratch = tempfile::tempdir()?;
    let (fjord, _) =
        prepare(Peer::Fjord, cfg, &title, scratch.path()).map_err(anyhow::Error::msg)?;
    let ring = floor::Ring::from_title(&title)?;
    pin_current_thread((cfg.cpu + 1) % available_cpus());
    let mut runs = Vec::new();
    let mut before = None;
    for rep in 0..cfg.reps {
        eprintln!(
            "run {}/{}: fjord, {} sessions",
            rep + 1,
            cfg.reps,
            cfg.sessions
        );
        let (server, url) = (fjord.start)()?;
        let mut run = measure(&server, &url, cfg)?;
        drop(server);
        if let Some(b) = run.burst.filter(|_| cfg.sessions > 0) {
            let b = (b.round() as usize).max(1);
            eprintln!("run {}/{}: kernel floor at B={b}", rep + 1, cfg.reps);
            let f = floor::run_once(cfg, &ring, b, rep)?;
            let after = (b, f.cpu_s, f.window_s);
            run.floors = (before.iter().copied())
                .filter(|&(fb, _, _)| fb == b)
                .chain([after])
                .collect();
            before = Some(after);
        }
        runs.push(run);
    }
    Ok(runs)
}

/// fjord's threads over the window, with the load playing meanwhile.
fn measure(server: &ServerChild, url: &str, cfg: &PeersConfig) -> anyhow::Result<IdleRun> {
    let window = Duration::from_secs_f64(cfg.seconds);
    std::thread::scope(|s| {
        let load = (cfg.sessions > 0).then(|| {
            let mut load = fjord_client::load::LoadConfig::new(
                url.to_string(),
                cfg.sessions,
                WARMUP + window + Duration::from_secs(1),
            );
            load.gro = cfg.gro;
            s.spawn(move || fjord_client::load::run(&load))
        });
        std::thread::sleep(WARMUP);
        let before = threads(server.pid());
        let t0 = std::time::Instant::now();
        std::thread::sleep(window);
        let after = threads(server.pid());
        let window_s = t0.elapsed().as_secs_f64();
        let burst = (cfg.sessions > 0).then(|| burst::read(server.admin.as_deref()));
        if let Some(l) = load {
            let report = (l.join())
                .map_err(|_| anyhow::anyhow!("the load panicked"))?
                .context("the load")?;
            anyhow::ensure!(
                report.sessions_playing == cfg.sessions,
                "{} of {} sessions played: {}",
                report.sessions_playing,
                cfg.sessions,
                report.errors.join("; ")
            );
        }
        Ok(IdleRun {
            window_s,
            threads: by_name(&before, &after),
            burst: burst.transpose().map_err(anyhow::Error::msg)?,
            floors: Vec::new(),
        })
    })
}

/// The report: fjord's share of a core by thread (medians over the runs),
/// its total, the floor's and the difference.
pub fn markdown(runs: &[IdleRun], cfg: &PeersConfig, command: &str) -> String {
    let mut md = format!(
        "# fjord bench idle: fjord with {} sessions, thread by thread\n\nCommand: `{command}`\n\n",
        cfg.sessions
    );
    let names: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| r.threads.keys()).collect();
    md.push_str("| thread | threads | % of a core | runs on a CPU per s |\n|---|---:|---:|---:|\n");
    for name in names {
        let of = |f: &dyn Fn(&ThreadUse, f64) -> f64| {
            median(
                &runs
                    .iter()
                    .map(|r| r.threads.get(name).map_or(0.0, |t| f(t, r.window_s)))
                    .collect::<Vec<_>>(),
            )
        };
        let n = runs
            .iter()
            .filter_map(|r| r.threads.get(name))
            .map(|t| t.threads)
            .max()
            .unwrap_or(0);
        md.push_str(&format!(
            "| {name} | {n} | {:.4} % | {:.1} |\n",
            of(&|t, w| 100.0 * t.cpu_s / w),
            of(&|t, w| t.runs as f64 / w)
        ));
    }
    let total = median(&runs.iter().map(IdleRun::percent).collect::<Vec<_>>());
    md.push_str(&format!("| **all** | | **{total:.4} %** | |\n\n"));
    let each: Vec<String> = runs
        .iter()
        .map(|r| format!("{:.4} %", r.percent()))
        .collect();
    md.push_str(&format!(
        "Runs: {} (median {total:.4} % of a core).\n\n",
        each.join(", ")
    ));
    let floors: Vec<(usize, f64, f64)> = runs
        .iter()
        .filter_map(|r| {
            Some((
                r.floors.last()?.0,
                r.floor_percent()?,
                r.percent() - r.floor_percent()?,
            ))
        })
        .collect();
    if !floors.is_empty() {
        let med =
            |f: fn(&(usize, f64, f64)) -> f64| median(&floors.iter().map(f).collect::<Vec<_>>());
        let bursts: Vec<String> = floors.iter().map(|f| f.0.to_string()).collect();
        md.push_str(&format!(
            "Kernel floor of the same packets (prebuilt, to {} plain receivers, GSO bursts of fjord's measured burst rounded: B = {}): **{:.4} %** of a core (median); \
             fjord beyond it: **{:.4} %** of a core (median of the runs' differences, \
             each run against the mean of the floor runs just before and after it).\n\n\
             Each run, fjord − its floor: {}.\n\n",
            cfg.sessions,
            bursts.join(", "),
            med(|f| f.1),
            med(|f| f.2),
            floors
                .iter()
                .zip(runs)
                .map(|(f, r)| format!("{:.4} − {:.4} = {:.4} %", r.percent(), f.1, f.2))
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    md.push_str(&format!(
        "How: `fjord serve` as `fjord bench peers` starts it (one engine thread, pinned to CPU {}{}, \
         `udp_sockets = \"{}\"`), \
         a fresh server per run; {}; after {} s of warm-up, each thread's time on a CPU and times put on one \
         (`/proc/PID/task/*/schedstat`) over {} s; threads of one name summed.\n",
        cfg.cpu,
        if cfg.realtime { ", SCHED_FIFO" } else { "" },
        cfg.udp_sockets,
        match cfg.sessions {
            0 => "no client".to_string(),
            n => format!("{n} sessions of `fjord load` (plain receivers, no UDP GRO) playing its 4.5 Mbit/s title on the next CPU"),
        },
        WARMUP.as_secs(),
        cfg.seconds,
    ));
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(tid: &str, name: &str, run: u64, slices: u64) -> (String, String, u64, u64) {
        (tid.into(), name.into(), run, slices)
    }

    #[test]
    fn threads_of_one_name_add_up_and_new_ones_count_from_zero() {
        let before = [
            t("1", "fjord", 5_000_000, 10),
            t("2", "tokio", 1_000_000, 4),
        ];
        let after = [
            t("1", "fjord", 7_000_000, 12),
            t("2", "tokio", 1_500_000, 6),
            t("3", "tokio", 250_000, 1),
        ];
        let u = by_name(&before, &after);
        assert_eq!(
            u["fjord"],
            ThreadUse {
                threads: 1,
                cpu_s: 0.002,
                runs: 2
            }
        );
        assert_eq!(u["tokio"].threads, 2);
        assert!((u["tokio"].cpu_s - 0.00075).abs() < 1e-12);
        assert_eq!(u["tokio"].runs, 3);
    }

    #[test]
    fn the_report_sets_fjord_beside_its_floor() {
        let mut threads = BTreeMap::new();
        threads.insert(
            "fjord-engine-0".to_string(),
            ThreadUse {
                threads: 1,
                cpu_s: 0.04,
                runs: 400,
            },
        );
        threads.insert(
            "fjord-storage".to_string(),
            ThreadUse {
                threads: 2,
                cpu_s: 0.01,
                runs: 50,
            },
        );
        let run = IdleRun {
            window_s: 10.0,
            threads,
            burst: Some(12.3),
            floors: vec![(12, 0.02, 10.0), (12, 0.04, 10.0)],
        };
        assert!((run.percent() - 0.5).abs() < 1e-9);
        let cfg = PeersConfig {
            sessions: 1,
            seconds: 10.0,
            tcp: false,
            reps: 1,
            cpu: 0,
            realtime: false,
            gro: false,
            fjord_exe: "fjord".into(),
            media_dir: "m".into(),
            floor_bursts: Vec::new(),
            servers: vec![Peer::Fjord],
            udp_sockets: "shared".into(),
        };
        let md = markdown(&[run], &cfg, "fjord bench idle --sessions 1");
        assert!(
            md.contains("| fjord-engine-0 | 1 | 0.4000 % | 40.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| fjord-storage | 2 | 0.1000 % | 5.0 |"),
            "{md}"
        );
        assert!(md.contains("**0.3000 %** of a core (median)"), "{md}");
        assert!(md.contains("fjord beyond it: **0.2000 %**"), "{md}");
        assert!(md.contains("0.5000 − 0.3000 = 0.2000 %"), "{md}");
    }
}

//! A server's CPU over the load's receive window: its threads' time on a
//! CPU and run-queue wait (`schedstat`), sampled on a thread of its own
//! and interpolated to the window's ends.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use crate::procfs::Schedstat;

/// Samples a process's CPU every `period` on a thread of its own.
pub struct CpuSampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(i64, f64, f64)>>>,
}

impl CpuSampler {
    pub fn start(pid: u32, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            loop {
                let done = flag.load(Ordering::Relaxed);
                let s = Schedstat::of_process(pid);
                if s.run_ns > 0 {
                    samples.push((unix_ns(), s.run_ns as f64 / 1e9, s.wait_ns as f64 / 1e9));
                }
                if done {
                    return samples;
                }
                std::thread::sleep(period);
            }
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// `(CLOCK_REALTIME ns, CPU s, run-queue wait s)`, sorted by time; one
    /// last sample is taken now.
    pub fn finish(mut self) -> Vec<(i64, f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for CpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The CPU at `t_ns`, linear between the samples `(time ns, CPU s)` around
/// it (sorted by time); `None` outside them.
pub fn cpu_at(samples: &[(i64, f64)], t_ns: i64) -> Option<f64> {
    let i = samples.partition_point(|&(t, _)| t < t_ns);
    match (
        i.checked_sub(1).and_then(|j| samples.get(j)),
        samples.get(i),
    ) {
        (_, Some(&(t1, c1))) if t1 == t_ns => Some(c1),
        (Some(&(t0, c0)), Some(&(t1, c1))) => {
            Some(c0 + (c1 - c0) * (t_ns - t0) as f64 / (t1 - t0) as f64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_interpolates_between_samples() {
        let s = [(0, 1.0), (100, 2.0), (300, 2.0), (400, 6.0)];
        assert_eq!(cpu_at(&s, 0), Some(1.0));
        assert_eq!(cpu_at(&s, 50), Some(1.5));
        assert_eq!(cpu_at(&s, 200), Some(2.0));
        assert_eq!(cpu_at(&s, 350), Some(4.0));
        assert_eq!(cpu_at(&s, 400), Some(6.0));
        assert_eq!(cpu_at(&s, -1), None);
        assert_eq!(cpu_at(&s, 401), None);
        assert_eq!(cpu_at(&[], 0), None);
    }
}

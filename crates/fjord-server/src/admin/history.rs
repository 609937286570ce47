//! What the status page's chart shows: the server's totals sampled once a
//! second, the last ten minutes of them.

use std::{
    collections::VecDeque,
    sync::{Mutex, Weak},
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::Server;

/// Samples kept: ten minutes at one a second.
const KEPT: usize = 600;

#[derive(Clone, Copy, Serialize)]
pub(crate) struct Sample {
    pub unix_ms: u64,
    pub sessions: usize,
    pub packets: u64,
    pub bytes: u64,
    pub late: u64,
}

pub(crate) struct History {
    samples: Mutex<VecDeque<Sample>>,
}

impl Default for History {
    /// All of its room at once: it would grow to it over the first ten
    /// minutes anyway, doubling as it goes.
    fn default() -> Self {
        Self {
            samples: Mutex::new(VecDeque::with_capacity(KEPT)),
        }
    }
}

impl History {
    fn push(&self, s: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(s);
    }

    pub(crate) fn samples(&self) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.iter().copied().collect()
    }
}

/// Samples the engine's totals once a second on a thread of its own until
/// the server is gone. Not a runtime timer: tokio's wheel reaches a
/// one-second deadline in two wake-ups (it cascades from 64 ms slots) and
/// wakes a second worker for the task; a sleeping thread wakes once.
pub(crate) fn sample_every_second(server: Weak<Server>) {
    let started = std::thread::Builder::new()
        .name("fjord-history".into())
        .spawn(move || {
            let start = Instant::now();
            for n in 1u32.. {
                // Absolute deadlines: the samples stay a second apart.
                let at = start + Duration::from_secs(1) * n;
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                let Some(server) = server.upgrade() else {
                    return;
                };
                // Published by the engine threads: reading them wakes none.
                let t = server.engine.totals();
                server.history.push(Sample {
                    unix_ms: super::snapshot::unix_ms(),
                    sessions: t.sessions as usize,
                    packets: t.packets,
                    bytes: t.bytes,
                    late: t.late,
                });
            }
        });
    if let Err(e) = started {
        tracing::warn!("no throughput history on the status page: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_ten_minutes() {
        let h = History::default();
        for i in 0..(KEPT as u64 + 5) {
            h.push(Sample {
                unix_ms: i,
                sessions: 0,
                packets: i,
                bytes: 0,
                late: 0,
            });
        }
        let s = h.samples();
        assert_eq!(
            (s.len(), s[0].unix_ms, s[KEPT - 1].unix_ms),
            (KEPT, 5, KEPT as u64 + 4)
        );
    }
}

//! A thread's running totals, published after every tick with relaxed
//! stores, so that the control plane's once-a-second sample (the status
//! page's history) reads them without waking the thread: a command costs
//! an engine wake-up and a reply for every sample.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::ThreadStats;

/// Sessions, packets, payload bytes and late packets of one engine thread
/// or of all of them, as of their last tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub sessions: u64,
    pub packets: u64,
    pub bytes: u64,
    pub late: u64,
}

impl std::ops::Add for Totals {
    type Output = Totals;

    fn add(self, o: Totals) -> Totals {
        Totals {
            sessions: self.sessions + o.sessions,
            packets: self.packets + o.packets,
            bytes: self.bytes + o.bytes,
            late: self.late + o.late,
        }
    }
}

/// Written by its engine thread only.
#[derive(Default)]
pub(crate) struct Published {
    sessions: AtomicU64,
    packets: AtomicU64,
    bytes: AtomicU64,
    late: AtomicU64,
}

impl Published {
    pub(crate) fn publish(&self, sessions: usize, stats: &ThreadStats) {
        self.sessions.store(sessions as u64, Relaxed);
        self.packets.store(stats.packets, Relaxed);
        self.bytes.store(stats.bytes, Relaxed);
        self.late.store(stats.late, Relaxed);
    }

    pub(crate) fn read(&self) -> Totals {
        Totals {
            sessions: self.sessions.load(Relaxed),
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            late: self.late.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_thread_publishes_is_read_and_summed() {
        let (a, b) = (Published::default(), Published::default());
        let stats = ThreadStats {
            packets: 10,
            bytes: 13_000,
            late: 1,
            ..Default::default()
        };
        a.publish(2, &stats);
        b.publish(
            1,
            &ThreadStats {
                packets: 5,
                ..stats
            },
        );
        let sum = a.read() + b.read();
        assert_eq!(
            sum,
            Totals {
                sessions: 3,
                packets: 15,
                bytes: 26_000,
                late: 2
            }
        );
    }
}

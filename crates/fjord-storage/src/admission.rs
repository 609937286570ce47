//! Storage admission (sans-IO ledger): a stream is admitted only when the
//! disk holding its title can read it besides every admitted stream — at
//! most [`DISK_SHARE`] of the disk's measured bandwidth, the rest left for
//! seeks and bulk I/O — and the read-ahead budget can hold its window.
//! Streams of one title never charge more memory than the title's files
//! hold: they share its pages. A title whose bytes come from an origin as
//! they are read (an edge's) also charges the origin's link, once per
//! title whatever its streams (each slice is fetched once for all of them),
//! to the same share.

use std::collections::HashMap;

/// The share of a disk's bandwidth real-time streams may be promised.
pub const DISK_SHARE: f64 = 0.8;

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the disk holding this title is at its capacity ({reserved_mbps} of {capacity_mbps} MB/s promised); try again later"
    )]
    Disk {
        reserved_mbps: u64,
        capacity_mbps: u64,
    },
    #[error(
        "the read-ahead memory budget is spent ({reserved_mb} of {budget_mb} MiB promised); try again later"
    )]
    Memory { reserved_mb: u64, budget_mb: u64 },
    #[error(
        "the link to the origin is at its capacity ({reserved_mbit} of {capacity_mbit} Mbit/s promised to titles being fetched); try again later"
    )]
    Origin {
        reserved_mbit: u64,
        capacity_mbit: u64,
    },
}

impl Refusal {
    /// Which limit refused: `disk`, `memory` or `origin`.
    pub fn limit(&self) -> &'static str {
        match self {
            Refusal::Disk { .. } => "disk",
            Refusal::Memory { .. } => "memory",
            Refusal::Origin { .. } => "origin",
        }
    }
}

/// What one stream was promised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub device: u64,
    /// The title's identity (any key unique while it is loaded).
    pub title: usize,
    pub bytes_per_s: u64,
    pub memory: u64,
    /// Its title's bytes come from the origin.
    pub origin: bool,
}

#[derive(Debug, Default)]
pub struct Ledger {
    budget: u64,
    /// Bytes per second each disk can read; disks not listed: no limit.
    capacity: HashMap<u64, u64>,
    disk: HashMap<u64, u64>,
    /// Bytes per second the origin's link carries; `None`: no limit.
    origin_capacity: Option<u64>,
    /// Per origin title: its streams, and the rate its first was charged.
    origin_titles: HashMap<usize, (u64, u64)>,
    origin: u64,
    /// Per title: memory its streams asked for, and what its files hold.
    titles: HashMap<usize, (u64, u64)>,
    memory: u64,
    streams: u64,
}

impl Ledger {
    pub fn new(budget: u64, capacity: HashMap<u64, u64>) -> Self {
        Self {
            budget,
            capacity,
            ..Default::default()
        }
    }

    /// The ledger with the origin's link carrying `bytes_per_s`.
    pub fn with_origin(mut self, bytes_per_s: Option<u64>) -> Self {
        self.origin_capacity = bytes_per_s;
        self
    }

    /// Whether `c` would take the origin past its share (a title already
    /// fetched for another stream adds nothing).
    fn origin_refuses(&self, c: &Charge) -> Option<Refusal> {
        let cap = self.origin_capacity?;
        let adds = c.origin && !self.origin_titles.contains_key(&c.title);
        let over = (self.origin + c.bytes_per_s) as f64 > cap as f64 * DISK_SHARE;
        (adds && over).then_some(Refusal::Origin {
            reserved_mbit: self.origin * 8 / 1_000_000,
            capacity_mbit: cap * 8 / 1_000_000,
        })
    }

    /// What the title's streams take of the budget: what they asked for,
    /// at most the title's size.
    fn title_memory(&self, title: usize) -> u64 {
        self.titles
            .get(&title)
            .map_or(0, |&(asked, cap)| asked.min(cap))
    }

    /// Promises `c` (a title of `title_bytes`), or says why not.
    pub fn reserve(&mut self, c: Charge, title_bytes: u64) -> Result<(), Refusal> {
        let reserved = self.disk.get(&c.device).copied().unwrap_or(0);
        if let Some(&cap) = self.capacity.get(&c.device)
            && (reserved + c.bytes_per_s) as f64 > cap as f64 * DISK_SHARE
        {
            return Err(Refusal::Disk {
                reserved_mbps: reserved / 1_000_000,
                capacity_mbps: cap / 1_000_000,
            });
        }
        if let Some(refusal) = self.origin_refuses(&c) {
            return Err(refusal);
        }
        let before = self.title_memory(c.title);
        let (asked, _) = self.titles.get(&c.title).copied().unwrap_or((0, 0));
        let after = (asked + c.memory).min(title_bytes);
        if self.memory - before + after > self.budget {
            return Err(Refusal::Memory {
                reserved_mb: self.memory >> 20,
                budget_mb: self.budget >> 20,
            });
        }
        if c.origin {
            let (streams, rate) = self.origin_titles.entry(c.title).or_default();
            if *streams == 0 {
                *rate = c.bytes_per_s;
                self.origin += c.bytes_per_s;
            }
            *streams += 1;
        }
        self.titles.insert(c.title, (asked + c.memory, title_bytes));
        self.memory = self.memory - before + after;
        *self.disk.entry(c.device).or_default() += c.bytes_per_s;
        self.streams += 1;
        Ok(())
    }

    pub fn release(&mut self, c: Charge) {
        self.streams = self.streams.saturating_sub(1);
        if c.origin
            && let Some((streams, rate)) = self.origin_titles.get_mut(&c.title)
        {
            *streams = streams.saturating_sub(1);
            if *streams == 0 {
                self.origin = self.origin.saturating_sub(*rate);
                self.origin_titles.remove(&c.title);
            }
        }
        if let Some(d) = self.disk.get_mut(&c.device) {
            *d = d.saturating_sub(c.bytes_per_s);
        }
        let before = self.title_memory(c.title);
        if let Some(t) = self.titles.get_mut(&c.title) {
            t.0 = t.0.saturating_sub(c.memory);
            if t.0 == 0 {
                self.titles.remove(&c.title);
            }
        }
        self.memory = self.memory.saturating_sub(before) + self.title_memory(c.title);
    }

    /// Bytes per second bulk work may read from disk `device` besides the
    /// streams promised on it: what the promise leaves of the disk's share,
    /// at least a tenth of the disk; `None` for a disk of unknown speed.
    pub fn bulk_rate(&self, device: u64) -> Option<u64> {
        let cap = *self.capacity.get(&device)?;
        let promised = self.disk.get(&device).copied().unwrap_or(0);
        let left = (cap as f64 * DISK_SHARE) as u64;
        Some(left.saturating_sub(promised).max(self.bulk_floor(device)?))
    }

    /// What bulk keeps whatever the streams take: a tenth of the disk.
    pub fn bulk_floor(&self, device: u64) -> Option<u64> {
        Some(*self.capacity.get(&device)? / 10)
    }

    pub fn memory(&self) -> u64 {
        self.memory
    }

    /// Streams promised now, on every disk.
    pub fn streams(&self) -> u64 {
        self.streams
    }

    /// Bytes per second promised to streams, on every disk.
    pub fn promised(&self) -> u64 {
        self.disk.values().sum()
    }

    pub fn promised_on(&self, device: u64) -> u64 {
        self.disk.get(&device).copied().unwrap_or(0)
    }

    pub fn capacity(&self, device: u64) -> Option<u64> {
        self.capacity.get(&device).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn charge(title: usize, mbps: u64, memory: u64) -> Charge {
        Charge {
            device: 7,
            title,
            bytes_per_s: mbps * MB,
            memory,
            origin: false,
        }
    }

    #[test]
    fn origin_titles_take_the_link_once_each_up_to_its_share() {
        let mut l = Ledger::new(u64::MAX, HashMap::new()).with_origin(Some(10 * MB));
        let fetched = |title| Charge {
            origin: true,
            ..charge(title, 2, 0)
        };
        for t in 0..4 {
            l.reserve(fetched(t), 1 << 30).unwrap();
        }
        // A hundred more streams of those titles: their slices come once.
        for _ in 0..100 {
            l.reserve(fetched(1), 1 << 30).unwrap();
        }
        assert_eq!(
            l.reserve(fetched(4), 1 << 30),
            Err(Refusal::Origin {
                reserved_mbit: 64,
                capacity_mbit: 80
            })
        );
        // Local titles do not use the link.
        l.reserve(charge(9, 50, 0), 1 << 30).unwrap();
        // The title's last stream gives its share back, not the first.
        l.release(fetched(0));
        l.reserve(fetched(4), 1 << 30).unwrap();
        l.release(fetched(1));
        assert!(l.reserve(fetched(5), 1 << 30).is_err());
        for _ in 0..100 {
            l.release(fetched(1));
        }
        l.reserve(fetched(5), 1 << 30).unwrap();
    }

    #[test]
    fn a_disk_takes_streams_up_to_its_share_and_again_after_release() {
        let mut l = Ledger::new(u64::MAX, HashMap::from([(7, 100 * MB)]));
        for t in 0..8 {
            l.reserve(charge(t, 10, 0), 1 << 30).unwrap();
        }
        assert!(matches!(
            l.reserve(charge(9, 10, 0), 1 << 30),
            Err(Refusal::Disk {
                reserved_mbps: 80,
                capacity_mbps: 100
            })
        ));
        l.release(charge(0, 10, 0));
        l.reserve(charge(9, 10, 0), 1 << 30).unwrap();
        // Another disk is not limited by this one.
        let other = Charge {
            device: 8,
            ..charge(10, 500, 0)
        };
        l.reserve(other, 1 << 30).unwrap();
    }

    #[test]
    fn bulk_gets_what_the_streams_leave_and_never_nothing() {
        let mut l = Ledger::new(u64::MAX, HashMap::from([(7, 100 * MB)]));
        assert_eq!(l.bulk_rate(7), Some(80 * MB));
        for t in 0..3 {
            l.reserve(charge(t, 20, 0), 1 << 30).unwrap();
        }
        assert_eq!(l.bulk_rate(7), Some(20 * MB));
        l.reserve(charge(3, 20, 0), 1 << 30).unwrap();
        assert_eq!(l.bulk_rate(7), Some(10 * MB), "a tenth at least");
        assert_eq!(l.bulk_rate(8), None, "a disk of unknown speed");
        assert_eq!(l.bulk_floor(7), Some(10 * MB));
    }

    #[test]
    fn streams_of_one_title_share_its_memory_and_others_meet_the_budget() {
        let mut l = Ledger::new(100, HashMap::new());
        // A 30-byte title: a thousand streams of it cost 30.
        for _ in 0..1000 {
            l.reserve(charge(1, 0, 10), 30).unwrap();
        }
        assert_eq!(l.memory(), 30);
        l.reserve(charge(2, 0, 60), 1000).unwrap();
        assert_eq!(l.memory(), 90);
        assert!(matches!(
            l.reserve(charge(3, 0, 20), 1000),
            Err(Refusal::Memory { .. })
        ));
        for _ in 0..998 {
            l.release(charge(1, 0, 10));
        }
        assert_eq!(l.memory(), 80, "two streams of title 1 ask 20 < 30");
        l.reserve(charge(3, 0, 20), 1000).unwrap();
        l.release(charge(1, 0, 10));
        l.release(charge(1, 0, 10));
        l.release(charge(2, 0, 60));
        l.release(charge(3, 0, 20));
        assert_eq!(l.memory(), 0);
    }
}

//! How far ahead of a session to keep its packets (sans-IO), from its
//! disk's behaviour rather than a fixed time (MARS sized prefetch from the
//! disk's service time and the stream's rate).
//!
//! A session is refilled when its resident lead falls to `low`, which
//! must cover the next read's latency: the worst latency its disk showed
//! recently (queue and service, [`crate::disk_model`]) times a margin,
//! within a floor and a ceiling, and within what the memory budget can
//! give every promised stream. A refill then reads one read's worth
//! (`read_bytes`, about the disk's bandwidth-seek knee) past it, so an idle
//! fast disk keeps sessions a little ahead and a slow or busy one more.

use std::time::Duration;

/// The lead's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadConfig {
    /// The least `low` (hypervisor pauses, the engine's burst and a
    /// read's own time when nothing was measured yet).
    pub floor: Duration,
    /// The most a session is kept ahead (`low` plus a read).
    pub ceiling: Duration,
    /// `low` is this many times the disk's worst recent latency, in
    /// hundredths.
    pub margin_pct: u32,
    /// Bytes a refill reads (past `low`).
    pub read_bytes: u64,
}

impl LeadConfig {
    /// A lead fixed at `readahead`: refills at half of it, up to it.
    pub fn fixed(readahead: Duration) -> Self {
        Self {
            floor: readahead / 2,
            ceiling: readahead,
            margin_pct: 0,
            read_bytes: u64::MAX,
        }
    }
}

impl Default for LeadConfig {
    /// Refills at twice the disk's worst latency of the last 10 s, at least
    /// 500 ms ahead (a hypervisor's pause of 100-200 ms and the engine's
    /// 80 ms burst, with room), at most 4 s (8 s with the read): a disk
    /// slower than that is over its load. 1 MiB reads: a refill is one or
    /// two requests (its packets, now and then its table pages), so it
    /// reads twice a disk's knee or more; a 120 MB/s, 300 IOPS disk's is
    /// 400 KB (where a read's transfer time meets a seek's share): 512 KiB
    /// refills had 160 streams at that disk's IOPS limit, late.
    fn default() -> Self {
        Self {
            floor: Duration::from_millis(500),
            ceiling: Duration::from_secs(8),
            margin_pct: 200,
            read_bytes: 1 << 20,
        }
    }
}

/// A session's lead: refill when the resident lead falls to `low`, up to
/// `high`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lead {
    pub low: Duration,
    pub high: Duration,
}

/// The `low` of every session of a disk whose worst recent latency is
/// `worst`, with `memory_cap` the most `low` the memory budget gives the
/// promised streams.
pub fn low(cfg: &LeadConfig, worst: Option<Duration>, memory_cap: Duration) -> Duration {
    let wanted = (worst.unwrap_or_default())
        .checked_mul(cfg.margin_pct)
        .map_or(Duration::MAX, |w| w / 100);
    let top = (cfg.ceiling / 2).max(cfg.floor);
    wanted.min(memory_cap).clamp(cfg.floor, top)
}

/// The lead of a session that moves through `bytes_per_s` of its files,
/// its disk's `low` given.
pub fn lead(cfg: &LeadConfig, low: Duration, bytes_per_s: u64) -> Lead {
    let read = secs(cfg.read_bytes as f64 / bytes_per_s.max(1) as f64);
    let high = low
        .saturating_add(read)
        .min(cfg.ceiling.max(low + MIN_READ));
    Lead {
        low,
        high: high.max(low + MIN_READ),
    }
}

/// The shortest read: a refill covers at least this much play.
const MIN_READ: Duration = Duration::from_millis(100);

/// The `low` the memory budget can give each of `streams` streams moving
/// through `bytes_per_s` in all, each holding besides its `low` a read and
/// partial chunks at its ends (`per_stream` bytes).
pub fn memory_cap(budget: u64, streams: u64, bytes_per_s: u64, per_stream: u64) -> Duration {
    let left = budget.saturating_sub(streams.saturating_mul(per_stream));
    match bytes_per_s {
        0 => Duration::MAX,
        r => secs(left as f64 / r as f64),
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CFG: LeadConfig = LeadConfig {
        floor: Duration::from_millis(500),
        ceiling: Duration::from_secs(8),
        margin_pct: 200,
        read_bytes: 512 << 10,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slow_disk_gets_more_lead_and_an_idle_one_the_floor() {
        assert_eq!(low(&CFG, None, Duration::MAX), ms(500));
        assert_eq!(low(&CFG, Some(ms(40)), Duration::MAX), ms(500));
        assert_eq!(low(&CFG, Some(ms(900)), Duration::MAX), ms(1800));
        assert_eq!(low(&CFG, Some(ms(9000)), Duration::MAX), ms(4000));
        // The budget caps it, never below the floor.
        assert_eq!(low(&CFG, Some(ms(900)), ms(1000)), ms(1000));
        assert_eq!(low(&CFG, Some(ms(900)), ms(100)), ms(500));
    }

    #[test]
    fn a_read_s_worth_past_low() {
        // 4.5 Mbit/s: 562,500 B/s; 512 KiB is 0.932 s of it.
        let l = lead(&CFG, ms(500), 562_500);
        assert_eq!(l.low, ms(500));
        assert_eq!(l.high.as_millis(), 1432);
        // A slow stream: the ceiling.
        assert_eq!(lead(&CFG, ms(500), 10_000).high, ms(8000));
        // A fast one: at least a little.
        assert_eq!(lead(&CFG, ms(500), u64::MAX).high, ms(600));
    }

    #[test]
    fn fixed_is_the_old_half_to_whole() {
        let f = LeadConfig::fixed(Duration::from_secs(4));
        let l = lead(&f, low(&f, Some(ms(3000)), Duration::MAX), 562_500);
        assert_eq!((l.low, l.high), (ms(2000), ms(4000)));
    }

    #[test]
    fn the_memory_cap_shares_what_is_left() {
        assert_eq!(memory_cap(100, 2, 1000, 30), Duration::from_millis(40));
        assert_eq!(memory_cap(100, 5, 1000, 30), Duration::ZERO);
        assert_eq!(memory_cap(100, 0, 0, 30), Duration::MAX);
    }

    proptest! {
        #[test]
        fn low_and_high_stay_in_bounds(
            worst in prop::option::of(0u64..100_000),
            cap in 0u64..100_000,
            rate in 0u64..100_000_000,
        ) {
            let l = low(&CFG, worst.map(ms), ms(cap));
            prop_assert!(l >= CFG.floor && l <= CFG.ceiling / 2);
            let ld = lead(&CFG, l, rate);
            prop_assert!(ld.high > ld.low && ld.high <= CFG.ceiling);
            // More latency never gives less lead.
            if let Some(w) = worst {
                prop_assert!(low(&CFG, Some(ms(w + 1)), ms(cap)) >= l);
            }
        }
    }
}

//! Where a session is on its title's timeline (pure): packets due in a
//! time, the first packet due at a time, bytes per packet and per second,
//! and a session's rate; what the storage workers plan refills with.

use std::{ops::Range, time::Duration};

use crate::{cursor::REAL_TIME, source::Source};

/// About how many packets of track `t` are due in `d`, at the title's
/// average rate (known from its head: no table read).
pub(crate) fn packets_in(source: &dyn Source, t: usize, d: Duration) -> u32 {
    let n =
        u128::from(source.packet_count(t)) * d.as_nanos() / u128::from(source.duration_ns().max(1));
    n.min(u128::from(u32::MAX)) as u32
}

/// The first packet of track `t` (from `from`) due at or after `ns`, or
/// `count`.
pub(crate) fn packet_at_or_after(
    source: &dyn Source,
    t: usize,
    from: u32,
    ns: u64,
    count: u32,
) -> u32 {
    first_not_before(from, count, |i| {
        source.send_time_ns(t, i).is_some_and(|s| s < ns)
    })
}

/// The first `i` in `from..count` for which `before(i)` is false (`count`
/// if none), `before` being true up to some point and false after. Gallops
/// from `from` before it bisects, so it reads records near the window (the
/// pages a refill pins anyway) rather than all over the index: a record
/// not resident is read from the disk, under the disk's lock.
pub(crate) fn first_not_before(from: u32, count: u32, before: impl Fn(u32) -> bool) -> u32 {
    let (mut lo, mut step) = (from, 1u32);
    let mut hi = loop {
        let probe = lo.saturating_add(step);
        if probe >= count || !before(probe) {
            break probe.min(count);
        }
        lo = probe + 1;
        step = step.saturating_mul(2);
    };
    hi = hi.max(lo);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Bytes of `source`'s files per second of its timeline (every file: more
/// than a session reads, until its first refill says how much it does).
pub(crate) fn title_bytes_per_s(source: &dyn Source) -> u64 {
    let bytes: u128 = source.files().iter().map(|f| f.len as u128).sum();
    let ns = u128::from(source.duration_ns().max(1));
    u64::try_from(bytes * 1_000_000_000 / ns).unwrap_or(u64::MAX)
}

/// What a refill of `packets` of `bytes` says a session reads per second
/// of title time (`old` when it covered too little time to tell).
pub(crate) fn learned_rate(
    source: &dyn Source,
    track: usize,
    packets: Range<u32>,
    bytes: u64,
    old: u64,
) -> u64 {
    let t = |i: u32| source.send_time_ns(track, i);
    let span = match (t(packets.start), t(packets.end.saturating_sub(1))) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    if span < 100_000_000 {
        return old;
    }
    u64::try_from(u128::from(bytes) * 1_000_000_000 / u128::from(span)).unwrap_or(u64::MAX)
}

/// Packets of track `t` that hold about a chunk of a session's files, the
/// session reading `bytes_per_s` of them per second of title time.
pub(crate) fn piece_packets(source: &dyn Source, t: usize, bytes_per_s: u64) -> u32 {
    let per_s = u128::from(source.packet_count(t)) * 1_000_000_000
        / u128::from(source.duration_ns().max(1));
    let n = per_s * crate::pin::CHUNK as u128 / u128::from(bytes_per_s.max(1));
    n.clamp(1, u128::from(u32::MAX)) as u32
}

/// The packet the tables pinned with a refill ending at `end` reach, for
/// a session moving at `rate` with a lead up to `high`: the next refill
/// reads to about the lead past it and its search probes up to twice as
/// far; three times covers a title's average rate with room for its peaks.
pub(crate) fn tables_reach(
    source: &dyn Source,
    t: usize,
    rate: Rate,
    high: Duration,
    end: u32,
) -> u32 {
    let count = source.packet_count(t);
    let ahead = Duration::from_nanos(rate.title(3 * high));
    end.saturating_add(packets_in(source, t, ahead)).min(count)
}

/// About how many bytes of its files one packet of `source` pins.
pub(crate) fn bytes_per_packet(source: &dyn Source) -> u64 {
    let bytes: u64 = source.files().iter().map(|f| f.len as u64).sum();
    let packets: u64 = (0..source.track_count())
        .map(|t| u64::from(source.packet_count(t)))
        .sum();
    bytes / packets.max(1)
}

/// How fast a session moves through its title (see [`crate::REAL_TIME`]).
#[derive(Clone, Copy)]
pub(crate) struct Rate(pub u32);

impl Rate {
    /// Wall time the session takes over `ns` of title time.
    pub fn wall(self, ns: u64) -> Duration {
        let wall = u128::from(ns) * u128::from(REAL_TIME) / u128::from(self.0.max(1));
        Duration::from_nanos(u64::try_from(wall).unwrap_or(u64::MAX))
    }

    /// Title time the session covers in `wall`, ns.
    pub fn title(self, wall: Duration) -> u64 {
        let ns = wall.as_nanos() * u128::from(self.0) / u128::from(REAL_TIME);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::first_not_before;

    /// The galloping search finds what a linear scan finds, and reads no
    /// record further than twice the distance to the answer.
    #[test]
    fn galloping_search_agrees_with_a_scan_and_stays_near() {
        for count in [0u32, 1, 2, 7, 100, 1000] {
            for cut in 0..=count {
                for from in [0, 1, count / 3, count] {
                    let far = std::cell::Cell::new(0);
                    let before = |i: u32| {
                        far.set(far.get().max(i));
                        i < cut
                    };
                    let want = (from..count).find(|&i| i >= cut).unwrap_or(count.max(from));
                    assert_eq!(
                        first_not_before(from, count, before),
                        want,
                        "{count} {cut} {from}"
                    );
                    let distance = want.saturating_sub(from);
                    assert!(
                        far.get() <= from + 2 * distance + 1,
                        "{count} {cut} {from}: read {}",
                        far.get()
                    );
                }
            }
        }
    }
}

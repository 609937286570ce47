//! Finding a packet by its send time in a track's records with as few
//! records read as possible: each record read may be a page from the disk
//! (a seek into a cold title), so a bisection over 100,000 audio packets —
//! 17 reads, most of them different pages — costs more than the rest of
//! a PLAY. Send times grow almost linearly with the packet number (a
//! track's packets follow its bit rate), so interpolation lands within a
//! page of the answer in one or two reads; a step that does not halve the
//! range is followed by a bisection, which bounds the worst case at twice
//! a bisection's reads.

/// The first `i < count` with `time(i) >= target`, or `count` if none,
/// for send times `time(i)` that never decrease; `end` is about where they
/// end (the title's duration; it only guides the first read). A record
/// that cannot be read (`None`) counts as later than every target.
pub fn first_at_or_after(
    count: usize,
    target: u64,
    end: u64,
    mut time: impl FnMut(usize) -> Option<u64>,
) -> usize {
    // Invariant: every i < lo is before the target, every i >= hi is not;
    // lo_t and hi_t about bound the times in between.
    let (mut lo, mut hi) = (0, count);
    let (mut lo_t, mut hi_t) = (0, Some(end));
    let mut bisect = false;
    while lo < hi {
        let mid = match (bisect, hi_t) {
            (false, Some(hi_t)) if hi_t > lo_t => {
                let span = (hi - lo) as u128;
                let frac = u128::from(target.saturating_sub(lo_t).min(hi_t - lo_t));
                lo + (span * frac / u128::from(hi_t - lo_t)) as usize
            }
            _ => lo + (hi - lo) / 2,
        }
        .min(hi - 1);
        let before = hi - lo;
        match time(mid) {
            Some(t) if t < target => (lo, lo_t) = (mid + 1, t),
            t => (hi, hi_t) = (mid, t),
        }
        bisect = !bisect && (hi - lo) * 2 > before;
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::Cell;

    fn search(times: &[u64], target: u64) -> (usize, usize) {
        let reads = Cell::new(0);
        let end = times.last().copied().unwrap_or_default();
        let found = first_at_or_after(times.len(), target, end, |i| {
            reads.set(reads.get() + 1);
            times.get(i).copied()
        });
        (found, reads.get())
    }

    proptest! {
        #[test]
        fn finds_what_a_scan_finds(
            mut times in proptest::collection::vec(0u64..1_000_000, 0..300),
            target in 0u64..1_100_000,
        ) {
            times.sort_unstable();
            let (found, reads) = search(&times, target);
            prop_assert_eq!(found, times.partition_point(|&t| t < target));
            let bisection = usize::BITS - times.len().leading_zeros();
            prop_assert!(reads as u32 <= 2 * bisection + 1, "{} reads", reads);
        }
    }

    #[test]
    fn a_steady_track_takes_a_few_reads_where_bisection_takes_seventeen() {
        // 30 minutes of AAC frames (21.33 ms) with a little mux jitter.
        let times: Vec<u64> = (0..84_375u64)
            .map(|i| i * 21_333_333 + (i * 7919 % 13) * 100_000)
            .collect();
        for target in [0, 1_000_000_000, 777_777_777_777, 1_799_000_000_000] {
            let (found, reads) = search(&times, target);
            assert_eq!(found, times.partition_point(|&t| t < target));
            assert!(reads <= 4, "{target}: {reads} reads");
        }
    }
}

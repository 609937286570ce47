//! Slices: the unit the edge fetches from the origin, stores and checks.
//!
//! 2 MiB, aligned to the object's start. Why 2: a slice is one ranged GET,
//! so it is small enough that the first one lands quickly (at 1 Gbit/s it
//! transfers in ~17 ms, so two round trips of 20 ms and the transfer stay
//! well inside the 150 ms to a first packet the issue asks), and large
//! enough that request overhead is small (a 4 Mbit/s title asks one GET
//! per 4 s of play, its default read-ahead, 4000 ms). 1 MiB doubles the
//! requests and per-slice bookkeeping for ~8 ms less latency; 4 MiB
//! doubles the first slice's transfer. It is 8 of the storage layer's
//! 256 KiB chunks, so a chunk never straddles two slices.

use std::ops::Range;

/// Bytes in a slice (the last of an object may be shorter).
pub const SLICE_BYTES: u64 = 2 << 20;

/// The slices an object of `size` bytes has.
pub fn count(size: u64) -> u64 {
    size.div_ceil(SLICE_BYTES)
}

/// The bytes slice `i` of an object of `size` bytes covers; empty past its
/// end.
pub fn bounds(i: u64, size: u64) -> Range<u64> {
    let start = i.saturating_mul(SLICE_BYTES).min(size);
    start..start.saturating_add(SLICE_BYTES).min(size)
}

/// The slices that hold `range` of an object of `size` bytes.
pub fn covering(range: &Range<u64>, size: u64) -> Range<u64> {
    let end = range.end.min(size);
    if range.start >= end {
        return 0..0;
    }
    range.start / SLICE_BYTES..end.div_ceil(SLICE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn edges() {
        assert_eq!(count(0), 0);
        assert_eq!(count(1), 1);
        assert_eq!(count(SLICE_BYTES), 1);
        assert_eq!(count(SLICE_BYTES + 1), 2);
        assert_eq!(bounds(1, SLICE_BYTES + 5), SLICE_BYTES..SLICE_BYTES + 5);
        assert_eq!(bounds(2, SLICE_BYTES + 5), SLICE_BYTES + 5..SLICE_BYTES + 5);
        assert_eq!(bounds(u64::MAX, 10), 10..10);
        assert_eq!(covering(&(5..5), 100), 0..0);
        assert_eq!(
            covering(&(SLICE_BYTES - 1..SLICE_BYTES + 1), 3 * SLICE_BYTES),
            0..2
        );
    }

    proptest! {
        #[test]
        fn covering_slices_hold_the_range_and_no_more(
            size in 0u64..10 * SLICE_BYTES, a in 0u64..11 * SLICE_BYTES, len in 0u64..5 * SLICE_BYTES
        ) {
            let range = a..a.saturating_add(len);
            let s = covering(&range, size);
            let end = range.end.min(size);
            if range.start < end {
                prop_assert!(bounds(s.start, size).start <= range.start);
                prop_assert!(bounds(s.end - 1, size).end >= end);
                prop_assert!(bounds(s.start, size).end > range.start);
                prop_assert!(bounds(s.end - 1, size).start < end);
                prop_assert!(s.end <= count(size));
            } else {
                prop_assert!(s.is_empty());
            }
        }
    }
}

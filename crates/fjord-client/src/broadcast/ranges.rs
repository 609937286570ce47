//! Packet indices as ascending, disjoint ranges: merged, searched,
//! counted, their gaps, and shown to people.

use std::ops::Range;

/// Packet indices as ascending, disjoint, non-adjacent ranges.
pub(super) fn merge(mut ranges: Vec<Range<u32>>) -> Vec<Range<u32>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<u32>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

pub(super) fn contains(ranges: &[Range<u32>], i: u32) -> bool {
    let k = ranges.partition_point(|r| r.end <= i);
    ranges.get(k).is_some_and(|r| r.start <= i)
}

pub(super) fn count(ranges: &[Range<u32>]) -> u64 {
    ranges.iter().map(|r| u64::from(r.end - r.start)).sum()
}

/// The packets of `packets` (ascending) without `has`, as ranges.
pub(super) fn missing_in(
    packets: impl Iterator<Item = u32>,
    has: impl Fn(u32) -> bool,
) -> Vec<Range<u32>> {
    let mut out: Vec<Range<u32>> = Vec::new();
    for i in packets.filter(|&i| !has(i)) {
        match out.last_mut() {
            Some(r) if r.end == i => r.end += 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// `0-4, 9, 12-13 (and 5 more)`: packet ranges for people.
pub fn show_ranges(ranges: &[Range<u32>], most: usize) -> String {
    let mut shown: Vec<String> = ranges
        .iter()
        .take(most)
        .map(|r| match r.end - r.start {
            1 => r.start.to_string(),
            _ => format!("{}-{}", r.start, r.end - 1),
        })
        .collect();
    if ranges.len() > most {
        shown.push(format!("(and {} more ranges)", ranges.len() - most));
    }
    shown.join(", ")
}

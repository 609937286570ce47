//! An edge's origin and slice cache on `/metrics`: requests, bytes, time
//! and errors at the origin (bytes also by part of a title), bytes served from disk and from the origin,
//! evictions, and what the cache holds.

use std::sync::atomic::Ordering::Relaxed;

use fjord_edge::{Part, SliceCache};
use prometheus_client::registry::Registry;

use super::scrape::{Labels, counter, gauge, seconds};

pub(super) fn metrics(reg: &mut Registry, cache: &SliceCache) {
    let st = &cache.stats;
    let one = |v: u64| [(Labels::new(), v)];
    let counters = [
        (
            "fjord_origin_heads",
            "Objects opened at the origin (HEAD)",
            &st.origin_heads,
        ),
        (
            "fjord_origin_requests",
            "Slices fetched from the origin (ranged GET)",
            &st.origin_requests,
        ),
        (
            "fjord_origin_bytes",
            "Bytes fetched from the origin",
            &st.origin_bytes,
        ),
        (
            "fjord_origin_errors",
            "Origin requests that failed",
            &st.origin_errors,
        ),
        (
            "fjord_cache_hit_bytes",
            "Bytes of slices found on local disk",
            &st.hit_bytes,
        ),
        (
            "fjord_cache_miss_bytes",
            "Bytes of slices waited for from the origin",
            &st.miss_bytes,
        ),
        (
            "fjord_cache_joined",
            "Slice reads that joined a fetch in flight",
            &st.joined,
        ),
        ("fjord_cache_evictions", "Slices evicted", &st.evictions),
        (
            "fjord_cache_corrupt",
            "Cached slices that failed their checksum and were fetched again",
            &st.corrupt,
        ),
        (
            "fjord_cache_stale_opens",
            "Objects opened at their last known version, the origin not answering",
            &st.stale_opens,
        ),
    ];
    for (name, help, v) in counters {
        counter(reg, name, help, one(v.load(Relaxed)));
    }
    let by_part = Part::ALL.map(|p| {
        let v = st.origin_part_bytes[p as usize].load(Relaxed);
        (vec![("part", p.name().to_owned())], v)
    });
    let help = "Bytes fetched from the origin, by the part of a title: media, index, packets, frames, parity";
    counter(reg, "fjord_origin_part_bytes", help, by_part);
    let micros = st.origin_micros.load(Relaxed);
    let help = "Time spent in origin GETs (over fjord_origin_requests: their mean latency)";
    seconds(
        reg,
        "fjord_origin_seconds",
        help,
        [(Labels::new(), micros as f64 / 1e6)],
    );
    let used = cache.used() as i64;
    gauge(
        reg,
        "fjord_cache_bytes",
        "Bytes of slices the cache holds",
        [(Labels::new(), used)],
    );
}

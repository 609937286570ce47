//! The sessions of a run as a plan: which title each plays (Zipf
//! popularity, seeded), and the media slices they read in the order a
//! clock would have them read them; and the byte hit ratio eviction
//! policies reach replaying those reads with the cache's capacity.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;

use fjord_edge::policy::SegmentedLru;
use fjord_edge::slice::SLICE_BYTES;
use rand::{RngExt, SeedableRng, rngs::StdRng};

use super::EdgeConfig;
use crate::storage::library::{Library, MUX_RATE, sidecars};

/// One viewer: the title it plays from the start, when it starts and for
/// how long it receives.
pub struct Session {
    pub title: usize,
    pub start_s: f64,
    pub seconds: f64,
}

pub struct Plan {
    pub sessions: Vec<Session>,
    /// (title, slice, bytes) of the file sessions send from (the packet
    /// file, else the media) in the order they are first needed.
    pub reads: Vec<(u64, u64)>,
    /// Bytes of the indexes of the titles played: each fetched once.
    pub index_bytes: u64,
}

/// Seconds of read-ahead past a session's position (the storage layer's
/// default), which it reads as it plays.
const READ_AHEAD_S: f64 = 4.0;

pub fn plan(lib: &Library, cfg: &EdgeConfig) -> Plan {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let weights: Vec<f64> = (0..lib.titles.len())
        .map(|i| 1.0 / ((i + 1) as f64).powf(cfg.zipf))
        .collect();
    let total: f64 = weights.iter().sum();
    let cdf: Vec<f64> = weights
        .iter()
        .scan(0.0, |acc, w| {
            *acc += w / total;
            Some(*acc)
        })
        .collect();
    let n = cfg.sessions;
    let stagger = cfg.stagger.as_secs_f64();
    let sessions: Vec<Session> = (0..n)
        .map(|i| Session {
            title: cdf
                .partition_point(|&c| c < rng.random::<f64>())
                .min(cdf.len() - 1),
            start_s: i as f64 * stagger,
            seconds: cfg.seconds + (n - 1 - i) as f64 * stagger,
        })
        .collect();
    let rate = MUX_RATE as f64 / 8.0;
    let mut timed = Vec::new();
    let mut indexes = BTreeSet::new();
    for s in &sessions {
        let files = sidecars(&lib.titles[s.title].path);
        let size = fs::metadata(&files[2]).map_or(lib.titles[s.title].bytes, |m| m.len());
        indexes.insert(files[0].clone());
        let played = (rate * (s.seconds + READ_AHEAD_S)).min(size as f64) as u64;
        for k in 0..played.div_ceil(SLICE_BYTES) {
            let len = SLICE_BYTES.min(size - k * SLICE_BYTES);
            let at = s.start_s + (k * SLICE_BYTES) as f64 / rate - READ_AHEAD_S;
            timed.push((at, ((s.title as u64) << 32) | k, len));
        }
    }
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    Plan {
        sessions,
        reads: timed.into_iter().map(|(_, key, len)| (key, len)).collect(),
        index_bytes: indexes
            .iter()
            .filter_map(|p| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum(),
    }
}

impl Plan {
    /// Bytes of the distinct slices read.
    pub fn distinct_bytes(&self) -> u64 {
        let mut seen = HashSet::new();
        (self.reads.iter())
            .filter(|(k, _)| seen.insert(*k))
            .map(|(_, len)| len)
            .sum()
    }
}

/// What a policy did on the plan's reads.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Replayed {
    /// Bytes read that were held, over bytes read.
    pub hit_ratio: f64,
    /// Bytes it had to fetch (its misses): Belady's is the floor any
    /// cache of that size reaches on the plan.
    pub fetched: u64,
}

pub struct Ratios {
    pub s4lru: Replayed,
    pub lru: Replayed,
    pub belady: Replayed,
}

/// What S4LRU, LRU and Belady's optimum do on the plan's reads.
pub fn hit_ratios(plan: &Plan, capacity: u64) -> Ratios {
    Ratios {
        s4lru: replay(&plan.reads, SegmentedLru::s4lru(capacity)),
        lru: replay(&plan.reads, SegmentedLru::lru(capacity)),
        belady: belady(&plan.reads, capacity),
    }
}

fn replayed(hit: u64, all: u64) -> Replayed {
    Replayed {
        hit_ratio: hit as f64 / all.max(1) as f64,
        fetched: all - hit,
    }
}

fn replay(reads: &[(u64, u64)], mut policy: SegmentedLru<u64>) -> Replayed {
    let (mut hit, mut all) = (0, 0);
    for &(key, len) in reads {
        all += len;
        if policy.hit(&key) {
            hit += len;
        } else {
            policy.insert(key, len);
        }
    }
    replayed(hit, all)
}

/// Evicts what is next read farthest ahead (or never): the offline
/// optimum for slices of one size (titles' last slices are smaller; close
/// enough for a bound).
fn belady(reads: &[(u64, u64)], capacity: u64) -> Replayed {
    let mut next = vec![usize::MAX; reads.len()];
    let mut last: HashMap<u64, usize> = HashMap::new();
    for (i, (key, _)) in reads.iter().enumerate().rev() {
        next[i] = last.insert(*key, i).unwrap_or(usize::MAX);
    }
    let mut held: HashMap<u64, (usize, u64)> = HashMap::new();
    let mut by_next: BTreeSet<(usize, u64)> = BTreeSet::new();
    let (mut used, mut hit, mut all) = (0u64, 0u64, 0u64);
    for (i, &(key, len)) in reads.iter().enumerate() {
        all += len;
        if let Some((n, _)) = held.remove(&key) {
            hit += len;
            by_next.remove(&(n, key));
            used -= len;
        }
        held.insert(key, (next[i], len));
        by_next.insert((next[i], key));
        used += len;
        while used > capacity {
            let Some((n, k)) = by_next.pop_last() else {
                break;
            };
            let (_, l) = held.remove(&k).unwrap_or((n, 0));
            used -= l;
        }
    }
    replayed(hit, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a cyclic scan larger than the cache LRU hits nothing, Belady
    /// keeps what it can; no policy beats Belady.
    #[test]
    fn belady_bounds_the_online_policies() {
        let reads: Vec<(u64, u64)> = (0..40).map(|i| (i % 4, 10)).collect();
        let plan = Plan {
            sessions: Vec::new(),
            reads,
            index_bytes: 0,
        };
        let r = hit_ratios(&plan, 30);
        assert_eq!(r.lru.hit_ratio, 0.0);
        assert_eq!(r.lru.fetched, 400);
        assert!(r.belady.hit_ratio > 0.5, "{:?}", r.belady);
        assert!(r.s4lru.hit_ratio <= r.belady.hit_ratio && r.lru.hit_ratio <= r.belady.hit_ratio);
        assert!(r.belady.fetched >= plan.distinct_bytes());
        assert_eq!(plan.distinct_bytes(), 40);
    }
}

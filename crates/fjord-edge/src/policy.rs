//! Which slices the cache keeps: segmented LRU by bytes, pure code.
//!
//! S4LRU (Huang et al., "An Analysis of Facebook Photo Caching", SOSP
//! 2013): four LRU queues. A new slice enters the lowest; each hit moves
//! it to the head of the next one up (the top stays the top); a queue
//! over its share demotes its tail to the head of the one below, and what
//! falls out of the lowest is evicted. A slice read once (a scan, a title
//! watched once) never displaces one read again and again, which plain
//! LRU lets it do: on a skewed (Zipf) workload it keeps more of the bytes
//! that are asked for (`s4lru_beats_lru_on_zipf_below_beladys_optimum`).
//!
//! Variation: the upper queues hold a quarter of the capacity each, the
//! lowest whatever they leave, so a cache that has seen no hits yet still
//! fills. One segment is plain LRU, the baseline it is measured against.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Segmented LRU over keys `K` of given sizes in bytes.
#[derive(Debug)]
pub struct SegmentedLru<K> {
    capacity: u64,
    /// Bytes in each queue, lowest first.
    used: Vec<u64>,
    /// Each queue's keys by the stamp of their last move, oldest first.
    queues: Vec<BTreeMap<u64, K>>,
    entries: HashMap<K, Entry>,
    clock: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    queue: usize,
    stamp: u64,
    size: u64,
}

impl<K: Hash + Eq + Clone> SegmentedLru<K> {
    /// S4LRU: four queues.
    pub fn s4lru(capacity: u64) -> Self {
        Self::with_queues(capacity, 4)
    }

    /// Plain LRU: one queue.
    pub fn lru(capacity: u64) -> Self {
        Self::with_queues(capacity, 1)
    }

    pub fn with_queues(capacity: u64, queues: usize) -> Self {
        let queues = queues.max(1);
        SegmentedLru {
            capacity,
            used: vec![0; queues],
            queues: (0..queues).map(|_| BTreeMap::new()).collect(),
            entries: HashMap::new(),
            clock: 0,
        }
    }

    /// Bytes held.
    pub fn used(&self) -> u64 {
        self.used.iter().sum()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// A read of `key`: false if it is not held. A held key moves up one
    /// queue; what that pushes over a queue's share moves down. Nothing is
    /// evicted by a hit.
    pub fn hit(&mut self, key: &K) -> bool {
        let Some(e) = self.entries.get(key).copied() else {
            return false;
        };
        let up = (e.queue + 1).min(self.queues.len() - 1);
        self.unlink(key, e);
        self.link(key.clone(), up, e.size);
        self.demote_from(up);
        true
    }

    /// `key` stored (after a miss), `size` bytes: it enters the lowest
    /// queue. Returns the keys evicted to keep within the capacity, oldest
    /// first; `key` itself among them if it is larger than the whole cache.
    pub fn insert(&mut self, key: K, size: u64) -> Vec<K> {
        if let Some(e) = self.entries.get(&key).copied() {
            self.unlink(&key, e);
        }
        if size > self.capacity {
            return vec![key];
        }
        self.link(key, 0, size);
        let mut evicted = Vec::new();
        while self.used() > self.capacity {
            match self.oldest_lowest() {
                Some(k) => {
                    self.remove(&k);
                    evicted.push(k);
                }
                None => break,
            }
        }
        evicted
    }

    /// Forgets `key` (a slice dropped for another reason: corrupt, or of
    /// an object that changed).
    pub fn remove(&mut self, key: &K) -> bool {
        match self.entries.get(key).copied() {
            Some(e) => {
                self.unlink(key, e);
                true
            }
            None => false,
        }
    }

    /// A queue's share: the upper ones a quarter each (of the capacity
    /// split among them as S4LRU does), the lowest all that is left.
    fn share(&self, queue: usize) -> u64 {
        if queue == 0 {
            u64::MAX
        } else {
            self.capacity / self.queues.len() as u64
        }
    }

    /// Moves tails down from `queue` until every queue above the lowest is
    /// within its share.
    fn demote_from(&mut self, queue: usize) {
        for q in (1..=queue).rev() {
            while self.used[q] > self.share(q) {
                let Some((_, k)) = self.queues[q].first_key_value() else {
                    break;
                };
                let k = k.clone();
                let e = self.entries[&k];
                self.unlink(&k, e);
                self.link(k, q - 1, e.size);
            }
        }
    }

    fn oldest_lowest(&self) -> Option<K> {
        (self.queues.iter()).find_map(|q| q.first_key_value().map(|(_, k)| k.clone()))
    }

    fn link(&mut self, key: K, queue: usize, size: u64) {
        self.clock += 1;
        let stamp = self.clock;
        self.queues[queue].insert(stamp, key.clone());
        self.used[queue] += size;
        self.entries.insert(key, Entry { queue, stamp, size });
    }

    fn unlink(&mut self, key: &K, e: Entry) {
        self.queues[e.queue].remove(&e.stamp);
        self.used[e.queue] -= e.size;
        self.entries.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn lru_evicts_the_least_recent() {
        let mut c = SegmentedLru::lru(3);
        for k in 0..3 {
            assert!(c.insert(k, 1).is_empty());
        }
        assert!(c.hit(&0));
        assert_eq!(c.insert(3, 1), vec![1]);
        assert_eq!(c.insert(4, 2), vec![2, 0]);
        assert_eq!(c.used(), 3);
        assert!(!c.hit(&9));
    }

    #[test]
    fn s4lru_keeps_what_is_read_again_through_a_scan() {
        let mut c = SegmentedLru::s4lru(8);
        for k in 0..2 {
            c.insert(k, 1);
            c.hit(&k);
        }
        // A scan of 20 keys read once each: the two read twice stay.
        for k in 100..120 {
            c.insert(k, 1);
        }
        assert!(c.contains(&0) && c.contains(&1));
        assert_eq!(c.used(), 8);
        assert_eq!(c.len(), 8);
    }

    #[test]
    fn upper_queues_stay_within_their_share_and_fill_the_rest() {
        let mut c = SegmentedLru::s4lru(16);
        for k in 0..16 {
            c.insert(k, 1);
        }
        assert_eq!(c.used(), 16, "an unhit cache fills");
        for _ in 0..5 {
            for k in 0..16 {
                c.hit(&k);
            }
        }
        assert!(c.used[1..].iter().all(|&u| u <= 4), "{:?}", c.used);
        assert_eq!(c.used(), 16);
        assert!(c.remove(&3));
        assert_eq!(c.used(), 15);
        assert_eq!(c.insert(99, 17), vec![99], "larger than the cache");
    }

    proptest::proptest! {
        /// Whatever is asked in whatever order: the bytes held never pass
        /// the capacity, each upper queue stays within its share, and what
        /// the policy says it holds is exactly what was inserted and not
        /// evicted or removed.
        #[test]
        fn invariants_hold(
            queues in 1usize..5,
            capacity in 0u64..64,
            ops in proptest::collection::vec((0u8..3, 0u16..40, 1u64..12), 0..300),
        ) {
            let mut c = SegmentedLru::with_queues(capacity, queues);
            let mut held = std::collections::HashSet::new();
            for (op, key, size) in ops {
                match op {
                    0 => {
                        proptest::prop_assert_eq!(c.hit(&key), held.contains(&key));
                    }
                    1 => {
                        held.insert(key);
                        for gone in c.insert(key, size) {
                            proptest::prop_assert!(held.remove(&gone));
                        }
                    }
                    _ => {
                        proptest::prop_assert_eq!(c.remove(&key), held.remove(&key));
                    }
                }
                proptest::prop_assert!(c.used() <= capacity);
                proptest::prop_assert_eq!(c.len(), held.len());
                for q in 1..queues {
                    proptest::prop_assert!(c.used[q] <= c.share(q));
                }
            }
        }
    }

    /// Requests for `n` items of one size, Zipf(`s`) popularity.
    fn zipf_trace(n: usize, s: f64, len: usize, seed: u64) -> Vec<usize> {
        let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(s)).collect();
        let total: f64 = weights.iter().sum();
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for w in weights {
            acc += w / total;
            cdf.push(acc);
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..len)
            .map(|_| {
                let u: f64 = rng.random();
                cdf.partition_point(|&c| c < u).min(n - 1)
            })
            .collect()
    }

    fn hit_ratio(mut c: SegmentedLru<usize>, trace: &[usize]) -> f64 {
        let mut hits = 0;
        for k in trace {
            if c.hit(k) {
                hits += 1;
            } else {
                c.insert(*k, 1);
            }
        }
        hits as f64 / trace.len() as f64
    }

    /// Belady's offline optimum for items of one size (slices are): on a
    /// miss with the cache full, of the items held and the new one, the one
    /// asked for again latest is not kept.
    fn belady_hit_ratio(capacity: usize, trace: &[usize]) -> f64 {
        use std::collections::{BTreeSet, HashMap};
        let mut next = vec![usize::MAX; trace.len()];
        let mut seen: HashMap<usize, usize> = HashMap::new();
        for i in (0..trace.len()).rev() {
            next[i] = seen.insert(trace[i], i).unwrap_or(usize::MAX);
        }
        let mut by_next: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut held: HashMap<usize, usize> = HashMap::new();
        let mut hits = 0;
        for (i, &k) in trace.iter().enumerate() {
            if let Some(n) = held.remove(&k) {
                hits += 1;
                by_next.remove(&(n, k));
            } else if held.len() == capacity {
                let Some(&(far, victim)) = by_next.last() else {
                    continue;
                };
                if far <= next[i] {
                    continue;
                }
                by_next.remove(&(far, victim));
                held.remove(&victim);
            }
            held.insert(k, next[i]);
            by_next.insert((next[i], k));
        }
        hits as f64 / trace.len() as f64
    }

    #[test]
    fn s4lru_beats_lru_on_zipf_below_beladys_optimum() {
        // The workload: Zipf(0.8), a cache of 20 % of the items.
        let trace = zipf_trace(5000, 0.8, 200_000, 7);
        let lru = hit_ratio(SegmentedLru::lru(1000), &trace);
        let s4 = hit_ratio(SegmentedLru::s4lru(1000), &trace);
        let best = belady_hit_ratio(1000, &trace);
        eprintln!(
            "Zipf(0.8), 20 % cached: hit ratio S4LRU {s4:.3}, LRU {lru:.3}, Belady {best:.3}"
        );
        assert!(s4 > lru + 0.02, "S4LRU {s4:.3} vs LRU {lru:.3}");
        assert!(
            best >= s4,
            "no online policy beats the optimum: {best:.3} vs {s4:.3}"
        );
    }
}

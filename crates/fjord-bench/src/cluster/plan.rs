//! The viewers' plan, pure: for each, its arrival, title (Zipf popularity)
//! and entry node (uniform: DNS round robin), from a seed. The same seed
//! gives the same plan, so the runs with and without routing face the same
//! viewers.

/// One viewer of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Arrival {
    /// Seconds after the phase's start.
    pub at_s: f64,
    pub title: usize,
    pub entry: usize,
}

/// `n` viewers arriving every `gap_s`, over `titles` of Zipf(`s`)
/// popularity (title 0 the most asked for), each at one of `nodes`.
pub fn plan(n: usize, gap_s: f64, titles: usize, s: f64, nodes: usize, seed: u64) -> Vec<Arrival> {
    let weights: Vec<f64> = (1..=titles).map(|r| (r as f64).powf(-s)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(titles);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    let mut rng = SplitMix(seed);
    (0..n)
        .map(|i| {
            let u = rng.unit();
            let title = cdf
                .partition_point(|c| *c < u)
                .min(titles.saturating_sub(1));
            Arrival {
                at_s: i as f64 * gap_s,
                title,
                entry: (rng.next() % nodes.max(1) as u64) as usize,
            }
        })
        .collect()
}

/// SplitMix64: small, seeded, enough to spread viewers.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_ranks_titles_and_entries_are_even() {
        let p = plan(60_000, 0.01, 200, 0.8, 3, 7);
        let mut per_title = vec![0usize; 200];
        let mut per_entry = [0usize; 3];
        for a in &p {
            per_title[a.title] += 1;
            per_entry[a.entry] += 1;
        }
        // Zipf(0.8): title 0 is asked for 2^0.8 ≈ 1.74 times as often as title 1.
        let ratio = per_title[0] as f64 / per_title[1] as f64;
        assert!((1.55..1.95).contains(&ratio), "{ratio}");
        assert!(per_title[0] > per_title[9] && per_title[9] > per_title[199]);
        assert!(
            per_entry.iter().all(|&n| (19_000..21_000).contains(&n)),
            "{per_entry:?}"
        );
        assert_eq!(p, plan(60_000, 0.01, 200, 0.8, 3, 7));
        assert!((p[100].at_s - 1.0).abs() < 1e-9);
    }
}

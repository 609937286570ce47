//! Robust statistics over repetitions, seed 003's method: the median as the
//! typical value, the median absolute deviation (MAD) as the spread, and a
//! bootstrap for how far the median itself may move.
//!
//! The bootstrap here is the percentile bootstrap of the median: resample
//! the `n` observations with replacement `B` times, take each resample's
//! median, and report the 2.5 % and 97.5 % quantiles of those medians. The
//! generator is a seeded SplitMix64, so a table is reproducible from its
//! numbers. With 5 repetitions the interval can only fall on observed
//! values; more repetitions narrow it.

/// Resamples per bootstrap.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
/// Seed of the bootstrap generator.
pub const BOOTSTRAP_SEED: u64 = 0x5eed_f10d;

/// Median, spread and a 95 % interval of the median of some observations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    /// Median absolute deviation from the median (unscaled).
    pub mad: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

impl Summary {
    /// Summarises `xs` with the default bootstrap; `None` when empty.
    pub fn of(xs: &[f64]) -> Option<Self> {
        Self::with_bootstrap(xs, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
    }

    pub fn with_bootstrap(xs: &[f64], resamples: usize, seed: u64) -> Option<Self> {
        if xs.is_empty() {
            return None;
        }
        let (ci_low, ci_high) = bootstrap_median_ci(xs, resamples, seed, 0.95);
        Some(Self {
            n: xs.len(),
            median: median(xs),
            mad: mad(xs),
            ci_low,
            ci_high,
        })
    }

    /// Every statistic multiplied by `k` (a change of unit).
    pub fn scaled(self, k: f64) -> Self {
        Self {
            median: self.median * k,
            mad: self.mad * k,
            ci_low: self.ci_low * k,
            ci_high: self.ci_high * k,
            ..self
        }
    }
}

/// The middle value; the mean of the two middle ones for an even count.
/// NaN for no values.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median of the absolute deviations from the median.
pub fn mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// Quantile `q` in [0, 1] of sorted values, linear between order statistics
/// (R's type 7).
pub fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let h = (v.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    v[lo] + (h - lo as f64) * (v[hi] - v[lo])
}

/// Percentile-bootstrap interval of the median at `level` (e.g. 0.95).
pub fn bootstrap_median_ci(xs: &[f64], resamples: usize, seed: u64, level: f64) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    if xs.len() == 1 || resamples == 0 {
        let m = median(xs);
        return (m, m);
    }
    let mut rng = SplitMix64(seed);
    let mut sample = vec![0.0; xs.len()];
    let mut medians = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for s in sample.iter_mut() {
            *s = xs[rng.below(xs.len())];
        }
        sample.sort_by(f64::total_cmp);
        medians.push(median_sorted(&sample));
    }
    medians.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    (
        quantile_sorted(&medians, tail),
        quantile_sorted(&medians, 1.0 - tail),
    )
}

/// SplitMix64 (Steele, Lea, Flood 2014): small, seeded, good enough to
/// draw resampling indices.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; the bias for the small
    /// `n` used here is below 2^-50).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_and_unsorted() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn mad_by_hand() {
        // median 2; deviations 1,1,0,0,2,4,7 -> sorted 0,0,1,1,2,4,7 -> 1
        assert_eq!(mad(&[1.0, 1.0, 2.0, 2.0, 4.0, 6.0, 9.0]), 1.0);
        // median 10; deviations 0,1,1,10,0 -> 0,0,1,1,10 -> 1
        assert_eq!(mad(&[10.0, 11.0, 9.0, 20.0, 10.0]), 1.0);
        assert_eq!(mad(&[5.0, 5.0, 5.0]), 0.0);
    }

    #[test]
    fn quantile_type7_by_hand() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&v, 0.0), 1.0);
        assert_eq!(quantile_sorted(&v, 1.0), 5.0);
        assert_eq!(quantile_sorted(&v, 0.5), 3.0);
        // h = 4 * 0.025 = 0.1 -> 1 + 0.1 * 1
        assert!((quantile_sorted(&v, 0.025) - 1.1).abs() < 1e-12);
        assert!((quantile_sorted(&v, 0.975) - 4.9).abs() < 1e-12);
    }

    #[test]
    fn bootstrap_of_constant_data_is_a_point() {
        let (lo, hi) = bootstrap_median_ci(&[3.0; 6], 500, 1, 0.95);
        assert_eq!((lo, hi), (3.0, 3.0));
        let s = Summary::of(&[2.5]).unwrap();
        assert_eq!((s.ci_low, s.median, s.ci_high), (2.5, 2.5, 2.5));
    }

    #[test]
    fn bootstrap_interval_brackets_median_and_stays_in_range() {
        let xs = [10.0, 12.0, 11.0, 30.0, 9.0, 10.5, 11.5];
        let s = Summary::of(&xs).unwrap();
        assert_eq!(s.median, 11.0);
        assert!(s.ci_low <= s.median && s.median <= s.ci_high, "{s:?}");
        assert!(s.ci_low >= 9.0 && s.ci_high <= 30.0, "{s:?}");
        // The outlier barely moves a median: the interval stays well below it.
        assert!(s.ci_high <= 12.0, "{s:?}");
        // Seeded: the same numbers every time.
        assert_eq!(Summary::of(&xs), Some(s));
    }

    #[test]
    fn bootstrap_of_two_values_by_hand() {
        // Resample medians of {1, 3} with n = 2 are 1 (p=1/4), 2 (1/2), 3 (1/4):
        // the 2.5 % and 97.5 % quantiles are 1 and 3.
        let (lo, hi) = bootstrap_median_ci(&[1.0, 3.0], 4000, 7, 0.95);
        assert_eq!((lo, hi), (1.0, 3.0));
        // and a 40 % interval lies inside the middle mass {2}.
        let (lo, hi) = bootstrap_median_ci(&[1.0, 3.0], 4000, 7, 0.40);
        assert_eq!((lo, hi), (2.0, 2.0));
    }

    #[test]
    fn splitmix_is_uniform_enough() {
        let mut r = SplitMix64(42);
        let mut counts = [0usize; 5];
        for _ in 0..50_000 {
            counts[r.below(5)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn scaled_changes_units() {
        let s = Summary::of(&[1.0, 2.0, 3.0]).unwrap().scaled(1000.0);
        assert_eq!(s.median, 2000.0);
        assert_eq!(s.mad, 1000.0);
    }
}

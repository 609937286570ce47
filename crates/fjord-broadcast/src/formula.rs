//! The schemes' closed forms: server bandwidth and worst start-up wait
//! for a title of duration D consumed at b bytes/s, as the papers give
//! them (segments cut anywhere, in the fluid model). [`crate::simulate`]
//! measures what a plan cut at sync points actually does.

use serde::{Deserialize, Serialize};

use crate::PlanError;
use crate::scheme::{Config, Dims, Scheme, dimensions};

/// What a scheme costs and guarantees by its closed form.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expected {
    /// Bytes per second all the title's channels send together.
    pub bandwidth_bytes_per_s: f64,
    pub worst_wait_ns: f64,
    pub channels: usize,
}

/// The closed form of `config`'s scheme for a title of `duration_ns`
/// consumed at `bytes_per_s` (b):
/// - staggered: K = ceil(D/w); B = K·b; wait D/K.
/// - pyramid: B = K·α·b; wait D1/α with D1 = D(α-1)/(α^K - 1).
/// - skyscraper: B = K·b; wait D1 = D / Σ f(k), k = 1..K.
/// - harmonic (delayed): n = ceil(D/w); B = b·H(n); wait D/n.
/// - cautious harmonic: n = ceil(D/w); B = b·(H(n-1) + 1/2); wait D/n.
pub fn formula(config: &Config, duration_ns: u64, bytes_per_s: f64) -> Result<Expected, PlanError> {
    let dims = dimensions(config, duration_ns)?;
    let channels = dims.channels(&config.scheme);
    let (b, d) = (bytes_per_s, duration_ns as f64);
    let (factor, worst_wait_ns) = match (&dims, config.scheme) {
        (Dims::Staggered { channels }, _) => (*channels as f64, d / *channels as f64),
        (
            Dims::Pyramid {
                alpha, first_ns, ..
            },
            _,
        ) => (channels as f64 * alpha, first_ns / alpha),
        (Dims::Skyscraper { series }, _) => {
            (channels as f64, d / series.iter().sum::<u64>() as f64)
        }
        (Dims::Equal { segments }, Scheme::CautiousHarmonic) => {
            (harmonic_number(segments - 1) + 0.5, d / *segments as f64)
        }
        (Dims::Equal { segments }, _) => (harmonic_number(*segments), d / *segments as f64),
    };
    Ok(Expected {
        bandwidth_bytes_per_s: factor * b,
        worst_wait_ns,
        channels,
    })
}

/// H(n) = 1 + 1/2 + ... + 1/n.
pub fn harmonic_number(n: usize) -> f64 {
    (1..=n).map(|i| 1.0 / i as f64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    /// 3.5 Mbit/s in bytes/s.
    const B: f64 = 3.5e6 / 8.0;

    fn expect(scheme: Scheme) -> Expected {
        formula(&Config::new(scheme, 5 * S), 180 * S, B).unwrap()
    }

    fn mbit(e: &Expected) -> f64 {
        e.bandwidth_bytes_per_s * 8.0 / 1e6
    }

    /// INSTANCE (seed 001): 180 s at 3.5 Mbit/s, 5 s wait, cautious
    /// harmonic with n = 36: 16.26 Mbit/s.
    #[test]
    fn cautious_harmonic_is_instances_figure() {
        let e = expect(Scheme::CautiousHarmonic);
        assert_eq!(e.channels, 35);
        assert!((mbit(&e) - 16.26).abs() < 0.005, "{}", mbit(&e));
        assert!((e.worst_wait_ns - 5e9).abs() < 1.0);
    }

    #[test]
    fn the_other_closed_forms() {
        let st = expect(Scheme::Staggered);
        assert_eq!(st.channels, 36);
        assert!((mbit(&st) - 126.0).abs() < 1e-9);
        let hb = expect(Scheme::Harmonic);
        assert!((hb.bandwidth_bytes_per_s / B - harmonic_number(36)).abs() < 1e-12);
        assert!((hb.worst_wait_ns - 5e9).abs() < 1.0);
        let sky = expect(Scheme::Skyscraper { width: 52 });
        assert_eq!(sky.channels, 7);
        assert!((sky.worst_wait_ns - 180e9 / 39.0).abs() < 1.0);
        assert!((mbit(&sky) - 24.5).abs() < 1e-9);
        let py = expect(Scheme::ALL[1]);
        let e = std::f64::consts::E;
        assert_eq!(py.channels, 4);
        let d1 = 180e9 * (e - 1.0) / (e.powi(4) - 1.0);
        assert!((py.worst_wait_ns - d1 / e).abs() < 1.0);
        assert!((py.bandwidth_bytes_per_s - 4.0 * e * B).abs() < 1e-6);
    }

    #[test]
    fn harmonic_numbers() {
        assert_eq!(harmonic_number(0), 0.0);
        assert!((harmonic_number(4) - 25.0 / 12.0).abs() < 1e-15);
    }
}

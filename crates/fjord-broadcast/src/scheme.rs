//! The broadcasting schemes, their parameters, and how many channels and
//! segments each needs for a title of duration D and a start-up wait w.
//! The same dimensions feed the closed forms ([`crate::formula()`]) and the
//! layouts ([`crate::layout`]), so the two can only differ by what
//! cutting at sync points changes.

use serde::{Deserialize, Serialize};

use crate::PlanError;

/// The default cap on channels per title.
pub const DEFAULT_MAX_CHANNELS: usize = 64;
/// The cap a configuration may raise its cap to: the plan is built in
/// memory proportional to it.
pub const CHANNEL_LIMIT: usize = 4096;
/// Skyscraper's default width W (the paper's examples use 52).
pub const DEFAULT_WIDTH: u32 = 52;

/// A periodic broadcasting scheme.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scheme {
    /// K = ceil(D/w) channels, each the whole title at rate b, started
    /// D/K apart.
    Staggered,
    /// Viswanathan & Imielinski (1996): K channels at α·b, segment i+1 α
    /// times segment i.
    Pyramid { alpha: f64 },
    /// Hua & Sheu (SIGCOMM 97): channels at rate b, segment sizes
    /// 1, 2, 2, 5, 5, 12, 12, 25, 25, 52, 52, ... capped at `width`.
    Skyscraper { width: u32 },
    /// Juhn & Tseng (1997), delayed: n equal segments, channel i sends
    /// segment i at b/i; the client plays one slot after joining.
    Harmonic,
    /// Pâris, Carter & Long (1998): channel 1 sends S1 at b, channel 2
    /// alternates S2 and S3 at b, channel i >= 3 sends S(i+1) at b/i.
    CautiousHarmonic,
}

impl Scheme {
    /// Every scheme with its default parameters.
    pub const ALL: [Scheme; 5] = [
        Scheme::Staggered,
        Scheme::Pyramid {
            alpha: std::f64::consts::E,
        },
        Scheme::Skyscraper {
            width: DEFAULT_WIDTH,
        },
        Scheme::Harmonic,
        Scheme::CautiousHarmonic,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Staggered => "staggered",
            Scheme::Pyramid { .. } => "pyramid",
            Scheme::Skyscraper { .. } => "skyscraper",
            Scheme::Harmonic => "harmonic",
            Scheme::CautiousHarmonic => "cautious harmonic",
        }
    }
}

/// What to plan: a scheme, the longest start-up wait w, a cap on channels.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub scheme: Scheme,
    pub max_wait_ns: u64,
    pub max_channels: usize,
}

impl Config {
    pub fn new(scheme: Scheme, max_wait_ns: u64) -> Config {
        Config {
            scheme,
            max_wait_ns,
            max_channels: DEFAULT_MAX_CHANNELS,
        }
    }
}

/// How a scheme is dimensioned for one title: what the closed forms and
/// the layouts share.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Dims {
    /// K channels, each the whole title.
    Staggered { channels: usize },
    /// K channels at α·b; the first segment lasts `first_ns` (D1).
    Pyramid {
        channels: usize,
        alpha: f64,
        first_ns: f64,
    },
    /// The capped series for K channels; the unit segment lasts D / Σ.
    Skyscraper { series: Vec<u64> },
    /// n segments of D/n (harmonic and cautious harmonic).
    Equal { segments: usize },
}

impl Dims {
    pub(crate) fn channels(&self, scheme: &Scheme) -> usize {
        match (self, scheme) {
            (Dims::Staggered { channels }, _) | (Dims::Pyramid { channels, .. }, _) => *channels,
            (Dims::Skyscraper { series }, _) => series.len(),
            (Dims::Equal { segments }, Scheme::CautiousHarmonic) => segments - 1,
            (Dims::Equal { segments }, _) => *segments,
        }
    }
}

/// Checks the configuration against a title of `duration_ns` and finds the
/// scheme's dimensions for it.
pub(crate) fn dimensions(config: &Config, duration_ns: u64) -> Result<Dims, PlanError> {
    check(config, duration_ns)?;
    let (d, w) = (duration_ns, config.max_wait_ns);
    let cap = config.max_channels;
    let scheme = config.scheme.name();
    let too_many = || PlanError::TooManyChannels { scheme, cap };
    let dims = match config.scheme {
        Scheme::Staggered => Dims::Staggered {
            channels: ceil_div_capped(d, w, cap).ok_or_else(too_many)?,
        },
        Scheme::Harmonic => Dims::Equal {
            segments: ceil_div_capped(d, w, cap).ok_or_else(too_many)?,
        },
        // n - 1 channels for n segments.
        Scheme::CautiousHarmonic => Dims::Equal {
            segments: ceil_div_capped(d, w, cap + 1).ok_or_else(too_many)?,
        },
        Scheme::Pyramid { alpha } => pyramid(d, w, alpha, cap).ok_or_else(too_many)?,
        Scheme::Skyscraper { width } => Dims::Skyscraper {
            series: skyscraper(d, w, width, cap).ok_or_else(too_many)?,
        },
    };
    Ok(dims)
}

fn check(config: &Config, duration_ns: u64) -> Result<(), PlanError> {
    if duration_ns == 0 {
        return Err(PlanError::ZeroDuration);
    }
    if config.max_wait_ns == 0 || config.max_wait_ns >= duration_ns {
        return Err(PlanError::BadMaxWait {
            max_wait_ns: config.max_wait_ns,
            duration_ns,
        });
    }
    if config.max_channels == 0 || config.max_channels > CHANNEL_LIMIT {
        return Err(PlanError::BadChannelCap {
            cap: config.max_channels,
            limit: CHANNEL_LIMIT,
        });
    }
    let bad = |what: &str| PlanError::BadParameter {
        scheme: config.scheme.name(),
        what: what.to_string(),
    };
    match config.scheme {
        // Above 1: segments must grow; a bound keeps α^K finite and sane.
        Scheme::Pyramid { alpha } if !(alpha > 1.0 && alpha <= 1e3) => {
            Err(bad("alpha must be above 1 and at most 1000"))
        }
        Scheme::Skyscraper { width: 0 } => Err(bad("width must be at least 1")),
        _ => Ok(()),
    }
}

/// ceil(d / w) if it is at most `cap`. Two channels at least: w < D.
fn ceil_div_capped(d: u64, w: u64, cap: usize) -> Option<usize> {
    let n = d.div_ceil(w);
    usize::try_from(n).ok().filter(|&n| n <= cap)
}

/// The least K whose worst wait D1/α = D(α-1) / (α(α^K - 1)) is at most w.
fn pyramid(d: u64, w: u64, alpha: f64, cap: usize) -> Option<Dims> {
    (1..=cap).find_map(|k| {
        let first_ns = d as f64 * (alpha - 1.0) / (alpha.powi(k as i32) - 1.0);
        (first_ns / alpha <= w as f64).then_some(Dims::Pyramid {
            channels: k,
            alpha,
            first_ns,
        })
    })
}

/// Skyscraper's series: 1, 2, 2, 5, 5, 12, 12, 25, 25, 52, 52, ...
/// (Hua & Sheu's recurrence), each term capped at `width`.
pub fn skyscraper_series(len: usize, width: u32) -> Vec<u64> {
    let mut raw: Vec<u64> = Vec::with_capacity(len);
    for n in 1..=len {
        let prev = raw.last().copied().unwrap_or(0);
        let next = match n {
            1 => 1,
            2 | 3 => 2,
            _ if n % 4 == 0 => prev.saturating_mul(2).saturating_add(1),
            _ if n % 4 == 2 => prev.saturating_mul(2).saturating_add(2),
            _ => prev,
        };
        raw.push(next);
    }
    raw.into_iter().map(|f| f.min(u64::from(width))).collect()
}

/// The least K whose unit segment D / Σ f is at most w.
fn skyscraper(d: u64, w: u64, width: u32, cap: usize) -> Option<Vec<u64>> {
    let series = skyscraper_series(cap, width);
    let mut sum = 0u64;
    for (k, f) in series.iter().enumerate() {
        sum = sum.saturating_add(*f);
        if d.div_ceil(sum) <= w {
            return Some(series[..=k].to_vec());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn skyscraper_series_is_the_papers() {
        assert_eq!(
            skyscraper_series(12, u32::MAX),
            [1, 2, 2, 5, 5, 12, 12, 25, 25, 52, 52, 105]
        );
        assert_eq!(skyscraper_series(12, 52)[11], 52);
        assert_eq!(skyscraper_series(4, 2), [1, 2, 2, 2]);
    }

    #[test]
    fn dimensions_for_three_minutes_and_five_seconds() {
        let dims = |scheme| dimensions(&Config::new(scheme, 5 * S), 180 * S).unwrap();
        assert_eq!(dims(Scheme::Staggered), Dims::Staggered { channels: 36 });
        assert_eq!(dims(Scheme::Harmonic), Dims::Equal { segments: 36 });
        assert_eq!(
            dims(Scheme::Skyscraper { width: 52 }),
            Dims::Skyscraper {
                series: vec![1, 2, 2, 5, 5, 12, 12]
            }
        );
        match dims(Scheme::ALL[1]) {
            Dims::Pyramid { channels, .. } => assert_eq!(channels, 4),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_bad_configurations() {
        let c = |scheme, w| Config::new(scheme, w);
        let bad_wait = |w| PlanError::BadMaxWait {
            max_wait_ns: w,
            duration_ns: 10 * S,
        };
        assert_eq!(
            dimensions(&c(Scheme::Harmonic, 0), 10 * S),
            Err(bad_wait(0))
        );
        assert_eq!(
            dimensions(&c(Scheme::Harmonic, 10 * S), 10 * S),
            Err(bad_wait(10 * S))
        );
        assert!(matches!(
            dimensions(&c(Scheme::Staggered, S / 10), 10 * S),
            Err(PlanError::TooManyChannels { cap: 64, .. })
        ));
        assert!(matches!(
            dimensions(&c(Scheme::Pyramid { alpha: 1.0 }, S), 10 * S),
            Err(PlanError::BadParameter { .. })
        ));
        assert!(matches!(
            dimensions(&c(Scheme::Pyramid { alpha: f64::NAN }, S), 10 * S),
            Err(PlanError::BadParameter { .. })
        ));
        assert!(matches!(
            dimensions(&c(Scheme::Skyscraper { width: 0 }, S), 10 * S),
            Err(PlanError::BadParameter { .. })
        ));
        let mut capped = c(Scheme::Harmonic, S);
        capped.max_channels = 0;
        assert!(matches!(
            dimensions(&capped, 10 * S),
            Err(PlanError::BadChannelCap { .. })
        ));
    }
}

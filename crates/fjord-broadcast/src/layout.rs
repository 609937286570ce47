//! Each scheme as segments and channels for one title: the ideal cut
//! times and the channel grid come from the scheme's dimensions; the rates
//! come from the bytes of the segments actually cut (at sync points).
//!
//! An in-order slot is sent at least at `bytes / min(slot, segment
//! duration)`: fast enough to fit its slot, and at the segment's own mean
//! rate, so a client that receives it while playing it keeps up on
//! average (this is what lets a cut that lengthens a segment leave the
//! worst wait alone). A title of variable bit rate runs ahead of its mean
//! rate in places (an MPEG-TS mux sends the first frames in a burst, to
//! fill the decoder's buffer); sent at the mean, such a segment delays
//! every client by that lead. So the rate is raised, by 10 % at most,
//! towards one that sends no packet more than a small allowance after its
//! play time relative to the slot (the slack between the grid's wait and
//! w, at least 1 % of the grid's wait). The channel then idles for the
//! rest of its slot: its mean rate, the bandwidth, is unchanged, only its
//! sending rate is above the mean; what the raise does not cover is start
//! delay. A cycle channel spreads its segment over its whole period.

use crate::channel::{Channel, Rate, Reception, Slot};
use crate::scheme::{Config, Dims, dimensions};
use crate::segment::{Round, Segment, cut};
use crate::{PlanError, Title};

pub(crate) struct Layout {
    pub segments: Vec<Segment>,
    pub channels: Vec<Channel>,
}

/// A scheme's grid for one title: the ideal cuts, how the first one
/// rounds, and how channels follow from the segments actually cut.
struct Grid {
    ideal: Vec<u64>,
    first: Round,
    shape: Shape,
    /// The closed form's worst wait on this grid.
    wait_ns: u64,
}

enum Shape {
    /// K channels D/K apart, each the whole title.
    Staggered { channels: u64, duration_ns: u64 },
    /// One in-order channel per segment, of these periods (pyramid,
    /// skyscraper).
    OnePerSegment { periods: Vec<u64> },
    /// Harmonic with slot d.
    Harmonic { slot_ns: u64 },
    /// Cautious harmonic with slot d.
    Cautious { slot_ns: u64 },
}

/// Lays `config`'s scheme out on `title`; `first` overrides how the first
/// cut rounds (None: the scheme's own rule).
pub(crate) fn layout(
    title: &Title,
    config: &Config,
    first: Option<Round>,
) -> Result<Layout, PlanError> {
    let d = title.duration_ns();
    let grid = match dimensions(config, d)? {
        Dims::Staggered { channels } => staggered(d, channels),
        Dims::Pyramid {
            channels,
            alpha,
            first_ns,
        } => pyramid(channels, alpha, first_ns),
        Dims::Skyscraper { series } => skyscraper(d, &series),
        Dims::Equal { segments } if config.scheme == crate::Scheme::Harmonic => {
            harmonic(d, segments)
        }
        Dims::Equal { segments } => cautious_harmonic(d, segments),
    };
    let cost = |segments: &[Segment]| bandwidth(segments, &grid.shape.channels(segments));
    let segments = cut(title, &grid.ideal, first.unwrap_or(grid.first), &cost)?;
    let mut channels = grid.shape.channels(&segments);
    let lead_ns = config
        .max_wait_ns
        .saturating_sub(grid.wait_ns)
        .max(grid.wait_ns / 100);
    for ch in channels
        .iter_mut()
        .filter(|c| c.reception == Reception::InOrder)
    {
        raise_for_lead(title, &segments, ch, lead_ns);
    }
    Ok(Layout { segments, channels })
}

/// Whether the scheme's first cut may move either way (it rounds up by
/// default because its client starts with an instance of segment 1).
pub(crate) fn first_cut_is_a_choice(config: &Config) -> bool {
    !matches!(
        config.scheme,
        crate::Scheme::Harmonic | crate::Scheme::Staggered
    )
}

/// How much faster than its base rate an in-order channel may send to keep
/// a variable-bit-rate title's lead within the allowance: 10 %.
const MAX_RAISE: (u64, u64) = (11, 10);

/// Raises an in-order channel's rate, by [`MAX_RAISE`] at most, so that no
/// packet of its slots is sent more than `lead_ns` later, from the slot's
/// start, than it is played from its segment's start. What a raise cannot
/// cover stays lead: the plan's start delay.
fn raise_for_lead(title: &Title, segments: &[Segment], ch: &mut Channel, lead_ns: u64) {
    let base = ch.rate;
    let cap = Rate {
        bytes: base.bytes.saturating_mul(MAX_RAISE.0),
        per_ns: base.per_ns.saturating_mul(MAX_RAISE.1),
    };
    let mut need = base;
    for slot in &ch.slots {
        let seg = &segments[slot.segment as usize];
        let first = title.bytes_before(seg.first_packet as usize);
        for j in seg.packets().skip(1) {
            let ahead = title.packets()[j].pts_ns - seg.start_ns;
            need = need.max(Rate {
                bytes: title.bytes_before(j) - first,
                per_ns: ahead.saturating_add(lead_ns).max(1),
            });
        }
    }
    ch.rate = base.max(need.min(cap));
}

/// Mean bytes per ns of all channels together.
fn bandwidth(segments: &[Segment], channels: &[Channel]) -> f64 {
    channels
        .iter()
        .map(|c| {
            let bytes: u64 = c
                .slots
                .iter()
                .map(|s| segments[s.segment as usize].bytes)
                .sum();
            bytes as f64 / c.period_ns as f64
        })
        .sum()
}

impl Shape {
    fn channels(&self, segments: &[Segment]) -> Vec<Channel> {
        match self {
            Shape::Staggered {
                channels,
                duration_ns: d,
            } => (0..*channels)
                .map(|c| {
                    let phase = (u128::from(c) * u128::from(*d) / u128::from(*channels)) as u64;
                    in_order(segments, phase, *d, &[(0, 0, *d)])
                })
                .collect(),
            Shape::OnePerSegment { periods } => periods
                .iter()
                .enumerate()
                .filter(|&(k, _)| k < segments.len())
                .map(|(k, &p)| in_order(segments, 0, p, &[(k, 0, p)]))
                .collect(),
            Shape::Harmonic { slot_ns } => (0..segments.len())
                .map(|k| cycle(segments, k, segments[k].start_ns.saturating_add(*slot_ns)))
                .collect(),
            Shape::Cautious { slot_ns: d } => cautious_channels(segments, *d),
        }
    }
}

/// An in-order channel: `slots` are (segment, offset, length) in its cycle.
fn in_order(
    segments: &[Segment],
    phase_ns: u64,
    period_ns: u64,
    slots: &[(usize, u64, u64)],
) -> Channel {
    let rate = slots
        .iter()
        .map(|&(k, _, len)| Rate {
            bytes: segments[k].bytes,
            per_ns: len.min(segments[k].duration_ns).max(1),
        })
        .reduce(Rate::max)
        .unwrap_or(Rate {
            bytes: 1,
            per_ns: 1,
        });
    Channel {
        reception: Reception::InOrder,
        phase_ns,
        period_ns,
        rate,
        slots: slots
            .iter()
            .map(|&(k, offset_ns, _)| Slot {
                segment: k as u32,
                offset_ns,
            })
            .collect(),
    }
}

/// A cycle channel: segment `k` spread over `period_ns`.
fn cycle(segments: &[Segment], k: usize, period_ns: u64) -> Channel {
    Channel {
        reception: Reception::Cycle,
        phase_ns: 0,
        period_ns,
        rate: Rate {
            bytes: segments[k].bytes,
            per_ns: period_ns,
        },
        slots: vec![Slot {
            segment: k as u32,
            offset_ns: 0,
        }],
    }
}

fn staggered(duration_ns: u64, channels: usize) -> Grid {
    Grid {
        ideal: vec![],
        first: Round::Up,
        shape: Shape::Staggered {
            channels: channels as u64,
            duration_ns,
        },
        wait_ns: duration_ns.div_ceil(channels as u64),
    }
}

/// Segment k lasts D1·α^k; channel k sends it at about α·b, so its period
/// is D1·α^(k-1) (segment 0: D1/α), one segment k-1 long: an instance of
/// segment k starts while k-1 plays.
fn pyramid(k: usize, alpha: f64, first_ns: f64) -> Grid {
    let ideal = (1..k as i32)
        .map(|i| (first_ns * (alpha.powi(i) - 1.0) / (alpha - 1.0)).round() as u64)
        .collect();
    let periods: Vec<u64> = (0..k as i32)
        .map(|i| (first_ns * alpha.powi(i - 1)).round().max(1.0) as u64)
        .collect();
    Grid {
        ideal,
        first: Round::Up,
        wait_ns: periods[0],
        shape: Shape::OnePerSegment { periods },
    }
}

/// Unit u = D / Σ f; channel k sends segment k (f(k)·u long) in a period of
/// f(k)·u, all cycles aligned at the epoch so every instance starts on the
/// u grid the client starts on.
fn skyscraper(duration_ns: u64, series: &[u64]) -> Grid {
    let sum: u64 = series.iter().sum();
    let unit = (duration_ns / sum).max(1);
    let ideal = series[..series.len() - 1]
        .iter()
        .scan(0u64, |acc, f| {
            *acc += f;
            Some(*acc * unit)
        })
        .collect();
    Grid {
        ideal,
        first: Round::Up,
        shape: Shape::OnePerSegment {
            periods: series.iter().map(|f| f * unit).collect(),
        },
        wait_ns: unit,
    }
}

/// n segments near k·d (d = D/n). Channel k sends segment k over a period
/// of (its start + d): with the client playing d after it joins, the whole
/// segment has arrived when its first packet is due. For equal segments
/// the period is (k+1)·d, the rate b/(k+1): Juhn & Tseng's.
fn harmonic(duration_ns: u64, n: usize) -> Grid {
    let d = duration_ns / n as u64;
    Grid {
        ideal: (1..n as u64).map(|k| k * d).collect(),
        first: Round::Cheaper,
        shape: Shape::Harmonic { slot_ns: d },
        wait_ns: d,
    }
}

/// Cuts near k·d as for harmonic; the first only later (the client starts
/// with an instance of S1).
fn cautious_harmonic(duration_ns: u64, n: usize) -> Grid {
    let d = duration_ns / n as u64;
    Grid {
        ideal: (1..n as u64).map(|k| k * d).collect(),
        first: Round::Up,
        shape: Shape::Cautious { slot_ns: d },
        wait_ns: d,
    }
}

/// Channel 1: S1 in order in a period d (the client starts with an
/// instance). Channel 2: S2 and S3 in alternate slots of d, aligned with
/// channel 1. Channel i >= 3: S(i+1) over a period equal to its start, so
/// a client hearing it from its start has it all when it is due.
fn cautious_channels(segments: &[Segment], d: u64) -> Vec<Channel> {
    let mut channels = vec![in_order(segments, 0, d, &[(0, 0, d)])];
    let second: &[(usize, u64, u64)] = match segments.len() {
        1 => &[],
        2 => &[(1, 0, d)],
        _ => &[(1, 0, d), (2, d, d)],
    };
    if !second.is_empty() {
        channels.push(in_order(segments, 0, 2 * d, second));
    }
    for (k, s) in segments.iter().enumerate().skip(3) {
        channels.push(cycle(segments, k, s.start_ns));
    }
    channels
}

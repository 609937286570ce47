//! A plan: a title's segments and channels, checked, with what every
//! client's rule derives from them (see the crate doc for the rule).
//!
//! Why a single start delay works. A client starts playing at
//! `s = T1 + delay` (T1: the next instance of segment 1 after it arrives)
//! or, when segment 1 is on a cycle channel, at `s = a + delay`. For each
//! in-order slot, `slack` is the latest an instance may start relative to
//! `s` so that every packet is sent by its play time; the delay is the
//! least that makes an instance of every segment start between the
//! arrival and that deadline whatever the arrival (worst gap between
//! channel grids, computed exactly with gcds), and lets every cycle
//! channel be heard for one whole period, from the arrival on, before its
//! segment is due. It is zero or microseconds for the schemes' own layouts
//! of a constant-rate title; a title whose bytes run ahead of a constant
//! rate adds what its channels cannot absorb ([`crate::layout`]), and a
//! first cut moved earlier adds what segment 1 lacks of its slot.
//! [`Plan::worst_wait_ns`] includes it.

use crate::channel::{Channel, Reception};
use crate::formula::formula;
use crate::layout::{first_cut_is_a_choice, layout};
use crate::scheme::{CHANNEL_LIMIT, Config};
use crate::segment::Round;
use crate::segment::{Segment, segments_from};
use crate::{PlanError, Title};

/// Where a client's playback start comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartRule {
    /// The next instance of segment 1 on an in-order channel, plus the delay.
    NextInstance,
    /// The arrival, plus the delay (segment 1 on a cycle channel).
    Immediate,
}

/// Per slot: its last packet is sent `tx_ns - 1` after the slot's start;
/// an instance starting by `s + slack_ns` delivers every packet in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotTiming {
    pub tx_ns: u64,
    pub slack_ns: i128,
}

/// A broadcast plan for one title.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub(crate) title: Title,
    pub(crate) config: Config,
    pub(crate) segments: Vec<Segment>,
    pub(crate) channels: Vec<Channel>,
    pub(crate) timing: Vec<Vec<SlotTiming>>,
    pub(crate) rule: StartRule,
    pub(crate) delay_ns: u64,
    pub(crate) worst_wait_ns: u64,
}

impl Plan {
    /// Plans `title` by `config`'s scheme. Where the scheme's first cut
    /// may round either way, both plans are made and the one kept whose
    /// worst wait is within w, then whose bandwidth and worst wait over
    /// the closed form's add up to less ([`crate::segment`]).
    pub fn new(title: Title, config: Config) -> Result<Plan, PlanError> {
        let l = layout(&title, &config, None)?;
        let up = Plan::assemble(title.clone(), config, l.segments, l.channels)?;
        if !first_cut_is_a_choice(&config) {
            return Ok(up);
        }
        let Ok(l) = layout(&title, &config, Some(Round::Down)) else {
            return Ok(up);
        };
        let down = Plan::assemble(title, config, l.segments, l.channels)?;
        let expected = formula(&config, up.title.duration_ns(), up.title.bytes_per_s())?;
        let score = |p: &Plan| {
            let bandwidth = p.bandwidth_bytes_per_s() / expected.bandwidth_bytes_per_s;
            let wait = p.worst_wait_ns as f64 / expected.worst_wait_ns;
            (p.worst_wait_ns > config.max_wait_ns, bandwidth + wait)
        };
        let (su, sd) = (score(&up), score(&down));
        // (over w, relative cost): within w first, then the cheaper.
        Ok(if sd < su { down } else { up })
    }

    /// Checks segments and channels against the title and derives the
    /// client's rule. Shared by [`Plan::new`] and descriptions.
    pub(crate) fn assemble(
        title: Title,
        config: Config,
        segments: Vec<Segment>,
        channels: Vec<Channel>,
    ) -> Result<Plan, PlanError> {
        check_segments(&title, &segments)?;
        check_channels(&segments, &channels)?;
        let timing = channels
            .iter()
            .map(|c| {
                c.slots
                    .iter()
                    .map(|s| slot_timing(&title, &segments[s.segment as usize], c))
                    .collect()
            })
            .collect();
        let mut plan = Plan {
            title,
            config,
            segments,
            channels,
            timing,
            rule: StartRule::Immediate,
            delay_ns: 0,
            worst_wait_ns: 0,
        };
        if !plan.carriers(0).is_empty() {
            plan.rule = StartRule::NextInstance;
        }
        plan.delay_ns = clamp_u64(plan.delay());
        plan.worst_wait_ns = clamp_u64(plan.first_gap() + i128::from(plan.delay_ns));
        Ok(plan)
    }

    pub fn title(&self) -> &Title {
        &self.title
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    pub fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// How long after the start of a segment-1 instance (or after the
    /// arrival, for harmonic) playback starts.
    pub fn start_delay_ns(&self) -> u64 {
        self.delay_ns
    }

    /// The longest any client waits from its arrival to its playback start.
    pub fn worst_wait_ns(&self) -> u64 {
        self.worst_wait_ns
    }

    /// The mean rate of all channels together, bytes/s (exact; what
    /// [`crate::simulate`] measures over a long window).
    pub fn bandwidth_bytes_per_s(&self) -> f64 {
        (0..self.channels.len())
            .map(|c| self.cycle_bytes(c) as f64 * 1e9 / self.channels[c].period_ns as f64)
            .sum()
    }

    /// The sum of the channels' sending rates, bytes/s: the most the title
    /// sends at once (in-order channels send faster than their mean and
    /// idle for the rest of their slots).
    pub fn peak_bandwidth_bytes_per_s(&self) -> f64 {
        self.channels.iter().map(Channel::bytes_per_s).sum()
    }

    /// Bytes channel `c` sends per cycle.
    pub(crate) fn cycle_bytes(&self, c: usize) -> u64 {
        self.channels[c]
            .slots
            .iter()
            .map(|s| self.segments[s.segment as usize].bytes)
            .sum()
    }

    /// In-order (channel, slot)s that carry segment `k`.
    pub(crate) fn carriers(&self, k: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (c, ch) in self.channels.iter().enumerate() {
            if ch.reception != Reception::InOrder {
                continue;
            }
            for (i, s) in ch.slots.iter().enumerate() {
                if s.segment as usize == k {
                    out.push((c, i));
                }
            }
        }
        out
    }

    /// The least delay that gives every segment an instance (or a whole
    /// period) between the arrival and its deadline.
    fn delay(&self) -> i128 {
        let anchors = self.carriers(0);
        let mut delay = 0i128;
        for &(c, i) in &anchors {
            delay = delay.max(-self.timing[c][i].slack_ns);
        }
        let first = usize::from(self.rule == StartRule::NextInstance);
        for k in first..self.segments.len() {
            let cands = self.carriers(k);
            if cands.is_empty() {
                continue;
            }
            let need = |anchor: Option<(usize, usize)>| {
                cands
                    .iter()
                    .map(|&(c, i)| self.gap(anchor, (c, i)) - self.timing[c][i].slack_ns)
                    .min()
                    .unwrap_or(0)
            };
            let worst = if anchors.is_empty() {
                need(None)
            } else {
                anchors.iter().map(|&a| need(Some(a))).max().unwrap_or(0)
            };
            delay = delay.max(worst);
        }
        // A cycle channel is heard for a period ending when its segment is
        // first due, from the arrival on, and not before its first cycle
        // (the earliest start is the first segment-1 instance, or 0).
        let earliest_start = anchors
            .iter()
            .map(|&(c, i)| self.channels[c].slot_origin(i))
            .min();
        for ch in self
            .channels
            .iter()
            .filter(|c| c.reception == Reception::Cycle)
        {
            let late_phase = ch.phase_ns.saturating_sub(earliest_start.unwrap_or(0));
            let need =
                i128::from(ch.period_ns) - i128::from(self.first_due(ch)) + i128::from(late_phase);
            delay = delay.max(need);
        }
        delay
    }

    /// The earliest presentation time among a channel's segments.
    pub(crate) fn first_due(&self, ch: &Channel) -> u64 {
        ch.slots
            .iter()
            .map(|s| self.segments[s.segment as usize].start_ns)
            .min()
            .unwrap_or(0)
    }

    /// The longest time from an instance of `anchor` (any time if None) to
    /// the next instance of `cand`. Instances are origin + m·period; from a
    /// point on the anchor's grid the distances to the next candidate
    /// instance are the residues ≡ (origin difference) mod gcd of periods.
    fn gap(&self, anchor: Option<(usize, usize)>, cand: (usize, usize)) -> i128 {
        let ch = &self.channels[cand.0];
        let (c, pc) = (i128::from(ch.slot_origin(cand.1)), i128::from(ch.period_ns));
        let Some((ac, ai)) = anchor else {
            return (pc - 1).max(c);
        };
        let ach = &self.channels[ac];
        let a = i128::from(ach.slot_origin(ai));
        let g = i128::from(gcd(ach.period_ns, ch.period_ns));
        (pc - g + (c - a).rem_euclid(g)).max(c - a)
    }

    /// The longest wait for the next segment-1 instance (0 when the start
    /// is immediate).
    fn first_gap(&self) -> i128 {
        if self.rule == StartRule::Immediate {
            return 0;
        }
        let carriers = self.carriers(0);
        let origins: Vec<(u64, u64)> = carriers
            .iter()
            .map(|&(c, i)| (self.channels[c].slot_origin(i), self.channels[c].period_ns))
            .collect();
        let period = origins[0].1;
        let earliest = origins.iter().map(|o| i128::from(o.0)).min().unwrap_or(0);
        if origins.iter().any(|o| o.1 != period) {
            // Different periods: bounded by the best single carrier.
            return origins
                .iter()
                .map(|&(o, p)| (i128::from(p) - 1).max(i128::from(o)))
                .min()
                .unwrap_or(0);
        }
        let period = i128::from(period);
        let mut residues: Vec<i128> = origins.iter().map(|o| i128::from(o.0) % period).collect();
        residues.sort_unstable();
        let wrap = residues[0] + period - residues[residues.len() - 1];
        let widest = residues
            .windows(2)
            .map(|w| w[1] - w[0])
            .fold(wrap, i128::max);
        (widest - 1).max(earliest)
    }
}

/// When each packet of `seg` is sent in its slot, and the slack that
/// leaves against its presentation time.
fn slot_timing(title: &Title, seg: &Segment, ch: &Channel) -> SlotTiming {
    let base = title.bytes_before(seg.first_packet as usize);
    let mut slack = i128::MAX;
    let mut last = 0;
    for j in seg.packets() {
        last = ch.rate.time_of(title.bytes_before(j) - base);
        slack = slack.min(i128::from(title.packets()[j].pts_ns) - i128::from(last));
    }
    SlotTiming {
        tx_ns: last.saturating_add(1),
        slack_ns: slack,
    }
}

fn check_segments(title: &Title, segments: &[Segment]) -> Result<(), PlanError> {
    let firsts: Vec<u32> = segments.iter().map(|s| s.first_packet).collect();
    let tiles = firsts.first() == Some(&0)
        && firsts.windows(2).all(|w| w[0] < w[1])
        && firsts.last().is_some_and(|&f| (f as usize) < title.len());
    if !tiles {
        return Err(PlanError::invalid(
            "segments must start at packet 0 and at increasing packets of the title",
        ));
    }
    if segments_from(title, &firsts) != segments {
        return Err(PlanError::invalid(
            "a segment's packets, start, duration or bytes do not match the packets",
        ));
    }
    if segments.iter().any(|s| s.duration_ns == 0) {
        return Err(PlanError::invalid("a segment lasts no time"));
    }
    Ok(())
}

fn check_channels(segments: &[Segment], channels: &[Channel]) -> Result<(), PlanError> {
    if channels.is_empty() || channels.len() > CHANNEL_LIMIT {
        return Err(PlanError::invalid(format!(
            "a plan has 1..={CHANNEL_LIMIT} channels"
        )));
    }
    for (c, ch) in channels.iter().enumerate() {
        check_channel(segments, ch).map_err(|e| PlanError::invalid(format!("channel {c}: {e}")))?;
    }
    check_coverage(segments, channels)
}

fn check_channel(segments: &[Segment], ch: &Channel) -> Result<(), String> {
    if ch.period_ns == 0 || ch.rate.bytes == 0 || ch.rate.per_ns == 0 {
        return Err("zero period or rate".into());
    }
    if ch.phase_ns >= ch.period_ns || ch.slots.is_empty() {
        return Err("phase beyond the period, or no slots".into());
    }
    for (i, s) in ch.slots.iter().enumerate() {
        let seg = segments
            .get(s.segment as usize)
            .ok_or_else(|| format!("slot {i}: no segment {}", s.segment))?;
        let end = ch.slots.get(i + 1).map_or(ch.period_ns, |n| n.offset_ns);
        let sent = s.offset_ns.checked_add(ch.rate.time_of(seg.bytes));
        if sent.is_none_or(|t| t > end) {
            return Err(format!(
                "slot {i}: the segment does not fit before {end} ns"
            ));
        }
    }
    Ok(())
}

/// Every segment is on in-order slots or on one cycle channel, not both.
fn check_coverage(segments: &[Segment], channels: &[Channel]) -> Result<(), PlanError> {
    let mut in_order = vec![0usize; segments.len()];
    let mut cycle = vec![0usize; segments.len()];
    for ch in channels {
        for s in &ch.slots {
            let count = match ch.reception {
                Reception::InOrder => &mut in_order,
                Reception::Cycle => &mut cycle,
            };
            count[s.segment as usize] += 1;
        }
    }
    for k in 0..segments.len() {
        let ok = (in_order[k] > 0 && cycle[k] == 0) || (in_order[k] == 0 && cycle[k] == 1);
        if !ok {
            return Err(PlanError::invalid(format!(
                "segment {k} must be on in-order slots or on one cycle channel"
            )));
        }
    }
    Ok(())
}

pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn clamp_u64(x: i128) -> u64 {
    x.clamp(0, i128::from(u64::MAX)) as u64
}

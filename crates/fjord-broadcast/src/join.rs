//! The client's side of a plan: for an arrival, which channels to hear
//! from when until when, and when to start playing.
//!
//! The rule (proved in [`crate::plan`]): start at the next instance of
//! segment 1 plus the plan's delay (harmonic: at the arrival plus the
//! delay, one slot). For each in-order segment, hear the latest instance
//! that still delivers every packet by its play time; for each cycle
//! channel, hear exactly one period ending when its segment is first due.
//! So a client holds as little as the scheme allows and leaves every
//! channel as soon as it has what it came for.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::Plan;
use crate::channel::Reception;
use crate::plan::StartRule;

/// Hear channel `channel` for `listen` (ns since the epoch): every packet
/// sent on it in that window is the client's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listen {
    pub channel: usize,
    pub listen: Range<u64>,
}

/// What a client arriving at `arrival_ns` does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinPlan {
    pub arrival_ns: u64,
    /// Playback starts here: packet i is played at `start_ns + pts_i`.
    pub start_ns: u64,
    /// By channel; a channel appears at most once.
    pub listens: Vec<Listen>,
    /// The most payload bytes held at once, received but not yet played.
    pub peak_buffer_bytes: u64,
}

impl JoinPlan {
    pub fn wait_ns(&self) -> u64 {
        self.start_ns.saturating_sub(self.arrival_ns)
    }

    /// The most channels heard at the same time.
    pub fn max_channels_at_once(&self) -> usize {
        let mut edges: Vec<(u64, i32)> = self
            .listens
            .iter()
            .flat_map(|l| [(l.listen.start, 1), (l.listen.end, -1)])
            .collect();
        edges.sort_unstable(); // a window ending where another starts: not both
        let mut open = 0i32;
        edges
            .iter()
            .map(|&(_, d)| {
                open += d;
                open
            })
            .max()
            .unwrap_or(0)
            .max(0) as usize
    }
}

impl Plan {
    /// The plan of a client arriving at `arrival_ns`.
    pub fn join(&self, arrival_ns: u64) -> JoinPlan {
        let (start_ns, listens) = self.listens(arrival_ns);
        let arrivals = self.receive(&listens);
        let peak_buffer_bytes = self.peak_buffer(start_ns, &arrivals);
        JoinPlan {
            arrival_ns,
            start_ns,
            listens,
            peak_buffer_bytes,
        }
    }

    /// The start and the windows, without the buffer walk.
    pub(crate) fn listens(&self, arrival_ns: u64) -> (u64, Vec<Listen>) {
        let a = i128::from(arrival_ns);
        let s = self.start(a);
        let mut windows: Vec<Option<(i128, i128)>> = vec![None; self.channels.len()];
        let mut add = |c: usize, from: i128, until: i128| {
            let w = windows[c].get_or_insert((from, until));
            *w = (w.0.min(from), w.1.max(until));
        };
        for k in 0..self.segments.len() {
            if let Some((c, i, inst)) = self.pick_instance(k, a, s) {
                add(c, inst, inst + i128::from(self.timing[c][i].tx_ns));
            }
        }
        for (c, ch) in self.channels.iter().enumerate() {
            if ch.reception == Reception::Cycle {
                let heard_from = a.max(i128::from(ch.phase_ns));
                let from =
                    (s + i128::from(self.first_due(ch)) - i128::from(ch.period_ns)).max(heard_from);
                add(c, from, from + i128::from(ch.period_ns));
            }
        }
        let listens = windows
            .into_iter()
            .enumerate()
            .filter_map(|(channel, w)| {
                w.map(|(from, until)| Listen {
                    channel,
                    listen: clamp(from)..clamp(until),
                })
            })
            .collect();
        (clamp(s), listens)
    }

    fn start(&self, a: i128) -> i128 {
        let delay = i128::from(self.delay_ns);
        match self.rule {
            StartRule::Immediate => a + delay,
            StartRule::NextInstance => {
                let first = self
                    .carriers(0)
                    .iter()
                    .map(|&(c, i)| self.next_instance(c, i, a))
                    .min();
                first.unwrap_or(a) + delay
            }
        }
    }

    /// The in-order instance of segment `k` to hear: the latest that starts
    /// at or after the arrival and by its deadline; if none does (the plan's
    /// delay rules that out), the first after the arrival, late.
    fn pick_instance(&self, k: usize, a: i128, s: i128) -> Option<(usize, usize, i128)> {
        let cands = self.carriers(k);
        let in_time = cands
            .iter()
            .filter_map(|&(c, i)| {
                let deadline = s + self.timing[c][i].slack_ns;
                let inst = self.last_instance(c, i, deadline)?;
                (inst >= a).then_some((inst, std::cmp::Reverse(c), i))
            })
            .max()
            .map(|(inst, c, i)| (c.0, i, inst));
        in_time.or_else(|| {
            cands
                .iter()
                .map(|&(c, i)| (self.next_instance(c, i, a), c, i))
                .min()
                .map(|(inst, c, i)| (c, i, inst))
        })
    }

    /// The first instance of slot `i` of channel `c` starting at or after `t`.
    fn next_instance(&self, c: usize, i: usize, t: i128) -> i128 {
        let ch = &self.channels[c];
        let (origin, period) = (i128::from(ch.slot_origin(i)), i128::from(ch.period_ns));
        if t <= origin {
            return origin;
        }
        origin + (t - origin + period - 1) / period * period
    }

    /// The last instance of slot `i` of channel `c` starting at or before `t`.
    fn last_instance(&self, c: usize, i: usize, t: i128) -> Option<i128> {
        let ch = &self.channels[c];
        let (origin, period) = (i128::from(ch.slot_origin(i)), i128::from(ch.period_ns));
        (t >= origin).then(|| origin + (t - origin) / period * period)
    }

    /// Each packet's first sending inside the windows (`u64::MAX`: none).
    pub(crate) fn receive(&self, listens: &[Listen]) -> Vec<u64> {
        let mut arrival = vec![u64::MAX; self.title.len()];
        for l in listens {
            let heard = self.emissions_from(l.channel, l.listen.start);
            for e in heard.take_while(|e| e.due_ns < l.listen.end) {
                let slot = &mut arrival[e.packet as usize];
                *slot = (*slot).min(e.due_ns);
            }
        }
        arrival
    }

    /// When packet `i` is played by a client starting at `start`.
    pub(crate) fn play_time(&self, start: u64, i: usize) -> u64 {
        start.saturating_add(self.title.packets()[i].pts_ns)
    }

    /// The most bytes held at once: a packet is held from its arrival until
    /// it is played (a packet arriving at or after its play time is not).
    pub(crate) fn peak_buffer(&self, start: u64, arrivals: &[u64]) -> u64 {
        let packets = self.title.packets();
        let held_at = |i: usize| arrivals[i] < self.play_time(start, i);
        let mut held: Vec<(u64, u32)> = (0..packets.len())
            .filter(|&i| held_at(i))
            .map(|i| (arrivals[i], packets[i].bytes))
            .collect();
        held.sort_unstable();
        let (mut buffered, mut peak, mut played) = (0u64, 0u64, 0usize);
        for (t, bytes) in held {
            // Play times follow packet order; everything played by t left.
            while played < packets.len() && self.play_time(start, played) <= t {
                if held_at(played) {
                    buffered -= u64::from(packets[played].bytes);
                }
                played += 1;
            }
            buffered += u64::from(bytes);
            peak = peak.max(buffered);
        }
        peak
    }
}

fn clamp(t: i128) -> u64 {
    t.clamp(0, i128::from(u64::MAX)) as u64
}

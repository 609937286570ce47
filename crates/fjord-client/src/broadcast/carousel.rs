//! When to join and leave which channel ([`Carousel`]): the join plan's
//! windows, each left once its packets are held, kept past its window
//! while some are missing (repair by the carousel).

use std::ops::Range;

use fjord_broadcast::{JoinPlan, Plan};

use super::REPAIR_PERIODS;
use super::identify::window_packets;
use super::ranges::{contains, count, merge, missing_in};

/// Where a channel of a join plan stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneState {
    /// Its window has not opened.
    Waiting,
    Listening,
    /// Left holding every packet expected from it (or never joined: they
    /// came from other channels first).
    Done,
    /// Left [`REPAIR_PERIODS`] periods after its window with packets missing.
    GaveUp,
}

/// One channel a client hears.
#[derive(Clone, Debug)]
pub struct Tune {
    pub channel: usize,
    /// Join at `join_ns`; the plan's window ends at `window_end_ns` (plus
    /// the grace); a packet still missing at `give_up_ns` is given up.
    pub join_ns: u64,
    pub window_end_ns: u64,
    pub give_up_ns: u64,
    /// The packets expected from this channel.
    pub expected: Vec<Range<u32>>,
    /// How many of them are not held yet (from any channel).
    pub missing: u64,
    pub state: TuneState,
    /// Whether it was joined, and heard past its window.
    pub joined: bool,
    pub extended: bool,
}

/// How a real network bends the plan's windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Margins {
    /// Join each channel this long before its window opens (what a join
    /// takes to take effect; packets heard early are kept).
    pub ahead_ns: u64,
    /// Packets arriving this long after a window's end are still the
    /// window's (the sender's lateness), not repair by the carousel.
    pub grace_ns: u64,
}

/// Open or close a channel's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Join(usize),
    Leave(usize),
}

/// When to join and leave which channel: the plan's windows, each left as
/// soon as every packet expected from it is held and kept past its window
/// while some are missing (repair by the carousel), up to
/// [`REPAIR_PERIODS`] periods.
#[derive(Clone, Debug)]
pub struct Carousel {
    pub tunes: Vec<Tune>,
}

impl Carousel {
    /// The tunes of `join`.
    pub fn new(plan: &Plan, join: &JoinPlan, m: Margins) -> Carousel {
        let tunes = join
            .listens
            .iter()
            .map(|l| {
                let expected = window_packets(plan, l.channel, &l.listen);
                let period = plan.channels()[l.channel].period_ns;
                Tune {
                    channel: l.channel,
                    join_ns: l.listen.start.saturating_sub(m.ahead_ns),
                    window_end_ns: l.listen.end.saturating_add(m.grace_ns),
                    give_up_ns: l
                        .listen
                        .end
                        .saturating_add(m.grace_ns)
                        .saturating_add(period.saturating_mul(REPAIR_PERIODS)),
                    missing: count(&expected),
                    expected,
                    state: TuneState::Waiting,
                    joined: false,
                    extended: false,
                }
            })
            .collect();
        Carousel { tunes }
    }

    /// The packets of `0..packets` no tune expects (empty for a sound plan).
    pub fn uncovered(&self, packets: u32) -> Vec<Range<u32>> {
        let all = merge(self.tunes.iter().flat_map(|t| t.expected.clone()).collect());
        missing_in(0..packets, |i| contains(&all, i))
    }

    /// Packet `i` is held now (call once per packet).
    pub fn got(&mut self, i: u32) {
        for t in &mut self.tunes {
            if contains(&t.expected, i) {
                t.missing -= 1;
            }
        }
    }

    /// What to do at `now_ns`.
    pub fn step(&mut self, now_ns: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for t in &mut self.tunes {
            match t.state {
                TuneState::Waiting if t.missing == 0 => t.state = TuneState::Done,
                TuneState::Waiting if now_ns >= t.join_ns => {
                    t.state = TuneState::Listening;
                    t.joined = true;
                    out.push(Action::Join(t.channel));
                }
                TuneState::Listening if t.missing == 0 => {
                    t.state = TuneState::Done;
                    out.push(Action::Leave(t.channel));
                }
                TuneState::Listening if now_ns >= t.give_up_ns => {
                    t.state = TuneState::GaveUp;
                    out.push(Action::Leave(t.channel));
                }
                TuneState::Listening if now_ns >= t.window_end_ns => t.extended = true,
                _ => {}
            }
        }
        out
    }

    /// The next time [`Carousel::step`] has something to do by the clock
    /// (`None`: nothing left but what arriving packets finish).
    pub fn next_deadline(&self) -> Option<u64> {
        self.tunes
            .iter()
            .filter_map(|t| match t.state {
                TuneState::Waiting => Some(t.join_ns),
                TuneState::Listening if !t.extended => Some(t.window_end_ns),
                TuneState::Listening => Some(t.give_up_ns),
                _ => None,
            })
            .min()
    }

    pub fn is_finished(&self) -> bool {
        self.tunes
            .iter()
            .all(|t| matches!(t.state, TuneState::Done | TuneState::GaveUp))
    }

    /// Whether channel `c` is being heard.
    pub fn listening(&self, c: usize) -> bool {
        self.tunes
            .iter()
            .any(|t| t.channel == c && t.state == TuneState::Listening)
    }

    /// The packets tune `t` expected and does not hold.
    pub fn missing_of(&self, t: usize, has: impl Fn(u32) -> bool) -> Vec<Range<u32>> {
        missing_in(self.tunes[t].expected.iter().flat_map(Clone::clone), has)
    }
}

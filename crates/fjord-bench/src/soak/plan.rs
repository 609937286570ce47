//! The seeded plan of one session's life: which title, over UDP or TCP,
//! where it starts, what the viewer does (play, seek, pause, trick play)
//! and how it ends. Pure: the same seed gives the same lives.

use crate::stats::SplitMix64;

/// The benches' SplitMix64 (the same sequence on every platform and
/// version), with the draws a life's plan takes.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// One thing the viewer does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Step {
    /// Receive for this many seconds.
    Play(f64),
    /// PLAY with `Range: npt=X-`.
    Seek(f64),
    /// PAUSE, wait this many seconds, PLAY.
    Pause(f64),
    /// PLAY with `Scale: 2` for this many seconds, then PLAY at Scale 1.
    Trick(f64),
}

/// How a life ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Teardown,
    /// The connection closes without TEARDOWN: the server must clean up.
    Close,
    /// The last seek goes near the end; the session plays to the server's
    /// RTCP BYE, then TEARDOWN.
    Bye,
}

impl End {
    pub const ALL: [End; 3] = [End::Teardown, End::Close, End::Bye];

    pub fn name(self) -> &'static str {
        match self {
            End::Teardown => "TEARDOWN",
            End::Close => "closed without TEARDOWN",
            End::Bye => "played to the end (BYE)",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Life {
    /// Index into the titles.
    pub title: usize,
    pub tcp: bool,
    /// Where the first PLAY starts, seconds.
    pub start: f64,
    pub steps: Vec<Step>,
    pub end: End,
}

/// What the plans are drawn for.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub titles: usize,
    /// The shortest title's duration, seconds.
    pub title_s: f64,
    /// Share of lives over TCP interleaved.
    pub tcp_share: f64,
}

/// Planned playing stays this far before the end: a seek lands on the key
/// frame before its target and trick play's rate is not exact.
pub const MARGIN_S: f64 = 4.0;

/// Receiving time of a whole life, seconds.
pub const LIFE_S: (f64, f64) = (5.0, 60.0);

/// Draws the next life.
pub fn life(rng: &mut Rng, shape: &Shape) -> Life {
    let title = rng.below(shape.titles);
    let tcp = rng.unit() < shape.tcp_share;
    let end = End::ALL[rng.below(End::ALL.len())];
    let room = (shape.title_s - MARGIN_S).max(1.0);
    let segments = segments(rng, room);
    let start = rng.range(0.0, room - segments[0]);
    let mut pos = start + segments[0];
    let mut steps = vec![Step::Play(segments[0])];
    for &d in &segments[1..] {
        let action = rng.unit();
        if action < 0.35 {
            steps.push(Step::Pause(rng.range(1.0, 5.0)));
        } else if action < 0.55 {
            let t = rng.range(2.0, 5.0);
            if pos + 2.0 * t + d <= room {
                steps.push(Step::Trick(t));
                pos += 2.0 * t;
            }
        }
        if action >= 0.55 || pos + d > room {
            pos = rng.range(0.0, room - d);
            steps.push(Step::Seek(pos));
        }
        steps.push(Step::Play(d));
        pos += d;
    }
    if end == End::Bye {
        steps.push(Step::Seek(shape.title_s - rng.range(3.0, 10.0)));
    }
    Life {
        title,
        tcp,
        start,
        steps,
        end,
    }
}

/// The receiving time of a life split in 1-4 pieces, none longer than 80 %
/// of `room` (so each fits in the title with a seek before it).
fn segments(rng: &mut Rng, room: f64) -> Vec<f64> {
    let total = rng.range(LIFE_S.0, LIFE_S.1);
    let weights: Vec<f64> = (0..1 + rng.below(4)).map(|_| rng.range(0.2, 1.0)).collect();
    let sum: f64 = weights.iter().sum();
    let longest = 0.8 * room;
    weights
        .iter()
        .flat_map(|w| {
            let d = total * w / sum;
            let n = (d / longest).ceil().max(1.0);
            std::iter::repeat_n(d / n, n as usize)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        titles: 2,
        title_s: 60.0,
        tcp_share: 0.3,
    };

    fn lives(seed: u64, n: usize) -> Vec<Life> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| life(&mut rng, &SHAPE)).collect()
    }

    #[test]
    fn a_seed_gives_the_same_lives() {
        assert_eq!(lives(7, 50), lives(7, 50));
        assert_ne!(lives(7, 50), lives(8, 50));
    }

    #[test]
    fn planned_play_stays_inside_the_title() {
        let room = SHAPE.title_s - MARGIN_S;
        for l in lives(1, 3000) {
            let mut pos = l.start;
            let mut played = 0.0;
            let last = l.steps.len() - 1;
            for (i, s) in l.steps.iter().enumerate() {
                match *s {
                    Step::Play(d) => {
                        pos += d;
                        played += d;
                    }
                    Step::Trick(t) => pos += 2.0 * t,
                    Step::Seek(x) if l.end == End::Bye && i == last => {
                        assert!((SHAPE.title_s - 10.0..=SHAPE.title_s - 3.0).contains(&x))
                    }
                    Step::Seek(x) => pos = x,
                    Step::Pause(p) => assert!((1.0..5.0).contains(&p)),
                }
                assert!(pos >= 0.0 && pos <= room + 1e-9, "{l:?}");
            }
            assert!((LIFE_S.0 - 1e-9..LIFE_S.1).contains(&played), "{l:?}");
            assert!(matches!(l.steps[0], Step::Play(_)));
        }
    }

    #[test]
    fn shares_of_transports_ends_and_titles() {
        let all = lives(3, 3000);
        let share = |f: &dyn Fn(&Life) -> bool| all.iter().filter(|l| f(l)).count() as f64 / 3000.0;
        assert!((share(&|l| l.tcp) - 0.3).abs() < 0.04);
        assert!((share(&|l| l.title == 1) - 0.5).abs() < 0.04);
        for e in End::ALL {
            assert!((share(&|l| l.end == e) - 1.0 / 3.0).abs() < 0.04);
        }
        let has = |f: &dyn Fn(&Step) -> bool| all.iter().flat_map(|l| &l.steps).any(f);
        assert!(has(&|s| matches!(s, Step::Trick(_))));
        assert!(has(&|s| matches!(s, Step::Pause(_))));
    }
}

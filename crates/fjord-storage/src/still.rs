//! Whether a playing session's engine has stopped taking its packets (its
//! client takes nothing: a TCP reader that stopped). Such a session is
//! stalled, and holds what a paused one holds. Pure: positions and
//! instants in, a yes or no out.

use std::time::{Duration, Instant};

use crate::cursor::Mode;

/// How long a playing session's engine may stay at one packet before the
/// session counts as stalled: longer than any gap between a playing
/// session's sends (a key frame at Scale 4, an audio frame).
const STALLED_AFTER: Duration = Duration::from_secs(3);

/// How often a stalled session is looked at, to read ahead again soon
/// after its client does.
pub(crate) const LOOK: Duration = Duration::from_millis(100);

/// Where the engine was last seen, and since when.
pub(crate) struct Still {
    at: u32,
    since: Instant,
}

impl Still {
    pub(crate) fn new(now: Instant) -> Still {
        Still { at: 0, since: now }
    }

    /// The engine is at packet `next` at `now`; `poked`: a PLAY, PAUSE or
    /// seek, from which stillness counts anew.
    pub(crate) fn see(&mut self, next: u32, poked: bool, now: Instant) {
        if poked || next != self.at {
            *self = Still {
                at: next,
                since: now,
            };
        }
    }

    /// Whether a session in `mode` whose resident packets end at `end` is
    /// stalled: playing, packets resident past its place, and its engine
    /// not moved for [`STALLED_AFTER`].
    pub(crate) fn stalled(&self, mode: Mode, end: u32, now: Instant) -> bool {
        mode == Mode::Playing
            && end > self.at
            && now.saturating_duration_since(self.since) >= STALLED_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_playing_session_still_with_packets_ahead_is_stalled() {
        let t0 = Instant::now();
        let mut s = Still::new(t0);
        s.see(100, true, t0);
        let later = t0 + STALLED_AFTER;
        assert!(s.stalled(Mode::Playing, 500, later));
        assert!(!s.stalled(Mode::Playing, 500, later - Duration::from_millis(1)));
        // Paused (it gives back anyway), or waiting for the disk (nothing
        // resident past its place): not stalled.
        assert!(!s.stalled(Mode::Paused, 500, later));
        assert!(!s.stalled(Mode::Playing, 100, later));
        // Moving, or poked at the same place, starts the count again.
        s.see(101, false, later);
        assert!(!s.stalled(Mode::Playing, 500, later));
        s.see(101, true, later + STALLED_AFTER);
        assert!(!s.stalled(Mode::Playing, 500, later + STALLED_AFTER));
        s.see(101, false, later + 2 * STALLED_AFTER);
        assert!(s.stalled(Mode::Playing, 500, later + 2 * STALLED_AFTER));
    }
}

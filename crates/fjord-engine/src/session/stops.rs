//! Where a PLAY stops, and what follows there: the stream ends (RTCP BYE),
//! pauses (a pause point: PAUSE with a Range), plays on (a pipelined PLAY,
//! RFC 2326 §10.5) or starts a loop's next round (a broadcast channel), as
//! the session's `AtEnd` says.

use std::time::Instant;

use fjord_media::plan::rtp_ticks;
use fjord_storage::Mode;

use super::{AtEnd, Session, State, pacing::Pacing};
use crate::{PlayInfo, Start, Until};

impl Session {
    /// A PLAY to `start`..`until` after the one playing, when that one
    /// plays to a given end (RFC 2326 §10.5 pipelining); `None` (and
    /// nothing changes) otherwise. The reply names the sequence number and
    /// RTP time the stream will have there.
    pub(crate) fn queue(&mut self, start: Start, until: Until) -> Option<PlayInfo> {
        let (State::Playing(_), Some((end_packet, end_ns)), None, Start::At { ns, packet }) =
            (self.state, self.end, &self.trick, start)
        else {
            return None;
        };
        if !matches!(self.at_end, AtEnd::Bye) {
            return None;
        }
        self.at_end = AtEnd::Play { start, until };
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        Some(PlayInfo {
            packet,
            seq: self.seq0.wrapping_add(end_packet as u16),
            rtptime: self.ts0.wrapping_add(rtp_ticks(end_ns, clock)),
            time_ns: ns,
            end_ns: match until {
                Until::At { ns, .. } => ns,
                _ => self.title.index().duration_ns(),
            },
            queued: true,
        })
    }

    /// A pause point (PAUSE with a Range, RFC 2326 §10.6): the stream
    /// stops before packet `packet`, at title time `ns`, without BYE; false
    /// (and nothing changes) when that is not ahead of where it plays.
    pub(crate) fn pause_at(&mut self, packet: u32, ns: u64, now: Instant) -> bool {
        let ahead = matches!(self.state, State::Playing(_))
            && self.trick.is_none()
            && matches!(self.at_end, AtEnd::Bye)
            && ns >= self.stream_ns(now)
            && ns <= self.end_ns();
        if ahead {
            self.at_end = AtEnd::Pause { then: self.end };
            self.end = Some((packet, ns));
        }
        ahead
    }

    /// The PLAY's stop is reached at stream time `end_ns`, due at `at`:
    /// stop there (a pause point) or play on (a pipelined PLAY). `None`:
    /// nothing to do now or ever; `Some(at)`: look again at `at`.
    pub(super) fn reach_end(&mut self, at: Instant, end_ns: u64, now: Instant) -> Option<Instant> {
        if now < at {
            return Some(at);
        }
        if let AtEnd::Loop { packet, ns, period } = self.at_end
            && let State::Playing(c) = self.state
        {
            let again = if period.is_zero() { at } else { c.t0 + period };
            self.loop_again(packet, ns, again);
            return Some(now);
        }
        self.state = State::Stopped;
        self.clock_ns = end_ns;
        match std::mem::replace(&mut self.at_end, AtEnd::Bye) {
            AtEnd::Bye => None,
            AtEnd::Pause { then } => {
                self.position_ns = end_ns;
                self.end = then;
                self.tell_storage(Mode::Paused);
                None
            }
            AtEnd::Play { start, until } => {
                let info = self.play(start, until, 1, at);
                self.start(at, info.time_ns);
                Some(now)
            }
            AtEnd::Loop { .. } => None,
        }
    }

    /// Sets up the next round of a loop, starting at `again` (once the
    /// round before has ended): the same packets, headers and all, no
    /// splice.
    fn loop_again(&mut self, packet: u32, ns: u64, again: Instant) {
        (self.next, self.position_ns, self.clock_ns, self.floor) = (packet, ns, ns, packet);
        if let Some(r) = &mut self.repair {
            r.pending = None;
        }
        self.start(again, ns);
    }

    /// Ends the stream where it stands, playing or paused: RTCP BYE; the
    /// engine never wakes it again.
    pub(crate) fn end(&mut self, p: &mut Pacing) -> Option<Instant> {
        self.report(p, true);
        self.state = State::Ended;
        None
    }
}

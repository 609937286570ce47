//! PLAY and PAUSE as an engine thread carries them out: a PLAY positions
//! the session (a seek, a range's end, a loop, trick play at a `Scale`) and
//! replies with where the stream will stand; `start` then runs its clock
//! from the time the control plane chose, and PAUSE stops it where it stands.

use std::time::Instant;

use fjord_media::plan::rtp_ticks;
use fjord_storage::Mode;

use super::{AtEnd, Session, State};
use crate::{PlayInfo, Start, Until, clock::Clock, trick::Trick};

impl Session {
    pub(crate) fn play(
        &mut self,
        start: Start,
        until: Until,
        scale: i32,
        now: Instant,
    ) -> PlayInfo {
        self.at_end = AtEnd::Bye;
        match until {
            Until::Previous => {}
            Until::At { ns, packet } | Until::Loop { ns, packet, .. } => {
                self.end = Some((packet, ns));
            }
            Until::End => self.end = None,
        }
        if scale != 1 {
            return self.play_trick(start, scale, now);
        }
        // Back from trick play: on from the key frame it stands at.
        let start = match (start, &self.trick) {
            (Start::Resume, Some(_)) => Start::At {
                ns: self.position_ns,
                packet: self.next,
            },
            (start, _) => start,
        };
        if let Start::At { ns, packet } = start {
            let all = self.track().map_or(0, |t| t.packet_count() as u32);
            self.move_to(packet.min(all), ns, now);
        }
        self.trick = None;
        self.state = State::Stopped;
        if let Until::Loop { period, .. } = until {
            let (packet, ns) = (self.next, self.position_ns);
            self.at_end = AtEnd::Loop { packet, ns, period };
        }
        if let Some(p) = &mut self.pace {
            p.base_ns = self.position_ns;
        }
        self.tell_storage(Mode::Starting);
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        PlayInfo {
            packet: self.next,
            seq: self.seq0.wrapping_add(self.next as u16),
            rtptime: self.ts0.wrapping_add(rtp_ticks(self.position_ns, clock)),
            time_ns: self.position_ns,
            end_ns: self.end_ns(),
            queued: false,
        }
    }

    /// Positions the session for trick play at `scale` from `start` (where
    /// it stands for [`Start::Resume`]); the stream goes on as after a seek.
    fn play_trick(&mut self, start: Start, scale: i32, now: Instant) -> PlayInfo {
        let at_ns = match start {
            Start::At { ns, .. } => ns,
            Start::Resume => self.position_ns,
        };
        let duration_ns = self.title.index().duration_ns();
        let stop_ns = self.end.map(|(_, ns)| ns);
        let trick = self
            .track()
            .map(|t| Trick::new(t, scale, at_ns, stop_ns, duration_ns));
        let Some(trick) = trick else {
            return self.play(start, Until::Previous, 1, now);
        };
        let origin_ns = trick.origin_ns();
        let first = trick.first_packet().unwrap_or(self.next);
        self.move_to(first, origin_ns, now);
        let mut trick = Box::new(trick);
        trick.seq = self.seq0.wrapping_add(first as u16);
        self.build_headers();
        let info = PlayInfo {
            packet: first,
            seq: trick.seq,
            rtptime: self.ts0.wrapping_add(trick.rtp_ts()),
            time_ns: origin_ns,
            end_ns: trick.stop_ns(),
            queued: false,
        };
        self.trick = Some(trick);
        self.state = State::Stopped;
        self.tell_storage(Mode::Starting);
        info
    }

    pub(crate) fn start(&mut self, at: Instant, origin_ns: u64) {
        self.state = State::Playing(Clock {
            t0: at,
            origin_ns,
            speed: self.speed,
        });
        self.next_report = at;
        self.starting = true;
        self.started = Some(at);
        self.start_waits = 0;
        self.hold = None;
        self.tell_storage(Mode::Playing);
    }

    pub(crate) fn pause(&mut self, now: Instant) {
        if let State::Playing(_) = self.state {
            self.position_ns = self.position_at(now);
            self.clock_ns = self.stream_ns(now);
            self.state = State::Stopped;
            self.tell_storage(Mode::Paused);
        }
    }

    /// RFC 2326 `Speed` of the next PLAY's delivery, in millionths.
    pub(crate) fn set_speed(&mut self, speed: u32) {
        self.speed = speed.max(1);
    }
}

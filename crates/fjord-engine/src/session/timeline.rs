//! Where a session stands and when its packets are due: on the title
//! timeline (normal play time), on the stream's RTP clock, and which packets
//! the PLAY sends. Trick play (`crate::trick`) and a broadcast channel's
//! schedule ([`Pace`]) make packets due at other times than the index says.

use std::time::Instant;

use fjord_media::{
    index::Track,
    plan::{PacketRecord, rtp_ticks},
};

use super::{Session, State};

/// When packets are due in a paced session: `offsets[i - first]` after
/// `base_ns`, the title time the PLAY starts at.
pub(super) struct Pace {
    first: u32,
    pub(super) base_ns: u64,
    offsets: Box<[u64]>,
}

impl Pace {
    pub(super) fn due_ns(&self, i: u32) -> Option<u64> {
        let k = i.checked_sub(self.first)?;
        Some(self.base_ns + *self.offsets.get(k as usize)?)
    }
}

impl Session {
    pub(super) fn track(&self) -> Option<Track<'_>> {
        self.title.index().track(self.track)
    }

    /// One past the last packet this PLAY sends.
    pub(super) fn count(&self) -> u32 {
        let all = self.track().map_or(0, |t| t.packet_count() as u32);
        self.end.map_or(all, |(p, _)| p.min(all))
    }

    /// One past the last packet the next burst may take: the end of the
    /// PLAY, or of the key frame being sent.
    pub(super) fn run_end(&self) -> usize {
        match &self.trick {
            Some(t) => t.limit().unwrap_or(self.next) as usize,
            None => self.count() as usize,
        }
    }

    /// Whether the PLAY has packets left to send.
    pub(super) fn more(&self) -> bool {
        match &self.trick {
            Some(t) => t.first_packet().is_some(),
            None => self.next < self.count(),
        }
    }

    /// Stream time packet `i` (record `rec`) is due.
    #[inline]
    pub(super) fn due_ns(&self, i: u32, rec: &PacketRecord) -> u64 {
        match (&self.trick, &self.pace) {
            (Some(t), _) => t.due_ns(i),
            (None, Some(p)) => p.due_ns(i).unwrap_or(rec.send_time_ns),
            (None, None) => rec.send_time_ns,
        }
    }

    /// Packets `first..` due at `offsets` from the PLAY's start
    /// ([`crate::Command::Pace`]).
    pub(crate) fn pace(&mut self, first: u32, offsets: Box<[u64]>) {
        let base_ns = self.position_ns;
        self.pace = Some(Box::new(Pace {
            first,
            base_ns,
            offsets,
        }));
    }

    /// Whether a burst must end after packet `i`: the last of a key frame
    /// in trick play.
    #[inline]
    pub(super) fn ends_burst(&self, i: u32, rec: &PacketRecord) -> bool {
        self.trick.as_ref().is_some_and(|t| t.ends_frame(i, rec))
    }

    /// Stream time of the PLAY's last packet.
    pub(super) fn last_due_ns(&self) -> u64 {
        match &self.trick {
            Some(t) => t.last_due_ns(),
            None => self.media_time(self.count().saturating_sub(1)).0,
        }
    }

    /// Where playback stands on the title timeline at `now`.
    pub(crate) fn position_at(&self, now: Instant) -> u64 {
        match (self.state, &self.trick) {
            (State::Playing(_), Some(t)) => t.npt(self.stream_ns(now)),
            (State::Playing(_), None) => self.stream_ns(now).min(self.end_ns()),
            (State::Stopped, _) => self.position_ns,
            (State::Ended, Some(t)) => t.stop_ns(),
            (State::Ended, None) => self.end_ns(),
        }
    }

    /// Where the RTP clock stands at `now` (stream time).
    pub(super) fn stream_ns(&self, now: Instant) -> u64 {
        match self.state {
            State::Playing(c) => c.at(now),
            State::Stopped => self.clock_ns,
            State::Ended => self.last_due_ns(),
        }
    }

    pub(super) fn end_ns(&self) -> u64 {
        self.end
            .map_or(self.title.index().duration_ns(), |(_, ns)| ns)
    }

    /// Media time and RTP timestamp of packet `i`; one past the end maps to
    /// the title's duration.
    pub(super) fn media_time(&self, i: u32) -> (u64, u32) {
        let track = self.track();
        match track.and_then(|t| t.packet(i as usize)) {
            Some(rec) => (rec.send_time_ns, rec.rtp_ts),
            None => {
                let ns = self.title.index().duration_ns();
                let clock = track.map_or(90_000, |t| t.clock_rate());
                (ns, rtp_ticks(ns, clock))
            }
        }
    }
}

//! Seeking: moving a session to another packet. After packets have left,
//! the stream goes on (the next sequence number, the RTP clock from where it
//! stands) instead of jumping, since RFC 3550 receivers take a jump for a
//! restart; the session then builds its own headers, not the packet file's.

use std::time::Instant;

use fjord_media::plan::rtp_ticks;

use super::Session;

impl Session {
    /// Moves the session to packet `packet` at title time `ns`; after
    /// packets have left, the stream goes on ([`Session::splice`]).
    pub(super) fn move_to(&mut self, packet: u32, ns: u64, now: Instant) {
        if self.last_sent.is_some() {
            self.splice(packet, ns, now);
        }
        self.next = packet;
        self.position_ns = ns;
        self.clock_ns = ns;
        self.floor = packet;
        if let Some(r) = &mut self.repair {
            r.pending = None;
        }
    }

    /// The headers differ from the prefabricated ones from now on: build
    /// them, and read the media instead of the packet file.
    pub(super) fn build_headers(&mut self) {
        if self.prefab {
            self.prefab = false;
            if let Some(r) = &self.readahead {
                r.set_uses(self.uses(false));
            }
        }
    }

    /// The sequence number the next packet gets.
    fn next_seq(&self) -> u16 {
        match &self.trick {
            Some(t) => t.seq,
            None => self.seq0.wrapping_add(self.next as u16),
        }
    }

    /// A seek after packets have left continues the stream instead of
    /// jumping it: RFC 3550 receivers (ffmpeg among them) take a jump of
    /// the sequence numbers for a restart and drop what follows. Packet
    /// `packet` gets the next sequence number, and the RTP clock goes on
    /// from where the stream stands `now` (as its sender reports say) as if
    /// time `ns` followed. The headers then differ from the prefabricated
    /// ones: the session builds its own from here.
    fn splice(&mut self, packet: u32, ns: u64, now: Instant) {
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        let cut = rtp_ticks(self.stream_ns(now), clock);
        self.seq0 = self.next_seq().wrapping_sub(packet as u16);
        self.ts0 = self
            .ts0
            .wrapping_add(cut)
            .wrapping_sub(rtp_ticks(ns, clock));
        self.build_headers();
    }
}

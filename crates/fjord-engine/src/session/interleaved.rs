//! Sending over the client's RTSP connection (TCP interleaved, RFC 2326
//! §10.12): the due packets as `$` frames, many per `writev`, by reference
//! into the title's mapping. A connection whose client takes nothing is
//! tried again later and later (`crate::interleaved::Connection`).

use std::time::Instant;

use super::{
    Session, State,
    pacing::{Pacing, RETRY},
};
use crate::{
    Title,
    command::Output,
    datapath::Packet,
    interleaved::{Connection, Frame, MAX_FRAMES},
    lateness::Hold,
};

impl Session {
    /// Sends what is due through the RTSP connection (TCP interleaved), many
    /// frames per `writev`.
    pub(crate) fn pump_interleaved(&mut self, p: &mut Pacing) -> Option<Instant> {
        let clock = self.playing()?;
        let Output::Interleaved {
            conn, rtp_channel, ..
        } = self.output
        else {
            return None;
        };
        if self.storage_failed() {
            return self.end_unreadable(p);
        }
        let title = self.title.clone();
        let track = title.index().track(self.track)?;
        let limit_ns = clock.due_by(p.now + p.burst);
        let pt = track.payload_type();
        // A stalled client's connection takes nothing before its next try:
        // build no frames for it.
        if p.connections.get(&conn).is_some_and(|c| !c.may_try(p.now)) {
            return Some(self.connection_full(conn, p));
        }
        loop {
            if !self.pump_repair_interleaved(&title, p) {
                return Some(self.connection_full(conn, p));
            }
            let ready = self.ready();
            if ready == 0 && self.more() {
                return self.not_ready(p);
            }
            let ready = self.next as usize + ready as usize;
            let end = self
                .block_end()
                .unwrap_or(usize::MAX)
                .min(ready)
                .min(self.run_end());
            let mut packets: [Option<Packet<'_>>; MAX_FRAMES] = [None; MAX_FRAMES];
            let mut n = 0;
            while n < MAX_FRAMES && (self.next as usize + n) < end {
                let i = self.next as usize + n;
                let Some(rec) = track.packet(i) else {
                    break;
                };
                if limit_ns.is_none_or(|l| self.due_ns(i as u32, &rec) > l) {
                    break;
                }
                let Some(packet) = self.packet(&title, pt, &rec, i, true) else {
                    if n == 0 {
                        tracing::warn!(
                            ssrc = self.ssrc,
                            "media file shrank under a playing session; stopping it"
                        );
                        self.state = State::Ended;
                        return None;
                    }
                    break;
                };
                packets[n] = Some(packet);
                n += 1;
                if self.ends_burst(i as u32, &rec) {
                    break;
                }
            }
            if n == 0 {
                break;
            }
            let Some(taken) = send_frames(p, conn, rtp_channel, &packets[..n]) else {
                break;
            };
            self.account(track, taken, clock, p);
            if taken < n {
                return Some(self.connection_full(conn, p));
            }
        }
        self.after_sending(clock, p)
    }

    /// When a session whose connection was full tries again: the
    /// connection's next try (later and later while its client takes
    /// nothing).
    fn connection_full(&mut self, conn: u64, p: &Pacing) -> Instant {
        self.hold = Some(Hold::Socket);
        p.connections
            .get(&conn)
            .and_then(Connection::retry_at)
            .unwrap_or(p.now + RETRY)
    }

    /// Sends the pending repair packets on the connection; false when it is
    /// full before they all went.
    fn pump_repair_interleaved(&mut self, title: &Title, p: &mut Pacing) -> bool {
        loop {
            let (Some(r), Some(pending)) = (&self.repair, self.repair_pending()) else {
                return true;
            };
            let Output::Interleaved {
                conn, rtp_channel, ..
            } = r.output
            else {
                return true;
            };
            let mut packets: [Option<Packet<'_>>; MAX_FRAMES] = [None; MAX_FRAMES];
            let mut n = 0;
            while n < MAX_FRAMES {
                let esi = pending.esi.saturating_add(n as u16);
                let seq = r.seq.wrapping_add(n as u16);
                let Some(packet) = self.repair_packet(title, r, pending, esi, seq) else {
                    break;
                };
                packets[n] = Some(packet);
                n += 1;
            }
            if n == 0 {
                if let Some(r) = &mut self.repair {
                    r.pending = None;
                }
                return true;
            }
            let Some(taken) = send_frames(p, conn, rtp_channel, &packets[..n]) else {
                return true;
            };
            self.account_repair(taken, p);
            if taken < n {
                return false;
            }
        }
    }
}

/// Sends `packets` (all `Some`) as `$` frames of `channel` on connection
/// `conn`, in one `writev`; returns how many it took (all of them when the
/// client is gone: the session moves on as if they left), `None` when the
/// connection is not attached.
fn send_frames(
    p: &mut Pacing,
    conn: u64,
    channel: u8,
    packets: &[Option<Packet<'_>>],
) -> Option<usize> {
    let mut frames: [Frame<'_>; MAX_FRAMES] = [[&[]; 3]; MAX_FRAMES];
    for (frame, packet) in frames.iter_mut().zip(packets.iter().flatten()) {
        *frame = [packet.head(), packet.payload, packet.payload2];
    }
    let n = packets.len();
    let c = p.connections.get_mut(&conn)?;
    let (taken, broken) = c.send_frames(channel, &frames[..n], p.now);
    Some(if broken { n } else { taken })
}

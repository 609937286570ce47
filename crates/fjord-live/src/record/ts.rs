//! A live stream of MPEG-TS (MP2T, RFC 2250) recorded as the `.ts` title
//! it already is: the TS packets of each RTP payload appended in order,
//! nothing remuxed. A payload must be a whole number of 188-byte packets,
//! each starting with the sync byte 0x47 ([`whole_ts`]); any other is
//! dropped and counted. Packets lost on the way in (sequence gaps) are
//! counted and the recording goes on: a TS demuxer resyncs at the next
//! packet that starts a PES or section, as it does after any damage. A
//! packet arriving late (behind one already taken) or twice is left out:
//! the file keeps the publisher's order, never goes back.
//!
//! The bytes are handed out in runs at least [`RecordLimits::fragment_ms`]
//! of media apart (by RTP timestamp) or of [`SYNC_BYTES`], whichever comes
//! first; the server writes and syncs each, so what a crash leaves is whole
//! TS packets up to the last run. No clocks, files or threads.

use crate::depacketize::Counts;
use crate::loss::MAX_DROPOUT;
use crate::record::{Record, RecordLimits};
use crate::sdp::Track;

/// The size of a TS packet (ISO 13818-1 §2.4.3.2).
pub const TS: usize = 188;

/// The most held between runs, whatever the timestamps say: at most this
/// much is lost when a publisher's timestamps stand still, and a run is
/// about a second at 32 Mbit/s.
pub const SYNC_BYTES: usize = 4 << 20;

/// Whether `payload` is what RFC 2250 §2 allows: one or more whole TS
/// packets, each starting with the sync byte.
pub fn whole_ts(payload: &[u8]) -> bool {
    !payload.is_empty()
        && payload.len().is_multiple_of(TS)
        && payload.chunks_exact(TS).all(|p| p[0] == 0x47)
}

/// A recording of one MP2T track of a stream.
#[derive(Debug)]
pub struct TsRecorder {
    track: usize,
    clock: i64,
    /// The sequence number the next packet should have.
    next: Option<u16>,
    /// The RTP timestamp of the last run's end.
    cut_ts: Option<u32>,
    held: Vec<u8>,
    limits: RecordLimits,
    cuts: u32,
    payloads: u64,
    lost: u64,
    malformed: u64,
}

impl TsRecorder {
    /// A recording of `tracks[track]`, which must be MP2T.
    pub fn new(tracks: &[Track], track: usize, limits: RecordLimits) -> Self {
        let clock = tracks.get(track).map_or(90_000, |t| t.clock_rate.max(1));
        TsRecorder {
            track,
            clock: i64::from(clock),
            next: None,
            cut_ts: None,
            held: Vec::new(),
            limits,
            cuts: 0,
            payloads: 0,
            lost: 0,
            malformed: 0,
        }
    }

    /// Whether packet `seq` goes on the file: `false` for one late or
    /// repeated; packets skipped to reach it are counted lost.
    fn in_order(&mut self, seq: u16) -> bool {
        if let Some(next) = self.next {
            let ahead = seq.wrapping_sub(next);
            if ahead < MAX_DROPOUT {
                self.lost += u64::from(ahead);
            } else if next.wrapping_sub(seq) <= MAX_DROPOUT {
                return false;
            }
            // Else a jump past a dropout: the numbering restarted.
        }
        self.next = Some(seq.wrapping_add(1));
        true
    }

    /// Whether a run ends before a payload of timestamp `ts` and `len`
    /// bytes: a second of media since the last, a timestamp stepped back
    /// as far (a new timeline), or the bytes bound reached.
    fn due(&self, ts: u32, len: usize) -> bool {
        let Some(cut) = self.cut_ts else {
            return false;
        };
        let elapsed = i64::from(ts.wrapping_sub(cut) as i32);
        let bound = self.limits.max_fragment_bytes.min(SYNC_BYTES);
        elapsed * 1000 >= i64::from(self.limits.fragment_ms) * self.clock
            || -elapsed >= self.clock
            || self.held.len() + len > bound
    }

    fn cut(&mut self, out: &mut Vec<u8>) {
        if !self.held.is_empty() {
            out.append(&mut self.held);
            self.cuts += 1;
        }
    }
}

impl Record for TsRecorder {
    fn extension(&self) -> &'static str {
        "ts"
    }

    fn init(&self) -> Vec<u8> {
        Vec::new()
    }

    fn push(&mut self, track: usize, packet: &[u8], out: &mut Vec<u8>) {
        if track != self.track {
            return;
        }
        let Some(h) = super::header(packet) else {
            return;
        };
        if !self.in_order(h.seq) {
            return;
        }
        let payload = &packet[h.payload];
        if !whole_ts(payload) {
            self.malformed += 1;
            return;
        }
        if self.due(h.timestamp, payload.len()) {
            self.cut(out);
            self.cut_ts = Some(h.timestamp);
        }
        self.cut_ts.get_or_insert(h.timestamp);
        self.held.extend_from_slice(payload);
        self.payloads += 1;
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.cut(out);
    }

    /// The next publisher's packets are renumbered to follow on; its TS
    /// starts afresh, which a demuxer resyncs on as after a loss.
    fn next_publisher(&mut self) {
        self.next = None;
    }

    /// Payloads written; dropped: those lost on the way in or malformed.
    fn counts(&self) -> Counts {
        Counts {
            frames: self.payloads,
            dropped: self.lost + self.malformed,
        }
    }

    fn cuts(&self) -> u32 {
        self.cuts
    }
}

#[cfg(test)]
mod tests;

//! The packets a joining viewer is sent first: everything from the start
//! of the last key frame of the stream's video track on (every track,
//! in arrival order), within a byte budget. A stream without video joins
//! at its newest packet.
//!
//! Generic over the packet type: the server keeps reference-counted
//! packets here and hands the same ones to the engine.

use std::collections::VecDeque;

/// One packet as the ring keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<P> {
    pub track: usize,
    pub packet: P,
    bytes: usize,
}

/// The access unit (one RTP timestamp) the key track is in.
#[derive(Clone, Copy, Debug)]
struct Unit {
    timestamp: u32,
    start: u64,
    key: bool,
}

#[derive(Debug)]
pub struct Ring<P> {
    entries: VecDeque<Entry<P>>,
    /// The position (counted from the first packet ever pushed) of
    /// `entries[0]`.
    first: u64,
    bytes: usize,
    max_bytes: usize,
    /// The track whose key frames are the join points (the first video
    /// track), if any.
    key_track: Option<usize>,
    unit: Option<Unit>,
    /// Where the last key frame's access unit starts; `None`: no join
    /// point held (none yet, or it fell out of the budget).
    cut: Option<u64>,
}

impl<P> Ring<P> {
    pub fn new(key_track: Option<usize>, max_bytes: usize) -> Self {
        Ring {
            entries: VecDeque::new(),
            first: 0,
            bytes: 0,
            max_bytes,
            key_track,
            unit: None,
            cut: None,
        }
    }

    /// Takes a packet of `bytes` on `track` with RTP timestamp `timestamp`;
    /// `key`: its payload starts a key frame ([`crate::keyframe`]).
    pub fn push(&mut self, track: usize, timestamp: u32, key: bool, bytes: usize, packet: P) {
        let pos = self.first + self.entries.len() as u64;
        match self.key_track {
            Some(t) if t == track => {
                if self.unit.is_none_or(|u| u.timestamp != timestamp) {
                    self.unit = Some(Unit {
                        timestamp,
                        start: pos,
                        key: false,
                    });
                }
                if let Some(u) = self.unit.as_mut().filter(|u| key && !u.key) {
                    u.key = true;
                    let start = u.start;
                    self.cut_at(start);
                }
            }
            Some(_) => {}
            None => self.cut_at(pos),
        }
        self.bytes += bytes;
        self.entries.push_back(Entry {
            track,
            packet,
            bytes,
        });
        while self.bytes > self.max_bytes {
            self.pop();
        }
    }

    /// A new join point at `pos`: what came before it is not needed.
    fn cut_at(&mut self, pos: u64) {
        while self.first < pos && !self.entries.is_empty() {
            self.pop();
        }
        self.cut = Some(pos);
    }

    fn pop(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.bytes;
            self.first += 1;
        }
        if self.cut.is_some_and(|c| c < self.first) {
            self.cut = None;
        }
    }

    /// What a viewer joining now is sent first: from the last join point on.
    pub fn backlog(&self) -> impl Iterator<Item = &Entry<P>> {
        let skip = self
            .cut
            .map_or(self.entries.len(), |c| (c - self.first) as usize);
        self.entries.iter().skip(skip)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(r: &Ring<u32>) -> Vec<u32> {
        r.backlog().map(|e| e.packet).collect()
    }

    #[test]
    fn a_viewer_joins_at_the_start_of_the_last_key_frame() {
        let mut r = Ring::new(Some(0), 1 << 20);
        r.push(0, 0, false, 10, 1);
        assert!(tags(&r).is_empty(), "no key frame yet");
        // SPS, PPS (no key in the first packet of the unit), IDR.
        r.push(0, 90, false, 10, 2);
        r.push(1, 5, false, 10, 3);
        r.push(0, 90, true, 10, 4);
        r.push(0, 180, false, 10, 5);
        assert_eq!(tags(&r), [2, 3, 4, 5]);
        // The next key frame drops the one before.
        r.push(0, 270, true, 10, 6);
        r.push(0, 270, true, 10, 7);
        assert_eq!(tags(&r), [6, 7]);
        assert_eq!(r.bytes(), 20);
    }

    #[test]
    fn the_budget_bounds_what_is_held() {
        let mut r = Ring::new(Some(0), 35);
        r.push(0, 0, true, 10, 1);
        r.push(0, 1, false, 10, 2);
        r.push(0, 2, false, 10, 3);
        assert_eq!(tags(&r), [1, 2, 3]);
        r.push(0, 3, false, 10, 4);
        assert!(r.bytes() <= 35);
        assert!(tags(&r).is_empty(), "the join point fell out");
        r.push(0, 4, true, 10, 5);
        assert_eq!(tags(&r), [5]);
    }

    #[test]
    fn audio_only_joins_at_the_newest_packet() {
        let mut r = Ring::new(None, 1 << 20);
        r.push(0, 0, false, 10, 1);
        r.push(0, 1, false, 10, 2);
        assert_eq!(tags(&r), [2]);
    }

    proptest::proptest! {
        #[test]
        fn the_ring_stays_in_budget_and_the_backlog_starts_with_a_key_unit(
            ops in proptest::collection::vec((0usize..2, 0u32..6, proptest::prelude::any::<bool>(), 1usize..50), 0..200)
        ) {
            let mut r = Ring::new(Some(0), 400);
            let mut keys = std::collections::HashSet::new();
            for (i, (track, ts, key, bytes)) in ops.into_iter().enumerate() {
                r.push(track, ts, key, bytes, (i, track, ts));
                if key && track == 0 { keys.insert(ts); }
                proptest::prop_assert!(r.bytes() <= 400);
            }
            if let Some(e) = r.backlog().find(|e| e.track == 0) {
                proptest::prop_assert!(keys.contains(&e.packet.2));
            }
        }
    }
}

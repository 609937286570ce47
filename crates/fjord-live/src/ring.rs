//! The packets a joining viewer is sent first: everything from the start
//! of the last key frame of the stream's video track on, within a byte
//! budget, per track. A stream without video joins at its newest packet.
//!
//! Each track's packets are held in shared chunks of [`CHUNK`], and a
//! joining viewer is handed the chunks (a reference each) and where to
//! start in the first, not a reference per packet: the 2 s since a key
//! frame of a 5 Mbit/s stream are some 1,000 packets, 16 KiB of
//! references per viewer, more than all else a viewer holds.
//!
//! Generic over the packet type: the server keeps reference-counted
//! packets here and hands the same ones to the engine.

use std::{collections::VecDeque, sync::Arc};

/// Packets per chunk once it is sealed.
pub const CHUNK: usize = 64;

/// A join seals the open chunk when it holds at least this many packets,
/// so later joiners share it; fewer are copied for the viewer. A seal per
/// join would leave chunks of a packet each while viewers crowd in.
const SEAL_AT_JOIN: usize = 16;

/// What a viewer joining one track is sent first: the packets of
/// `chunks`, in order, less the first `skip`.
#[derive(Debug)]
pub struct Backlog<P> {
    pub chunks: Vec<Arc<[P]>>,
    pub skip: usize,
}

impl<P> Backlog<P> {
    pub fn iter(&self) -> impl Iterator<Item = &P> {
        self.chunks.iter().flat_map(|c| c.iter()).skip(self.skip)
    }
}

/// A join point: its position among the stream's packets (counted from
/// the first ever pushed) and, per track, how many of the track's packets
/// came before it.
#[derive(Clone, Debug)]
struct Cut {
    pos: u64,
    per_track: Vec<u64>,
}

/// The access unit (one RTP timestamp) the key track is in.
#[derive(Clone, Debug)]
struct Unit {
    timestamp: u32,
    start: Cut,
    key: bool,
}

#[derive(Debug)]
pub struct Ring<P> {
    /// Each packet held, oldest first: its track and bytes.
    order: VecDeque<(usize, usize)>,
    tracks: Vec<Track<P>>,
    /// The position of `order[0]`.
    first: u64,
    bytes: usize,
    max_bytes: usize,
    /// The track whose key frames are the join points (the first video
    /// track), if any.
    key_track: Option<usize>,
    unit: Option<Unit>,
    /// The last key frame's access unit; `None`: no join point held (none
    /// yet, or it fell out of the budget).
    cut: Option<Cut>,
}

impl<P: Clone> Ring<P> {
    pub fn new(key_track: Option<usize>, max_bytes: usize) -> Self {
        Ring {
            order: VecDeque::new(),
            tracks: Vec::new(),
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
        match self.key_track {
            Some(t) if t == track => {
                if self.unit.as_ref().is_none_or(|u| u.timestamp != timestamp) {
                    let start = self.here();
                    self.unit = Some(Unit {
                        timestamp,
                        start,
                        key: false,
                    });
                }
                if let Some(u) = self.unit.as_mut().filter(|u| key && !u.key) {
                    u.key = true;
                    let start = u.start.clone();
                    self.cut_at(start);
                }
            }
            Some(_) => {}
            None => {
                let here = self.here();
                self.cut_at(here);
            }
        }
        while self.tracks.len() <= track {
            self.tracks.push(Track::new());
        }
        self.tracks[track].push(packet);
        self.order.push_back((track, bytes));
        self.bytes += bytes;
        while self.bytes > self.max_bytes {
            self.pop();
        }
    }

    /// Where the next packet will be.
    fn here(&self) -> Cut {
        Cut {
            pos: self.first + self.order.len() as u64,
            per_track: self.tracks.iter().map(|t| t.pushed).collect(),
        }
    }

    /// A new join point: what came before it is not needed. One whose
    /// start fell out of the budget already is none.
    fn cut_at(&mut self, cut: Cut) {
        while self.first < cut.pos && !self.order.is_empty() {
            self.pop();
        }
        self.cut = (cut.pos >= self.first).then_some(cut);
    }

    fn pop(&mut self) {
        if let Some((track, bytes)) = self.order.pop_front() {
            self.bytes -= bytes;
            self.first += 1;
            self.tracks[track].pop();
        }
        if self.cut.as_ref().is_some_and(|c| c.pos < self.first) {
            self.cut = None;
        }
    }

    /// What a viewer of `track` joining now is sent first: the track's
    /// packets from the last join point on.
    pub fn backlog(&mut self, track: usize) -> Backlog<P> {
        let from = self
            .cut
            .as_ref()
            .map(|c| c.per_track.get(track).copied().unwrap_or(0));
        match (from, self.tracks.get_mut(track)) {
            (Some(from), Some(t)) => t.from(from),
            _ => Backlog {
                chunks: Vec::new(),
                skip: 0,
            },
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One track's packets held: those of the sealed chunks, then of the open
/// one, less the first `skip`.
#[derive(Debug)]
struct Track<P> {
    sealed: VecDeque<Arc<[P]>>,
    open: Vec<P>,
    skip: usize,
    /// The track's count of the first packet held.
    first: u64,
    pushed: u64,
}

impl<P: Clone> Track<P> {
    fn new() -> Self {
        Track {
            sealed: VecDeque::new(),
            open: Vec::new(),
            skip: 0,
            first: 0,
            pushed: 0,
        }
    }

    fn push(&mut self, packet: P) {
        self.open.push(packet);
        self.pushed += 1;
        if self.open.len() == CHUNK {
            self.seal();
        }
    }

    /// The open chunk becomes shared, less what was dropped of it.
    fn seal(&mut self) {
        let from = match self.sealed.is_empty() {
            true => std::mem::take(&mut self.skip),
            false => 0,
        };
        if self.open.len() > from {
            self.sealed.push_back(self.open[from..].into());
        }
        self.open.clear();
    }

    /// Drops the oldest packet held.
    fn pop(&mut self) {
        self.skip += 1;
        self.first += 1;
        match self.sealed.front() {
            Some(c) if self.skip == c.len() => {
                self.sealed.pop_front();
                self.skip = 0;
            }
            None if self.skip >= self.open.len() => {
                self.open.clear();
                self.skip = 0;
            }
            _ => {}
        }
    }

    /// The packets from the track's count `from` on.
    fn from(&mut self, from: u64) -> Backlog<P> {
        let open_held = match self.sealed.is_empty() {
            true => self.open.len() - self.skip,
            false => self.open.len(),
        };
        if open_held >= SEAL_AT_JOIN {
            self.seal();
        }
        // Where `from` is among the sealed packets, then the open ones.
        let mut at = self.skip + from.saturating_sub(self.first) as usize;
        let mut chunks = Vec::new();
        for c in &self.sealed {
            if chunks.is_empty() && at >= c.len() {
                at -= c.len();
            } else {
                chunks.push(c.clone());
            }
        }
        let skip = if chunks.is_empty() {
            0
        } else {
            std::mem::take(&mut at)
        };
        if at < self.open.len() {
            chunks.push(self.open[at..].into());
        }
        Backlog { chunks, skip }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(r: &mut Ring<u32>, track: usize) -> Vec<u32> {
        r.backlog(track).iter().copied().collect()
    }

    #[test]
    fn a_viewer_joins_at_the_start_of_the_last_key_frame() {
        let mut r = Ring::new(Some(0), 1 << 20);
        r.push(0, 0, false, 10, 1);
        assert!(tags(&mut r, 0).is_empty(), "no key frame yet");
        // SPS, PPS (no key in the first packet of the unit), IDR.
        r.push(0, 90, false, 10, 2);
        r.push(1, 5, false, 10, 3);
        r.push(0, 90, true, 10, 4);
        r.push(0, 180, false, 10, 5);
        assert_eq!(tags(&mut r, 0), [2, 4, 5]);
        assert_eq!(tags(&mut r, 1), [3]);
        // The next key frame drops the one before.
        r.push(0, 270, true, 10, 6);
        r.push(0, 270, true, 10, 7);
        assert_eq!(tags(&mut r, 0), [6, 7]);
        assert!(tags(&mut r, 1).is_empty());
        assert_eq!(r.bytes(), 20);
    }

    #[test]
    fn the_budget_bounds_what_is_held() {
        let mut r = Ring::new(Some(0), 35);
        r.push(0, 0, true, 10, 1);
        r.push(0, 1, false, 10, 2);
        r.push(0, 2, false, 10, 3);
        assert_eq!(tags(&mut r, 0), [1, 2, 3]);
        r.push(0, 3, false, 10, 4);
        assert!(r.bytes() <= 35);
        assert!(tags(&mut r, 0).is_empty(), "the join point fell out");
        r.push(0, 4, true, 10, 5);
        assert_eq!(tags(&mut r, 0), [5]);
    }

    #[test]
    fn audio_only_joins_at_the_newest_packet() {
        let mut r = Ring::new(None, 1 << 20);
        r.push(0, 0, false, 10, 1);
        r.push(0, 1, false, 10, 2);
        assert_eq!(tags(&mut r, 0), [2]);
    }

    #[test]
    fn viewers_share_the_chunks() {
        let mut r = Ring::new(Some(0), 1 << 20);
        for i in 0..1000 {
            r.push(0, i / 10, i % 500 == 0, 10, i);
        }
        let (a, b) = (r.backlog(0), r.backlog(0));
        assert_eq!(a.iter().count(), 500);
        assert!(
            a.chunks.len() <= 500 / CHUNK + 2,
            "{} chunks",
            a.chunks.len()
        );
        let shared = a
            .chunks
            .iter()
            .zip(&b.chunks)
            .all(|(x, y)| Arc::ptr_eq(x, y));
        assert!(shared, "a second viewer gets the same chunks");
    }

    /// The backlog as a model: a track's packets from the last key unit's
    /// start on, when that start is within the budget's suffix.
    fn expected(pushes: &[(usize, u32, bool, usize)], track: usize, max: usize) -> Vec<usize> {
        let (mut unit, mut cut) = (None::<(u32, usize, bool)>, None);
        for (i, &(t, ts, key, _)) in pushes.iter().enumerate() {
            if t != 0 {
                continue;
            }
            if unit.is_none_or(|u| u.0 != ts) {
                unit = Some((ts, i, false));
            }
            if let Some(u) = unit.as_mut().filter(|u| key && !u.2) {
                u.2 = true;
                cut = Some(u.1);
            }
        }
        let mut held = pushes.len();
        let mut sum = 0;
        while held > 0 && sum + pushes[held - 1].3 <= max {
            held -= 1;
            sum += pushes[held].3;
        }
        match cut.filter(|&c| c >= held) {
            Some(c) => (c..pushes.len())
                .filter(|&i| pushes[i].0 == track)
                .collect(),
            None => vec![],
        }
    }

    proptest::proptest! {
        #[test]
        fn the_backlog_is_the_tracks_packets_since_the_last_key_unit(
            ops in proptest::collection::vec((0usize..2, 0u32..6, proptest::prelude::any::<bool>(), 1usize..50), 0..400),
            joins in proptest::collection::vec(0usize..400, 0..8),
            max in 100usize..8000,
        ) {
            let mut r = Ring::new(Some(0), max);
            for (i, &(track, ts, key, bytes)) in ops.iter().enumerate() {
                r.push(track, ts, key, bytes, i);
                proptest::prop_assert!(r.bytes() <= max);
                if joins.contains(&i) {
                    for t in 0..2 {
                        let got: Vec<usize> = r.backlog(t).iter().copied().collect();
                        proptest::prop_assert_eq!(got, expected(&ops[..=i], t, max));
                    }
                }
            }
        }
    }
}

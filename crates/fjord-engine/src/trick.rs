//! Trick play (RFC 2326 `Scale` other than 1): fast forward and rewind
//! from the key frames the index already lists. Pure: which key frame a
//! session sends next and when each of its packets is due, from the
//! track's sync table and packet records; no socket, clock or disk here.
//!
//! Times come in two kinds. *npt* is the title timeline. *Stream time* is
//! the session's RTP clock: it runs at wall speed, and npt `origin` is
//! stream time `origin`. Key frame at npt `t` is due at stream time
//! `origin + |t - origin| / |scale|` and all its packets carry that RTP
//! timestamp, so a player shows the key frames in real time whichever way
//! the title runs. A key frame's packets leave at 1.25 times the track's
//! mean packet rate, from its due time or when the previous one is out;
//! the next key frame is the first one (in the direction of play) that is
//! due then or at most [`SLACK_NS`] before — so the stream never runs
//! faster than 1.25 times the track's bit rate, and key frames are dropped
//! when they could not all be sent.
//!
//! A track without sync points (audio) sends nothing while the title runs
//! at another scale; it ends when the npt reaches the end of the range.

use fjord_media::{
    index::Track,
    plan::{FLAG_KEY_FRAME_END, FLAG_MARKER, PacketRecord, rtp_ticks},
};

/// The largest `|Scale|` a PLAY may ask for.
pub const MAX_SCALE: i32 = 16;
/// A key frame's packets leave this much faster than the track's mean
/// packet rate (so a trick stream's bit rate stays within 1.25 times the
/// track's).
const PACE: f64 = 1.25;
/// A key frame this late when the previous one is out still leaves (the
/// stream falls behind by at most this).
const SLACK_NS: u64 = 100_000_000;

#[derive(Clone, Debug)]
pub(crate) struct Trick {
    scale: i32,
    /// npt (and stream time) of the first key frame.
    origin_ns: u64,
    /// Where the range ends on the npt timeline: after it going forward,
    /// before it going back.
    stop_ns: u64,
    /// Stream time between two packets of a key frame.
    gap_ns: u64,
    clock_rate: u32,
    /// The flag of the record a key frame ends in: the marker bit (RTP
    /// payloads of one frame), or, for MPEG-TS, the key frame's end.
    end_flag: u8,
    /// Next RTP sequence number.
    pub seq: u16,
    /// The key frame being sent; `None` when the track has none left.
    frame: Option<Frame>,
    /// Stream time the last packet sent was due.
    last_due_ns: u64,
    /// The track has no key frames: it sends nothing.
    silent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frame {
    /// Index in the sync table.
    sync: usize,
    first: u32,
    /// The next sync point's packet: a key frame never runs past it.
    limit: u32,
    /// Stream time its first packet leaves.
    due_ns: u64,
    /// Stream time it is shown (its RTP timestamp).
    show_ns: u64,
}

impl Trick {
    /// Trick play of `track` at `scale` from its key frame at or before
    /// npt `at_ns`, to npt `stop_ns` (the title's end or start when
    /// `None`). The caller sets the first sequence number ([`Trick::seq`]).
    pub(crate) fn new(
        track: Track<'_>,
        scale: i32,
        at_ns: u64,
        stop_ns: Option<u64>,
        duration_ns: u64,
    ) -> Trick {
        let count = track.packet_count().max(1) as f64;
        let gap_ns = (duration_ns as f64 / count / PACE) as u64;
        let end_flag = if track.encoding() == "MP2T" {
            FLAG_KEY_FRAME_END
        } else {
            FLAG_MARKER
        };
        let (sync, origin_ns) = match sync_at_or_before(track, at_ns) {
            Some(i) => (Some(i), track.sync_point(i).map_or(at_ns, |s| s.time_ns)),
            None => (None, at_ns),
        };
        let stop_ns = stop_ns.unwrap_or(if scale > 0 { duration_ns } else { 0 });
        let mut t = Trick {
            scale,
            origin_ns,
            stop_ns,
            gap_ns,
            clock_rate: track.clock_rate(),
            end_flag,
            seq: 0,
            frame: None,
            last_due_ns: origin_ns,
            silent: sync.is_none(),
        };
        t.frame = sync.and_then(|i| t.frame_at(track, i, 0));
        t
    }

    /// npt of the first key frame: where the PLAY starts.
    pub(crate) fn origin_ns(&self) -> u64 {
        self.origin_ns
    }

    /// How many times faster than the stream's clock the title runs
    /// forward; 1 in rewind (it runs back: reading ahead does not help).
    pub(crate) fn forward(&self) -> u32 {
        self.scale.max(1).unsigned_abs()
    }

    /// Where the range ends on the npt timeline.
    pub(crate) fn stop_ns(&self) -> u64 {
        self.stop_ns
    }

    /// The stream time npt `ns` is reached at.
    fn stream_ns(&self, ns: u64) -> u64 {
        self.origin_ns + ns.abs_diff(self.origin_ns) / u64::from(self.scale.unsigned_abs())
    }

    /// Where playback stands on the npt timeline at stream time `stream_ns`
    /// (within the range).
    pub(crate) fn npt(&self, stream_ns: u64) -> u64 {
        let run = stream_ns.saturating_sub(self.origin_ns) * u64::from(self.scale.unsigned_abs());
        if self.scale > 0 {
            self.origin_ns.saturating_add(run).min(self.stop_ns)
        } else {
            self.origin_ns.saturating_sub(run).max(self.stop_ns)
        }
    }

    /// The first packet of the key frame being sent; `None` when done.
    pub(crate) fn first_packet(&self) -> Option<u32> {
        self.frame.map(|f| f.first)
    }

    /// One past the last packet the current key frame may have; `None`
    /// when done.
    pub(crate) fn limit(&self) -> Option<u32> {
        self.frame.map(|f| f.limit)
    }

    /// Stream time packet `i` of the current key frame is due.
    pub(crate) fn due_ns(&self, i: u32) -> u64 {
        self.frame.map_or(self.last_due_ns, |f| {
            f.due_ns + u64::from(i.saturating_sub(f.first)) * self.gap_ns
        })
    }

    /// RTP timestamp (before the session's offset) of the current key
    /// frame's packets.
    pub(crate) fn rtp_ts(&self) -> u32 {
        let show = self.frame.map_or(self.last_due_ns, |f| f.show_ns);
        rtp_ticks(show, self.clock_rate)
    }

    /// Whether packet `i` (record `rec`) is the last of its key frame.
    pub(crate) fn ends_frame(&self, i: u32, rec: &PacketRecord) -> bool {
        rec.flags & self.end_flag != 0 || self.frame.is_none_or(|f| i + 1 >= f.limit)
    }

    /// Packet `i` (the last of its key frame when `ended`) left: move on,
    /// to the next key frame when it was the last. Returns whether the
    /// session moved to another packet than `i + 1`.
    pub(crate) fn sent(&mut self, track: Track<'_>, i: u32, ended: bool) -> bool {
        self.last_due_ns = self.due_ns(i);
        self.seq = self.seq.wrapping_add(1);
        let Some(f) = self.frame.filter(|_| ended) else {
            return false;
        };
        let done_ns = self.last_due_ns + self.gap_ns;
        self.frame = self
            .next_sync(track, f.sync, done_ns)
            .and_then(|j| self.frame_at(track, j, done_ns));
        true
    }

    /// The key frame after sync point `sync` in the direction of play
    /// that is due at stream time `done_ns` or at most [`SLACK_NS`] before.
    fn next_sync(&self, track: Track<'_>, sync: usize, done_ns: u64) -> Option<usize> {
        let target = self.npt(done_ns.saturating_sub(SLACK_NS).max(self.origin_ns));
        if self.scale > 0 {
            let j = sync_at_or_after(track, target).max(sync + 1);
            (j < track.sync_count()).then_some(j)
        } else {
            let j = sync_at_or_before(track, target)?.min(sync.checked_sub(1)?);
            Some(j)
        }
    }

    /// Key frame `i` of the sync table, leaving at stream time `free_ns` at
    /// the earliest; `None` when it lies outside the range.
    fn frame_at(&self, track: Track<'_>, i: usize, free_ns: u64) -> Option<Frame> {
        let s = track.sync_point(i)?;
        let inside = if self.scale > 0 {
            s.time_ns < self.stop_ns
        } else {
            s.time_ns >= self.stop_ns
        };
        let count = track.packet_count() as u32;
        let limit = track
            .sync_point(i + 1)
            .map_or(count, |n| n.packet.min(count));
        let show_ns = self.stream_ns(s.time_ns);
        (inside && s.packet < limit).then_some(Frame {
            sync: i,
            first: s.packet,
            limit,
            due_ns: show_ns.max(free_ns),
            show_ns,
        })
    }

    /// Stream time of the last packet sent, or, for a track that sends
    /// none, when the npt reaches the end of the range.
    pub(crate) fn last_due_ns(&self) -> u64 {
        if self.silent {
            self.stream_ns(self.stop_ns)
        } else {
            self.last_due_ns
        }
    }
}

/// The index of the last sync point at or before npt `ns` (the first one
/// when `ns` is before all); `None` for a track without sync points.
fn sync_at_or_before(track: Track<'_>, ns: u64) -> Option<usize> {
    let n = track.sync_count();
    (n > 0).then(|| track.sync_partition_point(|t| t <= ns).saturating_sub(1))
}

/// The index of the first sync point at or after npt `ns` (the count when
/// none).
fn sync_at_or_after(track: Track<'_>, ns: u64) -> usize {
    track.sync_partition_point(|t| t < ns)
}

#[cfg(test)]
pub(crate) mod tests {
    use fjord_media::{
        index::Index,
        plan::{FLAG_MARKER, PacketRecord, SyncPoint},
        synthetic::write_video_track_with_sync,
    };

    use super::*;

    const MS: u64 = 1_000_000;
    /// Frames per second and per GOP; packets of a key frame and of any
    /// other frame.
    const FPS: u64 = 25;
    const GOP: u64 = 25;
    const KEY_PACKETS: u64 = 10;
    const OTHER_PACKETS: u64 = 2;

    /// A 10-second video track: a key frame (10 packets) every second,
    /// 24 smaller frames (2 packets) between, the marker bit on each
    /// frame's last packet. Packet `i` carries file bytes `[i * 100, +100)`,
    /// each of them `i % 256`.
    pub(crate) fn gop_title(dir: &std::path::Path) -> (std::path::PathBuf, Index) {
        let media = dir.join("gop.h264");
        let (mut packets, mut sync) = (vec![], vec![]);
        for f in 0..10 * FPS {
            let ns = f * 1000 * MS / FPS;
            let key = f % GOP == 0;
            if key {
                sync.push(SyncPoint {
                    packet: packets.len() as u32,
                    time_ns: ns,
                });
            }
            let n = if key { KEY_PACKETS } else { OTHER_PACKETS };
            for k in 0..n {
                let i = packets.len() as u64;
                let mut rec =
                    PacketRecord::file_run(ns, (ns / 1000 * 90 / 1000) as u32, i * 100, 100);
                if k + 1 == n {
                    rec.flags |= FLAG_MARKER;
                }
                packets.push(rec);
            }
        }
        let data: Vec<u8> = (0..packets.len() * 100).map(|b| (b / 100) as u8).collect();
        let index = write_video_track_with_sync(&media, &data, packets, sync, 10_000 * MS).unwrap();
        (media, index)
    }

    /// Plays `t` to its end as the engine would: (npt of each key frame
    /// sent, stream time its first packet was due, packets it sent).
    fn play_out(track: Track<'_>, mut t: Trick) -> Vec<(u64, u64, u32)> {
        let mut out = vec![];
        while let Some(first) = t.first_packet() {
            let npt = track
                .sync_points()
                .find(|s| s.packet == first)
                .unwrap()
                .time_ns;
            let due = t.due_ns(first);
            let ts = t.rtp_ts();
            let mut i = first;
            loop {
                assert_eq!(t.rtp_ts(), ts, "one timestamp per key frame");
                let rec = track.packet(i as usize).unwrap();
                let ended = t.ends_frame(i, &rec);
                let jumped = t.sent(track, i, ended);
                assert_eq!(jumped, ended);
                i += 1;
                if ended {
                    break;
                }
            }
            out.push((npt, due, i - first));
        }
        out
    }

    #[test]
    fn fast_forward_sends_each_key_frame_whole_in_order_at_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let (_, index) = gop_title(dir.path());
        let track = index.track(0).unwrap();
        let t = Trick::new(track, 4, 1_500 * MS, None, 10_000 * MS);
        assert_eq!(t.origin_ns(), 1_000 * MS, "from the key frame at or before");
        let sent = play_out(track, t);
        let npts: Vec<u64> = sent.iter().map(|s| s.0 / 1000 / MS).collect();
        assert_eq!(npts, (1..10).collect::<Vec<_>>());
        for (npt, due, n) in sent {
            assert_eq!(n, KEY_PACKETS as u32, "the whole key frame, nothing else");
            assert_eq!(due, 1_000 * MS + (npt - 1_000 * MS) / 4);
        }
    }

    #[test]
    fn rewind_runs_the_key_frames_backwards_on_a_clock_that_goes_forward() {
        let dir = tempfile::tempdir().unwrap();
        let (_, index) = gop_title(dir.path());
        let track = index.track(0).unwrap();
        let t = Trick::new(track, -2, 8_200 * MS, None, 10_000 * MS);
        let sent = play_out(track, t.clone());
        let npts: Vec<u64> = sent.iter().map(|s| s.0 / 1000 / MS).collect();
        assert_eq!(npts, (0..=8).rev().collect::<Vec<_>>());
        assert!(sent.windows(2).all(|w| w[0].1 < w[1].1), "due times rise");
        assert_eq!(t.npt(8_000 * MS + 1_000 * MS), 6_000 * MS);
        assert_eq!(t.npt(u64::MAX / 4), 0, "never before the start");
    }

    #[test]
    fn a_range_stops_the_trick_stream_either_way() {
        let dir = tempfile::tempdir().unwrap();
        let (_, index) = gop_title(dir.path());
        let track = index.track(0).unwrap();
        let fwd = play_out(
            track,
            Trick::new(track, 2, 2_000 * MS, Some(5_000 * MS), 10_000 * MS),
        );
        assert_eq!(
            fwd.iter().map(|s| s.0 / 1000 / MS).collect::<Vec<_>>(),
            [2, 3, 4]
        );
        let back = play_out(
            track,
            Trick::new(track, -2, 7_000 * MS, Some(4_000 * MS), 10_000 * MS),
        );
        assert_eq!(
            back.iter().map(|s| s.0 / 1000 / MS).collect::<Vec<_>>(),
            [7, 6, 5, 4]
        );
    }

    #[test]
    fn key_frames_that_cannot_all_leave_are_dropped_within_the_bit_rate() {
        let dir = tempfile::tempdir().unwrap();
        let (_, index) = gop_title(dir.path());
        let track = index.track(0).unwrap();
        let sent = play_out(track, Trick::new(track, 16, 0, None, 10_000 * MS));
        // 16x: a key frame due every 62.5 ms, but one takes 10 packets at
        // 1.25 times the track's 58 packets/s (138 ms): about every other
        // leaves.
        assert!((3..=6).contains(&sent.len()), "{sent:?}");
        let packets: u64 = sent.iter().map(|s| u64::from(s.2)).sum();
        let span_ns = sent.last().unwrap().1 + 138 * MS;
        let rate = packets as f64 / (span_ns as f64 / 1e9);
        let mean = (KEY_PACKETS + (GOP - 1) * OTHER_PACKETS) as f64;
        assert!(rate <= 1.26 * mean, "{rate} packets/s");
        for w in sent.windows(2) {
            assert!(
                w[1].1 >= w[0].1 + 137 * MS,
                "a key frame leaves after the previous is out"
            );
        }
    }
}

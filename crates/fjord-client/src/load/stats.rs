//! Per-session accounting of what arrived, pure: sequence continuity (loss,
//! reordering, duplicates across the 16-bit wrap), RTP timestamp order,
//! lateness against each packet's schedule and RFC 3550 §A.8 interarrival
//! jitter. Times are nanoseconds on one clock; no allocation.

/// How many sequence numbers below the highest one a duplicate can still be
/// told from a late original.
pub const SEQ_WINDOW: u64 = 1024;

const WORDS: usize = (SEQ_WINDOW / 64) as usize;

/// What one packet's sequence number was, relative to those before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqClass {
    /// The first packet, or one above the highest so far (possibly after a gap).
    InOrder,
    /// Below the highest so far and not seen before.
    Reordered,
    /// Seen before.
    Duplicate,
}

/// Sequence accounting on extended (wrap-free) sequence numbers.
#[derive(Debug, Clone, Default)]
pub struct SeqStats {
    started: bool,
    /// Extended sequence number of the first packet of the current run.
    base: u64,
    /// Highest extended sequence number seen in the current run.
    highest: u64,
    /// Bit `s % SEQ_WINDOW` set: extended number `s` (within the window
    /// below `highest`) arrived.
    seen: [u64; WORDS],
    /// Expected packets of runs closed by [`SeqStats::resync`].
    expected_before: u64,
    /// Every packet, duplicates included.
    pub received: u64,
    /// Distinct packets.
    pub unique: u64,
    /// Packets with a sequence number below the highest seen, not duplicates.
    pub reordered: u64,
    /// Packets seen twice (within [`SEQ_WINDOW`]).
    pub duplicates: u64,
}

impl SeqStats {
    fn bit(&self, s: u64) -> bool {
        let i = (s % SEQ_WINDOW) as usize;
        self.seen[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, s: u64, on: bool) {
        let i = (s % SEQ_WINDOW) as usize;
        if on {
            self.seen[i / 64] |= 1 << (i % 64);
        } else {
            self.seen[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Accounts one packet.
    pub fn on_packet(&mut self, seq: u16) -> SeqClass {
        self.received += 1;
        if !self.started {
            self.started = true;
            // Start high so the extended numbers never go below zero.
            self.base = (1 << 32) | u64::from(seq);
            self.highest = self.base;
            self.seen = [0; WORDS];
            self.set(self.base, true);
            self.unique += 1;
            return SeqClass::InOrder;
        }
        let delta = i64::from(seq.wrapping_sub(self.highest as u16) as i16);
        let ext = self.highest.wrapping_add_signed(delta);
        if delta > 0 {
            if delta as u64 >= SEQ_WINDOW {
                self.seen = [0; WORDS];
            } else {
                for s in self.highest + 1..ext {
                    self.set(s, false);
                }
            }
            self.highest = ext;
            self.set(ext, true);
            self.unique += 1;
            return SeqClass::InOrder;
        }
        if ext < self.base {
            // Older than the first packet of the run: late, never expected.
            self.reordered += 1;
            self.unique += 1;
            self.expected_before += 1;
            return SeqClass::Reordered;
        }
        if self.highest - ext < SEQ_WINDOW && self.bit(ext) {
            self.duplicates += 1;
            return SeqClass::Duplicate;
        }
        if self.highest - ext < SEQ_WINDOW {
            self.set(ext, true);
        }
        self.reordered += 1;
        self.unique += 1;
        SeqClass::Reordered
    }

    /// Accounts a packet rebuilt from a repair stream rather than received:
    /// it fills its gap (so it is not lost) but was neither received nor
    /// reordered, however long after its neighbours it was rebuilt.
    pub fn on_recovered(&mut self, seq: u16) {
        let counts = (self.received, self.reordered, self.duplicates);
        self.on_packet(seq);
        (self.received, self.reordered, self.duplicates) = counts;
    }

    /// Packets expected: from the first to the highest sequence number of
    /// each run.
    pub fn expected(&self) -> u64 {
        let current = if self.started {
            self.highest - self.base + 1
        } else {
            0
        };
        self.expected_before + current
    }

    /// Packets lost: expected but never received (never negative).
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.unique)
    }

    /// The highest sequence number with its wrap count in the upper 16 bits,
    /// as a receiver report states it (RFC 3550 §6.4.1).
    pub fn extended_highest(&self) -> u32 {
        if !self.started {
            return 0;
        }
        let cycles = (self.highest >> 16) - (self.base >> 16);
        ((cycles as u32) << 16) | (self.highest as u32 & 0xffff)
    }

    /// Starts a new run: the sender renumbered (a new `RTP-Info` seq).
    pub fn resync(&mut self) {
        self.expected_before = self.expected();
        self.started = false;
    }
}

/// Lateness and jitter of one session's packets against its schedule:
/// packet `p` is due at `anchor arrival + (ts(p) - anchor ts) / clock rate`,
/// the anchor being the first packet (again after a re-anchor).
#[derive(Debug, Clone)]
pub struct Timing {
    clock_rate: i64,
    late_after_ns: i64,
    anchor: Option<(i64, u32)>,
    prev_transit: Option<i64>,
    /// Highest timestamp offset from the anchor among in-order packets.
    last_in_order: Option<i64>,
    /// Packets more than the threshold after their schedule.
    pub late: u64,
    /// The largest `arrival - schedule` seen (negative: all early).
    pub max_lateness_ns: i64,
    /// RFC 3550 §A.8 running estimate, nanoseconds.
    pub jitter_ns: f64,
    /// The largest value the estimate reached.
    pub max_jitter_ns: f64,
    /// In-order packets whose timestamp is lower than their predecessor's.
    pub timestamp_backwards: u64,
    /// The longest gap between two consecutive arrivals beyond the media
    /// time between them (how much a packet's lateness grew over its
    /// predecessor's), ns; 0 until two packets arrived.
    pub max_stall_ns: i64,
}

impl Timing {
    /// A clock of `clock_rate` Hz; packets later than `late_after_ns` count
    /// as late.
    pub fn new(clock_rate: u32, late_after_ns: i64) -> Self {
        Timing {
            clock_rate: i64::from(clock_rate.max(1)),
            late_after_ns,
            anchor: None,
            prev_transit: None,
            last_in_order: None,
            late: 0,
            max_lateness_ns: i64::MIN,
            jitter_ns: 0.0,
            max_jitter_ns: 0.0,
            timestamp_backwards: 0,
            max_stall_ns: 0,
        }
    }

    /// The next packet becomes the anchor (a new PLAY: new timeline).
    pub fn reanchor(&mut self) {
        self.anchor = None;
        self.prev_transit = None;
        self.last_in_order = None;
    }

    /// Whether a packet has anchored the schedule.
    pub fn anchored(&self) -> bool {
        self.anchor.is_some()
    }

    /// Accounts one packet that arrived at `arrival_ns` with RTP timestamp
    /// `ts`; `in_order` says whether its sequence number was the highest yet.
    /// Returns its lateness in ns (negative: early).
    pub fn on_packet(&mut self, arrival_ns: i64, ts: u32, in_order: bool) -> i64 {
        let (a0, ts0) = *self.anchor.get_or_insert((arrival_ns, ts));
        let ticks = i64::from(ts.wrapping_sub(ts0) as i32);
        let schedule = a0 + ticks * 1_000_000_000 / self.clock_rate;
        let lateness = arrival_ns - schedule;
        if lateness > self.late_after_ns {
            self.late += 1;
        }
        self.max_lateness_ns = self.max_lateness_ns.max(lateness);
        // Transit time differences: arrival minus media time, on any origin.
        if let Some(prev) = self.prev_transit {
            self.max_stall_ns = self.max_stall_ns.max(lateness - prev);
            let d = (lateness - prev).abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
            self.max_jitter_ns = self.max_jitter_ns.max(self.jitter_ns);
        }
        self.prev_transit = Some(lateness);
        if in_order {
            if self.last_in_order.is_some_and(|t| ticks < t) {
                self.timestamp_backwards += 1;
            }
            self.last_in_order = Some(ticks);
        }
        lateness
    }

    /// The jitter estimate in timestamp units, as a receiver report states it.
    pub fn jitter_ticks(&self) -> u32 {
        (self.jitter_ns * self.clock_rate as f64 / 1e9) as u32
    }
}

/// Thresholds of [`LateBins`], ms: a packet more than this late counts.
pub const LATE_THRESHOLDS_MS: [u64; 3] = [2, 50, 200];

/// Packets per lateness threshold ([`LATE_THRESHOLDS_MS`]), in all and per
/// second of the run.
#[derive(Debug, Clone, Default)]
pub struct LateBins {
    /// Packets more than each threshold late.
    pub over: [u64; 3],
    /// Per second since `t0` (only when the timeline is kept).
    pub seconds: Vec<SecondBin>,
    t0: i64,
    keep_timeline: bool,
}

/// One second of a run: packets, packets over each threshold, the worst
/// lateness.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SecondBin {
    pub packets: u64,
    pub over: [u64; 3],
    /// The largest lateness in this second, ns (`i64::MIN`: no packet).
    pub max_lateness_ns: i64,
}

impl LateBins {
    /// Counts from time `t0` (ns); with `timeline`, also per second.
    pub fn new(t0: i64, timeline: bool) -> LateBins {
        LateBins {
            t0,
            keep_timeline: timeline,
            ..LateBins::default()
        }
    }

    /// One packet that arrived at `arrival_ns`, `lateness_ns` late.
    #[inline]
    pub fn on_packet(&mut self, arrival_ns: i64, lateness_ns: i64) {
        let mut over = [0u64; 3];
        for (o, t) in over.iter_mut().zip(LATE_THRESHOLDS_MS) {
            *o = u64::from(lateness_ns > t as i64 * 1_000_000);
        }
        for (a, o) in self.over.iter_mut().zip(over) {
            *a += o;
        }
        if !self.keep_timeline || arrival_ns < self.t0 {
            return;
        }
        let sec = ((arrival_ns - self.t0) / 1_000_000_000) as usize;
        // Bounded: a run of a day at most.
        if sec >= 86_400 {
            return;
        }
        if self.seconds.len() <= sec {
            self.seconds.resize(
                sec + 1,
                SecondBin {
                    max_lateness_ns: i64::MIN,
                    ..SecondBin::default()
                },
            );
        }
        let b = &mut self.seconds[sec];
        b.packets += 1;
        for (a, o) in b.over.iter_mut().zip(over) {
            *a += o;
        }
        b.max_lateness_ns = b.max_lateness_ns.max(lateness_ns);
    }
}

/// The segments of a datagram read from a socket with `UDP_GRO`: the kernel
/// glued `gso_size`-byte packets (the last may be shorter) together; 0 means
/// one packet.
pub fn gro_segments(datagram: &[u8], gso_size: usize) -> std::slice::Chunks<'_, u8> {
    let size = if gso_size == 0 {
        datagram.len().max(1)
    } else {
        gso_size
    };
    datagram.chunks(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(s: &mut SeqStats, seqs: &[u16]) -> Vec<SeqClass> {
        seqs.iter().map(|&q| s.on_packet(q)).collect()
    }

    #[test]
    fn in_order_across_the_wrap_loses_nothing() {
        let mut s = SeqStats::default();
        let seqs: Vec<u16> = (0..200u32).map(|i| (65500 + i) as u16).collect();
        assert!(feed(&mut s, &seqs).iter().all(|c| *c == SeqClass::InOrder));
        assert_eq!(
            (s.expected(), s.lost(), s.reordered, s.duplicates),
            (200, 0, 0, 0)
        );
        assert_eq!(s.extended_highest(), (1 << 16) | 163);
    }

    #[test]
    fn gaps_reordering_and_duplicates_across_the_wrap() {
        let mut s = SeqStats::default();
        // 65533, 65534, [65535 lost], 0, 2, 1 (late), 1 (dup), 3, 3 (dup), [4, 5 lost], 6
        let c = feed(&mut s, &[65533, 65534, 0, 2, 1, 1, 3, 3, 6]);
        use SeqClass::*;
        assert_eq!(
            c,
            [
                InOrder, InOrder, InOrder, InOrder, Reordered, Duplicate, InOrder, Duplicate,
                InOrder
            ]
        );
        assert_eq!(s.expected(), 10); // 65533 ..= 6 (wrapped)
        assert_eq!(s.unique, 7);
        assert_eq!(s.lost(), 3);
        assert_eq!((s.reordered, s.duplicates, s.received), (1, 2, 9));
        // The lost 65535 arriving late fills its gap.
        assert_eq!(s.on_packet(65535), Reordered);
        assert_eq!(s.lost(), 2);
    }

    #[test]
    fn a_big_jump_forward_is_loss_and_clears_the_window() {
        let mut s = SeqStats::default();
        feed(&mut s, &[10, 11]);
        assert_eq!(s.on_packet(11 + 5000), SeqClass::InOrder);
        assert_eq!(s.lost(), 4999);
        // 12 is now far below the window: late, not a duplicate.
        assert_eq!(s.on_packet(12), SeqClass::Reordered);
        assert_eq!(s.lost(), 4998);
    }

    #[test]
    fn older_than_the_first_packet_is_reordered_not_negative_loss() {
        let mut s = SeqStats::default();
        feed(&mut s, &[100, 101]);
        assert_eq!(s.on_packet(99), SeqClass::Reordered);
        assert_eq!((s.expected(), s.lost(), s.reordered), (3, 0, 1));
    }

    #[test]
    fn a_recovered_packet_fills_its_gap_without_counting_as_received() {
        let mut s = SeqStats::default();
        // 100 was dropped before the first packet; 103 within the run.
        feed(&mut s, &[101, 102, 104]);
        assert_eq!(s.lost(), 1);
        s.on_recovered(103);
        s.on_recovered(100);
        assert_eq!(
            (s.lost(), s.received, s.reordered, s.duplicates),
            (0, 3, 0, 0)
        );
        assert_eq!(s.unique, 5);
    }

    #[test]
    fn resync_starts_a_new_run_without_counting_the_jump() {
        let mut s = SeqStats::default();
        feed(&mut s, &[1, 2, 4]);
        s.resync();
        feed(&mut s, &[40000, 40001]);
        assert_eq!((s.expected(), s.unique, s.lost()), (6, 5, 1));
    }

    #[test]
    fn jitter_matches_a_hand_computed_example() {
        // 90 kHz, packets 20 ms apart (1800 ticks); transit deviations in ms:
        // arrivals at 0, 20, 45, 60, 80 ms → lateness 0, 0, 5, 0, 0 ms.
        // D: 0, 5, 5, 0 ms; J: 0, 5/16, 5/16 + (5 - 5/16)/16, that × 15/16.
        let mut t = Timing::new(90_000, 2_000_000);
        let ms = 1_000_000i64;
        let base = 1_000 * ms;
        for (i, a) in [0, 20, 45, 60, 80].iter().enumerate() {
            t.on_packet(
                base + a * ms,
                4_000_000_000u32.wrapping_add(1800 * i as u32),
                true,
            );
        }
        let j2 = 5.0 / 16.0;
        let j3 = j2 + (5.0 - j2) / 16.0;
        let j4 = j3 * 15.0 / 16.0;
        assert!((j4 - 0.567_626_953_125f64).abs() < 1e-12);
        assert!(
            (t.jitter_ns / 1e6 - j4).abs() < 1e-9,
            "{} vs {j4}",
            t.jitter_ns / 1e6
        );
        assert!((t.max_jitter_ns / 1e6 - j3).abs() < 1e-9);
        assert_eq!(t.jitter_ticks(), (j4 * 90.0) as u32);
        // One packet 5 ms late (> 2 ms); the worst lateness is 5 ms.
        assert_eq!(t.late, 1);
        assert_eq!(t.max_lateness_ns, 5 * ms);
    }

    #[test]
    fn lateness_uses_the_anchor_across_the_timestamp_wrap_and_reanchors() {
        let ms = 1_000_000i64;
        let mut t = Timing::new(90_000, 2 * ms);
        let ts0 = u32::MAX - 900; // wraps 10 ms in
        assert_eq!(t.on_packet(0, ts0, true), 0);
        // 40 ms of media arriving 30 ms after the anchor: 10 ms early.
        assert_eq!(t.on_packet(30 * ms, ts0.wrapping_add(3600), true), -10 * ms);
        // 50 ms of media at 52 ms: exactly 2 ms late, not "more than 2 ms".
        assert_eq!(t.on_packet(52 * ms, ts0.wrapping_add(4500), true), 2 * ms);
        assert_eq!(t.late, 0);
        // 60 ms at 62.001 ms: late.
        t.on_packet(62 * ms + 1_000, ts0.wrapping_add(5400), true);
        assert_eq!(t.late, 1);
        // A new PLAY restarts the timeline at an unrelated timestamp.
        t.reanchor();
        assert_eq!(t.on_packet(10_000 * ms, 12345, true), 0);
        assert_eq!(t.on_packet(10_040 * ms, 12345 + 3600, true), 0);
        assert_eq!(t.late, 1);
        assert_eq!(t.timestamp_backwards, 0);
        t.on_packet(10_050 * ms, 12345 + 1800, true);
        assert_eq!(t.timestamp_backwards, 1);
    }

    #[test]
    fn stalls_and_late_bins() {
        let ms = 1_000_000i64;
        let mut t = Timing::new(90_000, 2 * ms);
        let mut bins = LateBins::new(0, true);
        // 10 ms of media apart; the third arrives 300 ms after the second.
        for (a, ts) in [
            (0, 0u32),
            (10 * ms, 900),
            (310 * ms, 1800),
            (1_320 * ms, 2700),
        ] {
            let l = t.on_packet(a, ts, true);
            bins.on_packet(a, l);
        }
        // Lateness 290 ms, then 1290 ms: the second gap grew it by 1 s.
        assert_eq!(t.max_stall_ns, 1000 * ms);
        // Lateness 0, 0, 290, 1290 ms.
        assert_eq!(bins.over, [2, 2, 2]);
        assert_eq!(bins.seconds.len(), 2);
        assert_eq!(bins.seconds[0].packets, 3);
        assert_eq!(bins.seconds[0].over, [1, 1, 1]);
        assert_eq!(bins.seconds[0].max_lateness_ns, 290 * ms);
        assert_eq!(bins.seconds[1].max_lateness_ns, 1290 * ms);
    }

    #[test]
    fn gro_datagrams_split_into_segments() {
        let d: Vec<u8> = (0..=9).collect();
        let segs: Vec<&[u8]> = gro_segments(&d, 4).collect();
        assert_eq!(segs, [&[0, 1, 2, 3][..], &[4, 5, 6, 7], &[8, 9]]);
        let whole: Vec<&[u8]> = gro_segments(&d, 0).collect();
        assert_eq!(whole, [&d[..]]);
        let exact: Vec<&[u8]> = gro_segments(&d[..8], 4).collect();
        assert_eq!(exact.len(), 2);
        assert_eq!(gro_segments(&[], 0).count(), 0);
    }
}

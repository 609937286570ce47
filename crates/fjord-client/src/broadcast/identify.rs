//! Which packet of the title a datagram is: how RTP numbers the title's
//! packets ([`Numbering`]), [`identify`] from a sequence number and a
//! timestamp, and which packets each channel carries.

use std::ops::Range;

use fjord_broadcast::Plan;
use fjord_broadcast::schedule::Schedule;

use super::ranges::merge;

/// How RTP numbers the title's packets on every channel (`schedule`'s).
pub fn numbering(schedule: &Schedule) -> Numbering {
    Numbering {
        seq0: schedule.seq0,
        ts0: schedule.ts0,
        clock_rate: schedule.clock_rate,
    }
}

/// How RTP numbers the title's packets on every channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numbering {
    pub seq0: u16,
    pub ts0: u32,
    pub clock_rate: u32,
}

impl Numbering {
    /// The sequence number of packet `i`.
    pub fn seq_of(&self, i: u32) -> u16 {
        self.seq0.wrapping_add(i as u16)
    }

    /// The timestamp of a packet presented at `pts_ns` (floor, mod 2^32).
    pub fn ts_of(&self, pts_ns: u64) -> u32 {
        self.ts0.wrapping_add(self.ticks(pts_ns))
    }

    fn ticks(&self, pts_ns: u64) -> u32 {
        (u128::from(pts_ns) * u128::from(self.clock_rate) / 1_000_000_000) as u32
    }
}

/// The packet a datagram of sequence number `seq` and timestamp `ts` is,
/// among the packet indices in `ranges` (a channel's segments, ascending):
/// those with `seq0 + i ≡ seq` (mod 2^16); of several (segments spanning
/// more than 2^16 packets), the one whose timestamp is nearest `ts` (mod
/// 2^32; ties: the lowest index). `None`: no packet of `ranges` has `seq`.
pub fn identify(
    ranges: &[Range<u32>],
    pts_ns: impl Fn(u32) -> u64,
    n: Numbering,
    seq: u16,
    ts: u32,
) -> Option<u32> {
    let want = seq.wrapping_sub(n.seq0); // i mod 2^16
    let got = ts.wrapping_sub(n.ts0);
    let mut best: Option<(u32, u32)> = None; // (tick distance, index)
    for r in ranges {
        let skip = want.wrapping_sub(r.start as u16);
        let mut i = u64::from(r.start) + u64::from(skip);
        while i < u64::from(r.end) {
            let index = i as u32;
            let expected = n.ticks(pts_ns(index));
            let d = got.wrapping_sub(expected).min(expected.wrapping_sub(got));
            if best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, index));
            }
            i += 1 << 16;
        }
    }
    best.map(|(_, i)| i)
}

/// The packets of channel `c`'s segments (what its datagrams may be).
pub fn channel_packets(plan: &Plan, c: usize) -> Vec<Range<u32>> {
    let segments = plan.segments();
    let ranges = plan.channels()[c]
        .slots
        .iter()
        .filter_map(|s| segments.get(s.segment as usize))
        .map(|s| s.first_packet..s.first_packet + s.packet_count)
        .collect();
    merge(ranges)
}

/// The packets channel `c` sends in `window` (ns since the epoch): what a
/// client hearing it then expects from it.
pub fn window_packets(plan: &Plan, c: usize, window: &Range<u64>) -> Vec<Range<u32>> {
    let mut ranges: Vec<Range<u32>> = Vec::new();
    for e in plan
        .emissions_from(c, window.start)
        .take_while(|e| e.due_ns < window.end)
    {
        match ranges.last_mut() {
            Some(r) if r.end == e.packet => r.end += 1,
            _ => ranges.push(e.packet..e.packet + 1),
        }
    }
    merge(ranges)
}

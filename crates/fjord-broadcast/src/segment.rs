//! Segments: contiguous runs of packets, each starting at a sync point so a
//! client can decode from it, cut near the times a scheme asks for.
//!
//! The cut rule. A scheme gives ideal cut times on a grid; each moves to
//! one of the two sync points around it. In the schemes whose client
//! starts with an instance of segment 1 (all but harmonic), segment 2's
//! first instance may come one grid slot after the start, so a segment 1
//! shorter than the slot delays every client by what it lacks, and a longer
//! one costs its channel a higher rate. [`crate::Plan::new`] plans both
//! (`Round::Up` and `Round::Down` for the first cut) and keeps the one
//! whose bandwidth and worst wait, relative to the closed form, add up to
//! less (a worst wait within w first). Every other cut takes the
//! neighbour that gives the lower server bandwidth (`Round::Cheaper`; the
//! nearer one when both cost the same), judged with the cuts still to
//! come at their ideal times: a cut moved earlier makes a segment on a
//! short period smaller and one on a longer period larger, which costs
//! less, and such moves also make up for what the first cut added. Those
//! cuts have a slot or more of slack (the schemes' series grow no faster
//! than that), so this costs no wait; whatever slack a title still lacks
//! becomes start delay in the plan, never an underrun.

use serde::{Deserialize, Serialize};

use crate::{PlanError, Title};

/// A segment of the title.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub first_packet: u32,
    pub packet_count: u32,
    /// Presentation time of the first packet.
    pub start_ns: u64,
    /// Until the next segment's start (the title's end for the last).
    pub duration_ns: u64,
    pub bytes: u64,
}

impl Segment {
    pub fn packets(&self) -> std::ops::Range<usize> {
        let first = self.first_packet as usize;
        first..first + self.packet_count as usize
    }
}

/// How an ideal cut moves to a sync point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// The first sync point at or after the ideal time.
    Up,
    /// The last sync point before it.
    Down,
    /// The neighbour (before or after) with the lower cost.
    Cheaper,
}

/// What a layout of segments costs: the server bandwidth of its channels.
pub(crate) type Cost<'a> = &'a dyn Fn(&[Segment]) -> f64;

/// Cuts `title` at sync points near `ideal` (the n-1 boundaries of n
/// segments, in ns of the title's timeline); `first` rounds the first one,
/// `cost` chooses the others.
pub(crate) fn cut(
    title: &Title,
    ideal: &[u64],
    first: Round,
    cost: Cost<'_>,
) -> Result<Vec<Segment>, PlanError> {
    let mut firsts = vec![0u32];
    for (k, &t) in ideal.iter().enumerate() {
        let round = if k == 0 { first } else { Round::Cheaper };
        let prev = *firsts.last().unwrap_or(&0);
        let packet = match (round, neighbours(title, prev, t)) {
            (Round::Down, (d, _)) => d,
            (_, (d, None)) => d,
            (Round::Up, (_, u)) | (Round::Cheaper, (None, u)) => u,
            (Round::Cheaper, (Some(d), Some(u))) => {
                Some(cheaper(title, &firsts, &ideal[k + 1..], t, [d, u], cost))
            }
        }
        .ok_or(PlanError::SyncTooSparse {
            segment: k + 1,
            ideal_ns: t,
        })?;
        firsts.push(packet);
    }
    Ok(segments_from(title, &firsts))
}

/// The last sync point before `t` and the first at or after it, of those
/// presented strictly after the previous cut's first packet (so every
/// segment lasts some time).
fn neighbours(title: &Title, prev: u32, t: u64) -> (Option<u32>, Option<u32>) {
    let pts = |s: u32| title.packets()[s as usize].pts_ns;
    let after = pts(prev);
    let sync = title.sync_points();
    // Sync points are in packet order, so their times do not decrease.
    let valid_from = sync.partition_point(|&s| s <= prev || pts(s) <= after);
    let valid = &sync[valid_from..];
    let at_or_after = valid.partition_point(|&s| pts(s) < t);
    let up = valid.get(at_or_after).copied();
    let down = at_or_after.checked_sub(1).map(|i| valid[i]);
    (down, up)
}

/// Of two candidate cuts, the one whose layout costs less with the cuts
/// after it at their ideal times (to the packet); the nearer on a tie.
fn cheaper(
    title: &Title,
    firsts: &[u32],
    rest: &[u64],
    t: u64,
    candidates: [u32; 2],
    cost: Cost<'_>,
) -> u32 {
    let pts = |s: u32| title.packets()[s as usize].pts_ns;
    let score = |c: u32| {
        let mut trial = firsts.to_vec();
        trial.push(c);
        for &r in rest {
            let prev = *trial.last().unwrap_or(&0) as usize;
            let next = title
                .packets()
                .partition_point(|p| p.pts_ns < r)
                .max(prev + 1);
            if next >= title.len() {
                break; // the rest cannot be placed: judge what can
            }
            trial.push(next as u32);
        }
        (cost(&segments_from(title, &trial)), pts(c).abs_diff(t))
    };
    let (d, u) = (score(candidates[0]), score(candidates[1]));
    // Costs equal but for rounding (a cut between two channels of one
    // period moves bytes at the same rate): the nearer, the later on a tie.
    let same = (d.0 - u.0).abs() <= 1e-9 * d.0.abs().max(u.0.abs());
    let down_wins = if same { d.1 < u.1 } else { d.0 < u.0 };
    if down_wins {
        candidates[0]
    } else {
        candidates[1]
    }
}

/// Segments starting at `firsts` (packet indices, increasing, from 0).
pub(crate) fn segments_from(title: &Title, firsts: &[u32]) -> Vec<Segment> {
    let n = title.len();
    let start = |i: usize| title.packets()[i].pts_ns;
    firsts
        .iter()
        .enumerate()
        .map(|(k, &f)| {
            let f = f as usize;
            let end = firsts.get(k + 1).map_or(n, |&e| e as usize);
            let end_ns = if end < n {
                start(end)
            } else {
                title.duration_ns()
            };
            Segment {
                first_packet: f as u32,
                packet_count: (end - f) as u32,
                start_ns: start(f),
                duration_ns: end_ns - start(f),
                bytes: title.bytes_before(end) - title.bytes_before(f),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Packet;

    /// Ten packets 100 ns apart, sync every third packet.
    fn title() -> Title {
        let packets = (0..10)
            .map(|i| Packet {
                pts_ns: i * 100,
                bytes: 10,
            })
            .collect();
        Title::new(packets, vec![0, 3, 6, 9], 1000).unwrap()
    }

    fn firsts(s: &[Segment]) -> Vec<u32> {
        s.iter().map(|s| s.first_packet).collect()
    }

    /// Every layout costs the same: the nearer sync point wins.
    fn flat(_: &[Segment]) -> f64 {
        1.0
    }

    /// Bytes of the first segment: cheaper when it is shorter.
    fn first_bytes(s: &[Segment]) -> f64 {
        s[0].bytes as f64
    }

    #[test]
    fn cuts_at_the_nearer_or_cheaper_sync_point_and_the_first_up() {
        let t = title();
        // 340 -> 300 (nearer), 520 -> 600; 120 -> 300 (up).
        let s = cut(&t, &[340, 520], Round::Cheaper, &flat).unwrap();
        assert_eq!(firsts(&s), [0, 3, 6]);
        let s = cut(&t, &[120, 520], Round::Up, &flat).unwrap();
        assert_eq!(firsts(&s), [0, 3, 6]);
        assert_eq!(s[2].duration_ns, 400);
        assert_eq!(s[2].bytes, 40);
        assert_eq!(s[0].duration_ns, 300);
        // A tie in distance goes later; a cheaper layout wins over distance.
        assert_eq!(
            firsts(&cut(&t, &[450], Round::Cheaper, &flat).unwrap()),
            [0, 6]
        );
        assert_eq!(
            firsts(&cut(&t, &[590], Round::Cheaper, &first_bytes).unwrap()),
            [0, 3]
        );
    }

    #[test]
    fn never_two_cuts_at_one_sync_point() {
        let t = title();
        // 310 and 320 both nearest to 300: the second moves on to 600.
        let s = cut(&t, &[310, 320], Round::Cheaper, &flat).unwrap();
        assert_eq!(firsts(&s), [0, 3, 6]);
        assert_eq!(
            cut(&t, &[100, 200, 300, 400], Round::Cheaper, &flat),
            Err(PlanError::SyncTooSparse {
                segment: 4,
                ideal_ns: 400
            })
        );
    }
}

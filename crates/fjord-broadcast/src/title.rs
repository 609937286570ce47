//! A title as broadcasting sees it: packets with a presentation time and a
//! size, the packets a segment may start at, and the duration.

use serde::{Deserialize, Serialize};

use crate::PlanError;

/// One packet of a title: when it is played (ns on the title's timeline)
/// and its payload size. A client must hold it by `start + pts_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Packet {
    pub pts_ns: u64,
    pub bytes: u32,
}

/// A checked title. Packet 0 is always a valid start (the title begins
/// there), so it need not be among the sync points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Title {
    packets: Vec<Packet>,
    sync: Vec<u32>,
    duration_ns: u64,
    /// `cum[i]`: payload bytes of packets `0..i` (one more entry than
    /// packets), so a byte offset inside a segment is one subtraction.
    cum: Vec<u64>,
}

impl Title {
    /// Checks the packets (at least one, each with bytes, presented in
    /// order, before `duration_ns`) and the sync points (packet indices,
    /// strictly increasing).
    pub fn new(packets: Vec<Packet>, sync: Vec<u32>, duration_ns: u64) -> Result<Title, PlanError> {
        if duration_ns == 0 {
            return Err(PlanError::ZeroDuration);
        }
        check_packets(&packets, duration_ns)?;
        check_sync(&sync, packets.len())?;
        let mut cum = Vec::with_capacity(packets.len() + 1);
        let mut total = 0u64;
        cum.push(0);
        for p in &packets {
            total += u64::from(p.bytes); // at most 2^32 packets of < 2^32 bytes
            cum.push(total);
        }
        Ok(Title {
            packets,
            sync,
            duration_ns,
            cum,
        })
    }

    /// A title without sync constraints: any packet may start a segment
    /// (the schemes' ideal cuts, to packet granularity).
    pub fn without_sync(packets: Vec<Packet>, duration_ns: u64) -> Result<Title, PlanError> {
        let n = u32::try_from(packets.len()).map_err(|_| PlanError::TooManyPackets)?;
        Title::new(packets, (0..n).collect(), duration_ns)
    }

    pub fn packets(&self) -> &[Packet] {
        &self.packets
    }

    pub fn sync_points(&self) -> &[u32] {
        &self.sync
    }

    pub fn duration_ns(&self) -> u64 {
        self.duration_ns
    }

    pub fn total_bytes(&self) -> u64 {
        self.cum[self.packets.len()]
    }

    /// The consumption rate b: payload bytes per second of playback.
    pub fn bytes_per_s(&self) -> f64 {
        self.total_bytes() as f64 * 1e9 / self.duration_ns as f64
    }

    /// Payload bytes of packets `0..i`.
    pub(crate) fn bytes_before(&self, i: usize) -> u64 {
        self.cum[i.min(self.packets.len())]
    }

    pub(crate) fn len(&self) -> usize {
        self.packets.len()
    }
}

fn check_packets(packets: &[Packet], duration_ns: u64) -> Result<(), PlanError> {
    if packets.is_empty() {
        return Err(PlanError::EmptyTitle);
    }
    if u32::try_from(packets.len()).is_err() {
        return Err(PlanError::TooManyPackets);
    }
    let mut last = 0;
    for (index, p) in packets.iter().enumerate() {
        if p.bytes == 0 {
            return Err(PlanError::EmptyPacket { index });
        }
        if p.pts_ns < last {
            return Err(PlanError::Unsorted { index });
        }
        if p.pts_ns >= duration_ns {
            return Err(PlanError::PastEnd { index });
        }
        last = p.pts_ns;
    }
    Ok(())
}

fn check_sync(sync: &[u32], packets: usize) -> Result<(), PlanError> {
    let mut next_allowed = 0usize;
    for (index, &s) in sync.iter().enumerate() {
        let s = s as usize;
        if s < next_allowed || s >= packets {
            return Err(PlanError::BadSyncPoint { index });
        }
        next_allowed = s + 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pts_ns: u64, bytes: u32) -> Packet {
        Packet { pts_ns, bytes }
    }

    #[test]
    fn refuses_what_cannot_be_broadcast() {
        assert_eq!(Title::new(vec![], vec![], 10), Err(PlanError::EmptyTitle));
        assert_eq!(
            Title::new(vec![p(0, 1)], vec![], 0),
            Err(PlanError::ZeroDuration)
        );
        assert_eq!(
            Title::new(vec![p(0, 0)], vec![], 10),
            Err(PlanError::EmptyPacket { index: 0 })
        );
        assert_eq!(
            Title::new(vec![p(5, 1), p(4, 1)], vec![], 10),
            Err(PlanError::Unsorted { index: 1 })
        );
        assert_eq!(
            Title::new(vec![p(0, 1), p(10, 1)], vec![], 10),
            Err(PlanError::PastEnd { index: 1 })
        );
        assert_eq!(
            Title::new(vec![p(0, 1), p(1, 1)], vec![1, 1], 10),
            Err(PlanError::BadSyncPoint { index: 1 })
        );
        assert_eq!(
            Title::new(vec![p(0, 1)], vec![1], 10),
            Err(PlanError::BadSyncPoint { index: 0 })
        );
    }

    #[test]
    fn rate_and_prefix_sums() {
        let t = Title::new(vec![p(0, 100), p(5, 300)], vec![0, 1], 1_000_000_000).unwrap();
        assert_eq!(t.total_bytes(), 400);
        assert_eq!(t.bytes_before(1), 100);
        assert_eq!(t.bytes_before(9), 400);
        assert!((t.bytes_per_s() - 400.0).abs() < 1e-9);
    }
}

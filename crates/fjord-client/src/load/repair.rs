//! A session's repair stream (`--fec`): the loss model dropping received
//! source packets, and the [`FecReceiver`] rebuilding them, with the marks
//! that tell which dropped packets were rebuilt or given up.

use std::net::UdpSocket;

use fjord_fec::SourcePacket;

use super::config::FecOptions;
use super::report::FecCounts;
use super::stats::SeqStats;
use crate::fec::{Delivery, FecReceiver, FecStats, Loss, LossModel, RepairOffer};
use crate::rtp::payload_range;

/// A session's repair stream and recovery (`--fec`).
pub(super) struct SessFec {
    k: u16,
    m: u16,
    /// Made by the first source packet received, where the sequence
    /// accounting starts too (packets the server sent before are not
    /// counted, e.g. frames read with the PLAY reply).
    rx: Option<FecReceiver>,
    /// Counts of receivers replaced when the server renumbered.
    before: FecStats,
    pub(super) loss: Loss,
    pub(super) rtp: Option<UdpSocket>,
    /// Holds the RTCP port of the pair; not read, the source stream's RTCP
    /// is enough.
    pub(super) rtcp: Option<UdpSocket>,
    /// Interleaved channel of the repair RTP (TCP).
    pub(super) channel: u8,
    /// Bit `seq` set: the loss model dropped source packet `seq` and the
    /// receiver has not yet rebuilt it or given it up.
    marks: Box<[u64; 1024]>,
    /// Source packets dropped.
    pub(super) drops: u64,
    /// Of those, the ones rebuilt or given up.
    pub(super) decided: u64,
    pub(super) repair_dropped: u64,
}

impl SessFec {
    pub(super) fn new(offer: &RepairOffer, options: &FecOptions, index: usize) -> SessFec {
        let model = LossModel::from_options(options.drop, options.burst, u32::from(offer.k));
        SessFec {
            k: offer.k,
            m: offer.m,
            rx: None,
            before: FecStats::default(),
            loss: Loss::new(model, options.seed.wrapping_add(index as u64)),
            rtp: None,
            rtcp: None,
            channel: 2,
            marks: Box::new([0; 1024]),
            drops: 0,
            decided: 0,
            repair_dropped: 0,
        }
    }

    pub(super) fn receiver(&mut self) -> &mut FecReceiver {
        self.rx
            .get_or_insert_with(|| FecReceiver::new(Some((self.k, self.m)), None))
    }

    pub(super) fn drop_source(&mut self, seq: u16) {
        self.drops += 1;
        self.marks[usize::from(seq / 64)] |= 1 << (seq % 64);
    }

    /// A received source packet; rebuilt ones fill their gap in `stats`.
    pub(super) fn source(&mut self, pkt: &[u8], seq: u16, timestamp: u32, stats: &mut SeqStats) {
        let Ok(range) = payload_range(pkt) else {
            return;
        };
        // The receiver owns what it holds: one copy per packet, freed when
        // the packet leaves its window.
        let packet = SourcePacket {
            payload: pkt[range].to_vec(),
            marker: pkt[1] & 0x80 != 0,
            timestamp,
        };
        if self.rx.is_none() {
            // Packets dropped before the first one the receiver sees are not
            // in the sequence accounting either: forget them.
            self.drops = self.decided;
            self.marks.fill(0);
        }
        let (k, m) = (self.k, self.m);
        let rx = self
            .rx
            .get_or_insert_with(|| FecReceiver::new(Some((k, m)), None));
        let (marks, decided) = (&mut self.marks, &mut self.decided);
        rx.source(seq, packet, &mut |d| on_decided(d, stats, marks, decided));
    }

    /// The server renumbered: everything held is decided, a new receiver
    /// starts with the next packet.
    pub(super) fn restart(&mut self, stats: &mut SeqStats) {
        if let Some(mut rx) = self.rx.take() {
            let (marks, decided) = (&mut self.marks, &mut self.decided);
            rx.finish(&mut |d| on_decided(d, stats, marks, decided));
            let s = rx.stats();
            let b = &mut self.before;
            b.received += s.received;
            b.repair_received += s.repair_received;
            b.repair_rejected += s.repair_rejected;
            b.recovered += s.recovered;
            b.unrecoverable += s.unrecoverable;
            b.decode_cpu += s.decode_cpu;
        }
    }

    pub(super) fn counts(&self) -> FecCounts {
        let s = self
            .rx
            .as_ref()
            .map_or(FecStats::default(), FecReceiver::stats);
        let b = &self.before;
        FecCounts {
            dropped: self.decided,
            pending: self.drops - self.decided,
            recovered: b.recovered + s.recovered,
            unrecoverable: b.unrecoverable + s.unrecoverable,
            repair_packets: b.repair_received
                + b.repair_rejected
                + s.repair_received
                + s.repair_rejected,
            repair_dropped: self.repair_dropped,
            repair_rejected: b.repair_rejected + s.repair_rejected,
            decode_cpu_ms: (b.decode_cpu + s.decode_cpu).as_secs_f64() * 1e3,
        }
    }
}

/// A source packet the receiver rebuilt or gave up.
fn on_decided(d: Delivery, stats: &mut SeqStats, marks: &mut [u64; 1024], decided: &mut u64) {
    let seq = match d {
        Delivery::Packet {
            recovered: false, ..
        } => return,
        Delivery::Packet { seq, .. } => {
            stats.on_recovered(seq);
            seq
        }
        Delivery::Lost { seq } => seq,
    };
    let (word, bit) = (usize::from(seq / 64), 1u64 << (seq % 64));
    if marks[word] & bit != 0 {
        marks[word] &= !bit;
        *decided += 1;
    }
}

//! One session of a load run and what it counts: each RTP packet into the
//! sequence, timing and lateness accounting (and its repair stream's
//! recovery), RTCP sender reports and BYE, and the receiver reports it
//! sends back.

use std::net::{SocketAddr, UdpSocket};

use super::control::Control;
use super::repair::SessFec;
use super::stats::{LateBins, SeqClass, SeqStats, Timing};
use crate::rtcp::{RtcpPacket, parse_rtcp_compound};
use crate::rtp::payload_range;

/// Where a session is in its RTSP exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Waiting,
    Connecting,
    SetupSent,
    PlaySent,
    Playing,
    Failed,
}

pub(super) struct Sess {
    index: usize,
    pub(super) phase: Phase,
    pub(super) ctl: Option<Control>,
    pub(super) rtp: Option<UdpSocket>,
    pub(super) rtcp: Option<UdpSocket>,
    pub(super) server_rtcp: Option<SocketAddr>,
    pub(super) channels: (u8, u8),
    pub(super) server_ssrc: Option<u32>,
    ssrc: u32,
    pub(super) seq: SeqStats,
    pub(super) timing: Timing,
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) started_ns: i64,
    pub(super) play_ns: Option<i64>,
    /// When the first PLAY was sent, and when the first RTP packet arrived.
    pub(super) play_sent_ns: Option<i64>,
    pub(super) first_packet_ns: Option<i64>,
    /// Index into the runner's titles.
    pub(super) title: usize,
    /// `PLAY Range: npt=X-` of the first PLAY.
    pub(super) npt_s: f64,
    pub(super) late_bins: LateBins,
    pub(super) replays: u64,
    /// A BYE ended the title: the next packet starts a new timeline.
    pub(super) new_segment: bool,
    /// Packets since the last BYE.
    pub(super) since_bye: u64,
    /// A BYE arrived and is to be acted on.
    pub(super) bye_pending: bool,
    /// The title ended and will not be played again.
    pub(super) ended: bool,
    /// (LSR, arrival) of the last sender report.
    last_sr: Option<(u32, i64)>,
    rr_prev: (u64, u64),
    pub(super) next_rr_ns: i64,
    pub(super) error: Option<String>,
    pub(super) dropped: bool,
    pub(super) teardown_sent: bool,
    pub(super) torn_down: bool,
    pub(super) garbage: u64,
    pub(super) truncated: u64,
    pub(super) rtcp_packets: u64,
    pub(super) fec: Option<Box<SessFec>>,
}

impl Sess {
    #[cfg(test)]
    pub(super) fn new(index: usize, clock_rate: u32, late_ns: i64) -> Sess {
        Sess::with_title(index, clock_rate, late_ns, 0, 0.0)
    }

    pub(super) fn with_title(
        index: usize,
        clock_rate: u32,
        late_ns: i64,
        title: usize,
        npt_s: f64,
    ) -> Sess {
        Sess {
            index,
            phase: Phase::Waiting,
            ctl: None,
            rtp: None,
            rtcp: None,
            server_rtcp: None,
            channels: (0, 1),
            server_ssrc: None,
            ssrc: 0x464a_0000 ^ (std::process::id() << 16) ^ index as u32,
            seq: SeqStats::default(),
            timing: Timing::new(clock_rate, late_ns),
            packets: 0,
            bytes: 0,
            started_ns: 0,
            play_ns: None,
            play_sent_ns: None,
            first_packet_ns: None,
            title,
            npt_s,
            late_bins: LateBins::default(),
            replays: 0,
            new_segment: false,
            since_bye: 0,
            bye_pending: false,
            ended: false,
            last_sr: None,
            rr_prev: (0, 0),
            next_rr_ns: i64::MAX,
            error: None,
            dropped: false,
            teardown_sent: false,
            torn_down: false,
            garbage: 0,
            truncated: 0,
            rtcp_packets: 0,
            fec: None,
        }
    }

    /// One RTP packet (the hot path: no allocation).
    #[inline]
    pub(super) fn on_rtp(&mut self, pkt: &[u8], arrival: i64) {
        if pkt.len() < 12 || pkt[0] >> 6 != 2 {
            self.garbage += 1;
            return;
        }
        let seq = u16::from_be_bytes([pkt[2], pkt[3]]);
        let ts = u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]);
        let ssrc = u32::from_be_bytes([pkt[8], pkt[9], pkt[10], pkt[11]]);
        if let Some(f) = self.fec.as_deref_mut()
            && f.loss.drop_packet(false)
        {
            f.drop_source(seq);
            return;
        }
        self.server_ssrc = Some(ssrc);
        if self.new_segment {
            self.new_segment = false;
            self.timing.reanchor();
            // The title ended (BYE) and plays again: a server that numbers
            // by position starts over, maybe before its PLAY answer is read.
            if self.seq.expected() > 0
                && (self.seq.extended_highest() as u16).wrapping_add(1) != seq
            {
                if let Some(f) = self.fec.as_deref_mut() {
                    f.restart(&mut self.seq);
                }
                self.seq.resync();
            }
        }
        self.packets += 1;
        self.since_bye += 1;
        self.bytes += pkt.len() as u64;
        if self.first_packet_ns.is_none() {
            self.first_packet_ns = Some(arrival);
        }
        let class = self.seq.on_packet(seq);
        if class != SeqClass::Duplicate {
            let lateness = self
                .timing
                .on_packet(arrival, ts, class == SeqClass::InOrder);
            self.late_bins.on_packet(arrival, lateness);
        }
        if let Some(f) = self.fec.as_deref_mut() {
            f.source(pkt, seq, ts, &mut self.seq);
        }
    }

    /// One packet of the repair stream.
    pub(super) fn on_repair(&mut self, pkt: &[u8]) {
        let Some(f) = self.fec.as_deref_mut() else {
            return;
        };
        let Ok(range) = payload_range(pkt) else {
            self.garbage += 1;
            return;
        };
        if f.loss.drop_packet(true) {
            f.repair_dropped += 1;
            return;
        }
        let ts = u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]);
        f.receiver().repair(ts, &pkt[range]);
    }

    /// An RTCP compound packet (rare: may allocate).
    pub(super) fn on_rtcp(&mut self, data: &[u8], arrival: i64) {
        self.rtcp_packets += 1;
        let Some(packets) = parse_rtcp_compound(data) else {
            return;
        };
        for p in packets {
            match p {
                RtcpPacket::SenderReport { ntp, .. } => {
                    self.last_sr = Some(((ntp >> 16) as u32, arrival));
                }
                RtcpPacket::Bye { .. } => self.bye_pending = true,
                RtcpPacket::Other { .. } => {}
            }
        }
    }

    /// Which of `n` starts this session plays (`starts[index % n]`).
    pub(super) fn index_in_starts(&self, n: usize) -> usize {
        self.index % n.max(1)
    }

    pub(super) fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(msg);
        }
        if self.phase != Phase::Playing {
            self.phase = Phase::Failed;
        }
    }

    /// An RTCP receiver report with one report block about the server's
    /// stream (RFC 3550 §6.4.2).
    pub(super) fn receiver_report(&mut self, now: i64) -> [u8; 32] {
        let expected = self.seq.expected();
        let unique = self.seq.unique;
        let (e0, u0) = self.rr_prev;
        self.rr_prev = (expected, unique);
        let exp_int = expected.saturating_sub(e0);
        let lost_int = exp_int.saturating_sub(unique.saturating_sub(u0));
        let fraction = (lost_int << 8)
            .checked_div(exp_int)
            .map_or(0, |f| f.min(255) as u8);
        let (lsr, dlsr) = match self.last_sr {
            Some((lsr, at)) => (
                lsr,
                (((now - at).max(0) as u128 * 65536) / 1_000_000_000) as u32,
            ),
            None => (0, 0),
        };
        receiver_report(
            self.ssrc,
            self.server_ssrc.unwrap_or(0),
            fraction,
            self.seq.lost().min(0x7f_ffff) as u32,
            self.seq.extended_highest(),
            self.timing.jitter_ticks(),
            lsr,
            dlsr,
        )
    }
}

/// An RTCP RR (PT 201) with one report block.
#[allow(clippy::too_many_arguments)]
pub fn receiver_report(
    reporter: u32,
    source: u32,
    fraction_lost: u8,
    cumulative_lost: u32,
    extended_highest: u32,
    jitter: u32,
    lsr: u32,
    dlsr: u32,
) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = 0x81;
    b[1] = 201;
    b[2..4].copy_from_slice(&7u16.to_be_bytes());
    b[4..8].copy_from_slice(&reporter.to_be_bytes());
    b[8..12].copy_from_slice(&source.to_be_bytes());
    b[12] = fraction_lost;
    b[13..16].copy_from_slice(&cumulative_lost.to_be_bytes()[1..]);
    b[16..20].copy_from_slice(&extended_highest.to_be_bytes());
    b[20..24].copy_from_slice(&jitter.to_be_bytes());
    b[24..28].copy_from_slice(&lsr.to_be_bytes());
    b[28..32].copy_from_slice(&dlsr.to_be_bytes());
    b
}

//! What a receiver report tells a publisher of one of its tracks (RFC
//! 3550 §6.4.1): its SSRC, the fraction of packets lost since the last
//! report and the number lost in all, the highest sequence number seen,
//! the interarrival jitter (A.8), and the time since its last sender
//! report (LSR, DLSR). Counted on the publisher's own numbering, not on
//! the renumbered one viewers get. Instants are given, never read.

use std::time::{Duration, Instant};

use fjord_proto::rtcp::{NtpTime, ReportBlock};

use crate::loss::Loss;

#[derive(Clone, Debug, Default)]
pub struct Reception {
    ssrc: Option<u32>,
    loss: Loss,
    /// Interarrival jitter, in timestamp units, scaled by 16 (A.8).
    jitter16: u64,
    /// The last packet's transit (arrival in timestamp units less its
    /// timestamp, wrapping), and the instant arrivals are counted from.
    transit: Option<u32>,
    epoch: Option<Instant>,
    /// The last sender report: its source, its NTP time's middle 32 bits,
    /// when it came.
    sender_report: Option<(u32, u32, Instant)>,
    /// Expected and received at the last report (for its fraction lost).
    prior: (u64, u64),
}

impl Reception {
    /// A packet of source `ssrc`, numbered `seq`, stamped `ts` (of a
    /// `clock_rate` clock), arrived at `at`. Another SSRC starts afresh:
    /// a new publisher, or one that restarted.
    pub fn packet(&mut self, (ssrc, seq, ts): (u32, u16, u32), clock_rate: u32, at: Instant) {
        if self.ssrc != Some(ssrc) {
            // A report the source sent before its first packet (ffmpeg's
            // first) stays.
            let sender_report = self.sender_report.filter(|r| r.0 == ssrc);
            *self = Reception {
                ssrc: Some(ssrc),
                sender_report,
                ..Reception::default()
            };
        }
        self.loss.on(seq);
        let epoch = *self.epoch.get_or_insert(at);
        let units = at.duration_since(epoch).as_nanos() * u128::from(clock_rate) / 1_000_000_000;
        let transit = (units as u32).wrapping_sub(ts);
        if let Some(last) = self.transit.replace(transit) {
            let d = u64::from((transit.wrapping_sub(last) as i32).unsigned_abs());
            // J += (|D| - J) / 16, kept scaled by 16 (A.8).
            self.jitter16 = self.jitter16 + d - ((self.jitter16 + 8) >> 4);
        }
    }

    /// A sender report of source `ssrc`, of NTP time `ntp`, arrived at
    /// `at`; false when no packet of `ssrc` came yet (kept before any
    /// packet, for the source whose packets follow; ignored after another
    /// source's).
    pub fn sender_report(&mut self, ssrc: u32, ntp: NtpTime, at: Instant) -> bool {
        let ours = self.ssrc == Some(ssrc);
        if ours || self.ssrc.is_none() {
            self.sender_report = Some((ssrc, ntp.middle32(), at));
        }
        ours
    }

    /// The source whose packets are counted; none before a packet came.
    pub fn source(&self) -> Option<u32> {
        self.ssrc
    }

    /// The report block for now, `at`; none before a packet came. The
    /// next one's fraction lost counts from here.
    pub fn block(&mut self, at: Instant) -> Option<ReportBlock> {
        let ssrc = self.ssrc?;
        let (expected, received) = (self.loss.expected(), self.loss.received());
        let interval = expected.saturating_sub(self.prior.0);
        let got = received.saturating_sub(self.prior.1);
        self.prior = (expected, received);
        let lost = interval.saturating_sub(got);
        let fraction_lost = match interval {
            0 => 0,
            n => ((lost << 8) / n).min(255) as u8,
        };
        let (lsr, dlsr) = self.sender_report.map_or((0, 0), |(_, lsr, when)| {
            (lsr, units_of_65536ths(at.saturating_duration_since(when)))
        });
        Some(ReportBlock {
            ssrc,
            fraction_lost,
            // A 24-bit field: clamped, as A.3 says.
            cumulative_lost: self.loss.lost().min(0x7f_ffff) as u32,
            highest_seq: self.loss.highest() as u32,
            jitter: (self.jitter16 >> 4) as u32,
            lsr,
            dlsr,
        })
    }
}

/// DLSR's unit: 1/65536 of a second.
fn units_of_65536ths(d: Duration) -> u32 {
    (d.as_nanos() * 65_536 / 1_000_000_000).min(u128::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_report_counts_the_loss_since_the_last_and_in_all() {
        let t0 = Instant::now();
        let mut r = Reception::default();
        assert_eq!(r.block(t0), None, "nothing came yet");
        // 90 kHz, a packet every 10 ms, on time: no jitter; 3 and 7 lost.
        for seq in (0u16..10).filter(|s| ![3, 7].contains(s)) {
            let at = t0 + MS * 10 * u32::from(seq);
            r.packet(
                (0xabcd, 65530u16.wrapping_add(seq), 900 * u32::from(seq)),
                90_000,
                at,
            );
        }
        let b = r.block(t0 + MS * 100).unwrap();
        assert_eq!(b.ssrc, 0xabcd);
        assert_eq!(
            (b.cumulative_lost, b.fraction_lost),
            (2, (2 * 256 / 10) as u8)
        );
        assert_eq!(b.highest_seq, 65536 + 3, "wrapped once, at 3");
        assert_eq!(b.jitter, 0);
        assert_eq!((b.lsr, b.dlsr), (0, 0), "no sender report yet");
        // Ten more, none lost: the fraction is of this interval only.
        for seq in 10u16..20 {
            let at = t0 + MS * 10 * u32::from(seq);
            r.packet(
                (0xabcd, 65530u16.wrapping_add(seq), 900 * u32::from(seq)),
                90_000,
                at,
            );
        }
        let b = r.block(t0 + MS * 200).unwrap();
        assert_eq!((b.cumulative_lost, b.fraction_lost), (2, 0));
    }

    #[test]
    fn the_last_sender_report_and_the_time_since_it_are_echoed() {
        let t0 = Instant::now();
        let mut r = Reception::default();
        r.packet((7, 1, 0), 90_000, t0);
        let ntp = NtpTime(0x1122_3344_5566_7788);
        assert!(!r.sender_report(8, NtpTime(1), t0));
        assert_eq!(r.block(t0).unwrap().lsr, 0, "another source's");
        assert!(r.sender_report(7, ntp, t0));
        let b = r.block(t0 + Duration::from_millis(1500)).unwrap();
        assert_eq!(b.lsr, 0x3344_5566);
        assert_eq!(b.dlsr, 65_536 * 3 / 2);
    }

    /// ffmpeg sends its first report just before its first packet: it is
    /// echoed once the packets come, unless they are another source's.
    #[test]
    fn a_report_before_the_first_packet_is_echoed() {
        let t0 = Instant::now();
        let ntp = NtpTime(0x1122_3344_5566_7788);
        let mut r = Reception::default();
        assert!(!r.sender_report(7, ntp, t0), "no source yet");
        r.packet((7, 1, 0), 90_000, t0);
        assert_eq!(r.block(t0).unwrap().lsr, 0x3344_5566);
        let mut other = Reception::default();
        other.sender_report(8, ntp, t0);
        other.packet((7, 1, 0), 90_000, t0);
        assert_eq!(other.block(t0).unwrap().lsr, 0, "another source's");
    }

    #[test]
    fn jitter_follows_late_and_early_arrivals() {
        let t0 = Instant::now();
        let mut r = Reception::default();
        // 8 kHz; every other packet 5 ms (40 units) late.
        for i in 0u32..200 {
            let late = if i % 2 == 1 { MS * 5 } else { Duration::ZERO };
            r.packet((1, i as u16, 160 * i), 8_000, t0 + MS * 20 * i + late);
        }
        let j = r.block(t0 + Duration::from_secs(5)).unwrap().jitter;
        // |D| is 40 each time: J converges on 40.
        assert!((38..=40).contains(&j), "{j}");
    }

    #[test]
    fn a_new_source_starts_afresh() {
        let t0 = Instant::now();
        let mut r = Reception::default();
        r.packet((1, 100, 0), 90_000, t0);
        r.packet((1, 105, 0), 90_000, t0);
        r.packet((2, 9, 0), 90_000, t0);
        let b = r.block(t0).unwrap();
        assert_eq!((b.ssrc, b.cumulative_lost, b.highest_seq), (2, 0, 9));
    }
}

//! RTCP (RFC 3550 §6): the sender reports we send and the reports we read.

use std::time::Duration;

use rtcp_types::{
    Bye, Compound, Packet, ReceiverReport, RtcpPacketWriterExt, Sdes, SdesChunk, SdesItem,
    SenderReport,
};

/// A 64-bit NTP timestamp (32.32 fixed point seconds since 1900).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NtpTime(pub u64);

/// Seconds from 1900-01-01 (NTP epoch) to 1970-01-01 (Unix epoch).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

impl NtpTime {
    /// From time since the Unix epoch (seconds wrap into the current NTP era).
    pub fn from_unix(d: Duration) -> Self {
        let secs = d.as_secs().wrapping_add(NTP_UNIX_OFFSET) & 0xffff_ffff;
        let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
        NtpTime((secs << 32) | frac)
    }

    /// Back to time since the Unix epoch (assuming NTP era 0, i.e. before 2036).
    pub fn to_unix(self) -> Duration {
        let secs = (self.0 >> 32).saturating_sub(NTP_UNIX_OFFSET);
        let nanos = ((self.0 & 0xffff_ffff) * 1_000_000_000) >> 32;
        Duration::new(secs, nanos as u32)
    }

    /// The middle 32 bits, as carried in LSR / DLSR of report blocks.
    pub fn middle32(self) -> u32 {
        (self.0 >> 16) as u32
    }
}

/// Upper bound for what [`sender_report`] writes (SR 28 + SDES with a
/// 255-byte CNAME 268 + BYE 8).
pub const SENDER_REPORT_MAX_LEN: usize = 304;

/// Write SR + SDES(CNAME) (+ BYE if `bye`) as one compound packet into
/// `out`; returns the length written, or 0 if `out` is too small (size it
/// with [`SENDER_REPORT_MAX_LEN`]). A CNAME longer than 255 bytes is cut at
/// a character boundary.
#[allow(clippy::too_many_arguments)]
pub fn sender_report(
    out: &mut [u8],
    ssrc: u32,
    ntp: NtpTime,
    rtp_ts: u32,
    packets: u32,
    octets: u32,
    cname: &str,
    bye: bool,
) -> usize {
    let mut end = cname.len().min(255);
    while !cname.is_char_boundary(end) {
        end -= 1;
    }
    let cname = &cname[..end];
    let mut compound = Compound::builder()
        .add_packet(
            SenderReport::builder(ssrc)
                .ntp_timestamp(ntp.0)
                .rtp_timestamp(rtp_ts)
                .packet_count(packets)
                .octet_count(octets),
        )
        .add_packet(Sdes::builder().add_chunk(
            SdesChunk::builder(ssrc).add_item(SdesItem::builder(SdesItem::CNAME, cname)),
        ));
    if bye {
        compound = compound.add_packet(Bye::builder().add_source(ssrc));
    }
    compound.write_into(out).unwrap_or(0)
}

/// Upper bound for what [`write_receiver_report`] writes (RR with one block 32
/// + SDES with a 255-byte CNAME 268).
pub const RECEIVER_REPORT_MAX_LEN: usize = 300;

/// Write RR (from `reporter`, of `block`) + SDES(CNAME) as one compound
/// packet into `out`; returns the length written, or 0 if `out` is too
/// small (size it with [`RECEIVER_REPORT_MAX_LEN`]).
pub fn write_receiver_report(
    out: &mut [u8],
    reporter: u32,
    block: &ReportBlock,
    cname: &str,
) -> usize {
    let mut end = cname.len().min(255);
    while !cname.is_char_boundary(end) {
        end -= 1;
    }
    let b = rtcp_types::ReportBlock::builder(block.ssrc)
        .fraction_lost(block.fraction_lost)
        .cumulative_lost(block.cumulative_lost)
        .extended_sequence_number(block.highest_seq)
        .interarrival_jitter(block.jitter)
        .last_sender_report_timestamp(block.lsr)
        .delay_since_last_sender_report_timestamp(block.dlsr);
    Compound::builder()
        .add_packet(ReceiverReport::builder(reporter).add_report_block(b))
        .add_packet(
            Sdes::builder().add_chunk(
                SdesChunk::builder(reporter)
                    .add_item(SdesItem::builder(SdesItem::CNAME, &cname[..end])),
            ),
        )
        .write_into(out)
        .unwrap_or(0)
}

/// A session's sender report built once, then patched in place for each
/// report: the hot path neither builds nor allocates (the seeds' network
/// level framing, applied to RTCP). The sender info sits at fixed offsets
/// of the first packet (RFC 3550 §6.4.1).
pub struct SenderReportTemplate {
    /// SR, SDES and BYE: one allocation per stream, as BYE comes last.
    packet: Box<[u8]>,
    /// Where the BYE starts; the report without it ends here.
    bye_at: usize,
}

impl SenderReportTemplate {
    pub fn new(ssrc: u32, cname: &str) -> Self {
        let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
        let zero = NtpTime(0);
        let bye_at = sender_report(&mut buf, ssrc, zero, 0, 0, 0, cname, false);
        let n = sender_report(&mut buf, ssrc, zero, 0, 0, 0, cname, true);
        Self {
            packet: buf[..n].into(),
            bye_at,
        }
    }

    /// The compound packet for these values (with BYE when `bye`).
    pub fn fill(
        &mut self,
        ntp: NtpTime,
        rtp_ts: u32,
        packets: u32,
        octets: u32,
        bye: bool,
    ) -> &[u8] {
        let out = if bye {
            &mut self.packet[..]
        } else {
            &mut self.packet[..self.bye_at]
        };
        if let Some(info) = out.get_mut(8..28) {
            info[0..8].copy_from_slice(&ntp.0.to_be_bytes());
            info[8..12].copy_from_slice(&rtp_ts.to_be_bytes());
            info[12..16].copy_from_slice(&packets.to_be_bytes());
            info[16..20].copy_from_slice(&octets.to_be_bytes());
        }
        out
    }
}

/// One report block of an RR or SR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBlock {
    pub ssrc: u32,
    pub fraction_lost: u8,
    /// 24-bit cumulative loss as sent.
    pub cumulative_lost: u32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    pub jitter: u32,
    pub lsr: u32,
    pub dlsr: u32,
}

/// What we read from one packet of a compound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtcpInfo {
    ReceiverReport {
        reporter_ssrc: u32,
        blocks: Vec<ReportBlock>,
    },
    SenderReport {
        ssrc: u32,
        ntp: NtpTime,
        rtp_ts: u32,
        packets: u32,
        octets: u32,
    },
    Bye {
        ssrcs: Vec<u32>,
    },
    /// SDES, APP, feedback, XR, unknown types.
    Other,
}

/// Why a compound packet could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtcpError {
    #[error("invalid RTCP: {0}")]
    Invalid(String),
}

/// Packets read from one compound; the rest is ignored.
pub const MAX_RTCP_PACKETS: usize = 32;
/// Report blocks or BYE sources read per packet (the 5-bit count's maximum).
const MAX_ITEMS: usize = 31;

/// Parse a compound packet (e.g. a client's RR + SDES). Stops after
/// [`MAX_RTCP_PACKETS`]; an invalid packet fails the whole compound.
/// Whether `head` (a datagram's first bytes) starts an RTCP compound
/// packet as RFC 3550 A.2 checks it: version 2, no padding on the first
/// packet, and that packet an SR or an RR. Enough to take a datagram as a
/// receiver's sign of life without reading all of it.
pub fn starts_compound(head: &[u8]) -> bool {
    matches!(head, [first, 200 | 201, ..] if first >> 6 == 2 && first & 0x20 == 0)
}

pub fn parse_compound(data: &[u8]) -> Result<Vec<RtcpInfo>, RtcpError> {
    let invalid = |e: rtcp_types::RtcpParseError| RtcpError::Invalid(e.to_string());
    let compound = Compound::parse(data).map_err(invalid)?;
    let mut out = Vec::new();
    for packet in compound.take(MAX_RTCP_PACKETS) {
        out.push(match packet.map_err(invalid)? {
            Packet::Rr(rr) => receiver_report(&rr),
            Packet::Sr(sr) => RtcpInfo::SenderReport {
                ssrc: sr.ssrc(),
                ntp: NtpTime(sr.ntp_timestamp()),
                rtp_ts: sr.rtp_timestamp(),
                packets: sr.packet_count(),
                octets: sr.octet_count(),
            },
            Packet::Bye(bye) => RtcpInfo::Bye {
                ssrcs: bye.ssrcs().take(MAX_ITEMS).collect(),
            },
            _ => RtcpInfo::Other,
        });
    }
    Ok(out)
}

fn receiver_report(rr: &ReceiverReport) -> RtcpInfo {
    RtcpInfo::ReceiverReport {
        reporter_ssrc: rr.ssrc(),
        blocks: rr
            .report_blocks()
            .take(MAX_ITEMS)
            .map(|b| ReportBlock {
                ssrc: b.ssrc(),
                fraction_lost: b.fraction_lost(),
                cumulative_lost: b.cumulative_lost(),
                highest_seq: b.extended_sequence_number(),
                jitter: b.interarrival_jitter(),
                lsr: b.last_sender_report_timestamp(),
                dlsr: b.delay_since_last_sender_report_timestamp(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod template_tests {
    use super::*;

    #[test]
    fn template_equals_a_freshly_built_report() {
        let mut t = SenderReportTemplate::new(0xdead_beef, "fjord@host");
        for (ntp, rtp, p, o, bye) in [
            (1u64 << 40 | 77, 9u32, 3u32, 4000u32, false),
            (u64::MAX, u32::MAX, 1, 2, true),
            (5, 6, 7, 8, false),
        ] {
            let mut want = [0u8; SENDER_REPORT_MAX_LEN];
            let n = sender_report(
                &mut want,
                0xdead_beef,
                NtpTime(ntp),
                rtp,
                p,
                o,
                "fjord@host",
                bye,
            );
            assert_eq!(t.fill(NtpTime(ntp), rtp, p, o, bye), &want[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rtcp_types::ReportBlock as WireBlock;

    #[test]
    fn ntp_conversions() {
        let t = NtpTime::from_unix(Duration::new(1_700_000_000, 500_000_000));
        assert_eq!(t.0 >> 32, 1_700_000_000 + NTP_UNIX_OFFSET);
        assert_eq!(t.0 & 0xffff_ffff, 0x8000_0000);
        assert_eq!(
            t.middle32(),
            (((1_700_000_000 + NTP_UNIX_OFFSET) & 0xffff) << 16) as u32 | 0x8000
        );
        let back = t.to_unix();
        assert_eq!(back.as_secs(), 1_700_000_000);
        assert!(back.subsec_nanos().abs_diff(500_000_000) <= 1);
        assert_eq!(NtpTime::from_unix(Duration::ZERO).0, NTP_UNIX_OFFSET << 32);
        // Far future wraps instead of overflowing.
        let _ = NtpTime::from_unix(Duration::MAX);
        assert_eq!(NtpTime(0).to_unix(), Duration::ZERO);
    }

    #[test]
    fn sr_sdes_bye_layout() {
        let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
        let ntp = NtpTime(0x0102_0304_0506_0708);
        let n = sender_report(
            &mut buf,
            0xdead_beef,
            ntp,
            90000,
            10,
            13280,
            "fjord@host",
            false,
        );
        // SR 28 + SDES: 4 + 4 + 2 + 10 + pad to word (null terminator) = 24
        assert_eq!(n, 28 + 24);
        assert_eq!(buf[0], 0x80);
        assert_eq!(buf[1], 200);
        let info = parse_compound(&buf[..n]).unwrap();
        assert_eq!(
            info,
            vec![
                RtcpInfo::SenderReport {
                    ssrc: 0xdead_beef,
                    ntp,
                    rtp_ts: 90000,
                    packets: 10,
                    octets: 13280
                },
                RtcpInfo::Other
            ]
        );
        let n = sender_report(&mut buf, 7, ntp, 0, 0, 0, "c", true);
        let info = parse_compound(&buf[..n]).unwrap();
        assert_eq!(info.len(), 3);
        assert_eq!(info[2], RtcpInfo::Bye { ssrcs: vec![7] });
    }

    #[test]
    fn sr_output_too_small_or_long_cname() {
        let mut small = [0u8; 20];
        assert_eq!(
            sender_report(&mut small, 1, NtpTime(0), 0, 0, 0, "x", true),
            0
        );
        let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
        let long = "é".repeat(300);
        let n = sender_report(&mut buf, 1, NtpTime(0), 0, 0, 0, &long, true);
        assert!(n > 0 && n <= SENDER_REPORT_MAX_LEN);
        assert!(parse_compound(&buf[..n]).is_ok());
        let n = sender_report(&mut buf, 1, NtpTime(0), 0, 0, 0, &"a".repeat(255), true);
        assert!(n > 0 && n <= SENDER_REPORT_MAX_LEN);
    }

    fn rr_bytes(reporter: u32, blocks: &[ReportBlock]) -> Vec<u8> {
        let mut rr = ReceiverReport::builder(reporter);
        for b in blocks {
            rr = rr.add_report_block(
                WireBlock::builder(b.ssrc)
                    .fraction_lost(b.fraction_lost)
                    .cumulative_lost(b.cumulative_lost)
                    .extended_sequence_number(b.highest_seq)
                    .interarrival_jitter(b.jitter)
                    .last_sender_report_timestamp(b.lsr)
                    .delay_since_last_sender_report_timestamp(b.dlsr),
            );
        }
        let c = Compound::builder()
            .add_packet(rr)
            .add_packet(Sdes::builder().add_chunk(
                SdesChunk::builder(reporter).add_item(SdesItem::builder(SdesItem::CNAME, "c")),
            ));
        let mut buf = vec![0u8; 1500];
        let n = c.write_into(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn receiver_report_parsed() {
        let block = ReportBlock {
            ssrc: 0x0a1b2c3d,
            fraction_lost: 12,
            cumulative_lost: 345,
            highest_seq: 0x0001_0005,
            jitter: 77,
            lsr: 0x1234_5678,
            dlsr: 65536,
        };
        let info = parse_compound(&rr_bytes(99, &[block])).unwrap();
        assert_eq!(
            info,
            vec![
                RtcpInfo::ReceiverReport {
                    reporter_ssrc: 99,
                    blocks: vec![block]
                },
                RtcpInfo::Other
            ]
        );
        // An empty RR (no blocks) is valid.
        let info = parse_compound(&rr_bytes(5, &[])).unwrap();
        assert_eq!(
            info[0],
            RtcpInfo::ReceiverReport {
                reporter_ssrc: 5,
                blocks: vec![]
            }
        );
    }

    #[test]
    fn a_receiver_report_written_reads_back_with_its_cname() {
        let block = ReportBlock {
            ssrc: 7,
            fraction_lost: 51,
            cumulative_lost: 2,
            highest_seq: 0x0001_0003,
            jitter: 40,
            lsr: 0x3344_5566,
            dlsr: 98_304,
        };
        let mut out = [0u8; RECEIVER_REPORT_MAX_LEN];
        let n = write_receiver_report(&mut out, 99, &block, &"é".repeat(200));
        assert!(n > 0 && n <= RECEIVER_REPORT_MAX_LEN);
        let info = parse_compound(&out[..n]).unwrap();
        let rr = RtcpInfo::ReceiverReport {
            reporter_ssrc: 99,
            blocks: vec![block],
        };
        assert_eq!(info, vec![rr, RtcpInfo::Other]);
        assert_eq!(write_receiver_report(&mut [0u8; 16], 99, &block, "x"), 0);
    }

    #[test]
    fn a_compound_packet_is_known_by_its_first_header() {
        let mut out = [0u8; RECEIVER_REPORT_MAX_LEN];
        let block = ReportBlock {
            ssrc: 1,
            fraction_lost: 0,
            cumulative_lost: 0,
            highest_seq: 0,
            jitter: 0,
            lsr: 0,
            dlsr: 0,
        };
        let n = write_receiver_report(&mut out, 2, &block, "x");
        assert!(starts_compound(&out[..n]) && starts_compound(&out[..2]));
        let mut sr = [0u8; SENDER_REPORT_MAX_LEN];
        let n = sender_report(&mut sr, 1, NtpTime(0), 0, 0, 0, "x", false);
        assert!(starts_compound(&sr[..n]));
        // An RTP packet (version 2, PT 96 or 224 with the marker), SDES
        // first, padding, version 1, too short: no.
        for bad in [
            &[0x80, 96][..],
            &[0x80, 0xe0],
            &[0x81, 202],
            &[0xa0, 201],
            &[0x40, 200],
            &[0x80],
        ] {
            assert!(!starts_compound(bad), "{bad:?}");
        }
    }

    #[test]
    fn invalid_inputs() {
        for bad in [
            &[][..],
            &[0x80][..],
            &[0x80, 201, 0, 1][..], // length says 8 bytes, only 4
            &[0x40, 201, 0, 0][..], // version 1
            &[0x81, 201, 0, 0][..], // RR claims a block, has none
            &[0x80, 201, 0, 1, 0, 0, 0, 1, 0][..], // trailing garbage
        ] {
            assert!(parse_compound(bad).is_err(), "{bad:?}");
        }
        let e = parse_compound(&[]).unwrap_err();
        assert!(e.to_string().starts_with("invalid RTCP"));
    }

    #[test]
    fn many_packets_bounded() {
        let one = rr_bytes(1, &[]);
        let data = one.repeat(100);
        let info = parse_compound(&data).unwrap();
        assert_eq!(info.len(), MAX_RTCP_PACKETS);
    }

    proptest! {
        #[test]
        fn sr_round_trip(ssrc: u32, ntp: u64, rtp_ts: u32, packets: u32, octets: u32,
                         cname in "[ -~]{0,40}", bye: bool) {
            let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
            let n = sender_report(&mut buf, ssrc, NtpTime(ntp), rtp_ts, packets, octets, &cname, bye);
            prop_assert!(n > 0);
            let info = parse_compound(&buf[..n]).unwrap();
            prop_assert_eq!(&info[0], &RtcpInfo::SenderReport { ssrc, ntp: NtpTime(ntp), rtp_ts, packets, octets });
            prop_assert_eq!(&info[1], &RtcpInfo::Other);
            if bye {
                prop_assert_eq!(&info[2], &RtcpInfo::Bye { ssrcs: vec![ssrc] });
            } else {
                prop_assert_eq!(info.len(), 2);
            }
        }

        #[test]
        fn rr_round_trip(reporter: u32, raw in proptest::collection::vec(
            (any::<u32>(), any::<u8>(), 0u32..0x0100_0000, any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()), 0..31)) {
            let blocks: Vec<ReportBlock> = raw.iter().map(|&(ssrc, fraction_lost, cumulative_lost, highest_seq, jitter, lsr, dlsr)|
                ReportBlock { ssrc, fraction_lost, cumulative_lost, highest_seq, jitter, lsr, dlsr }).collect();
            let info = parse_compound(&rr_bytes(reporter, &blocks)).unwrap();
            prop_assert_eq!(&info[0], &RtcpInfo::ReceiverReport { reporter_ssrc: reporter, blocks });
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_compound(&data);
        }

        #[test]
        fn parse_never_panics_v2(mut data in proptest::collection::vec(any::<u8>(), 4..200)) {
            data[0] = 0x80 | (data[0] & 0x3f);
            let _ = parse_compound(&data);
        }
    }
}

//! RTCP compound packet parsing (RFC 3550 §6), receive side: sender reports
//! and BYE are decoded, everything else is named by its packet type.

use std::time::Instant;

/// One RTCP packet of a compound packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtcpPacket {
    /// Sender report (PT 200), sender info only.
    SenderReport {
        /// Sender's SSRC.
        ssrc: u32,
        /// NTP timestamp (seconds in the high 32 bits).
        ntp: u64,
        /// RTP timestamp corresponding to `ntp`.
        rtp_ts: u32,
        /// Packets sent so far.
        packet_count: u32,
        /// Payload octets sent so far.
        octet_count: u32,
    },
    /// Goodbye (PT 203).
    Bye {
        /// The sources leaving.
        ssrcs: Vec<u32>,
    },
    /// Any other packet type (RR, SDES, APP...).
    Other {
        /// Its packet type.
        pt: u8,
    },
}

/// An RTCP compound packet as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtcpReceived {
    /// When it was read from the socket.
    pub arrival: Instant,
    /// Its packets, in order.
    pub packets: Vec<RtcpPacket>,
}

impl RtcpReceived {
    /// Whether it contains a BYE.
    pub fn is_bye(&self) -> bool {
        self.packets
            .iter()
            .any(|p| matches!(p, RtcpPacket::Bye { .. }))
    }
}

/// Parses an RTCP compound packet; `None` if any packet header is invalid.
pub fn parse_rtcp_compound(mut data: &[u8]) -> Option<Vec<RtcpPacket>> {
    let mut out = Vec::new();
    if data.is_empty() {
        return None;
    }
    while !data.is_empty() {
        if data.len() < 4 || data[0] >> 6 != 2 {
            return None;
        }
        let count = usize::from(data[0] & 0x1f);
        let pt = data[1];
        let len = 4 * (usize::from(u16::from_be_bytes([data[2], data[3]])) + 1);
        if data.len() < len {
            return None;
        }
        let body = &data[4..len];
        let be32 = |i: usize| u32::from_be_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        match pt {
            200 => {
                if body.len() < 24 {
                    return None;
                }
                out.push(RtcpPacket::SenderReport {
                    ssrc: be32(0),
                    ntp: (u64::from(be32(4)) << 32) | u64::from(be32(8)),
                    rtp_ts: be32(12),
                    packet_count: be32(16),
                    octet_count: be32(20),
                });
            }
            203 => {
                if body.len() < 4 * count {
                    return None;
                }
                out.push(RtcpPacket::Bye {
                    ssrcs: (0..count).map(|i| be32(4 * i)).collect(),
                });
            }
            _ => out.push(RtcpPacket::Other { pt }),
        }
        data = &data[len..];
    }
    Some(out)
}

/// An empty receiver report (PT 201, no report blocks) from `ssrc`, as a
/// client sends to show it is alive.
pub(crate) fn empty_receiver_report(ssrc: u32) -> [u8; 8] {
    let s = ssrc.to_be_bytes();
    [0x80, 201, 0, 1, s[0], s[1], s[2], s[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sr_sdes_bye() {
        let mut p = vec![0x80, 200, 0, 6];
        p.extend_from_slice(&1u32.to_be_bytes());
        p.extend_from_slice(&0x0000_0002_0000_0003u64.to_be_bytes());
        p.extend_from_slice(&4u32.to_be_bytes());
        p.extend_from_slice(&5u32.to_be_bytes());
        p.extend_from_slice(&6u32.to_be_bytes());
        p.extend_from_slice(&[0x81, 202, 0, 1, 0, 0, 0, 1]); // SDES, truncated is fine for us
        p.extend_from_slice(&[0x81, 203, 0, 1, 0, 0, 0, 1]);
        let v = parse_rtcp_compound(&p).unwrap();
        assert_eq!(
            v,
            vec![
                RtcpPacket::SenderReport {
                    ssrc: 1,
                    ntp: 0x0000_0002_0000_0003,
                    rtp_ts: 4,
                    packet_count: 5,
                    octet_count: 6
                },
                RtcpPacket::Other { pt: 202 },
                RtcpPacket::Bye { ssrcs: vec![1] },
            ]
        );
        let r = RtcpReceived {
            arrival: Instant::now(),
            packets: v,
        };
        assert!(r.is_bye());
    }

    #[test]
    fn rejects_bad_compound() {
        assert_eq!(parse_rtcp_compound(&[]), None);
        assert_eq!(parse_rtcp_compound(&[0x80, 200, 0, 6, 0]), None);
        assert_eq!(parse_rtcp_compound(&[0x40, 200, 0, 0]), None);
        assert_eq!(parse_rtcp_compound(&[0x80, 200, 0, 0]), None);
        assert_eq!(parse_rtcp_compound(&[0x82, 203, 0, 1, 0, 0, 0, 1]), None);
    }

    #[test]
    fn receiver_report_round_trips() {
        let rr = empty_receiver_report(7);
        assert_eq!(
            parse_rtcp_compound(&rr),
            Some(vec![RtcpPacket::Other { pt: 201 }])
        );
    }
}

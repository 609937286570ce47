//! A publisher's RTP packet (RFC 3550 §5.1): checked, its fields read. The
//! parsing is `rtp-types`'; this adds the size bound and keeps only what
//! the server needs.

use crate::{Limits, LiveError};

/// The fields of a checked packet; `payload` is the range of the payload
/// (after CSRCs and the header extension, before padding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub payload_type: u8,
    pub marker: bool,
    pub seq: u16,
    pub timestamp: u32,
    pub ssrc: u32,
    pub payload: std::ops::Range<usize>,
}

/// Reads `packet` under `limits`.
pub fn parse(packet: &[u8], limits: &Limits) -> Result<Header, LiveError> {
    if packet.len() > limits.max_packet_bytes {
        return Err(LiveError::PacketTooLarge(
            packet.len(),
            limits.max_packet_bytes,
        ));
    }
    let p = rtp_types::RtpPacket::parse(packet).map_err(|e| {
        LiveError::BadRtp(match e {
            rtp_types::RtpParseError::UnsupportedVersion(_) => "not RTP version 2",
            rtp_types::RtpParseError::Truncated { .. } => "truncated",
            _ => "malformed header",
        })
    })?;
    let start = p.payload_offset();
    Ok(Header {
        payload_type: p.payload_type(),
        marker: p.marker_bit(),
        seq: p.sequence_number(),
        timestamp: p.timestamp(),
        ssrc: p.ssrc(),
        payload: start..start + p.payload_len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn packet(pt: u8, seq: u16, ts: u32, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, pt, (seq >> 8) as u8, seq as u8];
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn a_packet_reads_back() {
        let p = packet(96 | 0x80, 7, 90_000, &[0x65, 1, 2]);
        let h = parse(&p, &Limits::default()).unwrap();
        assert_eq!((h.payload_type, h.marker, h.seq), (96, true, 7));
        assert_eq!((h.timestamp, h.ssrc), (90_000, 0x1234_5678));
        assert_eq!(&p[h.payload], &[0x65, 1, 2]);
    }

    #[test]
    fn bad_packets_are_refused() {
        let l = Limits::default();
        assert!(parse(&[0x80, 96], &l).is_err());
        assert!(parse(&packet(96, 0, 0, &[])[..11], &l).is_err());
        let mut v1 = packet(96, 0, 0, &[1]);
        v1[0] = 0x40;
        assert!(parse(&v1, &l).is_err());
        let big = packet(96, 0, 0, &[0; 2000]);
        assert_eq!(
            parse(&big, &l).unwrap_err(),
            LiveError::PacketTooLarge(2012, 1500)
        );
        // Padding longer than the packet.
        let mut pad = packet(96, 0, 0, &[1, 200]);
        pad[0] |= 0x20;
        assert!(parse(&pad, &l).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_or_fail_and_the_payload_lies_inside(p in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1600)) {
            if let Ok(h) = parse(&p, &Limits::default()) {
                proptest::prop_assert!(h.payload.start >= 12 && h.payload.end <= p.len());
            }
        }
    }
}

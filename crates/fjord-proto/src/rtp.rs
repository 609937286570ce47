//! The RTP fixed header (RFC 3550 §5.1).

/// Size of the fixed header we send (no CSRC, no extension).
pub const RTP_HEADER_LEN: usize = 12;

/// Write a version-2 header with no padding, extension or CSRC.
///
/// Hot path (once per packet): twelve plain byte stores, no allocation and
/// no builder — rtp-types' builder is for whole packets, and this header is
/// twelve bytes.
#[inline]
pub fn write_header(
    buf: &mut [u8; RTP_HEADER_LEN],
    pt: u8,
    marker: bool,
    seq: u16,
    ts: u32,
    ssrc: u32,
) {
    buf[0] = 0x80;
    buf[1] = (u8::from(marker) << 7) | (pt & 0x7f);
    buf[2..4].copy_from_slice(&seq.to_be_bytes());
    buf[4..8].copy_from_slice(&ts.to_be_bytes());
    buf[8..12].copy_from_slice(&ssrc.to_be_bytes());
}

/// What a client needs from a received packet's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeaderView {
    pub pt: u8,
    pub marker: bool,
    pub seq: u16,
    pub ts: u32,
    pub ssrc: u32,
    /// Offset of the payload (after CSRCs and extension).
    pub payload_offset: usize,
    /// Payload length (padding excluded).
    pub payload_len: usize,
}

/// Parse a received RTP packet (CSRC, extension and padding handled by
/// rtp-types). `None` for anything that is not a valid version-2 packet.
pub fn parse(buf: &[u8]) -> Option<RtpHeaderView> {
    let p = rtp_types::RtpPacket::parse(buf).ok()?;
    Some(RtpHeaderView {
        pt: p.payload_type(),
        marker: p.marker_bit(),
        seq: p.sequence_number(),
        ts: p.timestamp(),
        ssrc: p.ssrc(),
        payload_offset: p.payload_offset(),
        payload_len: p.payload_len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_bytes() {
        let mut h = [0u8; RTP_HEADER_LEN];
        write_header(&mut h, 33, true, 0x1234, 0x89abcdef, 0x0a1b2c3d);
        assert_eq!(
            h,
            [
                0x80, 0xa1, 0x12, 0x34, 0x89, 0xab, 0xcd, 0xef, 0x0a, 0x1b, 0x2c, 0x3d
            ]
        );
        write_header(&mut h, 0xff, false, 0, 0, 0);
        assert_eq!(h[1], 0x7f);
    }

    #[test]
    fn parse_with_csrc_extension_padding() {
        // V=2 P=1 X=1 CC=1, M=1 PT=96
        let mut pkt = vec![0xb1, 0xe0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 5];
        pkt.extend_from_slice(&[1, 2, 3, 4]); // CSRC
        pkt.extend_from_slice(&[0xbe, 0xde, 0, 1, 9, 9, 9, 9]); // extension, 1 word
        pkt.extend_from_slice(b"pay");
        pkt.extend_from_slice(&[0, 0, 3]); // padding of 3
        let v = parse(&pkt).unwrap();
        assert_eq!(v.pt, 96);
        assert!(v.marker);
        assert_eq!(v.seq, 7);
        assert_eq!(v.ts, 9);
        assert_eq!(v.ssrc, 5);
        assert_eq!(v.payload_offset, 24);
        assert_eq!(v.payload_len, 3);
        assert_eq!(
            &pkt[v.payload_offset..v.payload_offset + v.payload_len],
            b"pay"
        );
    }

    #[test]
    fn parse_rejects() {
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&[0x80; 11]), None);
        assert_eq!(parse(&[0x40; 12]), None); // version 1
        assert_eq!(parse(&[0x8f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), None); // CSRCs missing
    }

    proptest! {
        #[test]
        fn write_then_parse(pt in 0u8..128, marker: bool, seq: u16, ts: u32, ssrc: u32,
                            payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut h = [0u8; RTP_HEADER_LEN];
            write_header(&mut h, pt, marker, seq, ts, ssrc);
            let mut pkt = h.to_vec();
            pkt.extend_from_slice(&payload);
            let v = parse(&pkt).unwrap();
            prop_assert_eq!(v, RtpHeaderView { pt, marker, seq, ts, ssrc,
                payload_offset: 12, payload_len: payload.len() });
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Some(v) = parse(&data) {
                prop_assert!(v.payload_offset + v.payload_len <= data.len());
            }
        }
    }
}

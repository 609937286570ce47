//! RTP packet parsing (RFC 3550 §5.1), receive side.

use std::time::Instant;

/// One RTP packet as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// When the packet was read from the socket.
    pub arrival: Instant,
    /// Sequence number.
    pub seq: u16,
    /// RTP timestamp.
    pub rtp_ts: u32,
    /// Marker bit.
    pub marker: bool,
    /// Payload type.
    pub pt: u8,
    /// Synchronization source.
    pub ssrc: u32,
    /// Payload (after CSRCs, extension and padding are removed).
    pub payload: Vec<u8>,
}

/// Why a datagram is not an RTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RtpError {
    /// Shorter than its header says.
    #[error("truncated RTP packet")]
    Truncated,
    /// Version is not 2.
    #[error("RTP version {0} is not 2")]
    Version(u8),
    /// Padding count larger than the payload.
    #[error("bad RTP padding")]
    Padding,
}

/// Parses one RTP packet.
pub fn parse_rtp(data: &[u8], arrival: Instant) -> Result<Received, RtpError> {
    let payload = payload_range(data)?;
    Ok(Received {
        arrival,
        seq: u16::from_be_bytes([data[2], data[3]]),
        rtp_ts: u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
        marker: data[1] & 0x80 != 0,
        pt: data[1] & 0x7f,
        ssrc: u32::from_be_bytes([data[8], data[9], data[10], data[11]]),
        payload: data[payload].to_vec(),
    })
}

/// Where an RTP packet's payload is (after CSRCs, extension and padding),
/// checking the header as [`parse_rtp`] does, without copying.
pub(crate) fn payload_range(data: &[u8]) -> Result<std::ops::Range<usize>, RtpError> {
    if data.len() < 12 {
        return Err(RtpError::Truncated);
    }
    let version = data[0] >> 6;
    if version != 2 {
        return Err(RtpError::Version(version));
    }
    let padding = data[0] & 0x20 != 0;
    let extension = data[0] & 0x10 != 0;
    let csrc_count = usize::from(data[0] & 0x0f);
    let mut start = 12 + 4 * csrc_count;
    if data.len() < start {
        return Err(RtpError::Truncated);
    }
    if extension {
        if data.len() < start + 4 {
            return Err(RtpError::Truncated);
        }
        let words = usize::from(u16::from_be_bytes([data[start + 2], data[start + 3]]));
        start += 4 + 4 * words;
        if data.len() < start {
            return Err(RtpError::Truncated);
        }
    }
    let mut end = data.len();
    if padding {
        let pad = usize::from(data[end - 1]);
        if pad == 0 || end - start < pad {
            return Err(RtpError::Padding);
        }
        end -= pad;
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(b0: u8, b1: u8) -> Vec<u8> {
        vec![b0, b1, 0x12, 0x34, 0, 1, 0, 2, 0xde, 0xad, 0xbe, 0xef]
    }

    #[test]
    fn parses_plain_packet() {
        let mut p = header(0x80, 0x80 | 33);
        p.extend_from_slice(&[1, 2, 3]);
        let r = parse_rtp(&p, Instant::now()).unwrap();
        assert_eq!(r.seq, 0x1234);
        assert_eq!(r.rtp_ts, 0x0001_0002);
        assert!(r.marker);
        assert_eq!(r.pt, 33);
        assert_eq!(r.ssrc, 0xdead_beef);
        assert_eq!(r.payload, vec![1, 2, 3]);
    }

    #[test]
    fn skips_csrc_extension_and_padding() {
        let mut p = header(0x80 | 0x20 | 0x10 | 1, 33);
        p.extend_from_slice(&[9, 9, 9, 9]); // one CSRC
        p.extend_from_slice(&[0xbe, 0xde, 0, 1, 7, 7, 7, 7]); // extension, 1 word
        p.extend_from_slice(&[5, 6]);
        p.extend_from_slice(&[0, 0, 3]); // 3 bytes padding
        let r = parse_rtp(&p, Instant::now()).unwrap();
        assert!(!r.marker);
        assert_eq!(r.payload, vec![5, 6]);
    }

    #[test]
    fn rejects_bad_packets() {
        let now = Instant::now();
        assert_eq!(parse_rtp(&[0x80; 11], now), Err(RtpError::Truncated));
        assert_eq!(parse_rtp(&header(0x40, 33), now), Err(RtpError::Version(1)));
        assert_eq!(parse_rtp(&header(0x81, 33), now), Err(RtpError::Truncated));
        let mut p = header(0xa0, 33);
        p.push(9);
        assert_eq!(parse_rtp(&p, now), Err(RtpError::Padding));
    }
}

//! VP8 (RFC 7741) and VP9 (RFC 9628) over RTP: a frame is cut into packets
//! that each carry a one-byte payload descriptor, then file bytes; the
//! marker is on a frame's last packet. Pure: frame positions in, records
//! out; the only payload bytes read are a frame's first (its type), and
//! a VP9 key frame's header for the facts fragmented MP4 names
//! ([`vp9_format`]).

use crate::format::MAX_RTP_PAYLOAD;
use crate::index::{TrackDesc, TrackKind};
use crate::plan::{FLAG_MARKER, PacketRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vpx {
    Vp8,
    Vp9,
}

impl Vpx {
    /// The SDP encoding name (`a=rtpmap:PT VP8/90000`).
    pub fn encoding(self) -> &'static str {
        match self {
            Vpx::Vp8 => "VP8",
            Vpx::Vp9 => "VP9",
        }
    }

    /// The track description: 90 kHz, no format parameters (both RFCs make
    /// them optional receiver hints).
    pub fn track_desc(self, pt: u8) -> TrackDesc {
        TrackDesc {
            kind: TrackKind::Video,
            payload_type: pt,
            clock_rate: 90_000,
            encoding: self.encoding().to_owned(),
            channels: 0,
            fmtp: String::new(),
        }
    }

    /// Whether a frame starting with `first` is a key frame (decodable on
    /// its own). VP8: the frame tag's low bit is 0 (RFC 6386 §9.1). VP9:
    /// the uncompressed header's frame_type is KEY_FRAME and it is not a
    /// repeat of an earlier frame (VP9 bitstream §6.2).
    pub fn is_key_frame(self, first: u8) -> bool {
        match self {
            Vpx::Vp8 => first & 1 == 0,
            Vpx::Vp9 => {
                if first >> 6 != 2 {
                    return false;
                }
                // Profile 3 has one reserved bit after the profile bits.
                let profile = (((first >> 4) & 1) << 1) | ((first >> 5) & 1);
                let at = if profile == 3 { 3 } else { 4 };
                let show_existing = (first >> (at - 1)) & 1;
                let frame_type = (first >> (at - 2)) & 1;
                show_existing == 0 && frame_type == 0
            }
        }
    }

    /// The payload descriptor of a packet of a frame: `start` on its first
    /// packet, `end` on its last, `key` for a key frame.
    fn descriptor(self, key: bool, start: bool, end: bool) -> u8 {
        match self {
            // X=0 R=0 N=0 S=start PID=0: one partition-agnostic piece.
            Vpx::Vp8 => u8::from(start) << 4,
            // I=0 (no picture ID) P=inter-predicted L=0 F=0 B=start E=end
            // V=0 Z=0: non-flexible mode, one spatial layer.
            Vpx::Vp9 => (u8::from(!key) << 6) | (u8::from(start) << 3) | (u8::from(end) << 2),
        }
    }
}

/// What a VP9 key frame's uncompressed header says of the stream
/// (§6.2, §6.2.2 color_config): profile, bit depth, chroma subsampling as
/// `vpcC` numbers it (1 4:2:0, 2 4:2:2, 3 4:4:4) and full range. `None`
/// when `frame` does not start with a key frame.
pub fn vp9_format(frame: &[u8]) -> Option<(u8, u8, u8, bool)> {
    let mut bits = Bits { data: frame, at: 0 };
    if bits.take(2)? != 2 {
        return None;
    }
    let low = bits.take(1)?;
    let profile = (bits.take(1)? << 1 | low) as u8;
    if profile == 3 {
        bits.take(1)?;
    }
    // show_existing_frame, frame_type (0: key), show_frame, error_resilient
    if bits.take(2)? != 0 {
        return None;
    }
    bits.take(2)?;
    if bits.take(24)? != 0x49_8342 {
        return None;
    }
    let depth = match profile {
        0 | 1 => 8,
        _ if bits.take(1)? == 1 => 12,
        _ => 10,
    };
    let srgb = bits.take(3)? == 7;
    let full = srgb || bits.take(1)? == 1;
    let chroma = match (profile & 1 == 1, srgb) {
        (false, _) => 1,
        (true, true) => 3,
        (true, false) => match (bits.take(1)?, bits.take(1)?) {
            (1, 1) => 1,
            (1, 0) => 2,
            _ => 3,
        },
    };
    Some((profile, depth, chroma, full))
}

/// Big-endian bits of a byte string.
struct Bits<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bits<'_> {
    fn take(&mut self, n: usize) -> Option<u32> {
        let mut v = 0;
        for _ in 0..n {
            let byte = self.data.get(self.at / 8)?;
            v = v << 1 | u32::from(byte >> (7 - self.at % 8) & 1);
            self.at += 1;
        }
        Some(v)
    }
}

/// Appends the packets of one frame of `len` bytes at `offset` (`len` > 0),
/// all stamped alike, marker on the last. A VP9 superframe (several frames
/// and their index in one block) goes as one frame, as ffmpeg sends it and
/// as receivers hand it to decoders.
pub fn packetize_frame(
    codec: Vpx,
    key: bool,
    offset: u64,
    len: u32,
    send_time_ns: u64,
    rtp_ts: u32,
    out: &mut Vec<PacketRecord>,
) {
    let room = (MAX_RTP_PAYLOAD - 1) as u32;
    let mut done = 0;
    while done < len {
        let n = room.min(len - done);
        let d = codec.descriptor(key, done == 0, done + n == len);
        out.push(
            PacketRecord::file_run(send_time_ns, rtp_ts, offset + u64::from(done), n)
                .with_prefix(&[d]),
        );
        done += n;
    }
    if let Some(last) = out.last_mut() {
        last.flags |= FLAG_MARKER;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn vp9_format_from_a_key_frame_header() {
        // Profile 2 key frame, sync code, 10-bit, BT.709, full range.
        assert_eq!(
            vp9_format(&[0x92, 0x49, 0x83, 0x42, 0x28]),
            Some((2, 10, 1, true))
        );
        // Profile 0: 8-bit 4:2:0, studio range.
        assert_eq!(
            vp9_format(&[0x82, 0x49, 0x83, 0x42, 0x40]),
            Some((0, 8, 1, false))
        );
        // An inter frame, a broken sync code, a cut header.
        assert_eq!(vp9_format(&[0x86, 0x49, 0x83, 0x42, 0]), None);
        assert_eq!(vp9_format(&[0x82, 0x49, 0x83, 0x43, 0]), None);
        assert_eq!(vp9_format(&[0x92, 0x49, 0x83]), None);
    }

    proptest! {
        #[test]
        fn vp9_format_never_panics(b in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = vp9_format(&b);
        }
    }

    #[test]
    fn key_frames_by_their_first_byte() {
        assert!(Vpx::Vp8.is_key_frame(0x10));
        assert!(!Vpx::Vp8.is_key_frame(0x11));
        // VP9 profile 0: marker 10, profile 00, show_existing 0, frame_type 0.
        assert!(Vpx::Vp9.is_key_frame(0b1000_0010));
        assert!(!Vpx::Vp9.is_key_frame(0b1000_0110)); // inter
        assert!(!Vpx::Vp9.is_key_frame(0b1000_1000)); // show_existing_frame
        // Profile 1 (low bit first), key.
        assert!(Vpx::Vp9.is_key_frame(0b1010_0000));
        // Profile 3: reserved bit, then show_existing 0, frame_type 0.
        assert!(Vpx::Vp9.is_key_frame(0b1011_0000));
        assert!(!Vpx::Vp9.is_key_frame(0b1011_0010));
        assert!(!Vpx::Vp9.is_key_frame(0x00)); // no frame marker
    }

    #[test]
    fn a_vp9_key_frame_over_three_packets() {
        let mut out = Vec::new();
        let len = 2 * (MAX_RTP_PAYLOAD as u32 - 1) + 10;
        packetize_frame(Vpx::Vp9, true, 100, len, 7, 9, &mut out);
        let d: Vec<u8> = out.iter().map(|p| p.prefix()[0]).collect();
        assert_eq!(d, [0x08, 0x00, 0x04]);
        assert_eq!(out[2].len, 10);
        assert_eq!(
            out.iter().map(|p| p.marker()).collect::<Vec<_>>(),
            [false, false, true]
        );
        let mut inter = Vec::new();
        packetize_frame(Vpx::Vp9, false, 0, 5, 0, 0, &mut inter);
        assert_eq!(inter[0].prefix(), [0x4c]);
        let mut vp8 = Vec::new();
        packetize_frame(Vpx::Vp8, false, 0, len, 0, 0, &mut vp8);
        let d: Vec<u8> = vp8.iter().map(|p| p.prefix()[0]).collect();
        assert_eq!(d, [0x10, 0x00, 0x00]);
    }

    proptest! {
        /// The packets carry the frame's bytes in order, each fits, and
        /// only the first starts a frame and only the last ends it.
        #[test]
        fn packets_cover_the_frame(len in 1u32..20_000, offset in 0u64..1 << 40, vp9: bool, key: bool) {
            let codec = if vp9 { Vpx::Vp9 } else { Vpx::Vp8 };
            let mut out = Vec::new();
            packetize_frame(codec, key, offset, len, 1, 2, &mut out);
            let mut at = offset;
            for (i, p) in out.iter().enumerate() {
                prop_assert_eq!(p.offset, at);
                prop_assert!(p.payload_len() <= MAX_RTP_PAYLOAD && p.len > 0);
                at += u64::from(p.len);
                let d = p.prefix()[0];
                let last = i + 1 == out.len();
                prop_assert_eq!(p.marker(), last);
                if vp9 {
                    prop_assert_eq!(d & 0x08 != 0, i == 0);
                    prop_assert_eq!(d & 0x04 != 0, last);
                    prop_assert_eq!(d & 0x40 != 0, !key);
                } else {
                    prop_assert_eq!(d, if i == 0 { 0x10 } else { 0 });
                }
            }
            prop_assert_eq!(at, offset + u64::from(len));
        }
    }
}

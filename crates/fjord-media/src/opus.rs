//! Opus over RTP (RFC 7587): one Opus packet per RTP packet, a 48 kHz clock
//! whatever the coded rate, and the packet's duration from its TOC byte
//! (RFC 6716 §3.1), which containers that count in milliseconds round.

use crate::index::{TrackDesc, TrackKind};

/// The track description of an Opus stream of `channels` (1 or 2):
/// `opus/48000/2` always (RFC 7587 §7), stereo said by `sprop-stereo`.
pub fn track_desc(pt: u8, channels: u8) -> TrackDesc {
    TrackDesc {
        kind: TrackKind::Audio,
        payload_type: pt,
        clock_rate: 48_000,
        encoding: "opus".to_owned(),
        channels: 2,
        fmtp: if channels == 2 {
            "sprop-stereo=1"
        } else {
            "sprop-stereo=0"
        }
        .to_owned(),
    }
}

/// Channels of an `OpusHead` (Matroska's CodecPrivate), or why RTP cannot
/// carry the stream: RFC 7587 has no multistream mapping.
pub fn head_channels(head: &[u8]) -> Result<u8, String> {
    if head.len() < 19 || !head.starts_with(b"OpusHead") {
        return Err("Opus track with a malformed OpusHead".to_owned());
    }
    let (channels, family) = (head[9], head[18]);
    if family != 0 || channels > 2 {
        return Err(format!(
            "Opus with {channels} channels (RFC 7587 carries at most 2)"
        ));
    }
    Ok(channels.max(1))
}

/// Duration of the Opus packet starting with TOC byte `toc` and then
/// `next` (the frame count byte of code 3), in 48 kHz ticks.
pub fn packet_ticks(toc: u8, next: Option<u8>) -> Option<u32> {
    let config = toc >> 3;
    // Frame sizes in 48 kHz ticks: SILK 10/20/40/60 ms, hybrid 10/20 ms,
    // CELT 2.5/5/10/20 ms.
    let frame = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        12..=15 => [480, 960][usize::from(config % 2)],
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let frames = match toc & 3 {
        0 => 1,
        1 | 2 => 2,
        _ => u32::from(next? & 0x3f),
    };
    (frames > 0).then_some(frame * frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_from_the_toc() {
        // CELT fullband 20 ms, one frame (what libopus makes by default).
        assert_eq!(packet_ticks(0xfc, None), Some(960));
        // SILK NB 60 ms, two frames.
        assert_eq!(packet_ticks((3 << 3) | 1, None), Some(5760));
        // Hybrid 10 ms, code 3 with 4 frames.
        assert_eq!(packet_ticks((12 << 3) | 3, Some(0x84)), Some(1920));
        assert_eq!(packet_ticks(3, None), None);
        assert_eq!(packet_ticks(3, Some(0)), None);
    }

    #[test]
    fn opus_head() {
        let mut h = b"OpusHead\x01\x02\x38\x01\x80\xbb\0\0\0\0\0".to_vec();
        assert_eq!(head_channels(&h), Ok(2));
        h[18] = 1;
        assert!(head_channels(&h).unwrap_err().contains("at most 2"));
        assert!(head_channels(b"OpusHead").is_err());
    }
}

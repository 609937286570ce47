//! AV1, served over HLS and DASH only: what fjord reads of an
//! AV1CodecConfigurationRecord (`av1C`, AV1 in ISOBMFF §2.3; Matroska's
//! CodecPrivate is the same record) to name the codec, and the index
//! track that stands for an AV1 stream: no RTP packets (no RTSP player
//! here depacketizes AOM's RTP payload format, so it could not be
//! tested), its key frames as sync points. Pure; reads the record's
//! first four bytes, never a frame.

use crate::index::{TrackDesc, TrackKind};

/// The encoding name of an AV1 track in the index; a track of it has no
/// packets and RTSP refuses its title ([`crate::Index::not_over_rtp`]).
pub const ENCODING: &str = "AV1";

/// Why a title with an AV1 track is not played over RTSP.
pub const NOT_OVER_RTP: &str = "AV1 video is served over HLS and DASH only (the title's \
     index.m3u8 and manifest.mpd on the HTTP listener): no RTSP player at hand depacketizes AOM's \
     RTP payload format to test it against";

/// The facts of an `av1C` that its RFC 6381 name (`av01.P.LLT.DD`) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Av1Config {
    pub profile: u8,
    /// `seq_level_idx_0`: 0 is level 2.0, 31 "any".
    pub level: u8,
    pub high_tier: bool,
    pub bit_depth: u8,
}

impl Av1Config {
    /// The record's first four bytes read; `None` when short or not
    /// version 1 (marker bit set, version 1: byte `0x81`).
    pub fn parse(record: &[u8]) -> Option<Av1Config> {
        let b = record.get(..4)?;
        if b[0] != 0x81 {
            return None;
        }
        let (high_bitdepth, twelve_bit) = (b[2] & 0x40 != 0, b[2] & 0x20 != 0);
        Some(Av1Config {
            profile: b[1] >> 5,
            level: b[1] & 0x1f,
            high_tier: b[2] & 0x80 != 0,
            bit_depth: match (high_bitdepth, twelve_bit) {
                (true, true) => 12,
                (true, false) => 10,
                _ => 8,
            },
        })
    }

    /// The codec name HLS `CODECS` and DASH `codecs` carry (AV1 in
    /// ISOBMFF, Annex A), without the optional colour fields.
    pub fn codec_name(&self) -> String {
        let tier = if self.high_tier { 'H' } else { 'M' };
        format!(
            "av01.{}.{:02}{tier}.{:02}",
            self.profile, self.level, self.bit_depth
        )
    }
}

/// The index track of an AV1 stream (payload type `pt`, 90 kHz like
/// video over RTP), which carries no packets.
pub fn track_desc(pt: u8) -> TrackDesc {
    TrackDesc {
        kind: TrackKind::Video,
        payload_type: pt,
        clock_rate: 90_000,
        encoding: ENCODING.to_owned(),
        channels: 0,
        fmtp: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_record_of_an_8_bit_main_profile_stream_names_it() {
        // What libsvtav1 writes for a 320x240 main-profile stream: level
        // 2.0 (idx 0), main tier, 8 bits, 4:2:0.
        let c = Av1Config::parse(&[0x81, 0x00, 0x0c, 0x00]).unwrap();
        assert_eq!(c.codec_name(), "av01.0.00M.08");
        // Level 5.1 (idx 13), high tier, 10 bits, profile 0.
        let c = Av1Config::parse(&[0x81, 0x0d, 0xcc, 0x00]).unwrap();
        assert_eq!(c.codec_name(), "av01.0.13H.10");
        // Professional profile, 12 bits.
        let c = Av1Config::parse(&[0x81, 0x48, 0x60, 0x00]).unwrap();
        assert_eq!(c.codec_name(), "av01.2.08M.12");
    }

    #[test]
    fn a_short_or_foreign_record_is_refused() {
        assert_eq!(Av1Config::parse(&[0x81, 0, 0]), None);
        assert_eq!(Av1Config::parse(&[0x01, 0, 0, 0]), None);
        assert_eq!(Av1Config::parse(&[]), None);
    }

    proptest! {
        #[test]
        fn any_record_parses_or_not_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..16)) {
            if let Some(c) = Av1Config::parse(&b) {
                let name = c.codec_name();
                prop_assert!(name.starts_with("av01."));
                prop_assert!(c.profile < 8 && c.level < 32);
            }
        }
    }
}

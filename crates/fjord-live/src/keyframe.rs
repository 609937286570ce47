//! Where a viewer can join: whether an RTP payload carries the start of
//! a frame a decoder can begin with. H.264 (RFC 6184) and H.265 (RFC 7798):
//! an IDR/IRAP picture or a parameter set, alone, aggregated, or as the
//! first fragment; MPEG-TS (RFC 2250): a TS packet whose adaptation field
//! sets `random_access_indicator` (ISO 13818-1 §2.4.3.5).

use crate::sdp::Codec;

/// Whether `payload` of a track of `codec` holds a place to start.
pub fn starts_key(codec: Codec, payload: &[u8]) -> bool {
    match codec {
        Codec::H264 => h264(payload),
        Codec::H265 => h265(payload),
        Codec::Mp2t => mp2t(payload),
        Codec::Audio | Codec::Other => false,
    }
}

/// SPS (7), PPS (8) or IDR (5).
fn h264_key(nal_type: u8) -> bool {
    matches!(nal_type, 5 | 7 | 8)
}

fn h264(p: &[u8]) -> bool {
    let Some(&first) = p.first() else {
        return false;
    };
    match first & 0x1f {
        1..=23 => h264_key(first & 0x1f),
        // STAP-A: 16-bit size, NAL unit, ...
        24 => aggregated(&p[1..], |nal| {
            nal.first().is_some_and(|b| h264_key(b & 0x1f))
        }),
        // FU-A/FU-B: the start bit and the fragmented unit's type.
        28 | 29 => p
            .get(1)
            .is_some_and(|h| h & 0x80 != 0 && h264_key(h & 0x1f)),
        _ => false,
    }
}

/// VPS, SPS, PPS (32-34) or an IRAP picture (16-21).
fn h265_key(nal_type: u8) -> bool {
    matches!(nal_type, 16..=21 | 32..=34)
}

fn h265(p: &[u8]) -> bool {
    let Some(&first) = p.first() else {
        return false;
    };
    match (first >> 1) & 0x3f {
        // AP: two header bytes, then sized units (no DONL: sprop-max-don-diff 0).
        48 => aggregated(p.get(2..).unwrap_or_default(), |nal| {
            nal.first().is_some_and(|b| h265_key((b >> 1) & 0x3f))
        }),
        49 => p
            .get(2)
            .is_some_and(|h| h & 0x80 != 0 && h265_key(h & 0x3f)),
        t => h265_key(t),
    }
}

/// Whether a unit of an aggregation packet (16-bit size before each)
/// passes `key`; a truncated unit ends the walk.
fn aggregated(mut p: &[u8], key: impl Fn(&[u8]) -> bool) -> bool {
    while p.len() >= 2 {
        let n = usize::from(u16::from_be_bytes([p[0], p[1]]));
        let Some(nal) = p.get(2..2 + n) else {
            return false;
        };
        if key(nal) {
            return true;
        }
        p = &p[2 + n..];
    }
    false
}

fn mp2t(p: &[u8]) -> bool {
    p.chunks_exact(188).any(|ts| {
        let adaptation = ts[3] & 0x20 != 0;
        ts[0] == 0x47 && adaptation && ts[4] > 0 && ts[5] & 0x40 != 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h264_single_aggregated_and_fragmented() {
        assert!(starts_key(Codec::H264, &[0x65, 0x88]));
        assert!(starts_key(Codec::H264, &[0x67, 0x64]));
        assert!(!starts_key(Codec::H264, &[0x41, 0x9a]));
        // STAP-A of SPS and PPS.
        assert!(starts_key(Codec::H264, &[0x78, 0, 2, 0x67, 1, 0, 1, 0x68]));
        assert!(!starts_key(Codec::H264, &[0x78, 0, 2, 0x41, 1, 0, 9]));
        // FU-A start of an IDR, and its middle.
        assert!(starts_key(Codec::H264, &[0x7c, 0x85, 1]));
        assert!(!starts_key(Codec::H264, &[0x7c, 0x05, 1]));
        assert!(!starts_key(Codec::H264, &[]));
    }

    #[test]
    fn h265_units() {
        // IDR_W_RADL (19), VPS (32), trail (1), FU start of CRA (21).
        assert!(starts_key(Codec::H265, &[19 << 1, 1]));
        assert!(starts_key(Codec::H265, &[32 << 1, 1]));
        assert!(!starts_key(Codec::H265, &[1 << 1, 1]));
        assert!(starts_key(Codec::H265, &[49 << 1, 1, 0x80 | 21]));
        assert!(starts_key(Codec::H265, &[48 << 1, 1, 0, 2, 33 << 1, 1]));
    }

    #[test]
    fn mpeg_ts_random_access() {
        let mut ts = [0xffu8; 188];
        ts[..6].copy_from_slice(&[0x47, 0x01, 0x00, 0x30, 7, 0x40]);
        assert!(starts_key(Codec::Mp2t, &ts));
        ts[5] = 0;
        assert!(!starts_key(Codec::Mp2t, &ts));
        assert!(!starts_key(Codec::Audio, &ts));
    }

    proptest::proptest! {
        #[test]
        fn any_payload_is_looked_at_without_a_panic(p in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            for c in [Codec::H264, Codec::H265, Codec::Mp2t] {
                let _ = starts_key(c, &p);
            }
        }
    }
}

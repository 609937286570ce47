//! The `hvcC` of an H.265 track's SDP (RFC 7798 §7.1: `sprop-vps`,
//! `sprop-sps`, `sprop-pps`, base64 NAL units, comma-separated; ISO
//! 14496-15 §8.3.3.1). The profile, tier and level are the SPS's; chroma
//! format and bit depths say 4:2:0, 8 bits (decoders read them from the
//! SPS, which the arrays carry). No crate builds an `hvcC` from SDP
//! without a muxer around it.

use base64::{Engine, engine::general_purpose::STANDARD};

/// The `hvcC` body of an `a=fmtp` line's parameter sets; `Err`: why not.
pub(super) fn hvcc(fmtp: &str) -> Result<Vec<u8>, String> {
    let sets = |key: &str| -> Result<Vec<Vec<u8>>, String> {
        let v = super::param(fmtp, key).ok_or(format!("no {key} in its fmtp"))?;
        (v.split(','))
            .map(|s| (STANDARD.decode(s.trim())).map_err(|_| format!("{key} is not base64")))
            .collect()
    };
    if super::param(fmtp, "sprop-max-don-diff").is_some_and(|v| v.trim() != "0") {
        return Err("its packets carry decoding order numbers (sprop-max-don-diff)".to_owned());
    }
    let arrays = [
        (32u8, sets("sprop-vps")?),
        (33, sets("sprop-sps")?),
        (34, sets("sprop-pps")?),
    ];
    let sps = fjord_media::nal::unescape(arrays[1].1.first().map_or(&[][..], |s| s));
    // The header (2 bytes), then 4 bits of VPS id, 3 of sub-layers - 1,
    // the nesting flag, then the 12 bytes of the general profile_tier_level.
    let ptl = sps.get(3..15).ok_or("its SPS is too short")?;
    let layers = (sps[2] >> 1) & 7;
    let mut c = vec![1];
    c.extend_from_slice(ptl);
    // min_spatial_segmentation 0, parallelism 0, 4:2:0, 8 bits, frame
    // rate unknown; sub-layers and nesting as the SPS; 4-byte lengths.
    c.extend_from_slice(&[0xf0, 0x00, 0xfc, 0xfd, 0xf8, 0xf8, 0, 0]);
    c.push(((layers + 1) << 3) | ((sps[2] & 1) << 2) | 3);
    c.push(3);
    for (kind, nals) in &arrays {
        c.push(0x80 | kind);
        let n = u16::try_from(nals.len()).map_err(|_| "too many parameter sets")?;
        c.extend_from_slice(&n.to_be_bytes());
        for nal in nals {
            let len = u16::try_from(nal.len()).map_err(|_| "a parameter set over 64 KiB")?;
            c.extend_from_slice(&len.to_be_bytes());
            c.extend_from_slice(nal);
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hvcc_carries_the_sps_profile_and_the_three_arrays() {
        // x265's VPS/SPS/PPS of a 320x240 Main stream (level 2), as
        // ffmpeg's SDP gives them.
        let (vps, sps, pps) = (
            "QAEMAf//AWAAAAMAkAAAAwAAAwA8lZQJ",
            "QgEBAWAAAAMAkAAAAwAAAwA8oAoIDxZZWVKTC8BaAgAAAwACAAADADIQ",
            "RAHAc8GJ",
        );
        let fmtp = format!("sprop-vps={vps}; sprop-sps={sps}; sprop-pps={pps}");
        let c = hvcc(&fmtp).unwrap();
        // Main profile (1), its compatibility flags, the constraint flags
        // (escaped in the SPS), level 60 (2).
        assert_eq!(&c[..3], &[1, 0x01, 0x60]);
        assert_eq!(&c[6..13], &[0x90, 0, 0, 0, 0, 0, 60]);
        assert_eq!((c[21], c[22]), (0x0f, 3));
        assert_eq!(&c[23..26], &[0xa0, 0, 1]);
        let sps_bytes = STANDARD.decode(sps).unwrap();
        assert!(c.windows(sps_bytes.len()).any(|w| w == sps_bytes));
        assert!(hvcc("sprop-vps=AA==").is_err());
        assert!(hvcc(&format!("{fmtp}; sprop-max-don-diff=2")).is_err());
        assert!(hvcc("sprop-vps=QAE=; sprop-sps=QgE=; sprop-pps=RAE=").is_err());
    }

    #[test]
    fn emulation_prevention_bytes_are_removed() {
        assert_eq!(
            fjord_media::nal::unescape(&[0, 0, 3, 0, 0, 3, 1]),
            [0, 0, 0, 0, 1]
        );
        assert_eq!(fjord_media::nal::unescape(&[0, 3, 0, 0, 3]), [0, 3, 0, 0]);
    }
}

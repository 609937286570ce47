//! H.265 in MP4: the `hvcC` decoder configuration and the RFC 7798 SDP
//! parameters. Packetization itself is in [`crate::nal`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::nal::{Nal, NalCodec};

pub const NAL_VPS: u8 = 32;
pub const NAL_SPS: u8 = 33;
pub const NAL_PPS: u8 = 34;

/// IRAP pictures (BLA, IDR, CRA and the reserved IRAP types).
pub fn is_irap(nal_type: u8) -> bool {
    (16..=23).contains(&nal_type)
}

/// What `hvcC` says: NAL length size and every NAL unit of its arrays
/// (parameter sets, possibly SEI), in order, with their types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HevcConfig {
    pub length_size: usize,
    pub nals: Vec<(u8, Nal)>,
}

/// Parses an `hvcC` box body found at file offset `base`; `None` if malformed.
pub fn parse_hvcc(body: &[u8], base: u64) -> Option<HevcConfig> {
    if body.len() < 23 {
        return None;
    }
    let length_size = usize::from(body[21] & 3) + 1;
    if length_size == 3 {
        return None;
    }
    let arrays = body[22];
    let mut pos = 23;
    let mut nals = Vec::new();
    let be16 = |p: usize| -> Option<usize> {
        Some(usize::from(u16::from_be_bytes([
            *body.get(p)?,
            *body.get(p + 1)?,
        ])))
    };
    for _ in 0..arrays {
        let nal_type = *body.get(pos)? & 0x3f;
        let count = be16(pos + 1)?;
        pos += 3;
        for _ in 0..count {
            let len = be16(pos)?;
            let start = pos + 2;
            body.get(start..start + len).filter(|s| s.len() >= 2)?;
            nals.push((
                nal_type,
                Nal {
                    offset: base + start as u64,
                    len: len as u32,
                },
            ));
            pos = start + len;
        }
    }
    Some(HevcConfig { length_size, nals })
}

/// `a=fmtp` parameters (RFC 7798 §7.1): the parameter sets.
pub fn fmtp(cfg: &HevcConfig, data: &[u8]) -> String {
    [("vps", NAL_VPS), ("sps", NAL_SPS), ("pps", NAL_PPS)]
        .iter()
        .filter_map(|&(name, t)| {
            let sets: Vec<String> = cfg
                .nals
                .iter()
                .filter(|(ty, _)| *ty == t)
                .map(|(_, n)| STANDARD.encode(&data[n.offset as usize..][..n.len as usize]))
                .collect();
            (!sets.is_empty()).then(|| format!("sprop-{name}={}", sets.join(",")))
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Every NAL of `hvcC` before the first IRAP picture of an access unit, as
/// ffmpeg's hevc_mp4toannexb does.
pub fn insert_params(data: &[u8], cfg: &HevcConfig, nals: &mut Vec<Nal>) {
    let Some(irap) = nals
        .iter()
        .position(|n| is_irap(NalCodec::H265.nal_type(data[n.offset as usize])))
    else {
        return;
    };
    nals.splice(irap..irap, cfg.nals.iter().map(|&(_, n)| n));
}

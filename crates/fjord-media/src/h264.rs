//! H.264 in MP4: the `avcC` decoder configuration and the RFC 6184 SDP
//! parameters. Packetization itself is in [`crate::nal`].

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::nal::{Nal, NalCodec};

pub const NAL_IDR: u8 = 5;
pub const NAL_SPS: u8 = 7;
pub const NAL_PPS: u8 = 8;

/// What `avcC` says: NAL length size and where the parameter sets are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvcConfig {
    pub length_size: usize,
    pub profile_level_id: [u8; 3],
    pub sps: Vec<Nal>,
    pub pps: Vec<Nal>,
}

/// Parses an `avcC` box body found at file offset `base`; `None` if malformed.
pub fn parse_avcc(body: &[u8], base: u64) -> Option<AvcConfig> {
    if body.len() < 6 || body[0] != 1 {
        return None;
    }
    let length_size = usize::from(body[4] & 3) + 1;
    if length_size == 3 {
        return None;
    }
    let mut pos = 5;
    let sets = |count: usize, pos: &mut usize| -> Option<Vec<Nal>> {
        let mut v = Vec::new();
        for _ in 0..count {
            let len = usize::from(u16::from_be_bytes([*body.get(*pos)?, *body.get(*pos + 1)?]));
            let start = *pos + 2;
            body.get(start..start + len).filter(|s| !s.is_empty())?;
            v.push(Nal {
                offset: base + start as u64,
                len: len as u32,
            });
            *pos = start + len;
        }
        Some(v)
    };
    let sps_count = usize::from(body[5] & 0x1f);
    pos += 1;
    let sps = sets(sps_count, &mut pos)?;
    let pps_count = usize::from(*body.get(pos)?);
    pos += 1;
    let pps = sets(pps_count, &mut pos)?;
    Some(AvcConfig {
        length_size,
        profile_level_id: [body[1], body[2], body[3]],
        sps,
        pps,
    })
}

/// `a=fmtp` parameters (RFC 6184 §8.1) for packetization-mode=1.
pub fn fmtp(cfg: &AvcConfig, data: &[u8]) -> String {
    let [p, c, l] = cfg.profile_level_id;
    let mut s = format!("packetization-mode=1;profile-level-id={p:02X}{c:02X}{l:02X}");
    let sets: Vec<String> = cfg
        .sps
        .iter()
        .chain(&cfg.pps)
        .map(|n| STANDARD.encode(&data[n.offset as usize..][..n.len as usize]))
        .collect();
    if !sets.is_empty() {
        s.push_str(";sprop-parameter-sets=");
        s.push_str(&sets.join(","));
    }
    s
}

/// SPS and PPS from `avcC` before the first IDR slice of an access unit
/// that does not carry its own, as ffmpeg's h264_mp4toannexb does: a player
/// joining at any IDR can decode it, and the stream equals the Annex B one.
pub fn insert_params(data: &[u8], cfg: &AvcConfig, nals: &mut Vec<Nal>) {
    let ty = |n: &Nal| NalCodec::H264.nal_type(data[n.offset as usize]);
    let Some(idr) = nals.iter().position(|n| ty(n) == NAL_IDR) else {
        return;
    };
    if nals[..idr]
        .iter()
        .any(|n| matches!(ty(n), NAL_SPS | NAL_PPS))
    {
        return;
    }
    nals.splice(idr..idr, cfg.sps.iter().chain(&cfg.pps).copied());
}

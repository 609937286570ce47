//! What an HLS multivariant playlist says of an MPEG-TS title, read from a
//! few hundred KB of it at a key frame: the codecs as RFC 6381 names them,
//! the video's resolution and frame rate.
//!
//! In: bytes of the file that begin at a TS packet and hold the PAT, the
//! PMT, a video key frame's sequence parameter set and an audio frame.
//! Out: [`Params`], each field `None` when the bytes do not say it (a
//! codec name is given for every stream or for none). Pure; never panics;
//! reads at most what it is given.

use super::{TS_PACKET_LEN, parse_pat, psi_section};
use crate::mpeg_audio::FrameHeader;

/// The facts, each when known.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params {
    /// Every elementary stream's codec, comma-separated.
    pub codecs: Option<String>,
    pub resolution: Option<(u16, u16)>,
    pub frame_rate: Option<f64>,
}

/// Most bytes of one PES gathered (a key frame's parameter sets come first).
const PES_BYTES: usize = 4096;

/// The parameters the bytes `data` say.
pub fn params(data: &[u8]) -> Params {
    let mut pmt_pid = None;
    let mut streams: Vec<(u8, u16)> = Vec::new();
    // The first PES payload seen of each stream (pid, bytes).
    let mut pes: Vec<(u16, Vec<u8>, bool)> = Vec::new();
    for pkt in data.chunks_exact(TS_PACKET_LEN) {
        if pkt[0] != 0x47 || pkt[1] & 0x80 != 0 {
            continue;
        }
        let pusi = pkt[1] & 0x40 != 0;
        let pid = u16::from_be_bytes([pkt[1] & 0x1f, pkt[2]]);
        let afc = (pkt[3] >> 4) & 3;
        if afc & 1 == 0 {
            continue;
        }
        let start = if afc & 2 != 0 {
            5 + usize::from(pkt[4])
        } else {
            4
        };
        let Some(payload) = pkt.get(start..) else {
            continue;
        };
        if pid == 0 && pusi {
            pmt_pid = pmt_pid.or_else(|| parse_pat(payload));
        } else if Some(pid) == pmt_pid && pusi && streams.is_empty() {
            streams = pmt_streams(payload);
        } else if let Some(entry) = pes.iter_mut().find(|e| e.0 == pid) {
            // Stop at the next PES of the stream.
            if pusi {
                entry.2 = true;
            } else if !entry.2 && entry.1.len() < PES_BYTES {
                entry.1.extend_from_slice(payload);
            }
        } else if pusi && streams.iter().any(|s| s.1 == pid) {
            pes.push((pid, pes_payload(payload).to_vec(), false));
        }
    }
    let mut out = Params::default();
    let mut names = Vec::new();
    for &(stream_type, pid) in &streams {
        let body = pes.iter().find(|e| e.0 == pid).map(|e| e.1.as_slice());
        let name = match (stream_type, body) {
            (0x1b, Some(b)) => sps(b, 7).and_then(|s| h264(&s, &mut out)),
            (0x24, Some(b)) => sps(b, 33).and_then(|s| h265(&s, &mut out)),
            (0x0f, Some(b)) => crate::aac::adts_object_type(b).map(|aot| format!("mp4a.40.{aot}")),
            (0x03 | 0x04, Some(b)) => (b.get(..4))
                .and_then(|h| FrameHeader::parse(h.try_into().ok()?))
                .filter(|h| h.layer == 3)
                .map(|_| "mp4a.40.34".to_owned()),
            (0x81, _) => Some("ac-3".to_owned()),
            (0x87, _) => Some("ec-3".to_owned()),
            _ => None,
        };
        names.push(name);
    }
    if !names.is_empty() && names.iter().all(Option::is_some) {
        out.codecs = Some(names.into_iter().flatten().collect::<Vec<_>>().join(","));
    }
    out
}

/// (stream_type, elementary PID) of a PMT section.
fn pmt_streams(payload: &[u8]) -> Vec<(u8, u16)> {
    let Some(s) = psi_section(payload, 0x02) else {
        return Vec::new();
    };
    let Some(info) = s
        .get(10..12)
        .map(|b| usize::from(u16::from_be_bytes([b[0] & 0x0f, b[1]])))
    else {
        return Vec::new();
    };
    let mut es = s.get(12 + info..).unwrap_or_default();
    let mut out = Vec::new();
    while es.len() >= 5 {
        let pid = u16::from_be_bytes([es[1] & 0x1f, es[2]]);
        let info = usize::from(u16::from_be_bytes([es[3] & 0x0f, es[4]]));
        out.push((es[0], pid));
        es = es.get(5 + info..).unwrap_or_default();
    }
    out
}

/// A PES packet's payload (after its header).
fn pes_payload(p: &[u8]) -> &[u8] {
    if p.len() < 9 || p[..3] != [0, 0, 1] {
        return &[];
    }
    p.get(9 + usize::from(p[8])..).unwrap_or_default()
}

/// The first NAL of type `kind` in Annex B bytes, emulation prevention
/// removed, its header included.
fn sps(annex_b: &[u8], kind: u8) -> Option<Vec<u8>> {
    let mut i = 0;
    while i + 3 < annex_b.len() {
        if annex_b[i..i + 3] == [0, 0, 1] {
            let start = i + 3;
            let end = (start..annex_b.len().saturating_sub(2))
                .find(|&j| annex_b[j..j + 3] == [0, 0, 1] || annex_b[j..j + 3] == [0, 0, 0])
                .unwrap_or(annex_b.len());
            let nal = &annex_b[start..end];
            let t = match kind {
                33 => nal.first().map(|b| (b >> 1) & 0x3f),
                _ => nal.first().map(|b| b & 0x1f),
            };
            if t == Some(kind) {
                return Some(crate::nal::unescape(nal));
            }
            i = end;
        } else {
            i += 1;
        }
    }
    None
}

/// An H.264 SPS (header byte first): its codec name; resolution and frame
/// rate into `out`.
fn h264(sps: &[u8], out: &mut Params) -> Option<String> {
    let name = format!(
        "avc1.{:02x}{:02x}{:02x}",
        sps.get(1)?,
        sps.get(2)?,
        sps.get(3)?
    );
    let mut r = Bits::new(sps.get(4..)?);
    let profile = sps[1];
    r.ue()?; // seq_parameter_set_id
    let mut chroma = 1;
    if matches!(
        profile,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        chroma = r.ue()?;
        if chroma == 3 {
            r.bit()?;
        }
        r.ue()?;
        r.ue()?;
        r.bit()?;
        if r.bit()? == 1 {
            for i in 0..if chroma == 3 { 12 } else { 8 } {
                if r.bit()? == 1 {
                    skip_scaling_list(&mut r, if i < 6 { 16 } else { 64 })?;
                }
            }
        }
    }
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?;
        }
        1 => {
            r.bit()?;
            r.se()?;
            r.se()?;
            for _ in 0..r.ue()?.min(255) {
                r.se()?;
            }
        }
        _ => {}
    }
    r.ue()?; // max_num_ref_frames
    r.bit()?;
    let w_mbs = r.ue()? + 1;
    let h_units = r.ue()? + 1;
    let frame_mbs_only = r.bit()?;
    if frame_mbs_only == 0 {
        r.bit()?;
    }
    r.bit()?;
    let (mut cl, mut cr, mut ct, mut cb) = (0, 0, 0, 0);
    if r.bit()? == 1 {
        (cl, cr, ct, cb) = (r.ue()?, r.ue()?, r.ue()?, r.ue()?);
    }
    let (sub_w, sub_h) = match chroma {
        0 | 3 => (1, 1),
        2 => (2, 1),
        _ => (2, 2),
    };
    let crop_h_unit = sub_h * (2 - frame_mbs_only);
    let width = (w_mbs * 16).checked_sub(sub_w * (cl + cr))?;
    let height = (h_units * 16 * (2 - frame_mbs_only)).checked_sub(crop_h_unit * (ct + cb))?;
    out.resolution = Some((u16::try_from(width).ok()?, u16::try_from(height).ok()?));
    out.frame_rate = vui_frame_rate(&mut r);
    Some(name)
}

fn skip_scaling_list(r: &mut Bits, size: usize) -> Option<()> {
    let (mut last, mut next) = (8i64, 8i64);
    for _ in 0..size {
        if next != 0 {
            next = (last + r.se()? + 256) % 256;
        }
        last = if next == 0 { last } else { next };
    }
    Some(())
}

/// The frame rate an H.264 VUI's timing information gives, if it has any.
fn vui_frame_rate(r: &mut Bits) -> Option<f64> {
    if r.bit()? == 0 {
        return None;
    }
    if r.bit()? == 1 && r.bits(8)? == 255 {
        r.bits(32)?; // sar width, height
    }
    if r.bit()? == 1 {
        r.bit()?;
    }
    if r.bit()? == 1 {
        r.bits(4)?;
        if r.bit()? == 1 {
            r.bits(24)?;
        }
    }
    if r.bit()? == 1 {
        r.ue()?;
        r.ue()?;
    }
    if r.bit()? == 0 {
        return None;
    }
    let (units, scale) = (r.bits(32)?, r.bits(32)?);
    (units > 0).then(|| f64::from(scale as u32) / (2.0 * f64::from(units as u32)))
}

/// An H.265 SPS (two header bytes first): its codec name; resolution into
/// `out`.
fn h265(sps: &[u8], out: &mut Params) -> Option<String> {
    let b = sps.get(2..)?;
    let max_sub_layers = (b.first()? >> 1) & 7;
    let ptl = b.get(1..13)?;
    let mut hvcc = vec![0u8];
    hvcc.extend_from_slice(ptl);
    let name = crate::mp4::fragments::hevc_codec_name("hvc1", &hvcc);
    let mut r = Bits::new(b.get(13..)?);
    let mut present = Vec::new();
    for _ in 0..max_sub_layers {
        present.push((r.bit()?, r.bit()?));
    }
    if max_sub_layers > 0 {
        for _ in max_sub_layers..8 {
            r.bits(2)?;
        }
    }
    for (profile, level) in present {
        if profile == 1 {
            r.bits(32)?;
            r.bits(32)?;
            r.bits(24)?;
        }
        if level == 1 {
            r.bits(8)?;
        }
    }
    r.ue()?; // sps_seq_parameter_set_id
    if r.ue()? == 3 {
        r.bit()?;
    }
    let (w, h) = (r.ue()?, r.ue()?);
    out.resolution = Some((u16::try_from(w).ok()?, u16::try_from(h).ok()?));
    Some(name)
}

/// An MSB-first bit reader with Exp-Golomb codes.
struct Bits<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Bits<'a> {
    fn new(b: &'a [u8]) -> Self {
        Bits { b, pos: 0 }
    }

    fn bit(&mut self) -> Option<u64> {
        let byte = *self.b.get(self.pos / 8)?;
        let v = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Some(u64::from(v))
    }

    fn bits(&mut self, n: u32) -> Option<u64> {
        (0..n).try_fold(0u64, |acc, _| Some((acc << 1) | self.bit()?))
    }

    fn ue(&mut self) -> Option<u64> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return None;
            }
        }
        Some((1u64 << zeros) - 1 + self.bits(zeros)?)
    }

    fn se(&mut self) -> Option<i64> {
        let k = self.ue()? as i64;
        Some(if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) })
    }
}

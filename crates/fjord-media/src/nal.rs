//! NAL unit packetization shared by H.264 (RFC 6184, packetization-mode=1)
//! and H.265 (RFC 7798): a NAL that fits goes in a single NAL unit packet,
//! a larger one is cut into fragmentation units whose headers are the only
//! bytes not taken from the file.

use crate::format::MAX_RTP_PAYLOAD;
use crate::plan::{FLAG_MARKER, PacketRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NalCodec {
    H264,
    H265,
}

impl NalCodec {
    /// Bytes of the NAL unit header.
    pub fn header_len(self) -> usize {
        match self {
            NalCodec::H264 => 1,
            NalCodec::H265 => 2,
        }
    }

    /// `nal_unit_type` from the first header byte.
    pub fn nal_type(self, first: u8) -> u8 {
        match self {
            NalCodec::H264 => first & 0x1f,
            NalCodec::H265 => (first >> 1) & 0x3f,
        }
    }

    /// Payload header + FU header of a fragment of the NAL whose header is `hdr`.
    fn fu_prefix(self, hdr: [u8; 2], start: bool, end: bool) -> ([u8; 3], usize) {
        let se = (u8::from(start) << 7) | (u8::from(end) << 6);
        match self {
            // FU-A: indicator keeps F and NRI, type 28.
            NalCodec::H264 => ([(hdr[0] & 0xe0) | 28, se | (hdr[0] & 0x1f), 0], 2),
            // FU: payload header keeps F and the layer id's top bit, type 49;
            // the second byte (layer id rest, TID) is kept as is.
            NalCodec::H265 => (
                [
                    (hdr[0] & 0x81) | (49 << 1),
                    hdr[1],
                    se | ((hdr[0] >> 1) & 0x3f),
                ],
                3,
            ),
        }
    }
}

/// A NAL unit in the file: `len` bytes at `offset`, header included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nal {
    pub offset: u64,
    pub len: u32,
}

/// Appends the packets of one access unit (its NAL units in order), all
/// stamped alike, marker on the last. `data` is the whole file; every NAL
/// must lie inside it and be at least a header long.
pub fn packetize_au(
    codec: NalCodec,
    data: &[u8],
    nals: &[Nal],
    send_time_ns: u64,
    rtp_ts: u32,
    out: &mut Vec<PacketRecord>,
) {
    let first_packet = out.len();
    let hlen = codec.header_len();
    for nal in nals {
        if nal.len as usize <= MAX_RTP_PAYLOAD {
            out.push(PacketRecord::file_run(
                send_time_ns,
                rtp_ts,
                nal.offset,
                nal.len,
            ));
            continue;
        }
        let at = nal.offset as usize;
        let hdr = [data[at], if hlen == 2 { data[at + 1] } else { 0 }];
        let mut pos = nal.offset + hlen as u64;
        let end = nal.offset + u64::from(nal.len);
        let room = MAX_RTP_PAYLOAD as u64 - hlen as u64 - 1;
        while pos < end {
            let n = room.min(end - pos);
            let (prefix, plen) =
                codec.fu_prefix(hdr, pos == nal.offset + hlen as u64, pos + n == end);
            out.push(
                PacketRecord::file_run(send_time_ns, rtp_ts, pos, n as u32)
                    .with_prefix(&prefix[..plen]),
            );
            pos += n;
        }
    }
    if out.len() > first_packet
        && let Some(last) = out.last_mut()
    {
        last.flags |= FLAG_MARKER;
    }
}

/// An access unit of length-prefixed NAL units (an MP4 or Matroska
/// sample at `offset`, `size` bytes) into packets, `params` putting the
/// codec's parameter sets in where it needs them; `nals` is reused
/// scratch, `dropped` counts what [`split_length_prefixed`] leaves out.
pub fn packetize_length_prefixed(
    codec: NalCodec,
    data: &[u8],
    (offset, size, length_size): (u64, u32, usize),
    params: impl FnOnce(&mut Vec<Nal>),
    (nals, dropped): (&mut Vec<Nal>, &mut u64),
    (send_time_ns, rtp_ts): (u64, u32),
    out: &mut Vec<PacketRecord>,
) {
    split_length_prefixed(data, offset, size, length_size, nals, dropped);
    params(nals);
    packetize_au(codec, data, nals, send_time_ns, rtp_ts, out);
}

/// The NAL units of a length-prefixed sample (MP4, Matroska) of `size`
/// bytes at `offset` into `nals`; a sample whose
/// lengths do not add up keeps the NALs before the fault.
fn split_length_prefixed(
    data: &[u8],
    offset: u64,
    size: u32,
    length_size: usize,
    nals: &mut Vec<Nal>,
    dropped: &mut u64,
) {
    nals.clear();
    let end = offset + u64::from(size);
    let mut pos = offset;
    while pos < end {
        let at = pos as usize;
        let Some(len) = pos
            .checked_add(length_size as u64)
            .filter(|&e| e <= end)
            .map(|_| {
                data[at..at + length_size]
                    .iter()
                    .fold(0u64, |a, &b| (a << 8) | u64::from(b))
            })
        else {
            *dropped += 1;
            return;
        };
        let start = pos + length_size as u64;
        if start + len > end {
            *dropped += 1;
            return;
        }
        // Shorter than a NAL header: nothing a decoder can use.
        if len >= 2 {
            nals.push(Nal {
                offset: start,
                len: len as u32,
            });
        }
        pos = start + len;
    }
}

/// The RBSP of a NAL unit: each emulation prevention byte (the `03` of
/// `00 00 03`) removed, as parameter sets are read.
pub fn unescape(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

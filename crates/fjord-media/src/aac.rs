//! AAC over RTP (RFC 3640 mpeg4-generic, AAC-hbr) and ADTS `.aac` files.

use crate::format::{FormatError, MAX_RTP_PAYLOAD};
use crate::index::{TrackDesc, TrackKind};
use crate::plan::{FLAG_MARKER, IngestReport, MediaPlan, PacketRecord, TrackPlan, ticks_to_ns};

/// Sampling rates by `sampling_frequency_index` (ISO 14496-3 Table 1.18).
const RATES: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];
/// AU-headers-length (16 bits) + one 16-bit AU header.
const AU_PREFIX: usize = 4;
/// Largest AU the 13-bit AU-size field can describe.
pub const MAX_AU: u32 = (1 << 13) - 1;
const SAMPLES_PER_FRAME: u64 = 1024;

/// Sampling rate and channel configuration from an AudioSpecificConfig.
pub fn asc_info(asc: &[u8]) -> Option<(u32, u8)> {
    if asc.len() < 2 {
        return None;
    }
    let bits = asc
        .iter()
        .take(8)
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        << (8 * (8 - asc.len().min(8)));
    let take = |pos: &mut u32, n: u32| -> u64 {
        let v = (bits >> (64 - *pos - n)) & ((1 << n) - 1);
        *pos += n;
        v
    };
    let mut pos = 0;
    if take(&mut pos, 5) == 31 {
        take(&mut pos, 6);
    }
    let rate = match take(&mut pos, 4) {
        15 => take(&mut pos, 24) as u32,
        i => *RATES.get(i as usize)?,
    };
    let channels = take(&mut pos, 4) as u8;
    (rate > 0).then_some((rate, channels))
}

/// The track description of an AAC stream (payload type `pt`).
pub fn track_desc(pt: u8, rate: u32, channels: u8, asc: &[u8]) -> TrackDesc {
    let config: String = asc.iter().map(|b| format!("{b:02x}")).collect();
    TrackDesc {
        kind: TrackKind::Audio,
        payload_type: pt,
        clock_rate: rate,
        encoding: "mpeg4-generic".to_owned(),
        channels,
        fmtp: format!(
            "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;\
             indexdeltalength=3;config={config}"
        ),
    }
}

/// Appends the packets of one AU of `len` ≤ [`MAX_AU`] bytes at `offset`:
/// one packet, or fragments that each carry the AU header with the full
/// size (RFC 3640 §3.2.3), marker on the last.
pub fn packetize_au(
    offset: u64,
    len: u32,
    send_time_ns: u64,
    rtp_ts: u32,
    out: &mut Vec<PacketRecord>,
) {
    let size = (len << 3).to_be_bytes();
    let prefix = [0, 16, size[2], size[3]];
    let room = (MAX_RTP_PAYLOAD - AU_PREFIX) as u32;
    let mut done = 0;
    loop {
        let n = room.min(len - done);
        out.push(
            PacketRecord::file_run(send_time_ns, rtp_ts, offset + u64::from(done), n)
                .with_prefix(&prefix),
        );
        done += n;
        if done >= len {
            break;
        }
    }
    if let Some(last) = out.last_mut() {
        last.flags |= FLAG_MARKER;
    }
}

/// The fields of an ADTS header that every frame of a stream shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fixed {
    mpeg2: bool,
    profile: u8,
    rate_index: u8,
    channels: u8,
}

#[derive(Debug, Clone, Copy)]
struct Header {
    fixed: Fixed,
    header_len: usize,
    frame_len: usize,
    raw_blocks: u8,
}

/// The audio object type (ADTS profile + 1) of the ADTS frame at the start
/// of `data`.
pub(crate) fn adts_object_type(data: &[u8]) -> Option<u8> {
    header_at(data, 0).map(|h| h.fixed.profile + 1)
}

fn header_at(data: &[u8], pos: usize) -> Option<Header> {
    let h = data.get(pos..pos + 7)?;
    // Sync word, layer 0 (MP3 has a non-zero layer).
    if h[0] != 0xff || h[1] & 0xf6 != 0xf0 {
        return None;
    }
    let rate_index = (h[2] >> 2) & 0xf;
    if usize::from(rate_index) >= RATES.len() {
        return None;
    }
    let header_len = if h[1] & 1 == 1 { 7 } else { 9 };
    let frame_len =
        (usize::from(h[3] & 3) << 11) | (usize::from(h[4]) << 3) | usize::from(h[5] >> 5);
    if frame_len <= header_len {
        return None;
    }
    Some(Header {
        fixed: Fixed {
            mpeg2: h[1] & 8 != 0,
            profile: h[2] >> 6,
            rate_index,
            channels: ((h[2] & 1) << 2) | (h[3] >> 6),
        },
        header_len,
        frame_len,
        raw_blocks: h[6] & 3,
    })
}

/// Length of the ID3v2 tags at the start of `data` (0 if none).
fn id3_len(data: &[u8]) -> usize {
    let mut pos = 0;
    while let Some(h) = data.get(pos..pos + 10)
        && &h[..3] == b"ID3"
        && h[6..10].iter().all(|b| b & 0x80 == 0)
    {
        let size = h[6..10]
            .iter()
            .fold(0usize, |a, &b| (a << 7) | usize::from(b));
        let footer = if h[5] & 0x10 != 0 { 10 } else { 0 };
        pos += 10 + size + footer;
    }
    pos
}

/// A frame at `pos` whose successor is another frame of the same stream
/// (or the end of `data`): strong evidence of ADTS, not chance bytes.
fn chained_at(data: &[u8], pos: usize) -> Option<Header> {
    let h = header_at(data, pos)?;
    let next = pos + h.frame_len;
    if next == data.len() {
        return Some(h);
    }
    header_at(data, next)
        .filter(|n| n.fixed == h.fixed)
        .map(|_| h)
}

/// Sniffs an ADTS stream: optional ID3v2 tag, then two chained frames, or
/// three within the first 4 KiB after some junk.
pub fn looks_like_adts(head: &[u8]) -> bool {
    const JUNK: usize = 4096;
    let start = id3_len(head);
    match header_at(head, start) {
        Some(h) if start + h.frame_len >= head.len() => return true,
        Some(_) if chained_at(head, start).is_some() => return true,
        _ => {}
    }
    (start..head.len().min(start + JUNK)).any(|p| {
        chained_at(head, p).is_some_and(|h| {
            let next = p + h.frame_len;
            next >= head.len() || chained_at(head, next).is_some()
        })
    })
}

/// The plan of an ADTS AAC file: one RFC 3640 track, one AU per frame.
pub fn plan_adts(data: &[u8]) -> Result<MediaPlan, FormatError> {
    let start = id3_len(data).min(data.len());
    let mut pos = start;
    let mut fixed: Option<Fixed> = None;
    let mut packets = Vec::new();
    let mut samples = 0u64;
    let (mut resyncs, mut skipped, mut truncated, mut multi_block) = (0u64, 0u64, 0u64, 0u64);
    let mut au_bytes = 0u64;
    while pos + 7 <= data.len() {
        let h = match header_at(data, pos).filter(|h| fixed.is_none_or(|f| f == h.fixed)) {
            Some(h) if fixed.is_some() || chained_at(data, pos).is_some() => h,
            _ => {
                let found = (pos + 1..data.len().saturating_sub(6)).find(|&p| {
                    chained_at(data, p).is_some_and(|h| fixed.is_none_or(|f| f == h.fixed))
                });
                let next = found.unwrap_or(data.len());
                skipped += (next - pos) as u64;
                if found.is_some() && fixed.is_some() {
                    resyncs += 1;
                }
                pos = next;
                continue;
            }
        };
        if pos + h.frame_len > data.len() {
            truncated = (data.len() - pos) as u64;
            pos = data.len();
            break;
        }
        let f = *fixed.get_or_insert(h.fixed);
        let rate = RATES[usize::from(f.rate_index)];
        let blocks = u64::from(h.raw_blocks) + 1;
        if h.raw_blocks > 0 {
            multi_block += 1;
        } else {
            let len = (h.frame_len - h.header_len) as u32;
            let send = ticks_to_ns(samples, rate);
            packetize_au(
                (pos + h.header_len) as u64,
                len,
                send,
                samples as u32,
                &mut packets,
            );
            au_bytes += u64::from(len);
        }
        samples += SAMPLES_PER_FRAME * blocks;
        pos += h.frame_len;
    }
    truncated += (data.len() - pos) as u64;
    let Some(f) = fixed else {
        return Err(FormatError::Invalid(
            "no complete ADTS frame in the file".to_owned(),
        ));
    };
    if packets.is_empty() {
        return Err(FormatError::Unsupported(
            "ADTS frames with several raw data blocks are not supported".to_owned(),
        ));
    }
    let rate = RATES[usize::from(f.rate_index)];
    // AudioSpecificConfig: object type (ADTS profile + 1), rate index,
    // channel configuration, then a GASpecificConfig of three zero bits.
    let asc = ((u16::from(f.profile) + 1) << 11)
        | (u16::from(f.rate_index) << 7)
        | (u16::from(f.channels) << 3);
    let duration_ns = ticks_to_ns(samples, rate);
    let mut report = IngestReport::new(
        "ADTS AAC",
        packets.len() as u64,
        if duration_ns > 0 {
            (u128::from(au_bytes) * 8_000_000_000 / u128::from(duration_ns)) as u64
        } else {
            0
        },
    );
    report.resyncs = resyncs;
    report.skipped_bytes = skipped;
    report.truncated_tail_bytes = truncated;
    if skipped > 0 {
        report.warnings.push(format!(
            "skipped {skipped} bytes that are not ADTS frames ({resyncs} resyncs)"
        ));
    }
    if truncated > 0 {
        report.warnings.push(format!(
            "last ADTS frame is cut short ({truncated} bytes); not served"
        ));
    }
    if multi_block > 0 {
        report.warnings.push(format!(
            "{multi_block} ADTS frames hold several raw data blocks; not served (silence in their place)"
        ));
    }
    if f.channels == 0 {
        report.warnings.push("channel configuration 0 (program config element in-band); players may not set up the decoder".to_owned());
    }
    Ok(MediaPlan {
        tracks: vec![TrackPlan {
            desc: track_desc(96, rate, f.channels, &asc.to_be_bytes()),
            packets,
            sync: Vec::new(),
            fec: None,
        }],
        duration_ns,
        ts_per_rtp: 0,
        report,
    })
}

//! Checks on received bytes against the source file: contiguous TS
//! regions, PMT streams, random access points.

use fjord_client::Received;

pub const TS: usize = 188;

/// The 188-aligned offset at which `needle` occurs in `source`.
pub fn find_aligned(source: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    (0..source.len())
        .step_by(TS)
        .find(|&o| source[o..].starts_with(needle))
}

/// Asserts that the packets' sequence numbers are contiguous and their
/// payloads are whole TS packets forming a contiguous region of `source`;
/// returns (start offset, end offset) of that region.
pub fn assert_contiguous(source: &[u8], packets: &[Received], what: &str) -> (usize, usize) {
    assert!(!packets.is_empty(), "{what}: no packets");
    for w in packets.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(1),
            "{what}: sequence gap or repeat after {} ({} packets)",
            w[0].seq,
            packets.len()
        );
    }
    for (i, p) in packets.iter().enumerate() {
        assert_eq!(p.pt, 33, "{what}: payload type");
        assert!(
            p.payload.len() % TS == 0 && !p.payload.is_empty() && p.payload.len() <= 7 * TS,
            "{what}: packet {i} payload is {} bytes",
            p.payload.len()
        );
    }
    let ssrc = packets[0].ssrc;
    assert!(
        packets.iter().all(|p| p.ssrc == ssrc),
        "{what}: SSRC changed"
    );
    let start = find_aligned(source, &packets[0].payload)
        .unwrap_or_else(|| panic!("{what}: first payload is not source bytes at a TS boundary"));
    let mut off = start;
    for (i, p) in packets.iter().enumerate() {
        assert!(
            source[off..].starts_with(&p.payload),
            "{what}: packet {i} (seq {}) is not the source bytes at offset {off}",
            p.seq
        );
        off += p.payload.len();
    }
    (start, off)
}

/// Elementary PIDs and stream types from the first PAT/PMT in `ts`.
pub fn pmt_streams(ts: &[u8]) -> Vec<(u16, u8)> {
    let pid = |p: &[u8]| (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
    let section = |p: &[u8]| -> Option<Vec<u8>> {
        if p[1] & 0x40 == 0 {
            return None;
        }
        let mut i = 4;
        if p[3] & 0x20 != 0 {
            i += 1 + usize::from(p[4]);
        }
        let pointer = usize::from(*p.get(i)?);
        p.get(i + 1 + pointer..).map(<[u8]>::to_vec)
    };
    let mut pmt_pid = None;
    for p in ts.chunks_exact(TS) {
        if pid(p) == 0
            && pmt_pid.is_none()
            && let Some(s) = section(p)
        {
            // table_id, len(2), tsid(2), ver, sec, last, then program loop
            pmt_pid = Some((u16::from(s[10] & 0x1f) << 8) | u16::from(s[11]));
        } else if Some(pid(p)) == pmt_pid
            && let Some(s) = section(p)
        {
            let len = ((usize::from(s[1]) & 0x0f) << 8) | usize::from(s[2]);
            let info_len = ((usize::from(s[10]) & 0x0f) << 8) | usize::from(s[11]);
            let end = 3 + len - 4;
            let mut i = 12 + info_len;
            let mut out = Vec::new();
            while i + 5 <= end {
                let st = s[i];
                let epid = (u16::from(s[i + 1] & 0x1f) << 8) | u16::from(s[i + 2]);
                let es_len = ((usize::from(s[i + 3]) & 0x0f) << 8) | usize::from(s[i + 4]);
                out.push((epid, st));
                i += 5 + es_len;
            }
            return out;
        }
    }
    Vec::new()
}

/// Whether a decoder starting at `offset` of `ts` can start with the first
/// video PES: the first video packet with a payload-unit start from there on
/// has the random-access indicator set or carries an H.264 IDR/SPS.
pub fn starts_at_random_access(ts: &[u8], offset: usize) -> bool {
    let video: Vec<u16> = pmt_streams(ts)
        .into_iter()
        .filter(|(_, st)| matches!(st, 0x1b | 0x24 | 0x02 | 0x01))
        .map(|(p, _)| p)
        .collect();
    assert!(!video.is_empty(), "no video stream in the PMT");
    for p in ts[offset..].chunks_exact(TS) {
        let pid = (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
        if !video.contains(&pid) || p[1] & 0x40 == 0 {
            continue;
        }
        let mut payload = 4;
        if p[3] & 0x20 != 0 {
            let af_len = usize::from(p[4]);
            if af_len > 0 && p[5] & 0x40 != 0 {
                return true;
            }
            payload += 1 + af_len;
        }
        let pes = &p[payload.min(TS)..];
        return pes
            .windows(4)
            .any(|w| w[0] == 0 && w[1] == 0 && w[2] == 1 && matches!(w[3] & 0x1f, 5 | 7));
    }
    false
}

/// A sender report a capture got: when it arrived, its NTP time, RTP
/// time, packet and octet counts.
pub type SenderReport = (std::time::Instant, u64, u32, u32, u32);

/// The sender reports of `cap`, in arrival order.
pub fn sender_reports(cap: &fjord_client::Capture) -> Vec<SenderReport> {
    (cap.rtcp.iter())
        .flat_map(|r| {
            r.packets.iter().filter_map(move |p| match *p {
                fjord_client::RtcpPacket::SenderReport {
                    ntp,
                    rtp_ts,
                    packet_count,
                    octet_count,
                    ..
                } => Some((r.arrival, ntp, rtp_ts, packet_count, octet_count)),
                _ => None,
            })
        })
        .collect()
}

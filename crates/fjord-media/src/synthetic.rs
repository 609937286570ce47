//! Made-up titles for tests and benchmarks, indexed like an ingested file so
//! the engine serves them as it serves anything else: constant-rate packets
//! whose bytes say which packet they belong to (every byte of packet `i` is
//! `i as u8`), or a video track of records made by the caller.

use std::{io, path::Path};

use crate::{
    index::{self, Index, SourceId, TrackDesc, TrackKind},
    plan::{
        ChooseLayouts, IngestReport, MediaPlan, PacketRecord, SyncPoint, TimingSource, TrackPlan,
    },
    ts::{Packetization, rtp_timestamp},
};

/// Writes `packets` packets of `payload` bytes, one every `gap_ns`, to
/// `media`, and its index beside it with the block layout `fec` chooses;
/// returns the opened index.
pub fn write_constant_rate(
    media: &Path,
    payload: usize,
    gap_ns: u64,
    packets: u64,
    fec: ChooseLayouts<'_>,
) -> io::Result<Index> {
    let data: Vec<u8> = (0..packets)
        .flat_map(|i| std::iter::repeat_n(i as u8, payload))
        .collect();
    let records = (0..packets)
        .map(|i| {
            PacketRecord::file_run(
                i * gap_ns,
                rtp_timestamp(i * gap_ns),
                i * payload as u64,
                payload as u32,
            )
        })
        .collect();
    let duration_ns = packets * gap_ns;
    let p = Packetization {
        packets: records,
        // No structure: any packet is an entry point (seeks enter by time).
        sync: vec![],
        duration_ns,
        ts_per_rtp: (payload / 188).clamp(1, 7) as u8,
        report: IngestReport {
            format: "MPEG-TS".to_owned(),
            ts_packets: packets * (payload / 188).max(1) as u64,
            rtp_packets: packets,
            resyncs: 0,
            skipped_bytes: 0,
            truncated_tail_bytes: 0,
            pcr_count: 0,
            timing: TimingSource::AssumedBitrate,
            warnings: vec![],
            bitrate_bps: (data.len() as u64 * 8 * 1_000_000_000)
                .checked_div(duration_ns)
                .unwrap_or(0),
        },
    };
    let mut plan = p.into_plan();
    plan.choose_fec(fec);
    write_title(media, &data, &plan)
}

/// Writes `data` to `media` and, beside it, the index of one H.264 video
/// track made of `packets` (payload headers and split runs as the caller
/// likes), entered only at its start; returns the opened index.
pub fn write_video_track(
    media: &Path,
    data: &[u8],
    packets: Vec<PacketRecord>,
    duration_ns: u64,
) -> io::Result<Index> {
    write_video_track_with_sync(
        media,
        data,
        packets,
        vec![SyncPoint::default()],
        duration_ns,
    )
}

/// As [`write_video_track`], entered at `sync` (its key frames).
pub fn write_video_track_with_sync(
    media: &Path,
    data: &[u8],
    packets: Vec<PacketRecord>,
    sync: Vec<SyncPoint>,
    duration_ns: u64,
) -> io::Result<Index> {
    let bytes: u64 = packets.iter().map(|p| p.payload_len() as u64).sum();
    let report = IngestReport::new(
        "H.264",
        packets.len() as u64,
        (bytes * 8 * 1_000_000_000)
            .checked_div(duration_ns)
            .unwrap_or(0),
    );
    let plan = MediaPlan {
        tracks: vec![TrackPlan {
            desc: TrackDesc {
                kind: TrackKind::Video,
                payload_type: 96,
                clock_rate: 90_000,
                encoding: "H264".to_owned(),
                channels: 0,
                fmtp: "packetization-mode=1".to_owned(),
            },
            packets,
            sync,
            fec: None,
        }],
        duration_ns,
        ts_per_rtp: 0,
        report,
    };
    write_title(media, data, &plan)
}

fn write_title(media: &Path, data: &[u8], plan: &MediaPlan) -> io::Result<Index> {
    std::fs::write(media, data)?;
    let meta = std::fs::metadata(media)?;
    let path = index::index_path_for(media);
    index::write(&path, plan, &SourceId::of(data, &meta))?;
    Index::open(&path).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_carry_their_number_at_their_time() {
        let dir = tempfile::tempdir().unwrap();
        let media = dir.path().join("t.ts");
        let idx = write_constant_rate(&media, 188, 10_000_000, 300, &crate::no_parity).unwrap();
        let track = idx.track(0).unwrap();
        assert_eq!(track.packet_count(), 300);
        assert_eq!(idx.duration_ns(), 3_000_000_000);
        let data = std::fs::read(&media).unwrap();
        let rec = track.packet(257).unwrap();
        assert_eq!(rec.send_time_ns, 2_570_000_000);
        assert_eq!(rec.rtp_ts, 257 * 900);
        assert!(
            data[rec.offset as usize..][..188]
                .iter()
                .all(|&b| b == 257u16 as u8)
        );
        assert!(
            idx.matches(&media).unwrap(),
            "served as is, not re-ingested"
        );
    }
}

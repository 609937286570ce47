//! The index file: round trip, corruption, bounds.

mod synth;

use std::path::{Path, PathBuf};

use fjord_media::index::{self, Index, IndexError, SourceId, TrackDesc, TrackKind};
use fjord_media::plan::{
    BlockLayout, FLAG_MARKER, IngestReport, MediaPlan, PacketRecord, TrackPlan,
};
use fjord_media::ts::{SyncPoint, TsOptions, packetize};
use synth::Stream;

fn source() -> SourceId {
    SourceId {
        size: 188_000,
        mtime_ns: 1_234_567_890,
        content_hash: [1; 32],
        sample_hash: [2; 32],
    }
}

fn written(dir: &Path) -> (PathBuf, MediaPlan) {
    let p = packetize(&Stream::default().cbr(0), &TsOptions::default())
        .unwrap()
        .into_plan();
    let path = dir.join("clip.ts.fjidx");
    index::write(&path, &p, &source()).unwrap();
    (path, p)
}

pub fn assert_round_trip(idx: &Index, p: &MediaPlan) {
    assert_eq!(idx.duration_ns(), p.duration_ns);
    assert_eq!(idx.ts_per_rtp(), p.ts_per_rtp);
    assert_eq!(idx.report(), p.report);
    assert_eq!(idx.format(), p.report.format);
    assert_eq!(idx.track_count(), p.tracks.len());
    for (t, plan) in idx.tracks().zip(&p.tracks) {
        assert_eq!(t.desc(), plan.desc);
        assert_eq!(t.packet_count(), plan.packets.len());
        for (i, rec) in plan.packets.iter().enumerate() {
            assert_eq!(t.packet(i), Some(*rec));
        }
        assert_eq!(t.packet(plan.packets.len()), None);
        assert_eq!(t.sync_points().collect::<Vec<_>>(), plan.sync);
        assert_eq!(t.fec_layout(), plan.fec);
    }
}

/// Two tracks (video with payload headers and a split packet, audio without
/// sync points), as the elementary-stream formats write them.
fn two_tracks() -> MediaPlan {
    let video = TrackPlan {
        desc: TrackDesc {
            kind: TrackKind::Video,
            payload_type: 96,
            clock_rate: 90_000,
            encoding: "H264".to_owned(),
            channels: 0,
            fmtp: "packetization-mode=1".to_owned(),
        },
        packets: (0..50u32)
            .map(|i| PacketRecord {
                flags: if i % 5 == 4 { FLAG_MARKER } else { 0 },
                skip: if i == 7 { 14 } else { 0 },
                len2: if i == 7 { 30 } else { 0 },
                ..PacketRecord::file_run(
                    u64::from(i / 5) * 40_000_000,
                    i / 5 * 3600,
                    u64::from(i) * 1000,
                    900,
                )
                .with_prefix(&[0x7c, 0x80 | (i % 5) as u8])
            })
            .collect(),
        sync: vec![
            SyncPoint {
                packet: 0,
                time_ns: 0,
            },
            SyncPoint {
                packet: 25,
                time_ns: 200_000_000,
            },
        ],
        fec: None,
    };
    let audio = TrackPlan {
        desc: TrackDesc {
            kind: TrackKind::Audio,
            payload_type: 97,
            clock_rate: 48_000,
            encoding: "mpeg4-generic".to_owned(),
            channels: 2,
            fmtp: "streamtype=5; mode=AAC-hbr".to_owned(),
        },
        packets: (0..20u32)
            .map(|i| {
                PacketRecord::file_run(
                    u64::from(i) * 21_333_333,
                    i * 1024,
                    60_000 + u64::from(i) * 300,
                    300,
                )
                .with_prefix(&[0, 16, 0x25, 0x80])
            })
            .collect(),
        sync: vec![],
        fec: None,
    };
    MediaPlan {
        tracks: vec![video, audio],
        duration_ns: 426_666_666,
        ts_per_rtp: 0,
        report: IngestReport::new("MP4 (H.264, AAC)", 70, 1_000_000),
    }
}

#[test]
fn several_tracks_with_payload_headers_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clip.mp4.fjidx");
    let plan = two_tracks();
    index::write(&path, &plan, &source()).unwrap();
    let idx = Index::open(&path).unwrap();
    assert_round_trip(&idx, &plan);
    let audio = idx.track(1).unwrap();
    assert_eq!(audio.channels(), 2);
    assert_eq!(audio.first_sent_at_or_after(0, 1, &mut |_| Ok(())), 0);
    assert_eq!(
        audio.first_sent_at_or_after(21_333_334, 1, &mut |_| Ok(())),
        2
    );
    assert_eq!(
        audio.first_sent_at_or_after(u64::MAX, 1, &mut |_| Ok(())),
        20
    );
    let split = idx.track(0).unwrap().packet(7).unwrap();
    assert_eq!((split.offset2(), split.payload_len()), (7914, 932));
}

#[test]
fn the_fec_block_layout_is_recorded_per_track() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clip.mp4.fjidx");
    let mut plan = two_tracks();
    plan.tracks[0].fec = Some(BlockLayout {
        k: 223,
        m: 32,
        symbol_len: 1324,
    });
    index::write(&path, &plan, &source()).unwrap();
    let idx = Index::open(&path).unwrap();
    assert_round_trip(&idx, &plan);
    assert_eq!(idx.track(1).unwrap().fec_layout(), None);

    // A layout with a zero field is neither "none" nor a layout.
    plan.tracks[1].fec = Some(BlockLayout {
        k: 10,
        m: 0,
        symbol_len: 200,
    });
    index::write(&path, &plan, &source()).unwrap();
    assert!(matches!(Index::open(&path), Err(IndexError::Corrupt(_))));
}

#[test]
fn a_packet_beyond_the_media_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clip.mp4.fjidx");
    let mut plan = two_tracks();
    // The second run of one packet ends past the 188000-byte source.
    plan.tracks[0].packets[3].len2 = 200_000;
    index::write(&path, &plan, &source()).unwrap();
    assert!(matches!(Index::open(&path), Err(IndexError::Corrupt(_))));
}

#[test]
fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (path, p) = written(dir.path());
    let idx = Index::open(&path).unwrap();
    assert_round_trip(&idx, &p);
    assert_eq!(idx.source(), source());
    let t = idx.track(0).unwrap();
    assert_eq!(t.kind(), TrackKind::Video);
    assert_eq!(t.payload_type(), 33);
    assert_eq!(t.clock_rate(), 90_000);
    assert_eq!(t.encoding(), "MP2T");
    assert_eq!(t.fmtp(), "");
    assert!(idx.track(1).is_none());
    assert_eq!(idx.tracks().count(), 1);
    // No temp files left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn sync_before_finds_the_latest_point() {
    let dir = tempfile::tempdir().unwrap();
    let (path, p) = written(dir.path());
    let idx = Index::open(&path).unwrap();
    let t = idx.track(0).unwrap();
    assert_eq!(t.sync_before(0), SyncPoint::default());
    for s in &p.tracks[0].sync {
        assert_eq!(t.sync_before(s.time_ns), *s);
        assert_eq!(t.sync_before(s.time_ns + 1), *s);
    }
    assert_eq!(t.sync_before(u64::MAX), *p.tracks[0].sync.last().unwrap());
}

#[test]
fn index_path_appends_extension() {
    assert_eq!(
        index::index_path_for(Path::new("/m/clip.ts")),
        PathBuf::from("/m/clip.ts.fjidx")
    );
}

#[test]
fn any_flipped_byte_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let good = std::fs::read(&path).unwrap();
    for at in (0..good.len()).step_by(97).chain([good.len() - 1]) {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        match Index::open(&path) {
            Err(IndexError::Corrupt(_) | IndexError::Magic | IndexError::Version { .. }) => {}
            other => panic!("byte {at}: {other:?}"),
        }
    }
}

#[test]
fn truncated_index_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let good = std::fs::read(&path).unwrap();
    for len in [0, 1, 8, 100, 215, good.len() / 2, good.len() - 1] {
        std::fs::write(&path, &good[..len]).unwrap();
        assert!(Index::open(&path).is_err(), "len {len}");
    }
}

#[test]
fn other_version_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] = 1;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        Index::open(&path),
        Err(IndexError::Version { found: 1 })
    ));
    bytes[0] = b'X';
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(Index::open(&path), Err(IndexError::Magic)));
}

/// Rewrite the trailer so only structural validation can catch the damage.
pub fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 32;
    let sum = blake3::hash(&bytes[..n]);
    bytes[n..].copy_from_slice(sum.as_bytes());
}

#[test]
fn bad_tables_with_valid_checksum_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = written(dir.path());
    let good = std::fs::read(&path).unwrap();
    let entry = 200;
    // packets_off, packets_count, sync_off, sync_count, string offsets, kind, track count, source size.
    let cases: [(usize, &[u8]); 9] = [
        (entry + 8, &[0xff; 8]),
        (entry + 16, &[0xff; 8]),
        (entry + 24, &[3, 0, 0, 0, 0, 0, 0, 0]),
        (entry + 32, &[0xff, 0xff, 0, 0, 0, 0, 0, 0]),
        (entry + 40, &[0xff; 4]),
        (entry + 52, &[0xff; 4]),
        (entry, &[9]),
        (12, &[2, 0, 0, 0]),
        (16, &[1, 0, 0, 0, 0, 0, 0, 0]),
    ];
    for (at, patch) in cases {
        let mut bad = good.clone();
        bad[at..at + patch.len()].copy_from_slice(patch);
        reseal(&mut bad);
        std::fs::write(&path, &bad).unwrap();
        assert!(
            matches!(Index::open(&path), Err(IndexError::Corrupt(_))),
            "patch at {at}"
        );
    }
}

#[test]
fn identity_from_the_file_equals_identity_from_memory() {
    let dir = tempfile::tempdir().unwrap();
    for len in [0usize, 1, 4095, 3 << 20, (17 << 20) + 5] {
        let path = dir.path().join(format!("m{len}"));
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        assert_eq!(
            SourceId::of_file(&file, &meta, &|_| {}).unwrap(),
            SourceId::of(&data, &meta),
            "len {len}"
        );
    }
}

/// A title loads reading the index's head only: a damaged packet table
/// opens unverified (its records read as they are, bounds-checked), and
/// `verify` (what a server runs later, paced) finds the damage that the
/// full `open` refuses.
#[test]
fn unverified_open_leaves_the_records_and_checksum_to_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clip.mp4.fjidx");
    index::write(&path, &two_tracks(), &source()).unwrap();
    let idx = Index::open_unverified(&path).unwrap();
    let mut read = 0;
    idx.verify(&mut |piece| {
        read += piece.len();
        Ok(())
    })
    .unwrap();
    // The body once (the checksum), then the records again (checked
    // piece by piece, read again in case the first pass left the cache).
    let records: usize = idx
        .tracks()
        .map(|t| t.records(0..t.packet_count()).len())
        .sum();
    let body = std::fs::metadata(&path).unwrap().len() as usize - 32;
    assert_eq!(read, body + records);
    // A read error met on the way (a bad sector) is an I/O error, not damage.
    let failing = idx.verify(&mut |_| Err(std::io::Error::from_raw_os_error(5)));
    assert!(matches!(failing, Err(IndexError::Io(_))), "{failing:?}");

    // One byte of a record's offset (the first track's first record).
    let mut bad = std::fs::read(&path).unwrap();
    let packets_off = u64::from_le_bytes(bad[208..216].try_into().unwrap()) as usize;
    bad[packets_off + 13] ^= 0x40;
    std::fs::write(&path, &bad).unwrap();
    let idx = Index::open_unverified(&path).unwrap();
    assert!(idx.track(0).unwrap().packet(0).is_some());
    assert!(
        matches!(idx.verify(&mut |_| Ok(())), Err(IndexError::Corrupt(m)) if m == "checksum mismatch")
    );
    assert!(matches!(Index::open(&path), Err(IndexError::Corrupt(_))));

    // Resealed, the record is caught for lying outside the media file.
    reseal(&mut bad);
    std::fs::write(&path, &bad).unwrap();
    let idx = Index::open_unverified(&path).unwrap();
    assert!(
        matches!(idx.verify(&mut |_| Ok(())), Err(IndexError::Corrupt(m)) if m.contains("outside"))
    );

    // A damaged head is refused even unverified.
    bad[200] = 9;
    std::fs::write(&path, &bad).unwrap();
    assert!(Index::open_unverified(&path).is_err());
}

/// The media file is matched by size and mtime when a title loads, and by
/// its sampled content when it is verified.
#[test]
fn media_content_is_checked_by_verify_media() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("m.bin");
    let data: Vec<u8> = (0..(3 << 20)).map(|i: usize| (i * 31) as u8).collect();
    std::fs::write(&media, &data).unwrap();
    let meta = std::fs::metadata(&media).unwrap();
    let src = SourceId::of(&data, &meta);
    let path = index::index_path_for(&media);
    index::write(&path, &two_tracks(), &src).unwrap();
    let idx = Index::open_unverified(&path).unwrap();
    assert!(idx.matches_metadata(&media).unwrap());
    idx.verify_media(&data, &mut |_| Ok(())).unwrap();
    let mut other = data.clone();
    other[100] ^= 1;
    assert!(idx.verify_media(&other, &mut |_| Ok(())).is_err());
}

/// An index whose only bytes are those `head_ranges` names (the rest
/// zeros, as a sparse file not yet filled) opens unverified with every
/// track's description and sync points, for one and two tracks.
#[test]
fn the_head_ranges_are_all_an_unverified_open_reads() {
    let dir = tempfile::tempdir().unwrap();
    for plan in [written(dir.path()).1, two_tracks()] {
        let path = dir.path().join("whole.fjidx");
        index::write(&path, &plan, &source()).unwrap();
        let whole = std::fs::read(&path).unwrap();
        let ranges = index::head_ranges(&whole[..whole.len().min(4096)]).unwrap();
        let mut sparse = vec![0u8; whole.len()];
        for r in ranges {
            let r = r.start as usize..r.end as usize;
            sparse[r.clone()].copy_from_slice(&whole[r]);
        }
        let part = dir.path().join("part.fjidx");
        std::fs::write(&part, &sparse).unwrap();
        let idx = Index::open_unverified(&part).unwrap();
        assert_eq!(idx.track_count(), plan.tracks.len());
        for (t, p) in idx.tracks().zip(&plan.tracks) {
            assert_eq!(t.desc(), p.desc);
            assert_eq!(t.sync_points().collect::<Vec<_>>(), p.sync);
        }
        assert!(Index::open(&part).is_err(), "the records are not there");
    }
    assert!(index::head_ranges(&[0u8; 100]).is_err(), "too short");
}

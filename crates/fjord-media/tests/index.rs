//! The index file: round trip, corruption, bounds.

mod synth;

use std::path::{Path, PathBuf};

use fjord_media::index::{self, Index, IndexError, SourceId, TrackDesc, TrackKind};
use fjord_media::ts::{Packetization, SyncPoint, TsOptions, packetize};
use synth::Stream;

fn source() -> SourceId {
    SourceId {
        size: 188_000,
        mtime_ns: 1_234_567_890,
        content_hash: [1; 32],
        sample_hash: [2; 32],
    }
}

fn written(dir: &Path) -> (PathBuf, Packetization) {
    let p = packetize(&Stream::default().cbr(0), &TsOptions::default()).unwrap();
    let path = dir.join("clip.ts.fjidx");
    index::write(&path, &p, &source(), &TrackDesc::mpeg_ts()).unwrap();
    (path, p)
}

pub fn assert_round_trip(idx: &Index, p: &Packetization) {
    assert_eq!(idx.duration_ns(), p.duration_ns);
    assert_eq!(idx.ts_per_rtp(), p.ts_per_rtp);
    assert_eq!(idx.report(), p.report);
    assert_eq!(idx.track_count(), 1);
    let t = idx.track(0).unwrap();
    assert_eq!(t.packet_count(), p.packets.len());
    for (i, rec) in p.packets.iter().enumerate() {
        assert_eq!(t.packet(i), Some(*rec));
    }
    assert_eq!(t.packet(p.packets.len()), None);
    assert_eq!(t.sync_points().collect::<Vec<_>>(), p.sync);
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
    for s in &p.sync {
        assert_eq!(t.sync_before(s.time_ns), *s);
        assert_eq!(t.sync_before(s.time_ns + 1), *s);
    }
    assert_eq!(t.sync_before(u64::MAX), *p.sync.last().unwrap());
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
    bytes[8] = 2;
    std::fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        Index::open(&path),
        Err(IndexError::Version { found: 2 })
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
    let entry = 184;
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

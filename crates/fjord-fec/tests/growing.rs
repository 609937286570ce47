//! A growing recording's parity (`fjord_fec::growing`), extended as its
//! snapshots add packets: every whole block it holds is the block the
//! whole title's sidecar holds (repair symbols, hashes, repair window), a
//! sidecar mapped before an extension still reads what it read, and no
//! title takes it for its own parity.

use std::path::{Path, PathBuf};

use fjord_fec::growing::GrowingParity;
use fjord_fec::{FecParams, Sidecar, sidecar};
use fjord_media::index::{self, Index};
use fjord_media::{BlockLayout, IngestReport, MediaPlan, TrackPlan};

mod common;
use common::{Rng, title};

const PARAMS: FecParams = FecParams { k: 10, m: 4 };

/// The index of the first `n` packets of `full`'s track, as a snapshot of
/// the recording when it had them.
fn snapshot(dir: &Path, full: &Index, n: usize) -> Index {
    let track = full.track(0).unwrap();
    let packets = (0..n).map(|i| track.packet(i).unwrap()).collect();
    let plan = MediaPlan {
        tracks: vec![TrackPlan {
            desc: track.desc().clone(),
            packets,
            sync: vec![Default::default()],
            fec: None,
        }],
        duration_ns: n as u64 * 1_000_000,
        ts_per_rtp: 0,
        report: IngestReport::new("test", n as u64, 8_000_000),
    };
    let path = dir.join(format!("snapshot-{n}.fjidx"));
    index::write(&path, &plan, &full.source()).unwrap();
    Index::open(&path).unwrap()
}

/// The whole title's sidecar, its layout the growing parity's (the longest
/// payload a planner makes as the symbol length).
fn whole(media: &Path, full: &Index, symbol_len: u32) -> Sidecar<Vec<u8>> {
    let path = media.with_extension("whole.fjfec");
    let checksum = sidecar::index_checksum(&index::index_path_for(media)).unwrap();
    let layout = BlockLayout {
        k: PARAMS.k,
        m: PARAMS.m,
        symbol_len,
    };
    let data = std::fs::read(media).unwrap();
    fjord_fec::write_sidecar(&path, full, &checksum, &data, &[layout], &mut |_, _| {}).unwrap();
    Sidecar::parse(std::fs::read(&path).unwrap()).unwrap()
}

fn growing_at(dir: &Path) -> PathBuf {
    dir.join("rec.mp4.fjfec")
}

#[test]
fn a_growing_recordings_blocks_are_the_whole_titles_and_stay_where_they_were_read() {
    let dir = tempfile::tempdir().unwrap();
    let media = title(dir.path(), 400, PARAMS, &mut Rng(0x5EED));
    let full = Index::open(&index::index_path_for(&media)).unwrap();
    let data = std::fs::read(&media).unwrap();
    let path = growing_at(dir.path());
    let mut parity = GrowingParity::create(&path, &[PARAMS]).unwrap();
    let (_, empty) = sidecar::open_unverified(&path).unwrap();
    assert_eq!(empty.track(0).unwrap().block_count(), 0);

    // 37 packets: 3 whole blocks, the 4th unfinished; a call stops at the
    // block that reaches its budget of source bytes.
    let at_37 = snapshot(dir.path(), &full, 37);
    let done = parity.extend(&at_37, &data, 1).unwrap();
    assert_eq!((done.blocks, done.more), (1, true));
    let done = parity.extend(&at_37, &data, u64::MAX).unwrap();
    assert_eq!((done.blocks, done.more), (2, false));
    let (_, early) = sidecar::open_unverified(&path).unwrap();
    early.check_covers(&at_37).unwrap();
    let early_fec = early.track(0).unwrap();
    assert_eq!((early_fec.packet_count(), early_fec.block_count()), (30, 3));
    assert_eq!(
        early_fec.block_of(30),
        None,
        "the unfinished block has none"
    );
    let early_blocks: Vec<Vec<u8>> = (0..3)
        .map(|b| {
            early_fec
                .repair_data(&early_fec.block(b).unwrap())
                .unwrap()
                .to_vec()
        })
        .collect();

    let done = parity.extend(&full, &data, u64::MAX).unwrap();
    assert_eq!((done.blocks, done.more), (37, false));
    let (_, late) = sidecar::open_unverified(&path).unwrap();
    let late_fec = late.track(0).unwrap();
    assert_eq!(late_fec.block_count(), 40);
    // A parity further than a snapshot's packets does not fit it.
    assert!(late.check_covers(&at_37).is_err());

    let want = whole(&media, &full, late_fec.symbol_len());
    let want_fec = want.track(0).unwrap();
    for b in 0..40 {
        let (got, exp) = (late_fec.block(b).unwrap(), want_fec.block(b).unwrap());
        assert_eq!(
            (got.source_hash, got.repair_hash, got.source_count),
            (exp.source_hash, exp.repair_hash, exp.source_count),
            "block {b}"
        );
        assert_eq!(late_fec.repair_data(&got), want_fec.repair_data(&exp));
    }
    for i in 0..400 {
        assert_eq!(
            late_fec.symbol_hash(i),
            want_fec.symbol_hash(i),
            "packet {i}"
        );
    }
    assert_eq!(late_fec.repair_window_ns(), want_fec.repair_window_ns());
    // What was mapped before the extension reads as it did.
    for (b, bytes) in early_blocks.iter().enumerate() {
        let blk = early_fec.block(b as u64).unwrap();
        assert_eq!(early_fec.repair_data(&blk).unwrap(), &bytes[..]);
    }
    let checksum = sidecar::index_checksum(&index::index_path_for(&media)).unwrap();
    assert!(matches!(
        late.check_belongs(&full, &checksum),
        Err(sidecar::SidecarError::Growing)
    ));
    assert!(matches!(
        late.verify(&mut |_| Ok(())),
        Err(sidecar::SidecarError::Growing)
    ));
}

#[test]
fn a_recording_whose_tracks_change_is_refused_by_its_parity() {
    let dir = tempfile::tempdir().unwrap();
    let media = title(dir.path(), 50, PARAMS, &mut Rng(9));
    let full = Index::open(&index::index_path_for(&media)).unwrap();
    let data = std::fs::read(&media).unwrap();
    let mut parity = GrowingParity::create(&growing_at(dir.path()), &[PARAMS, PARAMS]).unwrap();
    assert!(parity.extend(&full, &data, u64::MAX).is_err());
}

/// `auto` rates a track by two seconds of it at least: a layout chosen
/// from a first key frame's burst would not fit the stream.
#[test]
fn auto_parity_waits_for_two_seconds_of_every_track() {
    let dir = tempfile::tempdir().unwrap();
    // A packet a millisecond: 3 s in all.
    let media = title(dir.path(), 3000, PARAMS, &mut Rng(11));
    let full = Index::open(&index::index_path_for(&media)).unwrap();
    let early = snapshot(dir.path(), &full, 1500);
    use fjord_fec::{FecChoice, growing::params_for};
    assert_eq!(params_for(&early, FecChoice::Auto), None);
    assert_eq!(params_for(&early, FecChoice::Off), None);
    assert_eq!(
        params_for(&early, FecChoice::Fixed(PARAMS)),
        Some(vec![PARAMS])
    );
    let auto = params_for(&full, FecChoice::Auto).unwrap();
    let track = full.track(0).unwrap();
    let bytes: u64 = (0..3000)
        .map(|i| track.packet(i).unwrap().payload_len() as u64)
        .sum();
    let span_ns = track.packet(2999).unwrap().send_time_ns;
    let bitrate = bytes * 8 * 1_000_000_000 / span_ns;
    assert_eq!(auto, vec![FecParams::for_track(bitrate, bytes / 3000)]);
}

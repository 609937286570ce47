//! Stored media: an MPEG-TS made by ffmpeg is ingested with parity, bytes
//! are flipped, `verify` names exactly the damaged blocks and byte ranges
//! and `repair` restores the file bit-exact (or refuses, saying why).

use std::path::{Path, PathBuf};
use std::process::Command;

use fjord_fec::storage::DamagedBlock;
use fjord_fec::{FecChoice, FecError, FecParams, RepairOutcome, SidecarError, sidecar_path_for};
use fjord_media::index::{Index, index_path_for};
use fjord_media::ts::TsOptions;

const PARAMS: FecParams = FecParams { k: 16, m: 4 };

/// A few seconds of MPEG-2 video and MP2 audio; `tone` varies the content.
/// ffmpeg is a test dependency (`make test` installs it): fail if missing.
fn make_title(dir: &Path, name: &str, tone: u32) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i"])
        .arg("testsrc=size=320x240:rate=25:duration=3")
        .args(["-f", "lavfi", "-i"])
        .arg(format!("sine=frequency={tone}:duration=3"))
        .args([
            "-c:v",
            "mpeg2video",
            "-b:v",
            "1M",
            "-c:a",
            "mp2",
            "-f",
            "mpegts",
        ])
        .arg(&path)
        .status()
        .expect("ffmpeg is needed for this test (make test installs it)");
    assert!(status.success(), "ffmpeg failed");
    let layouts = fjord_fec::layouts(FecChoice::Fixed(PARAMS));
    fjord_media::ingest_file(&path, &TsOptions::default(), &layouts, &mut |_, _| {}).unwrap();
    fjord_fec::protect(&path, &mut |_, _| {}).unwrap();
    path
}

/// Flips one byte in the middle of each packet of `packets` (track 0).
fn damage(media: &Path, packets: &[u64]) -> Vec<u8> {
    let idx = Index::open(&index_path_for(media)).unwrap();
    let track = idx.track(0).unwrap();
    let mut data = std::fs::read(media).unwrap();
    for &i in packets {
        let r = track.packet(i as usize).unwrap();
        data[(r.offset + u64::from(r.len) / 2) as usize] ^= 0x5A;
    }
    std::fs::write(media, &data).unwrap();
    data
}

fn packet_range(media: &Path, i: u64) -> std::ops::Range<u64> {
    let idx = Index::open(&index_path_for(media)).unwrap();
    let r = idx.track(0).unwrap().packet(i as usize).unwrap();
    assert_eq!(r.len2, 0, "TS packets are one run");
    r.offset..r.offset + u64::from(r.len)
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn verify_finds_and_repair_undoes_flipped_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let media = make_title(dir.path(), "a.ts", 440);
    let original = std::fs::read(&media).unwrap();
    let files = dir_names(dir.path());
    assert_eq!(files, ["a.ts", "a.ts.fjfec", "a.ts.fjidx"]);
    assert!(fjord_fec::verify(&media).unwrap().is_clean());
    assert_eq!(fjord_fec::repair(&media).unwrap(), RepairOutcome::Clean);

    // Block 1: two non-adjacent packets; block 3: its last packet.
    let hit = [17, 20, 63];
    damage(&media, &hit);
    let report = fjord_fec::verify(&media).unwrap();
    assert!(!report.is_clean());
    let expect = |block: u64, damaged: Vec<u64>| DamagedBlock {
        track: 0,
        block,
        packets: block * 16..block * 16 + 16,
        ranges: damaged.iter().map(|&i| packet_range(&media, i)).collect(),
        damaged,
        repair_count: 4,
        parity_ok: true,
    };
    assert_eq!(
        report.damaged,
        [expect(1, vec![17, 20]), expect(3, vec![63])]
    );
    assert!(report.parity_damaged.is_empty() && !report.outside_packets);
    assert!(
        report
            .to_string()
            .contains("track 0 block 1 (packets 16..32): 2 of 16 packets")
    );

    let outcome = fjord_fec::repair(&media).unwrap();
    assert_eq!(
        outcome,
        RepairOutcome::Repaired {
            blocks: 2,
            packets: 3,
            bytes: hit
                .iter()
                .map(|&i| packet_range(&media, i))
                .map(|r| r.end - r.start)
                .sum(),
            packet_file: false,
        }
    );
    assert!(
        std::fs::read(&media).unwrap() == original,
        "bit-exact again"
    );
    assert_eq!(dir_names(dir.path()), files, "no temp file left");
    let idx = Index::open(&index_path_for(&media)).unwrap();
    assert!(
        idx.matches(&media).unwrap(),
        "ingest-time mtime restored: the index matches"
    );
    assert!(fjord_fec::verify(&media).unwrap().is_clean());
}

#[test]
fn repair_refuses_more_than_m_damaged_packets_in_a_block() {
    let dir = tempfile::tempdir().unwrap();
    let media = make_title(dir.path(), "a.ts", 440);
    let files = dir_names(dir.path());
    let damaged = damage(&media, &[32, 34, 36, 38, 40]);
    let report = fjord_fec::verify(&media).unwrap();
    assert_eq!(report.damaged.len(), 1);
    assert!(!report.damaged[0].repairable());
    match fjord_fec::repair(&media) {
        Err(FecError::BeyondRepair(why)) => {
            assert!(
                why.contains("track 0 block 2: 5 damaged packets, the parity repairs at most 4"),
                "{why}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(std::fs::read(&media).unwrap() == damaged, "file left alone");
    assert_eq!(dir_names(dir.path()), files, "no temp file left");
}

#[test]
fn damaged_parity_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let media = make_title(dir.path(), "a.ts", 440);
    let sidecar_path = sidecar_path_for(&media);
    let sidecar = fjord_fec::sidecar::open(&sidecar_path).unwrap();
    let (off, _) = sidecar
        .track(0)
        .unwrap()
        .block(5)
        .unwrap()
        .repair_symbol_range(2)
        .unwrap();
    drop(sidecar);
    let mut bytes = std::fs::read(&sidecar_path).unwrap();
    bytes[off as usize + 3] ^= 1;
    std::fs::write(&sidecar_path, &bytes).unwrap();
    let report = fjord_fec::verify(&media).unwrap();
    assert_eq!(report.parity_damaged, [(0, 5)]);
    assert!(report.damaged.is_empty());
    assert!(matches!(
        fjord_fec::repair(&media),
        Err(FecError::BeyondRepair(_))
    ));
    // A damaged table is caught by the sidecar's checksum.
    bytes[200] ^= 1;
    std::fs::write(&sidecar_path, &bytes).unwrap();
    assert!(matches!(
        fjord_fec::verify(&media),
        Err(FecError::Sidecar {
            source: SidecarError::Corrupt(_),
            ..
        })
    ));
}

#[test]
fn a_sidecar_from_another_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_title(dir.path(), "a.ts", 440);
    let b = make_title(dir.path(), "b.ts", 880);
    std::fs::copy(sidecar_path_for(&b), sidecar_path_for(&a)).unwrap();
    for result in [
        fjord_fec::verify(&a).map(|_| ()),
        fjord_fec::repair(&a).map(|_| ()),
    ] {
        match result {
            Err(FecError::Sidecar {
                source: SidecarError::Mismatch(why),
                ..
            }) => {
                assert!(why.contains("different media file"), "{why}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // Same media, but an index re-made with other options: refused too.
    fjord_fec::protect(&a, &mut |_, _| {}).unwrap();
    let opts = TsOptions {
        ts_per_rtp: 3,
        ..TsOptions::default()
    };
    let layouts = fjord_fec::layouts(FecChoice::Fixed(PARAMS));
    fjord_media::ingest_file(&a, &opts, &layouts, &mut |_, _| {}).unwrap();
    assert!(matches!(
        fjord_fec::verify(&a),
        Err(FecError::Sidecar {
            source: SidecarError::Mismatch(_),
            ..
        })
    ));
}

#[test]
fn the_index_records_the_layout_and_the_sidecar_must_match_it() {
    let dir = tempfile::tempdir().unwrap();
    let media = make_title(dir.path(), "a.ts", 440);
    let idx = Index::open(&index_path_for(&media)).unwrap();
    for t in idx.tracks() {
        let l = t.fec_layout().expect("ingest with --fec records a layout");
        assert_eq!((l.k, l.m), (PARAMS.k, PARAMS.m));
        let longest = (0..t.packet_count())
            .map(|i| t.packet(i).unwrap().payload_len())
            .max()
            .unwrap();
        assert_eq!(l.symbol_len as usize, longest + 8, "E: the longest ADUI");
    }
    let sidecar = fjord_fec::sidecar::open(&sidecar_path_for(&media)).unwrap();

    // Re-ingested with another layout, the same media's index no longer
    // describes that sidecar, even if the checksum binding were forged.
    let other = fjord_fec::layouts(FecChoice::Fixed(FecParams { k: 10, m: 2 }));
    fjord_media::ingest_file(&media, &TsOptions::default(), &other, &mut |_, _| {}).unwrap();
    let idx = Index::open(&index_path_for(&media)).unwrap();
    assert!(matches!(
        sidecar.check_belongs(&idx, &sidecar.index_checksum()),
        Err(SidecarError::Mismatch(why)) if why.contains("block layout")
    ));

    // Ingested without parity: the index records none and `protect`
    // removes the stale sidecar.
    let off = fjord_fec::layouts(FecChoice::Off);
    fjord_media::ingest_file(&media, &TsOptions::default(), &off, &mut |_, _| {}).unwrap();
    let idx = Index::open(&index_path_for(&media)).unwrap();
    assert!(idx.tracks().all(|t| t.fec_layout().is_none()));
    assert_eq!(fjord_fec::protect(&media, &mut |_, _| {}).unwrap(), None);
    assert!(!sidecar_path_for(&media).exists());
}

#[test]
fn prefabricated_packets_are_checked_and_made_again_by_repair() {
    use fjord_fec::storage::PacketFile;
    use fjord_media::prefab::{prefab_path_for, prefabricate};
    let dir = tempfile::tempdir().unwrap();
    let media = make_title(dir.path(), "p.ts", 440);
    prefabricate(&media, &mut |_, _| {}).unwrap();
    let packets = prefab_path_for(&media);
    let good = std::fs::read(&packets).unwrap();
    let report = fjord_fec::verify(&media).unwrap();
    assert_eq!(report.packet_file, PacketFile::Intact);
    assert!(report.is_clean());

    // A flipped byte in the packet file: one packet differs from the media.
    let mut bad = good.clone();
    let at = bad.len() - 100;
    bad[at] ^= 0x5A;
    std::fs::write(&packets, &bad).unwrap();
    let report = fjord_fec::verify(&media).unwrap();
    assert_eq!(report.packet_file, PacketFile::Damaged(1), "{report}");
    assert!(!report.is_clean() && report.beyond_repair().is_none());
    assert!(
        report.to_string().contains("prefabricated packets"),
        "{report}"
    );
    match fjord_fec::repair(&media).unwrap() {
        RepairOutcome::Repaired {
            packets: 0,
            packet_file: true,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(std::fs::read(&packets).unwrap() == good);

    // Damaged media: the packets are made again from the repaired file.
    damage(&media, &[3]);
    let report = fjord_fec::verify(&media).unwrap();
    assert_eq!(report.packet_file, PacketFile::Unchecked);
    match fjord_fec::repair(&media).unwrap() {
        RepairOutcome::Repaired {
            packets: 1,
            packet_file: true,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(std::fs::read(&packets).unwrap() == good);
    assert!(fjord_fec::verify(&media).unwrap().is_clean());
}

/// A server loads a sidecar reading its header only: a damaged block entry
/// is then refused where it is read (that block has no parity), its
/// checksum is left to `verify`, and the repair window recorded at
/// encoding is the one computed from the index.
#[test]
fn unverified_sidecars_check_blocks_where_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let media = make_title(dir.path(), "a.ts", 440);
    let sidecar_path = sidecar_path_for(&media);
    let index = fjord_media::Index::open(&fjord_media::index::index_path_for(&media)).unwrap();
    let (_, sidecar) = fjord_fec::sidecar::open_unverified(&sidecar_path).unwrap();
    let track = sidecar.track(0).unwrap();
    let computed = fjord_fec::encode::repair_window_ns(&index.track(0).unwrap(), track.params().k);
    assert!(computed > 0);
    assert_eq!(track.repair_window_ns(), Some(computed));
    let table_at = track.block_table().as_ptr() as usize - sidecar.bytes().as_ptr() as usize;
    drop(sidecar);

    // Block 3's repair_count (offset 14 of its 80-byte entry).
    let mut bytes = std::fs::read(&sidecar_path).unwrap();
    bytes[table_at + 3 * 80 + 14] ^= 0x7f;
    std::fs::write(&sidecar_path, &bytes).unwrap();
    let (_, sidecar) = fjord_fec::sidecar::open_unverified(&sidecar_path).unwrap();
    let track = sidecar.track(0).unwrap();
    assert!(track.block(2).is_some());
    assert!(track.block(3).is_none());
    assert!(matches!(
        sidecar.verify(&mut |_| Ok(())),
        Err(SidecarError::Corrupt("checksum mismatch"))
    ));
    assert!(fjord_fec::sidecar::open(&sidecar_path).is_err());
}

//! File-level ingest: errors, staleness, re-ingest.

mod synth;

use std::fs::{File, FileTimes};
use std::time::{Duration, SystemTime};

use fjord_media::index::{self, Index};
use fjord_media::ingest::{IngestError, ingest_file, open_or_ingest};
use fjord_media::no_parity;
use fjord_media::ts::TsOptions;
use synth::Stream;

fn no_progress() -> impl FnMut(u64, u64) {
    |_, _| {}
}

#[test]
fn ingest_writes_a_matching_index() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("clip.ts");
    std::fs::write(&media, Stream::default().cbr(0)).unwrap();
    let mut calls = Vec::new();
    let report = ingest_file(&media, &TsOptions::default(), &no_parity, &mut |d, t| {
        calls.push((d, t))
    })
    .unwrap();
    assert_eq!(report.ts_packets, 1000);
    assert_eq!(calls.last(), Some(&(188_000, 188_000)));
    let idx = Index::open(&index::index_path_for(&media)).unwrap();
    assert!(idx.matches(&media).unwrap());
    let src = idx.source();
    assert_eq!(src.size, 188_000);
    assert_eq!(
        src.content_hash,
        *blake3::hash(&std::fs::read(&media).unwrap()).as_bytes()
    );
    assert_eq!(idx.report(), report);
}

#[test]
fn open_or_ingest_reuses_then_reingests_when_stale() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("clip.ts");
    let data = Stream::default().cbr(0);
    std::fs::write(&media, &data).unwrap();
    let opts = TsOptions::default();
    let (_, report) = open_or_ingest(&media, &opts, &no_parity, &mut no_progress()).unwrap();
    assert!(report.is_some());
    let (_, report) = open_or_ingest(&media, &opts, &no_parity, &mut no_progress()).unwrap();
    assert!(report.is_none(), "fresh index is reused");

    // Same size, different content, mtime set back to what it was: the sample hash catches it.
    let mtime = std::fs::metadata(&media).unwrap().modified().unwrap();
    let mut changed = data.clone();
    changed[188 * 5 + 100] ^= 0xff;
    std::fs::write(&media, &changed).unwrap();
    File::options()
        .write(true)
        .open(&media)
        .unwrap()
        .set_times(FileTimes::new().set_modified(mtime))
        .unwrap();
    let idx = Index::open(&index::index_path_for(&media)).unwrap();
    assert!(!idx.matches(&media).unwrap());
    let (_, report) = open_or_ingest(&media, &opts, &no_parity, &mut no_progress()).unwrap();
    assert!(report.is_some(), "changed content re-ingests");

    // Only the mtime changes.
    File::options()
        .write(true)
        .open(&media)
        .unwrap()
        .set_times(FileTimes::new().set_modified(SystemTime::now() + Duration::from_secs(5)))
        .unwrap();
    let idx = Index::open(&index::index_path_for(&media)).unwrap();
    assert!(!idx.matches(&media).unwrap());
    let (_, report) = open_or_ingest(&media, &opts, &no_parity, &mut no_progress()).unwrap();
    assert!(report.is_some(), "new mtime re-ingests");

    // Other options re-ingest too.
    let other = TsOptions {
        ts_per_rtp: 3,
        ..opts
    };
    let (idx, report) = open_or_ingest(&media, &other, &no_parity, &mut no_progress()).unwrap();
    assert!(report.is_some());
    assert_eq!(idx.ts_per_rtp(), 3);
}

#[test]
fn corrupt_index_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("clip.ts");
    let data = Stream::default().cbr(0);
    std::fs::write(&media, &data).unwrap();
    std::fs::write(index::index_path_for(&media), b"FJORDIDX garbage").unwrap();
    let (idx, report) = open_or_ingest(
        &media,
        &TsOptions::default(),
        &no_parity,
        &mut no_progress(),
    )
    .unwrap();
    assert!(report.is_some());
    let expected = fjord_media::ts::packetize(&data, &TsOptions::default()).unwrap();
    assert_eq!(idx.track(0).unwrap().packet_count(), expected.packets.len());
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TsOptions::default();
    let missing = dir.path().join("missing.ts");
    let e = ingest_file(&missing, &opts, &no_parity, &mut no_progress()).unwrap_err();
    assert!(matches!(e, IngestError::Open { .. }), "{e}");
    assert!(e.to_string().contains("missing.ts: cannot open"), "{e}");

    let e = ingest_file(dir.path(), &opts, &no_parity, &mut no_progress()).unwrap_err();
    assert!(matches!(e, IngestError::NotAFile { .. }), "{e}");

    let empty = dir.path().join("empty.ts");
    std::fs::write(&empty, b"").unwrap();
    let e = ingest_file(&empty, &opts, &no_parity, &mut no_progress()).unwrap_err();
    assert!(matches!(e, IngestError::Empty { .. }), "{e}");
    assert!(e.to_string().contains("empty.ts: the file is empty"), "{e}");

    let text = dir.path().join("notes.ts");
    std::fs::write(&text, "just some words\n".repeat(100)).unwrap();
    let e = open_or_ingest(&text, &opts, &no_parity, &mut no_progress()).unwrap_err();
    assert!(matches!(e, IngestError::Unsupported { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("notes.ts: not a media file fjord can serve"),
        "{e}"
    );
    // Failed ingests leave no index or temp file behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

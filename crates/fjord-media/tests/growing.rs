//! A growing fragmented MP4's snapshots made incrementally (each planned
//! on from the previous one: `mp4::growing`) are the snapshots planning
//! the whole prefix makes, byte for byte, at any cuts: fragment ends or
//! not, a fragment half written, a fragment broken after the cut.

mod media;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use fjord_media::ingest::snapshot;
use media::growing::grow;
use media::*;
use proptest::prelude::*;

/// H.264 (B-frames, a key frame every 12 frames) and AAC, 6 s, as ffmpeg
/// fragments it at each key frame with `flags`.
fn fragmented(dir: &tempfile::TempDir, name: &str, flags: &str) -> PathBuf {
    let out = path_in(dir, name);
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=320x240:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=sample_rate=48000",
        "-t",
        "6",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-bf",
        "2",
        "-g",
        "12",
        "-c:a",
        "aac",
        "-movflags",
        flags,
        out.to_str().unwrap(),
    ]);
    out
}

/// The test files (made once), and where each top-level box but a `moof`
/// ends: the lengths a recording is durable at.
struct Files {
    _dir: tempfile::TempDir,
    files: Vec<(PathBuf, Vec<u64>)>,
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = scratch();
        let files = [
            (
                "base_moof.mp4",
                "frag_keyframe+empty_moov+default_base_moof",
            ),
            ("explicit.mp4", "frag_keyframe+empty_moov"),
            ("separate.mp4", "frag_keyframe+empty_moov+separate_moof"),
            // The first fragment's samples in the moov's tables.
            ("moov_samples.mp4", "frag_keyframe"),
        ]
        .iter()
        .map(|(name, flags)| {
            let f = fragmented(&dir, name, flags);
            let ends = box_ends(&std::fs::read(&f).unwrap());
            (f, ends)
        })
        .collect();
        Files { _dir: dir, files }
    })
}

/// A copy of test file `which` of its own (a snapshot's index is written
/// beside its media, and tests run at once), with its box ends.
fn copy(which: usize, dir: &tempfile::TempDir) -> (PathBuf, Vec<u64>) {
    let (file, ends) = &files().files[which];
    let own = path_in(dir, file.file_name().unwrap().to_str().unwrap());
    std::fs::copy(file, &own).unwrap();
    (own, ends.clone())
}

fn box_ends(data: &[u8]) -> Vec<u64> {
    let mut ends = Vec::new();
    let mut at = 0usize;
    while at + 8 <= data.len() {
        let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        assert!(size >= 8, "ffmpeg wrote 32-bit box sizes");
        let moof = &data[at + 4..at + 8] == b"moof";
        at += size;
        if !moof {
            ends.push(at as u64);
        }
    }
    ends
}

#[test]
fn snapshots_at_every_fragment_end_are_made_incrementally_and_equal_the_whole() {
    let dir = scratch();
    for which in 0..files().files.len() {
        let (file, ends) = &copy(which, &dir);
        // All but the first that holds a fragment, and the `ftyp` and
        // `moov` before it (no track has a sample yet); with a fragment
        // per track, also the first that holds audio (a track served
        // now that was not).
        let whole = if file.ends_with("separate.mp4") { 4 } else { 3 };
        assert_eq!(
            grow(file, ends, |_| {}),
            ends.len() - whole,
            "{}",
            file.display()
        );
        assert!(ends.len() >= 12, "{}: {} boxes", file.display(), ends.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Cuts anywhere (a fragment's end or any byte), growing.
    #[test]
    fn snapshots_at_random_cuts_equal_the_whole(
        which in 0usize..4,
        picks in proptest::collection::vec((any::<bool>(), any::<prop::sample::Index>()), 1..8),
    ) {
        let dir = scratch();
        let (file, ends) = &copy(which, &dir);
        let len = *ends.last().unwrap();
        let mut cuts: Vec<u64> = picks
            .iter()
            .map(|(at_end, i)| if *at_end { ends[i.index(ends.len())] } else { i.index(len as usize) as u64 + 1 })
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        grow(file, &cuts, |_| {});
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Bytes after a snapshot's end changed at random (a fragment written
    /// wrong): the next snapshot is still the whole prefix's, or both fail.
    #[test]
    fn snapshots_after_random_damage_equal_the_whole(
        which in 0usize..4,
        cut in any::<prop::sample::Index>(),
        more in 1usize..4,
        damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let dir = scratch();
        let (file, ends) = &copy(which, &dir);
        let at = 2 + cut.index(ends.len() - 3);
        let (len, next) = (ends[at], ends[(at + more).min(ends.len() - 1)]);
        media::growing::damage(file, len..next, &damage);
        grow(file, &[len, next], |_| {});
    }
}

/// A fragment after the cut broken (its `trun` claims more samples than
/// it holds), or only half of it durable: the next snapshot is what the
/// whole prefix plans to (the track ended before it, with a warning),
/// never packets of the broken fragment.
#[test]
fn a_broken_or_half_written_fragment_after_the_cut_plans_as_the_whole_prefix() {
    let dir = scratch();
    let (file, ends) = &copy(0, &dir);
    let mut data = std::fs::read(file).unwrap();
    let k = ends.len() / 2;
    let trun = ends[k] as usize
        + data[ends[k] as usize..]
            .windows(4)
            .position(|w| w == b"trun")
            .unwrap();
    data[trun + 8..trun + 12].copy_from_slice(&u32::MAX.to_be_bytes());
    let broken = path_in(&dir, "broken.mp4");
    std::fs::write(&broken, &data).unwrap();
    let half = (ends[k + 3] + ends[k + 4]) / 2;
    assert_eq!(
        grow(&broken, &[ends[k], ends[k + 4], ends[k + 6]], |_| {}),
        0
    );
    // Half a fragment: planned whole, and the next too (it cannot resume
    // there); the one after is incremental again.
    assert_eq!(
        grow(file, &[ends[k], half, ends[k + 4], ends[k + 5]], |_| {}),
        1
    );
    let s = snapshot(&broken, ends[k + 4], &Default::default(), None).unwrap();
    assert!(
        s.index
            .report()
            .warnings
            .iter()
            .any(|w| w.contains("unreadable"))
    );
    assert!(s.resume.is_none());
}

/// What a snapshot costs, printed (the machine's figures, not asserted):
/// at each of `FJORD_GROWING_MINUTES` (default 2,60) minutes of the
/// fragmented MP4 `FJORD_GROWING_MP4`, the first snapshot (the whole
/// prefix), the next one (one fragment more, planned on from it) and,
/// for comparison, that one planned whole; best of three each.
/// docs/live.md says how the figures there were made.
#[test]
#[ignore]
fn snapshot_cost() {
    let media = PathBuf::from(std::env::var("FJORD_GROWING_MP4").expect("FJORD_GROWING_MP4"));
    let minutes = std::env::var("FJORD_GROWING_MINUTES").unwrap_or("2,60".to_owned());
    let ends = box_ends_of(&media);
    let last = *ends.last().unwrap();
    let all = snapshot(&media, last, &Default::default(), None).unwrap();
    let per_minute = last as f64 * 60e9 / all.index.duration_ns() as f64;
    let best = media::growing::best_of_three;
    for m in minutes.split(',').map(|m| m.parse::<f64>().unwrap()) {
        let at = ends
            .partition_point(|&e| (e as f64) < m * per_minute)
            .min(ends.len() - 1);
        let (len, next) = (ends[at - 1], ends[at]);
        let (first, prev) = best(&|| snapshot(&media, len, &Default::default(), None).unwrap());
        let from = Some((&prev.index, prev.resume.as_ref().unwrap()));
        let (on, s) = best(&|| snapshot(&media, next, &Default::default(), from).unwrap());
        assert!(s.incremental);
        let (whole, _) = best(&|| snapshot(&media, next, &Default::default(), None).unwrap());
        println!(
            "{m} min ({len} bytes, index {} bytes): first {first:.1?}, next {on:.1?} \
             (planned whole: {whole:.1?})",
            s.index.bytes().len()
        );
    }
}

/// [`box_ends`] of a file read box header by box header.
fn box_ends_of(media: &Path) -> Vec<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(media).unwrap();
    let len = f.metadata().unwrap().len();
    let (mut ends, mut at) = (Vec::new(), 0u64);
    while at + 8 <= len {
        let mut h = [0u8; 8];
        f.seek(SeekFrom::Start(at)).unwrap();
        f.read_exact(&mut h).unwrap();
        at += u64::from(u32::from_be_bytes(h[..4].try_into().unwrap()));
        if &h[4..] != b"moof" {
            ends.push(at);
        }
    }
    ends
}

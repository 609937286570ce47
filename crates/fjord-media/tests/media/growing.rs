//! Snapshots of a file that grows (`fjord_media::ingest::snapshot`), each
//! planned on from the one before and compared with the snapshot of the
//! same prefix made alone.

use std::path::Path;
use std::time::{Duration, Instant};

use fjord_media::ingest::{Snapshot, snapshot};

/// Snapshots at each of `cuts` (growing), each planned on from the one
/// before: each equals (index bytes, resume point) the snapshot of its
/// prefix made alone, or both fail alike; `each` sees every one made.
/// Returns how many were made incrementally.
pub fn grow(media: &Path, cuts: &[u64], mut each: impl FnMut(&Snapshot)) -> usize {
    let mut prev: Option<Snapshot> = None;
    let mut incremental = 0;
    for &len in cuts {
        let from = prev
            .as_ref()
            .and_then(|p| Some((&p.index, p.resume.as_ref()?)));
        let got = snapshot(media, len, &Default::default(), from);
        let alone = snapshot(media, len, &Default::default(), None);
        match (got, alone) {
            (Ok(got), Ok(alone)) => {
                let (a, b) = (got.index.bytes(), alone.index.bytes());
                let differ = (a.iter().zip(b)).position(|(x, y)| x != y);
                assert!(
                    a == b,
                    "{}: at {len} after {:?}: {} and {} bytes, first differing at {differ:?}",
                    media.display(),
                    prev.as_ref().map(|p| p.index.source().size),
                    a.len(),
                    b.len(),
                );
                assert_eq!(got.resume, alone.resume);
                each(&got);
                incremental += usize::from(got.incremental);
                prev = Some(got);
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!(
                "at {len}: {:?} against {:?}",
                a.map(|s| s.index.source()),
                b.map(|s| s.index.source())
            ),
        }
    }
    incremental
}

/// Changes `file`'s bytes in `range` (after a snapshot's end) at the
/// random `flips`: each picks a byte of it and flips some of its bits.
pub fn damage(file: &Path, range: std::ops::Range<u64>, flips: &[(proptest::sample::Index, u8)]) {
    let mut data = std::fs::read(file).unwrap();
    for (i, byte) in flips {
        data[range.start as usize + i.index((range.end - range.start) as usize)] ^= byte | 1;
    }
    std::fs::write(file, &data).unwrap();
}

/// The fastest of three runs of `f` (a snapshot), and what it made.
pub fn best_of_three(f: &dyn Fn() -> Snapshot) -> (Duration, Snapshot) {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            let s = f();
            (t.elapsed(), s)
        })
        .min_by_key(|(t, _)| *t)
        .unwrap()
}

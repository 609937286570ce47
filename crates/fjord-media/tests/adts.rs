//! ADTS AAC files against ffmpeg: the AUs a player depacketizes are the
//! raw frames, at frame index × 1024 samples.

mod media;

use fjord_media::{Container, TrackKind};
use media::*;
use proptest::prelude::*;

fn make_adts(extra: &[&str]) -> Vec<u8> {
    let dir = scratch();
    let f = path_in(&dir, "a.aac");
    let mut args = vec![
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=300:sample_rate=44100",
        "-ac",
        "2",
        "-t",
        "5",
        "-c:a",
        "aac",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-f", "adts", f.to_str().unwrap()]);
    ffmpeg(&args);
    std::fs::read(f).unwrap()
}

fn plan(data: &[u8]) -> fjord_media::MediaPlan {
    fjord_media::format::plan(data, &Default::default(), &mut |_, _| {}).expect("plan")
}

#[test]
fn frames_and_timestamps_match_ffmpeg() {
    let data = make_adts(&["-write_id3v2", "1"]);
    assert_eq!(&data[..3], b"ID3");
    assert_eq!(Container::detect(&data), Some(Container::Adts));
    let p = plan(&data);
    let t = &p.tracks[0];
    assert_eq!(p.report.format, "ADTS AAC");
    assert_eq!(
        (
            t.desc.kind,
            t.desc.payload_type,
            t.desc.clock_rate,
            t.desc.channels
        ),
        (TrackKind::Audio, 96, 44_100, 2)
    );
    // AAC-LC (2), 44.1 kHz (4), stereo (2).
    assert_eq!(
        t.desc.fmtp,
        "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1210"
    );
    check_records(&data, t);
    let id3 = data.len() - adts_frames_len(&data);
    let frames = adts_frames(&data[id3..]);
    let aus = depacketize_aac(&data, t);
    assert_eq!(aus.len(), frames.len());
    for (i, ((ts, au), f)) in aus.iter().zip(&frames).enumerate() {
        assert_eq!(*ts, i as u32 * 1024, "rtp_ts of AU {i}");
        assert!(au == f, "AU {i}");
    }
    assert_eq!(
        p.duration_ns,
        (frames.len() as u64 * 1024 * 1_000_000_000 + 22_050) / 44_100
    );
    assert!(p.report.warnings.is_empty(), "{:?}", p.report.warnings);
}

/// Bytes of the ADTS frames after the leading ID3v2 tag.
fn adts_frames_len(data: &[u8]) -> usize {
    let size = data[6..10]
        .iter()
        .fold(0usize, |a, &b| (a << 7) | usize::from(b));
    data.len() - 10 - size
}

#[test]
fn garbage_is_skipped_and_a_cut_frame_reported() {
    let clean = make_adts(&[]);
    let clean_plan = plan(&clean);
    let frames = adts_frames(&clean);
    // Junk before the stream, between frames 10 and 11, and the last frame cut.
    let split: usize = frames[..10].iter().map(|f| f.len() + 7).sum();
    let mut data = vec![0x55; 100];
    data.extend_from_slice(&clean[..split]);
    data.extend_from_slice(&[0xff, 0xf1, 0x00, 0x13, 0x37, 0x00, 0x42]);
    data.extend_from_slice(&clean[split..clean.len() - 5]);
    let p = plan(&data);
    assert_eq!(p.report.resyncs, 1);
    assert_eq!(p.report.skipped_bytes, 107);
    let last = frames.last().unwrap().len() as u64 + 7;
    assert_eq!(p.report.truncated_tail_bytes, last - 5);
    let aus = depacketize_aac(&data, &p.tracks[0]);
    assert_eq!(aus.len(), frames.len() - 1);
    assert!(aus.iter().zip(&frames).all(|((_, a), f)| a == f));
    assert_eq!(p.tracks[0].desc, clean_plan.tracks[0].desc);
    assert_eq!(p.report.warnings.len(), 2, "{:?}", p.report.warnings);
}

fn small_adts() -> &'static [u8] {
    static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let d = make_adts(&[]);
        d[..d.len().min(8192)].to_vec()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn mutated_adts_never_panics(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
                                 cut in any::<prop::sample::Index>()) {
        let mut data = small_adts().to_vec();
        for (i, b) in edits {
            let at = i.index(data.len());
            data[at] = b;
        }
        data.truncate(cut.index(data.len()) + 1);
        if let Ok(p) = fjord_media::format::plan(&data, &Default::default(), &mut |_, _| {}) {
            check_records(&data, &p.tracks[0]);
        }
    }

    #[test]
    fn arbitrary_bytes_after_a_sync_word_never_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut data = vec![0xff, 0xf1];
        data.extend_from_slice(&body);
        if let Ok(p) = fjord_media::format::plan(&data, &Default::default(), &mut |_, _| {}) {
            for t in &p.tracks {
                check_records(&data, t);
            }
        }
    }
}

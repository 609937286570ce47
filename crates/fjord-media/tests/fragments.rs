//! An MP4 title as fragmented MP4 (init segment + media segments made of
//! generated heads and byte ranges of the file), checked with ffmpeg: the
//! init segment followed by every segment is a file whose packets equal
//! the source's, byte for byte and at the same times, and every segment
//! begins with a video key frame.

mod media;

use std::{path::Path, process::Command};

use fjord_media::mp4::fragments::{Fragmented, Part, fragment, reads};
use media::*;

/// The fragmented file: init segment then every segment, file ranges read
/// from `data`; and where each segment starts in it.
fn assemble(data: &[u8], f: &Fragmented) -> (Vec<u8>, Vec<u64>) {
    let mut out = f.init.clone();
    let mut starts = Vec::new();
    for seg in &f.fragments {
        starts.push(out.len() as u64);
        for p in &seg.parts {
            match p {
                Part::Made(b) => out.extend_from_slice(b),
                Part::File { offset, len } => {
                    out.extend_from_slice(&data[*offset as usize..(*offset + *len) as usize])
                }
            }
        }
        assert_eq!(out.len() as u64 - starts.last().unwrap(), seg.len());
    }
    (out, starts)
}

/// `ffmpeg -c copy -f framemd5` of `file` as lines of stream, pts from
/// the stream's first, size and hash. Relative times and no durations:
/// ffmpeg applies edit lists differently to fragmented files (its own
/// `-movflags frag_keyframe` output too): it shifts the whole file, does
/// not trim the last AAC frame, reports Opus packets as lasting 0 and
/// leaves out the priming samples' side data.
fn framemd5(file: &Path) -> Vec<String> {
    let mut first = std::collections::HashMap::new();
    raw_framemd5(file)
        .iter()
        .map(|l| {
            let c: Vec<&str> = l.split(',').map(str::trim).collect();
            let pts: i64 = c[2].parse().unwrap();
            let pts0 = *first.entry(c[0].to_owned()).or_insert(pts);
            format!("{} {} {} {}", c[0], pts - pts0, c[4], c[5])
        })
        .collect()
}

/// `ffmpeg -c copy -f framemd5` lines: stream, dts, pts, duration, size,
/// hash (comments dropped).
fn raw_framemd5(file: &Path) -> Vec<String> {
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(file)
        .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-"])
        .output()
        .expect("ffmpeg is required (make test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// (byte position, keyframe) of every video packet, by ffprobe.
fn video_packets(file: &Path) -> Vec<(u64, bool)> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries"])
        .args(["packet=pos,flags", "-of", "csv=p=0"])
        .arg(file)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (pos, flags) = l.split_once(',')?;
            Some((pos.parse().ok()?, flags.starts_with('K')))
        })
        .collect()
}

/// Asserts two lists of lines are equal, showing the first difference.
fn same(a: &[String], b: &[String], what: &str) {
    let differ: Vec<usize> = (0..a.len().max(b.len()))
        .filter(|&i| a.get(i) != b.get(i))
        .collect();
    if let Some(&i) = differ.first() {
        panic!(
            "{what}: {} lines of {}/{} differ, first {i}: {:?} vs {:?}; also {:?}",
            differ.len(),
            a.len(),
            b.len(),
            a.get(i),
            b.get(i),
            differ
                .iter()
                .skip(1)
                .take(5)
                .map(|&j| (a.get(j), b.get(j)))
                .collect::<Vec<_>>()
        );
    }
}

/// Cut from only the bytes `reads` names (all else zeros, as an edge's
/// file is before its slices come), the title fragments the same: and
/// those bytes are a small part of the file.
fn same_from_what_it_reads(data: &[u8], f: &Fragmented, target_s: u64) {
    let mut sparse = vec![0u8; data.len()];
    let mut named = 0;
    reads::<()>(data, &mut |r| {
        let r = r.start as usize..r.end as usize;
        named += r.len();
        sparse[r.clone()].copy_from_slice(&data[r]);
        Ok(())
    })
    .unwrap();
    let g = fragment(&sparse, target_s * 1_000_000_000, None).expect("fragment of the sparse file");
    assert_eq!((&g.init, &g.fragments), (&f.init, &f.fragments));
    assert!(named < data.len() / 4, "{named} of {} bytes", data.len());
}

fn check(source_args: &[&str], target_s: u64, expect_codecs: &str) {
    let dir = scratch();
    let src = path_in(&dir, "in.mp4");
    let mut args = source_args.to_vec();
    args.push(src.to_str().unwrap());
    ffmpeg(&args);
    let data = std::fs::read(&src).unwrap();
    let f = fragment(&data, target_s * 1_000_000_000, None).expect("fragment");
    assert!(f.codecs.starts_with(expect_codecs), "codecs {}", f.codecs);
    same_from_what_it_reads(&data, &f, target_s);

    let (whole, starts) = assemble(&data, &f);
    let out = path_in(&dir, "out.mp4");
    std::fs::write(&out, &whole).unwrap();
    same(
        &framemd5(&out),
        &framemd5(&src),
        "packets of the fragmented file",
    );

    // Segments last the target (but the last) and start at key frames.
    let total: u64 = f.fragments.iter().map(|s| s.duration_ns).sum();
    assert!(f.fragments.len() >= 2, "{} segments", f.fragments.len());
    for s in &f.fragments[..f.fragments.len() - 1] {
        assert!(
            s.duration_ns >= target_s * 1_000_000_000,
            "{}",
            s.duration_ns
        );
    }
    assert!((total as f64 / 1e9 - 10.0).abs() < 0.2, "total {total}");
    let video = video_packets(&out);
    if !video.is_empty() {
        for start in &starts {
            let first = video.iter().find(|(pos, _)| pos >= start).unwrap();
            assert!(first.1, "segment at {start} starts with a non-key frame");
        }
    }

    // The mdat follows the file: an interleaved file's segment is a few
    // ranges of it (its edges), not a range per sample.
    for (k, seg) in f.fragments.iter().enumerate() {
        let ranges = seg
            .parts
            .iter()
            .filter(|p| matches!(p, Part::File { .. }))
            .count();
        assert!(ranges <= 4, "segment {k} is {ranges} ranges of the file");
    }

    // Each track alone (DASH, HLS renditions): the same packets, cut at
    // the same places.
    let size_and_hash = |lines: Vec<String>, stream: usize| -> Vec<String> {
        lines
            .iter()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .filter(|c| c[0] == stream.to_string())
            .map(|c| c[1..].join(" "))
            .collect()
    };
    for k in 0..f.tracks.len() {
        let one = fragment(&data, target_s * 1_000_000_000, Some(k)).unwrap();
        assert_eq!(one.tracks, [f.tracks[k].clone()]);
        assert_eq!(one.fragments.len(), f.fragments.len(), "track {k} aligned");
        for (a, b) in one.fragments.iter().zip(&f.fragments) {
            assert_eq!(a.duration_ns, b.duration_ns, "track {k} aligned");
        }
        let path = path_in(&dir, &format!("track{k}.mp4"));
        std::fs::write(&path, assemble(&data, &one).0).unwrap();
        same(
            &size_and_hash(framemd5(&path), 0),
            &size_and_hash(framemd5(&src), k),
            &format!("track {k} alone"),
        );
    }
    assert!(fragment(&data, 1, Some(f.tracks.len())).is_err());
    // A target shorter than a frame: a segment per key frame, no more.
    let tiny = fragment(&data, 1, None).unwrap();
    assert!(tiny.fragments.len() > f.fragments.len());
    assert!(tiny.fragments.len() <= framemd5(&src).len());
}

const LAVFI_AV: [&str; 4] = [
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=320x240:rate=25:duration=10",
];
const LAVFI_A: [&str; 4] = ["-f", "lavfi", "-i", "sine=frequency=440:duration=10"];

#[test]
fn h264_with_b_frames_and_aac_fragment_to_the_same_packets() {
    let mut a = LAVFI_AV.to_vec();
    a.extend(LAVFI_A);
    a.extend(["-c:v", "libx264", "-bf", "2", "-g", "25", "-c:a", "aac"]);
    check(&a, 2, "avc1.");
}

#[test]
fn h265_and_opus_fragment_to_the_same_packets() {
    let mut a = LAVFI_AV.to_vec();
    a.extend(LAVFI_A);
    a.extend([
        "-c:v",
        "libx265",
        "-x265-params",
        "keyint=30:log-level=error",
    ]);
    a.extend(["-tag:v", "hvc1", "-c:a", "libopus", "-strict", "-2"]);
    check(&a, 3, "hvc1.");
}

#[test]
fn audio_alone_is_cut_by_time() {
    let mut a = LAVFI_A.to_vec();
    a.extend(["-c:a", "aac"]);
    check(&a, 2, "mp4a.40.2");
}

#[test]
fn the_multivariant_facts_come_from_the_track() {
    let dir = scratch();
    let src = path_in(&dir, "in.mp4");
    let mut a = LAVFI_AV.to_vec();
    a.extend(["-c:v", "libx264", "-profile:v", "high", "-g", "25"]);
    a.push(src.to_str().unwrap());
    ffmpeg(&a);
    let f = fragment(&std::fs::read(&src).unwrap(), 2_000_000_000, None).unwrap();
    assert_eq!(f.resolution, Some((320, 240)));
    assert!((f.frame_rate.unwrap() - 25.0).abs() < 0.01);
    assert!(f.codecs.starts_with("avc1.64"), "{}", f.codecs);
}

#[test]
fn a_file_that_is_not_mp4_is_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"\0\0\0\x08moov",
        b"\0\0\0\x10ftypisom\0\0\0\0junk",
    ] {
        assert!(fragment(bytes, 1, None).is_err());
    }
}

/// A fragmented source (CMAF, what packagers write): its fragments are
/// re-cut at the target, samples still by reference.
#[test]
fn a_fragmented_source_fragments_to_the_same_packets() {
    let mut a = LAVFI_AV.to_vec();
    a.extend(LAVFI_A);
    a.extend(["-c:v", "libx264", "-bf", "2", "-g", "25", "-c:a", "aac"]);
    a.extend(["-movflags", "frag_keyframe+empty_moov+default_base_moof"]);
    check(&a, 2, "avc1.");
}

/// AV1 and Opus in a fragmented MP4 (served by HLS and DASH only): the
/// source's `av01`/`av1C` sample entry, the codec named from it.
#[test]
fn av1_and_opus_in_fragmented_mp4_fragment_to_the_same_packets() {
    let mut a = LAVFI_AV.to_vec();
    a.extend(LAVFI_A);
    a.extend(["-c:v", "libsvtav1", "-preset", "12", "-g", "25"]);
    a.extend(["-c:a", "libopus", "-movflags", "frag_keyframe+empty_moov"]);
    check(&a, 2, "av01.0.00M.08,opus");
}

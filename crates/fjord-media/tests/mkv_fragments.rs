//! Matroska and WebM titles as fragmented MP4 (sample entries made from
//! CodecPrivate, samples by reference), checked with ffmpeg: the init
//! segment followed by every segment is a file ffmpeg reads as the same
//! codecs, whose packets equal the source's byte for byte, at the same
//! times (to the millisecond Matroska stores), every segment starting
//! with a video key frame; each track alone likewise, and each track of a
//! WebM title as DASH WebM (generated clusters, frames by reference);
//! and each cut again from the file's frame table and head alone, equal.

mod media;

use std::{collections::HashMap, path::Path, process::Command};

use fjord_media::mkv::fragments::{fragment, fragment_demuxed};
use fjord_media::mkv::table::{self, Table};
use fjord_media::mkv::webm;
use fjord_media::mp4::fragments::{Fragmented, Part};
use media::*;

/// The fragmented file: init segment then every segment, file ranges read
/// from `data`.
fn assemble(data: &[u8], f: &Fragmented) -> Vec<u8> {
    let mut out = f.init.clone();
    for seg in &f.fragments {
        let start = out.len();
        for p in &seg.parts {
            match p {
                Part::Made(b) => out.extend_from_slice(b),
                Part::File { offset, len } => {
                    out.extend_from_slice(&data[*offset as usize..(*offset + *len) as usize])
                }
            }
        }
        assert_eq!((out.len() - start) as u64, seg.len());
    }
    out
}

/// A packet: stream, pts in ms from the stream's first, size, MD5.
type Packet = (usize, i64, String, String);

/// `ffmpeg -c copy -f framemd5` of `file`, times in ms of each stream's
/// first packet.
fn packets(file: &Path) -> Vec<Packet> {
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
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tb = HashMap::new();
    let mut first = HashMap::new();
    let mut list = Vec::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("#tb ") {
            let (s, r) = rest.split_once(':').unwrap();
            let (n, d) = r.trim().split_once('/').unwrap();
            let nd: (i64, i64) = (n.parse().unwrap(), d.parse().unwrap());
            tb.insert(s.trim().parse::<usize>().unwrap(), nd);
            continue;
        }
        if l.starts_with('#') {
            continue;
        }
        let c: Vec<&str> = l.split(',').map(str::trim).collect();
        let s: usize = c[0].parse().unwrap();
        let (n, d) = tb[&s];
        let pts: i64 = c[2].parse().unwrap();
        let ms = (pts * n * 1000 + d / 2).div_euclid(d);
        let ms0 = *first.entry(s).or_insert(ms);
        list.push((s, ms - ms0, c[4].to_owned(), c[5].to_owned()));
    }
    list
}

/// Asserts the packets are the same: bytes equal, times within a
/// millisecond (Matroska rounds audio times to it; MP4 counts samples).
fn same(got: &[Packet], want: &[Packet], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: packet count");
    let sorted = |p: &[Packet]| {
        let mut v = p.to_vec();
        v.sort_by_key(|x| (x.0, x.1, x.3.clone()));
        v
    };
    for (i, (a, b)) in sorted(got).iter().zip(sorted(want).iter()).enumerate() {
        assert!(
            a.0 == b.0 && a.2 == b.2 && a.3 == b.3 && (a.1 - b.1).abs() <= 1,
            "{what}: packet {i} differs: {a:?} vs {b:?}"
        );
    }
}

/// ffprobe's `entries` of every stream of `file`, a CSV line each.
fn probe(file: &Path, entries: &str) -> Vec<String> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries", entries, "-of", "csv=p=0"])
        .arg(file)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Each stream's start time, ms.
fn starts(file: &Path) -> Vec<f64> {
    (probe(file, "stream=start_time").iter())
        .map(|l| l.trim().parse::<f64>().expect("a start time") * 1000.0)
        .collect()
}

/// `codec_name,width,primaries,transfer,matrix` of every stream (colours
/// only where the file says them).
fn streams(file: &Path) -> Vec<String> {
    let fields = "stream=codec_name,width,color_primaries,color_transfer,color_space";
    (probe(file, fields).iter())
        .map(|l| l.replace(",unknown", "").trim_end_matches(',').to_owned())
        .collect()
}

const LAVFI_AV: [&str; 8] = [
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=320x240:rate=25:duration=10",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:duration=10",
];

fn check(name: &str, codec_args: &[&str], codecs: &str, probed: &[&str]) {
    let dir = scratch();
    let src = path_in(&dir, name);
    let mut args = LAVFI_AV.to_vec();
    args.extend(codec_args);
    args.push(src.to_str().unwrap());
    ffmpeg(&args);
    let data = std::fs::read(&src).unwrap();
    let f = fragment(&data, 2_000_000_000, None).expect("fragment");
    assert_eq!(f.codecs, codecs);
    let out = path_in(&dir, "out.mp4");
    std::fs::write(&out, assemble(&data, &f)).unwrap();
    assert_eq!(streams(&out), probed, "{name}: what ffprobe reads");
    // The tracks start where the source's do (Opus's CodecDelay an edit
    // list), so they play as much in sync.
    for (got, want) in starts(&out).iter().zip(starts(&src)) {
        assert!(
            (got - want).abs() <= 1.0,
            "{name}: starts {got} vs {want} ms"
        );
    }
    let want = packets(&src);
    same(&packets(&out), &want, name);
    assert!(f.fragments.len() >= 4, "{} segments", f.fragments.len());
    if f.tracks[0].video {
        assert_eq!(f.resolution, Some((320, 240)));
        assert!((f.frame_rate.unwrap() - 25.0).abs() < 0.1);
        for (k, s) in f.fragments.iter().enumerate() {
            assert!(
                s.key_frame_end.is_some(),
                "segment {k} starts on a key frame"
            );
        }
    }
    let total: u64 = f.fragments.iter().map(|s| s.duration_ns).sum();
    assert!((total as f64 / 1e9 - 10.0).abs() < 0.2, "total {total}");
    for k in 0..f.tracks.len() {
        let one = fragment(&data, 2_000_000_000, Some(k)).unwrap();
        assert_eq!(one.tracks, [f.tracks[k].clone()]);
        assert_eq!(one.fragments.len(), f.fragments.len(), "track {k} aligned");
        let path = path_in(&dir, &format!("track{k}.mp4"));
        std::fs::write(&path, assemble(&data, &one)).unwrap();
        let alone: Vec<Packet> = packets(&path)
            .into_iter()
            .map(|p| (k, p.1, p.2, p.3))
            .collect();
        let of_k: Vec<Packet> = want.iter().filter(|p| p.0 == k).cloned().collect();
        same(&alone, &of_k, &format!("{name} track {k} alone"));
    }
    assert!(fragment(&data, 1, Some(f.tracks.len())).is_err());
    cut_from_table(
        &data,
        name.ends_with(".webm") && !codecs.starts_with("av01"),
    );
    // DASH WebM is for VP8, VP9 and Opus (AV1 goes as fragmented MP4).
    if name.ends_with(".webm") && !codecs.starts_with("av01") {
        dash_webm(&dir, &data, &f, &want);
    }
}

/// What an edge cuts of the file from its frame table and only the bytes
/// the table says to read (the rest zeros, as unfetched slices are) is
/// what is cut from the whole file: every track, each alone, and (`webm`)
/// each as DASH WebM.
fn cut_from_table(data: &[u8], webm: bool) {
    let t = Table::parse(&table::of_media(data).unwrap().expect("a table")).unwrap();
    let mut holed = vec![0u8; data.len()];
    let copy = |holed: &mut [u8], r: std::ops::Range<u64>| {
        let r = r.start as usize..r.end as usize;
        holed[r.clone()].copy_from_slice(&data[r.clone()]);
        r.len()
    };
    let mut read = copy(&mut holed, t.head());
    let d = t.demuxed(&holed).unwrap();
    for r in fjord_media::mkv::fragments::frame_reads(&d) {
        read += copy(&mut holed, r);
    }
    assert!(
        read * 20 < data.len(),
        "{read} of {} bytes read",
        data.len()
    );
    let target = 2_000_000_000;
    let same = |a: &Fragmented, b: &Fragmented, what: &str| {
        assert_eq!(a.init, b.init, "{what}: init segment");
        assert_eq!(a.fragments, b.fragments, "{what}: segments");
        assert_eq!(
            (&a.tracks, &a.codecs, a.resolution),
            (&b.tracks, &b.codecs, b.resolution)
        );
        assert_eq!(a.frame_rate, b.frame_rate, "{what}: frame rate");
    };
    for only in std::iter::once(None).chain((0..d.tracks.len()).map(Some)) {
        let Ok(want) = fragment(data, target, only) else {
            continue;
        };
        let got = fragment_demuxed(&holed, &d, target, only).unwrap();
        same(&got, &want, &format!("track {only:?} from the table"));
        if let (true, Some(k)) = (webm, only) {
            let want = webm::track(data, target, k).unwrap();
            let got = webm::track_demuxed(&holed, &d, target, k).unwrap();
            same(
                &got,
                &want,
                &format!("DASH WebM of track {k} from the table"),
            );
        }
    }
}

/// Each track of a WebM title as DASH WebM: the same packets at the same
/// milliseconds, segments aligned with the fragmented MP4 ones.
fn dash_webm(dir: &tempfile::TempDir, data: &[u8], f: &Fragmented, want: &[Packet]) {
    for k in 0..f.tracks.len() {
        let w = webm::track(data, 2_000_000_000, k).expect("DASH WebM");
        assert_eq!(w.fragments.len(), f.fragments.len(), "track {k} aligned");
        for (a, b) in w.fragments.iter().zip(&f.fragments) {
            assert_eq!(a.duration_ns, b.duration_ns);
        }
        let path = path_in(dir, &format!("track{k}.webm"));
        std::fs::write(&path, assemble(data, &w)).unwrap();
        let got: Vec<Packet> = packets(&path)
            .into_iter()
            .map(|p| (k, p.1, p.2, p.3))
            .collect();
        let of_k: Vec<Packet> = want.iter().filter(|p| p.0 == k).cloned().collect();
        assert_eq!(got, of_k, "track {k} as DASH WebM");
    }
    assert!(webm::track(data, 1, f.tracks.len()).is_err());
}

#[test]
fn webm_vp9_and_opus() {
    check(
        "in.webm",
        &[
            "-c:v",
            "libvpx-vp9",
            "-deadline",
            "realtime",
            "-cpu-used",
            "8",
            "-g",
            "25",
            "-color_primaries",
            "bt709",
            "-color_trc",
            "bt709",
            "-colorspace",
            "bt709",
            "-c:a",
            "libopus",
        ],
        "vp09.00.20.08,opus",
        &["vp9,320,bt709,bt709,bt709", "opus"],
    );
}

/// AV1 (served by HLS and DASH only): `av01`/`av1C` from the CodecPrivate.
#[test]
fn webm_av1_and_opus() {
    check(
        "in.webm",
        &[
            "-c:v",
            "libsvtav1",
            "-preset",
            "12",
            "-g",
            "25",
            "-c:a",
            "libopus",
        ],
        "av01.0.00M.08,opus",
        &["av1,320", "opus"],
    );
}

#[test]
fn webm_vp8_and_opus() {
    check(
        "in.webm",
        &[
            "-c:v",
            "libvpx",
            "-deadline",
            "realtime",
            "-cpu-used",
            "8",
            "-g",
            "25",
            "-c:a",
            "libopus",
        ],
        "vp8,opus",
        &["vp8,320", "opus"],
    );
}

#[test]
fn matroska_h264_with_b_frames_and_aac() {
    check(
        "in.mkv",
        &[
            "-c:v",
            "libx264",
            "-profile:v",
            "high",
            "-bf",
            "2",
            "-g",
            "25",
            "-c:a",
            "aac",
        ],
        "avc1.64000d,mp4a.40.2",
        &["h264,320", "aac"],
    );
}

#[test]
fn matroska_h265_and_aac() {
    check(
        "in.mkv",
        &[
            "-c:v",
            "libx265",
            "-x265-params",
            "keyint=25:log-level=error",
            "-c:a",
            "aac",
        ],
        "hvc1.1.6.L60.90,mp4a.40.2",
        &["hevc,320", "aac"],
    );
}

#[test]
fn a_file_that_is_not_matroska_is_an_error_not_a_panic() {
    for bytes in [&b""[..], b"\x1a\x45\xdf\xa3\x80", b"\0\0\0\x08moov"] {
        assert!(fragment(bytes, 1, None).is_err());
        assert!(webm::track(bytes, 1, 0).is_err());
    }
}

/// DASH WebM is for WebM files of VP8, VP9 and Opus.
#[test]
fn dash_webm_refuses_matroska_and_other_codecs() {
    let dir = scratch();
    let src = path_in(&dir, "in.mkv");
    let mut args = LAVFI_AV.to_vec();
    args.extend(["-c:v", "libvpx", "-c:a", "libopus", src.to_str().unwrap()]);
    ffmpeg(&args);
    let data = std::fs::read(&src).unwrap();
    let e = webm::track(&data, 1, 0).unwrap_err().to_string();
    assert!(e.contains("WebM files only"), "{e}");
}

//! Matroska/WebM demuxing against ffprobe, on files written by ffmpeg
//! (with Cues; live, without) and GStreamer (clusters of unknown size):
//! every frame's bytes, time and key flag are ffprobe's packets', and the
//! seek index is the file's key frames.

mod media;

use std::path::Path;
use std::process::Command;

use fjord_media::mkv::demux::{Demuxed, Kind, demux};
use media::*;

fn adler32(b: &[u8]) -> u32 {
    let (mut a, mut s) = (1u32, 0u32);
    for &x in b {
        a = (a + u32::from(x)) % 65521;
        s = (s + a) % 65521;
    }
    (s << 16) | a
}

/// ffprobe's packets per stream: (pts in ms, key, adler32 of the bytes).
fn probe(file: &Path) -> Vec<Vec<(i64, bool, u32)>> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_data_hash", "adler32", "-show_entries"])
        .args(["packet=stream_index,pts,flags,data_hash", "-of", "csv=p=0"])
        .arg(file)
        .output()
        .expect("ffprobe is required for these tests");
    assert!(out.status.success());
    // A packet with side data (Opus's last, its padding) has its hash on a
    // line of its own: read the fields as one list, four per packet.
    let text = String::from_utf8(out.stdout).unwrap();
    let fields: Vec<&str> = text.split([',', '\n']).filter(|f| !f.is_empty()).collect();
    let mut streams: Vec<Vec<(i64, bool, u32)>> = Vec::new();
    for f in fields.chunks_exact(4) {
        let s: usize = f[0].parse().unwrap();
        let hash = f[3].trim_start_matches("adler32:");
        streams.resize_with(streams.len().max(s + 1), Vec::new);
        streams[s].push((
            f[1].parse().unwrap(),
            f[2].starts_with('K'),
            u32::from_str_radix(hash, 16).unwrap(),
        ));
    }
    streams
}

/// The demuxed file, checked frame by frame against ffprobe.
fn check_frames(file: &Path) -> Demuxed {
    let data = std::fs::read(file).unwrap();
    let d = demux(&data, &mut |_| {}).expect("demux");
    let want = probe(file);
    assert_eq!(d.frames.len(), want.len(), "tracks");
    for (i, (frames, packets)) in d.frames.iter().zip(&want).enumerate() {
        assert_eq!(frames.len(), packets.len(), "track {i}: frames");
        let (t0, p0) = (frames[0].time_ns / 1_000_000, packets[0].0);
        for (k, (f, p)) in frames.iter().zip(packets).enumerate() {
            let bytes = &data[f.offset as usize..][..f.size as usize];
            assert_eq!(adler32(bytes), p.2, "track {i} frame {k}: bytes");
            // Times relative to the first: ffmpeg moves Opus by its pre-skip.
            assert_eq!(
                f.time_ns / 1_000_000 - t0,
                p.0 - p0,
                "track {i} frame {k}: time"
            );
            if d.tracks[i].kind == Kind::Video {
                assert_eq!(f.key, p.1, "track {i} frame {k}: key");
            }
        }
    }
    d
}

/// (time, track) of every cue; each cue's cluster offset is a Cluster's.
fn cues(d: &Demuxed, data: &[u8]) -> Vec<(i64, u64)> {
    for c in &d.cues {
        assert_eq!(data[c.cluster as usize..][..4], [0x1f, 0x43, 0xb6, 0x75]);
    }
    d.cues.iter().map(|c| (c.time_ns, c.track)).collect()
}

fn make(dir: &tempfile::TempDir, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = path_in(dir, name);
    let mut args = vec![
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=160x120:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=sample_rate=48000",
        "-t",
        "3",
        "-map",
        "0:v",
        "-map",
        "1:a",
        "-g",
        "25",
    ];
    args.extend(extra);
    args.push(out.to_str().unwrap());
    ffmpeg(&args);
    out
}

#[test]
fn ffmpeg_webm_with_and_without_cues() {
    let dir = scratch();
    let codecs = [
        "-c:v",
        "libvpx-vp9",
        "-deadline",
        "realtime",
        "-cpu-used",
        "8",
        "-c:a",
        "libopus",
    ];
    let with = make(&dir, "cues.webm", &[&codecs[..], &["-f", "webm"]].concat());
    let live = make(
        &dir,
        "live.webm",
        &[&codecs[..], &["-live", "1", "-f", "webm"]].concat(),
    );
    let d = check_frames(&with);
    assert!(!d.cues_rebuilt);
    let file_cues = cues(&d, &std::fs::read(&with).unwrap());
    let keys: Vec<(i64, u64)> = d.frames[0]
        .iter()
        .filter(|f| f.key)
        .map(|f| (f.time_ns, d.tracks[0].number))
        .collect();
    assert_eq!(file_cues, keys, "a cue per video key frame");
    let l = check_frames(&live);
    assert!(l.cues_rebuilt);
    assert_eq!(
        cues(&l, &std::fs::read(&live).unwrap()),
        file_cues,
        "rebuilt cues"
    );
}

#[test]
fn ffmpeg_matroska_h264_aac() {
    let dir = scratch();
    let file = make(
        &dir,
        "avc.mkv",
        &[
            "-c:v", "libx264", "-bf", "2", "-c:a", "aac", "-f", "matroska",
        ],
    );
    check_frames(&file);
}

#[test]
fn gstreamer_webm_with_clusters_of_unknown_size() {
    let dir = scratch();
    let file = path_in(&dir, "gst.webm");
    let out = Command::new("gst-launch-1.0")
        .args([
            "-q",
            "-e",
            "webmmux",
            "name=m",
            "streamable=true",
            "!",
            "filesink",
        ])
        .arg(format!("location={}", file.display()))
        .args([
            "videotestsrc",
            "num-buffers=75",
            "!",
            "video/x-raw,width=160,height=120,framerate=25/1",
        ])
        .args([
            "!",
            "vp8enc",
            "deadline=1",
            "keyframe-max-dist=25",
            "!",
            "m.",
        ])
        .args([
            "audiotestsrc",
            "num-buffers=100",
            "!",
            "audio/x-raw,rate=48000",
            "!",
            "opusenc",
            "!",
            "m.",
        ])
        .output()
        .expect("GStreamer is required for this test (make test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = std::fs::read(&file).unwrap();
    let cluster = data
        .windows(4)
        .position(|w| w == [0x1f, 0x43, 0xb6, 0x75])
        .unwrap();
    assert_eq!(data[cluster + 4], 0x01, "GStreamer wrote sized clusters");
    let d = check_frames(&file);
    assert!(d.cues_rebuilt && d.cues.len() >= 3, "{:?}", d.cues);
    let (_, plan) = plan_file(&file);
    assert_eq!(plan.report.format, "WebM (VP8, Opus)");
    assert_eq!(plan.tracks[0].sync.len(), d.cues.len());
}

/// A small ffmpeg WebM (VP9, Opus) and Matroska (H.264, AAC), made once.
fn small_files() -> &'static [Vec<u8>] {
    static FILES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let dir = scratch();
        [
            (
                "s.webm",
                [
                    "-c:v",
                    "libvpx-vp9",
                    "-deadline",
                    "realtime",
                    "-c:a",
                    "libopus",
                ],
            ),
            ("s.mkv", ["-c:v", "libx264", "-bf", "2", "-c:a", "aac"]),
        ]
        .iter()
        .map(|(name, codecs)| {
            let f = path_in(&dir, name);
            let mut args = vec![
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=64x64:rate=10",
                "-f",
                "lavfi",
            ];
            args.extend(["-i", "sine", "-t", "1"]);
            args.extend(codecs);
            args.push(f.to_str().unwrap());
            ffmpeg(&args);
            std::fs::read(f).unwrap()
        })
        .collect()
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Bytes changed and the file cut anywhere: a plan whose packets lie
    /// in the file and fit, or an error; never a panic.
    #[test]
    fn mutated_matroska_never_panics(
        which: bool,
        edits in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()), 1..8),
        cut in proptest::prelude::any::<proptest::sample::Index>(),
    ) {
        let mut data = small_files()[usize::from(which)].clone();
        for (i, b) in edits {
            let at = i.index(data.len());
            data[at] = b;
        }
        data.truncate(cut.index(data.len()) + 1);
        if let Ok(p) = fjord_media::format::plan(&data, &Default::default(), &mut |_, _| {}) {
            for t in &p.tracks {
                check_records(&data, t);
                proptest::prop_assert!(t.sync.iter().all(|s| (s.packet as usize) < t.packets.len()));
            }
        }
    }
}

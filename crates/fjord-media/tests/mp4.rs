//! MP4 ingest against ffmpeg: what a player depacketizes from the plan
//! equals what ffmpeg extracts from the file, at ffprobe's timestamps.

mod media;

use std::path::Path;

use fjord_media::{FormatError, MediaPlan, TrackKind};
use media::*;
use proptest::prelude::*;

const TEN_SECONDS: &str = "10";

/// Video checks for track `track` (ffprobe stream `stream`): NALs equal
/// ffmpeg's Annex B output (`-f fmt` after `bsf`), one AU per ffprobe
/// packet with its pts, sync points exactly on keyframes.
fn check_video(file: &Path, plan: &MediaPlan, data: &[u8], track: usize, h265: bool) {
    let t = &plan.tracks[track];
    check_records(data, t);
    let aus = depacketize_nals(data, t, h265);
    let dir = scratch();
    let annexb = path_in(&dir, "out.es");
    let (bsf, fmt) = if h265 {
        ("hevc_mp4toannexb", "hevc")
    } else {
        ("h264_mp4toannexb", "h264")
    };
    ffmpeg(&[
        "-i",
        file.to_str().unwrap(),
        "-map",
        "0:v:0",
        "-c",
        "copy",
        "-bsf:v",
        bsf,
        "-f",
        fmt,
        annexb.to_str().unwrap(),
    ]);
    let expected = annexb_nals(&std::fs::read(&annexb).unwrap());
    let ours: Vec<Vec<u8>> = aus.iter().flat_map(|(_, _, n)| n.clone()).collect();
    assert_eq!(ours.len(), expected.len(), "NAL count");
    for (i, (a, b)) in ours.iter().zip(&expected).enumerate() {
        assert!(a == b, "NAL {i} differs ({} vs {} bytes)", a.len(), b.len());
    }

    let (probe, (num, den)) = probe_packets(file, "v:0");
    assert_eq!(aus.len(), probe.len(), "one AU per sample");
    let mut keyframes = Vec::new();
    for (k, ((ts, first, _), (pts, key))) in aus.iter().zip(&probe).enumerate() {
        let expect = (i128::from(*pts) * 90_000 * i128::from(num) * 2 + i128::from(den))
            .div_euclid(2 * i128::from(den)) as u32;
        assert_eq!(*ts, expect, "rtp_ts of AU {k}");
        if *key {
            keyframes.push((*first as u32, *pts));
        }
    }
    let sync: Vec<(u32, u64)> = t.sync.iter().map(|s| (s.packet, s.time_ns)).collect();
    let expect: Vec<(u32, u64)> = keyframes
        .iter()
        .map(|&(p, pts)| {
            (
                p,
                (i128::from(pts) * 1_000_000_000 * i128::from(num) / i128::from(den)) as u64,
            )
        })
        .collect();
    assert_eq!(sync, expect, "sync points are the keyframes");
    assert!(t.sync.len() >= 2, "several keyframes in the test media");
}

/// AAC checks: AUs equal ffmpeg's `-f adts` frames, timestamps ffprobe's.
fn check_aac(file: &Path, plan: &MediaPlan, data: &[u8], track: usize) {
    let t = &plan.tracks[track];
    check_records(data, t);
    assert_eq!(t.desc.encoding, "mpeg4-generic");
    assert!(t.sync.is_empty());
    let aus = depacketize_aac(data, t);
    let dir = scratch();
    let adts = path_in(&dir, "out.aac");
    ffmpeg(&[
        "-i",
        file.to_str().unwrap(),
        "-map",
        "0:a:0",
        "-c",
        "copy",
        "-f",
        "adts",
        adts.to_str().unwrap(),
    ]);
    let frames = adts_frames(&std::fs::read(&adts).unwrap());
    assert_eq!(aus.len(), frames.len(), "AU count");
    assert!(
        aus.iter().zip(&frames).all(|((_, a), f)| a == f),
        "AUs equal ffmpeg's frames"
    );
    let (probe, (num, den)) = probe_packets(file, "a:0");
    let rate = i128::from(t.desc.clock_rate);
    for (k, ((ts, _), (pts, _))) in aus.iter().zip(&probe).enumerate() {
        let expect = (i128::from(*pts) * rate * i128::from(num) / i128::from(den)) as u32;
        assert_eq!(*ts, expect, "rtp_ts of AU {k}");
    }
}

fn make(dir: &tempfile::TempDir, name: &str, args: &[&str]) -> std::path::PathBuf {
    let out = path_in(dir, name);
    let mut all = vec![
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=640x360:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:sample_rate=48000",
        "-t",
        TEN_SECONDS,
    ];
    all.extend_from_slice(args);
    all.push(out.to_str().unwrap());
    ffmpeg(&all);
    out
}

#[test]
fn h264_and_aac() {
    let dir = scratch();
    // Big I frames (FU-A) and no B-frames.
    let file = make(
        &dir,
        "a.mp4",
        &[
            "-c:v", "libx264", "-bf", "0", "-g", "50", "-crf", "10", "-c:a", "aac",
        ],
    );
    let (data, plan) = plan_file(&file);
    assert_eq!(plan.report.format, "MP4 (H.264, AAC)");
    assert_eq!(plan.tracks.len(), 2);
    let v = &plan.tracks[0].desc;
    assert_eq!(
        (v.kind, v.payload_type, v.clock_rate, v.encoding.as_str()),
        (TrackKind::Video, 96, 90_000, "H264")
    );
    assert!(
        v.fmtp
            .starts_with("packetization-mode=1;profile-level-id=64"),
        "{}",
        v.fmtp
    );
    assert!(v.fmtp.contains(";sprop-parameter-sets=Z"), "{}", v.fmtp);
    let a = &plan.tracks[1].desc;
    assert_eq!((a.payload_type, a.clock_rate, a.channels), (97, 48_000, 1));
    // AAC-LC, 48 kHz, mono, then the SBR sync extension ffmpeg's encoder adds.
    assert_eq!(
        a.fmtp,
        "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=118856e500"
    );
    assert!(
        plan.tracks[0]
            .packets
            .iter()
            .any(|p| !p.prefix().is_empty()),
        "FU-A used"
    );
    check_video(&file, &plan, &data, 0, false);
    check_aac(&file, &plan, &data, 1);
    assert!(
        (9_900_000_000..=10_100_000_000).contains(&plan.duration_ns),
        "{}",
        plan.duration_ns
    );
}

#[test]
fn h264_with_b_frames_and_edit_list() {
    let dir = scratch();
    let file = make(
        &dir,
        "b.mp4",
        &["-c:v", "libx264", "-bf", "2", "-g", "30", "-an"],
    );
    let (data, plan) = plan_file(&file);
    let t = &plan.tracks[0];
    // The edit list shifts the first picture to 0 although its decode time is earlier.
    assert_eq!(
        t.sync[0],
        fjord_media::SyncPoint {
            packet: 0,
            time_ns: 0
        }
    );
    assert_eq!(t.packets[0].rtp_ts, 0);
    assert!(
        t.packets.windows(2).any(|w| w[1].rtp_ts < w[0].rtp_ts),
        "B-frames reorder timestamps"
    );
    check_video(&file, &plan, &data, 0, false);
}

#[test]
fn h265() {
    let dir = scratch();
    let file = make(
        &dir,
        "c.mp4",
        &[
            "-c:v",
            "libx265",
            "-x265-params",
            "log-level=error:keyint=50",
            "-tag:v",
            "hvc1",
            "-an",
        ],
    );
    let (data, plan) = plan_file(&file);
    let d = &plan.tracks[0].desc;
    assert_eq!(d.encoding, "H265");
    assert!(d.fmtp.starts_with("sprop-vps=QAEM"), "{}", d.fmtp);
    assert!(
        d.fmtp.contains(";sprop-sps=QgEB") && d.fmtp.contains(";sprop-pps=RAH"),
        "{}",
        d.fmtp
    );
    check_video(&file, &plan, &data, 0, true);
}

#[test]
fn opus() {
    let dir = scratch();
    let file = make(&dir, "d.mp4", &["-vn", "-c:a", "libopus", "-ac", "2"]);
    let (data, plan) = plan_file(&file);
    let t = &plan.tracks[0];
    assert_eq!(
        (t.desc.encoding.as_str(), t.desc.clock_rate, t.desc.channels),
        ("opus", 48_000, 2)
    );
    check_records(&data, t);
    let dir2 = scratch();
    let sums = path_in(&dir2, "framemd5.txt");
    ffmpeg(&[
        "-i",
        file.to_str().unwrap(),
        "-c",
        "copy",
        "-f",
        "framemd5",
        sums.to_str().unwrap(),
    ]);
    let md5s: Vec<String> = std::fs::read_to_string(&sums)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(',').nth(5).unwrap().trim().to_owned())
        .collect();
    assert_eq!(md5s.len(), t.packets.len());
    let (probe, (num, den)) = probe_packets(&file, "a:0");
    for (i, (r, (pts, _))) in t.packets.iter().zip(&probe).enumerate() {
        // RFC 7587 leaves the marker to RFC 3551 (talkspurt starts): unused.
        assert!(!r.marker());
        let expect = (i128::from(*pts) * 48_000 * i128::from(num) / i128::from(den)) as u32;
        assert_eq!(r.rtp_ts, expect, "rtp_ts of packet {i}");
        assert_eq!(
            md5_hex(&payload(&data, r)),
            md5s[i],
            "payload of packet {i}"
        );
    }
}

fn md5_hex(b: &[u8]) -> String {
    let out = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b)?;
            c.wait_with_output()
        })
        .expect("md5sum");
    String::from_utf8(out.stdout).unwrap()[..32].to_owned()
}

#[test]
fn unsupported_codecs_are_refused_with_reasons() {
    let dir = scratch();
    let file = make(&dir, "e.mp4", &["-c:v", "mpeg4", "-an"]);
    let data = std::fs::read(&file).unwrap();
    match fjord_media::format::plan(&data, &Default::default(), &mut |_, _| {}) {
        Err(FormatError::Unsupported(m)) => assert!(m.contains("mp4v"), "{m}"),
        other => panic!("{other:?}"),
    }
}

fn small_mp4() -> &'static [u8] {
    static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = scratch();
        let f = path_in(&dir, "s.mp4");
        ffmpeg(&[
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=64x64:rate=10",
            "-f",
            "lavfi",
            "-i",
            "sine",
            "-t",
            "1",
            "-c:v",
            "libx264",
            "-bf",
            "2",
            "-c:a",
            "aac",
            f.to_str().unwrap(),
        ]);
        std::fs::read(&f).unwrap()
    })
}

fn plan_is_inside(data: &[u8]) {
    if let Ok(p) = fjord_media::format::plan(data, &Default::default(), &mut |_, _| {}) {
        for t in &p.tracks {
            check_records(data, t);
            assert!(t.sync.iter().all(|s| (s.packet as usize) < t.packets.len()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn mutated_mp4_never_panics(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
                                cut in any::<prop::sample::Index>()) {
        let mut data = small_mp4().to_vec();
        for (i, b) in edits {
            let at = i.index(data.len());
            data[at] = b;
        }
        data.truncate(cut.index(data.len()) + 1);
        plan_is_inside(&data);
    }

    #[test]
    fn arbitrary_boxes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut data = b"\0\0\0\x10ftypisom\0\0\0\0".to_vec();
        data.extend_from_slice(&body);
        plan_is_inside(&data);
    }
}

/// Ingest speed on a cached 70 MB file: mdat is skipped except for NAL
/// length fields. Run with `cargo test --release --test mp4 -- --ignored`.
#[test]
#[ignore = "timing; run by hand in release"]
fn ingest_speed() {
    let dir = scratch();
    let file = path_in(&dir, "big.mp4");
    ffmpeg(&[
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=1280x720:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=sample_rate=48000",
        "-t",
        "40",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-qp",
        "0",
        "-c:a",
        "aac",
        file.to_str().unwrap(),
    ]);
    let data = std::fs::read(&file).unwrap();
    let rounds: u32 = 20;
    let start = std::time::Instant::now();
    let mut packets = 0;
    for _ in 0..rounds {
        let p = fjord_media::format::plan(&data, &Default::default(), &mut |_, _| {}).unwrap();
        packets += p.report.rtp_packets;
    }
    let secs = start.elapsed().as_secs_f64();
    let mb_s = data.len() as f64 * f64::from(rounds) / secs / 1e6;
    println!(
        "{} MB, {} packets: {mb_s:.0} MB/s",
        data.len() / 1_000_000,
        packets / u64::from(rounds)
    );
    assert!(mb_s >= 500.0, "{mb_s:.0} MB/s");
}

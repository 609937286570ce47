//! Trick play as real players ask for it (RFC 2326 `Scale`): live555's
//! openRTSP fast-forwards a TS title, GStreamer's rtspsrc plays an MP4
//! title at rate 2 and rewinds it at rate -2. What they receive must
//! decode to the title's own key frames (each picture bit-exact to the
//! source's, checked by the md5 of the decoded frame), nothing else, in
//! the order of play, at the pace of the scale.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Server, generate_media, ingest, run_bounded};

/// Frames per second and per GOP of the clips.
pub(crate) const GOP: usize = 25;

/// 20 s of H.264, a key frame every second, in `container` (`mpegts` with
/// AAC beside it; `mp4` video only: rtspsrc's pipeline takes one stream).
pub(crate) fn clip(name: &str, container: &str) -> std::path::PathBuf {
    let mut args = vec!["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"];
    if container == "mpegts" {
        args.extend(["-f", "lavfi", "-i", "sine=frequency=440", "-c:a", "aac"]);
    }
    args.extend([
        "-t",
        "20",
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-pix_fmt",
        "yuv420p",
        "-g",
        "25",
        "-keyint_min",
        "25",
        "-sc_threshold",
        "0",
        "-f",
        container,
    ]);
    generate_media(name, &args)
}

/// The md5 of every decoded video frame of `input`, in decoding order.
pub(crate) fn decoded(input: &Path) -> Vec<String> {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-i"])
        .arg(input)
        .args(["-map", "0:v", "-f", "framemd5", "-"]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "ffmpeg: {}", out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    (text.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit(',').next().map(|m| m.trim().to_owned()))
        .collect()
}

pub(crate) fn server_with(clip: &Path, name: &str) -> Server {
    Server::start_with("", |root| {
        ingest(root, &[], &[(clip, name)]);
    })
}

/// Which source frames `got` are, asserting each is a key frame of
/// `source` and that they run the way `forward` says, `expect` of them
/// or at most two fewer.
fn key_frames_in_order(source: &[String], got: &[String], forward: bool, expect: usize) {
    let at: Vec<usize> = (got.iter())
        .map(|m| {
            source
                .iter()
                .position(|s| s == m)
                .expect("a received picture is not in the title")
        })
        .collect();
    assert!(
        at.iter().all(|f| f % GOP == 0),
        "not only key frames: {at:?}"
    );
    let ordered = at
        .windows(2)
        .all(|w| if forward { w[0] < w[1] } else { w[0] > w[1] });
    assert!(ordered, "key frames out of order: {at:?}");
    assert!(
        at.len() <= expect && at.len() + 2 >= expect,
        "{} key frames, {expect} expected: {at:?}",
        at.len()
    );
}

/// The stream took about its span of the title over the scale, plus the
/// second the server waits before its BYE and the client's teardown.
fn at_pace(took: f64, span_s: f64, scale: f64, what: &str) {
    let expect = span_s / scale;
    assert!(
        took > expect * 0.8 && took < expect * 1.3 + 2.5,
        "{what}: took {took:.2} s for {span_s} s at {scale}x"
    );
}

/// Over UDP and over TCP interleaved (`openRTSP -t`).
#[test]
fn openrtsp_fast_forward_of_a_ts_title_holds_its_key_frames_in_order() {
    assert!(
        Command::new("openRTSP").arg("-h").output().is_ok(),
        "openRTSP is missing: `make live555` installs it (make test does)"
    );
    let ts = clip("trick-20s.ts", "mpegts");
    let server = server_with(&ts, "trick.ts");
    let source = decoded(&ts);
    for transport in [&[][..], &["-t"]] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("openRTSP");
        cmd.current_dir(dir.path())
            .args(transport)
            .args(["-z", "4", &server.url("trick.ts")]);
        let t = Instant::now();
        let out = run_bounded(cmd, Duration::from_secs(40));
        let took = t.elapsed().as_secs_f64();
        assert!(
            !out.timed_out,
            "openRTSP {transport:?} did not end: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("Scale: 4"),
            "no Scale in the reply: {}",
            out.stderr
        );
        let got = decoded(&dir.path().join("video-MP2T-1"));
        key_frames_in_order(&source, &got, true, 20);
        at_pace(took, 20.0, 4.0, &format!("openRTSP {transport:?} -z 4"));
    }
}

#[test]
fn gstreamer_plays_an_mp4_title_at_rate_2_and_rewinds_it_at_rate_minus_2() {
    let mp4 = clip("trick-20s.mp4", "mp4");
    let server = server_with(&mp4, "trick.mp4");
    let source = decoded(&mp4);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/trick_gst.py");
    for (rate, start, stop, forward, expect) in
        [(2.0, 4.0, 20.0, true, 16), (-2.0, 0.0, 15.0, false, 16)]
    {
        let dir = tempfile::tempdir().unwrap();
        let out_path = dir.path().join("units.h264");
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg(script)
            .arg(server.url("trick.mp4"))
            .args([rate, start, stop].map(|v| v.to_string()))
            .arg(&out_path);
        let out = run_bounded(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "rate {rate}: {}", out.stderr);
        key_frames_in_order(&source, &decoded(&out_path), forward, expect);
        let took: f64 = std::fs::read_to_string(out_path.with_extension("h264.seconds"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        at_pace(took, stop - start, 2.0, &format!("rate {rate}"));
    }
}

//! VCR controls as real players use them: ffmpeg seeks by PLAY from the
//! start, then PAUSE and PLAY with a Range; a Range with an end.

use std::process::Command;
use std::time::Duration;

use fjord_client::{EndReason, Received, RtspClient};

use crate::client::{LIMIT, QUIET, open, recv};
use crate::common::{
    Server, TsClip, assert_contiguous, clip_bytes, find_aligned, ingest, run_bounded,
};
use crate::peers::{Frames, parse_framemd5};
use crate::trick;

/// 12 s of H.264 (a keyframe every second) + AAC, muxed at a constant 6
/// Mbit/s: about 570 RTP packets a second, so a seek 9 s in moves more
/// than 3,000 packets, further than RFC 3550 receivers take for loss.
fn dense_clip() -> std::path::PathBuf {
    let clip = TsClip {
        size: "640x360",
        tone: 440,
        seconds: 12,
        rates: ("1.5M", "128k"),
        extra: &["-muxrate", "6M"],
    };
    clip.make("dense-12s.ts")
}

fn framemd5(input: &[&str]) -> (Frames, String) {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "warning"])
        .args(input)
        .args(["-c", "copy", "-f", "framemd5", "-"]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(!out.timed_out, "ffmpeg did not finish: {}", out.stderr);
    assert!(out.status.success(), "ffmpeg: {}", out.stderr);
    (
        parse_framemd5(&String::from_utf8_lossy(&out.stdout)),
        out.stderr,
    )
}

/// After a mid-stream seek ffmpeg receives every video frame from the
/// keyframe the server starts at to the end of the title, bit-exact, and
/// sees no break in the sequence numbers (before, it took the jump for a
/// restart and dropped up to two seconds after it).
#[test]
fn ffmpeg_seeking_mid_stream_receives_every_frame_from_the_keyframe() {
    let clip = dense_clip();
    let server = Server::start_with("", |root| {
        ingest(root, &[], &[(&clip, "dense.ts")]);
    });
    let clip = clip.to_str().unwrap();
    let (source, _) = framemd5(&["-i", clip]);
    let source: Vec<&String> = source[&0].iter().map(|f| &f[4]).collect();
    let url = server.url("dense.ts");
    for transport in ["udp", "tcp"] {
        let (got, log) = framemd5(&["-ss", "9", "-rtsp_transport", transport, "-i", &url]);
        for broken in ["bad cseq", "missed", "dropping old packet"] {
            assert!(!log.contains(broken), "{transport}: ffmpeg says {log}");
        }
        let got: Vec<&String> = got[&0].iter().map(|f| &f[4]).collect();
        let first = source.iter().position(|m| *m == got[0]);
        let first = first.unwrap_or_else(|| panic!("{transport}: first frame not in the source"));
        assert_eq!(
            first % 25,
            0,
            "{transport}: starts at frame {first}, not a keyframe"
        );
        assert!(
            (225..=275).contains(&first),
            "{transport}: starts at frame {first}"
        );
        let rest = &source[first..];
        assert!(
            got.len() == rest.len() || got.len() + 1 == rest.len(),
            "{transport}: {} frames from frame {first}, {} in the source",
            got.len(),
            rest.len()
        );
        assert!(
            got.iter().zip(rest).all(|(a, b)| a == b),
            "{transport}: frames differ"
        );
    }
}

/// GStreamer's rtspsrc seeks mid-stream, forward then back (flushing
/// key-unit `seek_simple`, as a player's seek bar does): after each seek
/// it receives every picture from the key frame at or before the point,
/// bit-exact (md5 of each decoded frame), until the next seek or the end.
#[test]
fn gstreamer_seeking_forward_and_back_loses_no_frame_after_the_seek() {
    let mp4 = trick::clip("trick-20s.mp4", "mp4");
    let server = trick::server_with(&mp4, "seek.mp4");
    let source = trick::decoded(&mp4);
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("units.h264");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/seek_gst.py"))
        .arg(server.url("seek.mp4"))
        .arg(&out_path)
        .args(["50", "12", "4"]);
    let out = run_bounded(cmd, Duration::from_secs(90));
    assert!(out.status.success(), "seek_gst.py: {}", out.stderr);
    let at: Vec<usize> = (trick::decoded(&out_path).iter())
        .map(|m| {
            source
                .iter()
                .position(|s| s == m)
                .expect("a picture not in the title")
        })
        .collect();
    // Runs of consecutive source frames: before the seeks, then one from
    // each seek's key frame.
    let mut runs: Vec<(usize, usize)> = vec![];
    for &f in &at {
        match runs.last_mut() {
            Some((_, end)) if f == *end + 1 => *end = f,
            _ => runs.push((f, f)),
        }
    }
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert_eq!(runs[0].0, 0, "{runs:?}");
    assert_eq!(
        runs[1].0,
        12 * trick::GOP,
        "from the key frame at 12 s: {runs:?}"
    );
    assert_eq!(
        runs[2].0,
        4 * trick::GOP,
        "from the key frame at 4 s: {runs:?}"
    );
    assert_eq!(runs[2].1, source.len() - 1, "to the end: {runs:?}");
}

/// `Range: npt=3-5` plays the file's bytes from the keyframe at or before
/// 3 s and stops at 5 s with RTCP BYE; the reply's Range names that end.
#[test]
fn a_range_with_an_end_stops_there_with_bye() {
    let server = Server::start("");
    let src = clip_bytes();
    for tcp in [false, true] {
        let (mut c, mut rx, _) = open(&server, "clip.ts", tcp);
        let reply = c.play(Some("npt=3-5")).expect("PLAY npt=3-5");
        let start = reply.start.expect("Range start");
        assert!(start <= 3.0 && start > 1.5, "start {start} (GOP 1 s)");
        assert_eq!(reply.end, Some(5.0), "the reply's Range ends at 5 s");
        let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
        assert_eq!(
            cap.end,
            EndReason::Bye,
            "tcp {tcp}: the stream ends with BYE"
        );
        let (off, end_off) = assert_contiguous(src, &cap.packets, "npt=3-5");
        assert!(
            off > 0 && end_off < src.len(),
            "tcp {tcp}: {off}..{end_off}"
        );
        let (first, last) = (&cap.packets[0], cap.packets.last().unwrap());
        let span = f64::from(last.rtp_ts.wrapping_sub(first.rtp_ts)) / 90_000.0;
        assert!(
            (span - (5.0 - start)).abs() < 0.3,
            "tcp {tcp}: {span:.2} s of packets for {start}-5"
        );
    }
}

/// live555's openRTSP asks for `npt=5-15` (`-s 5 -d 10`) and receives
/// every picture from the key frame at or before 5 s through 15 s,
/// bit-exact, nothing after. (openRTSP ends on its own timer at the
/// range's end, so the BYE there is checked with fjord's client above.)
#[test]
fn openrtsp_plays_a_range_from_its_key_frame_to_its_end() {
    let ts = trick::clip("trick-20s.ts", "mpegts");
    let server = trick::server_with(&ts, "range.ts");
    let source = trick::decoded(&ts);
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("openRTSP");
    cmd.current_dir(dir.path())
        .args(["-s", "5", "-d", "10", &server.url("range.ts")]);
    let out = run_bounded(cmd, Duration::from_secs(40));
    assert!(!out.timed_out, "openRTSP did not end: {}", out.stderr);
    assert!(
        out.stderr.contains("Range: npt=5.000-15.000"),
        "openRTSP asked for: {}",
        out.stderr
    );
    let got = trick::decoded(&dir.path().join("video-MP2T-1"));
    let first = (source.iter().position(|s| *s == got[0])).expect("a picture not in the title");
    assert_eq!(first, 4 * trick::GOP, "from the key frame at or before 5 s");
    let last = first + got.len();
    assert!(
        (15 * trick::GOP..=15 * trick::GOP + 2).contains(&last),
        "frames {first}..{last}, through 15 s"
    );
    assert_eq!(&source[first..last], &got[..], "bit-exact");
}

/// RFC 2326 §12.35: `Speed: 2` delivers the whole title, the same
/// packets and timestamps, in half its duration; the reply says the speed.
#[test]
fn speed_2_delivers_the_title_twice_as_fast() {
    let server = Server::start("");
    let src = clip_bytes();
    let (mut c, mut rx, duration) = open(&server, "clip.ts", false);
    let url = c.control_url().to_string();
    let r = c
        .request("PLAY", &url, &[("Speed", "2.0"), ("Range", "npt=0-")], b"")
        .unwrap();
    assert_eq!((r.status, r.header("Speed")), (200, Some("2")));
    let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
    assert_eq!(cap.end, EndReason::Bye);
    let (start, end) = assert_contiguous(src, &cap.packets, "Speed 2");
    assert_eq!((start, end), (0, src.len()), "the whole file");
    let p = &cap.packets;
    let took = p.last().unwrap().arrival - p[0].arrival;
    let content = f64::from(p.last().unwrap().rtp_ts.wrapping_sub(p[0].rtp_ts)) / 90_000.0;
    assert!(
        (content - duration).abs() < 0.5,
        "timestamps span {content:.2} s"
    );
    let ratio = content / took.as_secs_f64();
    assert!(
        (1.7..2.3).contains(&ratio),
        "{content:.2} s of title in {took:?}"
    );
}

/// A faster delivery is admitted like that many streams: with room for
/// 2.5 clips on the one engine thread, `Speed: 4` gets 453; `Speed: 2`
/// plays and holds the room of two streams until `Speed: 1`.
#[test]
fn speed_beyond_the_engine_threads_room_gets_453() {
    let clip =
        fjord_media::ts::packetize(clip_bytes(), &fjord_media::ts::TsOptions::default()).unwrap();
    let pps = clip.packets.len() as f64 / (clip.duration_ns as f64 / 1e9);
    let capacity = (pps * 2.5) as u64;
    let server = Server::start(&format!(
        "threads = 1\ncapacity_pps_per_core = {capacity}\n"
    ));
    let (mut c, _rx, _) = open(&server, "clip.ts", false);
    let url = c.control_url().to_string();
    let r = c.request("PLAY", &url, &[("Speed", "4")], b"").unwrap();
    assert_eq!(r.status, 453, "4 clips' packet rate");
    let r = c.request("PLAY", &url, &[("Speed", "2")], b"").unwrap();
    assert_eq!(r.status, 200, "2 clips' packet rate");
    // The room the faster delivery holds is the third stream's.
    assert_eq!(server.setup_status(), 453, "held by Speed 2");
    let r = c.request("PLAY", &url, &[("Speed", "1")], b"").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(server.setup_status(), 200, "given back at Speed 1");
}

/// RFC 2326 §10.5: a PLAY with a Range sent while one plays to a given
/// end waits for it. `npt=2-4` then `npt=6-8` arrive one after the other,
/// each the file's bytes from its key frame, the sequence numbers and the
/// RTP clock running on across the cut, one BYE at the end.
#[test]
fn pipelined_plays_play_their_ranges_in_order() {
    let server = Server::start("");
    let src = clip_bytes();
    for tcp in [false, true] {
        let (mut c, mut rx, _) = open(&server, "clip.ts", tcp);
        let first = c.play(Some("npt=2-4")).expect("PLAY npt=2-4");
        let second = c.play(Some("npt=6-8")).expect("PLAY npt=6-8");
        assert_eq!((first.end, second.end), (Some(4.0), Some(8.0)));
        let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
        assert_eq!(cap.end, EndReason::Bye, "tcp {tcp}");
        let p = &cap.packets;
        let offset = |i: usize| find_aligned(src, &p[i].payload).expect("source bytes");
        let cut = (1..p.len())
            .find(|&i| offset(i) != offset(i - 1) + p[i - 1].payload.len())
            .unwrap_or_else(|| panic!("tcp {tcp}: one range only"));
        let (a, a_end) = assert_contiguous(src, &p[..cut], "npt=2-4");
        let (b, _) = assert_contiguous(src, &p[cut..], "npt=6-8");
        assert!(a < b && a_end < b, "tcp {tcp}: {a}..{a_end}, then {b}");
        assert_eq!(p[cut].seq, p[cut - 1].seq.wrapping_add(1), "tcp {tcp}");
        let step = f64::from(p[cut].rtp_ts.wrapping_sub(p[cut - 1].rtp_ts)) / 90_000.0;
        assert!(
            step < 0.2,
            "tcp {tcp}: the RTP clock jumps {step:.2} s at the cut"
        );
        let span = |q: &[Received]| {
            f64::from(q.last().unwrap().rtp_ts.wrapping_sub(q[0].rtp_ts)) / 90_000.0
        };
        let (s1, s2) = (first.start.unwrap(), second.start.unwrap());
        assert!((span(&p[..cut]) - (4.0 - s1)).abs() < 0.3, "tcp {tcp}");
        assert!((span(&p[cut..]) - (8.0 - s2)).abs() < 0.3, "tcp {tcp}");
    }
}

/// RFC 2326 §10.6: a PAUSE with a Range halts the stream at that point
/// (no BYE); a PLAY then plays on from there; a point already passed is
/// 457.
#[test]
fn a_pause_point_halts_the_stream_there() {
    let server = Server::start("");
    let src = clip_bytes();
    let (mut c, mut rx, _) = open(&server, "clip.ts", false);
    c.play(Some("npt=2-")).expect("PLAY npt=2-");
    let url = c.control_url().to_string();
    let r = c
        .request("PAUSE", &url, &[("Range", "npt=0.5")], b"")
        .unwrap();
    assert_eq!(r.status, 457, "a point already passed");
    let r = c
        .request("PAUSE", &url, &[("Range", "npt=4")], b"")
        .unwrap();
    assert_eq!(r.status, 200);
    let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
    assert_ne!(cap.end, EndReason::Bye, "a pause point ends nothing");
    let (_, end) = assert_contiguous(src, &cap.packets, "npt=2-, paused at 4");
    let span = f64::from((cap.packets.last().unwrap().rtp_ts).wrapping_sub(cap.packets[0].rtp_ts))
        / 90_000.0;
    assert!(span < 3.0 && end < src.len(), "{span:.2} s of packets");
    let again = c.play(None).expect("PLAY after the pause point");
    assert!((again.start.unwrap() - 4.0).abs() < 0.01, "{again:?}");
    let rest = recv(&mut c, &mut rx, QUIET, LIMIT);
    assert_eq!(rest.end, EndReason::Bye);
    assert!(
        src[end..].starts_with(&rest.packets[0].payload),
        "on from the pause point"
    );
}

/// A PLAY with a Scale, Speed or Range fjord does not play gets its
/// status and the reason (456: slow motion, Scale beyond 16, Speed beyond
/// max_speed, both at once; 400: not a number; 457: a rewind's Range that
/// runs forward, `clock=` and `smpte=` ranges, an npt range that ends
/// `now`) and the session stays ready to play; `Scale: 1` and
/// `Scale: 4` play, and the reply says the scale.
#[test]
fn an_unsupported_scale_is_refused_not_played_at_the_wrong_rate() {
    let server = Server::start("");
    let mut c = RtspClient::connect(&server.url("clip.ts")).unwrap();
    let d = c.describe().expect("DESCRIBE");
    let track = d.track_urls.first().expect("a media section").clone();
    let (_, _rx) = c.setup_udp(&track).expect("SETUP");
    let url = c.control_url().to_string();
    let mut other = RtspClient::connect(&server.url("clip.ts")).unwrap();
    other.describe().expect("DESCRIBE");
    let transport = [("Transport", "RTP/AVP;unicast;client_port=9-10")];
    let props = other.request("SETUP", &track, &transport, b"").unwrap();
    assert_eq!(props.status, 200);
    assert_eq!(
        props.header("Media-Properties"),
        Some("Random-Access, Immutable, Unlimited, Scales=\"-16:-1, 1:16\""),
        "RTSP 2.0 clients learn the scales offered"
    );
    for (headers, status) in [
        (&[("Scale", "0.5")][..], 456),
        (&[("Scale", "2.5")], 456),
        (&[("Scale", "-32")], 456),
        (&[("Speed", "8")], 456),
        (&[("Scale", "2"), ("Speed", "2")], 456),
        (&[("Scale", "fast")], 400),
        (&[("Speed", "-1")], 400),
        (&[("Scale", "-2"), ("Range", "npt=2-5")], 457),
        (&[("Scale", "2"), ("Range", "npt=5-2")], 457),
        (&[("Range", "clock=19961108T142300Z-19961108T143520Z")], 457),
        (&[("Range", "smpte=0:10:20-")], 457),
        (&[("Range", "npt=5-now")], 457),
    ] {
        let r = c.request("PLAY", &url, headers, b"").unwrap();
        assert_eq!(r.status, status, "{headers:?}");
        if status == 456 {
            let body = String::from_utf8_lossy(&r.body);
            assert!(body.contains("not supported"), "{headers:?}: {body}");
        }
    }
    let r = c.request("PLAY", &url, &[("Scale", "1.0")], b"").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Scale"), Some("1"));
    let r = c.request("PLAY", &url, &[("Scale", "4")], b"").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Scale"), Some("4"));
}

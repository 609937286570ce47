//! Real players as clients: ffmpeg and GStreamer's rtspsrc must receive
//! exactly what is in the file.

use std::collections::BTreeMap;
use std::fs;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{Server, clip_bytes, media, run_bounded, run_bounded_with};

/// framemd5 frame lines per stream: (dts, pts, duration, size, md5).
pub type Frames = BTreeMap<u32, Vec<[String; 5]>>;

pub fn parse_framemd5(text: &str) -> Frames {
    let mut out = Frames::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        assert!(f.len() >= 6, "framemd5 line {line:?}");
        let stream: u32 = f[0].parse().unwrap();
        out.entry(stream)
            .or_default()
            .push([f[1], f[2], f[3], f[4], f[5]].map(str::to_string));
    }
    out
}

fn source_frames() -> &'static Frames {
    static F: OnceLock<Frames> = OnceLock::new();
    F.get_or_init(|| {
        let mut cmd = Command::new("ffmpeg");
        cmd.args(["-nostdin", "-v", "error", "-i"])
            .arg(&media().clip)
            .args(["-c", "copy", "-f", "framemd5", "-"]);
        let out = run_bounded(cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "ffmpeg framemd5 of the source: {}",
            out.stderr
        );
        parse_framemd5(&String::from_utf8_lossy(&out.stdout))
    })
}

/// Received frames must equal the source's, per stream, except that the last
/// frame of a stream may be missing (ffmpeg's RTP MP2T demuxer does not
/// flush the last PES). Timestamps may differ from the source by one
/// constant offset, the same for all streams.
fn assert_frames_match(got: &Frames, want: &Frames, what: &str) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: streams"
    );
    let ts = |s: &str| s.parse::<i64>().unwrap();
    let offset = ts(&want[&0][0][0]) - ts(&got[&0][0][0]);
    for (stream, frames) in want {
        let g = &got[stream];
        assert!(
            g.len() == frames.len() || g.len() + 1 == frames.len(),
            "{what}: stream {stream}: {} frames received, {} in the source",
            g.len(),
            frames.len()
        );
        for (i, (a, b)) in g.iter().zip(frames).enumerate() {
            let shifted = [
                (ts(&a[0]) + offset).to_string(),
                (ts(&a[1]) + offset).to_string(),
                a[2].clone(),
                a[3].clone(),
                a[4].clone(),
            ];
            assert_eq!(
                &shifted, b,
                "{what}: stream {stream} frame {i} (offset {offset})"
            );
        }
    }
}

fn ffmpeg_receives_every_frame(transport: &str) {
    ffmpeg_receives_every_frame_from(&Server::start(""), transport, "");
}

fn ffmpeg_receives_every_frame_from(server: &Server, transport: &str, what: &str) {
    ffmpeg_receives_every_frame_at(&server.url("clip.ts"), transport, what);
}

/// ffmpeg receives every frame of `clip.ts` from `url` (which may hold
/// credentials), as its packets' hashes say.
pub(crate) fn ffmpeg_receives_every_frame_at(url: &str, transport: &str, what: &str) {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-rtsp_transport", transport])
        .args(["-timeout", "10000000", "-i"])
        .arg(url)
        .args(["-c", "copy", "-f", "framemd5", "-"]);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(
        !out.timed_out,
        "ffmpeg did not finish within 60 s: {}",
        out.stderr
    );
    assert!(
        out.status.success(),
        "ffmpeg {transport} {what}: {}",
        out.stderr
    );
    let got = parse_framemd5(&String::from_utf8_lossy(&out.stdout));
    assert_frames_match(&got, source_frames(), &format!("ffmpeg {transport} {what}"));
}

#[test]
fn ffmpeg_udp_receives_every_frame() {
    ffmpeg_receives_every_frame("udp");
}

#[test]
fn ffmpeg_tcp_receives_every_frame() {
    ffmpeg_receives_every_frame("tcp");
}

fn gstreamer_receives_the_file(protocol: &str) {
    gstreamer_receives_the_file_from(&Server::start(""), protocol, "");
}

fn gstreamer_receives_the_file_from(server: &Server, protocol: &str, what: &str) {
    let out_ts = server.root.path().join(format!("gst-{protocol}.ts"));
    gstreamer_receives_the_file_at(&server.url("clip.ts"), &[], &out_ts, protocol, what);
}

/// GStreamer's rtspsrc, with `props` (e.g. credentials), receives
/// `clip.ts` from `url` whole, into `out_ts`.
pub(crate) fn gstreamer_receives_the_file_at(
    url: &str,
    props: &[&str],
    out_ts: &std::path::Path,
    protocol: &str,
    what: &str,
) {
    let mut cmd = Command::new("gst-launch-1.0");
    cmd.args(["-q", "-e", "rtspsrc"])
        .arg(format!("location={url}"))
        .args(props)
        .arg(format!("protocols={protocol}"))
        .args(["!", "rtpmp2tdepay", "!", "filesink"])
        .arg(format!("location={}", out_ts.display()));
    // Ends by itself on the server's BYE (EOS); otherwise interrupted at
    // duration + 4 s (EOS via -e, so filesink flushes), killed 10 s later.
    let out = run_bounded_with(cmd, Duration::from_secs(24), Some(Duration::from_secs(14)));
    let got = fs::read(out_ts).unwrap_or_default();
    let src = clip_bytes();
    assert!(
        got == src,
        "gst {protocol} {what}: received {} bytes, source {} (common prefix {}); exited {:?}, timed out {}: {}",
        got.len(),
        src.len(),
        got.iter().zip(src).take_while(|(a, b)| a == b).count(),
        out.status,
        out.timed_out,
        out.stderr
    );
    if out.timed_out {
        eprintln!("note: gst {protocol} did not stop by itself (no EOS from the BYE)");
    }
}

#[test]
fn gstreamer_udp_receives_the_file() {
    gstreamer_receives_the_file("udp");
}

#[test]
fn gstreamer_tcp_receives_the_file() {
    gstreamer_receives_the_file("tcp");
}

/// Every data path serves real players bit-exactly over UDP (TCP sessions
/// do not use the data path: they share the interleaved writer above).
#[test]
fn every_data_path_serves_ffmpeg_and_gstreamer() {
    let _ = source_frames();
    std::thread::scope(|s| {
        for &path in fjord_engine::datapath::NAMES {
            s.spawn(move || {
                // Ingested ahead: the paths that send prefabricated packets
                // send them, the others build headers.
                let server = Server::start_ingested(&format!("datapath = {path:?}\n"));
                let what = format!("via {path}");
                std::thread::scope(|s| {
                    s.spawn(|| ffmpeg_receives_every_frame_from(&server, "udp", &what));
                    s.spawn(|| gstreamer_receives_the_file_from(&server, "udp", &what));
                });
                let log = server.log_text();
                assert!(
                    log.lines()
                        .any(|l| l.contains("serving")
                            && l.contains(&format!("datapath=\"{path}\""))),
                    "the server ran with {path}: {log}"
                );
                assert!(log.contains("prefabricated packets found"), "{log}");
            });
        }
    });
}

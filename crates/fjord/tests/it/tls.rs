//! TLS with a certificate `fjord cert` made: ffmpeg and GStreamer play
//! `rtsps://` (RTP interleaved inside the TLS connection) bit-exact, with
//! Digest and with Basic credentials; curl downloads over HTTPS on the
//! HTTP port, where plain HTTP still answers.

use std::process::Command;
use std::time::Duration;

use crate::common::{ALICE, Server, certificate, clip_bytes, run_bounded};
use crate::peers::{ffmpeg_receives_every_frame_at, gstreamer_receives_the_file_at};

fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let mut c = Command::new("curl");
    c.args(["-s", "-k", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args);
    let out = run_bounded(c, Duration::from_secs(30));
    let split = out.stdout.iter().rposition(|&b| b == b'\n').unwrap();
    let code = String::from_utf8_lossy(&out.stdout[split + 1..])
        .parse()
        .unwrap();
    (code, out.stdout[..split].to_vec())
}

#[test]
fn ffmpeg_gstreamer_and_curl_over_tls_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{}rtsps_port = 0\n{ALICE}", certificate(dir.path()));
    let (server, port) = Server::start_http(&config);
    let url = server
        .rtsps_url("clip.ts")
        .replacen("rtsps://", "rtsps://alice:wonderland@", 1);
    ffmpeg_receives_every_frame_at(&url, "tcp", "rtsps, Digest");
    let out = server.root.path().join("gst-tls.ts");
    let props = [
        "tls-validation-flags=0",
        "user-id=alice",
        "user-pw=wonderland",
    ];
    gstreamer_receives_the_file_at(&server.rtsps_url("clip.ts"), &props, &out, "tcp", "rtsps");
    assert_eq!(std::fs::read(&out).unwrap(), clip_bytes());

    let https = format!("https://127.0.0.1:{port}/clip.ts");
    assert_eq!(curl(&[&https]).0, 401);
    let (code, body) = curl(&["--basic", "-u", "alice:wonderland", &https]);
    assert_eq!(code, 200, "Basic is taken over TLS");
    assert!(body == clip_bytes(), "HTTPS bit-exact");
    let (code, body) = curl(&[
        "--digest",
        "-u",
        "alice:wonderland",
        &https.replace("https", "http"),
    ]);
    assert_eq!(
        (code, body == clip_bytes()),
        (200, true),
        "plain HTTP on the same port"
    );
    assert_eq!(
        curl(&[
            "--basic",
            "-u",
            "alice:wonderland",
            &https.replace("https", "http")
        ])
        .0,
        401
    );
}

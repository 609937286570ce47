//! TLS with a certificate `fjord cert` made: ffmpeg and GStreamer play
//! `rtsps://` (RTP interleaved inside the TLS connection) bit-exact, with
//! Digest and with Basic credentials; curl downloads over HTTPS on the
//! HTTP port, where plain HTTP still answers, with each cipher suite in
//! the client's order of preference; Python's ssl (OpenSSL) resumes a
//! session; clients that stall mid-record or send a forged record are
//! dropped while another download goes on, bit-exact.

use std::process::Command;
use std::time::Duration;

use crate::common::{ALICE, Server, certificate, clip_bytes, run_bounded};
use crate::peers::{ffmpeg_receives_every_frame_at, gstreamer_receives_the_file_at};
use md5::Digest;

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

/// curl's HTTPS GET of `url` offering the TLS 1.3 suites `suites` (or,
/// with `tls12`, the TLS 1.2 ciphers): the status, the body and the
/// suite the connection used.
pub(crate) fn curl_suite(
    url: &str,
    suites: &str,
    tls12: bool,
    extra: &[&str],
) -> (u16, Vec<u8>, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-v", "-k", "--max-time", "60", "-w", "\n%{http_code}"]);
    match tls12 {
        true => c.args(["--tlsv1.2", "--tls-max", "1.2", "--ciphers", suites]),
        false => c.args(["--tlsv1.3", "--tls13-ciphers", suites]),
    };
    c.args(extra).arg(url);
    let out = run_bounded(c, Duration::from_secs(70));
    let split = out.stdout.iter().rposition(|&b| b == b'\n').unwrap();
    let code = String::from_utf8_lossy(&out.stdout[split + 1..])
        .parse()
        .unwrap();
    let used = out
        .stderr
        .lines()
        .find_map(|l| l.split("SSL connection using ").nth(1))
        .unwrap_or_default()
        .to_owned();
    (code, out.stdout[..split].to_vec(), used)
}

/// A certificate's config, RTSPS on a free port.
pub(crate) fn https_only(dir: &std::path::Path) -> String {
    format!("{}rtsps_port = 0\n", certificate(dir))
}

pub(crate) fn md5_hex(bytes: &[u8]) -> String {
    let sum = md5::Md5::digest(bytes);
    sum.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn https_each_cipher_in_the_clients_order_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = Server::start_http(&https_only(dir.path()));
    let url = format!("https://127.0.0.1:{port}/clip.ts");
    let cases = [
        (
            "TLS_AES_256_GCM_SHA384",
            false,
            "TLSv1.3 / TLS_AES_256_GCM_SHA384",
        ),
        (
            "TLS_AES_128_GCM_SHA256",
            false,
            "TLSv1.3 / TLS_AES_128_GCM_SHA256",
        ),
        (
            "TLS_CHACHA20_POLY1305_SHA256",
            false,
            "TLSv1.3 / TLS_CHACHA20_POLY1305_SHA256",
        ),
        // The client's first choice is taken, whichever it is.
        (
            "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384",
            false,
            "TLS_CHACHA20",
        ),
        (
            "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256",
            false,
            "TLS_AES_256",
        ),
        (
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            true,
            "TLSv1.2 / ECDHE-ECDSA-CHACHA20-POLY1305",
        ),
        (
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            true,
            "TLSv1.2 / ECDHE-ECDSA-AES256-GCM-SHA384",
        ),
    ];
    let clip = clip_bytes();
    for (suites, tls12, expect) in cases {
        let (code, body, used) = curl_suite(&url, suites, tls12, &[]);
        assert_eq!(code, 200, "{suites}");
        assert!(used.contains(expect), "{suites}: used {used:?}");
        assert_eq!(md5_hex(&body), md5_hex(clip), "{suites}: bit-exact");
        // A range across several records.
        let (code, body, _) = curl_suite(&url, suites, tls12, &["-r", "1000-70000"]);
        assert_eq!((code, md5_hex(&body)), (206, md5_hex(&clip[1000..70001])));
    }
    // Each connection went the way this kernel allows: its keys to the
    // kernel (kTLS) where it takes them, sealed in user space where not.
    let (encryption, other) = expected_encryption();
    let connections = 2 * cases.len() as u64;
    let count = |e| https_connections(&server, e);
    assert_eq!(count(encryption), connections, "{encryption}");
    assert_eq!((count(other), count("kernel_failed")), (0, 0), "{other}");
}

/// The encryption HTTPS connections get on this kernel (`kernel` where it
/// takes TLS keys, else `user`), and the other.
pub(crate) fn expected_encryption() -> (&'static str, &'static str) {
    match kernel_takes_tls_keys() {
        true => ("kernel", "user"),
        false => ("user", "kernel"),
    }
}

/// `fjord_https_connections_total` of `encryption`.
pub(crate) fn https_connections(server: &Server, encryption: &str) -> u64 {
    connections(server, "https", encryption)
}

/// `fjord_{protocol}_connections_total` of `encryption`.
fn connections(server: &Server, protocol: &str, encryption: &str) -> u64 {
    let (metrics, _) = crate::common::curl(&[&format!("{}/metrics", server.admin())]);
    let name = format!("fjord_{protocol}_connections_total{{encryption=\"{encryption}\"}} ");
    (metrics.lines())
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0, |n| n.trim().parse::<u64>().unwrap())
}

/// Whether this kernel takes TLS keys: the `tls` ULP set on a loopback
/// connection (Python, apart from fjord's own probe).
pub(crate) fn kernel_takes_tls_keys() -> bool {
    let probe = "import socket\n\
        l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen()\n\
        c = socket.create_connection(l.getsockname())\n\
        c.setsockopt(socket.IPPROTO_TCP, 31, b'tls')  # TCP_ULP";
    let out = std::process::Command::new("python3")
        .args(["-c", probe])
        .output()
        .expect("python3");
    out.status.success()
}

/// Runs `tls_clients.py MODE PORT PATH`, its JSON line.
pub(crate) fn python_client(mode: &str, port: u16, path: &str) -> serde_json::Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/tls_clients.py");
    let mut c = Command::new("python3");
    c.arg(script).args([mode, &port.to_string(), path]);
    let out = run_bounded(c, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "tls_clients.py {mode}: {}",
        out.stderr
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_resumed_tls_session_downloads_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = Server::start_http(&https_only(dir.path()));
    let runs = python_client("resume", port, "clip.ts");
    let want = md5_hex(clip_bytes());
    for (i, run) in runs.as_array().unwrap().iter().enumerate() {
        assert_eq!(run["status"], "HTTP/1.1 200 OK", "{run}");
        assert_eq!(run["md5"], want.as_str(), "connection {i} bit-exact: {run}");
    }
    assert_eq!(runs[0]["reused"], false, "{runs}");
    assert_eq!(
        runs[1]["reused"], true,
        "the second connection resumed: {runs}"
    );
}

/// `clip.ts` and `big.ts`, that clip repeated to about 32 MB.
pub(crate) fn with_big_title(root: &std::path::Path) -> Vec<u8> {
    let clip = clip_bytes();
    let big: Vec<u8> = std::iter::repeat_n(clip, (32 << 20) / clip.len() + 1)
        .flatten()
        .copied()
        .collect();
    std::fs::write(root.join("clip.ts"), clip).unwrap();
    std::fs::write(root.join("big.ts"), &big).unwrap();
    big
}

#[test]
fn clients_stalling_mid_record_or_forging_a_record_are_dropped_others_unharmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = Vec::new();
    let config = format!("{}idle_timeout_s = 2\n", https_only(dir.path()));
    let (mut server, port) = Server::start_http_with(&config, |root| big = with_big_title(root));
    let url = format!("https://127.0.0.1:{port}/big.ts");
    // A slow download (about 8 s) spans the misbehaving clients.
    let slow = std::thread::spawn(move || {
        curl_suite(
            &url,
            "TLS_AES_256_GCM_SHA384",
            false,
            &["--limit-rate", "4M"],
        )
    });
    let stalled = python_client("stall", port, "clip.ts");
    let secs = stalled["closed_after_s"].as_f64().unwrap();
    assert!((1.5..10.0).contains(&secs), "stalled mid-record: {stalled}");
    let forged = python_client("garbage", port, "clip.ts");
    assert!(
        forged["closed_after_s"].as_f64().unwrap() < 1.5,
        "a forged record ends its connection at once: {forged}"
    );
    let (code, body, _) = slow.join().unwrap();
    assert_eq!(
        (code, md5_hex(&body)),
        (200, md5_hex(&big)),
        "the other download"
    );
    server.assert_healthy();
}

/// HLS and DASH over HTTPS: every fragmented-MP4 segment of an MP4 title,
/// and every byte-range segment of a TS title, is over TLS what it is
/// over plain HTTP on the same port (whose segments `http.rs` checks
/// against the file); ffprobe reads both playlists over HTTPS.
#[test]
fn hls_and_dash_segments_over_https_are_those_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = Server::start_http(&https_only(dir.path()));
    crate::http::remux(&server, &["-c", "copy", "-f", "mp4"], "clip.mp4");
    let get = |scheme: &str, path: &str, range: Option<&str>| {
        let url = format!("{scheme}://127.0.0.1:{port}/{path}");
        let mut args = Vec::new();
        if let Some(r) = range {
            args.extend(["-r", r]);
        }
        args.push(&url);
        let (code, body) = curl(&args);
        assert!(code == 200 || code == 206, "{url}: {code}");
        body
    };
    let playlist = String::from_utf8(get("http", "clip.mp4/media.m3u8", None)).unwrap();
    let segments: Vec<&str> = std::iter::once("init.mp4")
        .chain(playlist.lines().filter(|l| l.ends_with(".m4s")))
        .collect();
    assert!(segments.len() >= 3, "{playlist}");
    for seg in segments {
        let path = format!("clip.mp4/{seg}");
        let plain = get("http", &path, None);
        assert_eq!(
            md5_hex(&get("https", &path, None)),
            md5_hex(&plain),
            "{seg}"
        );
    }
    let playlist = String::from_utf8(get("http", "clip.ts/media.m3u8", None)).unwrap();
    let ranges: Vec<String> = playlist
        .lines()
        .filter_map(|l| l.strip_prefix("#EXT-X-BYTERANGE:"))
        .filter_map(|r| {
            let (len, at) = r.split_once('@')?;
            let (len, at): (u64, u64) = (len.parse().ok()?, at.parse().ok()?);
            Some(format!("{at}-{}", at + len - 1))
        })
        .collect();
    assert!(ranges.len() >= 2, "{playlist}");
    for r in &ranges {
        let (from, to) = r.split_once('-').unwrap();
        let want = &clip_bytes()[from.parse::<usize>().unwrap()..=to.parse::<usize>().unwrap()];
        assert_eq!(
            md5_hex(&get("https", "clip.ts", Some(r))),
            md5_hex(want),
            "{r}"
        );
    }
    for manifest in [
        "clip.mp4/index.m3u8",
        "clip.mp4/manifest.mpd",
        "clip.ts/index.m3u8",
    ] {
        let mut probe = Command::new("ffprobe");
        probe
            .args(["-v", "error", "-show_entries", "stream=codec_name"])
            .args(["-of", "default=nw=1"])
            .arg(format!("https://127.0.0.1:{port}/{manifest}"));
        let out = run_bounded(probe, Duration::from_secs(30));
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            said.contains("codec_name=h264") && said.contains("codec_name=aac"),
            "{manifest} over HTTPS: {said} {}",
            out.stderr
        );
    }
}

/// SETUP (interleaved) and PLAY over RTSPS on a connection with a small
/// receive buffer, then nothing more is read from it.
fn stalled_tls_reader(server: &Server, track: &str, control: &str) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let url = server.rtsps_url("");
    let addr: std::net::SocketAddr = url["rtsps://".len()..]
        .trim_end_matches('/')
        .parse()
        .unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s =
        fjord_client::tls::stream(sock.into(), "127.0.0.1", Duration::from_secs(10)).unwrap();
    let head = |s: &mut dyn Read| {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut byte).unwrap(), 1, "reply cut short");
            got.push(byte[0]);
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    let setup = format!(
        "SETUP {track} RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n"
    );
    s.write_all(setup.as_bytes()).unwrap();
    let reply = head(&mut s);
    assert!(reply.starts_with("RTSP/1.0 200"), "{reply}");
    let session = (reply.lines())
        .find_map(|l| l.strip_prefix("Session: "))
        .and_then(|v| v.split(';').next())
        .expect("Session header")
        .to_string();
    let play = format!("PLAY {control} RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n\r\n");
    s.write_all(play.as_bytes()).unwrap();
    let reply = head(&mut s);
    assert!(reply.starts_with("RTSP/1.0 200"), "{reply}");
    s.sock
}

/// RTSPS clients that stop reading after PLAY are dropped after
/// `stall_timeout_s` (the engine seals their frames and sees their queue
/// full), while an RTSPS player beside them gets the whole title, in
/// order and bit-exact, at its pace.
#[test]
fn a_stalled_rtsps_client_does_not_delay_others() {
    use fjord_client::{PacketSource, RtspClient, capture};
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{}stall_timeout_s = 2\n", https_only(dir.path()));
    let (mut server, _) = Server::start_http(&config);
    let mut player = RtspClient::connect(&server.rtsps_url("clip.ts")).unwrap();
    let d = player.describe().expect("DESCRIBE over TLS");
    let track = d.track_urls.first().expect("a media section").clone();
    let duration = d.duration.expect("a duration");
    let control = player.control_url().to_string();
    let stalled: Vec<_> = (0..5)
        .map(|_| stalled_tls_reader(&server, &track, &control))
        .collect();
    player.setup_tcp(&track).expect("SETUP interleaved");
    player.play(None).expect("PLAY");
    let t0 = std::time::Instant::now();
    let source: &mut dyn PacketSource = &mut player;
    let cap = capture(
        source,
        Duration::from_secs(3),
        Duration::from_secs(40),
        None,
    )
    .unwrap();
    let src = clip_bytes();
    let (_, end) = crate::common::assert_contiguous(src, &cap.packets, "the RTSPS player");
    assert_eq!(end, src.len(), "the player got the whole title");
    let took = t0.elapsed().as_secs_f64();
    assert!(
        took < duration + 5.0,
        "{took:.1} s for {duration:.1} s of title"
    );
    for (i, mut s) in stalled.into_iter().enumerate() {
        let (_, closed) = crate::common::read_until_close(&mut s, Duration::from_secs(2));
        assert!(closed, "stalled client {i} still connected");
    }
    let log = server.log_text();
    assert_eq!(log.matches("took no data for").count(), 5, "{log}");
    // Sealed by the kernel where it takes the keys (kTLS), the engine's
    // interleaved RTP too; by rustls where not.
    let (encryption, other) = expected_encryption();
    let count = |e| connections(&server, "rtsps", e);
    assert_eq!((count(encryption), count(other)), (6, 0), "{encryption}");
    server.assert_healthy();
}

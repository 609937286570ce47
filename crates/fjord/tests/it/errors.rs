//! Bad input gets the right status, never crashes the server, and leaves it
//! serving others.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fjord_client::{RtspClient, capture};

use crate::common::{Server, media, raw_exchange, read_until_close, status_of};

const T: Duration = Duration::from_secs(5);

/// One request on a fresh connection; its status.
fn status(server: &Server, request: &str) -> u16 {
    let (text, _) = raw_exchange(&server.addr(), request.as_bytes(), Duration::from_secs(3));
    status_of(&text).unwrap_or_else(|| panic!("no RTSP response to {request:?}: {text:?}"))
}

fn describe(server: &Server, path: &str) -> u16 {
    status(
        server,
        &format!(
            "DESCRIBE rtsp://127.0.0.1:{}{path} RTSP/1.0\r\nCSeq: 1\r\n\r\n",
            server.port
        ),
    )
}

#[test]
fn malformed_request_line_is_400() {
    let mut s = Server::start("");
    assert_eq!(status(&s, "HELLO\r\n\r\n"), 400);
    assert_eq!(
        status(
            &s,
            "DESCRIBE rtsp://x/clip.ts RTSP/1.0\r\nno colon here\r\n\r\n"
        ),
        400
    );
    s.assert_healthy();
}

#[test]
fn unknown_method_is_501() {
    let mut s = Server::start("");
    assert_eq!(
        status(
            &s,
            &format!(
                "FROBNICATE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n",
                s.url("clip.ts")
            )
        ),
        501
    );
    s.assert_healthy();
}

#[test]
fn unknown_title_is_404() {
    let mut s = Server::start("");
    assert_eq!(describe(&s, "/nope.ts"), 404);
    assert_eq!(describe(&s, "/"), 404);
    s.assert_healthy();
}

#[test]
fn a_file_that_is_not_media_is_415_with_the_reason() {
    let mut s = Server::start("");
    let media_root = s.media_root();
    std::fs::write(media_root.join("notes.txt"), "just words\n".repeat(100)).unwrap();
    let request = format!(
        "DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n",
        s.url("notes.txt")
    );
    let (text, _) = raw_exchange(&s.addr(), request.as_bytes(), Duration::from_secs(3));
    assert_eq!(status_of(&text), Some(415), "{text}");
    assert!(text.contains("not a media file fjord can serve"), "{text}");
    let root = media_root.canonicalize().unwrap();
    assert!(
        !text.contains(root.to_str().unwrap()) && !text.contains("/tmp/"),
        "no local path in what a client is told: {text}"
    );
    // Nothing was written beside it.
    assert!(!media_root.join("notes.txt.fjidx").exists());
    s.assert_healthy();
}

#[test]
fn indexes_and_hidden_files_are_not_titles() {
    let mut s = Server::start("");
    s.assert_healthy();
    assert!(s.media_root().join("clip.ts.fjidx").exists());
    assert_eq!(describe(&s, "/clip.ts.fjidx"), 404);
    std::fs::copy(&media().clip, s.media_root().join(".hidden.ts")).unwrap();
    assert_eq!(describe(&s, "/.hidden.ts"), 404);
    s.assert_healthy();
}

#[test]
fn dot_dot_is_404() {
    let mut s = Server::start("");
    std::fs::copy(&media().clip, s.root.path().join("outside.ts")).unwrap();
    assert_eq!(describe(&s, "/../outside.ts"), 404);
    assert_eq!(describe(&s, "/sub/../../outside.ts"), 404);
    s.assert_healthy();
}

#[test]
fn encoded_dot_dot_is_404() {
    let mut s = Server::start("");
    std::fs::copy(&media().clip, s.root.path().join("outside.ts")).unwrap();
    assert_eq!(describe(&s, "/%2e%2e/outside.ts"), 404);
    assert_eq!(describe(&s, "/%2E%2E%2Foutside.ts"), 404);
    assert_eq!(describe(&s, "/..%2foutside.ts"), 404);
    s.assert_healthy();
}

#[test]
fn absolute_path_is_404() {
    let mut s = Server::start("");
    let outside = s.root.path().join("outside.ts");
    std::fs::copy(&media().clip, &outside).unwrap();
    assert_eq!(describe(&s, &format!("/{}", outside.display())), 404);
    assert_eq!(
        status(
            &s,
            &format!("DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n", outside.display())
        ),
        404
    );
    s.assert_healthy();
}

#[test]
fn symlink_out_of_root_is_404() {
    let mut s = Server::start("");
    let outside = s.root.path().join("outside.ts");
    std::fs::copy(&media().clip, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, s.media_root().join("link.ts")).unwrap();
    std::os::unix::fs::symlink(s.root.path(), s.media_root().join("up")).unwrap();
    assert_eq!(describe(&s, "/link.ts"), 404);
    assert_eq!(describe(&s, "/up/outside.ts"), 404);
    s.assert_healthy();
}

#[test]
fn oversize_header_is_400_and_closed() {
    let mut s = Server::start("max_header_bytes = 16384\n");
    let mut req = format!("DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n", s.url("clip.ts"));
    while req.len() < 17_000 {
        req.push_str("X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    let (text, closed) = raw_exchange(&s.addr(), req.as_bytes(), T);
    assert_eq!(status_of(&text), Some(400), "{text:?}");
    assert!(closed, "connection closed after an oversize header");
    s.assert_healthy();
}

#[test]
fn oversize_body_is_413_and_closed() {
    let mut s = Server::start("max_body_bytes = 65536\n");
    let req = format!(
        "SET_PARAMETER {} RTSP/1.0\r\nCSeq: 1\r\nContent-Type: text/parameters\r\nContent-Length: 100000\r\n\r\n",
        s.url("clip.ts")
    );
    let (text, closed) = raw_exchange(&s.addr(), req.as_bytes(), T);
    assert_eq!(status_of(&text), Some(413), "{text:?}");
    assert!(closed, "connection closed after an oversize body");
    s.assert_healthy();
}

#[test]
fn unknown_session_is_454() {
    let mut s = Server::start("");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let url = s.url("clip.ts");
    for m in ["PLAY", "PAUSE", "TEARDOWN", "GET_PARAMETER"] {
        let r = c.request(m, &url, &[("Session", "12345678")], &[]).unwrap();
        assert_eq!(r.status, 454, "{m} with an unknown session");
    }
    s.assert_healthy();
}

#[test]
fn play_before_setup_is_455_and_after_teardown_454() {
    let mut s = Server::start("");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    c.describe().unwrap();
    let url = s.url("clip.ts");
    let r = c.request("PLAY", &url, &[], &[]).unwrap();
    assert_eq!(r.status, 455, "PLAY before SETUP (no session yet)");
    // ... and after TEARDOWN the session is gone.
    let d = c.describe().unwrap();
    let session = c.setup_tcp(&d.track_urls[0]).unwrap();
    c.teardown().unwrap();
    let r = c
        .request("PLAY", &url, &[("Session", &session.id)], &[])
        .unwrap();
    assert_eq!(r.status, 454, "PLAY after TEARDOWN");
    s.assert_healthy();
}

#[test]
fn rtsp_2_is_505() {
    let mut s = Server::start("");
    assert_eq!(status(&s, "OPTIONS * RTSP/2.0\r\nCSeq: 1\r\n\r\n"), 505);
    s.assert_healthy();
}

#[test]
fn foreign_destination_is_403_unless_allowed() {
    let mut s = Server::start("");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let d = c.describe().unwrap();
    let t = "RTP/AVP;unicast;destination=10.1.2.3;client_port=40000-40001";
    let r = c
        .request("SETUP", &d.track_urls[0], &[("Transport", t)], &[])
        .unwrap();
    assert_eq!(r.status, 403);
    // Our own address is fine.
    let t = "RTP/AVP;unicast;destination=127.0.0.1;client_port=40000-40001";
    let r = c
        .request("SETUP", &d.track_urls[0], &[("Transport", t)], &[])
        .unwrap();
    assert_eq!(r.status, 200, "destination = own address");
    s.assert_healthy();

    let mut s = Server::start("destination_allow = [\"127.0.0.0/8\"]\n");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let d = c.describe().unwrap();
    let t = "RTP/AVP;unicast;destination=127.0.0.2;client_port=40000-40001";
    let r = c
        .request("SETUP", &d.track_urls[0], &[("Transport", t)], &[])
        .unwrap();
    assert_eq!(r.status, 200, "destination in destination_allow");
    let t = "RTP/AVP;unicast;destination=10.1.2.3;client_port=40000-40001";
    let r = c
        .request("SETUP", &d.track_urls[0], &[("Transport", t)], &[])
        .unwrap();
    assert_eq!(r.status, 403, "destination outside destination_allow");
    s.assert_healthy();
}

#[test]
fn idle_client_is_dropped() {
    let mut s = Server::start("idle_timeout_s = 2\nrequest_timeout_s = 1\n");
    let mut c = TcpStream::connect(s.addr()).unwrap();
    let t0 = Instant::now();
    let (_, closed) = read_until_close(&mut c, Duration::from_secs(6));
    assert!(closed, "silent connection still open after 6 s");
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "dropped too early"
    );
    s.assert_healthy();
}

#[test]
fn half_request_then_silence_is_dropped() {
    let mut s = Server::start("request_timeout_s = 1\n");
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.write_all(b"DESCRIBE rtsp://127.0.0.1/clip.ts RTSP/1.0\r\nCSeq: 1\r\n")
        .unwrap();
    let t0 = Instant::now();
    let (_, closed) = read_until_close(&mut c, Duration::from_secs(4));
    assert!(closed, "incomplete request still open after 4 s");
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "dropped too early"
    );
    s.assert_healthy();
}

#[test]
fn trickling_client_is_dropped() {
    let mut s = Server::start("request_timeout_s = 1\n");
    let mut c = TcpStream::connect(s.addr()).unwrap();
    let req = format!(
        "DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\nX-Slow: ",
        s.url("clip.ts")
    );
    let t0 = Instant::now();
    let mut closed_at = None;
    for b in req.bytes().chain(std::iter::repeat(b'a')) {
        if c.write_all(&[b]).is_err() {
            closed_at = Some(t0.elapsed());
            break;
        }
        let (_, closed) = read_until_close(&mut c, Duration::from_millis(100));
        if closed {
            closed_at = Some(t0.elapsed());
            break;
        }
        if t0.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    let at = closed_at.expect("a client sending a byte every 100 ms was never dropped");
    assert!(at < Duration::from_secs(3), "dropped only after {at:?}");
    s.assert_healthy();
}

#[test]
fn silent_session_times_out() {
    let mut s = Server::start("session_timeout_s = 2\n");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let d = c.describe().unwrap();
    let (session, mut rx) = c.setup_udp(&d.track_urls[0]).unwrap();
    c.play(None).unwrap();
    let t0 = Instant::now();
    // Neither RTSP nor RTCP from us from now on; keep receiving.
    let cap = capture(
        &mut rx,
        Duration::from_secs(1),
        Duration::from_secs(8),
        None,
    )
    .unwrap();
    let last = cap
        .packets
        .last()
        .expect("packets before the timeout")
        .arrival;
    let lasted = last.duration_since(t0);
    assert!(
        lasted >= Duration::from_millis(1500) && lasted <= Duration::from_millis(4500),
        "packets flowed for {lasted:?} with session_timeout_s = 2"
    );
    assert!(
        cap.packets.len() > 10,
        "only {} packets before the timeout",
        cap.packets.len()
    );
    // The id is gone, asked on a fresh connection (the server may close
    // the old one once it has no session left).
    let mut c2 = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let r = c2
        .request(
            "GET_PARAMETER",
            &s.url("clip.ts"),
            &[("Session", &session.id)],
            &[],
        )
        .unwrap();
    assert_eq!(r.status, 454, "timed-out session id");
    s.assert_healthy();
}

/// A player's connection stays open while its session lives, even past
/// the idle timeout, and closes once the session has timed out.
#[test]
fn connection_closes_after_its_session_times_out() {
    let mut s = Server::start("session_timeout_s = 2\nidle_timeout_s = 1\n");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let d = c.describe().unwrap();
    let _udp = c.setup_udp(&d.track_urls[0]).unwrap();
    c.play(None).unwrap();
    let t0 = Instant::now();
    c.set_timeout(Duration::from_secs(10));
    let r = c.read_any_response();
    let closed = t0.elapsed();
    assert!(r.is_err(), "the server sent something unasked: {r:?}");
    assert!(
        closed >= Duration::from_millis(1500) && closed < Duration::from_secs(6),
        "connection closed {closed:?} after PLAY with session_timeout_s = 2"
    );
    s.assert_healthy();
}

#[test]
fn keepalive_holds_a_session_past_its_timeout() {
    let mut s = Server::start("session_timeout_s = 2\n");
    let mut c = RtspClient::connect(&s.url("clip.ts")).unwrap();
    let d = c.describe().unwrap();
    let (_session, mut rx) = c.setup_udp(&d.track_urls[0]).unwrap();
    c.play(None).unwrap();
    c.pause().unwrap();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_secs(1));
        c.keepalive().expect("GET_PARAMETER keepalive");
    }
    let r = c.play(None).expect("resume after 4 s of keepalives");
    assert!(!r.rtp_info.is_empty());
    let cap = capture(
        &mut rx,
        Duration::from_secs(1),
        Duration::from_secs(2),
        Some(20),
    )
    .unwrap();
    assert!(!cap.packets.is_empty(), "packets after resume");
    c.teardown().unwrap();
    s.assert_healthy();
}

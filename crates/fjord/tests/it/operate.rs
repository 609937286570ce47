//! What an operator and a service manager do to a running server: SIGTERM
//! ends every session with RTCP BYE and exits 0 in bounded time; SIGHUP
//! re-reads the config while a session plays on; the systemd notify
//! protocol (READY, RELOADING, STOPPING) as contrib/fjord.service expects.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use fjord_client::{EndReason, RtspClient};

use crate::client::{LIMIT, QUIET, open, recv};
use crate::common::{Server, assert_contiguous, clip_bytes, raw_exchange};

/// Sessions playing over UDP and TCP and one paused: after SIGTERM each
/// client gets RTCP BYE, and the server exits 0 within 5 s.
#[test]
fn sigterm_ends_every_session_with_bye_and_exits_0() {
    let mut server = Server::start("");
    let (mut udp, mut udp_rx, _) = open(&server, "clip.ts", false);
    let (mut tcp, mut tcp_rx, _) = open(&server, "clip.ts", true);
    let (mut paused, mut paused_rx, _) = open(&server, "clip.ts", false);
    for c in [&mut udp, &mut tcp, &mut paused] {
        c.play(None).expect("PLAY");
    }
    let url = paused.control_url().to_string();
    assert_eq!(paused.request("PAUSE", &url, &[], b"").unwrap().status, 200);
    std::thread::sleep(Duration::from_millis(800));
    let t = Instant::now();
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(5));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?} after {:?}; log:\n{}",
        t.elapsed(),
        server.log_text()
    );
    for (what, c, rx) in [
        ("udp", &mut udp, &mut udp_rx),
        ("tcp", &mut tcp, &mut tcp_rx),
        ("paused", &mut paused, &mut paused_rx),
    ] {
        let cap = recv(c, rx, QUIET, LIMIT);
        assert_eq!(
            cap.end,
            EndReason::Bye,
            "{what}: {} packets",
            cap.packets.len()
        );
        if what != "paused" {
            assert_contiguous(clip_bytes(), &cap.packets, what);
        }
    }
}

/// SIGHUP raises `max_sessions` from 1 to 2 while the one session plays:
/// a second SETUP, refused before, succeeds; the first session receives
/// the whole title. An invalid file changes nothing; a setting fixed at
/// start is kept, with a warning.
#[test]
fn sighup_reloads_limits_while_a_session_plays_on() {
    let server = Server::start("max_sessions = 1\n");
    let (mut c, mut rx, _) = open(&server, "clip.ts", false);
    c.play(None).expect("PLAY");
    assert_eq!(server.setup_status(), 453, "one session at most");
    let reload = |text: &str, logged: &str| {
        std::fs::write(server.config_path(), text).unwrap();
        server.signal("HUP");
        server.wait_for_log(logged, Duration::from_secs(5));
    };
    reload("max_sessions = 0\n", "config not reloaded");
    assert_eq!(server.setup_status(), 453, "the running config stays");
    reload("max_sessions = 2\nthreads = 7\n", "config reloaded");
    assert!(server.log_text().contains("change only at a restart"));
    assert_eq!(server.setup_status(), 200, "two sessions now");
    let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
    assert_eq!(cap.end, EndReason::Bye);
    let (start, end) = assert_contiguous(clip_bytes(), &cap.packets, "through the reload");
    assert_eq!((start, end), (0, clip_bytes().len()), "the whole title");
}

/// The notify protocol of `Type=notify-reload`: READY=1 once listening;
/// RELOADING=1 with MONOTONIC_USEC, then READY=1, on SIGHUP; STOPPING=1 on
/// SIGTERM.
#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut server = Server::start_env("", &[("NOTIFY_SOCKET", &path)], |root| {
        std::fs::copy(&crate::common::media().clip, root.join("clip.ts")).unwrap();
    });
    let next = || {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("a notification within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert!(next().starts_with("READY=1\n"), "READY first");
    server.signal("HUP");
    let reloading = next();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert!(next().starts_with("READY=1\n"), "READY after the reload");
    server.signal("TERM");
    assert_eq!(next(), "STOPPING=1\n");
    assert!(
        server
            .wait_exit(Duration::from_secs(5))
            .is_some_and(|s| s.success())
    );
}

/// The access log has a line per request, RTSP and HTTP, with the peer,
/// method, target and status; `access_log = false` has none.
#[test]
fn every_request_has_an_access_log_line_unless_turned_off() {
    for on in [true, false] {
        let (server, port) = Server::start_http(&format!("access_log = {on}\n"));
        let mut c = RtspClient::connect(&server.url("clip.ts")).unwrap();
        c.describe().expect("DESCRIBE");
        let missing = server.url("missing.ts");
        assert_eq!(
            c.request("DESCRIBE", &missing, &[], b"").unwrap().status,
            404
        );
        let head = b"HEAD /clip.ts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let http = format!("127.0.0.1:{port}");
        let (reply, _) = raw_exchange(&http, head, Duration::from_secs(5));
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        std::thread::sleep(Duration::from_millis(200));
        let log = server.log_text();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("fjord::access"))
            .collect();
        if !on {
            assert!(lines.is_empty(), "{lines:?}");
            continue;
        }
        let has = |parts: &[&str]| lines.iter().any(|l| parts.iter().all(|p| l.contains(p)));
        assert!(
            has(&[
                "rtsp",
                "peer=127.0.0.1:",
                "method=\"DESCRIBE\"",
                "/clip.ts",
                "status=200"
            ]),
            "{lines:?}"
        );
        assert!(
            has(&["method=\"DESCRIBE\"", "/missing.ts", "status=404"]),
            "{lines:?}"
        );
        assert!(
            has(&[
                "http",
                "method=\"HEAD\"",
                "target=\"/clip.ts\"",
                "status=200"
            ]),
            "{lines:?}"
        );
    }
}

//! Clients that stop reading: a client playing over TCP (interleaved) that
//! never reads after PLAY is dropped after `stall_timeout_s`, and the
//! other sessions play on.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fjord_client::{PacketSource, RtspClient, capture};
use socket2::{Domain, Socket, Type};

use crate::common::{Server, assert_contiguous, clip_bytes, read_until_close};

/// Reads one RTSP reply's head (frames may follow; they stay unread).
fn reply_head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "reply cut short");
        got.push(byte[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// SETUP (interleaved) and PLAY of `track` on a connection with a small
/// receive buffer, then nothing more is read from it.
fn stalled_reader(server: &Server, track: &str, control: &str) -> TcpStream {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let addr: std::net::SocketAddr = server.addr().parse().unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let setup = format!(
        "SETUP {track} RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n"
    );
    s.write_all(setup.as_bytes()).unwrap();
    let head = reply_head(&mut s);
    assert!(head.starts_with("RTSP/1.0 200"), "{head}");
    let session = head
        .lines()
        .find_map(|l| l.strip_prefix("Session: "))
        .and_then(|v| v.split(';').next())
        .expect("Session header")
        .to_string();
    let play = format!("PLAY {control} RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n\r\n");
    s.write_all(play.as_bytes()).unwrap();
    let head = reply_head(&mut s);
    assert!(head.starts_with("RTSP/1.0 200"), "{head}");
    s
}

#[test]
fn clients_that_stop_reading_are_dropped_and_the_others_play_on() {
    let mut server = Server::start("stall_timeout_s = 2\n");
    let mut player = RtspClient::connect(&server.url("clip.ts")).unwrap();
    let d = player.describe().expect("DESCRIBE");
    let track = d.track_urls.first().expect("a media section").clone();
    let control = player.control_url().to_string();
    let stalled: Vec<TcpStream> = (0..20)
        .map(|_| stalled_reader(&server, &track, &control))
        .collect();
    let (_, mut rx) = player.setup_udp(&track).expect("SETUP");
    player.play(None).expect("PLAY");
    let t0 = Instant::now();
    let source: &mut dyn PacketSource = &mut rx;
    let cap = capture(
        source,
        Duration::from_secs(3),
        Duration::from_secs(30),
        None,
    )
    .unwrap();
    let src = clip_bytes();
    let (_, end) = assert_contiguous(src, &cap.packets, "the player beside stalled readers");
    assert_eq!(end, src.len(), "the player got the whole title");
    assert!(t0.elapsed() < Duration::from_secs(20));
    // By now (10 s of play) every stalled client has been dropped: what
    // it reads is what was sent before, then the end of the connection.
    for (i, mut s) in stalled.into_iter().enumerate() {
        let (_, closed) = read_until_close(&mut s, Duration::from_secs(2));
        assert!(closed, "stalled client {i} still connected");
    }
    let log = server.log_text();
    assert_eq!(log.matches("took no data for").count(), 20, "{log}");
    server.assert_healthy();
}

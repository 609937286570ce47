//! 10,000 mutated publisher inputs to a running server (issue 36's test
//! list), from a fixed seed: ANNOUNCE requests whose SDP has bytes
//! flipped, inserted, cut off, a huge field or many tracks; then, for a
//! recorded stream published over TCP and one over UDP, RTP packets with
//! bytes flipped, cut short or grown (`$` frames on any channel, UDP
//! datagrams to the RTP and RTCP ports). The server stays up, its memory
//! within a bound, and a normal publisher and viewer still work.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, run_bounded, status_of};

const CONFIG: &str = "live_grace_s = 0\nlive_timeout_s = 30\nlive_record = [\"open/rec-*\"]\n\
[[user]]\npaths = [\"**\"]\npublish = [\"open/**\"]\n";

const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z0LAHtkDxWhAAAADAEAAAAwDxYuS,aMuMsg==\r\n\
a=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 opus/48000/2\r\na=control:streamid=1\r\n";

/// xorshift64*: a fixed seed, the same inputs every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// `base` with a few bytes flipped, inserted, cut off or grown.
fn mutate(r: &mut Rng, base: &[u8], grow_to: usize) -> Vec<u8> {
    let mut b = base.to_vec();
    match r.below(4) {
        0 => {
            for _ in 0..1 + r.below(8) {
                let at = r.below(b.len());
                b[at] ^= 1 << r.below(8);
            }
        }
        1 => b.truncate(r.below(b.len())),
        2 => {
            for _ in 0..1 + r.below(8) {
                let (at, v) = (r.below(b.len()), r.byte());
                b.insert(at, v);
            }
        }
        _ => {
            let n = r.below(grow_to);
            b.extend((0..n).map(|_| r.byte()));
        }
    }
    b
}

/// An SDP to ANNOUNCE: mutated, or with a huge field, or many tracks.
fn announce_body(r: &mut Rng) -> Vec<u8> {
    match r.below(6) {
        0 => format!("{SDP}a=x:{}\r\n", "A".repeat(r.below(100_000))).into_bytes(),
        1 => {
            let track = "m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n";
            format!("{SDP}{}", track.repeat(r.below(200))).into_bytes()
        }
        _ => mutate(r, SDP.as_bytes(), 64),
    }
}

/// Reads one reply (head and body) on `s`; its status, or `None` when
/// the connection ended first.
fn reply(s: &mut TcpStream) -> Option<u16> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = s.read(&mut buf).ok().filter(|n| *n > 0)?;
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..head_end]).into_owned();
    let len: usize = (head.lines())
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while got.len() < head_end + len {
        let n = s.read(&mut buf).ok().filter(|n| *n > 0)?;
        got.extend_from_slice(&buf[..n]);
    }
    status_of(&head)
}

fn connect(server: &Server) -> TcpStream {
    let s = TcpStream::connect(server.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn request(s: &mut TcpStream, head: &str, body: &[u8]) -> Option<u16> {
    let mut msg = format!("{head}Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    msg.extend_from_slice(body);
    s.write_all(&msg).ok()?;
    reply(s)
}

/// `n` mutated ANNOUNCEs; the statuses answered, by status.
fn announce_mutated(server: &Server, r: &mut Rng, n: usize) -> Vec<(u16, usize)> {
    let mut statuses: Vec<(u16, usize)> = Vec::new();
    let mut s = connect(server);
    for i in 0..n {
        let head = format!(
            "ANNOUNCE {} RTSP/1.0\r\nCSeq: {i}\r\nContent-Type: application/sdp\r\n",
            server.url(&format!("open/m{i}"))
        );
        let status = request(&mut s, &head, &announce_body(r)).unwrap_or(0);
        match statuses.iter_mut().find(|(st, _)| *st == status) {
            Some((_, k)) => *k += 1,
            None => statuses.push((status, 1)),
        }
        // A stream announced holds its path: a new connection lets it go.
        // A body refused unread (413) ends the connection.
        if matches!(status, 0 | 200 | 413) || status >= 500 {
            s = connect(server);
        }
    }
    statuses
}

/// ANNOUNCE, SETUP of both tracks (`transports`), RECORD at `path` on
/// `s`; the SETUP replies' `server_port`s.
fn publish(server: &Server, s: &mut TcpStream, path: &str, transports: [String; 2]) -> Vec<u16> {
    let url = server.url(path);
    let head = format!("ANNOUNCE {url} RTSP/1.0\r\nCSeq: 1\r\nContent-Type: application/sdp\r\n");
    assert_eq!(request(s, &head, SDP.as_bytes()), Some(200));
    let (mut session, mut ports) = (String::new(), Vec::new());
    for (k, t) in transports.iter().enumerate() {
        let sess = if session.is_empty() {
            String::new()
        } else {
            format!("Session: {session}\r\n")
        };
        let setup = format!(
            "SETUP {url}/streamid={k} RTSP/1.0\r\nCSeq: {}\r\n{sess}Transport: {t}\r\n\r\n",
            k + 2
        );
        s.write_all(setup.as_bytes()).unwrap();
        let mut got = vec![0u8; 4096];
        let n = s.read(&mut got).unwrap();
        let text = String::from_utf8_lossy(&got[..n]).into_owned();
        assert_eq!(status_of(&text), Some(200), "{text}");
        session = (text.lines().find_map(|l| l.strip_prefix("Session: ")))
            .and_then(|v| v.split(';').next())
            .unwrap()
            .to_owned();
        if let Some(p) = text.split("server_port=").nth(1) {
            ports.push(p.split(['-', ';', '\r']).next().unwrap().parse().unwrap());
        }
    }
    let record = format!("RECORD {url} RTSP/1.0\r\nCSeq: 9\r\nSession: {session}\r\n");
    assert_eq!(request(s, &record, b""), Some(200));
    ports
}

/// A well-formed packet of `track` to mutate: H.264 single NAL units,
/// STAP-A and FU-A, or Opus.
fn rtp(r: &mut Rng, track: usize, seq: u16) -> Vec<u8> {
    let mut p = vec![0x80, 96 + track as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    p[2..4].copy_from_slice(&seq.to_be_bytes());
    p[4..8].copy_from_slice(&(u32::from(seq / 4) * 3600).to_be_bytes());
    let payload: &[u8] = match (track, r.below(5)) {
        (1, _) => &[0xfc, 1, 2, 3],
        (_, 0) => &[0x65, 0x88, 0x84],
        (_, 1) => &[24, 0, 2, 0x67, 0x42, 0, 2, 0x68, 0xce],
        (_, 2) => &[0x7c, 0x85, 1, 2],
        (_, 3) => &[0x7c, 0x45, 3, 4],
        _ => &[0x41, 0x9a],
    };
    p.extend_from_slice(payload);
    if r.below(2) == 0 {
        p[1] |= 0x80;
    }
    mutate(r, &p, 1500)
}

/// The server's resident memory, in KiB.
fn rss_kib(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Two recorded streams (over TCP, over UDP) each sent half of `n`
/// mutated RTP packets; their connections, to end them.
fn rtp_mutated(server: &Server, r: &mut Rng, n: u16) -> [TcpStream; 2] {
    // Over TCP: `$` frames on the stream's channels and others.
    let mut tcp = connect(server);
    let interleaved = ["interleaved=0-1", "interleaved=2-3"]
        .map(|c| format!("RTP/AVP/TCP;unicast;{c};mode=record"));
    publish(server, &mut tcp, "open/rec-tcp", interleaved);
    // Over UDP, from the ports SETUP named.
    let sockets = [0, 1].map(|_| UdpSocket::bind("127.0.0.1:0").unwrap());
    let udp_transports = (sockets.each_ref())
        .map(|s| s.local_addr().unwrap().port())
        .map(|p| format!("RTP/AVP;unicast;client_port={p}-{};mode=record", p + 1));
    let mut control = connect(server);
    let server_ports = publish(server, &mut control, "open/rec-udp", udp_transports);
    assert_eq!(server_ports.len(), 2);
    for i in 0..n {
        let track = r.below(2);
        let p = rtp(r, track, i / 2);
        if i % 2 == 0 {
            let channel = match r.below(10) {
                0 => r.byte(),
                _ => 2 * track as u8 + u8::from(r.below(4) == 0),
            };
            let mut frame = vec![b'$', channel];
            frame.extend_from_slice(&(p.len() as u16).to_be_bytes());
            frame.extend_from_slice(&p);
            tcp.write_all(&frame).unwrap();
        } else {
            let port = server_ports[track] + u16::from(r.below(8) == 0);
            let _ = sockets[track].send_to(&p, ("127.0.0.1", port));
        }
    }
    [tcp, control]
}

/// ffmpeg publishes to `path` and another ffmpeg views 25 frames of it.
fn a_publisher_and_viewer_work(server: &Server, path: &str) {
    let url = server.url(path);
    let publish = "-nostdin -v error -re -f lavfi -i testsrc=size=160x120:rate=25 -t 6 \
        -c:v libx264 -preset ultrafast -g 25 -bf 0 -f rtsp";
    let mut publisher = Command::new("ffmpeg")
        .args(publish.split_whitespace())
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let needle = format!("live stream recording path=\"{path}\"");
    server.wait_for_log(&needle, Duration::from_secs(10));
    let mut viewer = Command::new("ffmpeg");
    viewer.args([
        "-nostdin",
        "-v",
        "error",
        "-rtsp_transport",
        "tcp",
        "-i",
        &url,
    ]);
    viewer.args(["-frames:v", "25", "-f", "null", "-"]);
    let out = run_bounded(viewer, Duration::from_secs(15));
    let _ = publisher.kill();
    let _ = publisher.wait();
    assert!(
        !out.timed_out && out.status.success(),
        "viewer: {}",
        out.stderr
    );
}

#[test]
fn ten_thousand_mutated_announces_and_rtp_packets_leave_the_server_up() {
    let mut server = Server::start(CONFIG);
    let mut r = Rng(0x3636_3636_3636_3636);
    let started = Instant::now();
    let rss_before = rss_kib(&server);
    let statuses = announce_mutated(&server, &mut r, 3000);
    // Each answered (0: none), none with a server error.
    assert!(
        statuses.iter().all(|(s, _)| *s > 0 && *s < 500),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().any(|(s, _)| *s == 413) && statuses.iter().any(|(s, _)| *s == 200),
        "{statuses:?}"
    );
    let publishers = rtp_mutated(&server, &mut r, 7000);
    std::thread::sleep(Duration::from_millis(500));
    server.assert_alive();
    let (rss_after, took) = (rss_kib(&server), started.elapsed());
    eprintln!(
        "10,000 inputs in {took:?}; RSS {rss_before} KiB, then {rss_after} KiB; {statuses:?}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    // The streams' memory is bounded by live_max_buffer_bytes and the
    // recorder's queue: well within 128 MiB more than at the start.
    assert!(
        rss_after < rss_before + 128 * 1024,
        "RSS {rss_before} KiB -> {rss_after} KiB"
    );
    // Closing the connections ends both streams (no grace) and their
    // recordings, which are then ingested as titles.
    drop(publishers);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.log_text().matches("live recording closed").count() < 2 {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = server.log_text();
    for l in log.lines().filter(|l| l.contains("recording closed")) {
        eprintln!("{l}");
    }
    a_publisher_and_viewer_work(&server, "open/after");
    server.assert_alive();
}

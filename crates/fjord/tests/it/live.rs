//! Live input (`docs/live.md`) against real peers: ffmpeg publishes over
//! UDP and over TCP; ffmpeg and GStreamer view the live path and receive
//! every frame from the key frame they join at (decoded frames compared by
//! MD5 with the published file's, from the join point on); publishing
//! needs a `publish` rule (401/403 otherwise, 405 on an open server); a
//! second publisher to a path in use is refused with the reason; a
//! publisher gone silent ends its stream; SDP limits answer 413/453. A
//! publisher killed and replaced within `live_grace_s` continues its
//! viewers' stream (ffmpeg decodes every frame of both; our own client sees
//! no sequence gap and a timestamp jump of the outage); past the grace, or
//! when the new publisher announces other media, the viewers get RTCP BYE.
//! A viewer silent (no request, no RTCP) for `session_timeout_s` is ended.
//! A viewer gets the publisher's sender reports relayed in its numbering.
//! Packets a publisher lost on the way in are counted in the admin API;
//! those it sent over UDP right behind its TEARDOWN reach its viewers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use md5::Digest;

use crate::common::{Server, generate_media, run_bounded, run_bounded_with, status_of, view_udp};

/// Connections idle for 4 s are closed, but not those of publishers
/// and viewers. Who publishes: `pub` to `live/**` (and reads everything), alice only
/// reads, anyone reads and may publish to `open/**`.
pub(crate) const USERS: &str = "live_timeout_s = 2\nidle_timeout_s = 4\n\
[[user]]\nname = \"pub\"\npassword = \"secret\"\npaths = [\"**\"]\npublish = [\"live/**\"]\n\
[[user]]\nname = \"alice\"\npassword = \"wonderland\"\npaths = [\"**\"]\n\
[[user]]\npaths = [\"**\"]\npublish = [\"open/**\"]\n";

/// 12 s of 320x240 H.264 (a key frame a second, no B-frames) and AAC:
/// long enough for a viewer that a loaded machine starts seconds late.
fn source() -> &'static std::path::Path {
    static SRC: OnceLock<std::path::PathBuf> = OnceLock::new();
    SRC.get_or_init(|| {
        let args = "-f lavfi -i testsrc=size=320x240:rate=25 -f lavfi -i sine=frequency=440:sample_rate=44100 \
            -t 12 -c:v libx264 -preset veryfast -g 25 -bf 0 -pix_fmt yuv420p -c:a aac -b:a 64k -f matroska";
        generate_media("live-source-12s.mkv", &args.split(' ').collect::<Vec<_>>())
    })
}

/// MD5 of each decoded video frame of `input` (a file or a URL), as
/// ffmpeg's framemd5 gives them.
pub(crate) fn decoded_md5s(input: &str, before: &[&str], limit: Duration) -> Vec<String> {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error"])
        .args(before)
        .args(["-i", input]);
    cmd.args(["-map", "0:v", "-pix_fmt", "yuv420p", "-f", "framemd5", "-"]);
    let out = run_bounded(cmd, limit);
    assert!(
        !out.timed_out && out.status.success(),
        "ffmpeg {input}: {}",
        out.stderr
    );
    md5_column(&String::from_utf8_lossy(&out.stdout))
}

fn md5_column(framemd5: &str) -> Vec<String> {
    (framemd5.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l.rsplit(',').next()?.trim().to_owned()))
        .collect()
}

fn source_md5s() -> &'static [String] {
    static MD5S: OnceLock<Vec<String>> = OnceLock::new();
    MD5S.get_or_init(|| decoded_md5s(source().to_str().unwrap(), &[], Duration::from_secs(60)))
}

/// `got` is a run of the source's frames starting at a key frame (every
/// 25th); at least `min` of them.
pub(crate) fn assert_every_frame_from_a_key_frame(got: &[String], min: usize, what: &str) {
    let src = source_md5s();
    assert!(got.len() >= min, "{what}: only {} frames", got.len());
    let at = src.iter().position(|m| *m == got[0]);
    let at = at.unwrap_or_else(|| panic!("{what}: the first frame is not one published"));
    assert_eq!(at % 25, 0, "{what}: joined at frame {at}, not a key frame");
    assert_eq!(
        &src[at..at + got.len()],
        got,
        "{what}: frames differ from the join at {at}"
    );
}

/// ffmpeg publishing the source in real time to `url` over `transport`.
pub(crate) fn publish(url: &str, transport: &str) -> Child {
    publish_with(url, transport, &[])
}

/// [`publish`] with output options `extra` (e.g. `-t 4`).
fn publish_with(url: &str, transport: &str, extra: &[&str]) -> Child {
    Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-re", "-i"])
        .arg(source())
        .args(extra)
        .args([
            "-c",
            "copy",
            "-f",
            "rtsp",
            "-rtsp_transport",
            transport,
            url,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub(crate) fn with(server: &Server, who: &str, path: &str) -> String {
    server
        .url(path)
        .replacen("rtsp://", &format!("rtsp://{who}@"), 1)
}

/// GStreamer's decoded frames of `url` (I420, 320x240), each one's MD5;
/// the audio track is set up and dropped.
fn gstreamer_md5s(url: &str, limit: Duration) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frames.yuv");
    let pipeline = format!(
        "rtspsrc location={url} protocols=tcp latency=200 name=src \
         src. ! application/x-rtp,media=video ! queue ! rtph264depay ! h264parse ! avdec_h264 ! \
         videoconvert ! video/x-raw,format=I420 ! filesink location={} \
         src. ! application/x-rtp,media=audio ! queue ! fakesink",
        out.display()
    );
    let mut cmd = Command::new("gst-launch-1.0");
    // Not quiet: when nothing arrives, its progress says how far it got.
    cmd.arg("-e").args(pipeline.split_whitespace());
    // Ends on the server's BYE; else interrupted (EOS, so filesink flushes).
    let run = run_bounded_with(cmd, limit, Some(limit - Duration::from_secs(2)));
    let frames = std::fs::read(&out).unwrap_or_default();
    assert!(
        !frames.is_empty(),
        "GStreamer got nothing: {}\n{}",
        String::from_utf8_lossy(&run.stdout),
        run.stderr
    );
    (frames.chunks_exact(320 * 240 * 3 / 2))
        .map(|f| {
            md5::Md5::digest(f)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .collect()
}

/// Publishes over `publisher`; ffmpeg views over the other transport and
/// GStreamer over TCP, both joining a second or more in.
fn publish_and_view(publisher: &str, viewer: &str) {
    let server = Server::start(USERS);
    let path = format!("live/{publisher}");
    let p = publish(&with(&server, "pub:secret", &path), publisher);
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1200));
    let url = server.url(&path);
    let gst = std::thread::spawn({
        let url = url.clone();
        move || gstreamer_md5s(&url, Duration::from_secs(14))
    });
    let got = decoded_md5s(&url, &["-rtsp_transport", viewer], Duration::from_secs(20));
    assert_every_frame_from_a_key_frame(
        &got,
        100,
        &format!("ffmpeg {viewer} of a {publisher} publisher"),
    );
    let gst = gst.join().unwrap();
    // GStreamer stops when its time is up, maybe before the stream ends.
    assert_every_frame_from_a_key_frame(&gst, 50, &format!("GStreamer of a {publisher} publisher"));
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "publisher: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The path is free again once the stream ended.
    server.wait_for_log("live stream ended: its publisher", Duration::from_secs(5));
    let mut again = publish(&with(&server, "pub:secret", &path), publisher);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.log_text().matches("live stream recording").count() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = again.kill();
    let _ = again.wait();
}

#[test]
fn ffmpeg_publishes_over_udp_and_ffmpeg_and_gstreamer_view_every_frame() {
    publish_and_view("udp", "tcp");
}

#[test]
fn ffmpeg_publishes_over_tcp_and_ffmpeg_and_gstreamer_view_every_frame() {
    publish_and_view("tcp", "udp");
}

/// One request on `s`, its reply text.
fn exchange(s: &mut TcpStream, text: &str) -> String {
    s.write_all(text.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

pub(crate) const SDP: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:streamid=0\r\n";

fn announce(server: &Server, path: &str, sdp: &str) -> String {
    format!(
        "ANNOUNCE {} RTSP/1.0\r\nCSeq: 1\r\nContent-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
        server.url(path),
        sdp.len()
    )
}

#[test]
fn publishing_needs_a_publish_rule() {
    let server = Server::start(USERS);
    // No credentials: challenged; a reader's: forbidden.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    assert_eq!(
        status_of(&exchange(&mut s, &announce(&server, "live/x", SDP))),
        Some(401)
    );
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-re", "-i"])
        .arg(source());
    cmd.args([
        "-t",
        "1",
        "-c",
        "copy",
        "-f",
        "rtsp",
        &with(&server, "alice:wonderland", "live/x"),
    ]);
    let out = run_bounded(cmd, Duration::from_secs(20));
    assert!(
        !out.status.success() && out.stderr.contains("403"),
        "{}",
        out.stderr
    );
    // An open server (no users, so no publish rule) takes no publisher.
    let open = Server::start("");
    let mut s = TcpStream::connect(open.addr()).unwrap();
    assert_eq!(
        status_of(&exchange(&mut s, &announce(&open, "live/x", SDP))),
        Some(405)
    );
}

#[test]
fn a_second_publisher_is_refused_and_a_silent_one_ends_its_stream() {
    // No grace: a silent publisher's stream ends at once.
    let server = Server::start(&format!(
        "live_grace_s = 0\nlive_max_sdp_bytes = 400\nlive_max_tracks = 1\n{USERS}"
    ));
    let mut first = TcpStream::connect(server.addr()).unwrap();
    let reply = exchange(&mut first, &announce(&server, "open/a", SDP));
    assert_eq!(status_of(&reply), Some(200), "{reply}");
    let setup = format!(
        "SETUP {}/streamid=0 RTSP/1.0\r\nCSeq: 2\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\r\n\r\n",
        server.url("open/a")
    );
    let reply = exchange(&mut first, &setup);
    assert_eq!(status_of(&reply), Some(200), "{reply}");
    let session = (reply.lines())
        .find_map(|l| l.strip_prefix("Session: "))
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let record = format!(
        "RECORD {} RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n",
        server.url("open/a")
    );
    assert_eq!(status_of(&exchange(&mut first, &record)), Some(200));
    // A second publisher of the path is told why not.
    let mut second = TcpStream::connect(server.addr()).unwrap();
    let reply = exchange(&mut second, &announce(&server, "open/a", SDP));
    assert_eq!(status_of(&reply), Some(455), "{reply}");
    // The limits: too long an SDP, too many tracks.
    let long = format!("{SDP}{}", "a=x-pad:0123456789\r\n".repeat(20));
    assert_eq!(
        status_of(&exchange(&mut second, &announce(&server, "open/b", &long))),
        Some(413)
    );
    let two = format!("{SDP}m=audio 0 RTP/AVP 97\r\na=rtpmap:97 OPUS/48000/2\r\n");
    assert_eq!(
        status_of(&exchange(&mut second, &announce(&server, "open/b", &two))),
        Some(453)
    );
    // Viewers see the stream; then the publisher sends nothing, and after
    // live_timeout_s it ends: the path is free and no longer described.
    let describe = || {
        let text = format!(
            "DESCRIBE {} RTSP/1.0\r\nCSeq: 9\r\n\r\n",
            server.url("open/a")
        );
        status_of(&exchange(
            &mut TcpStream::connect(server.addr()).unwrap(),
            &text,
        ))
    };
    assert_eq!(describe(), Some(200));
    server.wait_for_log("sent nothing for live_timeout_s", Duration::from_secs(6));
    assert_eq!(describe(), Some(404));
    let mut third = TcpStream::connect(server.addr()).unwrap();
    let reply = exchange(&mut third, &announce(&server, "open/a", SDP));
    assert_eq!(status_of(&reply), Some(200), "{reply}");
    drop(first);
}

/// Our own viewer of the video track at `url`, interleaved: every packet
/// and RTCP packet until the server's BYE (or `limit`).
fn capture_video(url: &str, limit: Duration) -> fjord_client::Capture {
    let mut c = fjord_client::RtspClient::connect(url).unwrap();
    let d = c.describe().unwrap();
    c.setup_tcp(&d.track_urls[0]).unwrap();
    c.play(None).unwrap();
    fjord_client::capture(&mut c, limit, limit, None).unwrap()
}

/// Waits until the log holds `needle` `n` times.
fn wait_for_count(server: &Server, needle: &str, n: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while server.log_text().matches(needle).count() < n {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_publisher_back_within_the_grace_continues_its_viewers_stream() {
    let server = Server::start(&format!("live_grace_s = 5\n{USERS}"));
    let url = with(&server, "pub:secret", "live/again");
    let mut first = publish(&url, "tcp");
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    let own = std::thread::spawn({
        let url = server.url("live/again");
        move || capture_video(&url, Duration::from_secs(18))
    });
    let viewer = server.url("live/again");
    let ffmpeg = std::thread::spawn(move || {
        decoded_md5s(
            &viewer,
            &["-rtsp_transport", "udp"],
            Duration::from_secs(20),
        )
    });
    // The viewers get about two seconds of the first publisher; then it
    // dies without a word, and another (over UDP, where the first sent
    // interleaved) takes its place a moment later.
    std::thread::sleep(Duration::from_millis(2500));
    first.kill().unwrap();
    let _ = first.wait();
    server.wait_for_log("live stream held", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(500));
    let second = publish_with(&url, "udp", &["-t", "4"]);
    server.wait_for_log("continued by a new publisher", Duration::from_secs(10));
    wait_for_count(&server, "live stream recording", 2, Duration::from_secs(10));
    let out = second.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // ffmpeg decoded a run of the first publisher's frames from a key
    // frame, then every frame of the second (its four seconds from the
    // start), at most one frame cut short by the kill in between; frames
    // out of time order would have been dropped (`-f framemd5` drops a
    // frame not after the one before).
    let got = ffmpeg.join().unwrap();
    let src = source_md5s();
    let second_at = (got.iter())
        .rposition(|m| *m == src[0])
        .unwrap_or_else(|| panic!("no frame of the second publisher in {} frames", got.len()));
    assert_every_frame_from_a_key_frame(
        &got[..second_at.saturating_sub(1)],
        20,
        "the first publisher",
    );
    let first_run = (got
        .iter()
        .zip(&src[src.iter().position(|m| *m == got[0]).unwrap()..]))
    .take_while(|(a, b)| a == b)
    .count();
    assert!(
        second_at - first_run <= 1,
        "{} frames between the publishers",
        second_at - first_run
    );
    assert_eq!(
        &got[second_at..],
        &src[..got.len() - second_at],
        "the second publisher's frames"
    );
    assert!(
        got.len() - second_at >= 90,
        "only {} frames of the second publisher",
        got.len() - second_at
    );

    // Our client: one SSRC, sequence numbers without a gap, and at the
    // outage a timestamp step of the time between the packets (90 kHz).
    let cap = own.join().unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);
    let p = &cap.packets;
    assert!(p.len() > 120, "{} packets", p.len());
    assert!(p.iter().all(|x| x.ssrc == p[0].ssrc), "the SSRC changed");
    for w in p.windows(2) {
        assert_eq!(w[1].seq, w[0].seq.wrapping_add(1), "a sequence gap");
    }
    let (at, gap) = (p.windows(2).enumerate())
        .map(|(i, w)| (i, w[1].arrival - w[0].arrival))
        .max_by_key(|(_, g)| *g)
        .unwrap();
    assert!(gap >= Duration::from_millis(400), "no outage seen: {gap:?}");
    let step = p[at + 1].rtp_ts.wrapping_sub(p[at].rtp_ts) as f64 / 90_000.0;
    let gap = gap.as_secs_f64();
    eprintln!(
        "outage {gap:.3} s, timestamps stepped {step:.3} s, {} packets",
        p.len()
    );
    assert!(
        (step - gap).abs() < 0.5,
        "timestamps stepped {step:.3} s over a {gap:.3} s outage"
    );
}

#[test]
fn a_publisher_gone_past_the_grace_ends_its_viewers_with_bye() {
    let server = Server::start(&format!("live_grace_s = 1\n{USERS}"));
    let url = with(&server, "pub:secret", "live/gone");
    let mut p = publish(&url, "udp");
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    let own = std::thread::spawn({
        let url = server.url("live/gone");
        move || capture_video(&url, Duration::from_secs(12))
    });
    std::thread::sleep(Duration::from_millis(1500));
    p.kill().unwrap();
    let killed = Instant::now();
    let _ = p.wait();
    let cap = own.join().unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);
    assert!(cap.packets.len() > 20, "{} packets", cap.packets.len());
    let bye = cap.rtcp.iter().find(|r| r.is_bye()).unwrap().arrival;
    // Held a grace (1 s, checked each second), then ended.
    let after = bye.saturating_duration_since(killed);
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&after),
        "BYE {after:?} after the kill"
    );
    server.wait_for_log(
        "no publisher continued it within live_grace_s",
        Duration::from_secs(2),
    );
}

/// Packets `rx` gets from now for `d` (not those queued before).
fn received_for(rx: &mut fjord_client::UdpReceiver, d: Duration) -> usize {
    let start = Instant::now();
    let end = start + d;
    let mut n = 0;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        if let Some(fjord_client::Event::Rtp(p)) = rx.recv(left) {
            n += usize::from(p.arrival >= start);
        }
    }
    n
}

#[test]
fn a_live_viewer_silent_for_the_session_timeout_is_ended() {
    // Its connection outlives it long enough to hear the 454.
    let users = USERS.replace("idle_timeout_s = 4", "idle_timeout_s = 10");
    let server = Server::start(&format!("session_timeout_s = 2\n{users}"));
    let mut p = publish(&with(&server, "pub:secret", "live/quiet"), "tcp");
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    let url = server.url("live/quiet");
    let viewer = || {
        let mut c = fjord_client::RtspClient::connect(&url).unwrap();
        let d = c.describe().unwrap();
        (c, d.track_urls[0].clone())
    };
    // Three viewers: one says nothing, one sends RTCP over UDP, one RTCP
    // in `$` frames; none sends a request after PLAY.
    let (mut quiet, track) = viewer();
    let (_, mut quiet_rx) = quiet.setup_udp(&track).unwrap();
    quiet.play(None).unwrap();
    let (mut udp, track) = viewer();
    let (_, udp_rx) = udp.setup_udp(&track).unwrap();
    udp.play(None).unwrap();
    let (mut tcp, track) = viewer();
    tcp.setup_tcp(&track).unwrap();
    tcp.play(None).unwrap();
    let rr = [0x80, 201, 0, 1, 0, 0, 0, 7];
    let mut rr_frame = vec![b'$', 1, 0, rr.len() as u8];
    rr_frame.extend_from_slice(&rr);
    let started = Instant::now();
    let talker = std::thread::spawn(move || {
        while started.elapsed() < Duration::from_millis(5500) {
            udp_rx.send_receiver_report().unwrap();
            tcp.send_raw(&rr_frame).unwrap();
            // Read what came, so the connection never fills.
            while let Ok(Some(_)) = tcp.recv_interleaved(Duration::from_millis(1)) {}
            std::thread::sleep(Duration::from_millis(300));
        }
        (udp_rx, tcp)
    });
    assert!(received_for(&mut quiet_rx, Duration::from_secs(1)) > 0);
    // 2 s without a word, checked each second: ended by 4 s after PLAY.
    server.wait_for_log("live viewer timed out", Duration::from_secs(5));
    // Its session is gone, and its packets stop.
    let r = quiet.keepalive();
    assert_eq!(
        r.as_ref().err().and_then(|e| e.status()),
        Some(454),
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(received_for(&mut quiet_rx, Duration::from_millis(800)), 0);
    let (mut udp_rx, mut tcp) = talker.join().unwrap();
    assert_eq!(
        server.log_text().matches("live viewer timed out").count(),
        1
    );
    assert!(received_for(&mut udp_rx, Duration::from_millis(500)) > 0);
    assert!(matches!(
        tcp.recv_interleaved(Duration::from_secs(1)),
        Ok(Some(fjord_client::Event::Rtp(_)))
    ));
    let _ = p.kill();
    let _ = p.wait();
}

/// ANNOUNCE, SETUP (interleaved) and RECORD of `sdp` at `path` on `s`.
pub(crate) fn publish_by_hand(server: &Server, s: &mut TcpStream, path: &str, sdp: &str) {
    let tcp = "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record";
    publish_by_hand_over(server, s, (path, sdp), tcp);
}

/// A publisher by hand over UDP ([`publish_over_udp`]): its RTP and RTCP
/// sockets, the server's RTP and RTCP addresses it sends to, its session.
struct UdpPublisher {
    rtp: UdpSocket,
    rtcp: UdpSocket,
    rtp_to: SocketAddr,
    rtcp_to: SocketAddr,
    session: String,
}

/// A publisher by hand to `path` over UDP, on `s`.
fn publish_over_udp(server: &Server, s: &mut TcpStream, path: &str) -> UdpPublisher {
    let (rtp, rtcp) = fjord_client::bind_pair("127.0.0.1".parse().unwrap()).unwrap();
    let port = rtp.local_addr().unwrap().port();
    let udp = format!(
        "RTP/AVP/UDP;unicast;client_port={port}-{};mode=record",
        port + 1
    );
    let reply = publish_by_hand_over(server, s, (path, SDP), &udp);
    let header = |name: &str| (reply.lines()).find_map(|l| l.strip_prefix(name)).unwrap();
    let ports = crate::common::transport_param(header("Transport: "), "server_port").unwrap();
    let server_rtp: u16 = ports.split('-').next().unwrap().parse().unwrap();
    UdpPublisher {
        rtp,
        rtcp,
        rtp_to: SocketAddr::from(([127, 0, 0, 1], server_rtp)),
        rtcp_to: SocketAddr::from(([127, 0, 0, 1], server_rtp + 1)),
        session: header("Session: ").split(';').next().unwrap().to_owned(),
    }
}

/// ANNOUNCE, SETUP of its one track with `transport`, RECORD; the SETUP
/// reply.
fn publish_by_hand_over(
    server: &Server,
    s: &mut TcpStream,
    (path, sdp): (&str, &str),
    transport: &str,
) -> String {
    let reply = exchange(s, &announce(server, path, sdp));
    assert_eq!(status_of(&reply), Some(200), "{reply}");
    let setup = format!(
        "SETUP {}/streamid=0 RTSP/1.0\r\nCSeq: 2\r\nTransport: {transport}\r\n\r\n",
        server.url(path)
    );
    let reply = exchange(s, &setup);
    assert_eq!(status_of(&reply), Some(200), "{reply}");
    let session = (reply.lines())
        .find_map(|l| l.strip_prefix("Session: "))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned();
    let record = format!(
        "RECORD {} RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n",
        server.url(path)
    );
    assert_eq!(status_of(&exchange(s, &record)), Some(200));
    reply
}

#[test]
fn a_publisher_of_other_media_ends_a_held_stream() {
    let server = Server::start(&format!("live_grace_s = 30\n{USERS}"));
    let mut first = TcpStream::connect(server.addr()).unwrap();
    publish_by_hand(&server, &mut first, "open/h", SDP);
    let mut viewer = fjord_client::RtspClient::connect(&server.url("open/h")).unwrap();
    let d = viewer.describe().unwrap();
    viewer.setup_tcp(&d.track_urls[0]).unwrap();
    viewer.play(None).unwrap();
    drop(first);
    server.wait_for_log("live stream held", Duration::from_secs(5));
    // Held, it is still described.
    let mut second = TcpStream::connect(server.addr()).unwrap();
    let describe = format!(
        "DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n",
        server.url("open/h")
    );
    assert_eq!(status_of(&exchange(&mut second, &describe)), Some(200));
    // H.265 where H.264 was: the viewer cannot decode it, so it gets BYE
    // and the new publisher a new stream.
    publish_by_hand(&server, &mut second, "open/h", &SDP.replace("H264", "H265"));
    let cap = fjord_client::capture(
        &mut viewer,
        Duration::from_secs(5),
        Duration::from_secs(5),
        None,
    )
    .unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);
    server.wait_for_log(
        "live stream ended: the new publisher announced other formats",
        Duration::from_secs(2),
    );
    assert!(!server.log_text().contains("continued by a new publisher"));
}

/// Packets a publisher's track lost on the way in are counted from its
/// sequence numbers and shown by the admin API (`GET /api/v1/live`):
/// sequence numbers 0-9 sent without 3 and 7 are 8 received and 2 lost.
#[test]
fn packets_a_publisher_lost_are_counted_in_the_api() {
    let ops = "[[user]]\nname = \"ops\"\npassword = \"pager\"\nadmin = true\n";
    let server = Server::start(&format!("{USERS}{ops}"));
    let mut s = TcpStream::connect(server.addr()).unwrap();
    publish_by_hand(&server, &mut s, "open/loss", SDP);
    for seq in (0u16..10).filter(|n| ![3, 7].contains(n)) {
        // RTP: version 2, PT 96, a non-IDR H.264 slice as the payload.
        let mut rtp = vec![0x80, 96];
        rtp.extend(seq.to_be_bytes());
        rtp.extend((u32::from(seq) * 3600).to_be_bytes());
        rtp.extend(0x1234_5678u32.to_be_bytes());
        rtp.extend([0x41, 0x9a, 0x00, 0x01]);
        let mut frame = vec![b'$', 0];
        frame.extend((rtp.len() as u16).to_be_bytes());
        frame.extend(rtp);
        s.write_all(&frame).unwrap();
    }
    let api = format!("{}/api/v1/live", server.admin());
    let deadline = Instant::now() + Duration::from_secs(5);
    let track = loop {
        let (body, code) = crate::common::curl(&["--digest", "-u", "ops:pager", &api]);
        assert_eq!(code, 200, "{body}");
        let live: serde_json::Value = serde_json::from_str(&body).unwrap();
        let track = live[0]["tracks"][0].clone();
        if track["received"] == 8 || Instant::now() > deadline {
            assert_eq!(live[0]["path"], "open/loss", "{live}");
            assert_eq!(live[0]["held"], false, "{live}");
            break track;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        (track["received"].as_u64(), track["lost"].as_u64()),
        (Some(8), Some(2)),
        "{track}"
    );
}

/// A UDP publisher's packets sent right behind its TEARDOWN, whose
/// connection then closes at once, still reach its viewers with no
/// `live_grace_s`: the close once ended the stream before its drain (a
/// recording lost its last packet).
#[test]
fn a_publishers_packets_behind_its_teardown_reach_its_viewers() {
    let server = Server::start(&format!("live_grace_s = 0\n{USERS}"));
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let p = publish_over_udp(&server, &mut s, "open/last");
    // Key frames (IDR slices), a viewer may join at each.
    let idr = |seq: u16| {
        let mut rtp = vec![0x80, 0xe0];
        rtp.extend(seq.to_be_bytes());
        rtp.extend((u32::from(seq) * 3600).to_be_bytes());
        rtp.extend(0x1234_5678u32.to_be_bytes());
        rtp.extend([0x65, 0x88, 0x80, 0x40]);
        rtp
    };
    p.rtp.send_to(&idr(0), p.rtp_to).unwrap();
    let mut viewer = fjord_client::RtspClient::connect(&server.url("open/last")).unwrap();
    let d = viewer.describe().unwrap();
    viewer.setup_tcp(&d.track_urls[0]).unwrap();
    viewer.play(None).unwrap();
    let teardown = format!(
        "TEARDOWN {} RTSP/1.0\r\nCSeq: 4\r\nSession: {}\r\n\r\n",
        server.url("open/last"),
        p.session
    );
    s.write_all(teardown.as_bytes()).unwrap();
    drop(s);
    for seq in 1..=5 {
        p.rtp.send_to(&idr(seq), p.rtp_to).unwrap();
    }
    let limit = Duration::from_secs(5);
    let cap = fjord_client::capture(&mut viewer, limit, limit, None).unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);
    // From the key frame it joined at (the first) to the last sent.
    let span =
        |p: &[fjord_client::Received]| Some(p.last()?.rtp_ts.wrapping_sub(p.first()?.rtp_ts));
    assert_eq!(
        span(&cap.packets),
        Some(5 * 3600),
        "{} packets",
        cap.packets.len()
    );
}

/// A UDP publisher gets receiver reports on its RTCP port (RFC 3550
/// §6.4.2): of its own SSRC and numbering, the packets it lost on the way
/// and the highest sequence number, and its last sender report echoed
/// with the time since.
#[test]
fn a_udp_publisher_gets_receiver_reports_of_what_arrived() {
    use fjord_proto::rtcp::{RtcpInfo, parse_compound};
    let server = Server::start(&format!("rtcp_interval_s = 1\n{USERS}"));
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let UdpPublisher {
        rtp,
        rtcp,
        rtp_to,
        rtcp_to,
        ..
    } = publish_over_udp(&server, &mut s, "open/rr");
    for packet in packets_with_two_lost() {
        rtp.send_to(&packet, rtp_to).unwrap();
    }
    rtcp.send_to(&publishers_sender_report(), rtcp_to).unwrap();
    // The first report after the sender report names it.
    rtcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1500];
    let block = loop {
        let (n, from) = rtcp
            .recv_from(&mut buf)
            .expect("no receiver report within 5 s");
        assert_eq!(from, rtcp_to);
        let blocks = parse_compound(&buf[..n])
            .unwrap()
            .into_iter()
            .find_map(|i| match i {
                RtcpInfo::ReceiverReport { blocks, .. } => Some(blocks),
                _ => None,
            });
        let block = blocks.expect("a receiver report first")[0];
        if block.lsr != 0 {
            break block;
        }
    };
    assert_reports_what_arrived(&block);
}

/// RTP packets 65530 to 3 (wrapping) of SSRC 0x12345678, 65533 and 1
/// lost.
fn packets_with_two_lost() -> Vec<Vec<u8>> {
    let sent = (0u16..10).filter(|i| ![3, 7].contains(i));
    sent.map(|i| {
        let seq = 65530u16.wrapping_add(i);
        let mut packet = vec![0x80, 96];
        packet.extend(seq.to_be_bytes());
        packet.extend((u32::from(i) * 3600).to_be_bytes());
        packet.extend(0x1234_5678u32.to_be_bytes());
        packet.extend([0x41, 0x9a, 0x00, 0x01]);
        packet
    })
    .collect()
}

const PUBLISHERS_NTP: fjord_proto::rtcp::NtpTime =
    fjord_proto::rtcp::NtpTime(0x1122_3344_5566_7788);

fn publishers_sender_report() -> Vec<u8> {
    let mut sr = [0u8; 128];
    let n = fjord_proto::rtcp::sender_report(
        &mut sr,
        0x1234_5678,
        PUBLISHERS_NTP,
        36_000,
        8,
        64,
        "publisher",
        false,
    );
    sr[..n].to_vec()
}

/// A receiver report of [`packets_with_two_lost`] after
/// [`publishers_sender_report`].
fn assert_reports_what_arrived(block: &fjord_proto::rtcp::ReportBlock) {
    assert_eq!(block.ssrc, 0x1234_5678);
    assert_eq!(block.cumulative_lost, 2, "{block:?}");
    assert_eq!(block.highest_seq, 65536 + 3, "{block:?}");
    assert_eq!(block.lsr, PUBLISHERS_NTP.middle32());
    assert!(block.dlsr > 0 && block.dlsr < 2 * 65536, "{block:?}");
}

/// A publisher over TCP gets its receiver reports on its tracks' RTCP
/// channels, as a UDP one on its RTCP port.
#[test]
fn a_tcp_publisher_gets_receiver_reports_on_its_rtcp_channel() {
    use fjord_proto::rtcp::{RtcpInfo, parse_compound};
    let server = Server::start(&format!("rtcp_interval_s = 1\n{USERS}"));
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let tcp = "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record";
    publish_by_hand_over(&server, &mut s, ("open/rr-tcp", SDP), tcp);
    let frame = |channel: u8, payload: &[u8]| {
        let mut f = vec![b'$', channel];
        f.extend((payload.len() as u16).to_be_bytes());
        f.extend(payload);
        f
    };
    for packet in packets_with_two_lost() {
        s.write_all(&frame(0, &packet)).unwrap();
    }
    s.write_all(&frame(1, &publishers_sender_report())).unwrap();
    // Reports are written after a read of the publisher's frames: it
    // goes on sending (an empty receiver report of its own).
    let keepalive = [0x80, 201, 0, 1, 0x12, 0x34, 0x56, 0x78];
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let (mut got, deadline) = (Vec::new(), Instant::now() + Duration::from_secs(5));
    let block = loop {
        assert!(Instant::now() < deadline, "no receiver report within 5 s");
        s.write_all(&frame(1, &keepalive)).unwrap();
        let mut buf = [0u8; 1500];
        if let Ok(n) = s.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        let Some(at) = got.windows(2).position(|w| w == [b'$', 1]) else {
            continue;
        };
        let Some(head) = got.get(at + 2..at + 4) else {
            continue;
        };
        let len = usize::from(u16::from_be_bytes([head[0], head[1]]));
        let Some(payload) = got.get(at + 4..at + 4 + len) else {
            continue;
        };
        let infos = parse_compound(payload).unwrap();
        let blocks = infos.into_iter().find_map(|i| match i {
            RtcpInfo::ReceiverReport { blocks, .. } => Some(blocks),
            _ => None,
        });
        break blocks.expect("a receiver report")[0];
    };
    assert_reports_what_arrived(&block);
}

/// A live viewer of ffmpeg gets sender reports (RFC 3550 §6.4.1) every
/// `rtcp_interval_s`, ffmpeg's own mapping relayed (its first report goes
/// just before its first packet), so their NTP time is ffmpeg's wall
/// clock; the BYE's counts every packet and payload octet the viewer was
/// sent.
#[test]
fn a_live_viewer_of_ffmpeg_gets_its_reports_and_a_bye_that_counts_what_it_was_sent() {
    let server = Server::start(&format!("rtcp_interval_s = 1\nlive_grace_s = 1\n{USERS}"));
    let url = with(&server, "pub:secret", "live/sr");
    let mut p = publish(&url, "udp");
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    let own = std::thread::spawn({
        let url = server.url("live/sr");
        move || view_udp(&url, Duration::from_secs(4), Duration::from_secs(12))
    });
    std::thread::sleep(Duration::from_secs(5));
    p.kill().unwrap();
    let _ = p.wait();
    let cap = own.join().unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);
    let srs = crate::common::sender_reports(&cap);
    assert!(srs.len() >= 4, "{} sender reports in some 5 s", srs.len());
    let ntp_unix = |ntp: u64| (ntp >> 32) as f64 - 2_208_988_800.0;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let now = now.unwrap().as_secs_f64();
    for sr in &srs {
        assert!(
            (now - ntp_unix(sr.1)).abs() < 15.0,
            "NTP is not the wall clock"
        );
    }
    let (_, _, _, packets, octets) = srs[srs.len() - 1];
    assert_eq!(packets as usize, cap.packets.len(), "the SR's packet count");
    let bytes: usize = cap.packets.iter().map(|p| p.payload.len()).sum();
    assert_eq!(octets as usize, bytes, "the SR's octet count");
}

/// A live viewer gets the publisher's own sender reports relayed (RFC
/// 3550 §6.4.1): one before its first packet, then every
/// `rtcp_interval_s`, each (NTP, RTP) pair on the line of the publisher's
/// latest report, its RTP time in the viewer's numbering (the publisher's
/// plus the shift seen in the viewer's packets), its counts the viewer's
/// own; the BYE's too.
#[test]
fn a_live_viewer_gets_the_publishers_sender_reports_in_its_numbering() {
    use fjord_proto::rtcp::NtpTime;
    let server = Server::start(&format!("rtcp_interval_s = 1\nlive_grace_s = 0\n{USERS}"));
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let UdpPublisher {
        rtp,
        rtcp,
        rtp_to,
        rtcp_to,
        ..
    } = publish_over_udp(&server, &mut s, "open/relay");

    // Packet i is at 40 ms × i, its timestamp 3,600 on from just before
    // the wrap, which its payload repeats; a key frame a second.
    let ts0 = u32::MAX - 2 * 90_000;
    let packet = move |i: u32| {
        let ts = ts0.wrapping_add(3600 * i);
        let mut p = vec![0x80, 96];
        p.extend((i as u16).to_be_bytes());
        p.extend(ts.to_be_bytes());
        p.extend(0x5151_5151u32.to_be_bytes());
        p.push(if i.is_multiple_of(25) { 0x65 } else { 0x41 });
        p.extend(ts.to_be_bytes());
        p
    };
    // Its reports' line: NTP from `N0` at packet 0; the second line 10 ms
    // (900 ticks) on, as a publisher whose clock was corrected.
    const N0: u64 = 0xe000_0000_0000_0000;
    let on = move |line: u32, ntp: u64| {
        let ticks = (u128::from(ntp.wrapping_sub(N0)) * 90_000) >> 32;
        ts0.wrapping_add(ticks as u32).wrapping_add(900 * line)
    };
    let report = move |i: u32, line: u32| {
        let ntp = N0 + ((u64::from(i) * 40) << 32) / 1000;
        let mut sr = [0u8; 128];
        // Counts no viewer's: they must not be relayed.
        let n = fjord_proto::rtcp::sender_report(
            &mut sr,
            0x5151_5151,
            NtpTime(ntp),
            on(line, ntp),
            999_999,
            999_999,
            "publisher",
            false,
        );
        sr[..n].to_vec()
    };
    // Six seconds; a report a second, on the second line from 3 s.
    let publisher = std::thread::spawn(move || {
        let start = Instant::now();
        let mut second_line = start;
        for i in 0u32..150 {
            let at = start + Duration::from_millis(40 * u64::from(i));
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            rtp.send_to(&packet(i), rtp_to).unwrap();
            if i % 25 == 1 {
                if i == 76 {
                    second_line = Instant::now();
                }
                rtcp.send_to(&report(i, u32::from(i >= 75)), rtcp_to)
                    .unwrap();
            }
        }
        drop(s);
        second_line
    });
    std::thread::sleep(Duration::from_millis(1200));
    let relay = server.url("open/relay");
    let cap = view_udp(&relay, Duration::from_secs(4), Duration::from_secs(15));
    let second_line = publisher.join().unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);

    // The viewer's shift of the publisher's timestamps, one for all.
    let p = &cap.packets;
    assert!(p.len() > 100, "{} packets", p.len());
    let shift = |x: &fjord_client::Received| {
        let ts = u32::from_be_bytes(x.payload[1..5].try_into().unwrap());
        x.rtp_ts.wrapping_sub(ts)
    };
    let delta = shift(&p[0]);
    assert!(p.iter().all(|x| shift(x) == delta), "the shift changed");
    let srs = crate::common::sender_reports(&cap);
    assert!(srs.len() >= 5, "{} sender reports in some 5 s", srs.len());
    assert_eq!(srs[0].3, 0, "the first report goes before any packet");
    let mut lines = Vec::new();
    for &(arrival, ntp, rtp_ts, packets, octets) in &srs {
        let ours = rtp_ts.wrapping_sub(delta);
        let off = |line| (ours.wrapping_sub(on(line, ntp)) as i32).abs();
        let line = (0..2).find(|&l| off(l) <= 1);
        let line = line.unwrap_or_else(|| panic!("off both lines: {} ticks", off(0)));
        if arrival > second_line + Duration::from_millis(500) {
            assert_eq!(line, 1, "a report after the second line came");
        }
        lines.push(line);
        assert_eq!(octets, packets * 5, "counts of the viewer's own packets");
        let before = p.iter().filter(|x| x.arrival < arrival).count() as i64;
        assert!(
            (i64::from(packets) - before).abs() <= 25,
            "{packets} packets counted, {before} came before"
        );
    }
    assert_eq!(lines[0], 0, "the first report is of the first line");
    let (.., packets, _) = srs[srs.len() - 1];
    assert_eq!(packets as usize, p.len(), "the BYE's count");
    for w in srs.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(gap < Duration::from_millis(2500), "{gap:?} between reports");
    }
}

//! Multicast viewers of a live path (`docs/live.md`), inside a network
//! namespace of the test's own (`common::in_private_network`): two ffmpeg
//! viewers (`-rtsp_transport udp_multicast`) of an ffmpeg publisher decode
//! every frame from the key frame they join at, and the engine sends each
//! publisher packet once for both; a stream's group is the same for every
//! viewer, another stream gets another; the group ends (RTCP BYE) with its
//! last member's TEARDOWN, or its silence for `session_timeout_s`, and its
//! address goes to the next group; a PLAY's RTP-Info numbers the group's
//! next packet; the group gets the publisher's sender reports; members
//! whose RTCP reaches the group's RTCP port (hand-made, and GStreamer's
//! with no RTSP keep-alive) outlive `session_timeout_s` without a
//! request; without `multicast = true` a multicast SETUP of a live path
//! gets 461.

use std::process::Child;
use std::time::{Duration, Instant};

use fjord_client::RtspClient;
use serde_json::Value;

use crate::common::{Server, curl, in_private_network, transport_param};
use crate::live::{USERS, assert_every_frame_from_a_key_frame, decoded_md5s, publish, with};
use crate::multicast::{count_ssrc, join};

/// A server offering multicast, its groups from 239.255.7.0/24, with the
/// live tests' users and an operator; and an ffmpeg publisher of each of
/// `paths`, recording once the call returns; `extra` settings first.
fn serve_live(extra: &str, paths: &[&str]) -> (Server, Vec<Child>) {
    let ops = "[[user]]\nname = \"ops\"\npassword = \"pager\"\nadmin = true\n";
    let config =
        format!("{extra}multicast = true\nmulticast_pool = \"239.255.7.0/24\"\n{USERS}{ops}");
    let server = Server::start(&config);
    let publishers = (paths.iter())
        .map(|p| publish(&with(&server, "pub:secret", p), "tcp"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.log_text().matches("live stream recording").count() < paths.len() {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, publishers)
}

fn stop(publishers: Vec<Child>) {
    for mut p in publishers {
        let _ = p.kill();
        let _ = p.wait();
    }
}

/// The admin API's `path`, as the operator.
fn api(server: &Server, path: &str) -> Value {
    let url = format!("{}/api/v1/{path}", server.admin());
    let (body, code) = curl(&["--digest", "-u", "ops:pager", &url]);
    assert_eq!(code, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Packets the engine threads sent.
fn sent(server: &Server) -> u64 {
    let threads = api(server, "threads");
    (threads.as_array().unwrap().iter())
        .map(|t| t["packets"].as_u64().unwrap())
        .sum()
}

/// Packets of the publishers' tracks the server received.
fn received(server: &Server) -> u64 {
    let live = api(server, "live");
    (live.as_array().unwrap().iter())
        .flat_map(|s| s["tracks"].as_array().unwrap().iter())
        .map(|t| t["received"].as_u64().unwrap())
        .sum()
}

#[test]
fn two_ffmpeg_viewers_of_a_live_path_share_one_multicast_group() {
    in_private_network(|| {
        let (mut server, publishers) = serve_live("", &["live/m"]);
        std::thread::sleep(Duration::from_millis(1200));
        let url = server.url("live/m");
        let view = || {
            decoded_md5s(
                &url,
                &["-rtsp_transport", "udp_multicast"],
                Duration::from_secs(20),
            )
        };
        std::thread::scope(|s| {
            let viewers = [s.spawn(view), s.spawn(view)];
            // Once both play: what the engine sent over 3 s against what
            // the publisher sent meanwhile.
            let playing = || server.log_text().matches("method=\"PLAY\"").count();
            let deadline = Instant::now() + Duration::from_secs(10);
            while playing() < 2 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(Duration::from_millis(300));
            let before = (sent(&server), received(&server));
            std::thread::sleep(Duration::from_secs(3));
            let (out, came) = (sent(&server) - before.0, received(&server) - before.1);
            assert!(came > 50, "{came} packets published in 3 s");
            assert!(
                out * 10 <= came * 12 && out * 10 >= came * 8,
                "{out} packets sent for two multicast viewers of {came} published"
            );
            for (i, v) in viewers.into_iter().enumerate() {
                let got = v.join().unwrap();
                assert_every_frame_from_a_key_frame(&got, 100, &format!("ffmpeg multicast {i}"));
            }
        });
        let log = server.log_text();
        assert_eq!(log.matches("live multicast group made").count(), 1, "{log}");
        server.assert_alive();
        stop(publishers);
    });
}

/// `name=value` of a SETUP reply's Transport.
fn param(transport: &str, name: &str) -> String {
    let v = transport_param(transport, name);
    v.unwrap_or_else(|| panic!("no {name} in {transport}"))
        .to_owned()
}

/// A viewer's SETUP of track 0 of `path` over multicast: its session and
/// the reply's Transport.
fn setup(server: &Server, path: &str) -> (RtspClient, String, String) {
    let mut c = RtspClient::connect(&server.url(path)).unwrap();
    let track = c.describe().unwrap().track_urls[0].clone();
    let asked = [(
        "Transport",
        "RTP/AVP;multicast;destination=239.255.255.250;port=1900-1901",
    )];
    let r = c.request("SETUP", &track, &asked, &[]).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let session = r.header("Session").unwrap().split(';').next().unwrap();
    let transport = r.header("Transport").unwrap().to_owned();
    (c, session.to_owned(), transport)
}

fn request(c: &mut RtspClient, method: &str, url: &str, session: &str) -> fjord_client::Response {
    c.request(method, url, &[("Session", session)], &[])
        .unwrap()
}

/// The `seq` of track 0 in a PLAY reply's RTP-Info.
fn info_seq(r: &fjord_client::Response) -> u16 {
    let info = r.header("RTP-Info").expect("RTP-Info");
    let track0 = info.split(',').find(|t| t.starts_with("url=trackID=0;"));
    let seq = track0.and_then(|t| t.split(';').find_map(|p| p.strip_prefix("seq=")));
    seq.and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{info}"))
}

/// The sequence number of the next RTP packet of `ssrc` on `socket`.
fn next_seq(socket: &std::net::UdpSocket, ssrc: u32) -> u16 {
    let (end, mut buf) = (Instant::now() + Duration::from_secs(2), [0u8; 2048]);
    while Instant::now() < end {
        if let Ok(n) = socket.recv(&mut buf)
            && n >= 12
            && buf[8..12] == ssrc.to_be_bytes()
        {
            return u16::from_be_bytes([buf[2], buf[3]]);
        }
    }
    panic!("no packet of the group within 2 s");
}

/// Whether an RTCP packet of type `pt` (200 a sender report, 203 BYE)
/// arrives on `socket` within `limit`.
fn rtcp_within(socket: &std::net::UdpSocket, pt: u8, limit: Duration) -> bool {
    let (end, mut buf) = (Instant::now() + limit, [0u8; 1500]);
    while Instant::now() < end {
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        let mut at = 0;
        while at + 4 <= n {
            if buf[at + 1] == pt {
                return true;
            }
            at += 4 * (usize::from(u16::from_be_bytes([buf[at + 2], buf[at + 3]])) + 1);
        }
    }
    false
}

#[test]
fn a_live_group_ends_with_its_last_member_and_its_address_goes_to_the_next() {
    in_private_network(|| {
        let (mut server, publishers) = serve_live("", &["live/a", "live/b"]);
        // Packets to number the group's start by.
        std::thread::sleep(Duration::from_millis(500));
        let (mut a, sa, ta) = setup(&server, "live/a");
        assert!(
            ta.contains("destination=239.255.7.1;port=5004-5005;ttl=1;"),
            "the server's group and port, not the client's: {ta}"
        );
        let (mut b, sb, tb) = setup(&server, "live/a");
        assert_eq!(tb, ta, "one group per stream");
        let (_c, _, tc) = setup(&server, "live/b");
        assert!(
            tc.contains("destination=239.255.7.2;"),
            "another stream's: {tc}"
        );
        // A session's tracks go all by multicast or none.
        let udp = "RTP/AVP;unicast;client_port=50200-50201";
        let track1 = format!("{}/trackID=1", server.url("live/a"));
        let r = (a.request(
            "SETUP",
            &track1,
            &[("Transport", udp), ("Session", &sa)],
            &[],
        ))
        .unwrap();
        assert_eq!(r.status, 461, "{r:?}");
        let (rtp, rtcp) = (join("239.255.7.1", 5004), join("239.255.7.1", 5005));
        let ssrc = u32::from_str_radix(&param(&ta, "ssrc"), 16).unwrap();
        let url = server.url("live/a");
        // RTP-Info gives the group's sequence number of the next packet:
        // the first PLAY's, the backlog's first; a later one's, next to
        // what flows.
        let r = request(&mut a, "PLAY", &url, &sa);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(info_seq(&r), next_seq(&rtp, ssrc), "{r:?}");
        assert!(
            count_ssrc(&rtp, ssrc, Duration::from_secs(1)) > 10,
            "the group flows"
        );
        // ffmpeg's reports, relayed to the group: the first went before
        // its first packet.
        assert!(
            rtcp_within(&rtcp, 200, Duration::from_secs(1)),
            "the group's sender report"
        );
        let r = request(&mut b, "PLAY", &url, &sb);
        assert_eq!(r.status, 200, "{r:?}");
        let ahead = info_seq(&r).wrapping_sub(next_seq(&rtp, ssrc)) as i16;
        assert!((-30..=30).contains(&ahead), "{ahead} packets off: {r:?}");
        assert_eq!(request(&mut a, "TEARDOWN", &url, &sa).status, 200);
        assert!(
            count_ssrc(&rtp, ssrc, Duration::from_millis(500)) > 3,
            "b still a member"
        );
        assert!(
            !rtcp_within(&rtcp, 203, Duration::from_millis(100)),
            "no BYE while b watches"
        );
        assert_eq!(request(&mut b, "TEARDOWN", &url, &sb).status, 200);
        assert!(
            rtcp_within(&rtcp, 203, Duration::from_secs(2)),
            "the group's BYE"
        );
        server.wait_for_log("live multicast group ended", Duration::from_secs(2));
        std::thread::sleep(Duration::from_millis(100));
        while rtp.recv(&mut [0u8; 2048]).is_ok() {}
        assert_eq!(
            count_ssrc(&rtp, ssrc, Duration::from_millis(500)),
            0,
            "the group ended"
        );
        let (_d, _, td) = setup(&server, "live/a");
        assert!(
            td.contains("destination=239.255.7.1;"),
            "the address again: {td}"
        );
        assert_ne!(param(&td, "ssrc"), param(&ta, "ssrc"), "a new group");
        server.assert_alive();
        stop(publishers);
    });
}

/// Without `multicast = true` a live path's multicast SETUP gets 461, as
/// a title's does.
#[test]
fn a_live_paths_multicast_setup_without_the_opt_in_gets_461() {
    let server = Server::start(USERS);
    let p = publish(&with(&server, "pub:secret", "live/u"), "tcp");
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    let mut c = RtspClient::connect(&server.url("live/u")).unwrap();
    let track = c.describe().unwrap().track_urls[0].clone();
    let r = (c.request("SETUP", &track, &[("Transport", "RTP/AVP;multicast")], &[])).unwrap();
    assert_eq!(r.status, 461, "{r:?}");
    let why = String::from_utf8_lossy(&r.body);
    assert!(why.contains("does not offer"), "{why}");
    stop(vec![p]);
}

/// A member that sends no request for `session_timeout_s` is ended, and
/// with it, the last, the group: RTCP BYE to it, nothing more sent.
#[test]
fn a_silent_last_member_ends_the_group_at_the_session_timeout() {
    in_private_network(|| {
        let (mut server, publishers) = serve_live("session_timeout_s = 2\n", &["live/t"]);
        std::thread::sleep(Duration::from_millis(500));
        let (mut c, session, transport) = setup(&server, "live/t");
        let (rtp, rtcp) = (join("239.255.7.1", 5004), join("239.255.7.1", 5005));
        let ssrc = u32::from_str_radix(&param(&transport, "ssrc"), 16).unwrap();
        let r = request(&mut c, "PLAY", &server.url("live/t"), &session);
        assert_eq!(r.status, 200, "{r:?}");
        assert!(count_ssrc(&rtp, ssrc, Duration::from_millis(500)) > 3);
        assert!(
            rtcp_within(&rtcp, 203, Duration::from_secs(5)),
            "the group's BYE"
        );
        server.wait_for_log("live viewer timed out", Duration::from_secs(1));
        server.wait_for_log("live multicast group ended", Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(100));
        while rtp.recv(&mut [0u8; 2048]).is_ok() {}
        assert_eq!(count_ssrc(&rtp, ssrc, Duration::from_millis(500)), 0);
        server.assert_alive();
        stop(publishers);
    });
}

/// Live viewers of `path` the admin API counts.
fn viewers(server: &Server, path: &str) -> u64 {
    let live = api(server, "live");
    let stream = (live.as_array().unwrap().iter()).find(|s| s["path"] == path);
    stream.map_or(0, |s| s["viewers"].as_u64().unwrap())
}

/// Members' RTCP sent to their group's RTCP port (RFC 3550 §6) keeps them
/// alive with no RTSP request: with `session_timeout_s = 2`, two members
/// of one stream's group, behind one address whose receiver reports reach
/// the group every second, outlive it and still get the group's packets;
/// a member of another stream's group, whose port gets only RTCP cut
/// short, is ended at it; once the reports stop, so are the two.
#[test]
fn members_whose_rtcp_reaches_the_group_outlive_the_session_timeout() {
    in_private_network(|| {
        let (mut server, publishers) = serve_live("session_timeout_s = 2\n", &["live/r", "live/s"]);
        std::thread::sleep(Duration::from_millis(500));
        let (mut a, sa, ta) = setup(&server, "live/r");
        let (mut b, sb, _) = setup(&server, "live/r");
        let (mut c, sc, tc) = setup(&server, "live/s");
        let (r, s) = (server.url("live/r"), server.url("live/s"));
        for (client, session, url) in [(&mut a, &sa, &r), (&mut b, &sb, &r), (&mut c, &sc, &s)] {
            let reply = request(client, "PLAY", url, session);
            assert_eq!(reply.status, 200, "{reply:?}");
        }
        let (group_r, group_s) = (param(&ta, "destination"), param(&tc, "destination"));
        let rtp = join(&group_r, 5004);
        let ssrc = u32::from_str_radix(&param(&ta, "ssrc"), 16).unwrap();
        // From the members' address, as a player's reports leave.
        let player = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let rr = [0x80, 201, 0, 1, 0xde, 0xad, 0xbe, 0xef];
        let cut = [0x81, 201, 0, 7, 0xde, 0xad, 0xbe, 0xef];
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            player.send_to(&rr, (group_r.as_str(), 5005)).unwrap();
            player.send_to(&cut, (group_s.as_str(), 5005)).unwrap();
            std::thread::sleep(Duration::from_secs(1));
        }
        let log = server.log_text();
        assert_eq!(log.matches("live viewer timed out").count(), 1, "{log}");
        assert_eq!(
            viewers(&server, "live/r"),
            2,
            "both members behind the address"
        );
        assert_eq!(
            viewers(&server, "live/s"),
            0,
            "RTCP cut short keeps none alive"
        );
        assert!(
            count_ssrc(&rtp, ssrc, Duration::from_millis(500)) > 3,
            "the group still flows"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while server.log_text().matches("live viewer timed out").count() < 3 {
            assert!(Instant::now() < deadline, "{}", server.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(viewers(&server, "live/r"), 0);
        server.assert_alive();
        stop(publishers);
    });
}

/// GStreamer's multicast viewer sends its receiver reports to the group:
/// told to send no RTSP keep-alive (`do-rtsp-keep-alive=false`), it stays
/// a member past `session_timeout_s` on them alone (they come every 2 to 6
/// s, RFC 3550 §6.3.1's randomised 5 s).
#[test]
fn a_gstreamer_member_sending_no_keep_alive_lives_on_its_rtcp() {
    in_private_network(|| {
        // Else a report sent from 0.0.0.0:PORT leaves from 0.0.0.0, which
        // is no member's address: lo's 127.0.0.1 is of host scope.
        let route = [
            "route",
            "replace",
            "239.0.0.0/8",
            "dev",
            "lo",
            "src",
            "127.0.0.1",
        ];
        let out = std::process::Command::new("ip")
            .args(route)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let (mut server, publishers) = serve_live("session_timeout_s = 7\n", &["live/g"]);
        let pipeline = format!(
            "rtspsrc location={} protocols=udp-mcast do-rtsp-keep-alive=false name=src \
             src. ! application/x-rtp,media=video ! fakesink \
             src. ! application/x-rtp,media=audio ! fakesink",
            server.url("live/g")
        );
        let mut gst = std::process::Command::new("gst-launch-1.0")
            .arg("-q")
            .args(pipeline.split_whitespace())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        server.wait_for_log("method=\"PLAY\"", Duration::from_secs(5));
        // Past the timeout and the second's check after it; the 12 s the
        // publisher sends are not over yet.
        std::thread::sleep(Duration::from_secs(9));
        let log = server.log_text();
        let after_play = &log[log.find("method=\"PLAY\"").unwrap()..];
        assert!(
            !after_play.contains("method=\"GET_PARAMETER\"")
                && !after_play.contains("method=\"OPTIONS\""),
            "no keep-alive: {log}"
        );
        assert!(!log.contains("live viewer timed out"), "{log}");
        assert_eq!(viewers(&server, "live/g"), 1, "{log}");
        let _ = gst.kill();
        let _ = gst.wait();
        server.assert_alive();
        stop(publishers);
    });
}

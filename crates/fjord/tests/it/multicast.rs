//! RTSP multicast as players use it, inside a network namespace of the
//! test's own (`common::in_private_network`): ffmpeg
//! (`-rtsp_transport udp_multicast`) and GStreamer (`protocols=udp-mcast`)
//! receive a TS and an MP4 title bit-exact; viewers set up within the
//! batching window share one stream; the server picks every group and
//! port, whatever a client asks for; multicast needs the operator's opt-in.

use std::{fs, path::Path, process::Command, time::Duration};

use fjord_client::RtspClient;

use crate::common::{Server, in_private_network, run_bounded_with, transport_param};
use crate::formats::{
    AVC_MP4, COPY, Case, ffmpeg_plays_over, gstreamer_plays, serve, source_packets,
};

/// Long enough for every client of a test to SETUP before its group starts.
const BATCH: &str = "multicast = true\nmulticast_batch_ms = 2000\n";

const AVC_TS: Case = Case {
    file: "avc.ts",
    make: &[
        "-map", "0:v", "-map", "1:a", "-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-bf",
        "0", "-c:a", "aac", "-b:a", "128k", "-f", "mpegts",
    ],
    compare: COPY,
    source_opts: &[],
    gst: &[],
};

/// GStreamer's MP2T depayloader writes the transport stream as received:
/// it must be the stored file, byte for byte.
fn gstreamer_receives_ts(server: &Server, case: &Case, source: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("got.ts");
    let mut cmd = Command::new("gst-launch-1.0");
    cmd.args(["-q", "-e", "rtspsrc"])
        .arg(format!("location={}", server.url(case.file)))
        .args(["protocols=udp-mcast", "!", "rtpmp2tdepay", "!", "filesink"])
        .arg(format!("location={}", got.display()));
    let out = run_bounded_with(cmd, Duration::from_secs(30), Some(Duration::from_secs(20)));
    let (got, want) = (
        fs::read(&got).unwrap_or_default(),
        fs::read(source).unwrap(),
    );
    assert!(
        got == want,
        "gst udp-mcast {}: {} bytes received, {} stored (common prefix {}): {}",
        case.file,
        got.len(),
        want.len(),
        got.iter().zip(&want).take_while(|(a, b)| a == b).count(),
        out.stderr
    );
}

#[test]
fn ffmpeg_and_gstreamer_receive_a_ts_and_an_mp4_title_over_multicast() {
    in_private_network(|| {
        for case in [&AVC_TS, &AVC_MP4] {
            let (mut server, source) = serve(case, BATCH);
            let want = source_packets(case, &source);
            // One after the other: GStreamer binds the group's ports without
            // SO_REUSEADDR, so no other player on this host could join them.
            ffmpeg_plays_over(&server, case, &source, &want, "udp_multicast");
            match case.gst {
                [] => gstreamer_receives_ts(&server, case, &source),
                _ => gstreamer_plays(&server, case, &source, "udp-mcast"),
            }
            server.assert_alive();
        }
    });
}

#[test]
fn viewers_in_one_batching_window_share_one_stream() {
    in_private_network(|| {
        let case = &AVC_TS;
        let (mut server, source) = serve(case, BATCH);
        let want = source_packets(case, &source);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| ffmpeg_plays_over(&server, case, &source, &want, "udp_multicast"));
            }
        });
        let shared = server.thread_total("packets");
        // The same title to one unicast viewer: what one stream sends.
        ffmpeg_plays_over(&server, case, &source, &want, "udp");
        let one = server.thread_total("packets") - shared;
        assert!(one > 100, "{one} packets in a unicast play");
        assert_eq!(shared, one, "three multicast viewers cost one stream");
        let log = server.log_text();
        assert_eq!(log.matches("multicast group starts").count(), 1, "{log}");
        assert_eq!(log.matches("multicast group ended").count(), 1, "{log}");
        server.assert_alive();
    });
}

fn setup(c: &mut RtspClient, url: &str, transport: &str) -> (u16, String, Option<String>) {
    let r = c
        .request("SETUP", url, &[("Transport", transport)], &[])
        .unwrap();
    let session = r
        .header("Session")
        .map(|s| s.split(';').next().unwrap().to_owned());
    (
        r.status,
        r.header("Transport").unwrap_or_default().to_owned(),
        session,
    )
}

#[test]
fn groups_come_from_the_pool_and_later_viewers_get_the_next_group() {
    in_private_network(|| {
        let mut server = Server::start(
            "multicast = true\nmulticast_batch_ms = 300\nmulticast_pool = \"239.255.3.0/24\"\n",
        );
        let url = server.url("clip.ts");
        let mut a = RtspClient::connect(&url).unwrap();
        let track = a.describe().unwrap().track_urls[0].clone();
        assert_eq!(setup(&mut a, &track, "RTP/AVP/TCP;multicast").0, 461);
        let (code, first, session) = setup(&mut a, &track, "RTP/AVP;multicast");
        assert_eq!(code, 200);
        assert!(
            first.contains("destination=239.255.3.1;port=5004-5005;ttl=1"),
            "{first}"
        );
        let mut b = RtspClient::connect(&url).unwrap();
        let (_, joined, _) = setup(&mut b, &track, "RTP/AVP;multicast");
        assert!(
            joined.contains("destination=239.255.3.1;"),
            "same window: {joined}"
        );
        let session = session.unwrap();
        let r = a
            .request(
                "PLAY",
                &url,
                &[("Session", &session), ("Range", "npt=5-")],
                &[],
            )
            .unwrap();
        assert_eq!(r.status, 457, "a shared stream plays from its start");
        let r = a
            .request("PLAY", &url, &[("Session", &session)], &[])
            .unwrap();
        assert_eq!(r.status, 200);
        std::thread::sleep(Duration::from_millis(600));
        let mut c = RtspClient::connect(&url).unwrap();
        let wanted = "RTP/AVP;multicast;destination=239.255.3.9;port=6000-6001;ttl=1";
        let (code, later, _) = setup(&mut c, &track, wanted);
        assert_eq!(code, 200, "{later}");
        assert!(
            !later.contains("239.255.3.9") && later.contains("port=5004-5005"),
            "the server picks the group and port: {later}"
        );
        let mut d = RtspClient::connect(&url).unwrap();
        let (_, next, _) = setup(&mut d, &track, "RTP/AVP;multicast");
        assert!(
            !next.contains("239.255.3.1;"),
            "after the first group started, the next viewer gets another: {next}"
        );
        server.assert_healthy();
    });
}

/// `name=value` of a Transport header.
fn param<'a>(transport: &'a str, name: &str) -> &'a str {
    transport_param(transport, name).unwrap_or_else(|| panic!("no {name} in {transport}"))
}

/// A socket that receives group `group` on `port`, as players open one.
pub(crate) fn join(group: &str, port: u16) -> std::net::UdpSocket {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_address(true).unwrap();
    let any = std::net::Ipv4Addr::UNSPECIFIED;
    s.bind(&std::net::SocketAddr::from((any, port)).into())
        .unwrap();
    s.join_multicast_v4(&group.parse().unwrap(), &any).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.into()
}

/// RTP packets of SSRC `ssrc` that arrive on `socket` within `limit`.
pub(crate) fn count_ssrc(socket: &std::net::UdpSocket, ssrc: u32, limit: Duration) -> usize {
    let (end, mut buf, mut n) = (std::time::Instant::now() + limit, [0u8; 2048], 0);
    while std::time::Instant::now() < end {
        if let Ok(len) = socket.recv(&mut buf)
            && len >= 12
            && u32::from_be_bytes(buf[8..12].try_into().unwrap()) == ssrc
        {
            n += 1;
        }
    }
    n
}

#[test]
fn a_repair_stream_goes_to_the_group_beside_its_track() {
    in_private_network(|| {
        let mut server = Server::start_ingested("multicast = true\nmulticast_batch_ms = 0\n");
        let url = server.url("clip.ts");
        let mut c = RtspClient::connect(&url).unwrap();
        let track = c.describe_fec().unwrap().track_urls[0].clone();
        let (code, source, session) = setup(&mut c, &track, "RTP/AVP;multicast");
        assert_eq!(code, 200, "{source}");
        let session = session.unwrap();
        let headers = [("Transport", "RTP/AVP;multicast"), ("Session", &session)];
        let r = c
            .request("SETUP", &format!("{track}-fec"), &headers, &[])
            .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        let repair = r.header("Transport").unwrap().to_owned();
        let group = param(&source, "destination");
        assert_eq!(param(&repair, "destination"), group);
        assert_eq!(
            (param(&source, "port"), param(&repair, "port")),
            ("5004-5005", "5006-5007"),
            "the repair stream on the ports after the title's one track"
        );
        let ssrc = |t: &str| u32::from_str_radix(param(t, "ssrc"), 16).unwrap();
        let (source_rx, repair_rx) = (join(group, 5004), join(group, 5006));
        let r = c
            .request("PLAY", &url, &[("Session", &session)], &[])
            .unwrap();
        assert_eq!(r.status, 200);
        std::thread::scope(|s| {
            let sources = s.spawn(|| count_ssrc(&source_rx, ssrc(&source), Duration::from_secs(2)));
            let repairs = count_ssrc(&repair_rx, ssrc(&repair), Duration::from_secs(2));
            let sources = sources.join().unwrap();
            assert!(sources > 50, "{sources} source packets in 2 s");
            assert!(
                repairs > 0 && repairs < sources,
                "{repairs} repair packets beside {sources} source packets"
            );
        });
        server.assert_healthy();
    });
}

/// RTP packets of any SSRC arriving on `socket` within `limit`.
fn count_any(socket: &std::net::UdpSocket, limit: Duration) -> usize {
    let (end, mut buf, mut n) = (std::time::Instant::now() + limit, [0u8; 2048], 0);
    while std::time::Instant::now() < end {
        if socket.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    n
}

/// A client asking for SSDP's group and port (every UPnP device listens
/// there) gets a group and the port of the server's pool: nothing goes to
/// the group it named.
#[test]
fn a_clients_destination_and_port_are_ignored() {
    in_private_network(|| {
        // The default pool, 239.255.0.0/16, holds SSDP's group.
        let mut server = Server::start("multicast = true\nmulticast_batch_ms = 0\n");
        let url = server.url("clip.ts");
        let mut c = RtspClient::connect(&url).unwrap();
        let track = c.describe().unwrap().track_urls[0].clone();
        let asked = "RTP/AVP;multicast;destination=239.255.255.250;port=1900-1901";
        let (code, got, session) = setup(&mut c, &track, asked);
        assert_eq!(code, 200, "{got}");
        assert!(
            got.contains("destination=239.255.0.1;port=5004-5005;"),
            "{got}"
        );
        let (ssdp, pool) = (join("239.255.255.250", 1900), join("239.255.0.1", 5004));
        let session = session.unwrap();
        let r = c
            .request("PLAY", &url, &[("Session", &session)], &[])
            .unwrap();
        assert_eq!(r.status, 200);
        let ssrc = u32::from_str_radix(param(&got, "ssrc"), 16).unwrap();
        std::thread::scope(|s| {
            let to_ssdp = s.spawn(|| count_any(&ssdp, Duration::from_secs(2)));
            let to_pool = count_ssrc(&pool, ssrc, Duration::from_secs(2));
            assert!(to_pool > 50, "{to_pool} packets to the pool's group");
            assert_eq!(to_ssdp.join().unwrap(), 0, "packets to SSDP's group");
        });
        server.assert_healthy();
    });
}

/// Without `multicast = true` a multicast SETUP gets 461 with the reason;
/// a client offering unicast next gets unicast.
#[test]
fn multicast_without_the_opt_in_gets_461() {
    let mut server = Server::start("");
    let url = server.url("clip.ts");
    let mut c = RtspClient::connect(&url).unwrap();
    let track = c.describe().unwrap().track_urls[0].clone();
    let r = c
        .request("SETUP", &track, &[("Transport", "RTP/AVP;multicast")], &[])
        .unwrap();
    assert_eq!(r.status, 461);
    let why = String::from_utf8_lossy(&r.body);
    assert!(why.contains("does not offer"), "{why}");
    let either = "RTP/AVP;multicast,RTP/AVP;unicast;client_port=50100-50101";
    let (code, got, _) = setup(&mut c, &track, either);
    assert_eq!(code, 200, "{got}");
    assert!(got.contains("unicast;client_port=50100-50101"), "{got}");
    server.assert_healthy();
}

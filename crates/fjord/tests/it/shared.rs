//! `udp_sockets = "shared"` (the default): every UDP session gets the same
//! server port pair, RTP and RTCP come from it, and RTCP from the clients
//! reaches the right session, from their own addresses only.

use std::{
    net::{SocketAddr, UdpSocket},
    time::{Duration, Instant},
};

use fjord_client::RtspClient;

use crate::common::{Server, clip_bytes, transport_param};

/// A client's UDP side, set up by hand to see where packets come from.
struct Client {
    rtsp: RtspClient,
    rtp: UdpSocket,
    rtcp: UdpSocket,
    server_port: (u16, u16),
    session: String,
}

/// DESCRIBE and SETUP over UDP to a fresh pair of ports; `Err` is the
/// SETUP's status when it is not 200.
fn setup(server: &Server, rtp: UdpSocket, rtcp: UdpSocket) -> Result<Client, u16> {
    let mut rtsp = RtspClient::connect(&server.url("clip.ts")).unwrap();
    let d = rtsp.describe().expect("DESCRIBE");
    let track = d.track_urls[0].clone();
    let ports = format!(
        "RTP/AVP;unicast;client_port={}-{}",
        rtp.local_addr().unwrap().port(),
        rtcp.local_addr().unwrap().port()
    );
    let r = rtsp
        .request("SETUP", &track, &[("Transport", &ports)], &[])
        .unwrap();
    if !r.is_success() {
        return Err(r.status);
    }
    let transport = r.header("Transport").unwrap().to_string();
    let (a, b) = transport_param(&transport, "server_port")
        .and_then(|v| v.split_once('-'))
        .unwrap_or_else(|| panic!("server_port in {transport}"));
    let session = r.header("Session").unwrap().split(';').next().unwrap();
    let session = session.trim().to_string();
    rtsp.set_session_id(Some(&session));
    Ok(Client {
        rtsp,
        rtp,
        rtcp,
        server_port: (a.parse().unwrap(), b.parse().unwrap()),
        session,
    })
}

fn sockets() -> (UdpSocket, UdpSocket) {
    let rtp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    rtp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    (rtp, rtcp)
}

/// UDP sockets on this host connected to `client` (`/proc/net/udp`: the
/// clients' sockets here are unconnected, so these are the server's).
fn connected_to(client: SocketAddr) -> usize {
    let SocketAddr::V4(client) = client else {
        return 0;
    };
    // The kernel prints the address as the u32 in memory, the port as a
    // number.
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(client.ip().octets()),
        client.port()
    );
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|l| l.split_whitespace().nth(2) == Some(want.as_str()))
        .count()
}

/// An RTCP RR with one report block claiming `lost` packets lost.
fn rr(lost: u32) -> Vec<u8> {
    let mut p = vec![0x81, 201, 0, 7];
    p.extend(0xabcu32.to_be_bytes());
    p.extend(1u32.to_be_bytes());
    p.extend((lost & 0xff_ffff).to_be_bytes());
    p.extend(1000u32.to_be_bytes());
    p.extend(7u32.to_be_bytes());
    p.extend([0; 8]);
    p
}

/// Every RTP packet until `quiet` passes without one: payloads in order of
/// arrival, checking each came from `from`.
fn receive(rtp: &UdpSocket, from: SocketAddr) -> Vec<u8> {
    let mut payload = Vec::new();
    let mut buf = [0u8; 2048];
    let mut last_seq: Option<u16> = None;
    loop {
        let (n, src) = match rtp.recv_from(&mut buf) {
            Ok(r) => r,
            Err(_) => return payload,
        };
        assert_eq!(src, from, "RTP comes from the announced server_port");
        let seq = u16::from_be_bytes([buf[2], buf[3]]);
        if let Some(l) = last_seq {
            assert_eq!(seq, l.wrapping_add(1), "no packet lost or reordered");
        }
        last_seq = Some(seq);
        payload.extend_from_slice(&buf[12..n]);
    }
}

#[test]
fn udp_sessions_share_one_server_port_pair_and_rtcp_is_routed_by_client_address() {
    // A's RTP leaves from a connected socket of its own on the shared
    // port, B's from its engine thread's unconnected one.
    let server = Server::start("udp_connected_streams = 1\n");
    let (rtp_a, rtcp_a) = sockets();
    let (rtp_b, rtcp_b) = sockets();
    let mut a = setup(&server, rtp_a, rtcp_a).unwrap();
    let mut b = setup(&server, rtp_b, rtcp_b).unwrap();
    assert_eq!(a.server_port, b.server_port, "one server port pair");
    assert_eq!(a.server_port.1, a.server_port.0 + 1);
    // The same client ports for a second stream: refused while in use.
    let dup = (
        UdpSocket::bind("127.0.0.1:0").unwrap(),
        a.rtcp.try_clone().unwrap(),
    );
    let dup_status = setup(&server, dup.0, dup.1).err();
    assert_eq!(
        dup_status,
        Some(461),
        "a client RTCP address routes one stream"
    );
    let server_rtp: SocketAddr = format!("127.0.0.1:{}", a.server_port.0).parse().unwrap();
    let server_rtcp: SocketAddr = format!("127.0.0.1:{}", a.server_port.1).parse().unwrap();
    a.rtsp.play(None).expect("PLAY a");
    b.rtsp.play(None).expect("PLAY b");
    let (a_rtp, b_rtp) = (a.rtp.local_addr().unwrap(), b.rtp.local_addr().unwrap());
    assert_eq!(connected_to(a_rtp), 1, "A has a connected socket");
    assert_eq!(connected_to(b_rtp), 0, "B sends from its thread's socket");
    // Reports from each client's RTCP port, and a stranger's.
    a.rtcp.send_to(&rr(5), server_rtcp).unwrap();
    b.rtcp.send_to(&rr(9), server_rtcp).unwrap();
    b.rtcp.send_to(&rr(11), server_rtcp).unwrap();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger.send_to(&rr(99), server_rtcp).unwrap();
    // RTCP from the client's RTP port is from an address nobody announced.
    a.rtp.send_to(&rr(77), server_rtcp).unwrap();
    let src = clip_bytes();
    let (got_a, got_b) = std::thread::scope(|s| {
        let ta = s.spawn(|| receive(&a.rtp, server_rtp));
        let tb = s.spawn(|| receive(&b.rtp, server_rtp));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(got_a == src, "session A: the whole title, byte for byte");
    assert!(got_b == src, "session B: the whole title, byte for byte");
    // Sender reports and BYE come from the RTCP port of the pair.
    a.rtcp
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let (_, from) = a.rtcp.recv_from(&mut [0u8; 1500]).expect("an SR");
    assert_eq!(from, server_rtcp, "RTCP comes from the announced port");
    for c in [&mut a, &mut b] {
        c.rtsp.teardown().expect("TEARDOWN");
    }
    // The reports reached their own sessions only (logged at the end).
    let deadline = Instant::now() + Duration::from_secs(5);
    let ended = |id: &str| {
        server
            .log_text()
            .lines()
            .find(|l| l.contains("session ended") && l.contains(id))
            .map(str::to_string)
    };
    while (ended(&a.session).is_none() || ended(&b.session).is_none()) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (la, lb) = (ended(&a.session).unwrap(), ended(&b.session).unwrap());
    assert!(
        la.contains("receiver_reports=1") && la.contains("lost=5"),
        "A: {la}"
    );
    assert!(
        lb.contains("receiver_reports=2") && lb.contains("lost=11"),
        "B: {lb}"
    );
    // A's socket closed with its stream, and its place came back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while connected_to(a_rtp) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(connected_to(a_rtp), 0, "A's connected socket closed");
    // After TEARDOWN the route is gone: the same client ports set up again.
    let mut again = setup(
        &server,
        a.rtp.try_clone().unwrap(),
        a.rtcp.try_clone().unwrap(),
    )
    .expect("route removed at TEARDOWN");
    again.rtsp.play(None).expect("PLAY again");
    assert_eq!(connected_to(a_rtp), 1, "the place given back is taken");
}

#[test]
fn per_session_sockets_still_give_each_session_its_own_pair() {
    let server = Server::start("udp_sockets = \"per-session\"\n");
    let (rtp_a, rtcp_a) = sockets();
    let (rtp_b, rtcp_b) = sockets();
    let mut a = setup(&server, rtp_a, rtcp_a).unwrap();
    let b = setup(&server, rtp_b, rtcp_b).unwrap();
    assert_ne!(a.server_port, b.server_port);
    a.rtsp.play(None).expect("PLAY");
    let from: SocketAddr = format!("127.0.0.1:{}", a.server_port.0).parse().unwrap();
    assert!(receive(&a.rtp, from) == clip_bytes());
}

/// `sendmmsg` sends a run of bursts on one socket per call: a stream with
/// a connected socket of its own (`udp_connected_streams`) or a port pair
/// of its own (`per-session`) goes out from that socket, so from the
/// `server_port` SETUP announced, as a stream on the shared socket does.
#[test]
fn sendmmsg_sends_every_stream_from_its_announced_port() {
    for config in [
        "datapath = \"sendmmsg\"\n",
        "datapath = \"sendmmsg\"\nudp_connected_streams = 0\n",
        "datapath = \"sendmmsg\"\nudp_sockets = \"per-session\"\n",
    ] {
        let server = Server::start(config);
        let (rtp, rtcp) = sockets();
        let mut a = setup(&server, rtp, rtcp).unwrap();
        let server_rtp: SocketAddr = format!("127.0.0.1:{}", a.server_port.0).parse().unwrap();
        a.rtsp.play(None).expect("PLAY");
        assert!(
            receive(&a.rtp, server_rtp) == clip_bytes(),
            "{config}: the whole title, byte for byte"
        );
    }
}

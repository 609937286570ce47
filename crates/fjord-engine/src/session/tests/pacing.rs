//! Packets leave on schedule, as the title stores them, over UDP and TCP.

use std::{
    io::Read,
    net::{TcpListener, TcpStream},
};

use super::*;
use crate::{datapath, interleaved::Connection};

#[test]
fn packets_leave_on_schedule_within_the_burst_limit() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    let info = s.play(Start::Resume, Until::Previous, 1, Instant::now());
    assert_eq!(
        (info.packet, info.seq, info.rtptime),
        (0, 65534, u32::MAX - 100)
    );

    let t0 = Instant::now();
    s.start(t0, 0);
    // Due at 0 and 10 ms: inside the 15 ms burst; 20 ms is not.
    let (a, wake) = tick(&mut s, t0, usize::MAX);
    // Wake a quarter burst before the next one is due.
    let slack = Duration::from_millis(15) / 4;
    assert_eq!(a.len(), 2);
    assert_eq!(wake, Some(t0 + Duration::from_millis(20) - slack));
    let (b, wake) = tick(&mut s, t0 + Duration::from_millis(20) - slack, usize::MAX);
    assert_eq!(wake, Some(t0 + Duration::from_millis(40) - slack));
    let all: Vec<_> = a.into_iter().chain(b).collect();
    let seqs: Vec<u16> = all.iter().map(|p| p.0).collect();
    assert_eq!(seqs, [65534, 65535, 0, 1], "sequence numbers wrap");
    assert_eq!(
        all[2].1,
        (u32::MAX - 100).wrapping_add(1800),
        "timestamps wrap"
    );
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, p)| p.2 == vec![i as u8; 188])
    );
}

/// RFC 2326 `Speed` 2: the same packets, with the same timestamps,
/// due twice as fast.
#[test]
fn a_faster_speed_sends_the_same_packets_sooner() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    s.set_speed(2 * REAL_TIME);
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 0);
    // The 15 ms burst covers 30 ms of the title: packets 0-3.
    let (a, wake) = tick(&mut s, t0, usize::MAX);
    assert_eq!(a.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(a[3].1.wrapping_sub(a[0].1), 30 * 90, "timestamps as stored");
    let slack = Duration::from_millis(15) / 4;
    assert_eq!(
        wake,
        Some(t0 + Duration::from_millis(20) - slack),
        "40 ms in 20"
    );
}

#[test]
fn a_full_socket_keeps_the_rest_for_the_next_tick() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 0);
    let late = t0 + Duration::from_millis(50);
    let mut stats = ThreadStats::default();
    let (a, wake) = tick_counted(&mut s, late, 3, &mut stats);
    assert_eq!(a.len(), 3);
    assert_eq!(wake, Some(late + RETRY));
    // Late in a tick on time, with nothing waited for: held, no reason.
    assert_eq!((stats.late, stats.late_socket), (3, 0));
    let mut stats = ThreadStats::default();
    let (b, _) = tick_counted(&mut s, late + RETRY, usize::MAX, &mut stats);
    assert_eq!(b[0].2, vec![3; 188], "resumes with the first unsent packet");
    assert_eq!(b[0].0, a[2].0.wrapping_add(1));
    // Packets 3 and 4 (due at 30 and 40 ms) late after the full socket.
    assert_eq!((stats.late, stats.late_socket), (2, 2));
    let (c, _) = tick_counted(&mut s, t0 + Duration::from_millis(90), 9, &mut stats);
    // Packets 7-9; 7 and 8 late, with no full socket since a send.
    assert_eq!(c.len(), 3);
    assert_eq!((stats.late, stats.late_socket), (4, 2));
}

/// A session whose header fields are the title's sends the packet file's
/// bytes, which are exactly the packets it would build, one contiguous
/// run per burst; a session with its own fields builds its headers.
#[test]
fn prefabricated_packets_are_the_packets_a_session_builds() {
    let dir = tempfile::tempdir().unwrap();
    let (title, expected) = prefabricated_title(dir.path());
    let ids = title.prefab_ids(0).unwrap();
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let make = |ssrc: u32| {
        let rtp = udp();
        rtp.connect(&rx.local_addr().unwrap().into()).unwrap();
        let mut s = Session::new(
            SessionSpec {
                id: 1,
                title: title.clone(),
                track: 0,
                ssrc,
                seq0: ids.seq0,
                ts0: ids.ts0,
                output: Output::Udp {
                    rtp: rtp.into(),
                    rtp_peer: rx.local_addr().unwrap(),
                    rtcp: udp().into(),
                    rtcp_peer: "127.0.0.1:9".parse().unwrap(),
                },
            },
            "test",
        );
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        s
    };
    let t0 = Instant::now();
    let late = t0 + Duration::from_secs(1);
    let burst = Duration::from_millis(15);
    let (mut prefab, mut built, mut own) = (make(ids.ssrc), make(ids.ssrc), make(!ids.ssrc));
    let (mut a, mut b, mut c) = (Batch::default(), Batch::default(), Batch::default());
    for s in [&mut prefab, &mut built, &mut own] {
        s.start(t0, 0);
    }
    assert_eq!(prefab.collect(late, burst, true, &mut a).source, 12);
    assert_eq!(built.collect(late, burst, false, &mut b).source, 12);
    assert_eq!(own.collect(late, burst, true, &mut c).source, 12);
    for (i, want) in expected.iter().enumerate() {
        let (p, q) = (&a.packets[i], &b.packets[i]);
        assert!(p.head().is_empty() && !q.head().is_empty(), "packet {i}");
        assert_eq!(
            p.parts().collect::<Vec<_>>().concat(),
            q.parts().collect::<Vec<_>>().concat()
        );
        assert_eq!(
            sent_packet(p),
            (
                ids.seq0.wrapping_add(i as u16),
                ids.ts0.wrapping_add(i as u32 * 900),
                want.clone()
            )
        );
        let own = c.packets[i].head();
        assert_eq!(
            own[8..12],
            (!ids.ssrc).to_be_bytes(),
            "packet {i}: own SSRC"
        );
        if i > 0 {
            let prev = a.packets[i - 1].payload.as_ptr_range().end;
            assert_eq!(
                prev,
                p.payload.as_ptr(),
                "packet {i} follows packet {}",
                i - 1
            );
        }
    }
    // Over UDP the burst leaves as it was made.
    let mut sent = [0];
    let mut path = datapath::by_name("gso").unwrap();
    path.send(&a, &mut sent).unwrap();
    assert_eq!(sent, [12]);
    let mut buf = [0u8; 2048];
    for (i, want) in expected.iter().enumerate() {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[rtp::RTP_HEADER_LEN..n], &want[..], "UDP packet {i}");
    }
}

/// Payload-header bytes and both file runs arrive as the RTP payload,
/// over UDP (through a data path) and interleaved in the RTSP
/// connection; RTCP counts them as payload octets.
#[test]
fn payload_headers_and_split_runs_arrive_intact_over_udp_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let (title, expected) = prefixed_title(dir.path());
    let t0 = Instant::now();
    let late = t0 + Duration::from_secs(1);

    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let rtp = udp();
    rtp.connect(&rx.local_addr().unwrap().into()).unwrap();
    let mut s = session_with(
        title.clone(),
        Output::Udp {
            rtp: rtp.into(),
            rtp_peer: rx.local_addr().unwrap(),
            rtcp: udp().into(),
            rtcp_peer: rx.local_addr().unwrap(),
        },
    );
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    s.start(t0, 0);
    let mut batch = Batch::default();
    assert_eq!(
        s.collect(late, Duration::from_millis(15), true, &mut batch),
        Planned {
            source: 12,
            repair: 0
        }
    );
    let mut sent = [0];
    let mut path = datapath::by_name("mmap-writev").unwrap();
    path.send(&batch, &mut sent).unwrap();
    assert_eq!(sent, [12]);
    let mut buf = [0u8; 2048];
    for (i, want) in expected.iter().enumerate() {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(buf[1] & 0x7f, 96, "UDP packet {i}: payload type");
        assert_eq!(
            &buf[rtp::RTP_HEADER_LEN..n],
            &want[..],
            "UDP packet {i}: payload"
        );
    }

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let (server, _) = listener.accept().unwrap();
    let mut connections = HashMap::new();
    connections.insert(
        7,
        Connection::new(OwnedFd::from(server), Duration::from_secs(10), None).unwrap(),
    );
    let mut s = session_with(
        title,
        Output::Interleaved {
            conn: 7,
            rtp_channel: 0,
            rtcp_channel: 1,
        },
    );
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    s.start(t0, 0);
    let mut stats = ThreadStats::default();
    let mut p = Pacing {
        now: late,
        start: TickStart::default(),
        sent_at: late,
        stats: &mut stats,
        burst: Duration::from_millis(15),
        rtcp_interval: Duration::from_secs(5),
        connections: &mut connections,
    };
    s.pump_interleaved(&mut p);
    let mut rtp_frames = vec![];
    let mut octets = None;
    while rtp_frames.len() < expected.len() || octets.is_none() {
        let mut prefix = [0u8; 4];
        client.read_exact(&mut prefix).unwrap();
        assert_eq!(prefix[0], b'$');
        let mut frame = vec![0; usize::from(u16::from_be_bytes([prefix[2], prefix[3]]))];
        client.read_exact(&mut frame).unwrap();
        if prefix[1] == 0 {
            rtp_frames.push(frame[rtp::RTP_HEADER_LEN..].to_vec());
        } else if let Some(RtcpInfo::SenderReport { octets: o, .. }) =
            parse_compound(&frame).unwrap().first()
        {
            octets = Some(*o);
        }
    }
    assert_eq!(rtp_frames, expected, "interleaved payloads");
    let total: usize = expected.iter().map(Vec::len).sum();
    assert_eq!(octets, Some(total as u32), "RTCP payload octets");
}

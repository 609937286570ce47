//! Sessions' unit tests: ids, receiver reports, the table's caps and
//! liveness, and RTCP routed to them through a shared port pair.

use std::{net::UdpSocket, time::Duration};

use socket2::Socket;

use super::*;
use fjord_engine::Command;

use crate::{
    core::{Core, CoreLock},
    outbox::Outbox,
    ports::PortPool,
    shared::{RouteError, SharedPorts},
};

#[test]
fn session_ids_are_16_uppercase_hex_digits_both_ways() {
    let id = SessionId::random();
    let wire = id.to_string();
    assert_eq!(wire.len(), 16);
    assert_eq!(SessionId::parse(&wire), Some(id));
    let small = SessionId::parse("00000000000000AB").unwrap();
    assert_eq!(small.to_string(), "00000000000000AB");
    for other in [
        "00000000000000ab",
        "+0000000000000AB",
        "0000000000000000A",
        "00000000000000A",
        " 00000000000000A",
        "",
    ] {
        assert_eq!(SessionId::parse(other), None, "{other:?}");
    }
}

#[test]
fn receiver_stats_keep_the_latest_report() {
    let mut r = ReceiverStats::default();
    let block = |lost, jitter| ReportBlock {
        ssrc: 7,
        fraction_lost: 3,
        cumulative_lost: lost,
        highest_seq: 70_000,
        jitter,
        lsr: 0,
        dlsr: 0,
    };
    r.record(&block(5, 90));
    r.record(&block(9, 45));
    assert_eq!(
        (r.reports, r.cumulative_lost, r.jitter, r.highest_seq),
        (2, 9, 45, 70_000)
    );
    r.record(&block(0xFF_FFFF, 45));
    assert_eq!(r.lost(), -1, "one duplicate");
}

fn title(dir: &std::path::Path) -> Arc<Title> {
    let media = dir.join("t.ts");
    let no_parity = &fjord_media::no_parity;
    let index = fjord_media::synthetic::write_constant_rate(&media, 188, 10_000_000, 10, no_parity)
        .unwrap();
    Arc::new(Title::new(index, &media).unwrap())
}

/// The engine commands in `out`: (shard, Remove's id), or none for others.
fn removed(out: &Outbox) -> Vec<(u64, Option<u64>)> {
    (out.commands().iter())
        .map(|(shard, c)| match c {
            Command::Remove { id } => (*shard, Some(*id)),
            _ => (*shard, None),
        })
        .collect()
}

#[test]
fn caps_are_checked_server_first_and_zero_is_no_cap() {
    let caps = Caps {
        total: 10,
        per_connection: 2,
        per_address: 3,
    };
    assert_eq!(caps.room((0, 0, 0)), Ok(()));
    assert_eq!(caps.room((9, 1, 2)), Ok(()));
    assert_eq!(caps.room((10, 0, 0)), Err(Full::Server));
    assert_eq!(caps.room((5, 2, 0)), Err(Full::Connection));
    assert_eq!(caps.room((5, 1, 3)), Err(Full::Address));
    let uncapped = Caps {
        per_connection: 0,
        per_address: 0,
        ..caps
    };
    assert_eq!(uncapped.room((9, 9, 9)), Ok(()));
}

/// One connection, then one address, reach their caps while others are
/// admitted; ending a session gives its place back.
#[test]
fn the_table_counts_sessions_per_connection_and_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let title = title(dir.path());
    let mut out = Outbox::default();
    let mut core = Core::default();
    let caps = Caps {
        total: 100,
        per_connection: 2,
        per_address: 3,
    };
    let new = |conn, ip: &str| {
        let peer = SocketAddr::new(ip.parse().unwrap(), 9);
        Session::new(
            SessionId::random(),
            (conn, peer),
            "t.ts".into(),
            title.clone(),
            Instant::now(),
        )
    };
    let first = new(1, "127.0.0.1");
    let first_id = first.id;
    assert_eq!(core.sessions.insert_within(first, caps), Ok(()));
    let mut add = |s| core.sessions.insert_within(s, caps);
    assert_eq!(add(new(1, "127.0.0.1")), Ok(()));
    assert_eq!(add(new(1, "127.0.0.1")), Err(Full::Connection));
    assert_eq!(add(new(2, "127.0.0.2")), Ok(()), "another client");
    assert_eq!(
        add(new(3, "::ffff:127.0.0.1")),
        Ok(()),
        "another connection"
    );
    assert_eq!(add(new(4, "127.0.0.1")), Err(Full::Address));
    assert!(core.remove(first_id, &mut out));
    assert!(out.commands().is_empty(), "it had no stream");
    let mut add = |s| core.sessions.insert_within(s, caps);
    assert_eq!(add(new(4, "127.0.0.1")), Ok(()), "its place is free again");
    assert_eq!(add(new(1, "127.0.0.1")), Err(Full::Address));
    let tight = Caps { total: 4, ..caps };
    let s = new(5, "127.0.0.3");
    assert_eq!(core.sessions.insert_within(s, tight), Err(Full::Server));
}

/// Requests and RTCP keep a session only once it has played.
#[test]
fn activity_keeps_only_a_session_that_played() {
    let dir = tempfile::tempdir().unwrap();
    let peer = SocketAddr::from(([127, 0, 0, 1], 9));
    let t0 = Instant::now();
    let at = |ms| t0 + std::time::Duration::from_millis(ms);
    let mut s = Session::new(
        SessionId::random(),
        (1, peer),
        "t.ts".into(),
        title(dir.path()),
        t0,
    );
    s.touch(at(5));
    s.on_rtcp(|_| true, &[], at(6));
    assert_eq!(s.last_activity, t0, "keep-alives before PLAY");
    s.played(at(7));
    assert_eq!(s.last_activity, at(7));
    s.touch(at(9));
    assert_eq!(s.last_activity, at(9), "keep-alives after PLAY");
}

/// An RTCP RR with one report block about `ssrc`.
fn rr(ssrc: u32, lost: u32) -> Vec<u8> {
    let mut p = vec![0x81, 201, 0, 7];
    p.extend(0xabcu32.to_be_bytes());
    p.extend(ssrc.to_be_bytes());
    p.extend((lost & 0xff_ffff).to_be_bytes());
    p.extend(1000u32.to_be_bytes());
    p.extend(7u32.to_be_bytes());
    p.extend([0; 8]);
    p
}

fn routed_session(title: &Arc<Title>) -> Session {
    Session::new(
        SessionId::random(),
        (1, ([127, 0, 0, 1], 9).into()),
        "t.ts".into(),
        title.clone(),
        Instant::now(),
    )
}

fn reports(table: &CoreLock, id: SessionId, engine_id: u64) -> (u64, u32) {
    let mut core = table.lock();
    let Some(s) = core.sessions.get_mut(id) else {
        return (0, 0);
    };
    let st = s.streams.iter().find(|st| st.engine_id == engine_id);
    st.map_or((0, 0), |st| {
        (st.reports.reports, st.reports.cumulative_lost)
    })
}

const ROOM: Caps = Caps {
    total: 10,
    per_connection: 10,
    per_address: 10,
};

/// Receiver reports reach the stream whose client announced their
/// source address; a stranger's (another port, another host) are
/// dropped; a route goes with its stream; the table is bounded.
#[tokio::test]
async fn rtcp_is_routed_by_the_clients_address_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let table = Arc::new(CoreLock::default());
    let pool = PortPool::new(46000, 46099);
    let ports = SharedPorts::new(2, 2, 64, table.clone());
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let pair = ports.pair(ip, &pool).unwrap();
    assert!(
        Arc::ptr_eq(&pair, &ports.pair(ip, &pool).unwrap()),
        "one pair per address"
    );
    let port = |s: Arc<Socket>| s.local_addr().unwrap().as_socket().unwrap().port();
    assert_eq!(port(pair.rtp(0)), pair.rtp_port);
    assert_eq!(port(pair.rtp(1)), pair.rtp_port);
    assert_eq!(port(pair.rtcp()), pair.rtp_port + 1);
    let server_rtcp = SocketAddr::new(ip, pair.rtp_port + 1);
    let client_a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let client_b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (addr_a, addr_b) = (
        client_a.local_addr().unwrap(),
        client_b.local_addr().unwrap(),
    );
    let title = title(dir.path());
    let (mut a, mut b) = (routed_session(&title), routed_session(&title));
    let (ida, idb) = (a.id, b.id);
    for (s, id, client) in [(&mut a, 1, addr_a), (&mut b, 2, addr_b)] {
        s.add_stream(Stream {
            rtcp: StreamRtcp::Route(pair.clone(), client),
            ..Stream::test_stream(id)
        });
    }
    table.lock().sessions.insert_within(a, ROOM).unwrap();
    table.lock().sessions.insert_within(b, ROOM).unwrap();
    pair.route(addr_a, ida.number()).unwrap();
    pair.route(addr_b, idb.number()).unwrap();
    assert_eq!(pair.route(addr_a, idb.number()), Err(RouteError::Taken));
    assert_eq!(
        pair.route(stranger.local_addr().unwrap(), idb.number()),
        Err(RouteError::Full),
        "bounded"
    );
    client_a.send_to(&rr(1, 5), server_rtcp).unwrap();
    client_b.send_to(&rr(2, 9), server_rtcp).unwrap();
    client_b.send_to(&rr(2, 11), server_rtcp).unwrap();
    stranger.send_to(&rr(1, 99), server_rtcp).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while (reports(&table, ida, 1).0 < 1 || reports(&table, idb, 2).0 < 2)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The stranger's report was sent before the last ones were read.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(reports(&table, ida, 1), (1, 5), "A got its own report only");
    assert_eq!(
        reports(&table, idb, 2),
        (2, 11),
        "B got its own reports only"
    );
    assert!(!pair.deliver(stranger.local_addr().unwrap(), &rr(1, 1), Instant::now()));
    // A stream's route goes with it, and only its own.
    pair.unroute(addr_a, idb.number());
    assert_eq!(pair.route_count(), 2, "another session removes nothing");
    pair.unroute(addr_a, ida.number());
    assert_eq!(pair.route_count(), 1);
    assert!(!pair.deliver(addr_a, &rr(1, 1), Instant::now()));
    // A session that ends takes its routes with it; its address is free.
    let mut out = Outbox::default();
    assert!(table.lock().remove(idb, &mut out));
    assert_eq!(removed(&out), [(0, Some(2))], "its engine stream goes");
    assert_eq!(pair.route_count(), 0);
    assert!(!pair.deliver(addr_b, &rr(2, 1), Instant::now()));
    pair.route(addr_b, ida.number()).unwrap();
    assert!(pair.deliver(addr_b, &rr(1, 1), Instant::now()));
}

/// A TEARDOWN of one stream's URL ends that stream only; the session and
/// its other streams stay in the table.
#[test]
fn removing_some_streams_keeps_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut core = Core::default();
    let mut out = Outbox::default();
    let peer = SocketAddr::from(([127, 0, 0, 1], 9));
    let mut s = Session::new(
        SessionId::random(),
        (1, peer),
        "t.ts".into(),
        title(dir.path()),
        Instant::now(),
    );
    for id in [1, 2] {
        s.add_stream(Stream::test_stream(id));
    }
    let id = s.id;
    core.sessions.insert_within(s, ROOM).unwrap();
    core.remove_streams(id, |st| st.engine_id == 1, &mut out);
    assert_eq!(
        removed(&out),
        [(0, Some(1))],
        "that stream's engine stream only"
    );
    let s = core.sessions.get_mut(id).expect("the session stays");
    let left: Vec<u64> = s.streams.iter().map(|st| st.engine_id).collect();
    assert_eq!(left, [2]);
}

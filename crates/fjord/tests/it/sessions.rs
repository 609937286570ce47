//! What one client may hold: sessions per connection and per address are
//! capped (453 with the cap named), and a session that never plays keeps
//! its place only `session_timeout_s`, keep-alives or not.

use std::{
    net::IpAddr,
    time::{Duration, Instant},
};

use fjord_client::{Response, RtspClient};

use crate::common::Server;

/// A UDP SETUP of `clip.ts`'s track to client port `port`, with no PLAY
/// (nothing is sent to it).
fn setup(c: &mut RtspClient, track: &str, port: u16) -> Response {
    let transport = format!("RTP/AVP;unicast;client_port={port}-{}", port + 1);
    c.request("SETUP", track, &[("Transport", &transport)], &[])
        .unwrap()
}

fn client(server: &Server, from: &str) -> (RtspClient, String) {
    let from: IpAddr = from.parse().unwrap();
    let mut c = RtspClient::connect_from(&server.url("clip.ts"), from).unwrap();
    let track = c.describe().unwrap().track_urls[0].clone();
    (c, track)
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

#[test]
fn one_connection_and_one_address_get_their_cap_of_sessions_and_others_are_admitted() {
    let mut server =
        Server::start("max_sessions_per_connection = 2\nmax_sessions_per_address = 3\n");
    let (mut a, track) = client(&server, "127.0.0.1");
    assert_eq!(setup(&mut a, &track, 50_000).status, 200);
    assert_eq!(setup(&mut a, &track, 50_002).status, 200);
    let r = setup(&mut a, &track, 50_004);
    assert_eq!(r.status, 453, "a third session on one connection");
    assert!(
        body(&r).contains("max_sessions_per_connection"),
        "{}",
        body(&r)
    );
    let (mut b, _) = client(&server, "127.0.0.1");
    assert_eq!(
        setup(&mut b, &track, 50_006).status,
        200,
        "another connection"
    );
    let r = setup(&mut b, &track, 50_008);
    assert_eq!(r.status, 453, "a fourth session from one address");
    assert!(
        body(&r).contains("max_sessions_per_address"),
        "{}",
        body(&r)
    );
    let (mut c, _) = client(&server, "127.0.0.2");
    assert_eq!(setup(&mut c, &track, 50_010).status, 200, "another client");
    server.assert_healthy();
}

/// Keep-alives (OPTIONS, GET_PARAMETER naming the session) on an open
/// connection do not hold a session that never played: it goes
/// `session_timeout_s` after its SETUP, and its place and its admission
/// with it.
#[test]
fn a_session_never_played_is_torn_down_after_the_timeout_and_its_place_is_free() {
    let mut server = Server::start("session_timeout_s = 2\nmax_sessions = 1\n");
    let (mut a, track) = client(&server, "127.0.0.1");
    let r = setup(&mut a, &track, 50_020);
    assert_eq!(r.status, 200);
    let set_up = Instant::now();
    let session = r.header("Session").unwrap().split(';').next().unwrap();
    let session = session.to_owned();
    assert!(server.thread_total("promised_pps") > 0);
    let (mut b, _) = client(&server, "127.0.0.2");
    assert_eq!(
        setup(&mut b, &track, 50_022).status,
        453,
        "max_sessions = 1"
    );
    let url = server.url("clip.ts");
    let gone = loop {
        a.request("OPTIONS", &url, &[], &[]).unwrap();
        let r = a
            .request("GET_PARAMETER", &url, &[("Session", &session)], &[])
            .unwrap();
        if r.status != 200 {
            assert_eq!(r.status, 454);
            break set_up.elapsed();
        }
        assert!(set_up.elapsed() < Duration::from_secs(10), "kept alive");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(gone >= Duration::from_millis(1500), "gone after {gone:?}");
    assert_eq!(
        server.thread_total("promised_pps"),
        0,
        "its admission is released"
    );
    assert_eq!(
        setup(&mut b, &track, 50_022).status,
        200,
        "its place is free"
    );
    server.assert_healthy();
}

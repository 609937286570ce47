//! Every RTSP method and every status the methods send, through
//! [`super::handle`] with a client that is not a socket: a title on a
//! temporary disk, an engine with nothing to send, interleaved transport
//! (UDP would bind ports). Each test takes milliseconds.

use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use fjord_engine::{Engine, EngineConfig};
use fjord_proto::rtsp::{
    framing::{Frame, Limits, Request, next_frame},
    session::State,
};

use super::{Client, Reply};
use crate::drive::request as handle;
use crate::{Catalog, Config, Server, outbox::Outbox, session::SessionId};

/// A connection as the methods see it, keeping what they hand it.
struct FakeClient {
    id: u64,
    /// `None`: the socket cannot say (it was reset).
    peer: Option<SocketAddr>,
    sessions: Vec<SessionId>,
    channels: Vec<u8>,
    attached: bool,
}

impl FakeClient {
    fn new(id: u64) -> Self {
        Self {
            id,
            peer: Some(([198, 18, 0, 2], 40000).into()),
            sessions: vec![],
            channels: vec![],
            attached: false,
        }
    }
}

impl Client for FakeClient {
    fn id(&self) -> u64 {
        self.id
    }
    fn peer(&self) -> std::io::Result<SocketAddr> {
        self.peer
            .ok_or_else(|| std::io::ErrorKind::NotConnected.into())
    }
    fn local(&self) -> std::io::Result<SocketAddr> {
        self.peer
            .map(|_| ([198, 18, 0, 1], 8554).into())
            .ok_or_else(|| std::io::ErrorKind::NotConnected.into())
    }
    fn is_tls(&self) -> bool {
        false
    }
    fn add_session(&mut self, s: SessionId) {
        self.sessions.push(s);
    }
    fn channel_in_use(&self, channel: u8) -> bool {
        self.channels.contains(&channel)
    }
    fn use_channels(&mut self, channels: [u8; 2]) {
        self.channels.extend(channels);
    }
    fn free_channels(&mut self, channels: [u8; 2]) {
        self.channels.retain(|c| !channels.contains(c));
    }
    fn attach(&mut self, _: &mut Outbox) -> std::io::Result<()> {
        self.attached = true;
        Ok(())
    }
}

/// Writes `f.ts` in `dir`: a title like `t.ts` with 10:6 parity, so it has
/// repair streams (a few tests need it, and its parity takes time).
fn with_parity(dir: &Path) {
    let media = dir.join("f.ts");
    let params = fjord_fec::FecParams::new(10, 6).unwrap();
    let layouts = fjord_fec::layouts(fjord_fec::FecChoice::Fixed(params));
    fjord_media::synthetic::write_constant_rate(&media, 1316, 10_000_000, 1000, &layouts).unwrap();
    fjord_fec::protect(&media, &mut |_, _| {}).unwrap();
}

/// A server over `dir` holding `t.ts` (10 s, one track) and a note that
/// is not a title, with `config` on top of the defaults.
fn server(dir: &Path, config: Config) -> Server {
    let media = dir.join("t.ts");
    let no_parity = &fjord_media::no_parity;
    fjord_media::synthetic::write_constant_rate(&media, 1316, 10_000_000, 1000, no_parity).unwrap();
    std::fs::write(dir.join("notes.txt"), "not media").unwrap();
    let config = Config {
        root: dir.to_owned(),
        prefab: crate::config::PrefabMode::Off,
        ..config
    };
    let catalog = Catalog::new(
        &config.roots(),
        Default::default(),
        fjord_fec::FecChoice::Off,
        config.prefab,
        config.prefab_share_percent,
        None,
    )
    .unwrap();
    let engine = Engine::start(EngineConfig {
        threads: 1,
        burst: Duration::from_millis(10),
        rtcp_interval: Duration::from_secs(5),
        cname: "test".into(),
        datapath: "auto".into(),
        cpus: vec![],
        realtime: false,
        stall_timeout: Duration::from_secs(10),
        storage: None,
    })
    .unwrap();
    Server::new(config, catalog, engine, None, None).unwrap()
}

/// `text` (with `\n` line ends) as the request a client sent.
fn request(text: &str) -> Request {
    let wire = text.replace('\n', "\r\n") + "\r\n";
    match next_frame(wire.as_bytes(), &Limits::default()) {
        Ok(Some((Frame::Request(r), _))) => r,
        other => panic!("not a request: {other:?}"),
    }
}

/// The reply to `text`, its engine commands sent as the connection's
/// task sends them.
async fn ask(server: &Server, conn: &mut FakeClient, text: &str) -> Reply {
    ask_at(server, conn, text, Instant::now()).await
}

/// `text` answered as if it arrived at `now`.
async fn ask_at(server: &Server, conn: &mut FakeClient, text: &str, now: Instant) -> Reply {
    let mut reply = handle(server, conn, &request(text), now).await;
    std::mem::take(&mut reply.commands).send_to(&server.engine);
    reply
}

fn header<'a>(reply: &'a Reply, name: &str) -> &'a str {
    reply.response.get_header(name).unwrap_or_default()
}

/// The id of the session a reply names.
fn session_of(reply: &Reply) -> String {
    header(reply, "Session")
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

const URL: &str = "rtsp://198.18.0.1:8554/t.ts";

/// A server of the defaults over a temporary directory (kept while the
/// test holds it), and a client.
fn fixture() -> (tempfile::TempDir, Server, FakeClient) {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), Config::default());
    (dir, s, FakeClient::new(1))
}

/// A [`fixture`] whose client has set up track 1 over interleaved
/// channels 0-1: the session's id.
async fn tcp_session() -> (tempfile::TempDir, Server, FakeClient, String) {
    let (dir, s, mut c) = fixture();
    let id = session_of(&setup_tcp(&s, &mut c, 0, "").await);
    (dir, s, c, id)
}

/// SETUP of track 1 over interleaved channels `ch`-`ch+1`, in `session`.
async fn setup_tcp(server: &Server, conn: &mut FakeClient, ch: u8, session: &str) -> Reply {
    let session = match session {
        "" => String::new(),
        id => format!("Session: {id}\n"),
    };
    let text = format!(
        "SETUP {URL}/track1 RTSP/1.0\nCSeq: 3\n{session}Transport: RTP/AVP/TCP;interleaved={ch}-{}\n",
        ch + 1
    );
    ask(server, conn, &text).await
}

#[tokio::test]
async fn options_version_cseq_and_unknown_methods() {
    let (_dir, s, mut c) = fixture();
    let r = ask(&s, &mut c, &format!("OPTIONS {URL} RTSP/1.0\nCSeq: 1\n")).await;
    assert_eq!(r.response.status, 200);
    assert!(header(&r, "Public").contains("DESCRIBE, SETUP, PLAY, PAUSE, TEARDOWN"));
    let r = ask(&s, &mut c, &format!("OPTIONS {URL} RTSP/2.0\nCSeq: 1\n")).await;
    assert_eq!(r.response.status, 505);
    let r = ask(&s, &mut c, &format!("OPTIONS {URL} RTSP/1.0\n")).await;
    assert_eq!(r.response.status, 400, "no CSeq");
    for method in ["ANNOUNCE", "RECORD", "REDIRECT"] {
        let r = ask(&s, &mut c, &format!("{method} {URL} RTSP/1.0\nCSeq: 2\n")).await;
        assert_eq!(r.response.status, 405, "{method}");
        assert!(header(&r, "Allow").contains("PLAY"));
    }
    let r = ask(&s, &mut c, &format!("FLY {URL} RTSP/1.0\nCSeq: 2\n")).await;
    assert_eq!(r.response.status, 501);
}

#[tokio::test]
async fn describe_gives_sdp_of_titles_only() {
    let (_dir, s, mut c) = fixture();
    let r = ask(&s, &mut c, &format!("DESCRIBE {URL} RTSP/1.0\nCSeq: 2\n")).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(header(&r, "Content-Base"), format!("{URL}/"));
    assert_eq!(header(&r, "Content-Type"), "application/sdp");
    let sdp = String::from_utf8(r.response.body.clone()).unwrap();
    assert!(
        sdp.contains("a=control:track1") && sdp.contains("a=range:npt=0-10"),
        "{sdp}"
    );
    for (uri, why) in [
        (format!("{URL}/track1"), "a track has no SDP"),
        ("rtsp://198.18.0.1:8554/gone.ts".to_owned(), "no such file"),
        (
            "rtsp://198.18.0.1:8554/../t.ts".to_owned(),
            "not a canonical path",
        ),
        (format!("{URL}?broadcast"), "not broadcast"),
    ] {
        let r = ask(&s, &mut c, &format!("DESCRIBE {uri} RTSP/1.0\nCSeq: 2\n")).await;
        assert_eq!(r.response.status, 404, "{why}");
    }
    // A file that is not media says why (HTTP answers 404 for it).
    let r = ask(
        &s,
        &mut c,
        "DESCRIBE rtsp://198.18.0.1:8554/notes.txt RTSP/1.0\nCSeq: 2\n",
    )
    .await;
    assert_eq!(r.response.status, 415);
}

#[tokio::test]
async fn setup_makes_a_session_on_the_connection_and_refuses_what_it_cannot() {
    let (dir, s, mut c) = fixture();
    let r = setup_tcp(&s, &mut c, 0, "").await;
    assert_eq!(r.response.status, 200);
    assert!(header(&r, "Transport").starts_with("RTP/AVP/TCP;unicast;interleaved=0-1"));
    let id = session_of(&r);
    assert!(header(&r, "Session").ends_with(";timeout=60"));
    assert!(c.attached && c.sessions.len() == 1 && c.channel_in_use(1));
    assert!(s.core.lock().sessions.get(&id).is_some());
    let cases = [
        (
            "/track1",
            "RTP/AVP/TCP;interleaved=0-1",
            "",
            461,
            "channels in use",
        ),
        (
            "/track2",
            "RTP/AVP/TCP;interleaved=2-3",
            "",
            404,
            "no such track",
        ),
        (
            "/track1-fec",
            "RTP/AVP/TCP;interleaved=2-3",
            "",
            404,
            "no parity",
        ),
        (
            "/track1",
            "RTP/AVP/TCP;interleaved=2-3",
            "0000000000000001",
            454,
            "unknown session",
        ),
        (
            "/track1",
            "RTP/AVP/TCP;interleaved=2-3",
            &id,
            455,
            "track set up twice",
        ),
        (
            "/track1",
            "RTP/AVP;multicast",
            "",
            461,
            "multicast not offered",
        ),
        (
            "/track1",
            "RTP/SAVP;unicast;client_port=5000-5001",
            "",
            461,
            "SRTP",
        ),
        (
            "/track1",
            "RTP/AVP;unicast;client_port=5000-5001;destination=198.18.9.9",
            "",
            403,
            "elsewhere",
        ),
    ];
    for (track, transport, session, code, why) in cases {
        let session = match session {
            "" => String::new(),
            id => format!("Session: {id}\n"),
        };
        let text =
            format!("SETUP {URL}{track} RTSP/1.0\nCSeq: 3\n{session}Transport: {transport}\n");
        let r = ask(&s, &mut c, &text).await;
        assert_eq!(r.response.status, code, "{why}");
    }
    let r = ask(
        &s,
        &mut c,
        &format!("SETUP {URL}/track1 RTSP/1.0\nCSeq: 3\n"),
    )
    .await;
    assert_eq!(r.response.status, 400, "no Transport");
    let other = "rtsp://198.18.0.1:8554/u.ts/track1";
    std::fs::copy(dir.path().join("t.ts"), dir.path().join("u.ts")).unwrap();
    let text = format!("SETUP {other} RTSP/1.0\nCSeq: 3\nSession: {id}\nTransport: RTP/AVP/TCP\n");
    assert_eq!(
        ask(&s, &mut c, &text).await.response.status,
        459,
        "one title a session"
    );
    let mut stranger = FakeClient::new(2);
    let r = setup_tcp(&s, &mut stranger, 2, &id).await;
    assert_eq!(r.response.status, 459, "another connection's session");
    assert_eq!(
        s.core.lock().sessions.all().count(),
        1,
        "refusals leave no session behind"
    );
}

#[tokio::test]
async fn setup_refuses_past_the_session_caps_with_453() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        max_sessions_per_connection: 2,
        ..Config::default()
    };
    let s = server(dir.path(), config);
    let mut c = FakeClient::new(1);
    for ch in [0, 2] {
        assert_eq!(setup_tcp(&s, &mut c, ch, "").await.response.status, 200);
    }
    let r = setup_tcp(&s, &mut c, 4, "").await;
    assert_eq!(r.response.status, 453);
    assert!(String::from_utf8_lossy(&r.response.body).contains("max_sessions_per_connection"));
    assert!(!c.channel_in_use(4), "a refused SETUP takes no channel");
}

#[tokio::test]
async fn play_pause_and_teardown_follow_the_state_machine() {
    let (_dir, s, mut c) = fixture();
    let say = |method: &str, extra: &str| format!("{method} {URL} RTSP/1.0\nCSeq: 4\n{extra}");
    assert_eq!(
        ask(&s, &mut c, &say("PLAY", "")).await.response.status,
        455,
        "no session"
    );
    let id = session_of(&setup_tcp(&s, &mut c, 0, "").await);
    let session = format!("Session: {id}\n");
    let r = ask(
        &s,
        &mut c,
        &say("PLAY", &format!("{session}Range: npt=20-\n")),
    )
    .await;
    assert_eq!(r.response.status, 457, "past the end");
    let r = ask(
        &s,
        &mut c,
        &say("PLAY", &format!("{session}Range: smpte=0:00:01-\n")),
    )
    .await;
    assert_eq!(r.response.status, 457, "a unit not served");
    let r = ask(&s, &mut c, &say("PLAY", &format!("{session}Scale: 0.5\n"))).await;
    assert_eq!(r.response.status, 456, "no slow motion");
    let r = ask(
        &s,
        &mut c,
        &say("PLAY", &format!("{session}Range: npt=2-\n")),
    )
    .await;
    assert_eq!(r.response.status, 200);
    assert_eq!(header(&r, "Range"), "npt=2.000-10.000");
    assert!(header(&r, "RTP-Info").starts_with(&format!("url={URL}/track1;seq=")));
    assert_eq!(
        r.start.as_ref().map(|p| p.streams.len()),
        Some(1),
        "starts once written"
    );
    let mut stranger = FakeClient::new(2);
    let r = ask(&s, &mut stranger, &say("PLAY", &session)).await;
    assert_eq!(r.response.status, 454, "another connection's session");
    let r = ask(&s, &mut c, &say("PAUSE", &format!("{session}Range: x\n"))).await;
    assert_eq!(r.response.status, 457);
    let r = ask(&s, &mut c, &say("PAUSE", &session)).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(r.start.map(|_| ()), None);
    assert_eq!(
        ask(&s, &mut c, &say("TEARDOWN", &session))
            .await
            .response
            .status,
        200
    );
    assert!(!c.channel_in_use(0), "its channels are free again");
    assert_eq!(
        ask(&s, &mut c, &say("PLAY", &session))
            .await
            .response
            .status,
        454
    );
    assert_eq!(
        ask(&s, &mut c, &say("TEARDOWN", &session))
            .await
            .response
            .status,
        454
    );
}

#[tokio::test]
async fn parameters_keep_alive_and_none_can_be_set() {
    let (_dir, s, mut c, id) = tcp_session().await;
    let get = format!("GET_PARAMETER {URL} RTSP/1.0\nCSeq: 5\nSession: {id}\n");
    assert_eq!(ask(&s, &mut c, &get).await.response.status, 200);
    let get = format!("GET_PARAMETER {URL} RTSP/1.0\nCSeq: 5\nSession: 0000000000000001\n");
    assert_eq!(ask(&s, &mut c, &get).await.response.status, 454);
    let set = format!(
        "SET_PARAMETER {URL} RTSP/1.0\nCSeq: 6\nContent-Type: text/parameters\nContent-Length: 9\n\nvolume: 1"
    );
    let wire = set.replace('\n', "\r\n");
    let Ok(Some((Frame::Request(req), _))) = next_frame(wire.as_bytes(), &Limits::default()) else {
        panic!("SET_PARAMETER did not parse");
    };
    assert_eq!(
        handle(&s, &mut c, &req, Instant::now())
            .await
            .response
            .status,
        451
    );
}

#[tokio::test]
async fn credentials_are_asked_before_any_method_but_options() {
    let dir = tempfile::tempdir().unwrap();
    let config: Config =
        toml::from_str("[[user]]\nname = \"alice\"\npassword = \"correct horse battery\"\n")
            .unwrap();
    let s = server(dir.path(), config);
    let mut c = FakeClient::new(1);
    let r = ask(&s, &mut c, &format!("OPTIONS {URL} RTSP/1.0\nCSeq: 1\n")).await;
    assert_eq!(r.response.status, 200);
    let r = ask(&s, &mut c, &format!("DESCRIBE {URL} RTSP/1.0\nCSeq: 2\n")).await;
    assert_eq!(r.response.status, 401);
    assert!(header(&r, "WWW-Authenticate").starts_with("Digest "));
    assert!(
        r.response.body.is_empty() || !String::from_utf8_lossy(&r.response.body).contains("t.ts")
    );
}

#[tokio::test]
async fn admission_refuses_streams_and_speeds_past_the_engine_capacity() {
    let dir = tempfile::tempdir().unwrap();
    // The title is 100 packets a second.
    let config = Config {
        capacity_pps_per_core: 150,
        ..Config::default()
    };
    let s = server(dir.path(), config);
    let mut c = FakeClient::new(1);
    let id = session_of(&setup_tcp(&s, &mut c, 0, "").await);
    let r = setup_tcp(&s, &mut c, 2, "").await;
    assert_eq!(r.response.status, 453, "a second stream does not fit");
    assert_eq!(
        s.core.lock().sessions.all().count(),
        1,
        "and leaves no session"
    );
    let play = |extra: &str| format!("PLAY {URL} RTSP/1.0\nCSeq: 4\nSession: {id}\n{extra}");
    let r = ask(&s, &mut c, &play("Speed: 2\n")).await;
    assert_eq!(r.response.status, 453, "twice the rate does not fit");
    let state = s.core.lock().sessions.get(&id).unwrap().state;
    assert_eq!(
        state,
        State::Ready,
        "a refused PLAY leaves the session as it was"
    );
    let r = ask(&s, &mut c, &play("Speed: 1.4\nScale: 2\n")).await;
    assert_eq!(r.response.status, 456, "Scale and Speed together");
    let r = ask(&s, &mut c, &play("Speed: 1.4\n")).await;
    assert_eq!((r.response.status, header(&r, "Speed")), (200, "1.4"));
}

#[tokio::test]
async fn sessions_time_out_unless_kept_alive_after_play() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), Config::default());
    let (timeout, t0) = (Duration::from_secs(60), Instant::now());
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut c = FakeClient::new(1);
    let setup = format!("SETUP {URL}/track1 RTSP/1.0\nCSeq: 1\nTransport: RTP/AVP/TCP\n");
    let never_played = session_of(&ask_at(&s, &mut c, &setup, t0).await);
    let mut d = FakeClient::new(2);
    let played = session_of(&ask_at(&s, &mut d, &setup, t0).await);
    let keepalive = |id: &str| format!("GET_PARAMETER {URL} RTSP/1.0\nCSeq: 2\nSession: {id}\n");
    let play = format!("PLAY {URL} RTSP/1.0\nCSeq: 3\nSession: {played}\n");
    assert_eq!(ask_at(&s, &mut d, &play, at(10)).await.response.status, 200);
    for t in [30, 50] {
        ask_at(&s, &mut c, &keepalive(&never_played), at(t)).await;
        ask_at(&s, &mut d, &keepalive(&played), at(t)).await;
    }
    assert_eq!(
        super::expire_idle(&s, at(59)),
        t0 + timeout,
        "none idle yet"
    );
    let next = super::expire_idle(&s, at(61));
    assert!(
        s.core.lock().sessions.get(&never_played).is_none(),
        "keep-alives before PLAY do not keep"
    );
    assert!(
        s.core.lock().sessions.get(&played).is_some(),
        "kept alive after its PLAY"
    );
    assert_eq!(
        next,
        at(50) + timeout,
        "it is due a timeout after its last request"
    );
    let r = ask_at(&s, &mut c, &keepalive(&never_played), at(62)).await;
    assert_eq!(r.response.status, 454, "a timed-out session is gone");
    super::expire_idle(&s, at(111));
    assert!(s.core.lock().sessions.all().next().is_none());
}

#[tokio::test]
async fn repair_streams_are_offered_on_request_and_follow_their_track() {
    let dir = tempfile::tempdir().unwrap();
    with_parity(dir.path());
    let s = server(dir.path(), Config::default());
    let mut c = FakeClient::new(1);
    let url = "rtsp://198.18.0.1:8554/f.ts";
    let describe = format!("DESCRIBE {url} RTSP/1.0\nCSeq: 2\n");
    let r = ask(&s, &mut c, &describe).await;
    assert_eq!(header(&r, "Supported"), "fjord.fec", "the title has parity");
    let sdp = String::from_utf8(r.response.body.clone()).unwrap();
    assert!(!sdp.contains("FEC-FR"), "not offered unless asked: {sdp}");
    let r = ask(&s, &mut c, &format!("{describe}Supported: fjord.fec\n")).await;
    let sdp = String::from_utf8(r.response.body.clone()).unwrap();
    assert!(sdp.contains("a=group:FEC-FR S1 R1") && sdp.contains("a=control:track1-fec"));
    let setup = |track: &str, transport: &str, session: &str| {
        let session = match session {
            "" => String::new(),
            id => format!("Session: {id}\n"),
        };
        format!("SETUP {url}/{track} RTSP/1.0\nCSeq: 3\n{session}Transport: {transport}\n")
    };
    let tcp = |ch: u8| format!("RTP/AVP/TCP;interleaved={ch}-{}", ch + 1);
    let r = ask(&s, &mut c, &setup("track1-fec", &tcp(0), "")).await;
    assert_eq!(r.response.status, 455, "the source track first");
    let id = session_of(&ask(&s, &mut c, &setup("track1", &tcp(0), "")).await);
    let udp = "RTP/AVP;unicast;client_port=5000-5001";
    let r = ask(&s, &mut c, &setup("track1-fec", udp, &id)).await;
    assert_eq!(r.response.status, 461, "the source track's transport");
    let r = ask(&s, &mut c, &setup("track1-fec", &tcp(2), &id)).await;
    assert_eq!(r.response.status, 200);
    let r = ask(&s, &mut c, &setup("track1-fec", &tcp(4), &id)).await;
    assert_eq!(r.response.status, 455, "set up once");
    let teardown = |path: &str| format!("TEARDOWN {url}{path} RTSP/1.0\nCSeq: 9\nSession: {id}\n");
    let r = ask(&s, &mut c, &teardown("/track1-fec")).await;
    assert_eq!(
        r.response.status, 455,
        "a repair stream ends with its track"
    );
    assert_eq!(
        ask(&s, &mut c, &teardown("/track2")).await.response.status,
        404
    );
    let r = ask(&s, &mut c, &teardown("/track1")).await;
    assert_eq!(r.response.status, 200, "the track and its repair stream");
    assert!(
        s.core.lock().sessions.get(&id).is_none(),
        "its last streams end the session"
    );
    assert!(!c.channel_in_use(0) && !c.channel_in_use(2));
}

#[tokio::test]
async fn a_connection_that_cannot_name_its_addresses_gets_500() {
    let (_dir, s, mut c) = fixture();
    c.peer = None;
    let r = ask(&s, &mut c, &format!("DESCRIBE {URL} RTSP/1.0\nCSeq: 2\n")).await;
    assert_eq!(r.response.status, 500);
    let udp = "RTP/AVP;unicast;client_port=5000-5001";
    let r = ask(
        &s,
        &mut c,
        &format!("SETUP {URL}/track1 RTSP/1.0\nCSeq: 3\nTransport: {udp}\n"),
    )
    .await;
    assert_eq!(r.response.status, 500);
    assert!(
        s.core.lock().sessions.all().next().is_none(),
        "and keeps no session"
    );
}

/// The reply to `text` with its engine commands not yet sent.
async fn ask_unsent(server: &Server, conn: &mut FakeClient, text: &str) -> Reply {
    handle(server, conn, &request(text), Instant::now()).await
}

/// A reply's engine commands as (shard, what, engine id), then sent.
fn commands(server: &Server, reply: &mut Reply) -> Vec<(u64, &'static str, u64)> {
    use fjord_engine::Command as C;
    let named = (reply.commands.commands().iter())
        .map(|(shard, c)| match c {
            C::AttachConnection { conn, .. } => (*shard, "attach", *conn),
            C::Add(spec) => (*shard, "add", spec.track as u64),
            C::AttachRepair { id, .. } => (*shard, "repair", *id),
            C::Pause { id } => (*shard, "pause", *id),
            C::Remove { id } => (*shard, "remove", *id),
            _ => (*shard, "other", 0),
        })
        .collect();
    std::mem::take(&mut reply.commands).send_to(&server.engine);
    named
}

#[tokio::test]
async fn each_method_hands_the_engine_its_commands_and_a_refusal_none() {
    let dir = tempfile::tempdir().unwrap();
    with_parity(dir.path());
    let s = server(dir.path(), Config::default());
    let mut c = FakeClient::new(7);
    let url = "rtsp://198.18.0.1:8554/f.ts";
    let setup = |track: &str, ch: u8, session: &str| {
        let session = match session {
            "" => String::new(),
            id => format!("Session: {id}\n"),
        };
        let t = format!("RTP/AVP/TCP;interleaved={ch}-{}", ch + 1);
        format!("SETUP {url}/{track} RTSP/1.0\nCSeq: 3\n{session}Transport: {t}\n")
    };
    let mut r = ask_unsent(&s, &mut c, &setup("track1", 0, "")).await;
    let id = session_of(&r);
    assert_eq!(
        commands(&s, &mut r),
        [(7, "add", 0)],
        "the stream, on the connection's thread"
    );
    assert!(c.attached, "which has the connection's write side");
    let mut r = ask_unsent(&s, &mut c, &setup("track1", 2, &id)).await;
    assert_eq!(r.response.status, 455);
    assert_eq!(commands(&s, &mut r), [], "a refused SETUP sends nothing");
    let mut r = ask_unsent(&s, &mut c, &setup("track1-fec", 2, &id)).await;
    let stream = match commands(&s, &mut r)[..] {
        [(7, "repair", source)] => source,
        ref other => panic!("the repair stream joins its source: {other:?}"),
    };
    let play = format!("PLAY {url} RTSP/1.0\nCSeq: 4\nSession: {id}\n");
    assert_eq!(ask(&s, &mut c, &play).await.response.status, 200);
    let pause = format!("PAUSE {url} RTSP/1.0\nCSeq: 5\nSession: {id}\n");
    let mut r = ask_unsent(&s, &mut c, &pause).await;
    assert_eq!(
        commands(&s, &mut r),
        [(7, "pause", stream)],
        "the source stream pauses; its repair stream with it"
    );
    let teardown = format!("TEARDOWN {url} RTSP/1.0\nCSeq: 6\nSession: {id}\n");
    let mut r = ask_unsent(&s, &mut c, &teardown).await;
    let removed = commands(&s, &mut r);
    assert!(removed.contains(&(7, "remove", stream)), "{removed:?}");
    assert!(removed.iter().all(|(.., what, _)| *what == "remove"));
}

#[tokio::test]
async fn play_takes_speed_within_max_speed_and_refuses_what_the_title_cannot() {
    let (_dir, s, mut c, id) = tcp_session().await;
    let play = |extra: &str| format!("PLAY {URL} RTSP/1.0\nCSeq: 4\nSession: {id}\n{extra}");
    for (extra, code, why) in [
        ("Speed: 8\n", 456, "past max_speed (4)"),
        ("Speed: fast\n", 400, "not a number"),
        ("Scale: 2\nSpeed: 2\n", 456, "Scale and Speed together"),
        (
            "Scale: 2\n",
            456,
            "a title without key frames plays at Scale 1 only",
        ),
        ("Scale: 1.5\n", 456, "whole Scales only"),
    ] {
        let r = ask(&s, &mut c, &play(extra)).await;
        assert_eq!(r.response.status, code, "{why}");
        assert!(!r.response.body.is_empty(), "the reason is given: {why}");
    }
    let r = ask(&s, &mut c, &play("Speed: 2\nRange: npt=3-\n")).await;
    assert_eq!(r.response.status, 200);
    assert_eq!(header(&r, "Speed"), "2");
    assert_eq!(header(&r, "Range"), "npt=3.000-10.000");
    // Playing: no more tracks, and a pause point must lie ahead.
    let r = setup_tcp(&s, &mut c, 2, &id).await;
    assert_eq!(r.response.status, 455, "no track added while playing");
    let pause = format!("PAUSE {URL} RTSP/1.0\nCSeq: 5\nSession: {id}\nRange: npt=1\n");
    let r = ask(&s, &mut c, &pause).await;
    assert_eq!(r.response.status, 457, "a point behind where it plays");
    let r = ask(&s, &mut c, &play("")).await;
    assert_eq!(r.response.status, 200, "PLAY while playing, no Range: on");
}

// The engine's answers as events: a method asks, the test answers.

fn asked(step: super::Step) -> super::ask::Ask {
    match step {
        super::Step::Ask(a) => a,
        super::Step::Reply(r) => panic!("replied {} instead of asking", r.response.status),
    }
}

fn replied(step: super::Step) -> Reply {
    match step {
        super::Step::Reply(r) => r,
        super::Step::Ask(_) => panic!("asked instead of replying"),
    }
}

/// The first step of the decision on `text` past the opening of its
/// title (by the catalog, from the test's files), its commands not sent.
async fn first_step(server: &Server, conn: &mut FakeClient, text: &str) -> super::Step {
    step_at(server, conn, text, Instant::now()).await
}

/// [`first_step`] of `text` arriving at `now`.
async fn step_at(server: &Server, conn: &mut FakeClient, text: &str, now: Instant) -> super::Step {
    match super::handle(server, conn, &request(text), now) {
        super::Step::Ask(a) if matches!(a.question, super::Question::Open(_)) => {
            let (_, question, resume) = a.into_parts();
            let opened = crate::drive::answer(server, question).await;
            super::on_answer(server, conn, resume, opened)
        }
        step => step,
    }
}

/// Where the engine would say a stream starts: at `time_ns`, first
/// sequence number `seq`.
fn engine_info(seq: u16, time_ns: u64) -> fjord_engine::PlayInfo {
    fjord_engine::PlayInfo {
        packet: 0,
        seq,
        rtptime: 1234,
        time_ns,
        end_ns: 10_000_000_000,
        queued: false,
    }
}

const S: u64 = 1_000_000_000;

#[tokio::test]
async fn play_asks_the_engine_and_replies_from_its_answer() {
    use super::{Answer, Question, on_answer};
    let (_dir, s, mut c, id) = tcp_session().await;
    let play = |extra: &str| format!("PLAY {URL} RTSP/1.0\nCSeq: 4\nSession: {id}\n{extra}");
    let a = asked(first_step(&s, &mut c, &play("Range: npt=2-\n")).await);
    match &a.question {
        Question::Play(p) => {
            assert_eq!(p.streams.len(), 1);
            assert_eq!((p.seek_ns, p.end_ns), (Some(2 * S), Some(None)));
        }
        _ => panic!("a PLAY with a Range positions its streams"),
    }
    let r = replied(on_answer(
        &s,
        &mut c,
        a,
        Answer::Played(Ok(vec![engine_info(7, 2 * S)])),
    ));
    assert_eq!(r.response.status, 200);
    assert_eq!(header(&r, "Range"), "npt=2.000-10.000");
    assert!(header(&r, "RTP-Info").ends_with("/track1;seq=7;rtptime=1234"));
    let start = r
        .start
        .expect("the stream starts once the reply is written");
    assert_eq!((start.streams.len(), start.origin_ns), (1, 2 * S));
    for (failed, code) in [(454, 454), (500, 500)] {
        let a = asked(first_step(&s, &mut c, &play("")).await);
        let r = replied(on_answer(&s, &mut c, a, Answer::Played(Err(failed))));
        assert_eq!(r.response.status, code);
    }
    let a = asked(first_step(&s, &mut c, &play("")).await);
    let r = replied(on_answer(&s, &mut c, a, Answer::Played(Ok(vec![]))));
    assert_eq!(r.response.status, 500, "an answer missing a stream");
}

#[tokio::test]
async fn an_engine_answer_for_a_session_that_ended_meanwhile_gets_454() {
    use super::{Answer, on_answer};
    let (_dir, s, mut c, id) = tcp_session().await;
    let say = |method: &str, extra: &str| {
        format!("{method} {URL} RTSP/1.0\nCSeq: 4\nSession: {id}\n{extra}")
    };
    let played = asked(first_step(&s, &mut c, &say("PLAY", "Range: npt=1-\n")).await);
    assert_eq!(ask(&s, &mut c, &say("PLAY", "")).await.response.status, 200);
    let paused = asked(first_step(&s, &mut c, &say("PAUSE", "Range: npt=5\n")).await);
    let r = ask(&s, &mut c, &say("TEARDOWN", "")).await;
    assert_eq!(r.response.status, 200);
    let info = vec![engine_info(1, S)];
    let r = replied(on_answer(&s, &mut c, played, Answer::Played(Ok(info))));
    assert_eq!(r.response.status, 454, "PLAY");
    let r = replied(on_answer(&s, &mut c, paused, Answer::PausedAt(Ok(()))));
    assert_eq!(r.response.status, 454, "PAUSE");
}

#[tokio::test]
async fn pause_at_a_point_asks_the_engine_and_refuses_one_behind() {
    use super::{Answer, Question, on_answer};
    let (_dir, s, mut c, id) = tcp_session().await;
    let say = |method: &str, extra: &str| {
        format!("{method} {URL} RTSP/1.0\nCSeq: 4\nSession: {id}\n{extra}")
    };
    assert_eq!(ask(&s, &mut c, &say("PLAY", "")).await.response.status, 200);
    let state = || s.core.lock().sessions.get(&id).unwrap().state;
    let a = asked(first_step(&s, &mut c, &say("PAUSE", "Range: npt=5\n")).await);
    assert!(
        matches!(&a.question, Question::PauseAt { streams, ns, .. } if streams.len() == 1 && *ns == 5 * S)
    );
    let r = replied(on_answer(&s, &mut c, a, Answer::PausedAt(Err(457))));
    assert_eq!(r.response.status, 457);
    assert!(String::from_utf8_lossy(&r.response.body).contains("not ahead"));
    assert_eq!(
        state(),
        State::Playing,
        "a refused pause point pauses nothing"
    );
    let a = asked(first_step(&s, &mut c, &say("PAUSE", "Range: npt=5-\n")).await);
    let r = replied(on_answer(&s, &mut c, a, Answer::PausedAt(Ok(()))));
    assert_eq!(r.response.status, 200);
    assert_eq!(state(), State::Ready, "paused");
    let r = replied(first_step(&s, &mut c, &say("PAUSE", "")).await);
    assert_eq!(r.response.status, 200, "a PAUSE now asks nothing");
}

/// Writes `gop.h264`: a 10 s video track with a key frame every second.
fn with_key_frames(dir: &Path) {
    use fjord_media::plan::{PacketRecord, SyncPoint};
    let (mut packets, mut sync) = (vec![], vec![]);
    for f in 0..250u64 {
        let ns = f * S / 25;
        if f % 25 == 0 {
            let packet = packets.len() as u32;
            sync.push(SyncPoint {
                packet,
                time_ns: ns,
            });
        }
        let i = packets.len() as u64;
        packets.push(PacketRecord::file_run(
            ns,
            (ns / 1000 * 90 / 1000) as u32,
            i * 100,
            100,
        ));
    }
    let data = vec![0u8; packets.len() * 100];
    let media = dir.join("gop.h264");
    fjord_media::synthetic::write_video_track_with_sync(&media, &data, packets, sync, 10 * S)
        .unwrap();
}

#[tokio::test]
async fn a_trick_play_without_a_range_asks_where_the_title_stands_first() {
    use super::{Answer, Question, on_answer};
    let dir = tempfile::tempdir().unwrap();
    with_key_frames(dir.path());
    let s = server(dir.path(), Config::default());
    let mut c = FakeClient::new(1);
    let url = "rtsp://198.18.0.1:8554/gop.h264";
    let setup =
        format!("SETUP {url}/track1 RTSP/1.0\nCSeq: 3\nTransport: RTP/AVP/TCP;interleaved=0-1\n");
    let r = ask(&s, &mut c, &setup).await;
    assert_eq!(
        r.response.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&r.response.body)
    );
    let id = session_of(&r);
    let play = format!("PLAY {url} RTSP/1.0\nCSeq: 4\nSession: {id}\nScale: 2\n");
    let a = asked(first_step(&s, &mut c, &play).await);
    assert!(
        matches!(a.question, Question::Position { shard: 1, .. }),
        "on the connection's thread"
    );
    let a = asked(on_answer(
        &s,
        &mut c,
        a,
        Answer::Position(Some(3 * S + S / 2)),
    ));
    match &a.question {
        Question::Play(p) => {
            assert_eq!(
                p.seek_ns,
                Some(3 * S),
                "from the key frame before where it stands"
            );
            assert_eq!(p.rate.scale, 2);
        }
        _ => panic!("then it positions the streams"),
    }
    let r = replied(on_answer(
        &s,
        &mut c,
        a,
        Answer::Played(Ok(vec![engine_info(1, 3 * S)])),
    ));
    assert_eq!((r.response.status, header(&r, "Scale")), (200, "2"));
    let a = asked(first_step(&s, &mut c, &play.replace("Scale: 2", "Scale: -2")).await);
    let a = asked(on_answer(&s, &mut c, a, Answer::Position(None)));
    assert!(
        matches!(&a.question, Question::Play(p) if p.seek_ns.is_none()),
        "stands nowhere: resumes"
    );
}

#[tokio::test]
async fn a_multicast_reply_due_for_a_session_that_ended_gets_454() {
    use super::{Answer, Question, Step, ask::Pending, on_answer};
    let (_dir, s, mut c) = fixture();
    let gone = SessionId::random();
    let at = Instant::now() + Duration::from_millis(500);
    let a = asked(Step::ask(Question::Wait(at), Pending::GroupReply(gone, at)));
    let r = replied(on_answer(&s, &mut c, a, Answer::Woke));
    assert_eq!(
        r.response.status, 454,
        "the session ended while the group started"
    );
    let a = asked(Step::ask(Question::Wait(at), Pending::GroupReply(gone, at)));
    let r = replied(on_answer(&s, &mut c, a, Answer::Played(Ok(vec![]))));
    assert_eq!(r.response.status, 500, "an answer to another question");
}

// Binding as actions: a UDP SETUP asks for its sockets, the test answers.

const UDP_SETUP: &str = "SETUP rtsp://198.18.0.1:8554/t.ts/track1 RTSP/1.0\nCSeq: 3\nTransport: RTP/AVP;unicast;client_port=5000-5001\n";

fn no_load(s: &Server) -> bool {
    s.core
        .lock()
        .sessions
        .admission
        .loads()
        .iter()
        .all(|&l| l == 0)
}

#[tokio::test]
async fn a_udp_setup_asks_for_its_sockets_and_a_failed_bind_refuses_it() {
    use super::{Answer, Bind, Question, on_answer};
    let dir = tempfile::tempdir().unwrap();
    let shared = server(dir.path(), Config::default());
    let mut c = FakeClient::new(1);
    let a = asked(first_step(&shared, &mut c, UDP_SETUP).await);
    assert!(
        matches!(a.question, Question::Bind(Bind::Shared { rtp, .. }) if rtp.port() == 5000),
        "the shared pair, by default"
    );
    let per_session = Config {
        udp_sockets: "per-session".into(),
        ..Config::default()
    };
    let s = server(dir.path(), per_session);
    let mut c = FakeClient::new(1);
    let a = asked(first_step(&s, &mut c, UDP_SETUP).await);
    match &a.question {
        Question::Bind(Bind::Own { local, rtp_peer }) => {
            assert_eq!(
                local.to_string(),
                "198.18.0.1",
                "on the address it was asked on"
            );
            assert_eq!(
                rtp_peer.to_string(),
                "198.18.0.2:5000",
                "to the client's port"
            );
        }
        _ => panic!("a pair of the session's own"),
    }
    assert_eq!(
        s.core.lock().sessions.all().count(),
        1,
        "the session waits in the table"
    );
    assert!(!no_load(&s), "with its stream's reservation");
    let taken = std::io::Error::new(std::io::ErrorKind::AddrInUse, "every pair is taken");
    let r = replied(on_answer(&s, &mut c, a, Answer::Bound(Err(taken))));
    assert_eq!(r.response.status, 453);
    assert!(String::from_utf8_lossy(&r.response.body).contains("every pair is taken"));
    assert_eq!(
        s.core.lock().sessions.all().count(),
        0,
        "the session made for it ends"
    );
    assert!(no_load(&s), "and gives its reservation back");
    // The session ends while its sockets are bound.
    let a = asked(first_step(&s, &mut c, UDP_SETUP).await);
    let id = s.core.lock().sessions.all().next().unwrap().id;
    s.end_session(id);
    let gone = std::io::Error::other("not bound");
    let r = replied(on_answer(&s, &mut c, a, Answer::Bound(Err(gone))));
    assert_eq!(r.response.status, 454);
    assert!(no_load(&s));
    // Elsewhere than the client: refused before anything is bound.
    let elsewhere = UDP_SETUP.replace("unicast;", "unicast;destination=198.18.0.9;");
    let r = replied(first_step(&s, &mut c, &elsewhere).await);
    assert_eq!(r.response.status, 403);
    assert!(no_load(&s) && s.core.lock().sessions.all().next().is_none());
}

#[tokio::test]
async fn an_rtcp_reader_stops_with_its_stream_or_at_once_without_one() {
    use super::{Answer, Question, Step, ask::Pending, on_answer};
    let (_dir, s, mut c, id) = tcp_session().await;
    let engine_id = s.core.lock().sessions.get(&id).unwrap().streams[0].engine_id;
    let session = SessionId::parse(&id).unwrap();
    let reading = |stream: (SessionId, u64), reader: &tokio::task::JoinHandle<()>| {
        let pending = Pending::Reading(stream, Box::new(super::status(200)));
        let a = asked(Step::ask(Question::Wait(Instant::now()), pending));
        let r = replied(on_answer(
            &s,
            &mut FakeClient::new(1),
            a,
            Answer::Reading(Some(reader.abort_handle())),
        ));
        assert_eq!(r.response.status, 200, "the SETUP's reply");
    };
    let orphan = tokio::spawn(std::future::pending::<()>());
    reading((session, engine_id + 1), &orphan);
    assert!(
        orphan.await.unwrap_err().is_cancelled(),
        "no such stream: stopped"
    );
    let reader = tokio::spawn(std::future::pending::<()>());
    reading((session, engine_id), &reader);
    tokio::task::yield_now().await;
    assert!(!reader.is_finished(), "read while the stream lives");
    let teardown = format!("TEARDOWN {URL} RTSP/1.0\nCSeq: 9\nSession: {id}\n");
    assert_eq!(ask(&s, &mut c, &teardown).await.response.status, 200);
    assert!(reader.await.unwrap_err().is_cancelled(), "stopped with it");
}

// Opening as a question: a DESCRIBE and a new session's SETUP ask for
// their title and go on with the catalog's answer.

#[tokio::test]
async fn describe_and_a_new_sessions_setup_go_on_from_the_titles_opening() {
    use super::{Answer, Question, Step, on_answer};
    use crate::catalog::CatalogError;
    let (_dir, s, mut c) = fixture();
    let opens = |step: Step| match step {
        Step::Ask(a) => match &a.question {
            Question::Open(t) => (t.to_string(), a),
            _ => panic!("asked something before the title"),
        },
        Step::Reply(r) => panic!("replied {} before opening", r.response.status),
    };
    let first =
        |c: &mut FakeClient, text: &str| super::handle(&s, c, &request(text), Instant::now());
    let describe = format!("DESCRIBE {URL} RTSP/1.0\nCSeq: 2\n");
    let (title, a) = opens(first(&mut c, &describe));
    assert_eq!(title, "t.ts");
    let slow = CatalogError::Unavailable("the origin is slow".into());
    let r = replied(on_answer(&s, &mut c, a, Answer::Opened(Err(slow))));
    assert_eq!(r.response.status, 503);
    assert_eq!(header(&r, "Retry-After"), "2", "says when to ask again");
    let (_, a) = opens(first(&mut c, &describe));
    let r = replied(on_answer(
        &s,
        &mut c,
        a,
        Answer::Opened(s.catalog.open("t.ts").await),
    ));
    assert_eq!(r.response.status, 200);
    assert_eq!(header(&r, "Content-Base"), format!("{URL}/"));
    assert!(
        String::from_utf8_lossy(&r.response.body).contains("IN IP4 198.18.0.1\r\n"),
        "the origin is the address asked on"
    );

    let setup =
        format!("SETUP {URL}/track1 RTSP/1.0\nCSeq: 3\nTransport: RTP/AVP/TCP;interleaved=0-1\n");
    let (title, a) = opens(first(&mut c, &setup));
    assert_eq!(title, "t.ts");
    let r = replied(on_answer(
        &s,
        &mut c,
        a,
        Answer::Opened(Err(CatalogError::NotFound)),
    ));
    assert_eq!(r.response.status, 404);
    assert!(
        s.core.lock().sessions.all().next().is_none() && no_load(&s),
        "no session kept"
    );
    let (_, a) = opens(first(&mut c, &setup));
    let mut r = replied(on_answer(
        &s,
        &mut c,
        a,
        Answer::Opened(s.catalog.open("t.ts").await),
    ));
    assert_eq!(r.response.status, 200);
    std::mem::take(&mut r.commands).send_to(&s.engine);
    assert_eq!(c.sessions.len(), 1, "a session held by the connection");
    // A SETUP into its session has the session's title: it asks nothing.
    let again = setup.replace("0-1\n", &format!("2-3\nSession: {}\n", session_of(&r)));
    let r = replied(first(&mut c, &again));
    assert_eq!(r.response.status, 455, "track already set up");
}

// Multicast groups in the core: a group's sockets and its start are
// asked of the driver, the test answers (no socket: the engine here sends
// nothing, so a group's stream "sends" on a stand-in output).

const MULTICAST_SETUP: &str =
    "SETUP rtsp://198.18.0.1:8554/t.ts/track1 RTSP/1.0\nCSeq: 3\nTransport: RTP/AVP;multicast\n";

fn multicast_server(dir: &Path, pool: &str) -> Server {
    let config = Config {
        multicast: true,
        multicast_batch_ms: 500,
        multicast_pool: pool.parse().unwrap(),
        multicast_ttl: 16,
        ..Config::default()
    };
    server(dir, config)
}

/// What a group's stream is handed instead of a bound socket pair.
fn no_socket() -> fjord_engine::Output {
    fjord_engine::Output::Interleaved {
        conn: 0,
        rtp_channel: 0,
        rtcp_channel: 1,
    }
}

/// The group a multicast SETUP's reply names.
fn destination(r: &Reply) -> String {
    let t = header(r, "Transport");
    let d = t.split(';').find_map(|p| p.strip_prefix("destination="));
    d.unwrap_or_default().to_owned()
}

/// A multicast SETUP at `now` that makes its group's stream: the group it
/// asked sockets for, and the reply once they are bound.
async fn setup_new_stream(
    s: &Server,
    c: &mut FakeClient,
    now: Instant,
) -> (std::net::IpAddr, Reply) {
    use super::{Answer, Bind, Bound, Question, on_answer};
    let a = asked(step_at(s, c, MULTICAST_SETUP, now).await);
    let Question::Bind(Bind::Group { rtp, rtcp, .. }) = &a.question else {
        panic!("a group's sockets");
    };
    assert_eq!((rtp.port(), rtcp.port()), (5004, 5005));
    let group = rtp.ip();
    let bound = Answer::Bound(Ok(Bound::Group(no_socket())));
    (group, replied(on_answer(s, c, a, bound)))
}

/// Sessions that SETUP within the batching window share one group and
/// its one engine stream; the first PLAY starts it (the engine positions
/// it), every PLAY is answered at its start; a SETUP after the start gets
/// the next group; the last member's TEARDOWN ends the group and frees
/// its address.
#[tokio::test]
async fn multicast_sessions_gather_in_a_group_that_starts_once_and_ends_with_the_last() {
    use super::{Answer, Question, on_answer};
    let dir = tempfile::tempdir().unwrap();
    let s = multicast_server(dir.path(), "239.255.9.0/29");
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let (mut c1, mut c2) = (FakeClient::new(1), FakeClient::new(2));
    let a = asked(step_at(&s, &mut c1, MULTICAST_SETUP, t0).await);
    let Question::Bind(super::Bind::Group { rtp, ttl, .. }) = a.question else {
        panic!("the group's sockets");
    };
    assert_eq!((rtp.port(), ttl), (5004, s.config().multicast_ttl));
    let bound = Answer::Bound(Ok(super::Bound::Group(no_socket())));
    let mut r1 = replied(on_answer(&s, &mut c1, a, bound));
    assert_eq!(r1.response.status, 200);
    assert_eq!(destination(&r1), rtp.ip().to_string());
    assert_eq!(commands(&s, &mut r1), [(0, "add", 0)], "the group's stream");
    let loaded = s.core.lock().sessions.admission.loads();
    // A second client within the window joins it: nothing to bind or add.
    let mut r2 = replied(step_at(&s, &mut c2, MULTICAST_SETUP, ms(50)).await);
    assert_eq!(
        (r2.response.status, destination(&r2)),
        (200, rtp.ip().to_string())
    );
    assert!(commands(&s, &mut r2).is_empty());
    assert_eq!(
        s.core.lock().sessions.admission.loads(),
        loaded,
        "one stream's load"
    );
    // The first PLAY starts the group 500 ms on; the engine positions it.
    let play = |id: &str| format!("PLAY {URL} RTSP/1.0\nCSeq: 4\nSession: {id}\nRange: npt=0-\n");
    let (id1, id2) = (session_of(&r1), session_of(&r2));
    let a = asked(super::handle(&s, &mut c1, &request(&play(&id1)), ms(100)));
    assert!(
        matches!(&a.question, Question::Play(p) if p.seek_ns == Some(0) && p.streams.len() == 1)
    );
    let a = asked(on_answer(
        &s,
        &mut c1,
        a,
        Answer::Played(Ok(vec![engine_info(9, 0)])),
    ));
    let starts = (a.commands.commands().iter())
        .filter(|(_, c)| matches!(c, fjord_engine::Command::Start { at, .. } if *at == ms(600)))
        .count();
    assert_eq!(starts, 1, "its stream starts at the group's start");
    assert!(
        matches!(a.question, Question::Wait(w) if w == ms(580)),
        "replied 20 ms before"
    );
    // A later PLAY gets the same start, the engine not asked again.
    let a2 = asked(super::handle(&s, &mut c2, &request(&play(&id2)), ms(200)));
    assert!(matches!(a2.question, Question::Wait(w) if w == ms(580)));
    for (c, a) in [(&mut c1, a), (&mut c2, a2)] {
        let r = replied(on_answer(&s, c, a, Answer::Woke));
        assert_eq!(r.response.status, 200);
        assert!(
            header(&r, "RTP-Info").contains("seq=9"),
            "{}",
            header(&r, "RTP-Info")
        );
    }
    // After the start, a SETUP gets a group of its own (staggered start).
    let mut c3 = FakeClient::new(3);
    let (next, r3) = setup_new_stream(&s, &mut c3, ms(700)).await;
    assert_eq!(r3.response.status, 200);
    assert_ne!(next, rtp.ip(), "the next group");
    let teardown = |id: &str| format!("TEARDOWN {URL} RTSP/1.0\nCSeq: 9\nSession: {id}\n");
    let mut r = ask_unsent(&s, &mut c3, &teardown(&session_of(&r3))).await;
    let ended: Vec<_> = commands(&s, &mut r).into_iter().map(|c| c.1).collect();
    assert_eq!(
        ended,
        ["other", "remove"],
        "its last member gone: BYE, removed"
    );
    // The group plays on for the one left; the last TEARDOWN ends it.
    let mut r = ask_unsent(&s, &mut c1, &teardown(&id1)).await;
    assert!(commands(&s, &mut r).is_empty(), "a member left");
    let mut r = ask_unsent(&s, &mut c2, &teardown(&id2)).await;
    assert_eq!(commands(&s, &mut r).len(), 2, "the last: BYE, removed");
    assert!(no_load(&s), "its reservation given back");
    let mut c4 = FakeClient::new(4);
    let (again, _) = setup_new_stream(&s, &mut c4, ms(800)).await;
    assert_eq!(again, rtp.ip(), "its address is free again");
}

/// A group's start the engine could not position is 500, and the next
/// PLAY tries again; a failed bind refuses the SETUP and ends the group
/// made for it; a full pool refuses with 453.
#[tokio::test]
async fn multicast_refusals_give_back_what_they_took() {
    use super::{Answer, Question, on_answer};
    let dir = tempfile::tempdir().unwrap();
    let s = multicast_server(dir.path(), "239.255.9.1/32");
    let t0 = Instant::now();
    let mut c1 = FakeClient::new(1);
    let a = asked(step_at(&s, &mut c1, MULTICAST_SETUP, t0).await);
    let failed = Answer::Bound(Err(std::io::Error::other("no socket")));
    let r = replied(on_answer(&s, &mut c1, a, failed));
    assert_eq!(r.response.status, 500);
    assert!(s.core.lock().sessions.all().next().is_none() && no_load(&s));
    let (_, r1) = setup_new_stream(&s, &mut c1, t0).await;
    assert_eq!(
        r1.response.status, 200,
        "the group's address was given back"
    );
    // The pool's one group is taken: a client that wants a lower TTL
    // needs another.
    let low = MULTICAST_SETUP.replace("multicast", "multicast;ttl=1");
    let mut c2 = FakeClient::new(2);
    let r = replied(step_at(&s, &mut c2, &low, t0).await);
    assert_eq!(r.response.status, 453);
    let play = format!(
        "PLAY {URL} RTSP/1.0\nCSeq: 4\nSession: {}\n",
        session_of(&r1)
    );
    let a = asked(super::handle(&s, &mut c1, &request(&play), t0));
    let r = replied(on_answer(&s, &mut c1, a, Answer::Played(Err(454))));
    assert_eq!(r.response.status, 500, "the group could not start");
    let a = asked(super::handle(&s, &mut c1, &request(&play), t0));
    assert!(matches!(a.question, Question::Play(_)), "asked again");
}

/// DESCRIBE `?broadcast` reads the schedules the core keeps: 503 while a
/// configured broadcast starts, its schedule once published, 404 once
/// it failed or for a title not broadcast.
#[tokio::test]
async fn a_broadcasts_schedule_is_published_or_its_failure_known() {
    let broadcast = || Config {
        broadcasts: vec![crate::config::BroadcastConfig {
            title: "t.ts".into(),
            scheme: "cautious-harmonic".into(),
            max_start_s: 5.0,
        }],
        ..Config::default()
    };
    let (dir, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s = server(dir.path(), broadcast());
    let mut c = FakeClient::new(1);
    let describe =
        |t: &str| format!("DESCRIBE rtsp://198.18.0.1:8554/{t}?broadcast RTSP/1.0\nCSeq: 2\n");
    assert_eq!(
        ask(&s, &mut c, &describe("t.ts")).await.response.status,
        503
    );
    assert_eq!(
        ask(&s, &mut c, &describe("notes.txt"))
            .await
            .response
            .status,
        404
    );
    let json = "{\"version\":1}";
    s.core
        .lock()
        .broadcasts
        .started("t.ts", json.into(), vec![]);
    let r = ask(&s, &mut c, &describe("t.ts")).await;
    assert_eq!(
        (r.response.status, &r.response.body[..]),
        (200, json.as_bytes())
    );
    let s = server(other.path(), broadcast());
    s.core.lock().broadcasts.failed("t.ts");
    assert_eq!(
        ask(&s, &mut c, &describe("t.ts")).await.response.status,
        404
    );
}

/// An ANNOUNCE of `path` with one H.264 track (`streamid=0`), as ffmpeg
/// sends it.
fn announce(path: &str, cseq: u32) -> String {
    let sdp = "v=0\no=- 0 0 IN IP4 127.0.0.1\ns=No Name\nc=IN IP4 127.0.0.1\nt=0 0\n\
               m=video 0 RTP/AVP 96\na=rtpmap:96 H264/90000\n\
               a=fmtp:96 packetization-mode=1\na=control:streamid=0\n";
    // [`request`] sends every `\n` as CRLF, the body's too.
    format!(
        "ANNOUNCE rtsp://198.18.0.1:8554/{path} RTSP/1.0\nCSeq: {cseq}\n\
         Content-Type: application/sdp\nContent-Length: {}\n\n{sdp}",
        sdp.len() + sdp.matches('\n').count()
    )
}

#[tokio::test]
async fn a_publisher_announces_sets_up_and_records_and_a_second_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Anyone may read and publish under live/ (a rule without a name).
    let rule = "[[user]]\npaths = [\"**\"]\npublish = [\"live/**\"]\n";
    let s = server(dir.path(), toml::from_str(rule).unwrap());
    let mut c = FakeClient::new(1);
    let r = ask(&s, &mut c, &announce("live/cam", 1)).await;
    assert_eq!(r.response.status, 200, "{:?}", r.response);
    let session = session_of(&r);
    let track = "rtsp://198.18.0.1:8554/live/cam/streamid=0";
    let record =
        format!("RECORD rtsp://198.18.0.1:8554/live/cam RTSP/1.0\nCSeq: 2\nSession: {session}\n");
    assert_eq!(
        ask(&s, &mut c, &record).await.response.status,
        455,
        "RECORD before SETUP"
    );
    let setup = |t: &str, cseq| {
        format!(
            "SETUP {t} RTSP/1.0\nCSeq: {cseq}\nSession: {session}\n\
             Transport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\n"
        )
    };
    let unknown = setup("rtsp://198.18.0.1:8554/live/cam/streamid=7", 3);
    assert_eq!(ask(&s, &mut c, &unknown).await.response.status, 404);
    let r = ask(&s, &mut c, &setup(track, 4)).await;
    assert_eq!(r.response.status, 200, "{:?}", r.response);
    assert!(header(&r, "Transport").contains("interleaved=0-1;mode=record"));
    assert_eq!(ask(&s, &mut c, &record).await.response.status, 200);

    // A second publisher of the path: refused with the reason; an
    // ANNOUNCE of a track URL too.
    let mut other = FakeClient::new(2);
    let r = ask(&s, &mut other, &announce("live/cam", 1)).await;
    assert_eq!(r.response.status, 455);
    assert!(!r.response.body.is_empty());
    let r = ask(&s, &mut other, &announce("live/cam/streamid=0", 2)).await;
    assert_eq!(r.response.status, 404);
    // No rule lets anyone publish there: credentials are asked for.
    let r = ask(&s, &mut other, &announce("vod/cam", 3)).await;
    assert_eq!(r.response.status, 401);
    // Another connection cannot use the publisher's session.
    let teardown =
        format!("TEARDOWN rtsp://198.18.0.1:8554/live/cam RTSP/1.0\nCSeq: 4\nSession: {session}\n");
    assert_eq!(ask(&s, &mut other, &teardown).await.response.status, 454);
    assert_eq!(ask(&s, &mut c, &teardown).await.response.status, 200);
}

#[tokio::test]
async fn an_open_server_takes_no_publisher() {
    let (_dir, s, mut c) = fixture();
    let r = ask(&s, &mut c, &announce("live/cam", 1)).await;
    assert_eq!(r.response.status, 405);
}

#[tokio::test]
async fn a_describe_of_a_title_homed_on_another_member_is_sent_there_with_302() {
    use fjord_cluster::placement::{Node, rank};
    // A peer name that `t.ts` ranks before this node's ("a").
    let peer = (0..)
        .map(|i| format!("b{i}"))
        .find(|b| {
            let nodes = [b.as_str(), "a"].map(|name| Node {
                name,
                load: 0,
                capacity: 0,
            });
            rank("t.ts", &nodes)[0].name == b
        })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "node_name = \"a\"\n[[peer]]\nname = \"{peer}\"\nrtsp = \"rtsp://198.18.0.9:554\"\n"
    );
    let s = std::sync::Arc::new(server(dir.path(), toml::from_str(&config).unwrap()));
    let listeners = crate::cluster::Listeners {
        rtsp: ([198, 18, 0, 1], 8554).into(),
        http: None,
        rtsps: None,
    };
    crate::cluster::Cluster::start(&s, listeners);
    let mut c = FakeClient::new(1);
    let r = ask(
        &s,
        &mut c,
        &format!("DESCRIBE {URL}?x=1 RTSP/1.0\nCSeq: 1\n"),
    )
    .await;
    assert_eq!(r.response.status, 302);
    assert_eq!(header(&r, "Location"), "rtsp://198.18.0.9:554/t.ts?x=1");
    assert!(c.sessions.is_empty(), "no session for a request sent on");
    // What is not DESCRIBE is answered here (a session's requests stay).
    let r = ask(&s, &mut c, &format!("OPTIONS {URL} RTSP/1.0\nCSeq: 2\n")).await;
    assert_eq!(r.response.status, 200);
}

#[tokio::test]
async fn an_announce_over_its_bound_or_of_no_sdp_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rule = "live_max_sdp_bytes = 100\n[[user]]\npaths = [\"**\"]\npublish = [\"live/**\"]\n";
    let s = server(dir.path(), toml::from_str(rule).unwrap());
    let mut c = FakeClient::new(1);
    let r = ask(&s, &mut c, &announce("live/cam", 1)).await;
    assert_eq!(r.response.status, 413, "an SDP over live_max_sdp_bytes");
    let not_sdp = "ANNOUNCE rtsp://198.18.0.1:8554/live/cam RTSP/1.0\nCSeq: 2\n\
                   Content-Type: application/sdp\nContent-Length: 8\n\nnot sdp!";
    assert_eq!(ask(&s, &mut c, not_sdp).await.response.status, 400);
}

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

mod asking;
mod live_multicast;
mod multicast;
mod publish;

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
    // The query kept, and marked as sent on by placement from here.
    assert_eq!(
        header(&r, "Location"),
        "rtsp://198.18.0.9:554/t.ts?x=1&fjord-placed=a"
    );
    assert!(c.sessions.is_empty(), "no session for a request sent on");
    // What is not DESCRIBE is answered here (a session's requests stay).
    let r = ask(&s, &mut c, &format!("OPTIONS {URL} RTSP/1.0\nCSeq: 2\n")).await;
    assert_eq!(r.response.status, 200);
}

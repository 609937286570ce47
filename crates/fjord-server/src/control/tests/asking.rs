//! The engine's answers as events: a method asks (position streams, a
//! pause point, where a title stands, sockets, a title's opening), the
//! test answers.

use super::*;

#[tokio::test]
async fn play_asks_the_engine_and_replies_from_its_answer() {
    use crate::control::{Answer, Question, on_answer};
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
    use crate::control::{Answer, on_answer};
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
    use crate::control::{Answer, Question, on_answer};
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
    use crate::control::{Answer, Question, on_answer};
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
    use crate::control::{Answer, Question, Step, ask::Pending, on_answer};
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

#[tokio::test]
async fn a_udp_setup_asks_for_its_sockets_and_a_failed_bind_refuses_it() {
    use crate::control::{Answer, Bind, Question, on_answer};
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
    use crate::control::{Answer, Question, Step, ask::Pending, on_answer};
    let (_dir, s, mut c, id) = tcp_session().await;
    let engine_id = s.core.lock().sessions.get(&id).unwrap().streams[0].engine_id;
    let session = SessionId::parse(&id).unwrap();
    let reading = |stream: (SessionId, u64), reader: &tokio::task::JoinHandle<()>| {
        let pending = Pending::Reading(stream, Box::new(crate::control::status(200)));
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
    use crate::catalog::CatalogError;
    use crate::control::{Answer, Question, Step, on_answer};
    let (_dir, s, mut c) = fixture();
    let opens = |step: Step| match step {
        Step::Ask(a) => match &a.question {
            Question::Open(t) => (t.to_string(), a),
            _ => panic!("asked something before the title"),
        },
        Step::Reply(r) => panic!("replied {} before opening", r.response.status),
    };
    let first = |c: &mut FakeClient, text: &str| {
        crate::control::handle(&s, c, &request(text), Instant::now())
    };
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

//! Multicast groups and broadcasts in the core.

use super::*;

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
    use crate::control::{Answer, Bind, Bound, Question, on_answer};
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
    use crate::control::{Answer, Question, on_answer};
    let dir = tempfile::tempdir().unwrap();
    let s = multicast_server(dir.path(), "239.255.9.0/29");
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    let (mut c1, mut c2) = (FakeClient::new(1), FakeClient::new(2));
    let a = asked(step_at(&s, &mut c1, MULTICAST_SETUP, t0).await);
    let Question::Bind(crate::control::Bind::Group { rtp, ttl, .. }) = a.question else {
        panic!("the group's sockets");
    };
    assert_eq!((rtp.port(), ttl), (5004, s.config().multicast_ttl));
    let bound = Answer::Bound(Ok(crate::control::Bound::Group(no_socket())));
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
    let a = asked(crate::control::handle(
        &s,
        &mut c1,
        &request(&play(&id1)),
        ms(100),
    ));
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
    let a2 = asked(crate::control::handle(
        &s,
        &mut c2,
        &request(&play(&id2)),
        ms(200),
    ));
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
    use crate::control::{Answer, Question, on_answer};
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
    let a = asked(crate::control::handle(&s, &mut c1, &request(&play), t0));
    let r = replied(on_answer(&s, &mut c1, a, Answer::Played(Err(454))));
    assert_eq!(r.response.status, 500, "the group could not start");
    let a = asked(crate::control::handle(&s, &mut c1, &request(&play), t0));
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

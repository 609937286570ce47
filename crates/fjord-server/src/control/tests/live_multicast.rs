//! Multicast SETUPs of a live path refused: without the opt-in (461),
//! mixed with unicast in a session (461), and when the group's sockets
//! cannot be opened (453, its address back in the pool).

use super::{publish::announce, *};

/// A server with `config` and a publisher recording `live/cam`.
async fn recording(dir: &Path, config: &str) -> Server {
    let rule = "[[user]]\npaths = [\"**\"]\npublish = [\"live/**\"]\n";
    let s = server(dir, toml::from_str(&format!("{config}{rule}")).unwrap());
    let mut p = FakeClient::new(1);
    let r = ask(&s, &mut p, &announce("live/cam", 1)).await;
    let session = session_of(&r);
    let setup = format!(
        "SETUP rtsp://198.18.0.1:8554/live/cam/streamid=0 RTSP/1.0\nCSeq: 2\nSession: {session}\n\
         Transport: RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\n"
    );
    assert_eq!(ask(&s, &mut p, &setup).await.response.status, 200);
    let record =
        format!("RECORD rtsp://198.18.0.1:8554/live/cam RTSP/1.0\nCSeq: 3\nSession: {session}\n");
    assert_eq!(ask(&s, &mut p, &record).await.response.status, 200);
    s
}

fn setup(transport: &str, session: Option<&str>) -> String {
    let session = session.map_or(String::new(), |s| format!("Session: {s}\n"));
    format!(
        "SETUP rtsp://198.18.0.1:8554/live/cam/trackID=0 RTSP/1.0\nCSeq: 1\n{session}\
         Transport: {transport}\n"
    )
}

/// The viewers of the live streams, as the admin API counts them.
fn viewers(s: &Server) -> String {
    let live = serde_json::to_value(crate::control::live::report::streams(s)).unwrap();
    live[0]["viewers"].to_string()
}

#[tokio::test]
async fn a_live_multicast_setup_without_the_opt_in_gets_461() {
    let dir = tempfile::tempdir().unwrap();
    let s = recording(dir.path(), "").await;
    let r = ask(
        &s,
        &mut FakeClient::new(2),
        &setup("RTP/AVP;multicast", None),
    )
    .await;
    assert_eq!(r.response.status, 461);
    let why = String::from_utf8_lossy(&r.response.body);
    assert!(why.contains("does not offer"), "{why}");
}

/// The group's sockets cannot be bound on the fake connection's address:
/// each SETUP is told so, and the address it took goes back (a pool of
/// two would be full from the third on otherwise); no viewer is left.
#[tokio::test]
async fn a_group_that_cannot_open_its_sockets_gives_its_address_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = "multicast = true\nmulticast_pool = \"239.255.9.0/30\"\n";
    let s = recording(dir.path(), config).await;
    let mut c = FakeClient::new(2);
    for _ in 0..3 {
        let r = ask(&s, &mut c, &setup("RTP/AVP;multicast", None)).await;
        assert_eq!(r.response.status, 453, "{:?}", r.response);
        let why = String::from_utf8_lossy(&r.response.body);
        assert!(why.contains("cannot open the group's sockets"), "{why}");
    }
    assert_eq!(viewers(&s), "0");
}

/// A session's tracks go all by multicast or none.
#[tokio::test]
async fn a_unicast_session_takes_no_multicast_track() {
    let dir = tempfile::tempdir().unwrap();
    let s = recording(dir.path(), "multicast = true\n").await;
    let mut c = FakeClient::new(2);
    let tcp = "RTP/AVP/TCP;unicast;interleaved=0-1";
    let r = ask(&s, &mut c, &setup(tcp, None)).await;
    assert_eq!(r.response.status, 200, "{:?}", r.response);
    let session = session_of(&r);
    let r = ask(&s, &mut c, &setup("RTP/AVP;multicast", Some(&session))).await;
    assert_eq!(r.response.status, 461, "{:?}", r.response);
    assert_eq!(viewers(&s), "1");
}

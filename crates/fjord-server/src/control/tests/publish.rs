//! Publishing: ANNOUNCE, SETUP `mode=record`, RECORD, and their
//! refusals.

use super::*;

/// An ANNOUNCE of `path` with one H.264 track (`streamid=0`), as ffmpeg
/// sends it.
pub(super) fn announce(path: &str, cseq: u32) -> String {
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

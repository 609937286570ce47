//! Live publishers other than ffmpeg's H.264 (`docs/live.md`), against
//! real peers: GStreamer's `rtspclientsink` publishes H.264 (x264enc) +
//! Opus (opusenc), over UDP (its default) and over TCP; ffmpeg views it and decodes every frame from the key
//! frame it joins at, also when it joins after both tracks' sender
//! reports and gets them relayed, and the recording's H.264 packets are the
//! published ones. ffmpeg publishes H.265 (libx265) and the recording's
//! video packets are the source's. GStreamer publishes MPEG-TS
//! (`mpegtsmux`, MP2T over RTP) and a viewer that joins gets the
//! published TS packets byte for byte from next to a random access point;
//! recorded, it is a `.ts` title of the published bytes, served by the
//! path's `latest.ts` while it grows, that ffmpeg plays over RTSP; one a
//! killed server left is whole TS packets and plays after a restart.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, stdout_of, view_udp};

pub(crate) const CONFIG: &str = "live_timeout_s = 2\nlive_grace_s = 0\nlive_record = [\"live/**\"]\n\
[[user]]\nname = \"pub\"\npassword = \"secret\"\npaths = [\"**\"]\npublish = [\"live/**\"]\n\
[[user]]\npaths = [\"**\"]\n";

/// The MD5 column of ffmpeg's framemd5 of `input`'s stream `map`: its
/// packets as stored (`-c copy`) or its frames decoded to I420.
fn md5s(input: &str, map: &str, packets: bool, limit: Duration) -> Vec<String> {
    let mut args = vec!["-nostdin", "-v", "error", "-i", input, "-map", map];
    args.extend(if packets {
        ["-c", "copy"]
    } else {
        ["-pix_fmt", "yuv420p"]
    });
    args.extend(["-f", "framemd5", "-"]);
    (stdout_of("ffmpeg", &args, limit).lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l.rsplit(',').next()?.trim().to_owned()))
        .collect()
}

/// GStreamer publishes `frames` of live 320x240 H.264 at 25 fps (a key
/// frame a second), muxed once into MPEG-TS, to `path` over TCP; the same
/// bytes go to the file `copy` too, when given.
pub(crate) fn publish_ts(server: &Server, path: &str, frames: u32, copy: Option<&Path>) -> Child {
    let tee = copy.map_or(String::new(), |c| {
        format!(
            "tee name=t t. ! queue ! filesink location={} t. ! queue ! ",
            c.display()
        )
    });
    let publish = format!(
        "videotestsrc is-live=true num-buffers={frames} ! \
         video/x-raw,width=320,height=240,framerate=25/1 ! \
         x264enc key-int-max=25 speed-preset=veryfast tune=zerolatency ! h264parse ! mpegtsmux ! \
         {tee}rtspclientsink protocols=tcp location={}",
        publisher_url(server, path)
    );
    Command::new("gst-launch-1.0")
        .args(["-q", "-e"])
        .args(publish.split_whitespace())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits up to 20 s for `publisher` to exit by itself.
fn wait_for_exit(publisher: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while publisher.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lets `publisher` end (its frames sent), killed if it outlives 20 s.
pub(crate) fn end_of(publisher: &mut Child) {
    wait_for_exit(publisher);
    let _ = publisher.kill();
    let _ = publisher.wait();
}

fn publisher_url(server: &Server, path: &str) -> String {
    server
        .url(path)
        .replacen("rtsp://", "rtsp://pub:secret@", 1)
}

/// The one recording under `root/dir`, of extension `ext`.
pub(crate) fn recording(root: &Path, dir: &str, ext: &str) -> String {
    let files: Vec<_> = (std::fs::read_dir(root.join(dir)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].to_str().unwrap().to_owned()
}

/// `got` is `src` from its start.
fn assert_prefix(got: &[String], src: &[String], what: &str) {
    assert!(
        !got.is_empty() && got.len() <= src.len(),
        "{what}: {} of {}",
        got.len(),
        src.len()
    );
    assert_eq!(got, &src[..got.len()], "{what}");
}

#[test]
fn gstreamer_rtspclientsink_publishes_h264_and_opus_over_udp() {
    rtspclientsink_publishes("udp");
}

#[test]
fn gstreamer_rtspclientsink_publishes_h264_and_opus_over_tcp() {
    rtspclientsink_publishes("tcp");
}

/// `seconds` of 320x240 H.264 at 25 fps, a key frame a second, and 48 kHz
/// Opus, encoded by GStreamer's x264enc and opusenc into `dir/gst.mkv`.
fn gst_source(dir: &Path, seconds: u32) -> String {
    let src = dir.join("gst.mkv");
    let encode = format!(
        "videotestsrc num-buffers={} ! video/x-raw,width=320,height=240,framerate=25/1 ! \
         x264enc key-int-max=25 speed-preset=veryfast ! h264parse ! queue ! mux. \
         audiotestsrc num-buffers={} samplesperbuffer=960 ! audio/x-raw,rate=48000 ! opusenc ! \
         queue ! mux. matroskamux name=mux ! filesink location={}",
        seconds * 25,
        seconds * 50,
        src.display()
    );
    let args: Vec<&str> = ["-q", "-e"]
        .into_iter()
        .chain(encode.split_whitespace())
        .collect();
    stdout_of("gst-launch-1.0", &args, Duration::from_secs(30));
    src.to_str().unwrap().to_owned()
}

/// `rtspclientsink` publishing `src` ([`gst_source`]) in real time to
/// `live/gst` over `protocols`; its errors go to `said`.
fn rtspclientsink(server: &Server, src: &str, protocols: &str, said: &Path) -> Child {
    let publish = format!(
        "filesrc location={src} ! matroskademux name=d d.video_0 ! queue ! h264parse ! s.sink_0 \
         d.audio_0 ! queue ! opusparse ! s.sink_1 rtspclientsink name=s protocols={protocols} \
         location={}",
        publisher_url(server, "live/gst")
    );
    Command::new("gst-launch-1.0")
        .args(["-q", "-e"])
        .args(publish.split_whitespace())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(said).unwrap())
        .spawn()
        .unwrap()
}

/// `rtspclientsink` publishes over `protocols`; ffmpeg views it and the
/// recording holds the published H.264 packets.
fn rtspclientsink_publishes(protocols: &str) {
    let dir = tempfile::tempdir().unwrap();
    let src = &gst_source(dir.path(), 6);
    let server = Server::start(CONFIG);
    // Its errors, for the assertion on how it ended.
    let said = server.root.path().join("rtspclientsink.log");
    let publisher = rtspclientsink(&server, src, protocols, &said);
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(1200));
    // A viewer joining a second in decodes every frame from a key frame.
    let viewed = md5s(
        &server.url("live/gst"),
        "0:v",
        false,
        Duration::from_secs(20),
    );
    let decoded = md5s(src, "0:v", false, Duration::from_secs(30));
    let at = (decoded.iter().position(|m| *m == viewed[0])).expect("a published frame");
    assert_eq!(at % 25, 0, "joined at frame {at}, not a key frame");
    assert!(viewed.len() >= 75, "viewed {} frames", viewed.len());
    assert_prefix(&viewed, &decoded[at..], "frames viewed");
    // rtspclientsink ends with PAUSE and TEARDOWN at its EOS; on a loaded
    // machine it was once seen to stay at EOS instead, sending keep-alives:
    // then it is killed after 20 s and live_timeout_s ends the stream.
    let mut publisher = publisher;
    wait_for_exit(&mut publisher);
    match publisher.try_wait().unwrap() {
        Some(status) => {
            let said = std::fs::read_to_string(&said).unwrap_or_default();
            assert!(
                status.success() || own_flush_race(&said, &server.log_text()),
                "rtspclientsink: {status}: {said}"
            );
        }
        None => {
            let _ = publisher.kill();
            let _ = publisher.wait();
        }
    }
    server.wait_for_log("live recording closed", Duration::from_secs(10));
    let file = recording(&server.media_root(), "live/gst", "mp4");
    let (got, sent) = (
        md5s(&file, "0:v", true, Duration::from_secs(30)),
        md5s(src, "0:v", true, Duration::from_secs(30)),
    );
    assert_eq!(got, sent, "the recording's H.264 packets");
    assert!(!md5s(&file, "0:a", true, Duration::from_secs(30)).is_empty());
}

/// Whether rtspclientsink failed only on its own race at EOS, after the
/// server answered its TEARDOWN: its state change flushes the connection
/// while a streaming thread still sends, and that send reports
/// end-of-file (seen with GST_DEBUG=rtspclientsink:6: "set flushing 1",
/// then the data send fails, then PAUSE and TEARDOWN both get 200).
fn own_flush_race(said: &str, server_log: &str) -> bool {
    said.contains("gst_rtsp_client_sink_try_send")
        && said.contains("Could not send message. (Received end-of-file)")
        // The publisher's (the viewer's URL ends in "/live/gst/").
        && server_log
            .lines()
            .any(|l| l.contains("method=\"TEARDOWN\"") && l.contains("/live/gst status=200"))
}

/// A viewer that joins once both of `rtspclientsink`'s tracks sent sender
/// reports gets them relayed, each track's first before its first
/// packet, then every second; ffmpeg, which aligns its tracks by them,
/// decodes every frame from the key frame it joins at. rtspclientsink does
/// not send its tracks in step: reports mapped from the packets' arrival
/// once made ffmpeg drop the frames after that key frame.
#[test]
fn ffmpeg_decodes_every_frame_of_rtspclientsink_with_its_reports_relayed() {
    let dir = tempfile::tempdir().unwrap();
    let src = &gst_source(dir.path(), 12);
    let server = Server::start(&format!("rtcp_interval_s = 1\n{CONFIG}"));
    let said = server.root.path().join("rtspclientsink.log");
    let mut publisher = rtspclientsink(&server, src, "udp", &said);
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.log_text().matches("sender reports relayed").count() < 2 {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Our own viewer of the video beside ffmpeg, to see the reports.
    let own = std::thread::spawn({
        let url = server.url("live/gst");
        move || view_udp(&url, Duration::from_secs(3), Duration::from_secs(25))
    });
    let viewed = md5s(
        &server.url("live/gst"),
        "0:v",
        false,
        Duration::from_secs(30),
    );
    let decoded = md5s(src, "0:v", false, Duration::from_secs(30));
    let at = (decoded.iter().position(|m| *m == viewed[0])).expect("a published frame");
    assert_eq!(at % 25, 0, "joined at frame {at}, not a key frame");
    assert!(viewed.len() >= 125, "viewed {} frames", viewed.len());
    assert_prefix(&viewed, &decoded[at..], "frames viewed");
    let _ = publisher.kill();
    let _ = publisher.wait();
    let srs = crate::common::sender_reports(&own.join().unwrap());
    assert!(srs.len() >= 5, "{} sender reports", srs.len());
    assert_eq!(srs[0].3, 0, "the first report goes before any packet");
}

#[test]
fn an_h265_stream_is_recorded_with_the_published_packets() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("h265.mkv");
    let src = src.to_str().unwrap();
    let encode = "-f lavfi -i testsrc=size=320x240:rate=25 -t 4 -c:v libx265 -preset ultrafast \
        -g 25 -x265-params log-level=error -pix_fmt yuv420p";
    let mut args = vec!["-nostdin", "-v", "error"];
    args.extend(encode.split(' '));
    args.push(src);
    stdout_of("ffmpeg", &args, Duration::from_secs(60));
    let server = Server::start(CONFIG);
    let url = publisher_url(&server, "live/hevc");
    stdout_of(
        "ffmpeg",
        &[
            "-nostdin", "-v", "error", "-re", "-i", src, "-c", "copy", "-f", "rtsp", &url,
        ],
        Duration::from_secs(20),
    );
    server.wait_for_log("live recording closed", Duration::from_secs(10));
    let file = recording(&server.media_root(), "live/hevc", "mp4");
    let probe = stdout_of(
        "ffprobe",
        &[
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name",
            "-of",
            "csv=p=0",
            &file,
        ],
        Duration::from_secs(10),
    );
    assert_eq!(probe.trim(), "hevc");
    let (got, sent) = (
        md5s(&file, "0:v", true, Duration::from_secs(30)),
        md5s(src, "0:v", true, Duration::from_secs(30)),
    );
    assert_eq!(got, sent, "the recording's H.265 packets");
    assert_eq!(
        md5s(&file, "0:v", false, Duration::from_secs(30)).len(),
        100
    );
}

/// GStreamer publishes an MPEG-TS stream (MP2T, RFC 2250) over TCP; a
/// viewer joining two seconds in gets, over TCP, what was published: TS
/// packets byte for byte, in order, from a random access point (the
/// stream's last key frame when it joined, give or take the packets
/// around its start), for the four seconds it watches.
#[test]
fn gstreamer_publishes_mpeg_ts_and_a_viewer_gets_its_packets_from_a_key_frame() {
    let server = Server::start(CONFIG);
    let sent = server.root.path().join("published.ts");
    // 8 s of live video, a key frame a second, muxed once: the same bytes
    // to a file and to fjord.
    let mut publisher = publish_ts(&server, "live/ts", 200, Some(&sent));
    server.wait_for_log("live stream recording", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    let mut viewer = fjord_client::RtspClient::connect(&server.url("live/ts")).unwrap();
    let d = viewer.describe().unwrap();
    assert!(d.sdp.contains("MP2T/90000"), "{}", d.sdp);
    viewer.setup_tcp(&d.track_urls[0]).unwrap();
    viewer.play(None).unwrap();
    let watch = Duration::from_secs(4);
    let cap = fjord_client::capture(&mut viewer, watch, watch, None).unwrap();
    end_of(&mut publisher);
    let ts = std::fs::read(&sent).unwrap();
    let (from, to) = crate::common::assert_contiguous(&ts, &cap.packets, "MP2T viewer");
    // Its first RTP packet holds the key frame's start; packets go whole,
    // and a frame before it may share that packet (7 TS packets: one
    // P-frame of this still picture fits in one TS packet, seen here).
    let key = (from..to)
        .step_by(crate::common::TS)
        .find(|&at| crate::common::starts_at_random_access(&ts, at));
    assert!(
        key.is_some_and(|k| k - from < 7 * crate::common::TS),
        "joined at byte {from}, the first random access point after it at {key:?}"
    );
    assert!(from > 0, "joined at the start, not two seconds in");
    // Four seconds of a stream of about 1.7 MB in 8.
    assert!(
        to - from > ts.len() / 3,
        "{} of {} bytes",
        to - from,
        ts.len()
    );
}

/// GStreamer publishes 6 s of MPEG-TS (MP2T) to a recorded path. While it
/// grows, the path's `latest.ts` is a title of what is durable: a
/// DESCRIBE says a second or more of it, a download is whole TS packets,
/// the published stream's start, its HLS playlist an EVENT one that only
/// grows, its later snapshots planned on from the one before (`/metrics`).
/// Once the publisher is gone the recording
/// is `PATH/STAMP.ts`, byte for byte the published TS, and ffmpeg playing
/// it over RTSP from fjord decodes every published frame.
#[test]
fn gstreamer_publishes_mpeg_ts_and_its_recording_is_the_published_ts() {
    // Segments of a second (a key frame a second): some settle while the
    // six seconds are recorded.
    let (server, http) = Server::start_http(&format!(
        "hls_segment_s = 1\n{CONFIG}[[user]]\nname = \"ops\"\npassword = \"pager\"\nadmin = true\n"
    ));
    let sent = server.root.path().join("published.ts");
    let mut publisher = publish_ts(&server, "live/tsrec", 150, Some(&sent));
    server.wait_for_log("live stream recorded", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(3));
    let describe = format!(
        "DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n",
        server.url("live/tsrec/latest.ts")
    );
    let (sdp, _) = crate::common::raw_exchange(
        &server.addr(),
        describe.as_bytes(),
        Duration::from_millis(500),
    );
    let recorded: f64 = (sdp.lines())
        .find_map(|l| l.strip_prefix("a=range:npt=0-"))
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or_else(|| panic!("{sdp}"));
    assert!(
        (1.0..6.0).contains(&recorded),
        "{recorded} s while it grows"
    );
    let durable =
        crate::common::curl_bytes(&format!("http://127.0.0.1:{http}/live/tsrec/latest.ts"));
    assert!(
        !durable.is_empty() && durable.len().is_multiple_of(crate::common::TS),
        "{} bytes",
        durable.len()
    );
    // HLS: an EVENT playlist of the snapshot's settled byte ranges.
    let hls = format!("http://127.0.0.1:{http}/live/tsrec/latest.ts/media.m3u8");
    // A segment is listed once a second or more follows it: asked again
    // while the six seconds are recorded.
    let deadline = Instant::now() + Duration::from_secs(5);
    let growing = loop {
        let (growing, code) = crate::common::curl(&[&hls]);
        assert_eq!(code, 200, "{growing}");
        if growing.contains("#EXTINF") || Instant::now() > deadline {
            break growing;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(growing.contains("#EXTINF"), "{growing}");
    assert!(
        growing.contains("#EXT-X-PLAYLIST-TYPE:EVENT\n"),
        "{growing}"
    );
    assert!(!growing.contains("#EXT-X-ENDLIST"), "{growing}");
    // Asked again as it grows: snapshots planned on from the one before
    // (`ts::growing`), which only grow the playlist.
    let mut later = growing.clone();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1200));
        later = crate::common::curl(&[&hls]).0;
        assert!(later.starts_with(&growing), "{growing}\n{later}");
    }
    let metrics = format!("{}/metrics", server.admin());
    let (metrics, _) = crate::common::curl(&["--digest", "-u", "ops:pager", &metrics]);
    let line = "fjord_recording_snapshots_total{planned=\"incremental\"} ";
    let incremental: u64 = (metrics.lines().find_map(|l| l.strip_prefix(line)))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(incremental >= 1, "{metrics}");
    end_of(&mut publisher);
    server.wait_for_log("live recording closed", Duration::from_secs(10));
    // Ended: the same playlist, lines appended, the last `#EXT-X-ENDLIST`.
    let (ended, _) = crate::common::curl(&[&hls]);
    assert!(
        ended.starts_with(&later) && ended.ends_with("#EXT-X-ENDLIST\n"),
        "growing:\n{later}\nended:\n{ended}"
    );
    let file = recording(&server.media_root(), "live/tsrec", "ts");
    let (got, ts) = (std::fs::read(&file).unwrap(), std::fs::read(&sent).unwrap());
    // rtpmp2tpay (GStreamer 1.22) sends 7 TS packets a payload and drops
    // what it holds at EOS, fewer than 7 (its own depayloader gets the
    // same): the recording is what it sent.
    let unsent = ts.len() - got.len().min(ts.len());
    assert!(
        ts.starts_with(&got)
            && unsent.is_multiple_of(crate::common::TS)
            && unsent < 7 * crate::common::TS,
        "the recording ({} bytes) is not the published TS ({} bytes)",
        got.len(),
        ts.len()
    );
    assert!(
        ts.starts_with(&durable),
        "the growing title's download is the stream's start"
    );
    let title = file
        .strip_prefix(server.media_root().to_str().unwrap())
        .unwrap();
    let played = md5s(
        &server.url(title.trim_start_matches('/')),
        "0:v",
        false,
        Duration::from_secs(30),
    );
    let decoded = md5s(
        sent.to_str().unwrap(),
        "0:v",
        false,
        Duration::from_secs(30),
    );
    assert_eq!(decoded.len(), 150);
    // Every published frame but the last few, which the payloader's
    // unsent packets end (149 seen: a P-frame of this still picture may
    // take a TS packet or two).
    assert!(
        played.len() + 5 >= decoded.len(),
        "{} frames played",
        played.len()
    );
    assert_prefix(&played, &decoded, "frames played over RTSP");
}

/// A server killed (SIGKILL) while it records an MPEG-TS stream leaves a
/// file of whole TS packets, synced a run (a second of media) at a time;
/// started again, it serves the file as a title by the path's
/// `latest.ts`, over RTSP (the seconds that were durable) and HTTP.
#[test]
fn an_mpeg_ts_recording_left_by_a_killed_server_is_whole_ts_packets_and_plays() {
    let media = tempfile::tempdir().unwrap();
    let server = Server::start_on(media.path(), CONFIG);
    let mut publisher = publish_ts(&server, "live/tscrash", 250, None);
    server.wait_for_log("live stream recorded", Duration::from_secs(20));
    // Some 4 s of media: three runs or more synced.
    std::thread::sleep(Duration::from_millis(4500));
    server.signal("KILL");
    drop(server);
    let _ = publisher.kill();
    let _ = publisher.wait();
    let file = recording(media.path(), "live/tscrash", "ts");
    let bytes = std::fs::read(&file).unwrap();
    let ts = crate::common::TS;
    assert!(
        !bytes.is_empty() && bytes.chunks(ts).all(|p| p.len() == ts && p[0] == 0x47),
        "{} bytes, not whole TS packets",
        bytes.len()
    );
    let http = crate::common::free_port();
    let server = Server::start_on(media.path(), &format!("http_port = {http}\n{CONFIG}"));
    let played = md5s(
        &server.url("live/tscrash/latest.ts"),
        "0:v",
        false,
        Duration::from_secs(30),
    );
    // At least two runs, a second each, were synced.
    assert!(played.len() >= 50, "{} frames", played.len());
    let recorded = md5s(&file, "0:v", false, Duration::from_secs(30));
    assert_prefix(&played, &recorded, "latest.ts over RTSP after a restart");
    let latest = format!("http://127.0.0.1:{http}/live/tscrash/latest.ts");
    assert!(
        crate::common::curl_bytes(&latest) == bytes,
        "latest.ts over HTTP after a restart"
    );
}

//! A live stream recorded as a title (`docs/live.md#recording`) against
//! real peers: ffmpeg publishes an H.264 (with B-frames) + AAC file over
//! RTSP to a path `live_record` matches; after its TEARDOWN the recording
//! is a title: ffprobe reads it, its packets (`-c copy` framemd5, per
//! stream) are the published file's, and ffmpeg playing it over RTSP from
//! fjord decodes the published frames. A publisher killed and replaced
//! within `live_grace_s` continues the same file (the frames of both, in
//! order). A server killed (SIGKILL) in the middle of a recording and
//! started again serves it up to its last fragment, by its name and by
//! its path's `latest.mp4`. While a recording
//! grows, a viewer finds it in the API, seeks back into it over RTSP,
//! fast-forwards it, and plays it over HLS by the path's alias
//! `latest.mp4` (an EVENT playlist that grows, `ENDLIST` appended once it
//! ends), getting the file's frames; hls.js in chromium seeks back 20 s
//! into it while it grows and plays to its end.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use md5::Digest;

use crate::browser::chromium_plays;
use crate::common::{
    Server, curl, curl_bytes, curl_status, generate_media, raw_exchange, run_bounded, stdout_of,
};

const CONFIG: &str = "live_timeout_s = 2\nlive_record = [\"live/**\"]\n\
[[user]]\nname = \"pub\"\npassword = \"secret\"\npaths = [\"**\"]\npublish = [\"live/**\", \"other/**\"]\n\
[[user]]\npaths = [\"**\"]\n";

/// 6 s of 320x240 H.264 (a key frame a second, x264's B-frames) and AAC.
fn source() -> &'static Path {
    static SRC: OnceLock<PathBuf> = OnceLock::new();
    SRC.get_or_init(|| clip(6))
}

/// 30 s as [`source`].
fn source_30s() -> &'static Path {
    static SRC: OnceLock<PathBuf> = OnceLock::new();
    SRC.get_or_init(|| clip(30))
}

/// `seconds` of [`source`]'s media, made once per test run.
fn clip(seconds: u32) -> PathBuf {
    let args = format!(
        "-f lavfi -i testsrc=size=320x240:rate=25 -f lavfi -i sine=frequency=440:sample_rate=44100 \
         -t {seconds} -c:v libx264 -preset veryfast -g 25 -pix_fmt yuv420p -c:a aac -b:a 64k -f matroska"
    );
    let args: Vec<&str> = args.split_whitespace().collect();
    generate_media(&format!("live-record-{seconds}s.mkv"), &args)
}

fn ffmpeg(args: &[&str], limit: Duration) -> String {
    let args: Vec<&str> = ["-nostdin", "-v", "error"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    stdout_of("ffmpeg", &args, limit)
}

/// The MD5s of stream `index`'s packets as stored (`-c copy`).
fn packet_md5s(input: &str, index: usize) -> Vec<String> {
    let map = format!("0:{index}");
    let out = ffmpeg(
        &[
            "-i", input, "-map", &map, "-c", "copy", "-f", "framemd5", "-",
        ],
        Duration::from_secs(30),
    );
    md5_column(&out)
}

/// The MD5s of the decoded video frames of `input` (a file or a URL).
fn decoded_md5s(input: &str) -> Vec<String> {
    let out = ffmpeg(
        &[
            "-i", input, "-map", "0:v", "-pix_fmt", "yuv420p", "-f", "framemd5", "-",
        ],
        Duration::from_secs(30),
    );
    md5_column(&out)
}

fn md5_column(framemd5: &str) -> Vec<String> {
    (framemd5.lines())
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(l.rsplit(',').next()?.trim().to_owned()))
        .collect()
}

fn publish(server: &Server, path: &str) -> Child {
    publish_file(server, path, source())
}

fn publish_file(server: &Server, path: &str, file: &Path) -> Child {
    publish_with(server, path, file, &[])
}

/// ffmpeg publishes `file` to `path`, `args` before its output.
fn publish_with(server: &Server, path: &str, file: &Path, args: &[&str]) -> Child {
    let url = server
        .url(path)
        .replacen("rtsp://", "rtsp://pub:secret@", 1);
    Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-re", "-i"])
        .arg(file)
        .args(["-c", "copy"])
        .args(args)
        .args(["-f", "rtsp", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_log(server: &Server, needle: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !server.log_text().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `publisher` to end well and its recording under `dir` to
/// close: the file, and its title.
fn closed_recording(server: &Server, publisher: Child, dir: &str) -> (PathBuf, String) {
    let out = publisher.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "publisher: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_log(server, "live recording closed", Duration::from_secs(10));
    recording(&server.media_root(), dir)
}

/// The one recording under `dir`, as a path and a title relative to `root`.
fn recording(root: &Path, dir: &str) -> (PathBuf, String) {
    let files: Vec<PathBuf> = (std::fs::read_dir(root.join(dir)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mp4"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_owned();
    // 2026-11-29T01-50-00Z.mp4
    assert_eq!(
        (name.len(), &name[10..11], &name[19..]),
        (24, "T", "Z.mp4"),
        "{name}"
    );
    (files[0].clone(), format!("{dir}/{name}"))
}

/// The snapshots of a recording fjord wrote, at each of its fragments'
/// ends, each planned on from the one before, are the whole prefix's,
/// byte for byte (of a copy: a snapshot's index is written beside it).
fn assert_snapshots_are_incremental(file: &Path) {
    use fjord_media::ingest::{Snapshot, snapshot};
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("rec.mp4");
    std::fs::copy(file, &copy).unwrap();
    let data = std::fs::read(&copy).unwrap();
    let (mut at, mut ends, mut incremental) = (0, 0, 0);
    let mut prev: Option<Snapshot> = None;
    while at + 8 <= data.len() {
        let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        let kind = &data[at + 4..at + 8];
        at += size;
        if kind != b"mdat" {
            continue;
        }
        let from = prev
            .as_ref()
            .and_then(|p| Some((&p.index, p.resume.as_ref()?)));
        let got = snapshot(&copy, at as u64, &Default::default(), from).unwrap();
        let whole = snapshot(&copy, at as u64, &Default::default(), None).unwrap();
        assert!(got.index.bytes() == whole.index.bytes(), "at {at}");
        (ends, incremental) = (ends + 1, incremental + usize::from(got.incremental));
        prev = Some(got);
    }
    assert!(
        ends >= 4 && incremental == ends - 1,
        "{incremental} of {ends}"
    );
}

/// `got` is `src` from its start, but for at most `missing` at the end.
fn assert_prefix(got: &[String], src: &[String], missing: usize, what: &str) {
    assert!(
        got.len() + missing >= src.len(),
        "{what}: {} of {}",
        got.len(),
        src.len()
    );
    assert_eq!(got, &src[..got.len()], "{what}");
}

#[test]
fn a_published_stream_is_recorded_as_a_title_with_the_published_packets() {
    let server = Server::start(CONFIG);
    let (file, title) = closed_recording(&server, publish(&server, "live/rec"), "live/rec");
    wait_for_log(&server, "title ready", Duration::from_secs(10));
    let file_s = file.to_str().unwrap();
    let probe = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name",
            "-of",
            "csv=p=0",
            file_s,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout)
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["h264", "aac"]
    );
    let src = source().to_str().unwrap();
    // Video: every packet from the first key frame (the file's first) on.
    assert_prefix(
        &packet_md5s(file_s, 0),
        &packet_md5s(src, 0),
        0,
        "video packets",
    );
    // Audio: from the first key frame on, a run of the published packets.
    let (got, all) = (packet_md5s(file_s, 1), packet_md5s(src, 1));
    let at = all
        .iter()
        .position(|m| *m == got[0])
        .expect("the first audio packet is one published");
    assert!(at <= 5, "audio starts at packet {at}");
    // The publisher's last AUs may trail its TEARDOWN by more than the drain.
    assert_prefix(&got, &all[at..], 3, "audio packets");
    // Played over RTSP from fjord, the frames are the published ones.
    let played = decoded_md5s(&server.url(&title));
    assert_prefix(&played, &decoded_md5s(src), 0, "frames played over RTSP");
    assert_snapshots_are_incremental(&file);
    // A stream at a path live_record does not match is not recorded.
    let other = publish(&server, "other/x").wait_with_output().unwrap();
    assert!(other.status.success());
    assert!(!server.media_root().join("other").exists());
}

/// AAC published in LATM (RFC 6416, `MP4A-LATM`: ffmpeg's `-rtpflags
/// latm`, GStreamer's `rtpmp4apay`) is recorded as AAC: its
/// AudioSpecificConfig from the SDP's StreamMuxConfig, its access units
/// the published ones.
#[test]
fn aac_published_in_latm_is_recorded_with_the_published_access_units() {
    let server = Server::start(CONFIG);
    let publisher = publish_with(&server, "live/latm", source(), &["-rtpflags", "latm"]);
    let (file, _) = closed_recording(&server, publisher, "live/latm");
    let file_s = file.to_str().unwrap();
    let src = source().to_str().unwrap();
    let (got, all) = (packet_md5s(file_s, 1), packet_md5s(src, 1));
    assert!(got.len() > 100, "{} audio packets recorded", got.len());
    let at = (all.iter().position(|m| *m == got[0])).expect("a published access unit");
    assert!(at <= 5, "audio starts at packet {at}");
    assert_prefix(&got, &all[at..], 3, "LATM access units");
    assert!(!server.log_text().contains("left out of the recording"));
}

/// With `live_record_max_s` a recording is files of that length or a
/// little more, each from a key frame: together every published video
/// packet from the first key frame on, none twice, none missing between
/// them; each a title of its own.
#[test]
fn a_recording_past_live_record_max_s_goes_on_in_a_new_file_at_a_key_frame() {
    let config = format!(
        "live_record_max_s = 2\n{CONFIG}[[user]]\nname = \"ops\"\npassword = \"pager\"\nadmin = true\n"
    );
    let server = Server::start(&config);
    let p = publish(&server, "live/split");
    let dir = server.media_root().join("live/split");
    let files = || -> Vec<PathBuf> {
        let mut f: Vec<PathBuf> = (std::fs::read_dir(&dir).into_iter().flatten())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "mp4"))
            .collect();
        f.sort();
        f
    };
    // While it is published, the API names the file being written.
    let deadline = Instant::now() + Duration::from_secs(5);
    while files().len() < 2 {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let api = format!("{}/api/v1/live", server.admin());
    let (live, code) = curl(&["--digest", "-u", "ops:pager", &api]);
    assert_eq!(code, 200, "{live}");
    let live: serde_json::Value = serde_json::from_str(&live).unwrap();
    let named = live[0]["recording"].as_str().unwrap().to_owned();
    let now = files();
    let newest = now
        .last()
        .unwrap()
        .strip_prefix(server.media_root())
        .unwrap();
    // A third file may have begun between the two looks.
    assert!(
        named == newest.to_str().unwrap() || now.len() > 2,
        "the API names {named}, the newest file is {}",
        newest.display()
    );
    assert_ne!(
        named,
        files()[0]
            .strip_prefix(server.media_root())
            .unwrap()
            .to_str()
            .unwrap()
    );
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.log_text().matches("live recording closed").count() < files().len().max(2) {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let files = files();
    assert!(
        (2..=4).contains(&files.len()),
        "6 s in {} files",
        files.len()
    );
    let src = packet_md5s(source().to_str().unwrap(), 0);
    let mut got = Vec::new();
    for f in &files {
        let packets = packet_md5s(f.to_str().unwrap(), 0);
        // Each begins with a key frame: one a second in the source.
        let at = src
            .iter()
            .position(|m| *m == packets[0])
            .expect("a published packet");
        assert_eq!(at % 25, 0, "{} begins at packet {at}", f.display());
        got.extend(packets);
    }
    assert_prefix(&got, &src, 0, "video packets of the files in turn");
    let title = files[1].strip_prefix(server.media_root()).unwrap();
    let played = decoded_md5s(&server.url(title.to_str().unwrap()));
    assert!(
        played.len() >= 50,
        "the second file played {} frames",
        played.len()
    );
}

#[test]
fn a_recording_left_by_a_killed_server_is_served_up_to_its_last_fragment() {
    let media = tempfile::tempdir().unwrap();
    let server = Server::start_on(media.path(), CONFIG);
    let mut p = publish(&server, "live/crash");
    wait_for_log(&server, "live stream recorded", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(3500));
    server.signal("KILL");
    drop(server);
    let _ = p.kill();
    let _ = p.wait();
    let (file, title) = recording(media.path(), "live/crash");
    let http = crate::common::free_port();
    let server = Server::start_on(media.path(), &format!("http_port = {http}\n{CONFIG}"));
    let src = decoded_md5s(source().to_str().unwrap());
    let played = decoded_md5s(&server.url(&title));
    // At least two whole fragments (a key frame a second) were synced.
    assert!(played.len() >= 50, "{} frames", played.len());
    assert_prefix(&played, &src, src.len(), "frames played after the crash");
    assert!(decoded_md5s(file.to_str().unwrap()).len() >= played.len());
    // The path's alias still names it after the restart, over RTSP (the
    // SETUP of a second track names the alias too) and HTTP.
    let by_alias = decoded_md5s(&server.url("live/crash/latest.mp4"));
    assert_eq!(by_alias, played, "latest.mp4 over RTSP after a restart");
    let latest = format!("http://127.0.0.1:{http}/live/crash/latest.mp4");
    assert!(
        curl_bytes(&latest) == std::fs::read(&file).unwrap(),
        "latest.mp4 after a restart"
    );
}

#[test]
fn a_publisher_back_within_the_grace_continues_the_same_recording() {
    let server = Server::start(CONFIG);
    let mut first = publish(&server, "live/again");
    wait_for_log(&server, "live stream recorded", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(2500));
    // Killed: no TEARDOWN, so the stream is held for the next publisher.
    let _ = first.kill();
    let _ = first.wait();
    wait_for_log(&server, "live stream held", Duration::from_secs(5));
    let (file, _) = closed_recording(&server, publish(&server, "live/again"), "live/again");
    assert!(server.log_text().contains("continued by a new publisher"));
    // The first publisher's video packets from the start, then the
    // second's: compared as stored, since decoding the first part's last
    // B-frames without the references the kill cut off conceals them.
    let src = packet_md5s(source().to_str().unwrap(), 0);
    let got = packet_md5s(file.to_str().unwrap(), 0);
    let k = (got.iter().skip(1).position(|m| *m == src[0]))
        .expect("the second publisher's first frame")
        + 1;
    assert!(k >= 25, "the first publisher's part is {k} frames");
    assert_prefix(&got[..k], &src, src.len(), "the first publisher's frames");
    assert_prefix(&got[k..], &src, 0, "the second publisher's frames");
}

/// A media playlist's segment count, and whether it is the growing
/// recording's (EVENT, no ENDLIST) or the closed title's (VOD, ENDLIST).
/// A recording's media playlist: EVENT, growing or ended; how many
/// segments it lists, and whether it ended.
fn segments_of(playlist: &str) -> (usize, bool) {
    assert!(
        playlist.contains("#EXT-X-PLAYLIST-TYPE:EVENT\n"),
        "{playlist}"
    );
    let n = playlist.lines().filter(|l| l.starts_with("seg-")).count();
    (n, playlist.contains("#EXT-X-ENDLIST"))
}

/// The type of an MP4 file's last top-level box, if its boxes end exactly
/// at its end.
fn last_box(mp4: &[u8]) -> Option<[u8; 4]> {
    let (mut at, mut last) = (0, None);
    while at < mp4.len() {
        let head = mp4.get(at..at + 16)?;
        let size = match u32::from_be_bytes(head[..4].try_into().unwrap()) {
            1 => u64::from_be_bytes(head[8..16].try_into().unwrap()) as usize,
            n => n as usize,
        };
        last = Some(head[4..8].try_into().unwrap());
        at = at.checked_add(size.max(8))?;
    }
    (at == mp4.len()).then_some(last?)
}

/// Where `run` lies in `all` (every one of its items in a row there).
fn run_at(run: &[String], all: &[String], what: &str) -> usize {
    assert!(!run.is_empty(), "{what}: nothing");
    (0..all.len())
        .find(|&i| all[i..].starts_with(run))
        .unwrap_or_else(|| panic!("{what}: {} frames, not a run of the file's", run.len()))
}

/// The duration a DESCRIBE of `title` answers (`a=range:npt=0-D`).
fn recorded_s(server: &Server, title: &str) -> f64 {
    let describe = format!("DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n", server.url(title));
    let (sdp, _) = raw_exchange(
        &server.addr(),
        describe.as_bytes(),
        Duration::from_millis(500),
    );
    assert!(sdp.starts_with("RTSP/1.0 200"), "{sdp}");
    (sdp.lines())
        .find_map(|l| l.strip_prefix("a=range:npt=0-"))
        .and_then(|d| d.trim().parse().ok())
        .unwrap_or_else(|| panic!("{sdp}"))
}

/// Trick play of the growing `title` (its snapshot at the DESCRIBE):
/// Scale 4 from 2 s plays to its end at four times the pace; a PLAY past
/// its end is refused with the reason.
fn fast_forward(server: &Server, title: &str) {
    let (mut c, mut rx, recorded) = crate::client::open(server, title, false);
    let url = c.control_url().to_string();
    let past = format!("npt={}-", recorded + 5.0);
    let r = c.request("PLAY", &url, &[("Range", &past)], b"").unwrap();
    assert_eq!(r.status, 457, "{}", String::from_utf8_lossy(&r.body));
    let started = Instant::now();
    let r = c
        .request("PLAY", &url, &[("Scale", "4"), ("Range", "npt=2-")], b"")
        .unwrap();
    assert_eq!((r.status, r.header("Scale")), (200, Some("4")));
    let cap = crate::client::recv(&mut c, &mut rx, crate::client::QUIET, crate::client::LIMIT);
    assert_eq!(cap.end, fjord_client::EndReason::Bye);
    let took = started.elapsed().as_secs_f64();
    let pictures = cap.packets.iter().filter(|p| p.marker).count();
    // Key frames only, a second apart, sent in a quarter of the time (a
    // half allowed for a loaded machine).
    let seconds = recorded - 2.0;
    assert!(
        took < seconds / 2.0,
        "{took:.1} s for {seconds:.1} s at Scale 4"
    );
    let want = seconds as usize;
    assert!(
        pictures + 2 >= want && pictures <= want + 2,
        "{pictures} pictures in {seconds:.1} s"
    );
}

#[test]
fn a_growing_recording_is_played_over_rtsp_and_hls_while_it_is_recorded() {
    let config = format!("{CONFIG}[[user]]\nname = \"ops\"\npassword = \"pager\"\nadmin = true\n");
    let (server, http) = Server::start_http(&config);
    let started = Instant::now();
    let mut p = publish_file(&server, "live/grow", source_30s());
    wait_for_log(&server, "live stream recorded", Duration::from_secs(10));
    // The viewer finds the recording's name in the API.
    let api = format!("{}/api/v1/live", server.admin());
    let (live, code) = curl(&["--digest", "-u", "ops:pager", &api]);
    assert_eq!(code, 200, "{live}");
    let live: serde_json::Value = serde_json::from_str(&live).unwrap();
    let title = live[0]["recording"].as_str().unwrap().to_owned();
    assert!(title.starts_with("live/grow/"), "{live}");
    let at = |s: u64| {
        std::thread::sleep(
            (started + Duration::from_secs(s)).saturating_duration_since(Instant::now()),
        )
    };
    at(9);
    // HLS by the stream's alias for its newest recording.
    let playlist = format!("http://127.0.0.1:{http}/live/grow/latest.mp4/media.m3u8");
    let (first, code) = curl(&["-i", &playlist]);
    assert_eq!(code, 200, "{first}");
    assert!(
        first
            .to_ascii_lowercase()
            .contains("cache-control: max-age=1"),
        "{first}"
    );
    let (n1, ended) = segments_of(&first);
    assert!(!ended && n1 >= 1, "{first}");
    // The multivariant playlist rates it; no I-frame playlist yet.
    let (multivariant, _) = curl(&[&playlist.replace("media.m3u8", "index.m3u8")]);
    assert!(!multivariant.contains("BANDWIDTH=0,"), "{multivariant}");
    assert!(!multivariant.contains("I-FRAME"), "{multivariant}");
    assert_eq!(curl_status(&[&playlist.replace("media", "iframes")]), 404);
    // A download is what is durable: whole fragments, none half written.
    let download = curl_bytes(&playlist.replace("/media.m3u8", ""));
    assert_eq!(
        last_box(&download),
        Some(*b"mdat"),
        "{} bytes",
        download.len()
    );
    // ffmpeg follows the growing playlist from its first segment.
    let mut cmd = Command::new("ffmpeg");
    cmd.args([
        "-nostdin",
        "-v",
        "error",
        "-live_start_index",
        "0",
        "-i",
        &playlist,
    ])
    .args(["-map", "0:v", "-pix_fmt", "yuv420p", "-f", "framemd5", "-"]);
    let hls = std::thread::spawn(move || run_bounded(cmd, Duration::from_secs(80)));
    at(13);
    // A seek back to 5 s, played to what was recorded at its DESCRIBE
    // (between the two of ours) over RTSP.
    let before = recorded_s(&server, &title);
    assert!((9.0..14.0).contains(&before), "{before} s recorded");
    let url = server.url(&title);
    let rtsp = std::thread::spawn(move || {
        let args = "-map 0:v -fps_mode passthrough -pix_fmt yuv420p -f framemd5 -";
        let mut args: Vec<&str> = args.split(' ').collect();
        args.splice(0..0, ["-ss", "5", "-i", &url]);
        md5_column(&ffmpeg(&args, Duration::from_secs(30)))
    });
    std::thread::sleep(Duration::from_millis(1500));
    let after = recorded_s(&server, &title);
    fast_forward(&server, &title);
    let played = rtsp.join().unwrap();
    assert!(
        p.try_wait().unwrap().is_none(),
        "the publisher ended before the play did"
    );
    let (second, _) = curl(&[&playlist]);
    let (n2, ended) = segments_of(&second);
    assert!(!ended && n2 > n1, "{n1} then {n2} segments:\n{second}");
    // The segment after the listed ones still grows: not served yet.
    let unlisted = format!("http://127.0.0.1:{http}/live/grow/latest.mp4/seg-{n2}.m4s");
    assert_eq!(curl_status(&[&unlisted]), 404);
    assert!(
        second.starts_with(&first[first.find("#EXTM3U").unwrap()..first.rfind("#EXTINF").unwrap()]),
        "the playlist changed:\n{first}\n{second}"
    );
    // The first snapshot planned the prefix whole; the later ones only
    // the fragments since the one before.
    let metrics = format!("{}/metrics", server.admin());
    let (metrics, _) = curl(&["--digest", "-u", "ops:pager", &metrics]);
    let made = |how: &str| -> u64 {
        let line = format!("fjord_recording_snapshots_total{{planned=\"{how}\"}} ");
        (metrics.lines().find_map(|l| l.strip_prefix(&line)))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{metrics}"))
    };
    assert_eq!(made("whole"), 1, "{metrics}");
    assert!(made("incremental") >= 2, "{metrics}");
    let (file, _) = closed_recording(&server, p, "live/grow");
    assert!(std::fs::read(&file).unwrap().starts_with(&download));
    let frames = decoded_md5s(file.to_str().unwrap());
    // Over RTSP: a run of the file's frames from about 5 s (frame 125)
    // to the end recorded at the DESCRIBE. fjord starts the play at the
    // key frame before (x264's, a second apart: frame 100); ffmpeg's cut
    // at 5 s lets that key frame out first, and under load (its clock set
    // by the first sender report) it was seen a frame early or late.
    let lead = usize::from(played[0] == frames[100]);
    let k = run_at(&played[lead..], &frames, "RTSP");
    assert!(
        (100..=131).contains(&k),
        "the play began at frame {k}, not within a quarter second of 5 s"
    );
    let end = k + played.len() - lead - 1;
    let (lo, hi) = ((before * 25.0) as usize, (after * 25.0) as usize);
    assert!(
        end + 3 >= lo && end <= hi + 3,
        "played to frame {end}, {lo} to {hi} recorded"
    );
    // Over HLS: every frame of the file, read while it grew, then to its end.
    // Ended: the same playlist, lines only appended (RFC 8216 §6.2.1).
    let (last, _) = curl(&[&playlist]);
    assert!(segments_of(&last).1, "{last}");
    assert!(
        last.starts_with(&second),
        "not appended to:\n{second}\n{last}"
    );
    let out = hls.join().unwrap();
    assert!(
        !out.timed_out && out.status.success(),
        "ffmpeg HLS: {}",
        out.stderr
    );
    let got = md5_column(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(got.len(), frames.len(), "HLS frames");
    assert!(got == frames, "HLS frames differ from the file's");
}

/// hls.js in chromium follows a growing recording's EVENT playlist, seeks
/// back 20 s into it while it grows, and plays on to its end once the
/// playlist ends; every segment it was sent is, byte for byte, the one
/// the ended recording serves.
#[test]
fn hls_js_seeks_back_into_a_growing_recording_and_plays_it_to_the_end() {
    let (mut server, http) = Server::start_http(CONFIG);
    let p = publish_file(&server, "live/js", source_30s());
    let base = format!("http://127.0.0.1:{http}/live/js/latest.mp4");
    let listed = Instant::now() + Duration::from_secs(15);
    while !curl(&[&format!("{base}/media.m3u8")]).0.contains("seg-0") {
        assert!(Instant::now() < listed, "no segment listed");
        std::thread::sleep(Duration::from_millis(200));
    }
    let url = format!("{base}/index.m3u8");
    let r = chromium_plays("hls", &url, &["--live-back-s", "20"], 90, "live-hls.png");
    let said = r.to_string();
    assert_eq!(r["live_at_seek"], true, "{said}");
    let (from, to) = (r["seeked_from"].as_f64(), r["seeked_to"].as_f64());
    assert!(from.unwrap() - to.unwrap() == 20.0, "{said}");
    assert!(r["played_after_seek"].as_f64().unwrap() > 29.0, "{said}");
    closed_recording(&server, p, "live/js");
    let fetched = r["fetched"].as_array().unwrap();
    let (last, _) = curl(&[&format!("{base}/media.m3u8")]);
    // It fetched every segment the ended playlist lists, the last too.
    let got = |name: &str| {
        (fetched.iter()).any(|f| f["url"].as_str().unwrap().ends_with(&format!("/{name}")))
    };
    let mut names = last.lines().filter(|l| l.starts_with("seg-"));
    assert!(names.all(got) && got("init.mp4"), "{said}\n{last}");
    for f in fetched.iter().filter(|f| f["status"] == 200) {
        let url = f["url"].as_str().unwrap();
        let now: String = (md5::Md5::digest(curl_bytes(url)).iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(f["md5"].as_str(), Some(now.as_str()), "{url}");
    }
    server.assert_healthy();
}

/// dash.js in chromium follows a growing recording's dynamic manifest,
/// seeks back 20 s into it and plays on to its end once the manifest,
/// static then, says the recording ended; every segment it was sent is,
/// byte for byte, the one the ended recording serves.
#[test]
fn dash_js_follows_a_growing_recordings_dynamic_manifest_to_the_end() {
    let (mut server, http) = Server::start_http(CONFIG);
    let p = publish_file(&server, "live/dash", source_30s());
    let base = format!("http://127.0.0.1:{http}/live/dash/latest.mp4");
    let mpd = format!("{base}/manifest.mpd");
    let listed = Instant::now() + Duration::from_secs(15);
    let growing = loop {
        let (text, _) = curl(&[&mpd]);
        if text.contains("<S ") {
            break text;
        }
        assert!(Instant::now() < listed, "no segment listed:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        growing.contains("type=\"dynamic\"") && growing.contains("minimumUpdatePeriod="),
        "{growing}"
    );
    assert!(!growing.contains("mediaPresentationDuration"), "{growing}");
    let r = chromium_plays("dash", &mpd, &["--live-back-s", "20"], 120, "live-dash.png");
    let said = r.to_string();
    assert_eq!(r["live_at_seek"], true, "{said}");
    assert!(r["played_after_seek"].as_f64().unwrap() > 29.0, "{said}");
    closed_recording(&server, p, "live/dash");
    // Ended: static, its duration given (dash.js took it as the end).
    let (ended, _) = curl(&[&mpd]);
    assert!(
        ended.contains("type=\"static\" mediaPresentationDuration="),
        "{ended}"
    );
    let fetched = r["fetched"].as_array().unwrap();
    let ok: Vec<&str> = (fetched.iter())
        .filter(|f| f["status"] == 200)
        .map(|f| f["url"].as_str().unwrap())
        .collect();
    // Both representations' init segments and last segments (it played
    // to the end); their one timeline is written in each.
    let repeats = |l: &str| -> usize {
        (l.split(" r=\"").nth(1))
            .and_then(|r| r.split('"').next()?.parse().ok())
            .unwrap_or(0)
    };
    let in_both: usize = (ended.lines().filter(|l| l.starts_with("<S ")))
        .map(|l| 1 + repeats(l))
        .sum();
    let last = in_both / 2 - 1;
    for k in 0..2 {
        for name in [format!("/init-{k}.mp4"), format!("/seg-{k}-{last}.m4s")] {
            assert!(ok.iter().any(|u| u.ends_with(&name)), "{name}: {said}");
        }
    }
    for url in ok {
        let now: String = (md5::Md5::digest(curl_bytes(url)).iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        let f = fetched.iter().find(|f| f["url"] == url).unwrap();
        assert_eq!(f["md5"].as_str(), Some(now.as_str()), "{url}");
    }
    server.assert_healthy();
}

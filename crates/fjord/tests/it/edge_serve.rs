//! An edge serving its origin's titles (`origin = "s3://…"`) against a
//! real S3 server (versitygw): RTSP and HTTP bytes compared with the
//! published file, origin requests counted in the S3 server's own log.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fjord_client::RtspClient;
use fjord_edge::slice::SLICE_BYTES;

use crate::client::{LIMIT, QUIET, open, recv};
use crate::common::s3::{S3_KEY_ID, S3_SECRET};
use crate::common::{S3Server, Server, TsClip, assert_contiguous, free_port, media, muxed_10mbit};
use crate::formats;

/// A title of several slices: 10 s at about 6 Mbit/s.
fn big_title() -> PathBuf {
    let clip = TsClip {
        size: "640x360",
        tone: 550,
        seconds: 10,
        rates: ("6M", "128k"),
        extra: &[],
    };
    clip.make("edge-big.ts")
}

/// `files` published to `s3` under their names, from a directory of
/// copies (publish writes sidecars beside them).
fn published(s3: &S3Server, files: &[(&Path, &str)]) -> tempfile::TempDir {
    published_with(s3, files, &[])
}

/// [`published`] with more `fjord publish` arguments.
fn published_with(s3: &S3Server, files: &[(&Path, &str)], more: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = files
        .iter()
        .map(|(from, name)| {
            let to = dir.path().join(name);
            std::fs::copy(from, &to).unwrap();
            to
        })
        .collect();
    let refs: Vec<&Path> = copies.iter().map(PathBuf::as_path).collect();
    let out = crate::edge::publish_with(s3, &refs, more);
    assert!(out.status.success(), "publish: {}", out.stderr);
    dir
}

/// An edge of `s3`'s `films/lib` with an empty root, its cache in `cache`,
/// HTTP on `http`.
fn edge(s3: &S3Server, cache: &Path, http: u16) -> Server {
    edge_with(s3, cache, http, "")
}

/// [`edge`] with `more` config lines.
fn edge_with(s3: &S3Server, cache: &Path, http: u16, more: &str) -> Server {
    let config = format!(
        "http_port = {http}\norigin = \"s3://films/lib\"\norigin_endpoint = \"{}\"\n\
         origin_region = \"us-east-1\"\ncache_dir = \"{}\"\ncache_gb = 1\n{more}",
        s3.endpoint,
        cache.display()
    );
    let env = [
        ("AWS_ACCESS_KEY_ID", Path::new(S3_KEY_ID)),
        ("AWS_SECRET_ACCESS_KEY", Path::new(S3_SECRET)),
    ];
    Server::start_env(&config, &env, |_| {})
}

/// Plays `title` whole over UDP or TCP and checks every byte against
/// `source`.
fn plays_whole(server: &Server, title: &str, tcp: bool, source: &[u8]) {
    let (mut c, mut rx, _) = open(server, title, tcp);
    c.play(None).expect("PLAY");
    let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
    let what = format!("{title} over {}", if tcp { "TCP" } else { "UDP" });
    let (start, end) = assert_contiguous(source, &cap.packets, &what);
    assert_eq!((start, end), (0, source.len()), "{what}: the whole title");
}

fn slices(bytes: u64) -> usize {
    bytes.div_ceil(SLICE_BYTES) as usize
}

/// Ten UDP sessions and one TCP session start one uncached title at
/// once and each receives it whole, bit-exact, while it is fetched; an
/// HTTP download equals the file. The sessions send from the published
/// packet file and the downloads from the media: every slice of either
/// is fetched once, and of the index no more than it has.
#[test]
fn an_edge_plays_an_uncached_title_bit_exact_fetching_each_slice_once() {
    let s3 = S3Server::start("films");
    let big = big_title();
    let dir = published(&s3, &[(&big, "big.ts")]);
    let source = std::fs::read(&big).unwrap();
    let len = |name: &str| std::fs::metadata(dir.path().join(name)).unwrap().len();
    let (index_len, packets_len) = (len("big.ts.fjidx"), len("big.ts.fjpkt"));
    // Of the parity, its first slice: no session asks for repair.
    let parity_len = len("big.ts.fjfec").min(SLICE_BYTES);
    assert!(slices(source.len() as u64) >= 3, "{} bytes", source.len());
    let cache = tempfile::tempdir().unwrap();
    let http = free_port();
    let server = edge(&s3, cache.path(), http);
    std::thread::scope(|s| {
        for i in 0..11 {
            let (server, source) = (&server, &source);
            s.spawn(move || plays_whole(server, "big.ts", i == 0, source));
        }
    });
    let url = format!("http://127.0.0.1:{http}/big.ts");
    let got = crate::common::curl_bytes(&url);
    assert_eq!(blake3::hash(&got), blake3::hash(&source), "HTTP download");
    let over_hls = formats::framemd5(&["-i", &format!("{url}/index.m3u8")], formats::COPY, "HLS");
    let file = formats::framemd5(&["-i", big.to_str().unwrap()], formats::COPY, "file");
    assert!(
        over_hls == file,
        "HLS of an origin title differs from the file"
    );
    let gets = s3.requests("GetObject");
    let of = |suffix: &str| gets.iter().filter(|l| l.contains(suffix)).count();
    let (index_gets, packet_gets) = (of("big.ts.fjidx"), of("big.ts.fjpkt"));
    let parity_gets = of("big.ts.fjfec");
    let media_gets = gets.len() - index_gets - packet_gets - parity_gets;
    assert_eq!(parity_gets, 1, "{gets:#?}");
    assert_eq!(media_gets, slices(source.len() as u64), "{gets:#?}");
    assert_eq!(packet_gets, slices(packets_len), "{gets:#?}");
    assert!(index_gets <= slices(index_len), "{gets:#?}");
    let (metrics, _) = crate::common::curl(&[&format!("{}/metrics", server.admin())]);
    let requests = format!("fjord_origin_requests_total {}\n", gets.len());
    assert!(metrics.contains(&requests), "{requests}in\n{metrics}");
    // The index is one slice: every byte of the three came once.
    assert_eq!(slices(index_len), 1);
    let bytes = format!(
        "fjord_origin_bytes_total {}\n",
        source.len() as u64 + index_len + packets_len + parity_len
    );
    assert!(metrics.contains(&bytes), "{bytes}in\n{metrics}");
    let parts = [
        ("media", source.len() as u64),
        ("index", index_len),
        ("packets", packets_len),
        ("parity", parity_len),
    ];
    for (part, n) in parts {
        let line = format!("fjord_origin_part_bytes_total{{part=\"{part}\"}} {n}\n");
        assert!(metrics.contains(&line), "{line}in\n{metrics}");
    }
}

/// After a restart nothing cached is fetched again, and a byte flipped
/// in a cached slice is fetched again (only that slice). The origin
/// stopped mid-play: a cached title plays on bit-exact, a session whose
/// next slices cannot come ends with BYE, and an uncached title is refused
/// with 503 and Retry-After within a second, over RTSP and HTTP.
#[test]
fn cached_titles_play_on_without_the_origin_and_uncached_ones_get_503() {
    let mut s3 = S3Server::start("films");
    let (clip, big) = (&media().clip, big_title());
    let titles = [
        (clip.as_path(), "a.ts"),
        (&media().vbr, "b.ts"),
        (&big, "c.ts"),
    ];
    let dir = published(&s3, &titles);
    let source = std::fs::read(clip).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let http = free_port();
    let server = edge(&s3, cache.path(), http);
    plays_whole(&server, "a.ts", false, &source);
    let before = s3.requests("GetObject").len();
    drop(server);
    // A restart with a byte flipped in the cached packet file (what the
    // sessions send from): only its slice is fetched again.
    let objects = cache.path().join("objects");
    let packets_len = std::fs::metadata(dir.path().join("a.ts.fjpkt"))
        .unwrap()
        .len();
    let packets_file = std::fs::read_dir(&objects)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::metadata(p).unwrap().len() == packets_len)
        .expect("the packet file in the cache");
    let mut bytes = std::fs::read(&packets_file).unwrap();
    bytes[packets_len as usize / 2] ^= 0x40;
    std::fs::write(&packets_file, bytes).unwrap();
    let server = edge(&s3, cache.path(), http);
    plays_whole(&server, "a.ts", true, &source);
    let refetched = s3.requests("GetObject").len() - before;
    assert_eq!(refetched, 1, "the corrupt slice alone");
    let big_bytes = std::fs::read(&big).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| plays_whole(&server, "a.ts", false, &source));
        let cut = s.spawn(|| {
            let (mut c, mut rx, _) = open(&server, "c.ts", false);
            c.play(None).expect("PLAY");
            recv(&mut c, &mut rx, QUIET, LIMIT)
        });
        std::thread::sleep(Duration::from_secs(1));
        s3.stop();
        let cap = cut.join().unwrap();
        let (_, end) = assert_contiguous(&big_bytes, &cap.packets, "c.ts, cut");
        assert!(end < big_bytes.len(), "its last slices never came");
        assert_eq!(cap.end, fjord_client::EndReason::Bye);
    });
    let t = Instant::now();
    let mut c = RtspClient::connect(&server.url("b.ts")).unwrap();
    let r = c
        .request("DESCRIBE", &server.url("b.ts"), &[], b"")
        .unwrap();
    assert_eq!(r.status, 503, "an uncached title without its origin");
    assert!(r.header("Retry-After").is_some(), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let t = Instant::now();
    let (_, code) = crate::common::curl(&["-I", &format!("http://127.0.0.1:{http}/b.ts")]);
    assert_eq!(code, 503);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    plays_whole(&server, "a.ts", false, &source);
}

/// A title republished with other content is served new at the next
/// DESCRIBE (its new ETag), never a mix of the two.
#[test]
fn a_changed_object_at_the_origin_is_served_new() {
    let s3 = S3Server::start("films");
    let _first = published(&s3, &[(&media().clip, "t.ts")]);
    let cache = tempfile::tempdir().unwrap();
    let server = edge(&s3, cache.path(), free_port());
    plays_whole(
        &server,
        "t.ts",
        false,
        &std::fs::read(&media().clip).unwrap(),
    );
    let _second = published(&s3, &[(&media().vbr, "t.ts")]);
    plays_whole(
        &server,
        "t.ts",
        false,
        &std::fs::read(&media().vbr).unwrap(),
    );
}

/// An MP4 title of the origin, uncached when they start: ffmpeg (UDP and
/// TCP) and GStreamer (UDP and TCP) receive every frame as the file holds
/// it, all at once while it is fetched.
#[test]
fn ffmpeg_and_gstreamer_play_an_origin_mp4_title_bit_exact() {
    let s3 = S3Server::start("films");
    let case = &formats::AVC_MP4;
    let source = formats::media(case);
    let _dir = published(&s3, &[(&source, case.file)]);
    let cache = tempfile::tempdir().unwrap();
    let mut server = edge(&s3, cache.path(), free_port());
    let want = formats::source_packets(case, &source);
    std::thread::scope(|s| {
        for transport in ["udp", "tcp"] {
            let (server, source, want) = (&server, &source, &want);
            s.spawn(move || formats::ffmpeg_plays_over(server, case, source, want, transport));
            s.spawn(move || formats::gstreamer_plays(server, case, source, transport));
        }
    });
    server.assert_alive();
}

/// MP4 and Matroska titles of the origin over HLS and DASH from an edge
/// that has none of them cached: fragmented MP4 cut from what it fetched
/// of each (an MP4's `moov`, a Matroska file's frame table and head), samples filled in
/// as the segments are sent. ffmpeg reads every packet of the file.
#[test]
fn hls_and_dash_of_origin_mp4_and_matroska_titles_are_the_files_packets() {
    let s3 = S3Server::start("films");
    let cases = [&formats::AVC_MP4, &crate::containers::AVC_MKV];
    let sources: Vec<PathBuf> = cases.iter().map(|c| formats::media(c)).collect();
    let named: Vec<(&Path, &str)> = (cases.iter().zip(&sources))
        .map(|(c, s)| (s.as_path(), c.file))
        .collect();
    let _dir = published(&s3, &named);
    let cache = tempfile::tempdir().unwrap();
    let http = free_port();
    let mut server = edge(&s3, cache.path(), http);
    let copy = crate::containers::COPY_FROM_FIRST;
    for (case, source) in cases.iter().zip(&sources) {
        let want = formats::framemd5(&["-i", source.to_str().unwrap()], copy, "source");
        for manifest in ["index.m3u8", "manifest.mpd"] {
            let url = format!("http://127.0.0.1:{http}/{}/{manifest}", case.file);
            let got = formats::framemd5(&["-i", &url], copy, manifest);
            let what = format!("{} {manifest}", case.file);
            formats::assert_packets_match(&got, &want, &what);
        }
    }
    server.assert_alive();
}

/// A Matroska or WebM title of several slices: noisy 640x360 video at
/// about 9 Mbit/s, H.264 and AAC for 12 s, or VP8 (whose rate control in
/// real-time mode gives about half) and Opus for 24 s.
fn big_matroska(webm: bool) -> PathBuf {
    let (name, seconds, codecs): (&str, &str, &[&str]) = match webm {
        false => (
            "edge-big.mkv",
            "12",
            &[
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-c:a",
                "aac",
                "-f",
                "matroska",
            ],
        ),
        true => (
            "edge-big-24s.webm",
            "24",
            &[
                "-c:v",
                "libvpx",
                "-deadline",
                "realtime",
                "-cpu-used",
                "8",
                "-c:a",
                "libopus",
                "-f",
                "webm",
            ],
        ),
    };
    let mut args = vec![
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=640x360:rate=25,noise=alls=40:allf=t",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:sample_rate=48000",
        "-t",
        seconds,
        "-g",
        "50",
        "-b:v",
        "9M",
        "-maxrate",
        "9M",
        "-bufsize",
        "2M",
    ];
    args.extend(codecs);
    crate::common::generate_media(name, &args)
}

/// The origin's bytes of the media part so far, from the edge's metrics.
fn media_bytes_fetched(server: &Server, part: &str) -> u64 {
    let (metrics, _) = crate::common::curl(&[&format!("{}/metrics", server.admin())]);
    let line = format!("fjord_origin_part_bytes_total{{part=\"{part}\"}} ");
    (metrics.lines())
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line}in\n{metrics}"))
}

/// An uncached Matroska and WebM title of several slices over HLS from an
/// edge: its playlists, init segment and first segment come having fetched
/// its frame table and a few slices of the file, not the whole of it
/// (the segments cut from the table), and then ffmpeg reads every packet
/// of the file over HLS and DASH.
#[test]
fn hls_of_an_origin_matroska_title_starts_without_fetching_all_of_it() {
    let s3 = S3Server::start("films");
    let sources = [big_matroska(false), big_matroska(true)];
    let names = ["big.mkv", "big.webm"];
    let named: Vec<(&Path, &str)> = (sources.iter().zip(names))
        .map(|(s, n)| (s.as_path(), n))
        .collect();
    let dir = published(&s3, &named);
    let cache = tempfile::tempdir().unwrap();
    let http = free_port();
    // Segments of 2 s: the first is a sixth of the title.
    let mut server = edge_with(&s3, cache.path(), http, "hls_segment_s = 2\n");
    let mut fetched_before = 0;
    for (source, name) in sources.iter().zip(names) {
        let len = std::fs::metadata(source).unwrap().len();
        assert!(slices(len) >= 6, "{name}: {len} bytes");
        assert!(
            dir.path().join(format!("{name}.fjfrm")).exists(),
            "{name}: no frame table"
        );
        let base = format!("http://127.0.0.1:{http}/{name}");
        let text = |path: &str| {
            String::from_utf8(crate::common::curl_bytes(&format!("{base}/{path}"))).unwrap()
        };
        assert!(text("index.m3u8").contains("media.m3u8"));
        let playlist = text("media.m3u8");
        let first = playlist
            .lines()
            .find(|l| l.ends_with(".m4s"))
            .expect("a segment");
        assert!(!crate::common::curl_bytes(&format!("{base}/init.mp4")).is_empty());
        assert!(!crate::common::curl_bytes(&format!("{base}/{first}")).is_empty());
        let fetched = media_bytes_fetched(&server, "media") - fetched_before;
        let table = std::fs::metadata(dir.path().join(format!("{name}.fjfrm")))
            .unwrap()
            .len();
        eprintln!(
            "{name}: {fetched} of its {len} bytes fetched for its first segment; frame table {table} bytes"
        );
        fetched_before += fetched;
        assert!(
            fetched <= 3 * SLICE_BYTES && fetched * 2 < len,
            "{name}: {fetched} of its {len} bytes fetched for its first segment"
        );
    }
    assert!(media_bytes_fetched(&server, "frames") > 0);
    let copy = crate::containers::COPY_FROM_FIRST;
    for (source, name) in sources.iter().zip(names) {
        let want = formats::framemd5(&["-i", source.to_str().unwrap()], copy, "source");
        for manifest in ["index.m3u8", "manifest.mpd"] {
            let url = format!("http://127.0.0.1:{http}/{name}/{manifest}");
            let got = formats::framemd5(&["-i", &url], copy, manifest);
            formats::assert_packets_match(&got, &want, &format!("{name} {manifest}"));
        }
    }
    server.assert_alive();
}

/// Repair streams of an origin title published with parity, played as
/// the FEC tests play them (`fjord play --drop`, which asks for repair):
/// every dropped packet is recovered and the title comes out bit-exact.
/// A session that does not ask for repair fetches no more of the parity
/// than its first slice (its header and block tables, which the title's
/// open reads); the one that asks fetches the rest as it plays.
#[test]
fn an_origin_title_published_with_parity_is_repaired_bit_exact() {
    let s3 = S3Server::start("films");
    let big = big_title();
    let dir = published_with(&s3, &[(&big, "big.ts")], &["--fec", "12:8"]);
    let source = std::fs::read(&big).unwrap();
    let parity_len = std::fs::metadata(dir.path().join("big.ts.fjfec"))
        .unwrap()
        .len();
    assert!(slices(parity_len) >= 2, "{parity_len} bytes of parity");
    let cache = tempfile::tempdir().unwrap();
    let mut server = edge(&s3, cache.path(), free_port());
    let mut c = RtspClient::connect(&server.url("big.ts")).unwrap();
    let sdp = c.describe_fec().unwrap().sdp;
    assert!(sdp.contains("a=group:FEC-FR S1 R1\r\n"), "{sdp}");
    plays_whole(&server, "big.ts", false, &source);
    let parity = media_bytes_fetched(&server, "parity");
    assert_eq!(
        parity, SLICE_BYTES,
        "parity fetched for a session without repair"
    );
    let out = tempfile::tempdir().unwrap();
    let args = ["--drop", "0.05", "--seed", "3"];
    let (report, got) = crate::fec::play_url(&server.url("big.ts"), out.path(), "big.ts", &args);
    assert!(
        got == source,
        "output differs from the source\n{}",
        report.text
    );
    assert!(report.get("dropped") > 10, "{}", report.text);
    assert_eq!(
        report.get("recovered"),
        report.get("lost"),
        "{}",
        report.text
    );
    assert_eq!(report.get("unrecoverable"), 0, "{}", report.text);
    assert_eq!(media_bytes_fetched(&server, "parity"), parity_len);
    server.assert_alive();
}

/// The link to the origin admits streams of titles being fetched up to
/// 80 % of `origin_mbit_s`, each title once however many streams play it:
/// a second title past that gets 453 naming the origin, until the first
/// title's last stream ends. A title all in the cache takes nothing of it.
#[test]
fn the_origin_link_admits_each_fetched_title_once() {
    let s3 = S3Server::start("films");
    // 10 Mbit/s; the link admits 12.8. a and b are 10 s, more than their
    // open fetches; c (3 s) is played whole first.
    let short = muxed_10mbit();
    let fat = TsClip {
        seconds: 10,
        ..TsClip::muxed_10mbit()
    }
    .make("edge-10mbit-10s.ts");
    let _dir = published(&s3, &[(&fat, "a.ts"), (&fat, "b.ts"), (&short, "c.ts")]);
    let cache = tempfile::tempdir().unwrap();
    let server = edge_with(&s3, cache.path(), free_port(), "origin_mbit_s = 16\n");
    let port = std::cell::Cell::new(50000);
    let setup = |title: &str| {
        let mut c = RtspClient::connect(&server.url(title)).unwrap();
        let d = c.describe().unwrap();
        port.set(port.get() + 2);
        let transport = format!(
            "RTP/AVP;unicast;client_port={}-{}",
            port.get(),
            port.get() + 1
        );
        let transport = transport.as_str();
        let r = c
            .request("SETUP", &d.track_urls[0], &[("Transport", transport)], &[])
            .unwrap();
        (c, r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    // c.ts played whole while the link is free: all cached after.
    plays_whole(&server, "c.ts", false, &std::fs::read(&short).unwrap());
    let (first, status, why) = setup("a.ts");
    assert_eq!(status, 200, "{why}");
    let (second, status, why) = setup("a.ts");
    assert_eq!(
        status, 200,
        "a title fetched for one stream is for all: {why}"
    );
    let (_, status, why) = setup("b.ts");
    assert_eq!(status, 453, "{why}");
    assert!(why.contains("origin") && why.contains("Mbit/s"), "{why}");
    drop(first);
    let (_, status, why) = setup("b.ts");
    assert_eq!(status, 453, "a.ts still has a stream: {why}");
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(5);
    let _b = loop {
        let (b, status, why) = setup("b.ts");
        if status == 200 {
            break b;
        }
        assert!(
            Instant::now() < deadline,
            "a.ts ended, still {status}: {why}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (_, status, why) = setup("a.ts");
    assert_eq!(status, 453, "b.ts holds the link: {why}");
    let (_, status, why) = setup("c.ts");
    assert_eq!(status, 200, "c.ts is all cached: {why}");
}

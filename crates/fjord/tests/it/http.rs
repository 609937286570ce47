//! HTTP downloads (`http_port`) against real clients: curl and ffmpeg
//! receive the stored bytes, whole, by range and through a seek; the
//! protocol's edges (validators, 416, pipelining, bad requests) over a raw
//! socket; a file cut short mid-download ends that download only.

use std::{
    fs,
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    time::Duration,
};

use crate::common::{Server, clip_bytes, media, read_until_close, run_bounded};

/// A server with HTTP downloads on a free port; the port.
pub(crate) fn server() -> (Server, u16) {
    Server::start_http("idle_timeout_s = 5\n")
}

fn curl(args: &[&str]) -> crate::common::Output {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "30"]).args(args);
    run_bounded(c, Duration::from_secs(40))
}

#[test]
fn curl_downloads_a_title_whole_and_by_range() {
    let (mut s, port) = server();
    let url = format!("http://127.0.0.1:{port}/clip.ts");
    let whole = curl(&["-D", "/dev/stderr", &url]);
    assert!(whole.status.success(), "{}", whole.stderr);
    assert!(
        whole.stdout == clip_bytes(),
        "the download differs from the stored file"
    );
    assert!(
        whole.stderr.contains("Content-Type: video/mp2t"),
        "{}",
        whole.stderr
    );
    let etag = whole
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("ETag: "))
        .expect("an ETag")
        .trim()
        .to_owned();

    let part = curl(&["-r", "100000-199999", "-D", "/dev/stderr", &url]);
    assert!(part.stderr.starts_with("HTTP/1.1 206 "), "{}", part.stderr);
    assert!(
        part.stdout == clip_bytes()[100_000..200_000],
        "range bytes differ"
    );

    let size = clip_bytes().len();
    // The first bytes, the last (a suffix) and from a point to the end.
    let ranges = [
        ("0-999".to_owned(), 0..1000),
        ("-1000".to_owned(), size - 1000..size),
        (format!("{}-", size - 1500), size - 1500..size),
    ];
    for (r, want) in ranges {
        let got = curl(&["-r", &r, &url]);
        assert!(got.stdout == clip_bytes()[want], "range {r} differs");
    }
    let past = curl(&[
        "-r",
        &format!("{size}-"),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&past.stdout), "416");
    let cached = curl(&[
        "-H",
        &format!("If-None-Match: {etag}"),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&cached.stdout), "304");
    let head = curl(&["-I", &url]);
    let head = String::from_utf8_lossy(&head.stdout);
    assert!(head.contains(&format!("Content-Length: {size}")), "{head}");
    for missing in ["nope.ts", "..%2Fclip.ts", "clip.ts.fjidx", ".hidden"] {
        let r = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://127.0.0.1:{port}/{missing}"),
        ]);
        assert_eq!(String::from_utf8_lossy(&r.stdout), "404", "{missing}");
    }
    s.assert_healthy();
}

/// ffmpeg reads the title over HTTP frame for frame as from the file, also
/// when it seeks (by byte ranges).
#[test]
fn ffmpeg_reads_over_http_what_it_reads_from_the_file() {
    let (_s, port) = server();
    let url = format!("http://127.0.0.1:{port}/clip.ts");
    let file = media().clip.to_str().unwrap().to_owned();
    let frames = |input: &str, seek: Option<&str>| {
        let mut c = Command::new("ffmpeg");
        c.args(["-nostdin", "-loglevel", "error"]);
        if let Some(ss) = seek {
            c.args(["-ss", ss]);
        }
        c.args([
            "-i", input, "-map", "0", "-c", "copy", "-f", "framemd5", "-",
        ]);
        let out = run_bounded(c, Duration::from_secs(60));
        assert!(out.status.success(), "ffmpeg {input}: {}", out.stderr);
        String::from_utf8(out.stdout).unwrap()
    };
    for seek in [None, Some("4")] {
        let (over_http, from_file) = (frames(&url, seek), frames(&file, seek));
        assert!(over_http.lines().filter(|l| !l.starts_with('#')).count() > 50);
        assert_eq!(over_http, from_file, "seek {seek:?}");
    }
}

/// Keep-alive with pipelined requests; bad requests answered and closed;
/// the server stays up for everybody.
#[test]
fn pipelined_requests_are_answered_in_order_and_bad_ones_refused() {
    let (mut s, port) = server();
    let addr = format!("127.0.0.1:{port}");
    let mut c = TcpStream::connect(&addr).unwrap();
    c.write_all(
        b"GET /clip.ts HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\n\r\n\
          HEAD /clip.ts HTTP/1.1\r\nHost: x\r\n\r\n\
          GET /clip.ts HTTP/1.1\r\nHost: x\r\nRange: bytes=188-195\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut all = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    // (Bodies are not newline-terminated: a head may follow one directly.)
    let statuses: Vec<&str> = text
        .split("HTTP/1.1 ")
        .skip(1)
        .filter_map(|rest| rest.get(..3))
        .collect();
    assert_eq!(statuses, ["206", "200", "206"], "{text}");
    let clip = clip_bytes();
    assert!(all.windows(10).any(|w| w == &clip[..10]));
    assert!(
        all.ends_with(&clip[188..196]),
        "the last body ends the stream"
    );

    let bad: [(&[u8], &str); 4] = [
        (
            b"POST /clip.ts HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
            "400",
        ),
        (b"PUT /clip.ts HTTP/1.1\r\nHost: x\r\n\r\n", "405"),
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            "400",
        ),
        (&[b'A'; 16 * 1024], "431"),
    ];
    for (req, status) in bad {
        let mut c = TcpStream::connect(&addr).unwrap();
        let _ = c.write_all(req);
        let (text, closed) = read_until_close(&mut c, Duration::from_secs(10));
        assert!(text.starts_with(&format!("HTTP/1.1 {status} ")), "{text}");
        assert!(closed, "closed after {status}");
    }
    s.assert_healthy();
}

/// A title truncated while a slow client downloads it: that download ends
/// short (never padded, never a crash), the next one gets the new file.
#[test]
fn a_file_cut_short_mid_download_ends_only_that_download() {
    let (mut s, port) = server();
    let title = s.media_root().join("big.ts");
    let bytes: Vec<u8> = clip_bytes()
        .iter()
        .cycle()
        .take(24 << 20)
        .copied()
        .collect();
    fs::write(&title, &bytes).unwrap();
    let url = format!("http://127.0.0.1:{port}/big.ts");
    let mut slow = Command::new("curl");
    slow.args([
        "-sS",
        "--limit-rate",
        "2M",
        "--max-time",
        "30",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
        &url,
    ]);
    let download = std::thread::spawn(move || run_bounded(slow, Duration::from_secs(40)));
    std::thread::sleep(Duration::from_secs(2));
    fs::OpenOptions::new()
        .write(true)
        .open(&title)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let out = download.join().unwrap();
    assert!(
        !out.status.success(),
        "curl saw the body end short: {}",
        out.stderr
    );
    let got: u64 = String::from_utf8_lossy(&out.stdout).parse().unwrap();
    assert!(got < 24 << 20, "{got}");
    let again = curl(&[&url]);
    assert!(
        again.stdout == bytes[..1 << 20],
        "the next download is the file as it is now"
    );
    s.assert_healthy();
}

/// A keep-alive connection left idle is closed after `idle_timeout_s`; a
/// client that stops reading mid-body is dropped after `stall_timeout_s`,
/// short of the file.
#[test]
fn idle_connections_close_and_stalled_readers_are_dropped() {
    let (mut s, port) = Server::start_http("idle_timeout_s = 2\nstall_timeout_s = 2\n");
    let size = 32usize << 20;
    let bytes: Vec<u8> = clip_bytes().iter().cycle().take(size).copied().collect();
    fs::write(s.media_root().join("big.ts"), &bytes).unwrap();

    let mut idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    idle.write_all(b"HEAD /clip.ts HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let started = std::time::Instant::now();
    let (text, closed) = read_until_close(&mut idle, Duration::from_secs(10));
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(closed, "the idle connection was closed");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before the idle timeout"
    );

    let mut stalled = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stalled
        .write_all(b"GET /big.ts HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while let Ok(n) = stalled.read(&mut buf) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert!(
        got < size,
        "the stalled reader was dropped short of the file ({got} bytes)"
    );
    s.assert_healthy();
}

/// `max_connections_per_address` counts RTSP and HTTP connections of one
/// address together; other addresses are still served.
#[test]
fn one_address_cannot_take_every_connection() {
    let (s, port) = Server::start_http("max_connections_per_address = 3\n");
    let _held = [
        TcpStream::connect(s.addr()).unwrap(),
        TcpStream::connect(s.addr()).unwrap(),
        TcpStream::connect(("127.0.0.1", port)).unwrap(),
    ];
    std::thread::sleep(Duration::from_millis(300));
    let mut fourth = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = fourth.write_all(b"HEAD /clip.ts HTTP/1.1\r\nHost: x\r\n\r\n");
    let (text, closed) = read_until_close(&mut fourth, Duration::from_secs(5));
    assert!(
        closed && text.is_empty(),
        "the fourth was closed unanswered: {text}"
    );

    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other
        .bind(
            &"127.0.0.2:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    other
        .connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    let mut other: TcpStream = other.into();
    other
        .write_all(b"HEAD /clip.ts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (text, _) = read_until_close(&mut other, Duration::from_secs(5));
    assert!(
        text.starts_with("HTTP/1.1 200 "),
        "another address is served: {text}"
    );
}

/// The test clip remuxed by ffmpeg (`args`) into the server's root as
/// `name`.
pub(crate) fn remux(s: &Server, args: &[&str], name: &str) {
    let mut c = Command::new("ffmpeg");
    c.args(["-nostdin", "-loglevel", "error", "-y", "-i"])
        .arg(&media().clip)
        .args(args)
        .arg(s.media_root().join(name));
    assert!(run_bounded(c, Duration::from_secs(60)).status.success());
}

/// `ffmpeg -c copy -f framemd5` of `input`, every stream.
fn frames(input: &str) -> String {
    frames_of(input, "0")
}

/// Each packet of a framemd5 listing as its size and hash, in order.
fn packet_hashes(framemd5: &str) -> Vec<String> {
    framemd5
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split(',').map(str::trim).collect();
            c.get(4..6).map_or(String::new(), |c| c.join(" "))
        })
        .collect()
}

/// `ffmpeg -c copy -f framemd5` of the streams `map` of `input`.
fn frames_of(input: &str, map: &str) -> String {
    let mut c = Command::new("ffmpeg");
    c.args(["-nostdin", "-loglevel", "error", "-i", input])
        .args(["-map", map, "-c", "copy", "-f", "framemd5", "-"]);
    let out = run_bounded(c, Duration::from_secs(60));
    assert!(out.status.success(), "ffmpeg {input}: {}", out.stderr);
    String::from_utf8(out.stdout).unwrap()
}

/// HLS and DASH of a TS title: ffmpeg reads the playlists' byte-range
/// segments frame for frame as the file; GStreamer's hlsdemux and
/// dashdemux play them to the end; a title of another format gets 415
/// with the reason.
#[test]
fn hls_and_dash_of_a_ts_title_are_byte_ranges_of_the_file() {
    let (mut s, port) = server();
    let base = format!("http://127.0.0.1:{port}/clip.ts");
    let playlist = curl(&[&format!("{base}/media.m3u8")]);
    let playlist = String::from_utf8_lossy(&playlist.stdout).into_owned();
    assert!(
        playlist.contains("#EXT-X-BYTERANGE:") && playlist.ends_with("#EXT-X-ENDLIST\n"),
        "{playlist}"
    );
    let ranges: Vec<(u64, u64)> = playlist
        .lines()
        .filter_map(|l| l.strip_prefix("#EXT-X-BYTERANGE:"))
        .filter_map(|r| {
            let (len, at) = r.split_once('@')?;
            Some((len.parse().ok()?, at.parse().ok()?))
        })
        .collect();
    let clip = clip_bytes();
    assert_eq!(
        ranges.iter().map(|r| r.0).sum::<u64>(),
        clip.len() as u64,
        "segments tile the file"
    );
    for &(_, at) in &ranges[1..] {
        let pid = |p: &[u8]| u16::from(p[1] & 0x1f) << 8 | u16::from(p[2]);
        let packet = &clip[at as usize..at as usize + 188];
        assert_eq!(
            (packet[0], pid(packet)),
            (0x47, 0),
            "segment at {at} starts with the PAT"
        );
    }

    let over_hls = frames(&format!("{base}/index.m3u8"));
    assert!(over_hls.lines().filter(|l| !l.starts_with('#')).count() > 200);
    assert_eq!(over_hls, frames(media().clip.to_str().unwrap()));

    plays_to_the_end(&format!("{base}/index.m3u8"));

    // DASH of the same byte ranges.
    let mpd =
        String::from_utf8_lossy(&curl(&[&format!("{base}/manifest.mpd")]).stdout).into_owned();
    assert_eq!(mpd.matches("<SegmentURL ").count(), ranges.len(), "{mpd}");
    // ffmpeg 5.1's DASH demuxer reads a muxed TS representation as one
    // stream: the packets are compared as a set.
    let packets = |f: String| {
        let mut p = packet_hashes(&f);
        p.sort();
        p
    };
    let over_dash = packets(frames(&format!("{base}/manifest.mpd")));
    assert!(over_dash.len() > 200);
    assert!(
        over_dash == packets(frames(media().clip.to_str().unwrap())),
        "DASH packets differ"
    );
    plays_to_the_end(&format!("{base}/manifest.mpd"));

    // I-frames: every key frame, each range much less than its GOP.
    let multivariant =
        String::from_utf8_lossy(&curl(&[&format!("{base}/index.m3u8")]).stdout).into_owned();
    assert!(
        multivariant.contains(",URI=\"iframes.m3u8\""),
        "{multivariant}"
    );
    // The codecs as ffprobe names the clip's (H.264 High, AAC-LC), read
    // from its first key frame.
    assert!(
        multivariant.contains(",CODECS=\"avc1.64")
            && multivariant.contains(",mp4a.40.2\",RESOLUTION=640x360,FRAME-RATE=25.000"),
        "{multivariant}"
    );
    let iframes =
        String::from_utf8_lossy(&curl(&[&format!("{base}/iframes.m3u8")]).stdout).into_owned();
    let (frames, bytes) = check_i_frames(&base, &iframes, &[]);
    assert!(frames >= 9, "{iframes}");
    assert!(
        bytes < clip.len() as u64 / 3,
        "I-frame ranges of {bytes} bytes in a {}-byte file",
        clip.len()
    );

    remux(&s, &["-an", "-c:v", "mpeg2video", "-f", "mpeg"], "clip.mpg");
    let ps = curl(&[
        "-w",
        "\n%{http_code}",
        &format!("http://127.0.0.1:{port}/clip.mpg/index.m3u8"),
    ]);
    let ps = String::from_utf8_lossy(&ps.stdout).into_owned();
    assert!(
        ps.ends_with("\n415")
            && ps.contains("HLS is built for MPEG-TS, MP4, Matroska, WebM, ADTS and MP3"),
        "{ps}"
    );
    s.assert_healthy();
}

/// HLS and DASH of an MP4 title: fragmented MP4 whose samples are the
/// file's. ffmpeg reads over HLS and over DASH the packets it reads from
/// the file; GStreamer plays both to the end; the multivariant playlist
/// names the codecs and resolution; a segment's range is that slice of
/// the segment.
#[test]
fn hls_and_dash_of_an_mp4_title_are_fragmented_mp4_of_the_file() {
    let (mut s, port) = server();
    remux(&s, &["-c", "copy", "-f", "mp4"], "clip.mp4");
    let base = format!("http://127.0.0.1:{port}/clip.mp4");
    let get = |path: &str| {
        let out = curl(&[&format!("{base}/{path}")]);
        assert!(out.status.success(), "{path}: {}", out.stderr);
        out.stdout
    };
    let multivariant = String::from_utf8(get("index.m3u8")).unwrap();
    assert!(
        multivariant.contains(",CODECS=\"avc1.")
            && multivariant.contains(",mp4a.40.2\",RESOLUTION="),
        "{multivariant}"
    );
    let playlist = String::from_utf8(get("media.m3u8")).unwrap();
    assert!(
        playlist.contains("#EXT-X-MAP:URI=\"init.mp4\""),
        "{playlist}"
    );
    let segments: Vec<&str> = playlist.lines().filter(|l| l.ends_with(".m4s")).collect();
    assert!(segments.len() >= 2, "{playlist}");
    // ffprobe sees the codecs and the duration over HLS and DASH.
    for manifest in ["index.m3u8", "manifest.mpd"] {
        let mut probe = Command::new("ffprobe");
        probe
            .args([
                "-v",
                "error",
                "-show_entries",
                "stream=codec_name:format=duration",
            ])
            .args(["-of", "default=nw=1"])
            .arg(format!("{base}/{manifest}"));
        let out = run_bounded(probe, Duration::from_secs(30));
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            said.contains("codec_name=h264") && said.contains("codec_name=aac"),
            "{manifest}: {said}"
        );
        let d: f64 = said
            .lines()
            .find_map(|l| l.strip_prefix("duration="))
            .and_then(|d| d.parse().ok())
            .unwrap_or(0.0);
        assert!((d - 10.0).abs() < 0.5, "{manifest}: duration {d}");
    }

    // Each stream's packets, in order, as in the file (how the demuxers
    // interleave streams, and the times they give fragmented files, are
    // their own: see fjord-media's tests/fragments.rs).
    let hash_and_size = |f: &str| -> Vec<String> {
        let mut lines: Vec<(String, String)> = f
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let c: Vec<&str> = l.split(',').map(str::trim).collect();
                (c[0].to_owned(), format!("{} {} {}", c[0], c[4], c[5]))
            })
            .collect();
        lines.sort_by(|a, b| a.0.cmp(&b.0));
        lines.into_iter().map(|(_, l)| l).collect()
    };
    let same = |a: &[String], b: &[String], what: &str| {
        let first = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i));
        assert!(
            first.is_none(),
            "{what}: {} vs {} packets, first difference at {first:?}",
            a.len(),
            b.len()
        );
    };
    let over_hls = frames(&format!("{base}/index.m3u8"));
    let from_file = frames(s.media_root().join("clip.mp4").to_str().unwrap());
    assert!(hash_and_size(&over_hls).len() > 200);
    same(&hash_and_size(&over_hls), &hash_and_size(&from_file), "HLS");

    plays_to_the_end(&format!("{base}/index.m3u8"));

    // DASH: a representation per track, the same packets.
    let mpd = String::from_utf8(get("manifest.mpd")).unwrap();
    assert_eq!(mpd.matches("<Representation ").count(), 2, "{mpd}");
    // Stream by stream: reading both at once, ffmpeg 5.1's DASH demuxer
    // drops the last audio packet when the video ends first.
    let file = s.media_root().join("clip.mp4");
    for stream in ["0:0", "0:1"] {
        let over_dash = frames_of(&format!("{base}/manifest.mpd"), stream);
        let from_file = frames_of(file.to_str().unwrap(), stream);
        same(
            &hash_and_size(&over_dash),
            &hash_and_size(&from_file),
            stream,
        );
    }
    plays_to_the_end(&format!("{base}/manifest.mpd"));

    // The I-frame playlist: each byte range, after the init segment, is a
    // file whose first video frame ffmpeg decodes as a key frame.
    assert!(
        multivariant.contains(",URI=\"iframes.m3u8\""),
        "{multivariant}"
    );
    let iframes = String::from_utf8(get("iframes.m3u8")).unwrap();
    let (checked, _) = check_i_frames(&base, &iframes, &get("init.mp4"));
    assert_eq!(checked, segments.len(), "an I-frame per segment");

    let whole = get(segments[1]);
    let part = curl(&["-r", "100-4099", &format!("{base}/{}", segments[1])]);
    assert_eq!(part.stdout, whole[100..4100], "a range of a segment");
    let past = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("{base}/seg-9999.m4s"),
    ]);
    assert_eq!(past.stdout, b"404");
    s.assert_healthy();
}

/// HLS of ADTS and MP3 titles: packed audio, each segment an ID3 tag with
/// its time and then a byte range of the file. ffmpeg reads the file's
/// frames over HLS; GStreamer plays it to the end; DASH is refused.
#[test]
fn hls_of_adts_and_mp3_titles_is_packed_audio() {
    let (mut s, port) = server();
    remux(&s, &["-vn", "-c:a", "copy", "-f", "adts"], "clip.aac");
    remux(
        &s,
        &["-vn", "-c:a", "libmp3lame", "-b:a", "128k"],
        "clip.mp3",
    );
    for (name, ext) in [("clip.aac", "aac"), ("clip.mp3", "mp3")] {
        let base = format!("http://127.0.0.1:{port}/{name}");
        let playlist =
            String::from_utf8_lossy(&curl(&[&format!("{base}/media.m3u8")]).stdout).into_owned();
        assert!(
            playlist.contains(&format!("seg-1.{ext}")) && !playlist.contains("EXT-X-MAP"),
            "{playlist}"
        );
        let seg = curl(&[&format!("{base}/seg-1.{ext}")]).stdout;
        assert_eq!(
            &seg[..3],
            b"ID3",
            "{name}: a segment begins with its timestamp tag"
        );
        let over_hls = packet_hashes(&frames(&format!("{base}/index.m3u8")));
        let from_file = packet_hashes(&frames(s.media_root().join(name).to_str().unwrap()));
        assert!(over_hls.len() > 300, "{name}: {} frames", over_hls.len());
        assert!(
            over_hls == from_file,
            "{name}: {} vs {} frames",
            over_hls.len(),
            from_file.len()
        );
        plays_to_the_end(&format!("{base}/index.m3u8"));
        let dash = curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("{base}/manifest.mpd"),
        ]);
        assert_eq!(dash.stdout, b"415");
    }
    s.assert_healthy();
}

/// Fetches every byte range an I-frame playlist of `base` lists and has
/// ffprobe decode the first video frame of `init` followed by it: a key
/// frame. Returns how many and their bytes.
fn check_i_frames(base: &str, playlist: &str, init: &[u8]) -> (usize, u64) {
    assert!(playlist.contains("#EXT-X-I-FRAMES-ONLY"), "{playlist}");
    let dir = tempfile::tempdir().unwrap();
    let (mut checked, mut bytes) = (0, 0);
    let mut lines = playlist.lines();
    while let Some(line) = lines.next() {
        let Some(range) = line.strip_prefix("#EXT-X-BYTERANGE:") else {
            continue;
        };
        let (len, at) = range.split_once('@').unwrap();
        let (len, at): (u64, u64) = (len.parse().unwrap(), at.parse().unwrap());
        let uri = lines.next().unwrap();
        let r = format!("{at}-{}", at + len - 1);
        let got = curl(&["-r", &r, &format!("{base}/{uri}")]).stdout;
        assert_eq!(got.len() as u64, len);
        let file = dir.path().join(format!("iframe{checked}"));
        fs::write(&file, [init, &got[..]].concat()).unwrap();
        let mut probe = Command::new("ffprobe");
        probe
            .args([
                "-v",
                "error",
                "-select_streams",
                "v:0",
                "-show_entries",
                "frame=key_frame",
            ])
            .args(["-of", "csv=p=0", "-read_intervals", "%+#1"])
            .arg(&file);
        let out = run_bounded(probe, Duration::from_secs(30));
        // (ffprobe may also say the file is partial: a moof names samples
        // past the range.)
        let first = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .map(str::to_owned);
        let key = first.as_deref().map(|f| f.trim_end_matches(','));
        assert_eq!(key, Some("1"), "{uri} {r}: {}", out.stderr);
        checked += 1;
        bytes += len;
    }
    (checked, bytes)
}

/// GStreamer's playbin plays `uri` (HLS or DASH) to its end.
fn plays_to_the_end(uri: &str) {
    let mut gst = Command::new("gst-launch-1.0");
    gst.args(["-q", "playbin", &format!("uri={uri}")])
        .args(["video-sink=fakesink", "audio-sink=fakesink"]);
    let played = run_bounded(gst, Duration::from_secs(60));
    assert!(played.status.success(), "playbin {uri}: {}", played.stderr);
}

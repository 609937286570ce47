//! The HTTP listener hands out titles only and speaks HTTP/1.1 by the
//! letter: files under the root that are not media (a key, a config, notes)
//! are 404 like missing titles, with and without users; no spelling of a
//! path that is not a title is ever answered 200; HTTP/1.1 without one
//! `Host` is 400; and httplint, a checker no one here wrote, finds nothing
//! to warn about in a title, a playlist, a manifest, a segment, a 304 and a
//! 416.

use std::{
    collections::HashSet,
    fs,
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use proptest::{prelude::*, test_runner::TestRunner};

use crate::common::{ALICE, Server, certificate, clip_bytes, curl_status, media, raw_exchange};

/// alice, an admin too.
fn users() -> String {
    format!("{ALICE}admin = true\n")
}

/// A server on a free HTTP port whose root holds, beside `clip.ts` and
/// `films/movie.ts`, what an operator might leave there: a private key, a
/// config with passwords, notes.
fn server(extra: &str) -> (Server, u16) {
    let keys = tempfile::tempdir().unwrap();
    certificate(keys.path());
    let config = format!("idle_timeout_s = 5\n{extra}");
    Server::start_http_with(&config, |root| {
        fs::copy(&media().clip, root.join("clip.ts")).unwrap();
        fs::create_dir(root.join("films")).unwrap();
        fs::copy(&media().clip, root.join("films/movie.ts")).unwrap();
        fs::copy(keys.path().join("key.pem"), root.join("key.pem")).unwrap();
        fs::copy(keys.path().join("cert.pem"), root.join("films/cert.pem")).unwrap();
        fs::write(root.join("fjord.toml"), users()).unwrap();
        fs::write(root.join("notes.txt"), "todo: re-encode films/\n").unwrap();
    })
}

/// The status of `GET target` (raw, as sent) by curl, with alice's
/// credentials when `auth`.
fn status(port: u16, target: &str, auth: bool) -> u16 {
    let url = format!("http://127.0.0.1:{port}/{target}");
    let credentials = ["--digest", "-u", "alice:wonderland"];
    let credentials = if auth { &credentials[..] } else { &[] };
    curl_status(&[&["--path-as-is"], credentials, &[&url]].concat())
}

#[test]
fn files_under_the_root_that_are_not_titles_are_404() {
    let alice = users();
    for (users, auth) in [("", false), (alice.as_str(), true)] {
        let (mut s, port) = server(users);
        assert_eq!(status(port, "clip.ts", auth), 200);
        assert_eq!(status(port, "films/movie.ts", auth), 200);
        for other in [
            "key.pem",
            "fjord.toml",
            "notes.txt",
            "films/cert.pem",
            "notes.txt/index.m3u8",
            "key.pem/manifest.mpd",
            "films/init.mp4",
            "films",
            "nope.ts",
        ] {
            assert_eq!(status(port, other, auth), 404, "{other} (users: {auth})");
        }
        s.assert_alive();
    }
}

#[test]
fn fjord_cert_refuses_a_directory_inside_a_media_root() {
    let root = tempfile::tempdir().unwrap();
    for out in [root.path().to_owned(), root.path().join("keys/new")] {
        let made = Command::new(env!("CARGO_BIN_EXE_fjord"))
            .args(["cert", "--root"])
            .arg(root.path())
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&made.stderr);
        assert!(!made.status.success(), "{err}");
        assert!(err.contains("inside the media root"), "{err}");
        assert!(!out.join("key.pem").exists());
    }
}

/// RFC 9112 §3.2.
#[test]
fn http_1_1_without_exactly_one_host_is_400() {
    let (mut s, port) = server("");
    let addr = format!("127.0.0.1:{port}");
    let ask = |head: &str| {
        let (answer, _) = raw_exchange(&addr, head.as_bytes(), Duration::from_secs(10));
        answer.lines().next().unwrap_or("").to_owned()
    };
    let bad = [
        "HEAD /clip.ts HTTP/1.1\r\nConnection: close\r\n\r\n",
        "HEAD /clip.ts HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
        "HEAD http://127.0.0.1/clip.ts HTTP/1.1\r\nConnection: close\r\n\r\n",
    ];
    for head in bad {
        assert!(ask(head).starts_with("HTTP/1.1 400 "), "{head:?}");
    }
    let good = [
        "HEAD /clip.ts HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        "HEAD http://127.0.0.1/clip.ts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "HEAD /clip.ts HTTP/1.0\r\n\r\n",
    ];
    for head in good {
        assert!(ask(head).starts_with("HTTP/1.1 200 "), "{head:?}");
    }
    s.assert_healthy();
}

/// httplint's notes on one raw response (head and body); none at WARN or
/// BAD level is a clean answer.
fn lint(response: &[u8]) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/httplint");
    let mut c = Command::new("python3")
        .arg(dir.join("site/bin/httplint"))
        .arg("--now")
        .env("PYTHONPATH", dir.join("site"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("httplint (make deps installs it under tests/httplint)");
    c.stdin.take().unwrap().write_all(response).unwrap();
    let out = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !text.trim().is_empty(),
        "httplint said nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The raw response to `GET target` with `extra` headers, whole.
fn fetch(port: u16, target: &str, extra: &str) -> Vec<u8> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head =
        format!("GET /{target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n");
    c.write_all(head.as_bytes()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    got
}

#[test]
fn httplint_finds_nothing_to_warn_about() {
    let (mut s, port) = server("");
    crate::http::remux(&s, &["-c", "copy", "-f", "mp4"], "clip.mp4");
    let title = fetch(port, "clip.ts", "");
    let etag = String::from_utf8_lossy(&title)
        .lines()
        .find_map(|l| l.strip_prefix("ETag: ").map(str::to_owned))
        .expect("an ETag");
    let size = clip_bytes().len();
    let (not_modified, past) = (
        format!("If-None-Match: {etag}\r\n"),
        format!("Range: bytes={size}-\r\n"),
    );
    let cases = [
        ("a title", "clip.ts", ""),
        ("a range", "clip.ts", "Range: bytes=0-999\r\n"),
        ("a playlist", "clip.ts/index.m3u8", ""),
        ("a media playlist", "clip.mp4/media.m3u8", ""),
        ("a manifest", "clip.mp4/manifest.mpd", ""),
        ("an init segment", "clip.mp4/init.mp4", ""),
        ("a segment", "clip.mp4/seg-0.m4s", ""),
        ("a 304", "clip.ts", &not_modified),
        ("a 416", "clip.ts", &past),
        ("a 404", "notes.txt", ""),
    ];
    let mut faults = Vec::new();
    for (what, target, extra) in cases {
        // Linted as soon as it arrives: httplint compares its Date with now.
        let response = fetch(port, target, extra);
        let head = String::from_utf8_lossy(&response[..response.len().min(600)]).into_owned();
        let media = head.contains("Content-Type: video/") || head.contains("Content-Type: audio/");
        let notes = lint(&response);
        let warned = notes
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("BAD"));
        // sniffpy 1.0 (httplint's content sniffer) answers
        // `undefined/undefined` for every audio or video body: a fault of
        // the checker, not of the response.
        let sniffed = |l: &&str| media && l.contains("doesn't match the declared Content-Type");
        for w in warned.filter(|l| !sniffed(l)) {
            faults.push(format!("{what}: {w}\n{head}"));
        }
        let kept = !what.ends_with("404") && !what.ends_with("416");
        if kept && !head.contains("Cache-Control: max-age=") {
            faults.push(format!("{what}: no Cache-Control\n{head}"));
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n\n"));
    s.assert_healthy();
}

/// Pieces of path spellings: names that exist (titles and not), and every
/// way of writing a separator, a dot, a NUL or a case.
const PIECES: &[&str] = &[
    "clip.ts",
    "films",
    "movie.ts",
    "notes.txt",
    "key.pem",
    "fjord.toml",
    "cert.pem",
    ".",
    "..",
    "",
    "%2e",
    "%2E%2e",
    "%2f",
    "%2F",
    "%5c",
    "\\",
    "%00",
    "CLIP.TS",
    "clip%2ets",
    "Films",
    "index.m3u8",
    "init.mp4",
    "seg-0.m4s",
    "films%2fmovie.ts",
    ".hidden",
    "clip.ts.fjidx",
    "%ff",
    "%",
    "a%20b",
];

/// Whatever the spelling, HTTP answers 200/206 only for a title (or one of
/// its playlists and segments) in its canonical form, and a download's
/// bytes are the title's.
#[test]
fn no_spelling_of_a_path_that_is_not_a_title_is_served() {
    let (mut s, port) = server("");
    let titles: HashSet<&str> = ["clip.ts", "films/movie.ts"].into();
    let strategy = proptest::collection::vec(proptest::sample::select(PIECES), 1..5);
    let mut runner = TestRunner::new(ProptestConfig::with_cases(120));
    runner
        .run(&strategy, |pieces| {
            let raw = pieces.join("/");
            let response = fetch(port, &raw, "");
            // Percent-encoding is how a name is sent, not another name.
            let target = percent_encoding::percent_decode_str(&raw)
                .decode_utf8_lossy()
                .into_owned();
            let text = String::from_utf8_lossy(&response[..response.len().min(200)]).into_owned();
            let code: u16 = text
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            if code / 100 == 2 {
                let title = match target.rsplit_once('/') {
                    Some((t, leaf)) if !titles.contains(target.as_str()) => {
                        prop_assert!(
                            ["index.m3u8", "init.mp4", "seg-0.m4s"].contains(&leaf),
                            "{target}: {text}"
                        );
                        t
                    }
                    _ => target.as_str(),
                };
                prop_assert!(titles.contains(title), "{target} answered {code}: {text}");
                if title == target {
                    let at = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    prop_assert!(
                        &response[at..] == clip_bytes(),
                        "{target}: not the title's bytes"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
    s.assert_healthy();
}

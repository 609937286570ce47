//! Users and read rules (`[[user]]`) as real clients meet them: ffmpeg and
//! GStreamer play with Digest credentials bit-exact; no, wrong or
//! forbidden credentials get 401/403 before any title lookup; curl
//! downloads over HTTP with Digest; repeated failures lock an address out
//! (503) and no other, and there refuse only failing attempts and the
//! users who failed; a Digest header is good once, for its own target,
//! from its own address; a nonce of another process is merely stale;
//! SIGHUP adds a user.

use std::process::Command;
use std::time::Duration;

use fjord_client::RtspClient;

use crate::common::{ALICE, Server, clip_bytes, curl_status, run_bounded};
use crate::peers::{ffmpeg_receives_every_frame_at, gstreamer_receives_the_file_at};

/// A `[[user]]` table with the password stored as `fjord passwd` prints it.
fn hashed_user(name: &str, password: &str, paths: &str) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["passwd", name])
        .stdin(std::process::Stdio::piped());
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(
        child.stdin.as_mut().unwrap(),
        format!("{password}\n").as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("password = \"digest:") && !table.contains(password),
        "{table}"
    );
    table.replace("paths = [\"**\"]", &format!("paths = {paths}"))
}

/// alice, and anyone reading `vbr.ts`.
fn users() -> String {
    format!("{ALICE}\n[[user]]\npaths = [\"vbr.ts\"]\n")
}

fn config() -> String {
    format!(
        "{}\n{}",
        users(),
        hashed_user("bob", "builder", "[\"clip.ts\"]")
    )
}

/// `url` with credentials.
fn with(server: &Server, who: &str, title: &str) -> String {
    server
        .url(title)
        .replacen("rtsp://", &format!("rtsp://{who}@"), 1)
}

#[test]
fn ffmpeg_and_gstreamer_play_with_digest_credentials_bit_exact() {
    let server = Server::start(&config());
    // ffmpeg answers the qop="auth" challenge; alice's password is in the
    // config, bob's stored as hashes.
    ffmpeg_receives_every_frame_at(
        &with(&server, "alice:wonderland", "clip.ts"),
        "tcp",
        "alice",
    );
    ffmpeg_receives_every_frame_at(&with(&server, "bob:builder", "clip.ts"), "udp", "bob");
    // rtspsrc answers without qop (RFC 2069 form).
    let out = server.root.path().join("gst.ts");
    let creds = ["user-id=bob", "user-pw=builder"];
    gstreamer_receives_the_file_at(&server.url("clip.ts"), &creds, &out, "tcp", "bob");
    assert_eq!(std::fs::read(&out).unwrap(), clip_bytes());
}

/// ffmpeg's log for `url`: it must fail with `status`.
fn ffmpeg_refused(url: &str, status: &str) {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-v", "error", "-i", url, "-f", "null", "-"]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(
        !out.status.success() && out.stderr.contains(status),
        "{url}: {}",
        out.stderr
    );
}

/// curl's HTTP status for `args`, from `interface`.
fn curl(interface: &str, args: &[&str]) -> u16 {
    curl_status(&[&["--interface", interface], args].concat())
}

#[test]
fn missing_wrong_or_forbidden_credentials_are_refused_before_any_lookup() {
    let (server, port) = Server::start_http(&config());
    // No credentials: 401 with Digest challenges, SHA-256 first, MD5 last
    // (what players take); the same for a title that does not exist.
    let mut c = RtspClient::connect(&server.url("clip.ts")).unwrap();
    for title in ["clip.ts", "no-such.ts"] {
        let r = c.request("DESCRIBE", &server.url(title), &[], b"").unwrap();
        assert_eq!(r.status, 401, "{title}");
        // (fjord's client joins repeated headers with ", ")
        let all: String = (r.headers.iter())
            .filter(|(k, _)| k.eq_ignore_ascii_case("WWW-Authenticate"))
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        assert_eq!(all.matches("Digest realm=\"fjord\"").count(), 2, "{all}");
        let (sha, md5) = (
            all.find("algorithm=SHA-256").unwrap(),
            all.find("algorithm=MD5").unwrap(),
        );
        assert!(sha < md5, "{all}");
        assert!(!all.contains("Basic"), "no Basic without TLS: {all}");
    }
    assert_eq!(
        c.request("OPTIONS", &server.url("clip.ts"), &[], b"")
            .unwrap()
            .status,
        200
    );
    // The anonymous rule lets anyone read vbr.ts.
    assert_eq!(
        c.request("DESCRIBE", &server.url("vbr.ts"), &[], b"")
            .unwrap()
            .status,
        200
    );
    ffmpeg_refused(&with(&server, "alice:guess", "clip.ts"), "401");
    ffmpeg_refused(&with(&server, "mallory:wonderland", "clip.ts"), "401");
    ffmpeg_refused(&server.url("clip.ts"), "401");
    ffmpeg_refused(&with(&server, "bob:builder", "no-such.ts"), "403");

    let url = format!("http://127.0.0.1:{port}/clip.ts");
    let (alice, bob) = ("alice:wonderland", "bob:builder");
    assert_eq!(curl("127.0.0.1", &[&url]), 401);
    assert_eq!(curl("127.0.0.1", &["--digest", "-u", alice, &url]), 200);
    assert_eq!(
        curl("127.0.0.1", &["--digest", "-u", "alice:guess", &url]),
        401
    );
    assert_eq!(
        curl("127.0.0.1", &["--basic", "-u", alice, &url]),
        401,
        "Basic only over TLS"
    );
    let hls = format!("http://127.0.0.1:{port}/vbr.ts/index.m3u8");
    assert_eq!(
        curl("127.0.0.1", &["--digest", "-u", bob, &hls]),
        200,
        "the anonymous rule"
    );
    let other = format!("http://127.0.0.1:{port}/clip.ts/index.m3u8");
    assert_eq!(curl("127.0.0.1", &["--digest", "-u", bob, &other]), 200);
    let dl = server.root.path().join("dl.ts");
    let mut c = Command::new("curl");
    c.args(["-sf", "--digest", "-u", alice, "-o"])
        .arg(&dl)
        .arg(&url);
    assert!(run_bounded(c, Duration::from_secs(30)).status.success());
    assert_eq!(
        std::fs::read(&dl).unwrap(),
        clip_bytes(),
        "bit-exact over HTTP"
    );

    // Failures from 127.0.0.2 lock it out (503), not 127.0.0.1.
    let statuses: Vec<u16> = (0..7)
        .map(|_| curl("127.0.0.2", &["--digest", "-u", "alice:guess", &url]))
        .collect();
    assert_eq!(statuses[..5], [401; 5], "{statuses:?}");
    assert_eq!(statuses[6], 503, "{statuses:?}");
    assert_eq!(
        curl("127.0.0.2", &["--digest", "-u", alice, &url]),
        503,
        "alice, who failed from there, is locked out: the guesser learns nothing"
    );
    // Only that: bob, behind the same address, and anonymous reads pass.
    assert_eq!(curl("127.0.0.2", &["--digest", "-u", bob, &url]), 200);
    let public = format!("http://127.0.0.1:{port}/vbr.ts");
    assert_eq!(curl("127.0.0.2", &[&public]), 200);
    assert_eq!(
        curl("127.0.0.1", &["--digest", "-u", alice, &url]),
        200,
        "others are not"
    );
}

#[test]
fn sighup_adds_a_user() {
    let server = Server::start(&users());
    let carol = with(&server, "carol:secret", "clip.ts");
    ffmpeg_refused(&carol, "401");
    let added = format!(
        "{}\n[[user]]\nname = \"carol\"\npassword = \"secret\"\npaths = [\"clip.*\"]\n",
        users()
    );
    std::fs::write(server.config_path(), added).unwrap();
    server.signal("HUP");
    server.wait_for_log("config reloaded", Duration::from_secs(5));
    ffmpeg_receives_every_frame_at(&carol, "tcp", "carol, added by SIGHUP");
}

/// curl's status and response head for `url` from `interface`, with this
/// `Authorization` if any.
pub(crate) fn curl_head(interface: &str, url: &str, authorization: Option<&str>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-o", "/dev/null", "-D", "-", "--max-time", "20"])
        .args(["--interface", interface]);
    if let Some(a) = authorization {
        c.args(["-H", &format!("Authorization: {a}")]);
    }
    c.arg(url);
    let out = run_bounded(c, Duration::from_secs(30));
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    (status.unwrap_or(0), head)
}

/// The nonce of the MD5 challenge `url` answers `interface` with.
pub(crate) fn nonce_for(interface: &str, url: &str) -> String {
    let (status, head) = curl_head(interface, url, None);
    assert_eq!(status, 401, "{head}");
    let md5 = head.lines().find(|l| l.contains("algorithm=MD5")).unwrap();
    nonce_in(md5)
}

/// The `nonce="…"` of a Digest challenge.
fn nonce_in(challenge: &str) -> String {
    challenge
        .split("nonce=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

fn md5_hex(s: &str) -> String {
    use md5::Digest;
    let sum = md5::Md5::digest(s.as_bytes());
    sum.iter().map(|b| format!("{b:02x}")).collect()
}

/// A Digest answer (MD5, qop=auth) for `method` and `uri`.
pub(crate) fn digest_md5(
    who: (&str, &str),
    method: &str,
    uri: &str,
    nonce: &str,
    nc: u32,
) -> String {
    let (user, password) = who;
    let ha1 = md5_hex(&format!("{user}:fjord:{password}"));
    let ha2 = md5_hex(&format!("{method}:{uri}"));
    let response = md5_hex(&format!("{ha1}:{nonce}:{nc:08x}:c0ffee:auth:{ha2}"));
    format!(
        r#"Digest username="{user}", realm="fjord", nonce="{nonce}", uri="{uri}", response="{response}", algorithm=MD5, qop=auth, nc={nc:08x}, cnonce="c0ffee""#
    )
}

fn alice_digest(method: &str, uri: &str, nonce: &str, nc: u32) -> String {
    digest_md5(("alice", "wonderland"), method, uri, nonce, nc)
}

/// The nonce of the challenge a DESCRIBE of `url` without credentials
/// gets on `c`.
pub(crate) fn rtsp_nonce(c: &mut RtspClient, url: &str) -> String {
    let r = c.request("DESCRIBE", url, &[], b"").unwrap();
    assert_eq!(r.status, 401);
    let all: Vec<&str> = (r.headers.iter())
        .filter(|(k, _)| k.eq_ignore_ascii_case("WWW-Authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    let md5 = all.iter().find(|v| v.contains("algorithm=MD5")).unwrap();
    nonce_in(md5)
}

#[test]
fn a_digest_header_is_good_once_for_its_target_from_its_address() {
    let (server, port) = Server::start_http(&config());
    let url = |path: &str| format!("http://127.0.0.1:{port}/{path}");
    let nonce = nonce_for("127.0.0.1", &url("clip.ts"));
    let first = alice_digest("GET", "/clip.ts", &nonce, 1);
    assert_eq!(curl_head("127.0.0.1", &url("clip.ts"), Some(&first)).0, 200);
    // The same header again: nc repeated → a fresh challenge.
    let (status, head) = curl_head("127.0.0.1", &url("clip.ts"), Some(&first));
    assert_eq!(status, 401, "replayed: {head}");
    assert!(head.contains("stale=true"), "{head}");
    // On another path, title or address, a new nc does not help.
    let second = alice_digest("GET", "/clip.ts", &nonce, 2);
    for other in ["clip.ts/index.m3u8", "vbr.ts"] {
        let (status, head) = curl_head("127.0.0.1", &url(other), Some(&second));
        assert_eq!(status, 401, "{other}: {head}");
    }
    let (status, head) = curl_head("127.0.0.2", &url("clip.ts"), Some(&second));
    assert_eq!(status, 401, "from another address: {head}");
    assert!(head.contains("stale=true"), "{head}");
    // Its own client may go on with it.
    assert_eq!(
        curl_head("127.0.0.1", &url("clip.ts"), Some(&second)).0,
        200
    );

    // Over RTSP, a header made for one title opens no other.
    let mut c = RtspClient::connect(&server.url("clip.ts")).unwrap();
    let nonce = rtsp_nonce(&mut c, &server.url("clip.ts"));
    let mut describe = |title: &str, nc| {
        let h = alice_digest("DESCRIBE", &server.url("clip.ts"), &nonce, nc);
        let r = c.request(
            "DESCRIBE",
            &server.url(title),
            &[("Authorization", h.as_str())],
            b"",
        );
        r.unwrap().status
    };
    assert_eq!(describe("vbr.ts", 1), 401, "another title");
    assert_eq!(describe("clip.ts", 2), 200, "its own");
}

#[test]
fn a_nonce_of_another_process_is_stale_and_no_failure() {
    let (_server, port) = Server::start_http(&config());
    let url = format!("http://127.0.0.1:{port}/clip.ts");
    // 8 bytes of time and a MAC under a key this server does not have,
    // as a client keeps it across the server's restart.
    let foreign = "AAAAAGVT8QAxMjM0NTY3ODlhYmNkZWZn";
    for nc in 1..=8 {
        let h = alice_digest("GET", "/clip.ts", foreign, nc);
        let (status, head) = curl_head("127.0.0.3", &url, Some(&h));
        assert_eq!(status, 401, "{head}");
        assert!(head.contains("stale=true"), "{head}");
    }
    // Not locked out: a wrong password is still answered 401, then the
    // right one passes.
    let guess = ["--digest", "-u", "alice:guess", &url];
    assert_eq!(curl("127.0.0.3", &guess), 401);
    let right = ["--digest", "-u", "alice:wonderland", &url];
    assert_eq!(curl("127.0.0.3", &right), 200);
}

//! HTTP by curl: a body and its status, JSON, a status alone.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::run_bounded;

/// curl's body and HTTP status for `args`; curl itself must succeed.
pub fn curl(args: &[&str]) -> (String, u16) {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args);
    let out = run_bounded(c, Duration::from_secs(30));
    assert!(out.status.success(), "curl {args:?}: {}", out.stderr);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (body.to_owned(), code.parse().unwrap())
}

/// The body `url` answers with 200, as bytes.
pub fn curl_bytes(url: &str) -> Vec<u8> {
    let mut c = Command::new("curl");
    c.args(["-sS", "--fail", "--max-time", "30", url]);
    let out = run_bounded(c, Duration::from_secs(40));
    assert!(out.status.success(), "curl {url}: {}", out.stderr);
    out.stdout
}

/// The JSON `url` answers with 200.
pub fn get_json(url: &str) -> Value {
    let (body, code) = curl(&[url]);
    assert_eq!(code, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// curl's HTTP status for `args`, the body left unread.
pub fn curl_status(args: &[&str]) -> u16 {
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "--max-time",
        "20",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ])
    .args(args);
    let out = run_bounded(c, Duration::from_secs(30));
    String::from_utf8_lossy(&out.stdout).parse().unwrap()
}

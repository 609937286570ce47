//! A real browser: headless Debian chromium, driven by playwright-core
//! (`tests/browser/play.mjs`), plays fjord's HLS of a TS, an MP4 (H.264),
//! a WebM (VP9, Opus), a fragmented MP4 (AV1, Opus) and an ADTS title with
//! hls.js and DASH of the MP4 and of a VP9 and a VP8 WebM title (DASH WebM)
//! with dash.js, from a page on another origin (CORS): it
//! starts, seeks to the middle, plays on from there and reaches the end
//! with no error event. Screenshots stay in `target/tmp/browser/`.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::common::run_bounded;
use crate::http::{remux, server};

#[test]
fn chromium_plays_hls_and_dash_with_hls_js_and_dash_js() {
    let (mut s, port) = server();
    remux(&s, &["-c", "copy", "-f", "mp4"], "clip.mp4");
    remux(&s, &["-vn", "-c:a", "copy", "-f", "adts"], "clip.aac");
    #[rustfmt::skip]
    remux(&s, &[
        "-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "25",
        "-b:v", "500k", "-c:a", "libopus", "-f", "webm",
    ], "clip.webm");
    #[rustfmt::skip]
    remux(&s, &[
        "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-g", "25",
        "-b:v", "500k", "-c:a", "libopus", "-f", "webm",
    ], "vp8.webm");
    #[rustfmt::skip]
    remux(&s, &[
        "-c:v", "libsvtav1", "-preset", "12", "-g", "25", "-c:a", "libopus",
        "-movflags", "frag_keyframe+empty_moov", "-f", "mp4",
    ], "av1.mp4");
    // (player, what, screenshot, video width)
    let cases = [
        ("hls", "clip.ts/index.m3u8", "hls-ts.png", 640),
        ("hls", "clip.mp4/index.m3u8", "hls-mp4.png", 640),
        ("dash", "clip.mp4/manifest.mpd", "dash-mp4.png", 640),
        ("dash", "clip.webm/manifest.mpd", "dash-webm.png", 640),
        ("hls", "clip.webm/index.m3u8", "hls-webm.png", 640),
        ("dash", "vp8.webm/manifest.mpd", "dash-vp8.png", 640),
        ("hls", "av1.mp4/index.m3u8", "hls-av1.png", 640),
        ("hls", "clip.aac/index.m3u8", "hls-aac.png", 0),
    ];
    for (player, path, shot, width) in cases {
        let url = format!("http://127.0.0.1:{port}/{path}");
        let r = chromium_plays(player, &url, &[], 60, shot);
        let said = r.to_string();
        let seeked_to = r["seeked_to"].as_f64().unwrap();
        assert!(seeked_to > 4.0, "{said}");
        let played = r["played_after_seek"].as_f64().unwrap_or(0.0);
        assert!(
            played > seeked_to + 1.0,
            "{path}: no play after the seek: {said}"
        );
        assert_eq!(r["width"], width, "{said}");
        assert!(
            (r["duration"].as_f64().unwrap() - 10.0).abs() < 0.5,
            "{said}"
        );
        assert!(
            shots().join(shot).metadata().unwrap().len() > 1000,
            "{shot}"
        );
    }
    s.assert_healthy();
}

/// Chromium plays `url` with `player` (hls.js or dash.js; `args` to
/// play.mjs) to its end within `timeout_s`; what play.mjs said. Its last
/// frame is kept as `target/tmp/browser/SHOT`.
pub(crate) fn chromium_plays(
    player: &str,
    url: &str,
    args: &[&str],
    timeout_s: u64,
    shot: &str,
) -> serde_json::Value {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
    assert!(
        driver.join("node_modules/playwright-core").is_dir(),
        "the browser test's npm packages are missing: `make test` installs them (npm ci in tests/browser)"
    );
    assert!(
        Path::new("/usr/bin/chromium").exists(),
        "chromium is missing: `make test` installs Debian's chromium"
    );
    let mut node = Command::new("node");
    node.arg(driver.join("play.mjs"))
        .args(["--player", player, "--url", url])
        .args(["--timeout-s", &timeout_s.to_string()])
        .args(args)
        .arg("--shot")
        .arg(shots().join(shot));
    let out = run_bounded(node, Duration::from_secs(timeout_s + 40));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{player} {url}: {said}\n{}",
        out.stderr
    );
    let r: serde_json::Value = serde_json::from_str(said.trim()).unwrap();
    assert_eq!(r["ended"], true, "{said}");
    r
}

/// Where the screenshots are kept.
fn shots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

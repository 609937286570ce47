//! `fjord load` against a real server: clean runs over UDP and TCP measure
//! the clip's bitrate with no loss and nothing late; a title shorter than the
//! run is played again; sessions the server refuses make the exit code fail.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use fjord_client::load::{self, LoadConfig, LoadReport};

use crate::common::{Server, generate_media, run_bounded};

/// A constant-bitrate TS (2 Mbit/s mux rate, null-packet padded) of
/// `seconds`, made by ffmpeg once per target dir.
fn cbr_clip(seconds: u32) -> PathBuf {
    let seconds_arg = seconds.to_string();
    let args = [
        ["-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25"].as_slice(),
        &["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"],
        &["-t", &seconds_arg],
        &["-c:v", "libx264", "-preset", "ultrafast", "-g", "25"],
        &["-b:v", "1.7M", "-minrate", "1.7M", "-maxrate", "1.7M"],
        &["-bufsize", "500k", "-x264-params", "nal-hrd=cbr"],
        &[
            "-c:a", "aac", "-b:a", "96k", "-muxrate", "2M", "-f", "mpegts",
        ],
    ]
    .concat();
    generate_media(&format!("load-cbr-{seconds}s.ts"), &args)
}

fn clips() -> &'static (PathBuf, PathBuf) {
    static C: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    C.get_or_init(|| (cbr_clip(6), cbr_clip(1)))
}

fn server(config: &str) -> Server {
    let (long, short) = clips();
    Server::start_with(config, |root| {
        fs::copy(long, root.join("cbr.ts")).unwrap();
        fs::copy(short, root.join("short.ts")).unwrap();
    })
}

/// RTP bit rate of a title: its bytes over its duration (from DESCRIBE),
/// plus 12 header bytes per 7 TS packets.
fn rtp_mbps(server: &Server, title: &str) -> f64 {
    let path = server.media_root().join(title);
    let bytes = fs::metadata(&path).unwrap().len() as f64;
    let mut c = fjord_client::RtspClient::connect(&server.url(title)).unwrap();
    let duration = c.describe().unwrap().duration.expect("a=range in the SDP");
    bytes * 8.0 / duration * (1316.0 + 12.0) / 1316.0 / 1e6
}

/// Lateness is counted (the unit tests check how), but not asserted here:
/// on a shared machine the server's threads may wake some ms late (other
/// tests, hypervisor stalls), and timing figures belong to benchmarks
/// (`fjord bench capacity --receivers`). Only sanity is checked.
fn assert_on_time(r: &LoadReport, what: &str) {
    let json = r.to_json();
    assert!(
        r.totals.max_lateness_ms < 2_000.0,
        "{what}: lateness is nonsense: {json}"
    );
    assert!(
        r.totals.late <= r.totals.packets,
        "{what}: more late packets than packets: {json}"
    );
    if r.totals.late > 0 {
        eprintln!(
            "{what}: {} late packets (up to {:.1} ms), load average {}: not asserted",
            r.totals.late,
            r.totals.max_lateness_ms,
            load_average()
        );
    }
}

fn load_average() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

fn fjord_load(url: &str, extra: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("load").arg(url).args(extra).arg("--json");
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(!out.timed_out, "fjord load hung: {}", out.stderr);
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.stderr,
    )
}

fn assert_clean(r: &LoadReport, mbps: f64, what: &str) {
    let json = r.to_json();
    assert_eq!(
        (r.sessions_playing, r.setup_failures),
        (5, 0),
        "{what}: {json}"
    );
    assert_eq!(r.sessions_dropped, 0, "{what}: {json}");
    assert_eq!(r.totals.lost, 0, "{what}: loss: {json}");
    assert_eq!(r.totals.duplicates, 0, "{what}: {json}");
    assert_eq!(r.totals.timestamp_backwards, 0, "{what}: {json}");
    assert_eq!(r.totals.garbage, 0, "{what}: {json}");
    assert_on_time(r, what);
    assert!(
        r.totals.packets > 5 * 3 * 150,
        "{what}: too few packets: {json}"
    );
    for s in &r.sessions {
        assert!(
            (s.mbps - mbps).abs() <= 0.2 * mbps,
            "{what}: session {} received {:.3} Mbit/s, the clip is {mbps:.3}: {json}",
            s.index,
            s.mbps
        );
        // Receiving the first burst, at least one estimate exists.
        assert!(
            s.jitter_ms.is_finite() && s.jitter_ms >= 0.0,
            "{what}: {json}"
        );
    }
    assert!(r.client.user_s + r.client.sys_s > 0.0 || r.totals.packets > 0);
    assert!(r.client.us_per_packet >= 0.0);
}

#[test]
fn load_udp_and_tcp_measure_the_clip_with_no_loss() {
    let mut srv = server("");
    let url = srv.url("cbr.ts");
    let mbps = rtp_mbps(&srv, "cbr.ts");
    // Both at once: the server has ten sessions, the test takes ~4 s.
    let tcp = {
        let url = url.clone();
        std::thread::spawn(move || fjord_load(&url, &["-n", "5", "-t", "4", "--tcp"]))
    };
    let udp = fjord_load(&url, &["-n", "5", "-t", "4"]);
    let tcp = tcp.join().unwrap();
    for ((status, stdout, stderr), what) in [(udp, "udp"), (tcp, "tcp")] {
        assert!(status.success(), "{what}: {status}: {stderr}\n{stdout}");
        let r = LoadReport::from_json(&stdout)
            .unwrap_or_else(|e| panic!("{what}: not a report ({e}): {stdout}"));
        assert_eq!(r.transport, what);
        assert!((r.duration_s - 4.0).abs() < 1e-9);
        assert_clean(&r, mbps, what);
        assert_eq!(r.totals.replays, 0, "{what}: the clip outlasts the run");
    }
    srv.assert_alive();
}

/// `fjord load` of an `rtsps://` URL: TLS with the server's self-signed
/// certificate, RTP interleaved inside, as clean as plain TCP.
#[test]
fn load_over_rtsps_measures_the_clip_with_no_loss() {
    let keys = tempfile::tempdir().unwrap();
    let config = format!(
        "{}rtsps_port = 0\n",
        crate::common::certificate(keys.path())
    );
    let mut srv = server(&config);
    let mbps = rtp_mbps(&srv, "cbr.ts");
    let (status, stdout, stderr) =
        fjord_load(&srv.rtsps_url("cbr.ts"), &["-n", "5", "-t", "4", "--tcp"]);
    assert!(status.success(), "{status}: {stderr}\n{stdout}");
    let r =
        LoadReport::from_json(&stdout).unwrap_or_else(|e| panic!("not a report ({e}): {stdout}"));
    assert_clean(&r, mbps, "rtsps");
    srv.assert_alive();
}

#[test]
fn a_short_title_is_played_again_and_stays_on_schedule() {
    let srv = server("");
    let mut cfg = LoadConfig::new(srv.url("short.ts"), 2, Duration::from_secs_f64(2.5));
    for tcp in [false, true] {
        cfg.tcp = tcp;
        let r = load::run(&cfg).unwrap();
        let json = r.to_json();
        assert_eq!(r.sessions_playing, 2, "{json}");
        assert!(
            r.sessions.iter().all(|s| s.replays >= 1),
            "every session ends the 1 s title and plays it again: {json}"
        );
        assert_eq!(r.totals.lost, 0, "{json}");
        assert_eq!(r.totals.duplicates, 0, "{json}");
        assert_on_time(&r, if tcp { "tcp" } else { "udp" });
        // The text form names the replays.
        assert!(r.to_string().contains("replays"), "{r}");
    }
}

#[test]
fn refused_sessions_fail_the_run() {
    let srv = server("max_sessions = 3\n");
    // Sessions 100 ms apart: each SETUP is answered before the next, so the
    // server's limit admits exactly three.
    let mut cfg = LoadConfig::new(srv.url("cbr.ts"), 5, Duration::from_millis(500));
    cfg.stagger = Duration::from_millis(100);
    let r = load::run(&cfg).unwrap();
    let json = r.to_json();
    assert_eq!((r.sessions_playing, r.setup_failures), (3, 2), "{json}");
    assert!(
        r.errors.iter().any(|e| e.contains("SETUP: 453")),
        "the refusal is reported: {json}"
    );
    assert!(!r.clean());
    // The command line: refused sessions make the exit code fail.
    let (status, stdout, stderr) = fjord_load(&srv.url("cbr.ts"), &["-n", "5", "-t", "1"]);
    assert!(!status.success(), "sessions were refused: {stdout}");
    let r = LoadReport::from_json(&stdout).unwrap();
    assert!(r.setup_failures >= 1, "{stdout}");
    assert_eq!(r.sessions_playing + r.setup_failures, 5, "{stdout}");
    assert!(
        stderr.contains(&format!("{} of 5 sessions failed", r.setup_failures)),
        "{stderr}"
    );
    // A title that does not exist fails before any session starts.
    let (status, _, stderr) = fjord_load(&srv.url("nope.ts"), &["-n", "1", "-t", "1"]);
    assert!(!status.success());
    assert!(stderr.contains("404"), "{stderr}");
}

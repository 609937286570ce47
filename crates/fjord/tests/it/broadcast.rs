//! Periodic broadcasting as viewers meet it, inside a network namespace of
//! the test's own: the server sends `[[broadcast]]` titles on their channels
//! from its start and publishes the schedule; `fjord play --broadcast`
//! joins at a random time and writes the title bit-exact.

use std::{fs, process::Command, time::Duration};

use fjord_client::RtspClient;
use serde_json::Value;

use crate::common::{Server, clip_bytes, in_private_network, media, run_bounded};
use crate::multicast::{count_ssrc, join};

const SCHEMES: [&str; 5] = [
    "staggered",
    "pyramid",
    "skyscraper",
    "harmonic",
    "cautious-harmonic",
];

/// A server broadcasting `clip.ts` by `scheme` (max start 2 s).
fn broadcasting(scheme: &str) -> Server {
    Server::start(&format!(
        "[[broadcast]]\ntitle = \"clip.ts\"\nscheme = \"{scheme}\"\nmax_start_s = 2\n"
    ))
}

/// The published schedule of `title`, or the DESCRIBE's status; a
/// broadcast starting (503: its parity is being made) is waited for.
fn schedule(server: &Server, title: &str) -> Result<Value, u16> {
    let url = server.url(title);
    let mut c = RtspClient::connect(&url).unwrap();
    let asked = std::time::Instant::now();
    let r = loop {
        let r = c
            .request(
                "DESCRIBE",
                &format!("{url}?broadcast"),
                &[("Accept", "application/json")],
                &[],
            )
            .unwrap();
        if r.status != 503 || asked.elapsed() > Duration::from_secs(60) {
            break r;
        }
        assert_eq!(r.header("Retry-After"), Some("1"));
        std::thread::sleep(Duration::from_millis(200));
    };
    match r.status {
        200 => Ok(serde_json::from_slice(&r.body).unwrap()),
        s => Err(s),
    }
}

#[test]
fn the_schedule_is_published_and_every_channel_carries_the_titles_packets() {
    in_private_network(|| {
        let mut server = broadcasting("cautious-harmonic");
        // The channels start shortly after the server.
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(
            schedule(&server, "vbr.ts").err(),
            Some(404),
            "not broadcast"
        );
        let s = schedule(&server, "clip.ts").unwrap();
        assert_eq!(
            (s["version"].as_u64(), s["title"].as_str()),
            (Some(1), Some("clip.ts"))
        );
        let channels = s["channels"].as_array().unwrap();
        let planned = s["plan"]["channels"].as_array().unwrap();
        assert!(
            channels.len() >= 2 && channels.len() == planned.len(),
            "{s}"
        );
        let ssrc = s["ssrc"].as_u64().unwrap() as u32;
        let repair = &s["repair"];
        assert!(
            repair["k"].as_u64() > Some(0) && repair["m"].as_u64() > Some(0),
            "the title has parity: its repair flow is published: {repair}"
        );
        for (c, ch) in channels.iter().enumerate() {
            let (group, port) = (ch["group"].as_str().unwrap(), ch["port"].as_u64().unwrap());
            assert_eq!(port, 5004 + 2 * c as u64, "a port per channel");
            let rx = join(group, port as u16);
            let period = Duration::from_nanos(planned[c]["period_ns"].as_u64().unwrap());
            let got = count_ssrc(&rx, ssrc, period.min(Duration::from_secs(2)));
            assert!(
                got > 0,
                "channel {c} ({group}:{port}) sent nothing of SSRC {ssrc:08X}"
            );
        }
        // Channel 0 sends its blocks' repair packets to its group too.
        let ch = &channels[0];
        let rx = join(
            ch["group"].as_str().unwrap(),
            ch["port"].as_u64().unwrap() as u16,
        );
        let period = planned[0]["period_ns"].as_u64().unwrap();
        let repair_ssrc = repair["ssrc"].as_u64().unwrap() as u32;
        let wait = Duration::from_nanos(period).min(Duration::from_secs(3));
        assert!(count_ssrc(&rx, repair_ssrc, wait) > 0, "no repair packets");
        server.assert_healthy();
    });
}

/// `fjord play --broadcast` of every scheme at once, 5 % of the packets
/// dropped on arrival: each viewer waits at most the configured start,
/// rebuilds lost packets from the channels' FEC (or gets them again from
/// the channels' next rounds), and writes the stored file byte for byte.
#[test]
fn fjord_play_reassembles_every_scheme_bit_exact_through_loss() {
    in_private_network(|| {
        let config: String = SCHEMES
            .iter()
            .map(|s| {
                format!("[[broadcast]]\ntitle = \"{s}.ts\"\nscheme = \"{s}\"\nmax_start_s = 2\n")
            })
            .collect();
        let mut server = Server::start_with(&config, |root| {
            for s in SCHEMES {
                fs::copy(&media().clip, root.join(format!("{s}.ts"))).unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(1500));
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|scope| {
            for (k, scheme) in SCHEMES.iter().enumerate() {
                let (server, dir) = (&server, dir.path());
                scope.spawn(move || {
                    // Arrivals spread over a second.
                    std::thread::sleep(Duration::from_millis(200 * k as u64));
                    let out = dir.join(format!("{scheme}.ts"));
                    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
                    cmd.args(["play", "--broadcast", &server.url(&format!("{scheme}.ts"))])
                        .args(["--drop", "0.05", "--seed", &k.to_string(), "-o"])
                        .arg(&out);
                    let run = run_bounded(cmd, Duration::from_secs(90));
                    let report = String::from_utf8_lossy(&run.stdout).into_owned() + &run.stderr;
                    eprintln!("{scheme}: {report}");
                    assert!(run.status.success(), "{scheme}: {report}");
                    let got = fs::read(&out).unwrap_or_default();
                    assert!(
                        got == clip_bytes(),
                        "{scheme}: {} bytes, not the stored file: {report}",
                        got.len()
                    );
                    let wait_ms: f64 = report
                        .split("wait ")
                        .nth(1)
                        .and_then(|w| w.split(" ms").next())
                        .and_then(|w| w.parse().ok())
                        .unwrap_or_else(|| panic!("{scheme}: no wait in {report}"));
                    assert!(
                        wait_ms <= 2000.0 * 1.05 + 100.0,
                        "{scheme}: waited {wait_ms} ms: {report}"
                    );
                    assert!(
                        report.contains(" dropped (test)") && !report.contains(" 0 dropped (test)"),
                        "{scheme}: nothing dropped: {report}"
                    );
                    let rebuilt: u64 = report
                        .split(" rebuilt by FEC")
                        .next()
                        .and_then(|w| w.rsplit(' ').next())
                        .and_then(|w| w.parse().ok())
                        .unwrap_or(0);
                    assert!(rebuilt > 0, "{scheme}: nothing rebuilt by FEC: {report}");
                });
            }
        });
        server.assert_alive();
    });
}

//! The admin listener as an operator uses it: Prometheus scrapes
//! `/metrics` (checked by Prometheus' own `promtool`), scripts read and
//! end sessions through the JSON API, a person opens the status page in a
//! browser (headless Debian chromium).

use std::{path::Path, process::Command, time::Duration};

use fjord_client::EndReason;
use serde_json::Value;

use crate::auth;
use crate::client::{LIMIT, QUIET, open, recv};
use crate::common::{Server, curl, get_json, run_bounded};

/// The value of the sample `series` (name and labels, as written), or 0
/// when it is absent.
fn sample(metrics: &str, series: &str) -> f64 {
    (metrics.lines())
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

fn promtool_check(metrics: &str) {
    let path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(path.path(), metrics).unwrap();
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "promtool check metrics < {}",
        path.path().display()
    ));
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{metrics}",
        String::from_utf8_lossy(&out.stdout),
        out.stderr
    );
}

#[test]
fn metrics_and_the_api_follow_a_session_and_end_it() {
    assert!(
        Command::new("promtool").arg("--version").output().is_ok(),
        "promtool is missing: `make test` installs Debian's prometheus package"
    );
    let server = Server::start("");
    let admin = server.admin();
    let playing = r#"fjord_sessions{state="playing",transport="udp",format="MPEG-TS"}"#;
    let (before, _) = curl(&[&format!("{admin}/metrics")]);
    promtool_check(&before);
    assert_eq!(sample(&before, playing), 0.0);

    let (mut c, mut rx, _) = open(&server, "clip.ts", false);
    c.play(None).expect("PLAY");
    let played = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let (during, code) = curl(&[&format!("{admin}/metrics")]);
    assert_eq!(code, 200);
    promtool_check(&during);
    assert_eq!(sample(&during, playing), 1.0, "{during}");
    let play_ok = r#"fjord_rtsp_requests_total{method="PLAY",status="200"}"#;
    assert_eq!(sample(&during, play_ok), 1.0);
    let sent: f64 = (0..2)
        .map(|t| {
            sample(
                &during,
                &format!(r#"fjord_packets_sent_total{{thread="{t}"}}"#),
            )
        })
        .sum();
    assert!(sent > 10.0, "{sent} packets after 1.5 s of play");
    let per_thread = |name: &str| -> f64 {
        (0..2)
            .map(|t| sample(&during, &format!(r#"{name}{{thread="{t}"}}"#)))
            .sum()
    };
    let (path_packets, calls) = (
        per_thread("fjord_datapath_packets_total"),
        per_thread("fjord_datapath_send_calls_total"),
    );
    assert!(
        path_packets >= sent && calls >= 1.0 && calls <= path_packets,
        "{sent} media packets, {path_packets} by the data path in {calls} calls"
    );
    // Every cause is exported and every late packet counted under one.
    let causes = ["woke_late", "busy", "storage", "socket", "held"];
    let series = |t, c| format!(r#"fjord_late_packets_by_cause_total{{thread="{t}",cause="{c}"}}"#);
    for c in causes {
        assert!(during.contains(&format!("{} ", series(0, c))), "{during}");
    }
    let by_cause: f64 = (causes.iter())
        .flat_map(|c| (0..2).map(move |t| series(t, c)))
        .map(|s| sample(&during, &s))
        .sum();
    assert_eq!(by_cause, per_thread("fjord_late_packets_total"), "{during}");
    let chunks = sample(&during, "fjord_storage_chunk_reads_total")
        + sample(&during, "fjord_storage_chunk_hits_total");
    assert!(chunks > 0.0, "the read-ahead pinned chunks: {during}");
    assert!(
        during.contains("fjord_storage_queue{class=\"refill\"}"),
        "{during}"
    );
    // Per disk: the lead its sessions are refilled at, what it was
    // promised and read; memory per session.
    for m in [
        "fjord_storage_disk_lead_seconds{device=",
        "fjord_storage_disk_promised_bytes_per_second{device=",
        "fjord_storage_disk_read_bytes_per_second{device=",
        "fjord_storage_memory_per_session_bytes ",
    ] {
        assert!(during.contains(m), "no {m} in {during}");
    }
    // The heap the server holds, as the allocator counts it: some MiB, not
    // none, not the whole machine.
    let heap = sample(&during, "fjord_heap_allocated_bytes");
    assert!(
        (1e5..1e9).contains(&heap),
        "heap allocated {heap}: {during}"
    );
    // What its code holds, counted by its allocator: less than the
    // allocator's own figure (which adds headers and thread caches).
    let live = sample(&during, "fjord_heap_live_bytes");
    assert!((1e5..=heap).contains(&live), "heap live {live}: {during}");

    let sessions = get_json(&format!("{admin}/api/v1/sessions"));
    let s = &sessions.as_array().unwrap()[..];
    assert_eq!(s.len(), 1, "{sessions}");
    assert_eq!(
        (s[0]["title"].as_str(), s[0]["state"].as_str()),
        (Some("clip.ts"), Some("playing"))
    );
    assert_eq!(s[0]["transport"], "udp");
    assert!(s[0]["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    // Played for as long as the test ran since PLAY (a loaded machine can
    // take seconds over the curls), and no more than the lead ahead of it.
    let (at, since) = (
        s[0]["position_s"].as_f64().unwrap(),
        played.elapsed().as_secs_f64(),
    );
    assert!(
        (0.8..since + 2.5).contains(&at),
        "position {at} s after {since:.1} s"
    );
    let titles = get_json(&format!("{admin}/api/v1/titles"));
    assert_eq!(titles[0]["name"], "clip.ts", "{titles}");
    assert_eq!(titles[0]["sessions"], 1, "{titles}");
    // The status page's chart: a sample a second of what the engine
    // threads published, the last ones with the session and its packets.
    // Read before the threads' totals, which can only have grown since.
    let history = get_json(&format!("{admin}/api/v1/history"));
    let samples = history["samples"].as_array().unwrap();
    let last = samples.last().unwrap();
    assert_eq!(last["sessions"], 1, "{history}");
    let packets = last["packets"].as_u64().unwrap();
    let threads = get_json(&format!("{admin}/api/v1/threads"));
    let total: u64 = (threads.as_array().unwrap().iter())
        .map(|t| t["packets"].as_u64().unwrap())
        .sum();
    assert!(total as f64 >= sent, "{threads}");
    assert!(packets > 0 && packets <= total, "{history}\n{threads}");

    // The disk the title is on, promised the session's bandwidth.
    let storage = get_json(&format!("{admin}/api/v1/disks"));
    assert_eq!(storage["sessions"], 1, "{storage}");
    let disk = &storage["disks"][0];
    assert!(disk["promised_bytes_per_s"].as_u64() > Some(0), "{storage}");
    assert!(disk["lead_s"].as_f64() >= Some(0.5), "{storage}");

    let id = s[0]["id"].as_str().unwrap();
    let end = format!("{admin}/api/v1/sessions/{id}");
    assert_eq!(curl(&["-X", "DELETE", &end]).1, 204);
    let cap = recv(&mut c, &mut rx, QUIET, LIMIT);
    assert_eq!(cap.end, EndReason::Bye, "the client is told with RTCP BYE");
    assert_eq!(
        get_json(&format!("{admin}/api/v1/sessions")),
        serde_json::json!([])
    );
    let (after, _) = curl(&[&format!("{admin}/metrics")]);
    assert_eq!(sample(&after, playing), 0.0, "{after}");
    assert_eq!(curl(&["-X", "DELETE", &end]).1, 404, "ended already");
    assert_eq!(curl(&[&format!("{admin}/api/v1/nothing")]).1, 404);
}

/// The status page in headless chromium shows a playing session, the
/// engine threads and a throughput chart (tests/browser/status.mjs).
#[test]
fn the_status_page_shows_a_live_session_in_chromium() {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
    assert!(
        driver.join("node_modules/playwright-core").is_dir(),
        "the browser test's npm packages are missing: `make test` installs them"
    );
    let server = Server::start("");
    let (mut c, _rx, _) = open(&server, "clip.ts", true);
    c.play(None).expect("PLAY");
    let sessions = get_json(&format!("{}/api/v1/sessions", server.admin()));
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let mut node = Command::new("node");
    node.arg(driver.join("status.mjs"))
        .args(["--url", &format!("{}/", server.admin()), "--session", &id])
        .arg("--shot")
        .arg(&shot);
    let out = run_bounded(node, Duration::from_secs(60));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}\n{}", out.stderr);
    let page: Value = serde_json::from_str(said.trim()).unwrap();
    let cells: Vec<&str> = (page["cells"].as_array().unwrap().iter())
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(cells[0], id, "{said}");
    assert_eq!(&cells[2..5], ["clip.ts", "playing", "tcp"], "{said}");
    assert!(shot.metadata().unwrap().len() > 5000, "a screenshot");
    // The storage layer's disk the title is on, with the lead its
    // sessions are refilled at, and the read-ahead's memory.
    let disk = page["disks"][0].as_array().expect("a disk row");
    let lead: f64 = disk[7].as_str().unwrap().parse().unwrap();
    assert!(lead >= 0.5, "{said}");
    let memory = page["storage_memory"].as_str().unwrap();
    assert!(memory.contains("for 1 session ("), "{said}");
}

/// With `[[user]]` tables only users with `admin = true` reach the admin
/// listener: by Digest, or by Basic (as Prometheus sends) since it listens
/// on loopback; others get 401 or 403.
#[test]
fn with_users_only_admins_reach_the_admin_listener() {
    let server = Server::start(
        "[[user]]\nname = \"ops\"\npassword = \"pager\"\nadmin = true\n\n\
         [[user]]\nname = \"viewer\"\npassword = \"popcorn\"\npaths = [\"**\"]\n",
    );
    let api = format!("{}/api/v1/sessions", server.admin());
    assert_eq!(curl(&[&api]).1, 401);
    assert_eq!(curl(&["--digest", "-u", "viewer:popcorn", &api]).1, 403);
    assert_eq!(curl(&["--digest", "-u", "ops:wrong", &api]).1, 401);
    let (body, code) = curl(&["--digest", "-u", "ops:pager", &api]);
    assert_eq!((code, body.as_str()), (200, "[]"));
    let metrics = format!("{}/metrics", server.admin());
    assert_eq!(curl(&["--basic", "-u", "ops:pager", &metrics]).1, 200);

    // The admin listener has a key of its own: an answer on a nonce
    // another listener gave (as one seen on plain RTSP) gets a fresh one.
    let mut rtsp = fjord_client::RtspClient::connect(&server.url("clip.ts")).unwrap();
    let theirs = auth::rtsp_nonce(&mut rtsp, &server.url("clip.ts"));
    let ours = auth::nonce_for("127.0.0.1", &api);
    let ops = |nonce| auth::digest_md5(("ops", "pager"), "GET", "/api/v1/sessions", nonce, 1);
    let (code, head) = auth::curl_head("127.0.0.1", &api, Some(&ops(&theirs)));
    assert_eq!(code, 401, "{head}");
    assert!(head.contains("stale=true"), "{head}");
    assert_eq!(auth::curl_head("127.0.0.1", &api, Some(&ops(&ours))).0, 200);
}

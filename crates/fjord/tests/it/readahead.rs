//! Read-ahead sized by the disk: a session's lead grows when its root
//! slows down (a FUSE view of it whose reads take longer, `faultfs.py`'s
//! `delay_ms`) and shrinks when it recovers, with no refill late and the
//! stored file received; a paused session gives its read-ahead back; a
//! SETUP the storage layer refuses says which limit refused it (453).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fjord_client::RtspClient;

use crate::common::{Server, TsClip, get_json, ingest, muxed_10mbit};
use crate::disk_errors::{FaultFs, play, wait_verified};

/// 30 s of 800 kbit/s H.264 + AAC: about 100 kB a second, so a chunk
/// (64 KiB) lasts some 0.6 s.
fn clip() -> PathBuf {
    TsClip {
        size: "320x240",
        tone: 550,
        seconds: 30,
        rates: ("700k", "64k"),
        extra: &[],
    }
    .make("readahead.ts")
}

/// The clip ingested as `a.ts` under `dir/plain`, and a FUSE view of that
/// directory (`None`, the test skipped, without fusepy).
fn on_fuse(dir: &Path) -> Option<(PathBuf, FaultFs)> {
    let plain = dir.join("plain");
    fs::create_dir_all(&plain).unwrap();
    ingest(&plain, &["--fec", "off"], &[(clip(), "a.ts")]);
    let fuse = FaultFs::mount(&plain, dir)?;
    Some((plain, fuse))
}

/// The server's stats file's storage figures, as last written.
fn storage(path: &Path) -> serde_json::Value {
    fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .map(|d| d["storage"].clone())
        .unwrap_or_default()
}

/// The lead of the first disk in `st`, ms (0 when none is listed yet).
fn lead_ms(st: &serde_json::Value) -> u64 {
    st["disks"][0]["lead_us"].as_u64().unwrap_or(0) / 1000
}

/// Polls the stats file until `f` holds, for at most `limit`; the last
/// figures either way.
fn until(
    path: &Path,
    limit: Duration,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let end = Instant::now() + limit;
    loop {
        let st = storage(path);
        if f(&st) || Instant::now() > end {
            return st;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[ignore = "timing: `make test` runs it alone after the parallel suite (reads delayed in real time)"]
fn the_lead_grows_when_a_root_slows_and_shrinks_when_it_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let Some((plain, fuse)) = on_fuse(dir.path()) else {
        return;
    };
    let stats = dir.path().join("stats.json");
    // 64 KiB reads: a refill reads 0.6 s of this title.
    let config = format!(
        "stats_file = {:?}\nread_kb = 64\n",
        stats.display().to_string()
    );
    let server = Server::start_on(fuse.mount_point(), &config);
    server.assert_describes("a.ts");
    wait_verified(&server, &["a.ts"]);
    let player = {
        let (url, out) = (server.url("a.ts"), dir.path().join("a.out"));
        std::thread::spawn(move || play(&url, &out))
    };
    let fast = until(&stats, Duration::from_secs(5), |s| lead_ms(s) > 0);
    assert_eq!(lead_ms(&fast), 500, "a fast disk: the floor; {fast}");
    // Reads taking 320 ms longer: a refill (64 KiB, a chunk of the packet
    // file, one FUSE read; the whole index is kept from load) under the
    // floor's 500 ms, so the first slow refill is not late, and the lead
    // then covers twice its latency.
    fuse.slow(320, true);
    let slow = until(&stats, Duration::from_secs(8), |s| lead_ms(s) >= 600);
    let grown = lead_ms(&slow);
    assert!(grown >= 600, "the lead did not grow on a slow root: {slow}");
    let worst = slow["disks"][0]["worst_latency_us"].as_u64().unwrap_or(0);
    assert!(worst >= 300_000, "{slow}");
    // Recovered: once the slow reads leave the 10 s window, the floor.
    fuse.slow(0, false);
    let back = until(&stats, Duration::from_secs(15), |s| lead_ms(s) == 500);
    assert_eq!(lead_ms(&back), 500, "the lead did not shrink back: {back}");
    let (got, text, ok) = player.join().unwrap();
    assert!(ok, "fjord play failed: {text}");
    let want = fs::read(plain.join("a.ts")).unwrap();
    assert!(
        got == want,
        "received {} bytes, not the stored {}",
        got.len(),
        want.len()
    );
    // No packet waited for the storage layer (lateness of other causes,
    // a hypervisor's pause, is not this test's).
    let threads = get_json(&format!("{}/api/v1/threads", server.admin()));
    let waited: u64 = (threads.as_array().unwrap().iter())
        .map(|t| t["late_storage"].as_u64().unwrap())
        .sum();
    assert_eq!(waited, 0, "packets late for the storage layer: {threads}");
    eprintln!("readahead: lead 500 ms fast, {grown} ms slow (worst read {worst} us), 500 ms after");
}

/// Major page faults the server's engine threads took so far.
fn engine_faults(server: &Server) -> u64 {
    let tasks = fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap();
    (tasks.flatten())
        .filter_map(|t| fs::read_to_string(t.path().join("stat")).ok())
        .filter(|s| s.contains("(fjord-engine-"))
        // Field 12, majflt, counted after the `(comm)` field.
        .filter_map(|s| {
            s.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(9)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// On FUSE an open of a file drops its page cache, the pages locked for
/// sessions too (a filesystem that does not keep it, as faultfs does not):
/// the title's verification once opened its files anew and the engine then
/// faulted in the head it plays first, reading the disk on its own thread.
#[test]
fn a_title_on_fuse_plays_from_its_head_without_an_engine_fault() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_, fuse)) = on_fuse(dir.path()) else {
        return;
    };
    let server = Server::start_on(fuse.mount_point(), "");
    server.assert_describes("a.ts");
    wait_verified(&server, &["a.ts"]);
    let before = engine_faults(&server);
    let mut c = RtspClient::connect(&server.url("a.ts")).unwrap();
    let d = c.describe().unwrap();
    let (_session, mut rx) = c.setup_udp(&d.track_urls[0]).unwrap();
    c.play(None).unwrap();
    let (mut packets, end) = (0, Instant::now() + Duration::from_secs(3));
    while Instant::now() < end {
        let event = rx.recv(Duration::from_millis(200));
        packets += usize::from(matches!(event, Some(fjord_client::Event::Rtp(_))));
    }
    assert!(packets > 100, "{packets} packets in 3 s");
    assert_eq!(
        engine_faults(&server) - before,
        0,
        "engine major faults while playing"
    );
}

#[test]
fn a_paused_session_gives_its_read_ahead_back() {
    let dir = tempfile::tempdir().unwrap();
    ingest(dir.path(), &[], &[(clip(), "a.ts")]);
    let stats = dir.path().join("stats.json");
    let server = Server::start_on(
        dir.path(),
        &format!("stats_file = {:?}\n", stats.display().to_string()),
    );
    let mut c = RtspClient::connect(&server.url("a.ts")).unwrap();
    let d = c.describe().unwrap();
    let (_session, _rx) = c.setup_udp(&d.track_urls[0]).unwrap();
    // What the title holds resident whatever plays: its head.
    let idle = until(&stats, Duration::from_secs(5), |s| {
        s["pinned_bytes"].as_u64() > Some(0)
    });
    let head = idle["pinned_bytes"].as_u64().unwrap();
    c.play(None).unwrap();
    // 1 MiB reads past a 500 ms lead: up to the 8 s ceiling of this
    // title, three chunks and more.
    let playing = until(&stats, Duration::from_secs(10), |s| {
        s["pinned_bytes"].as_u64().unwrap_or(0) >= head + (512 << 10)
    });
    let held = playing["pinned_bytes"].as_u64().unwrap();
    assert!(held >= head + (512 << 10), "{playing}");
    c.pause().unwrap();
    // Kept: half a first read (0.5 s), a chunk or two.
    let paused = until(&stats, Duration::from_secs(5), |s| {
        s["pinned_bytes"].as_u64().unwrap_or(u64::MAX) + (256 << 10) <= held
    });
    let kept = paused["pinned_bytes"].as_u64().unwrap();
    assert!(
        kept + (256 << 10) <= held,
        "paused, {kept} bytes pinned of {held} playing ({head} the head): {paused}"
    );
    c.play(None).unwrap();
    let again = until(&stats, Duration::from_secs(10), |s| {
        s["pinned_bytes"].as_u64().unwrap_or(0) > kept
    });
    assert!(again["pinned_bytes"].as_u64().unwrap() > kept, "{again}");
}

/// The storage layer's 453 names the limit: the disk's promised bandwidth,
/// or the read-ahead memory.
#[test]
fn a_storage_refusal_names_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    // 1.25 MB/s, more than 80 % of a 1 MB/s disk.
    let fat = muxed_10mbit();
    ingest(dir.path(), &[], &[(fat, "a.ts")]);
    let setup = |config: &str| {
        let server = Server::start_on(dir.path(), config);
        let mut c = RtspClient::connect(&server.url("a.ts")).unwrap();
        let d = c.describe().unwrap();
        let transport = "RTP/AVP;unicast;client_port=50000-50001";
        let r = c
            .request("SETUP", &d.track_urls[0], &[("Transport", transport)], &[])
            .unwrap();
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    let (status, why) = setup("disk_mbps = 1\n");
    assert_eq!(status, 453, "{why}");
    assert!(why.contains("disk") && why.contains("MB/s"), "{why}");
    // 1 MiB holds the title's head; a stream's lead does not fit beside it.
    let (status, why) = setup("readahead_budget_mb = 1\n");
    assert_eq!(status, 453, "{why}");
    assert!(why.contains("memory"), "{why}");
}

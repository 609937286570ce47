//! The cluster's bounds, end to end: a real etcd on loopback, real fjord
//! nodes on 127.0.0.N, curl and ffmpeg as viewers. A member key whose
//! value is over the record cap (64 KiB), and a members' list over the
//! answer cap (16 MiB), are left out with a warning while the nodes route
//! on; more than 1,024 keys under the members' prefix are capped to the
//! oldest (the real nodes), logged; a node at `max_sessions` sends a new
//! viewer of a title it is home to on to the title's next node, and so
//! does one past its bound of load (`cluster_balance_pct`), with a mark
//! the next node keeps the viewer by, where without it it would send it
//! back; a title holding much of the cluster's sessions gets a second
//! home (`cluster_copy_share_pct`), where new viewers go.

use std::process::Command;
use std::time::{Duration, Instant};

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use serde_json::{Value, json};

use crate::cluster::{Etcd, Node, home_and_entry, wait_members};
use crate::common::{clip_bytes, free_port, run_bounded};
use crate::peers::ffmpeg_receives_every_frame_at;

const PREFIX: &str = "/fjord/members/";

impl Etcd {
    /// POSTs `body` to the JSON gateway's `path` (etcd's own client port):
    /// its answer.
    fn post(&self, path: &str, body: &Value) -> Value {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), body.to_string()).unwrap();
        let mut c = Command::new("curl");
        c.args(["-sS", "-f", "--max-time", "10", "--data-binary"])
            .arg(format!("@{}", file.path().display()))
            .arg(format!("{}{path}", self.url));
        let out = run_bounded(c, Duration::from_secs(15));
        assert!(out.status.success(), "etcd {path}: {}", out.stderr);
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Puts `value` at `key`, with no lease (as an operator's stray write).
    fn put(&self, key: &str, value: &[u8]) {
        let body = json!({ "key": B64.encode(key), "value": B64.encode(value) });
        self.post("/v3/kv/put", &body);
    }

    /// Puts every pair, 128 to a transaction (etcd's `--max-txn-ops`).
    fn put_all(&self, kvs: &[(String, Vec<u8>)]) {
        for chunk in kvs.chunks(128) {
            let puts: Vec<Value> = (chunk.iter())
                .map(|(k, v)| json!({ "request_put": { "key": B64.encode(k), "value": B64.encode(v) } }))
                .collect();
            let answer = self.post("/v3/kv/txn", &json!({ "success": puts }));
            assert_eq!(answer["succeeded"], true, "{answer}");
        }
    }

    /// Deletes every key starting with `prefix`.
    fn delete_prefix(&self, prefix: &str) {
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut().unwrap() += 1;
        let body = json!({ "key": B64.encode(prefix), "range_end": B64.encode(end) });
        self.post("/v3/kv/deleterange", &body);
    }
}

/// etcd and nodes 1 and 2 in it (lease TTL 2 s), with `lines` of config
/// more, once each knows the other.
fn two_nodes(lines: &str) -> (Etcd, Vec<Node>) {
    let etcd = Etcd::start();
    let lines = format!(
        "cluster_etcd = [\"{}\"]\ncluster_ttl_s = 2\n{lines}",
        etcd.url
    );
    let nodes: Vec<Node> = (1..=2)
        .map(|n| Node::start(n, free_port(), 0, &lines))
        .collect();
    wait_members(
        &nodes.iter().collect::<Vec<_>>(),
        2,
        Duration::from_secs(10),
    );
    (etcd, nodes)
}

/// curl, following the redirect from `url`, downloads `clip.ts` whole.
fn curl_downloads_the_clip(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("clip.ts");
    let mut c = Command::new("curl");
    c.args(["-sS", "-f", "-L", "--max-time", "15", "-o"])
        .arg(&to)
        .arg(url);
    let out = run_bounded(c, Duration::from_secs(20));
    assert!(out.status.success(), "curl -L {url}: {}", out.stderr);
    let got = std::fs::read(&to).unwrap();
    assert!(
        blake3::hash(&got) == blake3::hash(clip_bytes()),
        "curl -L {url}: {} bytes, not the file's {}",
        got.len(),
        clip_bytes().len()
    );
}

/// Waits until `check` of a node's cluster view holds.
fn wait_view(node: &Node, limit: Duration, check: impl Fn(&Value) -> bool) {
    let t = Instant::now();
    loop {
        let view = node.cluster();
        if check(&view) {
            return;
        }
        assert!(t.elapsed() < limit, "after {limit:?}: {view}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A record as a node writes it, of node `name` (reached nowhere).
fn record(name: &str) -> Vec<u8> {
    format!(r#"{{"name":"{name}","rtsp":"rtsp://127.0.0.9:9"}}"#).into_bytes()
}

#[test]
fn a_member_record_over_64_kib_and_a_list_over_16_mib_are_left_out_and_routing_goes_on() {
    let (etcd, mut nodes) = two_nodes("");
    let all: Vec<&Node> = nodes.iter().collect();
    let (home, entry) = home_and_entry(&all, "clip.ts");
    let (home_ip, entry_url) = (home.ip.clone(), entry.http("clip.ts"));

    // One record over the cap (64 KiB), well-formed but padded.
    let mut huge = record("huge");
    huge.resize(64 * 1024 + 1, b' ');
    etcd.put(&format!("{PREFIX}huge"), &huge);
    for node in &all {
        let said = "not a member record (a member record of 65537 bytes); left out";
        node.server.wait_for_log(said, Duration::from_secs(5));
        wait_view(node, Duration::from_secs(3), |v| v["etcd"]["refused"] == 1);
        assert_eq!(node.members(), 2);
    }
    assert_eq!(home_and_entry(&all, "clip.ts").0.ip, home_ip);
    curl_downloads_the_clip(&entry_url);

    // Twelve records of 1.4 MiB (etcd takes requests up to 1.5 MiB): the
    // list is over 16 MiB, so the nodes read it one key at a time.
    for i in 0..12 {
        etcd.put(&format!("{PREFIX}big-{i}"), &vec![b'x'; 1400 << 10]);
    }
    for node in &all {
        let said = "the members' list is over 16 MiB; read one key at a time";
        node.server.wait_for_log(said, Duration::from_secs(5));
        wait_view(node, Duration::from_secs(5), |v| v["etcd"]["refused"] == 13);
        assert_eq!(node.cluster()["etcd"]["reachable"], true);
    }
    // A node that joins now is seen: the list is not stuck at the cap.
    let lines = format!("cluster_etcd = [\"{}\"]\ncluster_ttl_s = 2\n", etcd.url);
    nodes.push(Node::start(3, free_port(), 0, &lines));
    let all: Vec<&Node> = nodes.iter().collect();
    wait_members(&all, 3, Duration::from_secs(10));
    let (_, entry) = home_and_entry(&all, "clip.ts");
    curl_downloads_the_clip(&entry.http("clip.ts"));
    for node in &mut nodes {
        node.server.assert_alive();
        // Slow lists (key by key) never held up a renewal.
        let log = node.server.log_text();
        assert!(!log.contains("lease expired"), "{log}");
    }
}

#[test]
fn more_than_1024_member_keys_are_capped_to_the_oldest_and_the_nodes_route_on() {
    let (etcd, mut nodes) = two_nodes("");
    let all: Vec<&Node> = nodes.iter().collect();
    let (home, _) = home_and_entry(&all, "clip.ts");
    let home_ip = home.ip.clone();

    // 1,100 stray keys after the nodes' own: records of another name than
    // their key's (what a copy under the wrong key would be), named to sort
    // before the nodes' keys: only their age keeps the nodes in.
    let stray: Vec<(String, Vec<u8>)> = (0..1100)
        .map(|i| (format!("{PREFIX}a-stray-{i:04}"), record("elsewhere")))
        .collect();
    let t = Instant::now();
    etcd.put_all(&stray);
    eprintln!("1,100 keys written in {:?}", t.elapsed());
    for node in &all {
        // (Told when the cap is first passed, by the transaction that did.)
        let said = "more than 1024 keys under the members' prefix; the oldest 1024 read";
        node.server.wait_for_log(said, Duration::from_secs(5));
        // The oldest 1,024: the two nodes and 1,022 stray keys.
        wait_view(node, Duration::from_secs(3), |v| {
            v["etcd"]["unread"] == 78 && v["etcd"]["refused"] == 1022
        });
        let said = "more keys that are not member records left out";
        node.server.wait_for_log(said, Duration::ZERO);
        assert_eq!(node.members(), 2);
    }
    let metrics = crate::common::curl_bytes(&format!("{}/metrics", all[0].server.admin()));
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        "fjord_cluster_etcd_unread_keys 78",
        "fjord_cluster_etcd_refused_keys 1022",
        "fjord_cluster_members 2",
    ] {
        assert!(metrics.contains(line), "{metrics}");
    }
    let (home, entry) = home_and_entry(&all, "clip.ts");
    assert_eq!(home.ip, home_ip);
    curl_downloads_the_clip(&entry.http("clip.ts"));

    etcd.delete_prefix(&format!("{PREFIX}a-stray-"));
    for node in &all {
        let said = "every key under the members' prefix is read again";
        node.server.wait_for_log(said, Duration::from_secs(5));
        wait_view(node, Duration::from_secs(3), |v| {
            v["etcd"]["unread"] == 0 && v["etcd"]["refused"] == 0
        });
    }
    for node in &mut nodes {
        node.server.assert_alive();
    }
}

#[test]
fn a_full_home_node_sends_a_new_viewer_to_the_titles_next_node() {
    let (_etcd, nodes) = two_nodes("max_sessions = 1\n");
    let all: Vec<&Node> = nodes.iter().collect();
    let (home, next) = home_and_entry(&all, "clip.ts");

    // One session at the home node fills it.
    let mut held = fjord_client::RtspClient::connect(&home.rtsp("clip.ts")).unwrap();
    let track = held.describe().expect("DESCRIBE").track_urls[0].clone();
    let transport = [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")];
    let setup = held.request("SETUP", &track, &transport, &[]).unwrap();
    assert_eq!(setup.status, 200);
    let full = |v: &Value| v["others"][0]["load"] == 1 && v["others"][0]["capacity"] == 1;
    wait_view(next, Duration::from_secs(3), full);

    // A new viewer at the full home node: redirected, not refused.
    let to = home.placed(&next.rtsp("clip.ts"));
    assert_eq!(home.describe("clip.ts"), (302, Some(to)));
    let playlist = "clip.ts/index.m3u8";
    let to = home.placed(&next.http(playlist));
    assert_eq!(home.get(playlist), (302, Some(to)));
    assert_eq!(next.describe("clip.ts").0, 200);
    curl_downloads_the_clip(&home.http("clip.ts"));
    ffmpeg_receives_every_frame_at(&home.rtsp("clip.ts"), "tcp", "from a full node");

    // The session ends: the home node takes new viewers again.
    drop(held);
    let t = Instant::now();
    while home.describe("clip.ts").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(8), "{}", home.cluster());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `n` sessions of `clip.ts` set up at `node` (over TCP), held until
/// dropped.
fn hold(node: &Node, n: usize) -> Vec<fjord_client::RtspClient> {
    let one = |_| {
        let mut c = fjord_client::RtspClient::connect(&node.rtsp("clip.ts")).unwrap();
        let track = c.describe().expect("DESCRIBE").track_urls[0].clone();
        let transport = [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")];
        assert_eq!(
            c.request("SETUP", &track, &transport, &[]).unwrap().status,
            200
        );
        c
    };
    (0..n).map(one).collect()
}

#[test]
fn a_title_holding_much_of_the_clusters_sessions_gets_a_second_home() {
    let (_etcd, nodes) = two_nodes("");
    let all: Vec<&Node> = nodes.iter().collect();
    let (home, next) = home_and_entry(&all, "clip.ts");
    assert_eq!(next.describe("clip.ts").0, 302, "one home at first");

    // Five sessions of it at the home node: with a new one, six, all the
    // cluster's (a node's share 3): two homes at the defaults (one per
    // quarter of a share, at most one per 3 sessions). Within the bound.
    let held = hold(home, 5);
    let busy = |v: &Value| v["others"][0]["busy"] == json!([["clip.ts", 5]]);
    wait_view(next, Duration::from_secs(3), busy);
    // The home sends a new viewer to the other home, less loaded, which
    // serves it unmarked too: a home now.
    let to = home.placed(&next.rtsp("clip.ts"));
    assert_eq!(home.describe("clip.ts"), (302, Some(to)));
    assert_eq!(next.describe("clip.ts").0, 200);
    ffmpeg_receives_every_frame_at(&home.rtsp("clip.ts"), "tcp", "at its second home");

    // The sessions end: one home again.
    drop(held);
    let t = Instant::now();
    while next.describe("clip.ts").0 != 302 {
        assert!(t.elapsed() < Duration::from_secs(8), "{}", next.cluster());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_home_node_past_its_bound_sends_a_new_viewer_on_and_the_mark_keeps_it_there() {
    // Not by sessions: the title would get a second home.
    let (_etcd, nodes) = two_nodes("cluster_balance_pct = 10\ncluster_copy_share_pct = 0\n");
    let all: Vec<&Node> = nodes.iter().collect();
    let (home, next) = home_and_entry(&all, "clip.ts");

    // Eight sessions at the home node: of 9 with a new one, a node's half
    // is 4.5, +10 % is 4.95, and FEW (3) over it 7.95; 8 are past it.
    let held = hold(home, 8);
    let to = home.placed(&next.rtsp("clip.ts"));
    assert_eq!(home.describe("clip.ts"), (302, Some(to.clone())));
    let sent = |n: &Node| n.cluster()["redirects"].as_u64().unwrap();
    let (home_sent, next_sent) = (sent(home), sent(next));

    // The next node judging without a bound (as one judging the home by
    // a load record not yet renewed would): a viewer not marked it sends
    // back home, a loop; the marked one it serves.
    let text = std::fs::read_to_string(next.server.config_path()).unwrap();
    let text = text.replace("cluster_balance_pct = 10", "cluster_balance_pct = 0");
    std::fs::write(next.server.config_path(), text).unwrap();
    next.server.signal("HUP");
    next.server
        .wait_for_log("config reloaded", Duration::from_secs(5));
    let back = next.placed(&home.rtsp("clip.ts"));
    assert_eq!(next.describe("clip.ts"), (302, Some(back)));
    let marked = to.strip_prefix(&format!("rtsp://{}:{}/", next.ip, next.server.port));
    assert_eq!(next.describe(marked.unwrap()).0, 200);

    // ffmpeg entering at the home node plays it at the next, bit-exact,
    // sent on once (by the home node) and not back.
    ffmpeg_receives_every_frame_at(&home.rtsp("clip.ts"), "tcp", "past the bound");
    assert_eq!(sent(home), home_sent + 1);
    assert_eq!(sent(next), next_sent + 1, "only the unmarked DESCRIBE");
    drop(held);
}

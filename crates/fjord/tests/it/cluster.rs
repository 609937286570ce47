//! A cluster of three nodes on 127.0.0.1, .2 and .3, members in a real
//! etcd (Debian's `etcd-server`, started per test on loopback) or in a
//! static `[[peer]]` list: a title asked for at a node outside its home
//! set is answered 302 to its home node, and ffmpeg, GStreamer, openRTSP
//! and chromium (hls.js) follow it and play the title bit-exact (chromium:
//! to its end); the home node killed, its titles move within the lease's
//! TTL (static peers: within two probes) and ffmpeg plays again from the
//! same entry URL; etcd killed, the nodes keep their members and say so.
//! Over TLS, a title is sent to its home node's `rtsps://` and `https://`
//! URLs (advertised in its record), checked against the certificate.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::browser::chromium_plays;
use crate::common::{Server, clip_bytes, free_port, get_json, media, run_bounded};
use crate::peers::{ffmpeg_receives_every_frame_at, gstreamer_receives_the_file_at};

/// etcd on loopback with a data directory of its own; killed on drop.
pub(crate) struct Etcd {
    child: Child,
    pub(crate) url: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    pub(crate) fn start() -> Etcd {
        assert!(
            Command::new("etcd").arg("--version").output().is_ok(),
            "etcd is missing: `make deps` installs Debian's etcd-server"
        );
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("etcd.log")).unwrap())
            .spawn()
            .expect("spawn etcd");
        let etcd = Etcd {
            child,
            url,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !etcd.answers() {
            assert!(Instant::now() < deadline, "etcd did not answer within 15 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        etcd
    }

    fn answers(&self) -> bool {
        let mut c = Command::new("curl");
        c.args(["-sf", "--max-time", "1", "-X", "POST", "-d", "{}"])
            .arg(format!("{}/v3/maintenance/status", self.url));
        run_bounded(c, Duration::from_secs(3)).status.success()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A node: a `fjord serve` on 127.0.0.N with HTTP.
pub(crate) struct Node {
    pub(crate) server: Server,
    pub(crate) ip: String,
    http: u16,
    name: String,
}

impl Node {
    /// Node N (`node-N` on 127.0.0.N) serving `clip.ts`, with `lines` of
    /// config after its own (RTSP on `port`, 0: any).
    pub(crate) fn start(n: u8, http: u16, port: u16, lines: &str) -> Node {
        let ip = format!("127.0.0.{n}");
        let config = format!(
            "bind = \"{ip}\"\nport = {port}\nhttp_port = {http}\nnode_name = \"node-{n}\"\n\
             idle_timeout_s = 5\n{lines}"
        );
        let server = Server::start_with(&config, |root| {
            std::fs::copy(&media().clip, root.join("clip.ts")).unwrap();
        });
        let name = format!("node-{n}");
        Node {
            server,
            ip,
            http,
            name,
        }
    }

    /// `url` as this node sends a viewer there: marked as placed by it.
    pub(crate) fn placed(&self, url: &str) -> String {
        format!("{url}?fjord-placed={}", self.name)
    }

    pub(crate) fn rtsp(&self, title: &str) -> String {
        format!("rtsp://{}:{}/{title}", self.ip, self.server.port)
    }

    pub(crate) fn http(&self, path: &str) -> String {
        format!("http://{}:{}/{path}", self.ip, self.http)
    }

    fn https(&self, path: &str) -> String {
        format!("https://{}:{}/{path}", self.ip, self.http)
    }

    fn rtsps(&self, title: &str) -> String {
        (self.server.rtsps_url(title)).replacen("127.0.0.1", &self.ip, 1)
    }

    pub(crate) fn cluster(&self) -> serde_json::Value {
        get_json(&format!("{}/api/v1/cluster", self.server.admin()))
    }

    /// The members this node knows of, itself included.
    pub(crate) fn members(&self) -> usize {
        self.cluster()["others"].as_array().map_or(0, Vec::len) + 1
    }

    /// A DESCRIBE's status and `Location`, from the answer's head (the
    /// connection stays open: not waited for).
    pub(crate) fn describe(&self, title: &str) -> (u16, Option<String>) {
        let req = format!("DESCRIBE {} RTSP/1.0\r\nCSeq: 1\r\n\r\n", self.rtsp(title));
        let mut s = TcpStream::connect((self.ip.as_str(), self.server.port)).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let (mut head, mut buf) = (Vec::new(), [0u8; 4096]);
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        status_and_location(&String::from_utf8_lossy(&head))
    }

    /// An HTTP GET's status and `Location`.
    pub(crate) fn get(&self, path: &str) -> (u16, Option<String>) {
        let mut c = Command::new("curl");
        c.args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "10"])
            .arg(self.http(path));
        let out = run_bounded(c, Duration::from_secs(15));
        status_and_location(&String::from_utf8_lossy(&out.stdout))
    }
}

fn status_and_location(head: &str) -> (u16, Option<String>) {
    let status = (head.split_whitespace().nth(1)).and_then(|s| s.parse().ok());
    let location = (head.lines())
        .find_map(|l| l.strip_prefix("Location: "))
        .map(|l| l.trim().to_owned());
    (status.unwrap_or(0), location)
}

/// Waits until every node of `nodes` knows `n` members.
pub(crate) fn wait_members(nodes: &[&Node], n: usize, limit: Duration) -> Duration {
    let t = Instant::now();
    while !nodes.iter().all(|node| node.members() == n) {
        let seen: Vec<usize> = nodes.iter().map(|node| node.members()).collect();
        assert!(
            t.elapsed() < limit,
            "members {seen:?}, not {n}, after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

/// The node that serves `title` (every other one sends its DESCRIBE and
/// its playlist there), and one that sends it on.
pub(crate) fn home_and_entry<'a>(nodes: &[&'a Node], title: &str) -> (&'a Node, &'a Node) {
    let answers: Vec<(u16, Option<String>)> = nodes.iter().map(|n| n.describe(title)).collect();
    let homes: Vec<usize> = (0..nodes.len()).filter(|&i| answers[i].0 == 200).collect();
    assert_eq!(homes.len(), 1, "one home node: {answers:?}");
    let home = nodes[homes[0]];
    for (node, (status, location)) in nodes.iter().zip(&answers) {
        if node.ip != home.ip {
            assert_eq!(*status, 302, "{answers:?}");
            assert_eq!(location, &Some(node.placed(&home.rtsp(title))));
            let playlist = format!("{title}/index.m3u8");
            let (status, location) = node.get(&playlist);
            assert_eq!(status, 302);
            assert_eq!(location, Some(node.placed(&home.http(&playlist))));
        }
    }
    let entry = nodes.iter().find(|n| n.ip != home.ip).unwrap();
    (home, entry)
}

/// openRTSP (over TCP) through `url` receives `clip.ts` whole.
fn openrtsp_receives_the_file(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("openRTSP");
    cmd.current_dir(dir.path()).args(["-t", url]);
    let out = run_bounded(cmd, Duration::from_secs(40));
    assert!(!out.timed_out, "openRTSP did not end: {}", out.stderr);
    let got = std::fs::read(dir.path().join("video-MP2T-1")).unwrap_or_default();
    assert!(
        got == clip_bytes(),
        "openRTSP: {} bytes, the file {}: {}",
        got.len(),
        clip_bytes().len(),
        out.stderr
    );
}

/// Chromium plays `url` (HLS, hls.js) to its end.
fn chromium_plays_hls(url: &str) {
    chromium_plays("hls", url, &[], 60, "cluster-hls.png");
}

#[test]
fn an_etcd_cluster_sends_each_title_home_and_moves_it_when_its_node_dies() {
    let mut etcd = Etcd::start();
    let lines = format!("cluster_etcd = [\"{}\"]\ncluster_ttl_s = 2\n", etcd.url);
    let mut nodes: Vec<Node> = (1..=3)
        .map(|n| Node::start(n, free_port(), 0, &lines))
        .collect();
    wait_members(
        &nodes.iter().collect::<Vec<_>>(),
        3,
        Duration::from_secs(10),
    );
    let (home, entry) = home_and_entry(&nodes.iter().collect::<Vec<_>>(), "clip.ts");
    // Every player enters at a node that is not the title's home.
    let (rtsp, hls) = (entry.rtsp("clip.ts"), entry.http("clip.ts/index.m3u8"));
    let gst_out = home.server.root.path().join("gst.ts");
    std::thread::scope(|s| {
        s.spawn(|| ffmpeg_receives_every_frame_at(&rtsp, "tcp", "through a redirect"));
        s.spawn(|| gstreamer_receives_the_file_at(&rtsp, &[], &gst_out, "tcp", "redirected"));
        s.spawn(|| openrtsp_receives_the_file(&rtsp));
        s.spawn(|| chromium_plays_hls(&hls));
    });
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["cluster", "status", "--admin", &entry.server.admin()]);
    let out = run_bounded(cmd, Duration::from_secs(10));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", out.stderr);
    for n in 1..=3 {
        assert!(printed.contains(&format!("node-{n} ")), "{printed}");
    }
    assert!(printed.contains("(reachable)"), "{printed}");

    // The home node dies: its lease lapses within the TTL (2 s).
    let gone = nodes.iter().position(|n| n.ip == home.ip).unwrap();
    let (entry_ip, dead) = (entry.ip.clone(), nodes.remove(gone));
    dead.server.signal("KILL");
    let left: Vec<&Node> = nodes.iter().collect();
    let took = wait_members(&left, 2, Duration::from_secs(5));
    eprintln!("the killed node left every view after {took:?}");
    home_and_entry(&left, "clip.ts");
    let entry = left.iter().find(|n| n.ip == entry_ip).unwrap();
    ffmpeg_receives_every_frame_at(&entry.rtsp("clip.ts"), "tcp", "after the failover");

    // etcd goes: the nodes keep their members, serve on, and say so.
    etcd.kill();
    let t = Instant::now();
    while entry.cluster()["etcd"]["reachable"] != false {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", entry.cluster());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(entry.members(), 2);
    let _ = home_and_entry(&left, "clip.ts");
    entry
        .server
        .wait_for_log("etcd does not answer", Duration::from_secs(1));
    let metrics = crate::common::curl_bytes(&format!("{}/metrics", entry.server.admin()));
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("fjord_cluster_etcd_reachable 0"),
        "{metrics}"
    );
    assert!(metrics.contains("fjord_cluster_members 2"), "{metrics}");
}

/// RTSP and HTTP ports for three nodes.
fn three_ports() -> Vec<(u16, u16)> {
    (0..3).map(|_| (free_port(), free_port())).collect()
}

/// The `[[peer]]` tables of nodes 1-3 at `ports`.
fn static_peers(ports: &[(u16, u16)]) -> String {
    (1..=3)
        .zip(ports)
        .map(|(n, (rtsp, http))| {
            format!(
                "[[peer]]\nname = \"node-{n}\"\nrtsp = \"rtsp://127.0.0.{n}:{rtsp}\"\n\
                 http = \"http://127.0.0.{n}:{http}\"\n"
            )
        })
        .collect()
}

/// Nodes 1-3 at `ports`, with `lines` of config.
fn start_static(ports: &[(u16, u16)], lines: &str) -> Vec<Node> {
    (1..=3)
        .zip(ports)
        .map(|(n, &(rtsp, http))| Node::start(n, http, rtsp, lines))
        .collect()
}

#[test]
fn a_static_peer_list_without_etcd_sends_each_title_home_and_leaves_a_dead_peer_out() {
    let ports = three_ports();
    let peers = static_peers(&ports);
    let mut nodes = start_static(&ports, &peers);
    let all: Vec<&Node> = nodes.iter().collect();
    // A peer probed before it listened is out until its next probe.
    wait_members(&all, 3, Duration::from_secs(5));
    assert_eq!(all[0].cluster()["etcd"]["source"], "static");
    let (home, entry) = home_and_entry(&all, "clip.ts");
    ffmpeg_receives_every_frame_at(&entry.rtsp("clip.ts"), "udp", "through a static peer");

    // The home peer dies: the others' probes (every second, out after two
    // misses) leave it out, and its title goes to its next node.
    let gone = nodes.iter().position(|n| n.ip == home.ip).unwrap();
    let (entry_ip, dead) = (entry.ip.clone(), nodes.remove(gone));
    dead.server.signal("KILL");
    let left: Vec<&Node> = nodes.iter().collect();
    let took = wait_members(&left, 2, Duration::from_secs(5));
    eprintln!("the killed static peer left every view after {took:?}");
    home_and_entry(&left, "clip.ts");
    let entry = left.iter().find(|n| n.ip == entry_ip).unwrap();
    ffmpeg_receives_every_frame_at(&entry.rtsp("clip.ts"), "udp", "after a static peer died");
}

/// A DESCRIBE over TLS (Python's ssl, verifying `ca` and the address):
/// its status and `Location`.
#[test]
fn an_hls_viewer_whose_home_node_dies_mid_title_plays_on_at_the_next_node() {
    let ports = three_ports();
    // Top-level settings before the `[[peer]]` tables.
    let lines = format!(
        "access_log = true\nhls_segment_s = 1\n{}",
        static_peers(&ports)
    );
    let nodes = start_static(&ports, &lines);
    let all: Vec<&Node> = nodes.iter().collect();
    wait_members(&all, 3, Duration::from_secs(5));
    let (home, entry) = home_and_entry(&all, "clip.ts");
    let others: Vec<&Node> = all.iter().copied().filter(|n| n.ip != home.ip).collect();

    // The home's multivariant playlist names its own media playlist, then
    // the same at the two other nodes (the title's next ones).
    let text = crate::common::curl_bytes(&home.http("clip.ts/index.m3u8"));
    let text = String::from_utf8(text).unwrap();
    let uris: Vec<&str> = (text.lines().zip(text.lines().skip(1)))
        .filter(|(l, _)| l.starts_with("#EXT-X-STREAM-INF:"))
        .map(|(_, u)| u)
        .collect();
    assert_eq!(uris.len(), 3, "{text}");
    assert_eq!(uris[0], "media.m3u8", "{text}");
    let mut backups: Vec<String> = (others.iter())
        .map(|n| n.http("clip.ts/media.m3u8"))
        .collect();
    let mut named: Vec<String> = uris[1..].iter().map(|u| u.to_string()).collect();
    backups.sort();
    named.sort();
    assert_eq!(named, backups, "{text}");

    // hls.js, one second of buffer, enters at another node; the home
    // node is killed once it has sent the first media segment. The
    // player goes on at a backup and plays to the end, with no fatal
    // error, before the others' probes (every second, out after two
    // misses) have left the dead node out.
    let url = entry.http("clip.ts/index.m3u8");
    let said = std::thread::scope(|s| {
        let playing = s.spawn(|| {
            chromium_plays(
                "hls",
                &url,
                &["--max-buffer-s", "1"],
                60,
                "cluster-failover.png",
            )
        });
        (home.server).wait_for_log("target=\"/clip.ts\" ", Duration::from_secs(40));
        home.server.signal("KILL");
        playing.join().unwrap()
    });
    let served_after = |log: String| {
        log.contains("target=\"/clip.ts/media.m3u8\" status=200")
            && log.contains("target=\"/clip.ts\" status=206")
    };
    assert!(
        others.iter().any(|n| served_after(n.server.log_text())),
        "no other node served the media playlist and segments after the kill: {said}"
    );
}

fn describe_over_tls(url: &str, ca: &Path) -> (u16, Option<String>) {
    let authority = url
        .strip_prefix("rtsps://")
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let (host, port) = authority.split_once(':').unwrap();
    let script = "import socket, ssl, sys\n\
        host, port, url, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]\n\
        ctx = ssl.create_default_context(cafile=ca)\n\
        s = ctx.wrap_socket(socket.create_connection((host, port), timeout=5), server_hostname=host)\n\
        s.sendall(f'DESCRIBE {url} RTSP/1.0\\r\\nCSeq: 1\\r\\n\\r\\n'.encode())\n\
        got = b''\n\
        while b'\\r\\n\\r\\n' not in got:\n    c = s.recv(4096)\n    if not c: break\n    got += c\n\
        print(got.decode())\n";
    let mut c = Command::new("python3");
    c.args(["-c", script, host, port, url]).arg(ca);
    let out = run_bounded(c, Duration::from_secs(10));
    assert!(out.status.success(), "DESCRIBE {url}: {}", out.stderr);
    status_and_location(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn over_tls_a_title_is_sent_to_its_home_nodes_tls_urls() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cert = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cert.args([
        "cert",
        "--name",
        "127.0.0.1",
        "--name",
        "127.0.0.2",
        "--out",
    ])
    .arg(dir.path());
    let out = run_bounded(cert, Duration::from_secs(30));
    assert!(out.status.success(), "fjord cert: {}", out.stderr);
    let tls = String::from_utf8(out.stdout).unwrap();
    let ca = dir.path().join("cert.pem");
    let lines = format!(
        "cluster_etcd = [\"{}\"]\ncluster_ttl_s = 2\nrtsps_port = 0\n{tls}",
        etcd.url
    );
    let nodes: Vec<Node> = (1..=2)
        .map(|n| Node::start(n, free_port(), 0, &lines))
        .collect();
    let all: Vec<&Node> = nodes.iter().collect();
    wait_members(&all, 2, Duration::from_secs(10));
    let (home, entry) = home_and_entry(&all, "clip.ts");
    // The home node's record carries its TLS URLs.
    let record = &entry.cluster()["others"][0];
    assert_eq!(record["rtsps"], home.rtsps("").trim_end_matches('/'));
    assert_eq!(record["https"], home.https("").trim_end_matches('/'));

    // HTTPS at the entry: 302 to the home's https:// URL, which curl
    // follows (the certificate checked) to the file, bit-exact.
    let playlist = "clip.ts/index.m3u8";
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "--max-time",
        "10",
        "--cacert",
    ])
    .arg(&ca)
    .arg(entry.https(playlist));
    let head = run_bounded(c, Duration::from_secs(15));
    let moved = status_and_location(&String::from_utf8_lossy(&head.stdout));
    let placed = entry.placed(&home.https(playlist));
    assert_eq!(moved, (302, Some(placed)), "{}", head.stderr);
    let got = dir.path().join("clip.ts");
    let mut c = Command::new("curl");
    c.args([
        "-sS",
        "-f",
        "-L",
        "--proto-redir",
        "=https",
        "--max-time",
        "15",
    ])
    .arg("--cacert")
    .arg(&ca)
    .arg("-o")
    .arg(&got)
    .arg(entry.https("clip.ts"));
    let out = run_bounded(c, Duration::from_secs(20));
    assert!(out.status.success(), "curl: {}", out.stderr);
    assert!(
        std::fs::read(&got).unwrap() == clip_bytes(),
        "HTTPS through a redirect"
    );

    // RTSPS at the entry: 302 to the home's rtsps:// URL; ffmpeg follows.
    let moved = describe_over_tls(&entry.rtsps("clip.ts"), &ca);
    assert_eq!(moved, (302, Some(entry.placed(&home.rtsps("clip.ts")))));
    assert_eq!(describe_over_tls(&home.rtsps("clip.ts"), &ca).0, 200);
    ffmpeg_receives_every_frame_at(&entry.rtsps("clip.ts"), "tcp", "rtsps through a redirect");
}

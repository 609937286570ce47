//! A running `fjord serve` per test ([`Server`]): on ephemeral ports with
//! a root of its own, killed on drop.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{free_port, get_json, ingest, media, run_bounded};

/// A `[[user]]` table: alice, password `wonderland`, who may read every
/// title.
pub const ALICE: &str = "[[user]]\nname = \"alice\"\npassword = \"wonderland\"\npaths = [\"**\"]\n";

/// The config lines `fjord cert` prints for a new key and certificate it
/// writes into `dir`.
pub fn certificate(dir: &Path) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["cert", "--out"]).arg(dir);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "fjord cert: {}", out.stderr);
    String::from_utf8(out.stdout).unwrap()
}

/// A `fjord serve` child on an ephemeral port with its own root; killed on
/// drop (its log is printed if the test failed).
pub struct Server {
    child: Child,
    pub port: u16,
    /// The admin listener's port (on a free port unless the config names one).
    admin_port: Option<u16>,
    /// RTSP over TLS, when the config has a certificate.
    rtsps_port: Option<u16>,
    pub root: tempfile::TempDir,
    media_root: PathBuf,
    log: PathBuf,
}

impl Server {
    /// Starts a server whose root holds `clip.ts` and `vbr.ts`, with the
    /// given extra config lines.
    pub fn start(config: &str) -> Server {
        Server::start_with(config, |root| {
            fs::copy(&media().clip, root.join("clip.ts")).unwrap();
            fs::copy(&media().vbr, root.join("vbr.ts")).unwrap();
        })
    }

    /// Starts a server whose root holds `clip.ts` and `vbr.ts` ingested
    /// ahead by `fjord ingest`: index, parity and prefabricated packets.
    pub fn start_ingested(config: &str) -> Server {
        Server::start_with(config, |root| {
            let files = [(&media().clip, "clip.ts"), (&media().vbr, "vbr.ts")];
            let out = ingest(root, &[], &files);
            assert!(
                root.join("clip.ts.fjpkt").exists(),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
        })
    }

    /// Starts a server as [`Server::start`] does, with HTTP on a free port
    /// (`http_port = PORT` ahead of `config`); and that port.
    pub fn start_http(config: &str) -> (Server, u16) {
        let port = free_port();
        (
            Server::start(&format!("http_port = {port}\n{config}")),
            port,
        )
    }

    /// Starts a server as [`Server::start_with`] does, with HTTP on a free
    /// port (`http_port = PORT` ahead of `config`); and that port.
    pub fn start_http_with(config: &str, populate: impl FnOnce(&Path)) -> (Server, u16) {
        let port = free_port();
        let config = format!("http_port = {port}\n{config}");
        (Server::start_with(&config, populate), port)
    }

    /// Starts a server after `populate` has filled its root.
    pub fn start_with(config: &str, populate: impl FnOnce(&Path)) -> Server {
        Server::start_env(config, &[], populate)
    }

    /// Starts a server serving `media_root`, which the caller made and
    /// keeps (config and log go to a directory of the server's own).
    pub fn start_on(media_root: &Path, config: &str) -> Server {
        let root = tempfile::Builder::new()
            .prefix("fjord-it-")
            .tempdir()
            .unwrap();
        Server::spawn(root, media_root.to_owned(), config)
    }

    /// Starts a server with these environment variables after `populate`
    /// has filled its root.
    pub fn start_env(config: &str, env: &[(&str, &Path)], populate: impl FnOnce(&Path)) -> Server {
        let root = tempfile::Builder::new()
            .prefix("fjord-it-")
            .tempdir()
            .unwrap();
        let media_root = root.path().join("media");
        fs::create_dir(&media_root).unwrap();
        populate(&media_root);
        Server::spawn_env(root, media_root, config, env)
    }

    fn spawn(root: tempfile::TempDir, media_root: PathBuf, config: &str) -> Server {
        Server::spawn_env(root, media_root, config, &[])
    }

    fn spawn_env(
        root: tempfile::TempDir,
        media_root: PathBuf,
        config: &str,
        env: &[(&str, &Path)],
    ) -> Server {
        let cfg = root.path().join("fjord.toml");
        fs::write(&cfg, config).unwrap();
        let log = root.path().join("server.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_fjord"))
            .arg("serve")
            .arg("--root")
            .arg(&media_root)
            // A config that names its address or port keeps them (a
            // cluster's nodes on 127.0.0.x, static peers on known ports).
            .args(if setting(config, "port") {
                &[][..]
            } else {
                &["--port", "0"][..]
            })
            .args(if setting(config, "bind") {
                &[][..]
            } else {
                &["--bind", "127.0.0.1"][..]
            })
            .arg("--config")
            .arg(&cfg)
            .args(if config.contains("admin_bind") {
                &[][..]
            } else {
                &["--admin-bind", "127.0.0.1:0"][..]
            })
            // No HTTP listener unless the test asks for one (on a port of
            // its choosing): tests run side by side.
            .args(if config.contains("http_port") {
                &[][..]
            } else {
                &["--http-port", "0"][..]
            })
            // A capacity saved by `fjord bench capacity` on this machine
            // must not limit the tests' servers.
            .env("XDG_STATE_HOME", root.path())
            .envs(env.iter().copied())
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or("info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn fjord serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let (admin_tx, admin_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                let port = |rest: &str| {
                    let port = rest.trim_end_matches('/').rsplit(':').next();
                    port.and_then(|p| p.parse::<u16>().ok())
                };
                // The status page's line comes first, when there is one.
                if let Some(rest) = line.strip_prefix("fjord: status page on http://") {
                    let _ = admin_tx.send((false, port(rest)));
                }
                if let Some(rest) = line.strip_prefix("fjord: listening on rtsps://") {
                    let _ = admin_tx.send((true, port(rest)));
                }
                if let Some(rest) = line.strip_prefix("fjord: listening on rtsp://") {
                    let _ = tx.send(port(rest));
                }
            }
        });
        let mut server = Server {
            child,
            port: 0,
            admin_port: None,
            rtsps_port: None,
            root,
            media_root,
            log,
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(port)) => server.port = port,
            Ok(None) => panic!("unparsable listening line; log:\n{}", server.log_text()),
            Err(_) => panic!(
                "fjord serve did not print its listening line within 20 s (status {:?}); log:\n{}",
                server.child.try_wait(),
                server.log_text()
            ),
        }
        // Printed before the RTSP line, so here by now.
        for (rtsps, port) in admin_rx.try_iter() {
            match rtsps {
                true => server.rtsps_port = port,
                false => server.admin_port = port,
            }
        }
        server
    }

    /// The config file the server reads (again on SIGHUP).
    pub fn config_path(&self) -> PathBuf {
        self.root.path().join("fjord.toml")
    }

    /// Sends the server a signal (`kill -SIG`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig}");
    }

    /// The server's exit status, if it exits within `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// `rtsps://127.0.0.1:PORT/TITLE`.
    pub fn rtsps_url(&self, title: &str) -> String {
        let port = self.rtsps_port.expect("the server has a certificate");
        format!("rtsps://127.0.0.1:{port}/{title}")
    }

    /// `http://127.0.0.1:PORT` of the admin listener.
    pub fn admin(&self) -> String {
        let port = self.admin_port.expect("the server has an admin listener");
        format!("http://127.0.0.1:{port}")
    }

    pub fn media_root(&self) -> PathBuf {
        self.media_root.clone()
    }

    pub fn url(&self, title: &str) -> String {
        format!("rtsp://127.0.0.1:{}/{title}", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics if the server process has exited.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("fjord serve died ({status}); log:\n{}", self.log_text());
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Descriptors the server holds open now.
    pub fn open_files(&self) -> usize {
        fs::read_dir(format!("/proc/{}/fd", self.pid())).map_or(0, |d| d.count())
    }

    /// Asserts the server is alive and serves a normal DESCRIBE.
    pub fn assert_healthy(&mut self) {
        self.assert_alive();
        self.assert_describes("clip.ts");
        self.assert_alive();
    }

    /// Asserts a DESCRIBE of `title` is answered with an MP2T SDP.
    pub fn assert_describes(&self, title: &str) {
        let mut c = fjord_client::RtspClient::connect(&self.url(title)).unwrap();
        let d = c.describe().expect("DESCRIBE");
        assert!(d.sdp.contains("MP2T/90000"), "{}", d.sdp);
    }

    /// The status of a SETUP (TCP interleaved) of a new session of
    /// `clip.ts`.
    pub fn setup_status(&self) -> u16 {
        let mut c = fjord_client::RtspClient::connect(&self.url("clip.ts")).unwrap();
        let track = c.describe().expect("DESCRIBE").track_urls[0].clone();
        let transport = [("Transport", "RTP/AVP/TCP;unicast;interleaved=0-1")];
        c.request("SETUP", &track, &transport, &[]).unwrap().status
    }

    /// Waits up to `limit` for the server's log to say `needle`.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.log_text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log within {limit:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `field` of every engine thread (the admin API), summed.
    pub fn thread_total(&self, field: &str) -> u64 {
        let threads = get_json(&format!("{}/api/v1/threads", self.admin()));
        (threads.as_array().unwrap().iter())
            .map(|t| t[field].as_u64().unwrap())
            .sum()
    }
}

/// Whether `config` sets `key` at its top level.
fn setting(config: &str, key: &str) -> bool {
    (config.lines()).any(|l| l.split('=').next().map(str::trim) == Some(key))
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- fjord serve log (last 60 lines) ----");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

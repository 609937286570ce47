//! Shared pieces of the integration tests: test media (made by ffmpeg once
//! per target dir), a running `fjord serve` per test, bounded child
//! processes, and checks on received bytes against the source file.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use fjord_client::Received;

pub const TS: usize = 188;

// ---------------------------------------------------------------- media

/// The test clips, generated on first use.
pub struct Media {
    /// H.264 + AAC, 10 s, GOP 1 s, ~1.6 Mbit/s.
    pub clip: PathBuf,
    /// H.264 (CRF) + AAC, 10 s, 30 kB/s static then ~550 kB/s noise (4-7 s).
    pub vbr: PathBuf,
}

/// Bumped whenever a recipe changes, so stale cached media is not reused.
const MEDIA_VERSION: &str = "v1";

pub fn media() -> &'static Media {
    static MEDIA: OnceLock<Media> = OnceLock::new();
    MEDIA.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-media");
        fs::create_dir_all(&dir).expect("create test-media dir");
        let clip = generate(
            &dir,
            &format!("clip-{MEDIA_VERSION}.ts"),
            &[
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=640x360:rate=25",
                "-f",
                "lavfi",
                "-i",
                "sine=frequency=440:sample_rate=48000",
                "-t",
                "10",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-g",
                "25",
                "-b:v",
                "1.5M",
                "-c:a",
                "aac",
                "-b:a",
                "128k",
                "-f",
                "mpegts",
            ],
        );
        let vbr = generate(
            &dir,
            &format!("vbr-{MEDIA_VERSION}.ts"),
            &[
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=320x180:rate=25",
                "-f",
                "lavfi",
                "-i",
                "sine=frequency=660:sample_rate=48000",
                "-t",
                "10",
                "-vf",
                "noise=alls=80:allf=t+u:enable='between(t,4,7)'",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-g",
                "25",
                "-crf",
                "23",
                "-c:a",
                "aac",
                "-b:a",
                "96k",
                "-f",
                "mpegts",
            ],
        );
        Media { clip, vbr }
    })
}

pub fn clip_bytes() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| fs::read(&media().clip).unwrap())
}

pub fn vbr_bytes() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| fs::read(&media().vbr).unwrap())
}

/// Test media `name` made by ffmpeg with `args` (once per target dir).
pub fn generate_media(name: &str, args: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-media");
    fs::create_dir_all(&dir).expect("create test-media dir");
    generate(&dir, &format!("{MEDIA_VERSION}-{name}"), args)
}

/// Makes `dir/name` with ffmpeg unless it exists. A lock file keeps
/// parallel test processes from generating it twice; the output is written
/// to a temporary name and renamed, so a reader never sees half a file.
fn generate(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let lock = dir.join(format!("{name}.lock"));
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if out.exists() {
            return out;
        }
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => break,
            Err(_) => {
                // Another process is generating; a lock older than 2 min is stale.
                let stale = fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .map(|t| SystemTime::now().duration_since(t).unwrap_or_default())
                    .is_ok_and(|age| age > Duration::from_secs(120));
                if stale {
                    let _ = fs::remove_file(&lock);
                }
                assert!(Instant::now() < deadline, "timed out waiting for {lock:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let tmp = dir.join(format!("{name}.tmp{}", std::process::id()));
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-loglevel", "error", "-y"])
        .args(args)
        .arg(&tmp);
    let result = run_bounded(cmd, Duration::from_secs(120));
    if result.status.success() {
        fs::rename(&tmp, &out).expect("rename generated media");
    }
    let _ = fs::remove_file(&lock);
    assert!(
        result.status.success(),
        "ffmpeg failed making {name} (is ffmpeg installed? `make test` installs it): {}",
        result.stderr
    );
    out
}

// ---------------------------------------------------------------- processes

pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub timed_out: bool,
}

/// Runs `cmd` to completion, killing it after `limit`.
pub fn run_bounded(cmd: Command, limit: Duration) -> Output {
    run_bounded_with(cmd, limit, None)
}

/// Like [`run_bounded`], but at `interrupt_after` sends SIGINT first (for
/// programs that flush on it), then kills at `limit`.
pub fn run_bounded_with(
    mut cmd: Command,
    limit: Duration,
    interrupt_after: Option<Duration>,
) -> Output {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    });
    let mut timed_out = false;
    let mut interrupted = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        let elapsed = start.elapsed();
        if let Some(t) = interrupt_after
            && !interrupted
            && elapsed >= t
        {
            interrupted = true;
            timed_out = true;
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        if elapsed >= limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
        timed_out,
    }
}

// ---------------------------------------------------------------- server

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
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
            cmd.arg("ingest");
            for (src, name) in [(&media().clip, "clip.ts"), (&media().vbr, "vbr.ts")] {
                fs::copy(src, root.join(name)).unwrap();
                cmd.arg(root.join(name));
            }
            let out = run_bounded(cmd, Duration::from_secs(60));
            assert!(out.status.success(), "ingest: {}", out.stderr);
            assert!(
                root.join("clip.ts.fjpkt").exists(),
                "{}",
                String::from_utf8_lossy(&out.stdout)
            );
        })
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
            .args(["--port", "0", "--bind", "127.0.0.1", "--config"])
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
        let mut c = fjord_client::RtspClient::connect(&self.url("clip.ts")).unwrap();
        let d = c.describe().expect("DESCRIBE after the bad input");
        assert!(d.sdp.contains("MP2T/90000"), "{}", d.sdp);
        self.assert_alive();
    }
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

// ---------------------------------------------------------------- raw RTSP

/// A TCP port on loopback free now (for a listener the server opens).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Sends `bytes` on a fresh connection and reads what comes back until the
/// connection closes or `limit` passes. Returns the text and whether the
/// server closed the connection.
pub fn raw_exchange(addr: &str, bytes: &[u8], limit: Duration) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(bytes);
    read_until_close(&mut s, limit)
}

/// Reads until EOF or `limit`; (text, closed).
pub fn read_until_close(s: &mut TcpStream, limit: Duration) -> (String, bool) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return (String::from_utf8_lossy(&got).into_owned(), false);
        }
        s.set_read_timeout(Some(deadline - now)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&got).into_owned(), true);
            }
            Err(_) => {}
        }
    }
}

/// The status code of the first response in `text`.
pub fn status_of(text: &str) -> Option<u16> {
    let line = text.lines().next()?;
    let mut parts = line.split_whitespace();
    if parts.next()? != "RTSP/1.0" {
        return None;
    }
    parts.next()?.parse().ok()
}

// ---------------------------------------------------------------- checks

/// The 188-aligned offset at which `needle` occurs in `source`.
pub fn find_aligned(source: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    (0..source.len())
        .step_by(TS)
        .find(|&o| source[o..].starts_with(needle))
}

/// Asserts that the packets' sequence numbers are contiguous and their
/// payloads are whole TS packets forming a contiguous region of `source`;
/// returns (start offset, end offset) of that region.
pub fn assert_contiguous(source: &[u8], packets: &[Received], what: &str) -> (usize, usize) {
    assert!(!packets.is_empty(), "{what}: no packets");
    for w in packets.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq.wrapping_add(1),
            "{what}: sequence gap or repeat after {} ({} packets)",
            w[0].seq,
            packets.len()
        );
    }
    for (i, p) in packets.iter().enumerate() {
        assert_eq!(p.pt, 33, "{what}: payload type");
        assert!(
            p.payload.len() % TS == 0 && !p.payload.is_empty() && p.payload.len() <= 7 * TS,
            "{what}: packet {i} payload is {} bytes",
            p.payload.len()
        );
    }
    let ssrc = packets[0].ssrc;
    assert!(
        packets.iter().all(|p| p.ssrc == ssrc),
        "{what}: SSRC changed"
    );
    let start = find_aligned(source, &packets[0].payload)
        .unwrap_or_else(|| panic!("{what}: first payload is not source bytes at a TS boundary"));
    let mut off = start;
    for (i, p) in packets.iter().enumerate() {
        assert!(
            source[off..].starts_with(&p.payload),
            "{what}: packet {i} (seq {}) is not the source bytes at offset {off}",
            p.seq
        );
        off += p.payload.len();
    }
    (start, off)
}

/// Elementary PIDs and stream types from the first PAT/PMT in `ts`.
pub fn pmt_streams(ts: &[u8]) -> Vec<(u16, u8)> {
    let pid = |p: &[u8]| (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
    let section = |p: &[u8]| -> Option<Vec<u8>> {
        if p[1] & 0x40 == 0 {
            return None;
        }
        let mut i = 4;
        if p[3] & 0x20 != 0 {
            i += 1 + usize::from(p[4]);
        }
        let pointer = usize::from(*p.get(i)?);
        p.get(i + 1 + pointer..).map(<[u8]>::to_vec)
    };
    let mut pmt_pid = None;
    for p in ts.chunks_exact(TS) {
        if pid(p) == 0
            && pmt_pid.is_none()
            && let Some(s) = section(p)
        {
            // table_id, len(2), tsid(2), ver, sec, last, then program loop
            pmt_pid = Some((u16::from(s[10] & 0x1f) << 8) | u16::from(s[11]));
        } else if Some(pid(p)) == pmt_pid
            && let Some(s) = section(p)
        {
            let len = ((usize::from(s[1]) & 0x0f) << 8) | usize::from(s[2]);
            let info_len = ((usize::from(s[10]) & 0x0f) << 8) | usize::from(s[11]);
            let end = 3 + len - 4;
            let mut i = 12 + info_len;
            let mut out = Vec::new();
            while i + 5 <= end {
                let st = s[i];
                let epid = (u16::from(s[i + 1] & 0x1f) << 8) | u16::from(s[i + 2]);
                let es_len = ((usize::from(s[i + 3]) & 0x0f) << 8) | usize::from(s[i + 4]);
                out.push((epid, st));
                i += 5 + es_len;
            }
            return out;
        }
    }
    Vec::new()
}

/// Whether a decoder starting at `offset` of `ts` can start with the first
/// video PES: the first video packet with a payload-unit start from there on
/// has the random-access indicator set or carries an H.264 IDR/SPS.
pub fn starts_at_random_access(ts: &[u8], offset: usize) -> bool {
    let video: Vec<u16> = pmt_streams(ts)
        .into_iter()
        .filter(|(_, st)| matches!(st, 0x1b | 0x24 | 0x02 | 0x01))
        .map(|(p, _)| p)
        .collect();
    assert!(!video.is_empty(), "no video stream in the PMT");
    for p in ts[offset..].chunks_exact(TS) {
        let pid = (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
        if !video.contains(&pid) || p[1] & 0x40 == 0 {
            continue;
        }
        let mut payload = 4;
        if p[3] & 0x20 != 0 {
            let af_len = usize::from(p[4]);
            if af_len > 0 && p[5] & 0x40 != 0 {
                return true;
            }
            payload += 1 + af_len;
        }
        let pes = &p[payload.min(TS)..];
        return pes
            .windows(4)
            .any(|w| w[0] == 0 && w[1] == 0 && w[2] == 1 && matches!(w[3] & 0x1f, 5 | 7));
    }
    false
}

/// Runs `f` on a thread of its own inside a new network namespace whose
/// only link, the loopback, carries multicast (239.0.0.0/8 is routed to
/// it): servers and clients `f` starts live there too, and nothing they
/// multicast can leave it. Needs root, as `make test` runs.
pub fn in_private_network<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        let joined = s
            .spawn(|| {
                // SAFETY: unshare(2) changes only this thread's namespace.
                let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "unshare -n: {}", std::io::Error::last_os_error());
                for args in [
                    &["link", "set", "lo", "up"][..],
                    &["link", "set", "lo", "multicast", "on"],
                    &["route", "add", "239.0.0.0/8", "dev", "lo"],
                ] {
                    let out = Command::new("ip").args(args).output().unwrap();
                    assert!(out.status.success(), "ip {args:?}: {out:?}");
                }
                f()
            })
            .join();
        joined.unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

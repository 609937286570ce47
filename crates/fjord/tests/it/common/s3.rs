//! A real S3 server for the edge tests ([`S3Server`]): versitygw (`make
//! deps` installs it with `go install`) on a free loopback port, its
//! buckets directories of a temporary root, killed on drop.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// The root account's credentials.
pub const S3_KEY_ID: &str = "fjordtest";
pub const S3_SECRET: &str = "fjord-test-secret";

pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub dir: tempfile::TempDir,
    access_log: PathBuf,
}

impl S3Server {
    /// Starts versitygw with one bucket, `bucket`, and waits (at most
    /// 20 s) until it accepts connections.
    pub fn start(bucket: &str) -> S3Server {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join(bucket)).unwrap();
        let port = free_port();
        let access_log = dir.path().join("access.log");
        let out = fs::File::create(dir.path().join("versitygw.log")).unwrap();
        let child = Command::new(versitygw())
            .arg("--port")
            .arg(format!("127.0.0.1:{port}"))
            .args(["--access", S3_KEY_ID, "--secret", S3_SECRET, "--quiet"])
            .arg("--access-log")
            .arg(&access_log)
            .arg("posix")
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start versitygw");
        let mut s3 = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            dir,
            access_log,
        };
        s3.wait_ready(port);
        s3
    }

    fn wait_ready(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = || fs::read_to_string(self.dir.path().join("versitygw.log")).unwrap();
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("versitygw exited ({status}): {}", log());
            }
            assert!(
                Instant::now() < deadline,
                "versitygw not listening after 20 s: {}",
                log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How an origin client reaches it.
    pub fn origin_config(&self) -> fjord_edge::OriginConfig {
        fjord_edge::OriginConfig {
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".into()),
            access_key_id: Some(S3_KEY_ID.into()),
            secret_access_key: Some(S3_SECRET.into()),
        }
    }

    /// The requests of S3 operation `op` (`GetObject`, `HeadObject`,
    /// `PutObject`, `UploadPart`…) the server has logged, as its access
    /// log lines: the origin's own count, not the client's.
    pub fn requests(&self, op: &str) -> Vec<String> {
        let Ok(f) = fs::File::open(&self.access_log) else {
            return Vec::new();
        };
        let needle = format!(" s3_{op} ");
        (BufReader::new(f).lines())
            .map_while(Result::ok)
            .filter(|l| l.contains(&needle))
            .collect()
    }
}

impl S3Server {
    /// Stops the server (as if the origin went down); its log stays.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The versitygw binary: `$VERSITYGW`, else on the PATH, else where `go
/// install` puts it.
fn versitygw() -> PathBuf {
    if let Some(p) = std::env::var_os("VERSITYGW") {
        return p.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let gopath = std::env::var_os("GOPATH")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go")));
    let candidates = std::env::split_paths(&path).chain(gopath.map(|g| g.join("bin")));
    for dir in candidates {
        let p = dir.join("versitygw");
        if p.is_file() {
            return p;
        }
    }
    panic!("versitygw not found (on the PATH or in ~/go/bin): `make deps` installs it");
}

//! The run's processes: etcd, the object store (SeaweedFS: a master, three
//! volume servers, a filer and its S3 gateway, replication `002`: every
//! object on three volume servers), and the fjord nodes, each `fjord
//! serve` in its namespace. Each is killed when its handle drops, and
//! every pid is kept for the Ctrl-C handler ([`kill_all`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::net;

/// Every child alive, for [`kill_all`].
static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills every child still alive (the Ctrl-C handler).
pub fn kill_all() {
    for pid in PIDS.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        // SAFETY: kill(2) on a pid of ours; a gone one is ESRCH.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// A child killed when dropped.
pub struct Proc {
    child: Child,
    name: String,
}

impl Proc {
    /// Starts `cmd`, its output to the file `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> anyhow::Result<Proc> {
        let log = std::fs::File::create(log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        PIDS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child.id());
        Ok(Proc {
            child,
            name: name.to_owned(),
        })
    }

    /// SIGKILL, as a machine that dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let pid = self.child.id();
        PIDS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| *p != pid);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `addr` takes connections (or `what` fails to start).
fn wait_listening(addr: SocketAddr, what: &str, p: &mut Proc) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = p.child.try_wait() {
            bail!("{what} exited ({status}); see its log");
        }
        if Instant::now() > deadline {
            bail!("{what} not listening on {addr} after 30 s ({})", p.name);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// etcd on the bridge's address.
pub fn etcd(dir: &Path, port: u16) -> anyhow::Result<(Proc, String)> {
    let url = format!("http://{}:{port}", net::HOST_IP);
    let peer = format!("http://127.0.0.1:{}", port + 1);
    let mut cmd = Command::new("etcd");
    cmd.arg("--data-dir")
        .arg(dir.join("etcd"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("default={peer}")]);
    let mut p = Proc::spawn("etcd", cmd, &dir.join("etcd.log"))?;
    wait_listening(
        format!("{}:{port}", net::HOST_IP).parse()?,
        "etcd (Debian's etcd-server)",
        &mut p,
    )?;
    Ok((p, url))
}

/// Ports of the object store: the master, the three volume servers, the
/// filer, the S3 gateway (each gRPC port is 10000 above).
const MASTER: u16 = 19333;
const VOLUME: u16 = 18181;
const FILER: u16 = 18888;
pub const S3: u16 = 18333;

/// The distributed object store.
pub struct Store {
    weed: PathBuf,
    dir: PathBuf,
    pub volumes: Vec<Proc>,
    _master: Proc,
    _filer: Proc,
    /// The S3 endpoint, on the bridge's address.
    pub endpoint: String,
}

impl Store {
    pub fn start(weed: &Path, dir: &Path) -> anyhow::Result<Store> {
        let local = |port: u16| -> SocketAddr { SocketAddr::from(([127, 0, 0, 1], port)) };
        let mdir = dir.join("master");
        std::fs::create_dir_all(&mdir)?;
        let mut cmd = Command::new(weed);
        cmd.args([
            "master",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            &format!("-port={MASTER}"),
        ])
        .arg(format!("-mdir={}", mdir.display()))
        .args(["-defaultReplication=002", "-volumeSizeLimitMB=256"]);
        let mut master = Proc::spawn("weed master", cmd, &dir.join("master.log"))?;
        wait_listening(local(MASTER), "weed master", &mut master)?;
        let volumes = (0..3)
            .map(|i| volume(weed, dir, i))
            .collect::<anyhow::Result<_>>()?;
        let fdir = dir.join("filer");
        std::fs::create_dir_all(&fdir)?;
        let mut cmd = Command::new(weed);
        cmd.current_dir(&fdir)
            .args([
                "filer",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                &format!("-port={FILER}"),
            ])
            .arg(format!("-master=127.0.0.1:{MASTER}"))
            .args([
                "-defaultReplicaPlacement=002",
                "-s3",
                &format!("-s3.port={S3}"),
            ])
            .arg(format!("-s3.ip.bind={}", net::HOST_IP));
        let mut filer = Proc::spawn("weed filer", cmd, &dir.join("filer.log"))?;
        wait_listening(local(FILER), "weed filer", &mut filer)?;
        wait_listening(
            format!("{}:{S3}", net::HOST_IP).parse()?,
            "weed s3",
            &mut filer,
        )?;
        let store = Store {
            weed: weed.to_owned(),
            dir: dir.to_owned(),
            volumes,
            _master: master,
            _filer: filer,
            endpoint: format!("http://{}:{S3}", net::HOST_IP),
        };
        make_bucket("bench")?;
        Ok(store)
    }

    /// Volume server `i` started again (same directory) after a kill.
    pub fn restart_volume(&mut self, i: usize) -> anyhow::Result<()> {
        self.volumes[i] = volume(&self.weed, &self.dir, i)?;
        Ok(())
    }
}

/// Volume server `i`, its data under `dir/volumeI`.
fn volume(weed: &Path, dir: &Path, i: usize) -> anyhow::Result<Proc> {
    let vdir = dir.join(format!("volume{i}"));
    std::fs::create_dir_all(&vdir)?;
    let port = VOLUME + i as u16;
    let mut cmd = Command::new(weed);
    cmd.args([
        "volume",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        &format!("-port={port}"),
    ])
    .arg(format!("-dir={}", vdir.display()))
    .arg(format!("-mserver=127.0.0.1:{MASTER}"))
    .args(["-max=30", "-dataCenter=dc1", "-rack=r1"]);
    let mut p = Proc::spawn("weed volume", cmd, &dir.join(format!("volume{i}.log")))?;
    wait_listening(
        SocketAddr::from(([127, 0, 0, 1], port)),
        "weed volume",
        &mut p,
    )?;
    Ok(p)
}

/// A bucket, by an anonymous `PUT` (the gateway runs without identities:
/// every request is allowed).
fn make_bucket(name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let put = format!(
        "PUT /{name} HTTP/1.1\r\nHost: s3\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    loop {
        match http(&format!("{}:{S3}", net::HOST_IP), &put) {
            Ok(r) if r.starts_with("HTTP/1.1 200") || r.contains("BucketAlreadyExists") => {
                return Ok(());
            }
            other if Instant::now() > deadline => bail!("creating bucket {name}: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// One HTTP/1.1 exchange, the whole reply as text.
pub fn http(addr: &str, request: &str) -> anyhow::Result<String> {
    let addr: SocketAddr = addr.parse()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request.as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}

/// `$WEED`, else on the PATH, else where the bench's install puts it.
pub fn weed() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("WEED") {
        return Ok(p.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    (std::env::split_paths(&path).chain([weed_cache()]))
        .map(|d| d.join("weed"))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "SeaweedFS's weed not found (PATH, {}): see docs/cluster.md for its install",
                weed_cache().display()
            )
        })
}

/// `$XDG_CACHE_HOME/fjord/seaweedfs/bin` (or `~/.cache/…`).
pub fn weed_cache() -> PathBuf {
    crate::storage::library::default_cache()
        .parent()
        .map_or_else(|| PathBuf::from("bench"), Path::to_path_buf)
        .join("seaweedfs/bin")
}

//! `fjord bench http`: the same bytes from fjord's HTTP listener and from
//! nginx (`sendfile on`, started here in a scratch directory), in one run,
//! by N keep-alive clients of this process over loopback, in three cases:
//! (a) whole-file downloads, (b) the byte ranges of fjord's HLS playlist
//! of a TS, (c) HLS in fMP4 segments of an MP4, made per request by fjord
//! and packaged beforehand by ffmpeg as static files for nginx. The
//! figure is each server's CPU (user + system of all its processes, from
//! `/proc`) per GB delivered; rounds alternate between the servers so the
//! machine's drift falls on both.
//!
//! Beside them, the simplest server of the same work: one of the bench's
//! own that answers each request with a fixed head and a blocking
//! `sendfile` of the whole file, a thread per connection, no event loop;
//! its CPU is its threads' own (`CLOCK_THREAD_CPUTIME_ID`). Over loopback
//! it is no lower bound: a sender also runs its receiver's TCP processing,
//! whose cost depends on how the sends batch.
//!
//! The clients are threads of the bench (their CPU is not the servers'):
//! each repeats `GET` of the whole file on one connection and discards the
//! body. With `--tls` they speak HTTPS offering one cipher suite
//! ([`crate::https`]) to fjord and to nginx (one certificate for both),
//! and the blocking server, which has no TLS, sits out. Both servers read the file from the page cache (it was just
//! written): this compares the serving path, not the disk.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    cpu::ThreadCpu,
    https::{self, Certificate, Cipher},
    procfs::process_cpu,
};

pub struct HttpConfig {
    pub fjord_exe: PathBuf,
    pub mb: u64,
    pub clients: usize,
    pub seconds: u64,
    pub rounds: usize,
    /// HTTPS with this suite (`None`: plain HTTP).
    pub tls: Option<Cipher>,
}

/// One server's measured round.
pub struct Round {
    /// `whole` (whole-file GETs) or `hls-ranges` (the byte ranges of an
    /// HLS playlist of a TS title).
    pub case: &'static str,
    pub server: &'static str,
    pub bytes: u64,
    /// Responses received whole.
    pub requests: u64,
    pub cpu: Duration,
    pub wall: Duration,
}

impl Round {
    pub fn cpu_s_per_gb(&self) -> f64 {
        self.cpu.as_secs_f64() / (self.bytes as f64 / 1e9).max(1e-9)
    }
    pub fn gbit_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / 1e9 / self.wall.as_secs_f64()
    }
    pub fn requests_s(&self) -> f64 {
        self.requests as f64 / self.wall.as_secs_f64()
    }
}

/// A server child killed on drop, with the processes whose CPU it uses;
/// or the blocking-sendfile server, in this process.
struct Served {
    child: Option<Child>,
    blocking: Option<Arc<Blocking>>,
    port: u16,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Served {
    /// CPU of the server: its process and its children (nginx's workers),
    /// or the blocking server's connection threads once they have ended.
    fn cpu(&self) -> Duration {
        if let Some(f) = &self.blocking {
            let until = Instant::now() + Duration::from_secs(5);
            while f.open.load(Ordering::SeqCst) > 0 && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            return Duration::from_nanos(f.cpu_ns.load(Ordering::SeqCst));
        }
        let pid = self.child.as_ref().map_or(0, Child::id);
        let mut total = process_cpu(pid).unwrap_or_default();
        for child in children_of(pid) {
            total += process_cpu(child).unwrap_or_default();
        }
        total
    }
}

/// The blocking server's shared counters.
#[derive(Default)]
struct Blocking {
    cpu_ns: AtomicU64,
    open: AtomicUsize,
}

fn start_blocking(file: &Path) -> anyhow::Result<Served> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let blocking = Arc::new(Blocking::default());
    let (f, path) = (blocking.clone(), file.to_owned());
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (f, path) = (f.clone(), path.clone());
            f.open.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let t0 = ThreadCpu::now();
                let _ = blocking_connection(conn, &path);
                let spent = ThreadCpu::now().since(t0).total();
                f.cpu_ns
                    .fetch_add(spent.as_nanos() as u64, Ordering::SeqCst);
                f.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Ok(Served {
        child: None,
        blocking: Some(blocking),
        port,
    })
}

/// Answers every request on `conn` with the whole file by one blocking
/// `sendfile` (repeated on short sends) until the client closes.
fn blocking_connection(mut conn: TcpStream, path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let mut buf = [0u8; 4096];
    loop {
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            head.extend_from_slice(&buf[..n]);
        }
        write!(conn, "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n")?;
        let mut off: libc::off_t = 0;
        while (off as u64) < size {
            // SAFETY: sendfile between descriptors we hold; it advances off.
            let n = unsafe {
                libc::sendfile(
                    conn.as_raw_fd(),
                    file.as_raw_fd(),
                    &mut off,
                    (size - off as u64) as usize,
                )
            };
            if n <= 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
}

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let (_, rest) = s.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// `clip` repeated into `out` up to `size` bytes, whole TS packets.
fn looped(clip: &Path, out: &Path, size: u64) -> anyhow::Result<()> {
    let clip = std::fs::read(clip)?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(out)?);
    let mut left = size - size % 188;
    while left > 0 {
        let n = left.min(clip.len() as u64) as usize;
        f.write_all(&clip[..n - n % 188])?;
        left -= (n - n % 188) as u64;
    }
    f.into_inner()?.sync_all()?;
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_fjord(
    cfg: &HttpConfig,
    root: &Path,
    cert: Option<&Certificate>,
) -> anyhow::Result<Served> {
    let port = free_port()?;
    // No packet files made in the background during the rounds: downloads
    // never read them.
    let config = root.with_file_name("fjord.toml");
    let mut text = "prefab = false\n".to_owned();
    if let Some(c) = cert {
        text += &format!(
            "tls_cert = {:?}\ntls_key = {:?}\nrtsps_port = {}\n",
            c.cert,
            c.key,
            free_port()?
        );
    }
    std::fs::write(&config, text)?;
    let mut child = Command::new(&cfg.fjord_exe)
        .args([
            "serve",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--admin-bind",
            "",
        ])
        .arg("--http-port")
        .arg(port.to_string())
        .arg("--root")
        .arg(root)
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting fjord serve")?;
    let out = child.stdout.take().context("fjord's stdout")?;
    let mut lines = BufReader::new(out).lines();
    let served = Served {
        child: Some(child),
        blocking: None,
        port,
    };
    while let Some(Ok(line)) = lines.next() {
        if line.starts_with("fjord: downloads on http://") {
            return Ok(served);
        }
    }
    bail!("fjord serve exited before listening")
}

const NGINX_CONF: &str = "user root;\ndaemon off;\nmaster_process on;\nworker_processes 2;\n\
pid DIR/nginx.pid;\nerror_log DIR/error.log;\nevents { worker_connections 4096; }\n\
http {\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 1000000;\n\
  server { listen 127.0.0.1:PORT; root DIR/root; }\n}\n";

/// nginx's `server` for HTTPS: TLS 1.2 and 1.3 with OpenSSL's suites (the
/// client picks one), a session cache, the bench's certificate.
const NGINX_TLS_SERVER: &str = "server { listen 127.0.0.1:PORT ssl; root DIR/root; \
ssl_certificate CERT; ssl_certificate_key KEY; ssl_protocols TLSv1.2 TLSv1.3; \
ssl_session_cache shared:SSL:10m; }";

fn start_nginx(dir: &Path, cert: Option<&Certificate>) -> anyhow::Result<Served> {
    let exe = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("nginx is not installed (apt-get install nginx-light, or make peers)")?;
    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    let mut text = NGINX_CONF.to_owned();
    if let Some(c) = cert {
        let server = NGINX_TLS_SERVER
            .replace("CERT", &c.cert.display().to_string())
            .replace("KEY", &c.key.display().to_string());
        text = text.replace("server { listen 127.0.0.1:PORT; root DIR/root; }", &server);
    }
    let text = text
        .replace("DIR", &dir.display().to_string())
        .replace("PORT", &port.to_string());
    std::fs::write(&conf, text)?;
    let child = Command::new(exe)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting nginx")?;
    let served = Served {
        child: Some(child),
        blocking: None,
        port,
    };
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > until {
            bail!(
                "nginx did not listen within 10 s (see {}/error.log)",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(served)
}

/// One GET a client repeats: a path, whole or a byte range (length,
/// offset).
#[derive(Clone, Debug)]
struct Get {
    path: String,
    range: Option<(u64, u64)>,
}

/// The GETs of the byte ranges (length, offset) of `name`.
fn gets_of_ranges(name: &str, ranges: &[(u64, u64)]) -> Vec<Get> {
    ranges
        .iter()
        .map(|&r| Get {
            path: name.to_owned(),
            range: Some(r),
        })
        .collect()
}

/// One client on one keep-alive connection until `stop`: the `gets` in
/// turn (from the `first`), bodies discarded.
fn client(
    (port, tls): (u16, Option<&Arc<rustls::ClientConfig>>),
    gets: &[Get],
    first: usize,
    stop: &AtomicBool,
    (bytes, requests): (&AtomicU64, &AtomicU64),
) -> anyhow::Result<()> {
    let mut c = https::connect(port, tls)?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        // One write per request, as players send them (`write!` would
        // write each formatted piece, and Nagle hold all but the first
        // until the server's delayed ACK).
        let get = &gets[i % gets.len()];
        let request = match get.range {
            Some((len, at)) => format!(
                "GET /{} HTTP/1.1\r\nHost: bench\r\nRange: bytes={at}-{}\r\n\r\n",
                get.path,
                at + len - 1
            ),
            None => format!("GET /{} HTTP/1.1\r\nHost: bench\r\n\r\n", get.path),
        };
        c.write_all(request.as_bytes())?;
        i += 1;
        let (mut left, mut got) = (None::<u64>, Vec::new());
        while left.is_none() {
            let n = c.read(&mut buf)?;
            if n == 0 {
                bail!("the server closed the connection");
            }
            got.extend_from_slice(&buf[..n]);
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                if !(head.starts_with("http/1.1 200") || head.starts_with("http/1.1 206")) {
                    bail!("{}", head.lines().next().unwrap_or(""));
                }
                let len: u64 = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .context("no Content-Length")?;
                let body = (got.len() - end - 4) as u64;
                bytes.fetch_add(body, Ordering::Relaxed);
                left = Some(len - body);
            }
        }
        let mut left = left.unwrap_or(0);
        while left > 0 {
            let n = c.read(&mut buf[..left.min(256 * 1024) as usize])?;
            if n == 0 {
                bail!("the server closed the connection mid-body");
            }
            bytes.fetch_add(n as u64, Ordering::Relaxed);
            left -= n as u64;
        }
        requests.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// A small text resource over HTTP (the playlist).
fn fetch_text(port: u16, path: &str) -> anyhow::Result<String> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        c,
        "GET /{path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )?;
    let mut all = String::new();
    c.read_to_string(&mut all)?;
    let (head, body) = all.split_once("\r\n\r\n").context("no HTTP head")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{path}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_owned())
}

/// The byte ranges (length, offset) of a media playlist.
fn byte_ranges(playlist: &str) -> Vec<(u64, u64)> {
    playlist
        .lines()
        .filter_map(|l| l.strip_prefix("#EXT-X-BYTERANGE:"))
        .filter_map(|r| {
            let (len, at) = r.split_once('@')?;
            Some((len.parse().ok()?, at.parse().ok()?))
        })
        .collect()
}

/// Runs the load against `server` for the configured time.
fn round(
    (cfg, tls): (&HttpConfig, Option<&Arc<rustls::ClientConfig>>),
    server: &Served,
    name: &'static str,
    (case, gets): (&'static str, &[Get]),
) -> anyhow::Result<Round> {
    let (stop, bytes, requests) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    let cpu0 = server.cpu();
    let t0 = Instant::now();
    let results: Vec<anyhow::Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.clients)
            .map(|k| {
                let first = k * gets.len() / cfg.clients.max(1);
                let (stop, counts) = (&stop, (&bytes, &requests));
                s.spawn(move || client((server.port, tls), gets, first, stop, counts))
            })
            .collect();
        std::thread::sleep(Duration::from_secs(cfg.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("client panicked")))
            .collect()
    });
    let (wall, cpu) = (t0.elapsed(), server.cpu().saturating_sub(cpu0));
    for r in results {
        r.with_context(|| format!("a client of {name}"))?;
    }
    Ok(Round {
        case,
        server: name,
        bytes: bytes.load(Ordering::Relaxed),
        requests: requests.load(Ordering::Relaxed),
        cpu,
        wall,
    })
}

/// What a run measured.
pub struct HttpReport {
    pub rounds: Vec<Round>,
    /// Of fjord's fMP4 segments (init included): bytes made in user space
    /// (the heads) and bytes in all.
    pub fmp4_made: (u64, u64),
}

/// Writes the file, then alternates rounds of fjord and nginx.
pub fn run(cfg: &HttpConfig) -> anyhow::Result<HttpReport> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    // (b)'s title, ingested before the servers start: the server's own
    // ingest would make its parity and packets during the rounds.
    let hls_title = root.join("hls.ts");
    crate::clip::encode(&hls_title, 120, 4000, 4_500_000)?;
    crate::storage::library::ingest(&cfg.fjord_exe, &hls_title)?;
    // (a)'s title: that clip looped to `mb` MiB (fjord serves titles only),
    // indexed ahead without parity or packets, which downloads never use.
    let whole_title = root.join("bench.ts");
    looped(&hls_title, &whole_title, cfg.mb << 20)?;
    let out = std::process::Command::new(&cfg.fjord_exe)
        .args(["ingest", "--fec", "off", "--prefab", "off"])
        .arg(&whole_title)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "fjord ingest: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (c)'s title: the same as MP4, and as ffmpeg packages it for HLS in
    // fMP4 segments (static files for nginx).
    let mp4_title = root.join("hls.mp4");
    let packaged = root.join("packaged");
    package_fmp4(&hls_title, &mp4_title, &packaged)?;
    crate::storage::library::ingest(&cfg.fjord_exe, &mp4_title)?;
    let cert = match cfg.tls {
        Some(_) => Some(https::certificate(&cfg.fjord_exe, dir.path(), &root)?),
        None => None,
    };
    let tls = cfg.tls.map(https::client_config).transpose()?;
    let fjord = start_fjord(cfg, &root, cert.as_ref())?;
    let nginx = start_nginx(dir.path(), cert.as_ref())?;
    let blocking = start_blocking(&whole_title)?;
    let run = (cfg, tls.as_ref());
    let whole_file = [Get {
        path: "bench.ts".to_owned(),
        range: None,
    }];
    let whole = ("whole", &whole_file[..]);
    let mut rounds = Vec::new();
    for _ in 0..cfg.rounds {
        rounds.push(round(run, &fjord, "fjord", whole)?);
        rounds.push(round(run, &nginx, "nginx", whole)?);
        if tls.is_none() {
            rounds.push(round(run, &blocking, "blocking-sendfile", whole)?);
        }
    }
    // (b): the segments of fjord's HLS playlist of a TS title, as byte
    // ranges of the file from both servers.
    let ranges = byte_ranges(&fetch_text(fjord.port, "hls.ts/media.m3u8")?);
    if ranges.is_empty() {
        bail!("fjord's playlist of hls.ts has no byte ranges");
    }
    let hls_gets = gets_of_ranges("hls.ts", &ranges);
    let hls = ("hls-ranges", &hls_gets[..]);
    for _ in 0..cfg.rounds {
        rounds.push(round(run, &fjord, "fjord", hls)?);
        rounds.push(round(run, &nginx, "nginx", hls)?);
    }
    // (c): fjord's fMP4 segments of the MP4, made per request from the
    // file, against ffmpeg's, packaged beforehand, from nginx; each list
    // begins with its init segment.
    let ours = segment_gets(&fetch_text(fjord.port, "hls.mp4/media.m3u8")?, "hls.mp4");
    let theirs = segment_gets(
        &std::fs::read_to_string(packaged.join("index.m3u8"))?,
        "packaged",
    );
    if ours.len() < 3 || theirs.len() < 3 {
        bail!(
            "too few fMP4 segments: fjord {}, ffmpeg {}",
            ours.len(),
            theirs.len()
        );
    }
    for _ in 0..cfg.rounds {
        rounds.push(round(run, &fjord, "fjord", ("hls-fmp4", &ours))?);
        rounds.push(round(run, &nginx, "nginx", ("hls-fmp4", &theirs))?);
    }
    Ok(HttpReport {
        rounds,
        fmp4_made: made_bytes(fjord.port, &ours)?,
    })
}

/// Of the segments `gets` (the init segment first): the bytes generated
/// (all of the init segment; each media segment's `moof` and `mdat`
/// header, read from its first bytes) and the bytes in all.
fn made_bytes(port: u16, gets: &[Get]) -> anyhow::Result<(u64, u64)> {
    let (mut made, mut all) = (0u64, 0u64);
    for (i, g) in gets.iter().enumerate() {
        let (len, head) = first_bytes(port, &g.path, 8)?;
        all += len;
        made += if i == 0 {
            len
        } else if head.get(4..8) == Some(b"moof") {
            u64::from(u32::from_be_bytes(head[..4].try_into()?)) + 8
        } else {
            bail!("{} does not begin with a moof", g.path)
        };
    }
    Ok((made, all))
}

/// A resource's length and its first `n` bytes (one range request).
fn first_bytes(port: u16, path: &str, n: u64) -> anyhow::Result<(u64, Vec<u8>)> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    let req = format!(
        "GET /{path} HTTP/1.1\r\nHost: bench\r\nRange: bytes=0-{}\r\nConnection: close\r\n\r\n",
        n - 1
    );
    c.write_all(req.as_bytes())?;
    let mut all = Vec::new();
    c.read_to_end(&mut all)?;
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no HTTP head")?;
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    let total = head
        .lines()
        .find_map(|l| l.strip_prefix("content-range:"))
        .and_then(|v| v.rsplit('/').next())
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("{path}: no Content-Range"))?;
    Ok((total, all[end + 4..].to_vec()))
}

/// Remuxes `ts` to the MP4 `mp4` and has ffmpeg package it as HLS with
/// fMP4 segments of 6 s into `dir` (`index.m3u8`, `init.mp4`, `seg-N.m4s`).
fn package_fmp4(ts: &Path, mp4: &Path, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let ffmpeg = |args: &[&std::ffi::OsStr]| -> anyhow::Result<()> {
        let out = Command::new("ffmpeg")
            .args(["-nostdin", "-loglevel", "error", "-y"])
            .args(args)
            .output()
            .context("running ffmpeg")?;
        if !out.status.success() {
            bail!("ffmpeg: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    };
    let os = |s: &str| std::ffi::OsStr::new(s).to_owned();
    let a = |v: &[&str]| v.iter().map(|s| os(s)).collect::<Vec<_>>();
    let mut remux = a(&["-i"]);
    remux.push(ts.as_os_str().to_owned());
    remux.extend(a(&["-c", "copy", "-f", "mp4"]));
    remux.push(mp4.as_os_str().to_owned());
    ffmpeg(&remux.iter().map(|s| s.as_os_str()).collect::<Vec<_>>())?;
    let mut pkg = a(&["-i"]);
    pkg.push(mp4.as_os_str().to_owned());
    pkg.extend(a(&[
        "-c",
        "copy",
        "-f",
        "hls",
        "-hls_time",
        "6",
        "-hls_playlist_type",
        "vod",
        "-hls_segment_type",
        "fmp4",
        "-hls_fmp4_init_filename",
        "init.mp4",
        "-hls_segment_filename",
    ]));
    pkg.push(dir.join("seg-%d.m4s").into_os_string());
    pkg.push(dir.join("index.m3u8").into_os_string());
    ffmpeg(&pkg.iter().map(|s| s.as_os_str()).collect::<Vec<_>>())
}

/// The init segment and media segments a fMP4 media playlist names, as
/// paths under `base`.
fn segment_gets(playlist: &str, base: &str) -> Vec<Get> {
    let init = playlist
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MAP:URI=\""))
        .and_then(|r| r.split('"').next());
    init.into_iter()
        .chain(
            playlist
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#')),
        )
        .map(|uri| Get {
            path: format!("{base}/{uri}"),
            range: None,
        })
        .collect()
}

/// The markdown report.
pub fn markdown(cfg: &HttpConfig, command: &str, report: &HttpReport) -> String {
    use std::fmt::Write;
    let rounds = &report.rounds;
    let mut md = format!(
        "# fjord bench http\n\nCommand: `{command}`\n\n{} keep-alive clients (threads of the \
         bench, bodies discarded) over loopback, {} s per round, rounds alternating. \
         `whole`: GETs of a whole {} MiB file; `hls-ranges`: GETs of the byte ranges fjord's \
         HLS playlist names (`NAME/media.m3u8`, 6 s segments of a 120 s 4.5 Mbit/s TS made \
         by ffmpeg), each client from another segment on, from fjord and from nginx; \
         `hls-fmp4`: the init and media segments of HLS with fMP4 segments of the same title \
         remuxed to MP4, from fjord (made per request: generated `moof` + `mdat` heads, \
         samples by `sendfile` from the MP4) and from nginx serving the segments ffmpeg \
         packaged beforehand as static files (`-f hls -hls_segment_type fmp4 -hls_time 6`). Files \
         in the page cache. Server CPU is user + system of the server's processes (nginx: \
         master and workers) from `/proc`; blocking-sendfile's is its connection threads' \
         own.\n",
        cfg.clients, cfg.seconds, cfg.mb
    );
    if let Some(c) = cfg.tls {
        let _ = write!(
            md,
            "\nOver HTTPS: the clients (rustls) offer {} alone, resuming \
             sessions; fjord (rustls) and nginx (OpenSSL, `ssl_session_cache`) serve one \
             certificate (`fjord cert`, ECDSA P-256); no kTLS. The blocking server has no TLS.\n",
            c.name()
        );
    }
    md.push_str(
        "\n| case | server | delivered | Gbit/s | requests/s | server CPU | CPU s per GB |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in rounds {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} GB | {:.2} | {:.0} | {:.2} s | {:.3} |",
            r.case,
            r.server,
            r.bytes as f64 / 1e9,
            r.gbit_s(),
            r.requests_s(),
            r.cpu.as_secs_f64(),
            r.cpu_s_per_gb()
        );
    }
    let total = |case: &str, name: &str| {
        let (cpu, bytes) = rounds
            .iter()
            .filter(|r| r.case == case && r.server == name)
            .fold((0.0, 0u64), |(c, b), r| {
                (c + r.cpu.as_secs_f64(), b + r.bytes)
            });
        cpu / (bytes as f64 / 1e9).max(1e-9)
    };
    let rate = |case: &str, name: &str| {
        let (n, s) = rounds
            .iter()
            .filter(|r| r.case == case && r.server == name)
            .fold((0u64, 0.0), |(n, s), r| {
                (n + r.requests, s + r.wall.as_secs_f64())
            });
        n as f64 / s.max(1e-9)
    };
    md.push_str(
        "\nOver all rounds, CPU s per GB (and requests/s):\n\n\
         | case | fjord | nginx | fjord / nginx | blocking-sendfile |\n|---|---|---|---|---|\n",
    );
    for case in ["whole", "hls-ranges", "hls-fmp4"] {
        let (f, n) = (total(case, "fjord"), total(case, "nginx"));
        let k = match case {
            "whole" if cfg.tls.is_none() => format!(
                "{:.3} ({:.0}/s)",
                total(case, "blocking-sendfile"),
                rate(case, "blocking-sendfile")
            ),
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            md,
            "| {case} | {f:.3} ({:.0}/s) | {n:.3} ({:.0}/s) | {:.2} | {k} |",
            rate(case, "fjord"),
            rate(case, "nginx"),
            f / n
        );
    }
    md.push_str(match cfg.tls {
        Some(_) => {
            "\nPayload through user space over TLS, both servers: read from the page cache \
             into a buffer, sealed, written (nginx without kTLS does not `sendfile` TLS).\n"
        }
        None => {
            "\nblocking-sendfile is the bench's own server: one blocking `sendfile` of the whole \
         file per request, a thread per connection; no lower bound over loopback, where the \
         sender also runs the receiver's TCP processing. Payload through user space: none \
         (sendfile) for every server; fjord's fMP4 segments write only their generated \
         heads from user space.\n"
        }
    });
    let (made, all) = report.fmp4_made;
    let _ = writeln!(
        md,
        "\nfjord's `hls-fmp4` segments: {made} bytes generated (init segment, `moof` + `mdat` \
         heads) of {all} ({:.3} %); the samples, the rest, {} from the MP4.",
        made as f64 * 100.0 / all.max(1) as f64,
        match cfg.tls {
            Some(_) => "read and sealed",
            None => "by `sendfile`",
        }
    );
    md
}

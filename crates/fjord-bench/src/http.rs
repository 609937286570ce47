//! `fjord bench http`: the same file downloaded from fjord's HTTP listener
//! and from nginx (`sendfile on`, started here in a scratch directory), in
//! one run, by N keep-alive clients of this process over loopback. The
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
//! body. Both servers read the file from the page cache (it was just
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

use crate::{cpu::ThreadCpu, peers::process_cpu};

pub struct HttpConfig {
    pub fjord_exe: PathBuf,
    pub mb: u64,
    pub clients: usize,
    pub seconds: u64,
    pub rounds: usize,
}

/// One server's measured round.
pub struct Round {
    /// `whole` (whole-file GETs) or `hls-ranges` (the byte ranges of an
    /// HLS playlist of a TS title).
    pub case: &'static str,
    pub server: &'static str,
    pub bytes: u64,
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

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn start_fjord(cfg: &HttpConfig, root: &Path) -> anyhow::Result<Served> {
    let port = free_port()?;
    let mut child = Command::new(&cfg.fjord_exe)
        .args(["serve", "--port", "0", "--bind", "127.0.0.1", "--http-port"])
        .arg(port.to_string())
        .arg("--root")
        .arg(root)
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

fn start_nginx(dir: &Path) -> anyhow::Result<Served> {
    let exe = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .context("nginx is not installed (apt-get install nginx-light, or make peers)")?;
    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    let text = NGINX_CONF
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

/// One client on one keep-alive connection until `stop`: GETs of `name`,
/// whole when `ranges` is empty, else of its byte ranges in turn (from
/// the `first`).
fn client(
    port: u16,
    name: &str,
    ranges: &[(u64, u64)],
    first: usize,
    stop: &AtomicBool,
    bytes: &AtomicU64,
) -> anyhow::Result<()> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        // One write per request, as players send them (`write!` would
        // write each formatted piece, and Nagle hold all but the first
        // until the server's delayed ACK).
        let request = match ranges.get(i % ranges.len().max(1)) {
            Some((len, at)) => format!(
                "GET /{name} HTTP/1.1\r\nHost: bench\r\nRange: bytes={at}-{}\r\n\r\n",
                at + len - 1
            ),
            None => format!("GET /{name} HTTP/1.1\r\nHost: bench\r\n\r\n"),
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
    cfg: &HttpConfig,
    server: &Served,
    name: &'static str,
    (case, title, ranges): (&'static str, &str, &[(u64, u64)]),
) -> anyhow::Result<Round> {
    let (stop, bytes) = (AtomicBool::new(false), AtomicU64::new(0));
    let cpu0 = server.cpu();
    let t0 = Instant::now();
    let results: Vec<anyhow::Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.clients)
            .map(|k| {
                let first = k * ranges.len() / cfg.clients.max(1);
                let (stop, bytes) = (&stop, &bytes);
                s.spawn(move || client(server.port, title, ranges, first, stop, bytes))
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
        cpu,
        wall,
    })
}

/// Writes the file, then alternates rounds of fjord and nginx.
pub fn run(cfg: &HttpConfig) -> anyhow::Result<Vec<Round>> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root)?;
    let mut f = std::fs::File::create(root.join("bench.bin"))?;
    let chunk: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    for _ in 0..cfg.mb {
        f.write_all(&chunk)?;
    }
    f.sync_all()?;
    // (b)'s title, ingested before the servers start: the server's own
    // ingest would make its parity and packets during the rounds.
    let hls_title = root.join("hls.ts");
    crate::clip::encode(&hls_title, 120, 4000, 4_500_000)?;
    crate::storage::library::ingest(&cfg.fjord_exe, &hls_title)?;
    let fjord = start_fjord(cfg, &root)?;
    let nginx = start_nginx(dir.path())?;
    let blocking = start_blocking(&root.join("bench.bin"))?;
    let whole = ("whole", "bench.bin", &[][..]);
    let mut rounds = Vec::new();
    for _ in 0..cfg.rounds {
        rounds.push(round(cfg, &fjord, "fjord", whole)?);
        rounds.push(round(cfg, &nginx, "nginx", whole)?);
        rounds.push(round(cfg, &blocking, "blocking-sendfile", whole)?);
    }
    // (b): the segments of fjord's HLS playlist of a TS title, as byte
    // ranges of the file from both servers.
    let ranges = byte_ranges(&fetch_text(fjord.port, "hls.ts/media.m3u8")?);
    if ranges.is_empty() {
        bail!("fjord's playlist of hls.ts has no byte ranges");
    }
    let hls = ("hls-ranges", "hls.ts", &ranges[..]);
    for _ in 0..cfg.rounds {
        rounds.push(round(cfg, &fjord, "fjord", hls)?);
        rounds.push(round(cfg, &nginx, "nginx", hls)?);
    }
    Ok(rounds)
}

/// The markdown report.
pub fn markdown(cfg: &HttpConfig, command: &str, rounds: &[Round]) -> String {
    use std::fmt::Write;
    let mut md = format!(
        "# fjord bench http\n\nCommand: `{command}`\n\n{} keep-alive clients (threads of the \
         bench, bodies discarded) over loopback, {} s per round, rounds alternating. \
         `whole`: GETs of a whole {} MiB file; `hls-ranges`: GETs of the byte ranges fjord's \
         HLS playlist names (`NAME/media.m3u8`, 6 s segments of a 120 s 4.5 Mbit/s TS made \
         by ffmpeg), each client from another segment on, from fjord and from nginx. Files \
         in the page cache. Server CPU is user + system of the server's processes (nginx: \
         master and workers) from `/proc`; blocking-sendfile's is its connection threads' \
         own.\n\n\
         | case | server | delivered | Gbit/s | server CPU | CPU s per GB |\n\
         |---|---|---|---|---|---|\n",
        cfg.clients, cfg.seconds, cfg.mb
    );
    for r in rounds {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} GB | {:.2} | {:.2} s | {:.3} |",
            r.case,
            r.server,
            r.bytes as f64 / 1e9,
            r.gbit_s(),
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
    md.push_str("\nOver all rounds, CPU s per GB:\n\n| case | fjord | nginx | fjord / nginx | blocking-sendfile |\n|---|---|---|---|---|\n");
    for case in ["whole", "hls-ranges"] {
        let (f, n) = (total(case, "fjord"), total(case, "nginx"));
        let k = match case {
            "whole" => format!("{:.3}", total(case, "blocking-sendfile")),
            _ => "-".to_owned(),
        };
        let _ = writeln!(md, "| {case} | {f:.3} | {n:.3} | {:.2} | {k} |", f / n);
    }
    md.push_str(
        "\nblocking-sendfile is the bench's own server: one blocking `sendfile` of the whole \
         file per request, a thread per connection; no lower bound over loopback, where the \
         sender also runs the receiver's TCP processing. Payload through user space: none \
         (sendfile) for every server.\n",
    );
    md
}

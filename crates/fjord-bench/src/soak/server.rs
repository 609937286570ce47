//! The `fjord serve` child under test and what is read of it: its admin
//! listener (`/metrics` over a bare HTTP/1.0 GET) and `/proc`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Warnings and errors the server logged: how many, and the first few.
#[derive(Clone, Debug, Default)]
pub struct Warnings {
    pub count: u64,
    pub first: Vec<String>,
}

/// The running server; killed (its process group) if dropped unstopped.
pub struct Server {
    child: Child,
    /// `host:port` of the admin listener and of RTSP.
    pub admin: String,
    pub rtsp: String,
    pub warnings: Arc<Mutex<Warnings>>,
}

impl Server {
    /// Starts `fjord serve --config CONFIG` on address `bind`, every port
    /// chosen by the kernel, the admin listener on loopback, and waits for
    /// both addresses on its stdout. Its whole log goes to `log`, so what it
    /// said can be set beside a sample.
    pub fn start(exe: &Path, config: &Path, bind: &str, log: &Path) -> anyhow::Result<Server> {
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--bind", bind, "--port", "0", "--http-port", "0"])
            .args(["--admin-bind", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only sets a flag.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let log =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = cmd.spawn().context("starting fjord serve")?;
        let warnings = Arc::new(Mutex::new(Warnings::default()));
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            let w = warnings.clone();
            std::thread::spawn(move || keep_warnings(err, &w, log));
        }
        let mut server = Server {
            child,
            admin: String::new(),
            rtsp: String::new(),
            warnings,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.rtsp.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                let first = server.warnings().first.join(" | ");
                bail!("fjord serve did not start: {first}");
            };
            if let Some(a) = line.strip_prefix("fjord: status page on http://") {
                server.admin = a.trim().trim_end_matches('/').to_string();
            }
            if let Some(a) = line.strip_prefix("fjord: listening on rtsp://") {
                server.rtsp = a.trim().trim_end_matches('/').to_string();
            }
        }
        if server.admin.is_empty() {
            bail!("fjord serve printed no status page address (admin listener off?)");
        }
        Ok(server)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn warnings(&self) -> Warnings {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The server's `/metrics`.
    pub fn metrics(&self) -> anyhow::Result<Metrics> {
        Ok(Metrics::parse(&http_get(&self.admin, "/metrics")?))
    }

    /// The ids of the server's sessions (`GET /api/v1/sessions`).
    pub fn session_ids(&self) -> anyhow::Result<BTreeSet<String>> {
        session_ids(&http_get(&self.admin, "/api/v1/sessions")?)
    }

    /// SIGTERM; its exit code (None: killed by a signal, or still running
    /// after `within`, then killed) and how long it took.
    pub fn stop(mut self, within: Duration) -> (Option<i32>, Duration) {
        let t = Instant::now();
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        while t.elapsed() < within {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (status.code(), t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (None, t.elapsed())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: as above; the group, so nothing it started outlives it.
            unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
            let _ = self.child.wait();
        }
    }
}

/// Writes the server's log to `log`, counting its WARN and ERROR lines and
/// keeping the first.
fn keep_warnings(pipe: impl Read, into: &Mutex<Warnings>, log: std::fs::File) {
    let mut log = std::io::BufWriter::new(log);
    for line in BufReader::new(pipe).lines().map_while(Result::ok) {
        let _ = writeln!(log, "{line}");
        if !(line.contains(" WARN ") || line.contains(" ERROR ")) {
            continue;
        }
        if let Ok(mut w) = into.lock() {
            w.count += 1;
            if w.first.len() < 10 {
                w.first.push(line);
            }
        }
    }
}

/// The body of `GET path` from `addr`, 200 only. HTTP/1.0, so the reply is
/// never chunked and ends when the connection closes.
pub fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            anyhow::anyhow!("GET {path}: no reply in 5 s (the server hangs?)")
        }
        _ => e.into(),
    })?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        bail!("GET {path}: {status}");
    }
    Ok(body.to_string())
}

/// The `id` of every session in the admin API's JSON list.
pub fn session_ids(json: &str) -> anyhow::Result<BTreeSet<String>> {
    let list: Vec<serde_json::Value> = serde_json::from_str(json).context("not a JSON list")?;
    Ok(list
        .iter()
        .filter_map(|s| Some(s.get("id")?.as_str()?.to_string()))
        .collect())
}

/// Prometheus text: every sample as (name, labels, value).
#[derive(Clone, Debug, Default)]
pub struct Metrics(Vec<(String, String, f64)>);

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let sample = |line: &str| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            Some((name.to_string(), labels.to_string(), value.parse().ok()?))
        };
        let lines = text.lines().map(str::trim);
        Metrics(
            lines
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .filter_map(sample)
                .collect(),
        )
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        self.0
            .iter()
            .filter(move |(n, ..)| n == name)
            .map(|(_, l, v)| (l.as_str(), *v))
    }

    /// Every series of `name` summed (over threads, states, ...).
    pub fn sum(&self, name: &str) -> f64 {
        self.values(name).map(|(_, v)| v).sum()
    }

    /// The series of `name` whose labels `keep` accepts, summed.
    pub fn sum_where(&self, name: &str, keep: impl Fn(&str) -> bool) -> f64 {
        self.values(name)
            .filter(|(l, _)| keep(l))
            .map(|(_, v)| v)
            .sum()
    }

    pub fn max(&self, name: &str) -> f64 {
        self.values(name).map(|(_, v)| v).fold(0.0, f64::max)
    }

    /// The series of `name` by their `thread="N"` label.
    pub fn by_thread(&self, name: &str) -> BTreeMap<usize, f64> {
        self.by_thread_where(name, |_| true)
    }

    /// The series of `name` whose labels `keep` accepts, by their
    /// `thread="N"` label.
    pub fn by_thread_where(&self, name: &str, keep: impl Fn(&str) -> bool) -> BTreeMap<usize, f64> {
        let thread = |l: &str| {
            let (_, rest) = l.split_once("thread=\"")?;
            rest.split_once('"')?.0.parse().ok()
        };
        let mut by = BTreeMap::new();
        for (l, v) in self.values(name).filter(|(l, _)| keep(l)) {
            if let Some(i) = thread(l) {
                *by.entry(i).or_default() += v;
            }
        }
        by
    }
}

/// A `Name: N [kB]` field of a `/proc` file such as `status` or `meminfo`.
pub fn proc_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// What `/proc` says of the server, and of the machine's slab.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcFigures {
    pub rss_kib: u64,
    /// The parts of the RSS: anonymous (the heap), file pages (mapped
    /// titles, the binary) and shared memory.
    pub rss_anon_kib: u64,
    pub rss_file_kib: u64,
    pub rss_shmem_kib: u64,
    pub threads: u64,
    pub fds: u64,
    pub cpu_s: f64,
    pub slab_kib: u64,
    pub sunreclaim_kib: u64,
}

pub fn proc_figures(pid: u32) -> ProcFigures {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    ProcFigures {
        rss_kib: proc_field(&status, "VmRSS").unwrap_or(0),
        rss_anon_kib: proc_field(&status, "RssAnon").unwrap_or(0),
        rss_file_kib: proc_field(&status, "RssFile").unwrap_or(0),
        rss_shmem_kib: proc_field(&status, "RssShmem").unwrap_or(0),
        threads: proc_field(&status, "Threads").unwrap_or(0),
        fds,
        cpu_s: crate::procfs::process_cpu(pid).map_or(0.0, |d| d.as_secs_f64()),
        slab_kib: proc_field(&meminfo, "Slab").unwrap_or(0),
        sunreclaim_kib: proc_field(&meminfo, "SUnreclaim").unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "# HELP fjord_packets_sent RTP packets.\n\
        # TYPE fjord_packets_sent counter\n\
        fjord_packets_sent_total{thread=\"0\"} 648\n\
        fjord_packets_sent_total{thread=\"1\"} 324\n\
        fjord_late_packets_total{thread=\"1\"} 4\n\
        fjord_engine_max_lateness_seconds{thread=\"0\"} 0.001275212\n\
        fjord_engine_max_lateness_seconds{thread=\"1\"} 0.005903592\n\
        fjord_rtsp_requests_total{method=\"PLAY\",status=\"200\"} 3\n\
        fjord_rtsp_requests_total{method=\"PLAY\",status=\"454\"} 2\n\
        fjord_sessions{state=\"playing\",transport=\"udp\",format=\"MP4 (H.264, AAC)\"} 3\n\
        fjord_sessions{state=\"ready\",transport=\"tcp\",format=\"MPEG-TS\"} 1\n\
        fjord_connections 3\n\
        EOF\n";

    #[test]
    fn metrics_sum_over_labels() {
        let m = Metrics::parse(SCRAPE);
        assert_eq!(m.sum("fjord_packets_sent_total"), 972.0);
        assert_eq!(m.sum("fjord_late_packets_total"), 4.0);
        assert_eq!(m.sum("fjord_sessions"), 4.0);
        assert_eq!(m.sum("fjord_connections"), 3.0);
        assert_eq!(m.max("fjord_engine_max_lateness_seconds"), 0.005903592);
        let late = m.by_thread("fjord_late_packets_total");
        assert_eq!(late.into_iter().collect::<Vec<_>>(), [(1, 4.0)]);
        let lag = m.by_thread("fjord_engine_max_lateness_seconds");
        assert_eq!(lag.get(&0), Some(&0.001275212));
        assert!(m.by_thread("fjord_connections").is_empty());
        let refused = m.sum_where("fjord_rtsp_requests_total", |l| !l.contains("status=\"2"));
        assert_eq!(refused, 2.0);
        assert_eq!(m.sum("fjord_nothing"), 0.0);
    }

    #[test]
    fn session_ids_from_the_api() {
        let json = r#"[{"id":"3753DD6EBE15CDE8","state":"playing","streams":[]},
            {"id":"50D4F8D9DBD91F05","state":"ready"}]"#;
        let ids = session_ids(json).unwrap();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains("50D4F8D9DBD91F05"));
        assert!(session_ids("[]").unwrap().is_empty());
        assert!(session_ids("<html>").is_err());
    }

    #[test]
    fn proc_fields_in_kib() {
        let status = "Name:\tfjord\nVmRSS:\t   41234 kB\nRssAnon:\t   11234 kB\n\
                      RssFile:\t   30000 kB\nRssShmem:\t       0 kB\nThreads:\t7\n";
        assert_eq!(proc_field(status, "VmRSS"), Some(41234));
        assert_eq!(proc_field(status, "RssAnon"), Some(11234));
        assert_eq!(proc_field(status, "RssFile"), Some(30000));
        assert_eq!(proc_field(status, "RssShmem"), Some(0));
        assert_eq!(proc_field(status, "Threads"), Some(7));
        assert_eq!(proc_field(status, "VmSwap"), None);
        let meminfo =
            "Slab:             204800 kB\nSReclaimable:      1 kB\nSUnreclaim:        102400 kB\n";
        assert_eq!(proc_field(meminfo, "Slab"), Some(204800));
        assert_eq!(proc_field(meminfo, "SUnreclaim"), Some(102400));
    }

    #[test]
    fn this_process_reads_from_proc() {
        let p = proc_figures(std::process::id());
        assert!(p.rss_kib > 0 && p.threads >= 1 && p.fds >= 3 && p.slab_kib > 0);
        assert!(p.rss_anon_kib > 0 && p.rss_file_kib > 0);
    }
}

//! `fjord play --broadcast URL [-o FILE|-]`: a title by periodic
//! broadcasting instead of a session.
//!
//! DESCRIBE `URL?broadcast` (`Accept: application/json`) gives the
//! [`Schedule`]; the client's arrival is the wall clock against the
//! schedule's epoch (so its clock must agree with the server's, e.g. by
//! NTP); `Plan::join` says which channel to hear when. Each channel is a
//! UDP socket (`SO_REUSEADDR`, bound to `0.0.0.0:port`, the group joined on
//! any interface, no GRO) opened shortly before its window and closed as
//! soon as every packet expected from it is held; one `poll` loop reads
//! them all. What the datagrams are, in what order they go out, and when a
//! channel is left is `fjord_client::broadcast` (sans-IO): a packet lost in
//! its window is rebuilt from the channel's FEC repair packets when the
//! title has parity, else taken from the channel's next cycles, for at most
//! [`REPAIR_PERIODS`] periods (repair by the carousel). The contiguous
//! prefix of the title is written as it grows
//! (by a writer thread, so a slow pipe never stalls receiving); a report
//! follows; any packet still missing is an error.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use fjord_client::RtspClient;
use fjord_client::broadcast::{
    Action, ChannelGroup, Margins, Plan, REPAIR_PERIODS, Receiver, Schedule, TuneState,
    channel_socket, show_ranges,
};
use fjord_client::fec::{Loss, LossModel};

use crate::play::PlayArgs;

/// The plan's arrival is this far ahead of the clock, so the first
/// windows open after their sockets do.
const LEAD_NS: u64 = 50_000_000;
/// Channels are joined this long before their windows open.
const AHEAD_NS: u64 = 200_000_000;
/// A packet this late past its window is still the window's.
const GRACE_NS: u64 = 200_000_000;
/// An epoch further ahead than this is refused (clocks disagree).
const MAX_EPOCH_AHEAD: Duration = Duration::from_secs(600);
/// Beyond the plan's own bounds, the whole run may take this much longer.
const SLACK_NS: u64 = 10_000_000_000;
/// The longest `poll` sleeps between looks at the clock.
const TICK_MS: u64 = 50;
/// Datagrams read from one socket before looking at the others.
const BATCH: usize = 256;
const RECV_BUFFER: usize = 4 << 20;

pub fn run(args: PlayArgs) -> anyhow::Result<()> {
    ensure!(!args.tcp, "--tcp is for sessions, not with --broadcast");
    ensure!(
        (0.0..=1.0).contains(&args.drop),
        "--drop must be a probability between 0 and 1"
    );
    ensure!(args.burst != Some(0), "--burst must be at least 1");
    let url = broadcast_url(&args.url);
    let (schedule, plan) = describe(&url)?;
    let clock = Clock::at_epoch(schedule.epoch_unix_ns)?;
    let arrival_ns = clock.now_ns();
    let margins = Margins {
        ahead_ns: AHEAD_NS,
        grace_ns: GRACE_NS,
    };
    let mut rx = Receiver::new(&schedule, plan, arrival_ns + LEAD_NS, margins);
    let uncovered = rx
        .carousel
        .uncovered(rx.plan().title().packets().len() as u32);
    ensure!(
        uncovered.is_empty(),
        "the plan's windows miss packets {}",
        show_ranges(&uncovered, 10)
    );
    let deadline_ns = arrival_ns.saturating_add(run_bound_ns(rx.plan()));
    let mut out = Output::open(args.output.as_ref())?;
    let mut net = Network {
        groups: schedule.channels.clone(),
        sockets: schedule.channels.iter().map(|_| None).collect(),
        loss: Loss::new(
            LossModel::from_options(args.drop, args.burst.map(u32::from), 0),
            args.seed,
        ),
        dropped: 0,
    };
    let stopped = receive(&mut rx, &mut net, &mut out, &clock, deadline_ns);
    drop(net.sockets);
    let written = out.finish();
    let report = Report {
        schedule: &schedule,
        rx: &rx,
        arrival_ns,
        dropped: net.dropped,
        written: written.as_ref().copied().unwrap_or(0),
    };
    report.print(args.output.as_ref().is_some_and(|p| is_stdout(p)));
    stopped?;
    written.context("write the output")?;
    let missing = rx.reassembly.missing();
    if !missing.is_empty() {
        bail!(
            "{} packets missing: {}",
            missing
                .iter()
                .map(|r| u64::from(r.end - r.start))
                .sum::<u64>(),
            show_ranges(&missing, 10)
        );
    }
    Ok(())
}

/// The URL with `?broadcast` (or `&broadcast`), unless it has it.
fn broadcast_url(url: &str) -> String {
    match url.split_once('?') {
        Some((_, q)) if q.split('&').any(|p| p == "broadcast") => url.to_owned(),
        Some(_) => format!("{url}&broadcast"),
        None => format!("{url}?broadcast"),
    }
}

/// How long a broadcast that is starting (503) is waited for.
const STARTING_WAIT: Duration = Duration::from_secs(120);

fn describe(url: &str) -> anyhow::Result<(Schedule, Plan)> {
    let mut client = RtspClient::connect(url).with_context(|| format!("connect to {url}"))?;
    let asked = Instant::now();
    let r = loop {
        let r = client
            .request("DESCRIBE", url, &[("Accept", "application/json")], &[])
            .with_context(|| format!("DESCRIBE {url}"))?;
        if r.status != 503 || asked.elapsed() >= STARTING_WAIT {
            break r;
        }
        // The server makes the title's parity before it broadcasts it.
        let after = r.header("Retry-After").and_then(|s| s.trim().parse().ok());
        std::thread::sleep(Duration::from_secs(after.unwrap_or(1u64).clamp(1, 10)));
    };
    let hint = match r.status {
        404 => " (is the title broadcast? the server's [[broadcast]] tables name them)",
        503 => " (the broadcast did not start in time; see the server's log)",
        _ => "",
    };
    ensure!(
        r.is_success(),
        "DESCRIBE {url}: {} {}{hint}",
        r.status,
        r.reason
    );
    let json = r
        .header("Content-Type")
        .is_some_and(|t| t.trim().starts_with("application/json"));
    ensure!(json, "DESCRIBE {url}: the reply is not application/json");
    Schedule::from_json(&r.body).with_context(|| format!("the schedule of {url}"))
}

/// The whole run's bound: the title's duration, the worst wait,
/// [`REPAIR_PERIODS`] of the longest periods and 10 s (and the margins).
fn run_bound_ns(plan: &Plan) -> u64 {
    let longest = plan.channels().iter().map(|c| c.period_ns).max();
    plan.title()
        .duration_ns()
        .saturating_add(plan.worst_wait_ns())
        .saturating_add(longest.unwrap_or(0).saturating_mul(REPAIR_PERIODS))
        .saturating_add(LEAD_NS + GRACE_NS + SLACK_NS)
}

/// The schedule's time: ns since its epoch, from the wall clock once and
/// the monotonic clock after.
struct Clock {
    anchor: Instant,
    at_anchor_ns: u64,
}

impl Clock {
    /// Waits for the epoch if it is ahead (at most [`MAX_EPOCH_AHEAD`]).
    fn at_epoch(epoch_unix_ns: u64) -> anyhow::Result<Clock> {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .context("the clock is before 1970")?;
        let unix_ns = u64::try_from(unix.as_nanos()).unwrap_or(u64::MAX);
        if unix_ns < epoch_unix_ns {
            let ahead = Duration::from_nanos(epoch_unix_ns - unix_ns);
            ensure!(
                ahead <= MAX_EPOCH_AHEAD,
                "the schedule starts {ahead:?} from now: do this clock and the server's agree?"
            );
            std::thread::sleep(ahead);
            return Clock::at_epoch(epoch_unix_ns);
        }
        Ok(Clock {
            anchor: Instant::now(),
            at_anchor_ns: unix_ns - epoch_unix_ns,
        })
    }

    fn now_ns(&self) -> u64 {
        let since = u64::try_from(self.anchor.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.at_anchor_ns.saturating_add(since)
    }
}

/// The channels' sockets, and the test loss applied to what they read.
struct Network {
    groups: Vec<ChannelGroup>,
    sockets: Vec<Option<UdpSocket>>,
    loss: Loss,
    dropped: u64,
}

impl Network {
    fn act(&mut self, a: Action) -> anyhow::Result<()> {
        match a {
            Action::Join(c) => {
                let g = self.groups[c];
                let s = channel_socket(g, RECV_BUFFER)
                    .with_context(|| format!("join {}:{}", g.group, g.port))?;
                self.sockets[c] = Some(s);
            }
            // Closing the socket leaves the group.
            Action::Leave(c) => self.sockets[c] = None,
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` for datagrams; the channels that have some.
    fn poll(&self, timeout_ms: u64) -> io::Result<Vec<usize>> {
        let open: Vec<usize> = (0..self.sockets.len())
            .filter(|&c| self.sockets[c].is_some())
            .collect();
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .filter_map(|&c| self.sockets[c].as_ref())
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout = i32::try_from(timeout_ms).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(Vec::new())
            } else {
                Err(e)
            };
        }
        Ok(open
            .into_iter()
            .zip(&fds)
            .filter(|(_, f)| f.revents != 0)
            .map(|(c, _)| c)
            .collect())
    }

    /// Reads what channel `c` has (up to [`BATCH`] datagrams) into `rx`.
    fn read(&mut self, c: usize, rx: &mut Receiver, clock: &Clock, buf: &mut [u8]) {
        for _ in 0..BATCH {
            let Some(s) = &self.sockets[c] else { return };
            let Ok(n) = s.recv(buf) else { return };
            if self.loss.drop_packet(false) {
                self.dropped += 1;
                continue;
            }
            rx.datagram(c, &buf[..n], clock.now_ns());
        }
    }
}

/// Joins, reads and leaves channels until the carousel is done or the
/// deadline passes, writing the title's prefix as it grows.
fn receive(
    rx: &mut Receiver,
    net: &mut Network,
    out: &mut Output,
    clock: &Clock,
    deadline_ns: u64,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; 65536];
    loop {
        let now = clock.now_ns();
        for a in rx.carousel.step(now) {
            net.act(a)?;
        }
        if rx.carousel.is_finished() {
            return Ok(());
        }
        if now >= deadline_ns {
            eprintln!("fjord: the run's bound passed; stopping");
            return Ok(());
        }
        let wake = rx
            .carousel
            .next_deadline()
            .map_or(deadline_ns, |t| t.min(deadline_ns));
        let timeout_ms = wake.saturating_sub(now).div_ceil(1_000_000).min(TICK_MS);
        for c in net.poll(timeout_ms).context("poll")? {
            net.read(c, rx, clock, &mut buf);
        }
        while let Some(p) = rx.reassembly.pop_ready() {
            out.write(p)?;
        }
    }
}

/// Where the title goes: nowhere, a file or stdout, through a thread.
struct Output {
    tx: Option<mpsc::Sender<Vec<u8>>>,
    thread: Option<JoinHandle<io::Result<u64>>>,
}

fn is_stdout(p: &Path) -> bool {
    p.as_os_str() == "-"
}

impl Output {
    fn open(path: Option<&PathBuf>) -> anyhow::Result<Output> {
        let Some(path) = path else {
            return Ok(Output {
                tx: None,
                thread: None,
            });
        };
        let file = if is_stdout(path) {
            None
        } else {
            Some(File::create(path).with_context(|| format!("create {}", path.display()))?)
        };
        let (tx, chunks) = mpsc::channel::<Vec<u8>>();
        let thread = std::thread::spawn(move || match file {
            Some(f) => {
                let mut w = BufWriter::new(f);
                let n = write_all(&chunks, &mut w)?;
                w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
                Ok(n)
            }
            None => write_all(&chunks, &mut BufWriter::new(io::stdout().lock())),
        });
        Ok(Output {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues a payload (dropped without an output). An error: the writer
    /// stopped (its error comes from [`Output::finish`]).
    fn write(&mut self, payload: Vec<u8>) -> anyhow::Result<()> {
        match &self.tx {
            Some(tx) => tx
                .send(payload)
                .map_err(|_| anyhow::anyhow!("the output stopped taking data")),
            None => Ok(()),
        }
    }

    /// Waits for everything queued to be written (and a file synced):
    /// the bytes written.
    fn finish(&mut self) -> io::Result<u64> {
        self.tx = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the writer panicked"))),
            None => Ok(0),
        }
    }
}

/// Writes every chunk, flushing whenever the queue runs dry (so a pipe
/// plays while receiving); the bytes written.
fn write_all(chunks: &mpsc::Receiver<Vec<u8>>, w: &mut impl Write) -> io::Result<u64> {
    let mut n = 0u64;
    while let Ok(first) = chunks.recv() {
        w.write_all(&first)?;
        n += first.len() as u64;
        while let Ok(more) = chunks.try_recv() {
            w.write_all(&more)?;
            n += more.len() as u64;
        }
        w.flush()?;
    }
    w.flush()?;
    Ok(n)
}

/// The end-of-run line (and one per channel given up).
struct Report<'a> {
    schedule: &'a Schedule,
    rx: &'a Receiver,
    arrival_ns: u64,
    dropped: u64,
    written: u64,
}

impl Report<'_> {
    fn print(&self, to_stderr: bool) {
        let mut lines = self.given_up();
        lines.push(self.summary());
        for l in lines {
            if to_stderr {
                eprintln!("{l}");
            } else {
                println!("{l}");
            }
        }
    }

    fn given_up(&self) -> Vec<String> {
        let k = &self.rx.carousel;
        (0..k.tunes.len())
            .filter(|&t| k.tunes[t].state == TuneState::GaveUp)
            .map(|t| {
                let missing = k.missing_of(t, |i| self.rx.reassembly.has(i));
                format!(
                    "channel {}: given up {} periods after its window, missing packets {}",
                    k.tunes[t].channel,
                    REPAIR_PERIODS,
                    show_ranges(&missing, 10)
                )
            })
            .collect()
    }

    fn summary(&self) -> String {
        let (rx, plan) = (self.rx, self.rx.plan());
        let tunes = &rx.carousel.tunes;
        let heard = tunes.iter().filter(|t| t.joined).count();
        let extended = tunes.iter().filter(|t| t.extended).count();
        let total = plan.title().packets().len() as u64;
        let s = rx.stats;
        let ms = |ns: u64| ns as f64 / 1e6;
        let fec = match &rx.repairs {
            Some(_) => format!(
                "{} rebuilt by FEC from {} repair packets",
                s.rebuilt, s.repair_packets
            ),
            None => "no FEC (the title has no parity)".to_owned(),
        };
        format!(
            "broadcast {} ({}, {} channels): heard {heard} ({extended} past their window: repair by the carousel); \
             packets {} received, {} duplicates, {} ignored, {} dropped (test), {fec}, {} missing; \
             wait {:.1} ms (worst {:.1}); underruns {}; peak buffer {} bytes (planned {}); {} bytes written",
            self.schedule.title.escape_debug(),
            plan.config().scheme.name(),
            plan.channels().len(),
            s.received,
            s.duplicates,
            s.ignored,
            self.dropped,
            total - rx.reassembly.received(),
            ms(rx.join.start_ns.saturating_sub(self.arrival_ns)),
            ms(plan.worst_wait_ns()),
            s.late,
            rx.playout.peak_bytes(),
            rx.join.peak_buffer_bytes,
            self.written,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_asks_for_the_broadcast_once() {
        assert_eq!(
            broadcast_url("rtsp://h:1/a.ts"),
            "rtsp://h:1/a.ts?broadcast"
        );
        assert_eq!(
            broadcast_url("rtsp://h:1/a.ts?broadcast"),
            "rtsp://h:1/a.ts?broadcast"
        );
        assert_eq!(
            broadcast_url("rtsp://h:1/a.ts?x=1"),
            "rtsp://h:1/a.ts?x=1&broadcast"
        );
    }

    #[test]
    fn the_writer_writes_everything_in_order() {
        let (tx, rx) = mpsc::channel();
        for c in [vec![1u8, 2], vec![], vec![3]] {
            tx.send(c).unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        assert_eq!(write_all(&rx, &mut out).unwrap(), 3);
        assert_eq!(out, vec![1, 2, 3]);
    }
}

//! fjord's experiments, and `fjord-bench`, the program that runs them
//! (`fjord bench ARGS` runs it). The server, `fjord`, does not link this
//! crate: nothing here is on its path.
//!
//! Each benchmark is a module with a config, a `run` and a report
//! (markdown; CSV, JSON or SVG where it has them). The program
//! (`src/bin/fjord-bench`) only parses flags, runs one, writes its files,
//! and for [`disk`] and [`capacity`] saves the figures `fjord serve`'s
//! admission control reads (`fjord_server::config`). A benchmark that needs
//! a server starts the `fjord` beside the program as a child process and
//! measures it from outside: `/proc` ([`procfs`]), its `/metrics`, and
//! `fjord load` receivers in this process.
//!
//! The data paths: the datapath experiment ([`run_datapath`]) reproduces
//! the streaming experiment of Halvorsen, Dalseng and Griwodz (2007; seed
//! 004, Figs. 4-5, Table 4) for every data path of the engine
//! ([`fjord_engine::datapath::NAMES`]): a cached file is sliced into RTP
//! packets of each payload size and sent through the path, in the engine's
//! shape (a burst per session per tick, [`workload`]), into a sink that
//! models a NIC with free segmentation offload ([`sink`]). Per path and
//! size: CPU of the sending thread per packet (user, sys), system calls and
//! payload copies per packet ([`copies`]), CPU relative to `read-writev`
//! (the seeds' reference line) and to the path's [`floor`]. The download
//! experiment (Fig. 3, Table 3) is [`download`]. Statistics over
//! repetitions are in [`stats`], output in [`report`].
//!
//! The others: sessions one engine thread keeps on time ([`capacity`]); a
//! media disk's bandwidth, IOPS and latency ([`disk`]); sessions on time
//! from a library larger than memory on a slow disk ([`storage`]); HTTP
//! downloads beside nginx ([`http`]); server CPU per packet beside
//! live555, GStreamer and the kernel floor, and an idle server thread by
//! thread ([`peers`]); an edge of an S3 origin ([`edge`]); a cluster of
//! edges in network namespaces with etcd and a SeaweedFS origin
//! ([`cluster`]); session churn for hours ([`soak`]); periodic
//! broadcasting schemes, simulated ([`broadcast`]). The test title is
//! [`clip`]'s, the plots share [`chart`].
//!
//! The system calls these share with the server and with `fjord load` are
//! theirs, not copies: `UDP_SEGMENT` sends and zero-copy completions are
//! [`fjord_engine::datapath::cmsg`], the receivers' epoll and `recvmmsg`
//! [`fjord_client::recv`].

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod broadcast;
pub mod capacity;
pub mod chart;
pub mod clip;
pub mod cluster;
pub mod copies;
pub mod cpu;
pub mod disk;
pub mod download;
pub mod edge;
pub mod floor;
pub mod http;
pub mod https;
pub mod live;
pub mod peers;
pub mod procfs;
pub mod report;
pub mod sink;
pub mod soak;
pub mod stats;
pub mod storage;
pub mod workload;

use std::{collections::BTreeSet, path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use fjord_engine::datapath;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{
    floor::FloorKind,
    sink::{Sink, SinkChoice},
    stats::Summary,
    workload::{MediaFile, Sample, Sessions},
};

/// The reference line of the seeds' Fig. 5.
pub const REFERENCE: &str = "read-writev";

/// What to run.
#[derive(Clone, Debug)]
pub struct DatapathConfig {
    /// RTP payload sizes.
    pub sizes: Vec<usize>,
    /// Data paths, by name.
    pub paths: Vec<String>,
    /// File size: bytes streamed per cell.
    pub bytes: u64,
    pub reps: usize,
    /// Packets per session per tick.
    pub burst: usize,
    pub sessions: usize,
    pub out: PathBuf,
    pub sink: SinkChoice,
    /// Also run the floors.
    pub floors: bool,
    /// Paths that send prefabricated packets get them (as from a title
    /// ingested with them); false: every path builds its headers.
    pub prefab: bool,
    /// Also run the download experiment.
    pub download: bool,
    /// Show a progress bar.
    pub progress: bool,
    /// Where the temporary media file goes (the system's temp dir if None).
    pub tmpdir: Option<PathBuf>,
}

impl Default for DatapathConfig {
    fn default() -> Self {
        Self {
            sizes: vec![256, 512, 1024, 1316, 1456],
            paths: datapath::NAMES.iter().map(|s| s.to_string()).collect(),
            bytes: 1 << 30,
            reps: 5,
            burst: 32,
            sessions: 8,
            out: PathBuf::from("bench-out"),
            sink: SinkChoice::Auto,
            floors: true,
            prefab: true,
            download: false,
            progress: true,
            tmpdir: None,
        }
    }
}

impl DatapathConfig {
    /// Small sizes, bytes and repetitions: seconds, for tests.
    pub fn quick() -> Self {
        Self {
            sizes: vec![256, 1316],
            bytes: 2 << 20,
            reps: 3,
            ..Self::default()
        }
    }
}

/// `all` or a comma-separated list of data path names, checked against
/// the engine's.
pub fn parse_paths(spec: &str) -> anyhow::Result<Vec<String>> {
    if spec.trim() == "all" {
        return Ok(datapath::NAMES.iter().map(|s| s.to_string()).collect());
    }
    spec.split(',')
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            if datapath::NAMES.contains(&s) {
                Ok(s.to_string())
            } else {
                bail!(
                    "unknown data path {s:?}; choose all or some of {}",
                    datapath::NAMES.join(", ")
                )
            }
        })
        .collect()
}

/// `1G`, `256M`, `64k`, `1000` (binary multiples).
pub fn parse_bytes(s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1u64 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                _ => bail!("unknown unit in {s:?} (use k, M or G)"),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("bad size {s:?}"))?;
    if n.is_nan() || n <= 0.0 {
        bail!("size must be positive: {s:?}");
    }
    Ok((n * mult as f64) as u64)
}

/// The samples of one (path or floor, size) cell.
#[derive(Clone, Debug)]
pub struct Cell {
    pub name: String,
    pub size: usize,
    pub floor: Option<FloorKind>,
    pub samples: Vec<Sample>,
    pub error: Option<String>,
}

/// What a streaming (and download) run produced.
#[derive(Debug)]
pub struct Results {
    pub sink: String,
    pub sink_short: &'static str,
    pub config: DatapathConfig,
    pub cells: Vec<Cell>,
    pub download: Vec<Cell>,
    pub elapsed: Duration,
}

fn progress_bar(total: u64, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} cells, eta {eta}  {msg}",
        )
        .unwrap(),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Runs the streaming experiment (and the download one if asked) and
/// returns every sample. Cells are interleaved (repetition outermost) so
/// slow drift of the machine spreads over all paths alike.
pub fn run_datapath(cfg: &DatapathConfig) -> anyhow::Result<Results> {
    let streaming = !cfg.paths.is_empty();
    if cfg.sizes.is_empty() || !(streaming || cfg.download) || cfg.reps == 0 {
        bail!("nothing to run: no sizes, paths or repetitions");
    }
    if cfg.burst == 0 || cfg.sessions == 0 {
        bail!("burst and sessions must be at least 1");
    }
    if let Some(&s) = cfg
        .sizes
        .iter()
        .find(|&&s| s == 0 || (streaming && s > 1456))
    {
        bail!("payload size {s} outside 1..=1456 (MTU 1500 less RTP/UDP/IP headers)");
    }
    let t0 = std::time::Instant::now();
    // Download only: no sink (TCP goes over loopback).
    let sink = if streaming {
        Some(Sink::create(cfg.sink).context("making the sink")?)
    } else {
        None
    };
    let media = MediaFile::create(cfg.bytes, cfg.tmpdir.as_deref()).context("media file")?;
    let prefab_paths = cfg
        .paths
        .iter()
        .any(|p| datapath::by_name(p).is_some_and(|p| p.prefabricated()));
    let mut packet_files = std::collections::BTreeMap::new();
    if cfg.prefab && prefab_paths {
        for &size in &cfg.sizes {
            let f = workload::PacketFile::create(&media, size, cfg.tmpdir.as_deref())
                .context("packet file")?;
            packet_files.insert(size, f);
        }
    }
    let mut floors: BTreeSet<FloorKind> = if cfg.floors {
        cfg.paths.iter().map(|p| floor::floor_of(p)).collect()
    } else {
        BTreeSet::new()
    };
    // Beside the gso floor, the same call in the gso paths' iovec shape.
    if floors.contains(&FloorKind::Gso) {
        floors.insert(FloorKind::GsoIov);
    }
    let mut cells: Vec<Cell> = Vec::new();
    for &size in cfg.sizes.iter().filter(|_| streaming) {
        for p in &cfg.paths {
            cells.push(Cell {
                name: p.clone(),
                size,
                floor: None,
                samples: vec![],
                error: None,
            });
        }
        for &f in &floors {
            cells.push(Cell {
                name: f.name().to_string(),
                size,
                floor: Some(f),
                samples: vec![],
                error: None,
            });
        }
    }
    let n_download = if cfg.download {
        (download::METHODS.len() - 1) * cfg.sizes.len() + 1
    } else {
        0
    };
    let pb = progress_bar(
        (cells.len() * cfg.reps + n_download * cfg.reps) as u64,
        cfg.progress,
    );
    if let Some(sink) = &sink {
        pb.println(format!("sink: {}", sink.describe()));
    }
    for rep in 0..cfg.reps {
        let Some(sink) = &sink else { break };
        let shared = sink.unconnected_socket()?;
        // sendmmsg aggregates the sessions that share a socket: as the
        // server runs it (`udp_sockets = "shared"`), all from one
        // unconnected socket.
        let aggregated = sink.unconnected_socket()?;
        datapath::prepare_shared(&aggregated)?;
        for cell in cells.iter_mut() {
            pb.set_message(format!(
                "rep {}/{} {} {} B",
                rep + 1,
                cfg.reps,
                cell.name,
                cell.size
            ));
            if cell.error.is_none() {
                let sessions = Sessions {
                    sockets: sink.session_sockets(cfg.sessions)?,
                    dests: (0..cfg.sessions).map(|i| sink.dest(i)).collect(),
                };
                let r = match cell.floor {
                    Some(kind) => {
                        floor::run(kind, &media, cell.size, &sessions, &shared, cfg.burst)
                    }
                    None => match datapath::by_name(&cell.name) {
                        Some(mut path) => {
                            let packets = packet_files.get(&cell.size);
                            workload::stream(
                                path.as_mut(),
                                &media,
                                packets,
                                cell.size,
                                &sessions,
                                (cell.name == "sendmmsg").then_some(&aggregated),
                                cfg.burst,
                            )
                        }
                        None => Err(anyhow::anyhow!("no data path {:?}", cell.name)),
                    },
                };
                match r {
                    Ok(s) => cell.samples.push(s),
                    Err(e) => {
                        pb.println(format!("{} at {} B: {e:#} (skipped)", cell.name, cell.size));
                        cell.error = Some(format!("{e:#}"));
                    }
                }
            }
            pb.inc(1);
        }
    }
    let mut dl: Vec<Cell> = Vec::new();
    if cfg.download {
        for m in download::METHODS {
            // sendfile-whole ignores the size: one cell.
            let sizes = if *m == "sendfile-whole" {
                &cfg.sizes[..1]
            } else {
                &cfg.sizes[..]
            };
            for &size in sizes {
                dl.push(Cell {
                    name: m.to_string(),
                    size,
                    floor: None,
                    samples: vec![],
                    error: None,
                });
            }
        }
        for rep in 0..cfg.reps {
            for cell in dl.iter_mut() {
                pb.set_message(format!(
                    "download rep {}/{} {} {} B",
                    rep + 1,
                    cfg.reps,
                    cell.name,
                    cell.size
                ));
                if cell.error.is_none() {
                    match download::run(&cell.name, &media, cell.size) {
                        Ok(s) => cell.samples.push(s),
                        Err(e) => cell.error = Some(format!("{e:#}")),
                    }
                }
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    Ok(Results {
        sink: sink
            .as_ref()
            .map_or_else(|| "none (download only)".into(), Sink::describe),
        sink_short: sink.as_ref().map_or("none", Sink::short_name),
        config: cfg.clone(),
        cells,
        download: dl,
        elapsed: t0.elapsed(),
    })
}

/// One summarised line of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub size: usize,
    pub reps: usize,
    /// Packets per repetition (bytes for download rows).
    pub packets: u64,
    /// CPU ns per packet (per MB for download rows).
    pub cpu: Option<Summary>,
    pub user: f64,
    pub sys: f64,
    pub syscalls: f64,
    pub copies: Option<f64>,
    pub vs_reference: Option<f64>,
    pub floor: Option<String>,
    pub vs_floor: Option<f64>,
    pub error: Option<String>,
}

fn median_of(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    stats::median(&samples.iter().map(f).collect::<Vec<_>>())
}

/// Summarises the streaming cells: paths first (in the order asked), then
/// floors, each by size.
pub fn summarise(results: &Results) -> Vec<Row> {
    let median_cpu = |name: &str, size: usize| -> Option<f64> {
        results
            .cells
            .iter()
            .find(|c| c.name == name && c.size == size && !c.samples.is_empty())
            .map(|c| median_of(&c.samples, Sample::ns_per_packet))
    };
    let mut rows: Vec<Row> = results
        .cells
        .iter()
        .map(|c| {
            let cpu = Summary::of(
                &c.samples
                    .iter()
                    .map(Sample::ns_per_packet)
                    .collect::<Vec<_>>(),
            );
            let floor = c
                .floor
                .is_none()
                .then(|| floor::floor_of(&c.name).name().to_string());
            let vs = |other: Option<f64>| match (cpu, other) {
                (Some(s), Some(o)) if o > 0.0 => Some(s.median / o),
                _ => None,
            };
            let copies = match c.floor {
                Some(FloorKind::GsoZerocopy) => c.samples.first().map(|_| {
                    let done: u64 = c.samples.iter().map(|s| s.zerocopy_done).sum();
                    let copied: u64 = c.samples.iter().map(|s| s.zerocopy_copied).sum();
                    if done == 0 {
                        0.0
                    } else {
                        copied as f64 / done as f64
                    }
                }),
                Some(k) => Some(k.copies()),
                None => {
                    let total = c.samples.iter().fold(Sample::default(), |mut a, s| {
                        a.zerocopy_done += s.zerocopy_done;
                        a.zerocopy_copied += s.zerocopy_copied;
                        a
                    });
                    copies::per_packet(&c.name, &total)
                }
            };
            Row {
                name: c.name.clone(),
                size: c.size,
                reps: c.samples.len(),
                packets: c.samples.first().map_or(0, |s| s.packets),
                cpu,
                user: median_of(&c.samples, Sample::user_ns_per_packet),
                sys: median_of(&c.samples, Sample::sys_ns_per_packet),
                syscalls: median_of(&c.samples, Sample::syscalls_per_packet),
                copies,
                vs_reference: vs(median_cpu(REFERENCE, c.size)),
                vs_floor: floor.as_deref().and_then(|f| vs(median_cpu(f, c.size))),
                floor,
                error: c.error.clone(),
            }
        })
        .collect();
    // Paths in the order asked, then floors; by size inside each.
    let order = |r: &Row| {
        results
            .config
            .paths
            .iter()
            .position(|p| *p == r.name)
            .unwrap_or(
                usize::MAX / 2
                    + FloorKind::ALL
                        .iter()
                        .position(|f| f.name() == r.name)
                        .unwrap_or(9),
            )
    };
    rows.sort_by_key(|r| (order(r), r.size));
    rows
}

/// Summarises the download cells: CPU ns per MB (1e6 bytes) and calls per MB.
pub fn summarise_download(results: &Results) -> Vec<Row> {
    let per_mb = |s: &Sample| s.cpu.total().as_nanos() as f64 / (s.packets as f64 / 1e6);
    let rw = |size: usize| {
        results
            .download
            .iter()
            .find(|c| c.name == "read-write" && c.size == size && !c.samples.is_empty())
            .map(|c| median_of(&c.samples, per_mb))
    };
    results
        .download
        .iter()
        .map(|c| {
            let cpu = Summary::of(&c.samples.iter().map(per_mb).collect::<Vec<_>>());
            Row {
                name: c.name.clone(),
                size: c.size,
                reps: c.samples.len(),
                packets: c.samples.first().map_or(0, |s| s.packets),
                cpu,
                user: median_of(&c.samples, |s| {
                    s.cpu.user.as_nanos() as f64 / (s.packets as f64 / 1e6)
                }),
                sys: median_of(&c.samples, |s| {
                    s.cpu.sys.as_nanos() as f64 / (s.packets as f64 / 1e6)
                }),
                syscalls: median_of(&c.samples, |s| s.syscalls as f64 / (s.packets as f64 / 1e6)),
                copies: Some(download::copies(&c.name)),
                vs_reference: match (cpu, rw(c.size)) {
                    (Some(s), Some(o)) if o > 0.0 => Some(s.median / o),
                    _ => None,
                },
                floor: None,
                vs_floor: None,
                error: c.error.clone(),
            }
        })
        .collect()
}

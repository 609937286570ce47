//! `fjord bench cluster`: a cluster of edges in front of a distributed
//! object store, with and without content-affine routing.
//!
//! `--nodes` fjord nodes (3; up to 5), each in a network namespace of its
//! own behind a veth pair rate limited with `tbf` ([`net`]), members of
//! one etcd; their origin is SeaweedFS with three volume servers and
//! replication `002` (every object on all three; [`procs`]), a library of
//! `--titles` small titles published to it with `fjord publish`. Viewers
//! ([`viewer`]) arrive `--gap-ms` apart at a uniformly chosen entry node,
//! each asking for a title of Zipf(`--zipf`) popularity ([`plan`]), follow
//! the `302` to its home node and play it to its end.
//!
//! Three phases, each on fresh caches unless said:
//! 1. **routed**: the cluster; one volume server is killed halfway through
//!    the arrivals (no viewer should notice: the others hold replicas).
//! 2. **failover**: the same nodes (warm), a new plan; node 1 is killed at
//!    40 % of the arrivals; its viewers reconnect (at an entry node, with
//!    `Range` from their position).
//! 3. **alone**: the same plan as 1 on nodes without a cluster (each caches
//!    what it is asked for).
//!
//! Reported ([`report`]): origin bytes over the distinct bytes played
//! (titles played × their published bytes) for 1 and 3; sessions per node
//! (busiest / mean); time to first packet of redirected and direct
//! viewers; how long after the kill each lost viewer played again; the
//! spread of packet arrivals (a stall shows as its length) of the viewers
//! around each kill beside the others.

pub mod library;
pub mod net;
pub mod node;
pub mod plan;
pub mod procs;
pub mod report;
pub mod viewer;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use node::Node;
use viewer::{Ask, Outcome};

/// What to run.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub nodes: usize,
    pub titles: usize,
    pub title_mb: u64,
    pub library_cache: PathBuf,
    /// Viewers of phases 1 and 3, and of phase 2.
    pub sessions: usize,
    pub failover_sessions: usize,
    pub gap: Duration,
    pub zipf: f64,
    /// Each veth end's rate, Mbit/s.
    pub mbit: u32,
    pub ttl_s: u32,
    pub hot_rps: f64,
    pub balance_pct: u32,
    pub copy_share_pct: u32,
    pub seed: u64,
    pub fjord_exe: PathBuf,
    /// Keep the scratch directory (logs, configs) and say where.
    pub keep: bool,
}

/// One phase's viewers and what the nodes fetched.
#[derive(Debug, Default, Serialize)]
pub struct Phase {
    pub viewers: Vec<Outcome>,
    /// Bytes each node fetched from the origin.
    pub origin_bytes: Vec<u64>,
    /// Of them, the index's and packets' (what `distinct_bytes` counts:
    /// not the parity header and checksums an edge reads at open).
    pub origin_played_bytes: Vec<u64>,
    /// Bytes an edge fetches to send each title played, once
    /// ([`library::played_bytes`]).
    pub distinct_bytes: u64,
    /// When the phase's kill came, s from its start.
    pub kill_at_s: Option<f64>,
}

/// What a run measured.
#[derive(Debug, Default, Serialize)]
pub struct ClusterReport {
    pub command: String,
    pub nodes: usize,
    pub titles: usize,
    pub library_bytes: u64,
    pub library: String,
    pub mbit: u32,
    pub ttl_s: u32,
    pub hot_rps: f64,
    pub balance_pct: u32,
    pub copy_share_pct: u32,
    pub gap_ms: f64,
    /// A title's length, s (about: they differ by a few ms).
    pub title_s: f64,
    pub publish_s: f64,
    pub routed: Phase,
    pub failover: Phase,
    pub alone: Phase,
}

/// Runs the benchmark.
pub fn run(cfg: &ClusterConfig, command: &str) -> anyhow::Result<ClusterReport> {
    if !(2..=5).contains(&cfg.nodes) || cfg.sessions == 0 || cfg.titles == 0 {
        bail!("--nodes must be 2 to 5, --sessions and --titles positive");
    }
    let lib = library::made(&cfg.library_cache, cfg.titles, cfg.title_mb, &cfg.fjord_exe)?;
    let mut scratch = tempfile::Builder::new()
        .prefix("fjord-bench-cluster")
        .tempdir_in("/var/tmp")?;
    if cfg.keep {
        scratch.disable_cleanup(true);
        eprintln!("logs and configs in {}", scratch.path().display());
    }
    // Ctrl-C: no namespace, process or store's data outlives the run.
    let (dir, keep) = (scratch.path().to_owned(), cfg.keep);
    let _ = ctrlc::set_handler(move || {
        procs::kill_all();
        net::remove(5);
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::process::exit(130);
    });
    let _net = net::ClusterNet::create(cfg.nodes, cfg.mbit)?;
    let mut store = procs::Store::start(&procs::weed()?, &scratch.path().join("store"))?;
    let publish_s = publish(cfg, &lib, &store.endpoint)?;
    let (_etcd, etcd) = procs::etcd(scratch.path(), 12379)?;
    let member = node::Cluster {
        etcd: &etcd,
        ttl_s: cfg.ttl_s,
        hot_rps: cfg.hot_rps,
        balance_pct: cfg.balance_pct,
        copy_share_pct: cfg.copy_share_pct,
    };
    let plan = plan::plan(
        cfg.sessions,
        cfg.gap.as_secs_f64(),
        cfg.titles,
        cfg.zipf,
        cfg.nodes,
        cfg.seed,
    );
    let dir = scratch.path().join("routed");
    let mut nodes = start_nodes(cfg, &dir, &store.endpoint, Some(&member))?;
    node::wait_members(&nodes, cfg.nodes)?;
    eprintln!(
        "phase 1: routed, {} viewers; a volume server killed halfway",
        plan.len()
    );
    let half = plan.last().map_or(0.0, |a| a.at_s) / 2.0;
    let routed = phase(&lib, &mut nodes, &plan, half, &mut |_| {
        store.volumes[1].kill()
    })?;
    store.restart_volume(1)?;
    let plan2 = plan::plan(
        cfg.failover_sessions,
        cfg.gap.as_secs_f64(),
        cfg.titles,
        cfg.zipf,
        cfg.nodes,
        cfg.seed + 1,
    );
    eprintln!(
        "phase 2: failover, {} viewers; node 1 killed at 40 %",
        plan2.len()
    );
    let at = plan2.last().map_or(0.0, |a| a.at_s) * 0.4;
    let failover = phase(&lib, &mut nodes, &plan2, at, &mut |n| n[0].proc.kill())?;
    drop(nodes);
    eprintln!("phase 3: alone, {} viewers", plan.len());
    let mut nodes = start_nodes(cfg, &scratch.path().join("alone"), &store.endpoint, None)?;
    let alone = phase(&lib, &mut nodes, &plan, f64::INFINITY, &mut |_| {})?;
    Ok(ClusterReport {
        command: command.to_owned(),
        nodes: cfg.nodes,
        titles: lib.titles.len(),
        library_bytes: lib.titles.iter().map(library::published_bytes).sum(),
        library: lib.origin.clone(),
        mbit: cfg.mbit,
        ttl_s: cfg.ttl_s,
        hot_rps: cfg.hot_rps,
        balance_pct: cfg.balance_pct,
        copy_share_pct: cfg.copy_share_pct,
        gap_ms: cfg.gap.as_secs_f64() * 1e3,
        title_s: crate::storage::library::seconds_of(cfg.title_mb),
        publish_s,
        routed,
        failover,
        alone,
    })
}

fn start_nodes(
    cfg: &ClusterConfig,
    dir: &std::path::Path,
    endpoint: &str,
    member: Option<&node::Cluster>,
) -> anyhow::Result<Vec<Node>> {
    std::fs::create_dir_all(dir)?;
    (0..cfg.nodes)
        .map(|i| Node::start(&cfg.fjord_exe, dir, i, endpoint, member))
        .collect()
}

/// The origin parts a title is played from (the index and packets),
/// as `/metrics` names their bytes.
const PLAYED_PARTS: [&str; 2] = [
    "fjord_origin_part_bytes_total{part=\"index\"}",
    "fjord_origin_part_bytes_total{part=\"packets\"}",
];

/// Plays `plan` against `nodes`, calling `kill` once at `kill_at_s`.
fn phase(
    lib: &crate::storage::library::Library,
    nodes: &mut [Node],
    plan: &[plan::Arrival],
    kill_at_s: f64,
    kill: &mut dyn FnMut(&mut [Node]),
) -> anyhow::Result<Phase> {
    let entries: Arc<Vec<String>> = Arc::new(nodes.iter().map(|n| n.url.clone()).collect());
    let fetched = |n: &Node| -> [f64; 2] {
        let played = PLAYED_PARTS.iter().map(|p| n.value(p).unwrap_or(0.0)).sum();
        [n.value("fjord_origin_bytes_total").unwrap_or(0.0), played]
    };
    let before: Vec<[f64; 2]> = nodes.iter().map(fetched).collect();
    let t0 = Instant::now();
    let out = Arc::new(Mutex::new(Vec::with_capacity(plan.len())));
    let mut threads = Vec::with_capacity(plan.len());
    let mut killed = None;
    for a in plan {
        let at =
            |s: f64| (t0 + Duration::from_secs_f64(s)).saturating_duration_since(Instant::now());
        if killed.is_none() && a.at_s >= kill_at_s {
            std::thread::sleep(at(kill_at_s));
            kill(nodes);
            killed = Some(t0.elapsed().as_secs_f64());
        }
        std::thread::sleep(at(a.at_s));
        let title = &lib.titles[a.title];
        let ask = Ask {
            title: title.name.clone(),
            entry: a.entry,
            seconds: title.bytes as f64 * 8.0 / crate::storage::library::MUX_RATE as f64,
        };
        let (entries, out) = (Arc::clone(&entries), Arc::clone(&out));
        threads.push(std::thread::spawn(move || {
            let o = viewer::watch(&entries, &ask, t0);
            out.lock().unwrap_or_else(|e| e.into_inner()).push(o);
        }));
    }
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a viewer thread panicked"))?;
    }
    let after: Vec<[f64; 2]> = nodes.iter().map(fetched).collect();
    let grown = |i: usize| -> Vec<u64> {
        (after.iter().zip(&before))
            .map(|(a, b)| (a[i] - b[i]).max(0.0) as u64)
            .collect()
    };
    let (origin_bytes, origin_played_bytes) = (grown(0), grown(1));
    let mut viewers = std::mem::take(&mut *out.lock().unwrap_or_else(|e| e.into_inner()));
    viewers.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let mut played: Vec<&str> = viewers
        .iter()
        .filter(|v| v.packets > 0)
        .map(|v| v.title.as_str())
        .collect();
    played.sort_unstable();
    played.dedup();
    let distinct_bytes = (lib.titles.iter())
        .filter(|t| played.binary_search(&t.name.as_str()).is_ok())
        .map(library::played_bytes)
        .sum();
    Ok(Phase {
        viewers,
        origin_bytes,
        origin_played_bytes,
        distinct_bytes,
        kill_at_s: killed,
    })
}

/// `fjord publish` of every title to `s3://bench/lib`; seconds it took.
fn publish(
    cfg: &ClusterConfig,
    lib: &crate::storage::library::Library,
    endpoint: &str,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let status = Command::new(&cfg.fjord_exe)
        .args(["publish", "--endpoint", endpoint])
        .args(lib.titles.iter().map(|t| &t.path))
        .arg("s3://bench/lib")
        .env("AWS_ACCESS_KEY_ID", "fjordbench")
        .env("AWS_SECRET_ACCESS_KEY", "fjord-bench-secret")
        .stdout(Stdio::null())
        .status()
        .context("running fjord publish")?;
    if !status.success() {
        bail!("fjord publish failed ({status})");
    }
    let s = started.elapsed().as_secs_f64();
    eprintln!("published {} titles in {s:.1} s", lib.titles.len());
    Ok(s)
}

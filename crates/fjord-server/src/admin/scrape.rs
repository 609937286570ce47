//! `/metrics` in the Prometheus text format: the control plane's counters
//! ([`crate::metrics`]) and what the engine threads, sessions, connections
//! and storage layer report when scraped, in a registry made per scrape.

use std::{collections::BTreeMap, sync::Arc};

use axum::{extract::State, http::header, response::IntoResponse};
use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use std::sync::atomic::AtomicU64;

use super::snapshot;
use crate::Server;

pub(super) type Labels = Vec<(&'static str, String)>;

pub(crate) async fn metrics(State(server): State<Arc<Server>>) -> impl IntoResponse {
    let mut reg = Registry::default();
    server.metrics.register(&mut reg);
    engine(&mut reg, &server).await;
    sessions(&mut reg, &server).await;
    connections(&mut reg, &server);
    storage(&mut reg, &server);
    if let Some(edge) = server.catalog.edge() {
        super::origin::metrics(&mut reg, edge.cache());
    }
    super::cluster::metrics(&mut reg, &server);
    heap(&mut reg);
    let mut text = String::new();
    if let Err(e) = encode(&mut text, &reg) {
        tracing::error!("cannot encode the metrics: {e}");
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text_format(&text),
    )
}

/// prometheus-client writes OpenMetrics only; Prometheus' text format
/// 0.0.4, which every scraper and `promtool check metrics` reads, names a
/// counter's family as its samples (`x_total`, not `x`) and has no `# EOF`.
fn text_format(open_metrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = (open_metrics.lines())
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len() + 64 * counters.len());
    for line in open_metrics.lines().filter(|l| *l != "# EOF") {
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find(|p| line.starts_with(p));
        match meta.map(|p| {
            (
                p,
                line[p.len()..]
                    .split_once(' ')
                    .unwrap_or((&line[p.len()..], "")),
            )
        }) {
            Some((p, (name, rest))) if counters.contains(name) => {
                out.push_str(&format!("{p}{name}_total {rest}\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

pub(super) fn counter(
    reg: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, u64)>,
) {
    let f = Family::<Labels, Counter>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).inc_by(v);
    }
    reg.register(name, help, f);
}

pub(super) fn seconds(
    reg: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, f64)>,
) {
    let f = Family::<Labels, Counter<f64, AtomicU64>>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).inc_by(v);
    }
    reg.register(name, help, f);
}

pub(super) fn gauge(
    reg: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, i64)>,
) {
    let f = Family::<Labels, Gauge>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).set(v);
    }
    reg.register(name, help, f);
}

async fn engine(reg: &mut Registry, server: &Arc<Server>) {
    let threads = snapshot::threads(server).await;
    let per = |f: fn(&fjord_engine::ThreadStats) -> u64| -> Vec<(Labels, u64)> {
        (threads.iter().enumerate())
            .map(|(i, t)| (vec![("thread", i.to_string())], f(t)))
            .collect()
    };
    counter(
        reg,
        "fjord_packets_sent",
        "Media RTP packets sent",
        per(|t| t.packets),
    );
    counter(
        reg,
        "fjord_payload_bytes_sent",
        "RTP payload bytes of the media packets sent",
        per(|t| t.bytes),
    );
    counter(
        reg,
        "fjord_repair_packets_sent",
        "FEC repair packets sent",
        per(|t| t.repair_packets),
    );
    counter(
        reg,
        "fjord_late_packets",
        "Packets that left more than 2 ms after their schedule",
        per(|t| t.late),
    );
    let causes = (threads.iter().enumerate()).flat_map(|(i, t)| {
        let named = t.late_woke + t.late_busy + t.late_storage + t.late_socket;
        [
            ("woke_late", t.late_woke),
            ("busy", t.late_busy),
            ("storage", t.late_storage),
            ("socket", t.late_socket),
            ("held", t.late.saturating_sub(named)),
        ]
        .map(|(cause, v)| (vec![("thread", i.to_string()), ("cause", cause.into())], v))
    });
    counter(
        reg,
        "fjord_late_packets_by_cause",
        "Late packets by why: their tick began late as the thread woke late (the kernel or hypervisor) or was busy with earlier work, or their session held them: waiting for the storage layer, for a full socket, or held for no known reason",
        causes,
    );
    counter(
        reg,
        "fjord_datapath_packets",
        "Packets the UDP data path sent (media and repair; TCP interleaved not included)",
        per(|t| t.datapath.packets),
    );
    counter(
        reg,
        "fjord_datapath_send_calls",
        "System calls the UDP data path made to send them: packets per call is the burst the kernel saw",
        per(|t| t.datapath.syscalls),
    );
    counter(
        reg,
        "fjord_not_ready_packets",
        "Times a session's next packet was not resident yet (the storage layer was reading it)",
        per(|t| t.not_ready),
    );
    gauge(
        reg,
        "fjord_engine_sessions",
        "Engine streams on each thread",
        (per(|t| t.sessions as u64).into_iter()).map(|(l, v)| (l, v as i64)),
    );
    seconds(
        reg,
        "fjord_engine_cpu_seconds",
        "CPU time of each engine thread, user and system",
        (threads.iter().enumerate()).map(|(i, t)| {
            (
                vec![("thread", i.to_string())],
                (t.user + t.system).as_secs_f64(),
            )
        }),
    );
    let lag = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (i, t) in threads.iter().enumerate() {
        lag.get_or_create(&vec![("thread", i.to_string())])
            .set(t.max_late.as_secs_f64());
    }
    reg.register(
        "fjord_engine_max_lateness_seconds",
        "The latest any packet left after its schedule since the start (wheel lag)",
        lag,
    );
    let (loads, capacity) = {
        let core = server.core.lock();
        let admission = &core.sessions.admission;
        (admission.loads(), admission.capacity())
    };
    let promised =
        (loads.iter().enumerate()).map(|(i, &l)| (vec![("thread", i.to_string())], l as i64));
    gauge(
        reg,
        "fjord_engine_promised_pps",
        "Packets per second admission has promised on each engine thread",
        promised,
    );
    if let Some(cap) = capacity {
        gauge(
            reg,
            "fjord_engine_capacity_pps",
            "Packets per second one engine thread may promise",
            [(vec![], cap as i64)],
        );
    }
}

async fn sessions(reg: &mut Registry, server: &Server) {
    let mut by: BTreeMap<Labels, u64> = BTreeMap::new();
    for s in snapshot::sessions(server).await {
        let labels = vec![
            ("state", s.state.to_owned()),
            ("transport", s.transport.to_owned()),
            ("format", s.format),
        ];
        *by.entry(labels).or_default() += 1;
    }
    gauge(
        reg,
        "fjord_sessions",
        "RTSP sessions by state, transport and title format",
        by.into_iter().map(|(l, n)| (l, n as i64)),
    );
    gauge(
        reg,
        "fjord_titles_loaded",
        "Titles loaded (played since they last changed)",
        [(vec![], server.catalog.loaded().len() as i64)],
    );
    let repair = server.catalog.needing_repair().len() as i64;
    gauge(
        reg,
        "fjord_titles_needing_repair",
        "Titles a file of which failed to read while playing (run fjord repair)",
        [(vec![], repair)],
    );
    let (incremental, whole) = server.catalog.growing().snapshots();
    let planned = |how: &str| vec![("planned", how.to_owned())];
    counter(
        reg,
        "fjord_recording_snapshots",
        "Snapshots of growing recordings made, by how: incremental (only the fragments \
         since the last), whole (the whole prefix)",
        [
            (planned("incremental"), incremental),
            (planned("whole"), whole),
        ],
    );
    let jobs = server.catalog.pending_jobs() as i64;
    gauge(
        reg,
        "fjord_ingest_jobs",
        "Titles waiting for or in background work: verification, parity, packet files",
        [(vec![], jobs)],
    );
}

fn connections(reg: &mut Registry, server: &Server) {
    gauge(
        reg,
        "fjord_connections",
        "RTSP and HTTP connections open",
        [(vec![], server.slots.open() as i64)],
    );
    let [full, address] = server.slots.refused();
    counter(
        reg,
        "fjord_connections_refused",
        "Connections closed at once: at max_connections (server) or max_connections_per_address (address)",
        [
            (vec![("limit", "server".to_owned())], full),
            (vec![("limit", "address".to_owned())], address),
        ],
    );
}

/// What the server's code holds (counted as it allocates), and what the
/// allocator holds (glibc's `mallinfo2`, summed over its arenas): beside
/// the process's RssAnon they tell a leak (live grows) from memory the
/// allocator keeps (allocated or retained grow alone).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap(reg: &mut Registry) {
    if let Some(live) = crate::heap_count::live_bytes() {
        gauge(
            reg,
            "fjord_heap_live_bytes",
            "Heap memory the server's code holds (counted at each allocation and free)",
            [(vec![], live as i64)],
        );
    }
    // SAFETY: mallinfo2 takes no arguments and only reads the allocator's
    // state under its arena locks.
    let m = unsafe { libc::mallinfo2() };
    gauge(
        reg,
        "fjord_heap_allocated_bytes",
        "Heap memory the allocator counts in use (the live bytes, chunk headers, its per-thread caches; mmapped blocks included)",
        [(vec![], (m.uordblks + m.hblkhd) as i64)],
    );
    gauge(
        reg,
        "fjord_heap_retained_bytes",
        "Freed heap memory the allocator keeps for reuse",
        [(vec![], m.fordblks as i64)],
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap(_: &mut Registry) {}

fn storage(reg: &mut Registry, server: &Server) {
    let Some(st) = server.storage.as_ref().map(|s| s.stats()) else {
        return;
    };
    let one = |v: u64| [(Labels::new(), v)];
    gauge(
        reg,
        "fjord_storage_budget_bytes",
        "Memory the read-ahead may lock",
        [(vec![], st.budget_bytes as i64)],
    );
    gauge(
        reg,
        "fjord_storage_pinned_bytes",
        "Memory the read-ahead holds resident now",
        [(vec![], st.pinned_bytes as i64)],
    );
    gauge(
        reg,
        "fjord_storage_sessions",
        "Sessions the storage layer reads ahead of",
        [(vec![], st.sessions as i64)],
    );
    counter(
        reg,
        "fjord_storage_reads",
        "Read-ahead refills done",
        one(st.reads),
    );
    counter(
        reg,
        "fjord_storage_read_bytes",
        "Bytes the read-ahead refills covered",
        one(st.read_bytes),
    );
    counter(
        reg,
        "fjord_storage_read_errors",
        "Chunks the disk failed to read",
        one(st.read_errors),
    );
    counter(
        reg,
        "fjord_storage_repaired_chunks",
        "Chunks rebuilt from parity after a read error",
        one(st.repaired_chunks),
    );
    counter(
        reg,
        "fjord_storage_late_reads",
        "Refills that finished after their session would have run dry",
        one(st.late_reads),
    );
    counter(
        reg,
        "fjord_storage_budget_waits",
        "Times a refill waited for read-ahead memory",
        one(st.budget_waits),
    );
    counter(
        reg,
        "fjord_storage_bulk_bytes",
        "Bytes bulk work (ingest, parity, packet files, verification) read",
        one(st.bulk_bytes),
    );
    gauge(
        reg,
        "fjord_storage_queue",
        "Disk requests waiting now (refill: sessions' read-ahead, bulk: background work) and being read",
        [
            (vec![("class", "refill".into())], st.queued_reads as i64),
            (vec![("class", "bulk".into())], st.queued_bulk as i64),
            (vec![("class", "reading".into())], st.reading as i64),
        ],
    );
    counter(
        reg,
        "fjord_storage_chunk_hits",
        "Read-ahead chunks found resident for another session of the title (one copy for all)",
        one(st.chunk_hits),
    );
    counter(
        reg,
        "fjord_storage_chunk_reads",
        "Read-ahead chunks that had to be read",
        one(st.chunk_reads),
    );
    gauge(
        reg,
        "fjord_storage_memory_per_session_bytes",
        "Read-ahead memory held now per session the storage layer reads ahead of",
        [(vec![], (st.pinned_bytes / st.sessions.max(1)) as i64)],
    );
    if let Some(s) = &server.storage {
        disks(reg, &s.disk_stats());
    }
}

/// Per disk (`device`: major:minor): promised and measured bandwidth, the
/// refills' queue delay, service time and worst latency, and the lead.
fn disks(reg: &mut Registry, disks: &[fjord_storage::DiskStats]) {
    type Of = fn(&fjord_storage::DiskStats) -> Option<f64>;
    let rows: [(&str, &str, Of); 7] = [
        (
            "fjord_storage_disk_capacity_bytes_per_second",
            "What the disk reads, for admission (streams are promised 80 % of it)",
            |d| d.capacity_bytes_per_s.map(|b| b as f64),
        ),
        (
            "fjord_storage_disk_promised_bytes_per_second",
            "Bandwidth promised to admitted streams",
            |d| Some(d.promised_bytes_per_s as f64),
        ),
        (
            "fjord_storage_disk_read_bytes_per_second",
            "What the refills read over the last 10 s",
            |d| Some(d.measured.bytes_per_s as f64),
        ),
        (
            "fjord_storage_disk_queue_delay_seconds",
            "Mean time a refill waited for a worker over the last 10 s",
            |d| Some(d.measured.mean_queue.as_secs_f64()),
        ),
        (
            "fjord_storage_disk_service_seconds",
            "Mean time a refill took at the disk over the last 10 s",
            |d| Some(d.measured.mean_service.as_secs_f64()),
        ),
        (
            "fjord_storage_disk_worst_latency_seconds",
            "Longest refill (queue and read) over the last 10 s",
            |d| d.measured.worst_latency.map(|w| w.as_secs_f64()),
        ),
        (
            "fjord_storage_disk_lead_seconds",
            "The lead the disk's sessions are refilled at now",
            |d| Some(d.low.as_secs_f64()),
        ),
    ];
    for (name, help, of) in rows {
        let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        for d in disks {
            if let Some(v) = of(d) {
                let dev = format!("{}:{}", libc::major(d.device), libc::minor(d.device));
                f.get_or_create(&vec![("device", dev)]).set(v);
            }
        }
        reg.register(name, help, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_as_their_samples_and_eof_goes() {
        let om = "# HELP a_b Things.\n# TYPE a_b counter\na_b_total{x=\"1\"} 2\n\
                  # HELP g A gauge.\n# TYPE g gauge\ng 3\n# EOF\n";
        assert_eq!(
            text_format(om),
            "# HELP a_b_total Things.\n# TYPE a_b_total counter\na_b_total{x=\"1\"} 2\n\
             # HELP g A gauge.\n# TYPE g gauge\ng 3\n"
        );
    }
}

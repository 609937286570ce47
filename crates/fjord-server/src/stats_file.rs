//! `stats_file`: the server's counters, rewritten every second as one JSON
//! document (temporary file, then rename: a reader never sees half of it),
//! for benchmarks and scripts until the admin listener's metrics exist.

use std::{path::PathBuf, sync::Arc, time::Duration};

use serde_json::json;

use crate::Server;

pub(crate) async fn write_every_second(server: Arc<Server>, path: PathBuf) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let s = server.clone();
        // Engine::stats waits for every engine thread to answer.
        let Ok(doc) = tokio::task::spawn_blocking(move || snapshot(&s)).await else {
            return;
        };
        let tmp = path.with_extension("tmp");
        let written = tokio::fs::write(&tmp, doc.to_string()).await;
        if let Err(e) = written.and(tokio::fs::rename(&tmp, &path).await) {
            tracing::warn!(file = %path.display(), "cannot write the stats file: {e}");
        }
    }
}

fn snapshot(server: &Server) -> serde_json::Value {
    let threads: Vec<_> = server
        .engine
        .stats()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({
                "name": format!("fjord-engine-{i}"),
                "sessions": t.sessions,
                "packets": t.packets,
                "late": t.late,
                "max_late_us": t.max_late.as_micros() as u64,
                "not_ready": t.not_ready,
            })
        })
        .collect();
    let storage = server.storage.as_ref().map(|s| {
        let st = s.stats();
        json!({
            "budget_bytes": st.budget_bytes,
            "pinned_bytes": st.pinned_bytes,
            "reads": st.reads,
            "read_bytes": st.read_bytes,
            "read_errors": st.read_errors,
            "repaired_chunks": st.repaired_chunks,
            "needs_repair": server.catalog.needing_repair(),
            "late_reads": st.late_reads,
            "budget_waits": st.budget_waits,
            "bulk_bytes": st.bulk_bytes,
            "first_reads": st.first_reads,
            "first_read_max_us": st.first_read_max_us,
            "sessions": st.sessions,
            "locked": st.locked,
            "memory_per_session": st.pinned_bytes / st.sessions.max(1),
            "disks": s.disk_stats().iter().map(|d| json!({
                "device": d.device,
                "capacity_bytes_per_s": d.capacity_bytes_per_s,
                "promised_bytes_per_s": d.promised_bytes_per_s,
                "read_bytes_per_s": d.measured.bytes_per_s,
                "queue_delay_us": d.measured.mean_queue.as_micros() as u64,
                "service_us": d.measured.mean_service.as_micros() as u64,
                "worst_latency_us": d.measured.worst_latency.map(|w| w.as_micros() as u64),
                "lead_us": d.low.as_micros() as u64,
            })).collect::<Vec<_>>(),
        })
    });
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    json!({ "unix_ms": unix_ms, "threads": threads, "storage": storage })
}

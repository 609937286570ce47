//! The JSON API (docs/api.md): titles, sessions, engine threads, the
//! storage layer's disks, the throughput history; `DELETE
//! /api/v1/sessions/ID` ends a session.

use std::{collections::BTreeMap, sync::Arc};

use fjord_engine::Title;

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::snapshot::{self, SessionView};
use crate::Server;

type Shared = State<Arc<Server>>;

#[derive(Serialize)]
pub(crate) struct TitleView {
    name: String,
    format: String,
    duration_s: f64,
    tracks: Vec<String>,
    media_bytes: u64,
    /// Sessions of the title now.
    sessions: usize,
}

/// The titles loaded now (played since they last changed) and those
/// sessions play (a title whose parity or packets were made since is
/// loaded afresh by the next client, while its sessions keep theirs).
pub(crate) async fn titles(State(server): Shared) -> Json<Vec<TitleView>> {
    let mut titles: BTreeMap<Arc<str>, Arc<Title>> = server.catalog.loaded().into_iter().collect();
    let mut sessions: BTreeMap<Arc<str>, usize> = BTreeMap::new();
    for s in server.core.lock().sessions.all() {
        titles
            .entry(s.title_name.clone())
            .or_insert_with(|| s.title.clone());
        *sessions.entry(s.title_name.clone()).or_default() += 1;
    }
    let views = (titles.into_iter())
        .map(|(name, t)| {
            let index = t.index();
            TitleView {
                sessions: sessions.get(&name).copied().unwrap_or(0),
                name: name.to_string(),
                format: index.format(),
                duration_s: index.duration_ns() as f64 / 1e9,
                tracks: index.tracks().map(|k| k.encoding().to_owned()).collect(),
                media_bytes: t.media_len(),
            }
        })
        .collect();
    Json(views)
}

pub(crate) async fn sessions(State(server): Shared) -> Json<Vec<SessionView>> {
    Json(snapshot::sessions(&server).await)
}

/// Ends the session as the server would at its end: RTCP BYE on each of
/// its streams, then the streams go and the client's connection closes.
pub(crate) async fn end_session(State(server): Shared, Path(id): Path<String>) -> StatusCode {
    let Some(s) = server.core.lock().sessions.get(&id).map(|s| s.id) else {
        return StatusCode::NOT_FOUND;
    };
    tracing::info!(session = %id, "ended through the admin API");
    server.end_session(s);
    StatusCode::NO_CONTENT
}

pub(crate) async fn threads(State(server): Shared) -> Json<Vec<Value>> {
    let (loads, capacity) = {
        let core = server.core.lock();
        let admission = &core.sessions.admission;
        (admission.loads(), admission.capacity())
    };
    let threads = snapshot::threads(&server).await;
    let views = (threads.iter().enumerate())
        .map(|(i, t)| {
            json!({
                "thread": i,
                "sessions": t.sessions,
                "packets": t.packets,
                "bytes": t.bytes,
                "repair_packets": t.repair_packets,
                "late": t.late,
                "late_woke": t.late_woke,
                "late_busy": t.late_busy,
                "late_storage": t.late_storage,
                "late_socket": t.late_socket,
                "max_late_ms": t.max_late.as_secs_f64() * 1e3,
                "not_ready": t.not_ready,
                "datapath_packets": t.datapath.packets,
                "datapath_send_calls": t.datapath.syscalls,
                "cpu_s": (t.user + t.system).as_secs_f64(),
                "promised_pps": loads.get(i).copied().unwrap_or(0),
                "capacity_pps": capacity,
            })
        })
        .collect();
    Json(views)
}

pub(crate) async fn history(State(server): Shared) -> Json<Value> {
    Json(json!({ "interval_s": 1, "samples": server.history.samples() }))
}

/// The read-ahead's memory and each disk's figures (those of `/metrics`'
/// `fjord_storage_disk_*`); `null` without a storage layer.
pub(crate) async fn disks(State(server): Shared) -> Json<Value> {
    let Some(storage) = &server.storage else {
        return Json(Value::Null);
    };
    let st = storage.stats();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let disks: Vec<Value> = (storage.disk_stats().iter())
        .map(|d| {
            json!({
                "device": format!("{}:{}", libc::major(d.device), libc::minor(d.device)),
                "capacity_bytes_per_s": d.capacity_bytes_per_s,
                "promised_bytes_per_s": d.promised_bytes_per_s,
                "read_bytes_per_s": d.measured.bytes_per_s,
                "queue_delay_ms": ms(d.measured.mean_queue),
                "service_ms": ms(d.measured.mean_service),
                "worst_latency_ms": d.measured.worst_latency.map(ms),
                "lead_s": d.low.as_secs_f64(),
            })
        })
        .collect();
    Json(json!({
        "budget_bytes": st.budget_bytes,
        "pinned_bytes": st.pinned_bytes,
        "sessions": st.sessions,
        "disks": disks,
    }))
}

/// The live streams: path, publisher there or held, viewers, and per
/// track the packets received and lost on the way in.
pub(crate) async fn live(State(server): Shared) -> Json<Value> {
    Json(json!(crate::control::live::report::streams(&server)))
}

//! The admin listener (`admin_bind`, default `127.0.0.1:9090`): a status
//! page at `/`, Prometheus metrics at `/metrics`, and a JSON API under
//! `/api/v1/` (docs/api.md). It runs on axum, on its own port, apart from
//! the RTSP and HTTP listeners: what it serves is small, made on request,
//! and read by operators, not by players. Every figure is read from the
//! engine threads, sessions and storage layer when asked ([`snapshot`]);
//! only the throughput history ([`history`]) is kept, a sample a second.

mod api;
mod history;
mod scrape;
mod snapshot;

use std::sync::Arc;

use axum::{
    Router,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::{delete, get},
};
use tokio::net::TcpListener;

use crate::Server;
pub(crate) use history::{History, sample_every_second};

/// Serves the admin routes until the server stops.
pub(crate) async fn listen(server: Arc<Server>, listener: TcpListener) {
    let app = Router::new()
        .route("/", get(page))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/metrics", get(scrape::metrics))
        .route("/api/v1/titles", get(api::titles))
        .route("/api/v1/sessions", get(api::sessions))
        .route("/api/v1/sessions/{id}", delete(api::end_session))
        .route("/api/v1/threads", get(api::threads))
        .route("/api/v1/history", get(api::history))
        .with_state(server);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!("admin listener stopped: {e}");
    }
}

/// The status page: one file, plain HTML and a small script that reads
/// the JSON API (no build step).
async fn page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("status.html"),
    )
}

//! The admin listener (`admin_bind`, default `127.0.0.1:9090`): a status
//! page at `/`, Prometheus metrics at `/metrics`, and a JSON API under
//! `/api/v1/` (docs/api.md). It runs on axum, on its own port, apart from
//! the RTSP and HTTP listeners: what it serves is small, made on request,
//! and read by operators, not by players. Every figure is read from the
//! engine threads, sessions and storage layer when asked ([`snapshot`]);
//! only the throughput history ([`history`]) is kept, a sample a second.

mod api;
mod cluster;
mod history;
mod host;
mod origin;
mod scrape;
mod snapshot;

use std::sync::Arc;

use std::net::SocketAddr;

use axum::{
    Router,
    extract::{ConnectInfo, Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{delete, get},
};
use fjord_proto::auth::target_path;
use tokio::net::TcpListener;

use crate::{Server, guard::Verdict};
pub(crate) use history::{History, sample_every_second};

/// Serves the admin routes until the server stops.
pub(crate) async fn listen(server: Arc<Server>, listener: TcpListener) {
    let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let app = Router::new()
        .route("/", get(page))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/metrics", get(scrape::metrics))
        .route("/api/v1/titles", get(api::titles))
        .route("/api/v1/sessions", get(api::sessions))
        .route("/api/v1/sessions/{id}", delete(api::end_session))
        .route("/api/v1/threads", get(api::threads))
        .route("/api/v1/history", get(api::history))
        .route("/api/v1/disks", get(api::disks))
        .route("/api/v1/live", get(api::live))
        .route("/api/v1/cluster", get(cluster::status))
        .layer(middleware::from_fn_with_state(
            (server.clone(), loopback),
            guard,
        ))
        .layer(middleware::from_fn_with_state(server.clone(), host::named))
        .with_state(server);
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!("admin listener stopped: {e}");
    }
}

/// With `[[user]]` tables, only users with `admin = true` pass: by
/// Digest, or by Basic when the listener is on loopback (Prometheus sends
/// only Basic; off loopback it would cross the network in the clear).
async fn guard(
    State((server, loopback)): State<(Arc<Server>, bool)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // Decoded as HTTP downloads are, for the Digest `uri` to name it.
    let path = target_path(req.uri().path()).unwrap_or_default();
    let method = req.method().as_str();
    match (server.guard).check_admin(peer.ip(), method, auth, &path, loopback) {
        Verdict::Allow => next.run(req).await,
        Verdict::Deny(code, challenges) => {
            let mut r = StatusCode::from_u16(code)
                .unwrap_or(StatusCode::FORBIDDEN)
                .into_response();
            for c in challenges
                .into_iter()
                .filter_map(|c| HeaderValue::from_str(&c).ok())
            {
                r.headers_mut().append(header::WWW_AUTHENTICATE, c);
            }
            r
        }
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

//! The access log: one line per RTSP or HTTP request answered
//! (`access_log`, default on), as an info event of target `fjord::access`,
//! so the log filter (`FJORD_LOG`) can also send it elsewhere or mute it.

use std::{net::SocketAddr, time::Duration};

use fjord_proto::http::Method;

use crate::Server;

pub(crate) fn rtsp(
    server: &Server,
    peer: Option<SocketAddr>,
    req: &fjord_proto::rtsp::framing::Request,
    status: u16,
    took: Duration,
) {
    if server.config().access_log {
        let peer = peer.map_or("-".to_owned(), |p| p.to_string());
        tracing::info!(
            target: "fjord::access",
            %peer,
            method = req.method.as_str(),
            uri = %req.uri,
            status,
            session = req.session_id().unwrap_or("-"),
            ms = %format_args!("{:.2}", took.as_secs_f64() * 1e3),
            "rtsp"
        );
    }
}

pub(crate) fn http(server: &Server, peer: SocketAddr, method: Method, path: &str, status: u16) {
    if server.config().access_log {
        let method = match method {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Options => "OPTIONS",
            Method::NotAllowed | Method::Unknown => "other",
        };
        tracing::info!(target: "fjord::access", %peer, method, path, status, "http");
    }
}

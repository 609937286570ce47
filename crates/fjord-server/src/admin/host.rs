//! The admin listener answers only requests that name it: a `Host` that
//! is an IP address, `localhost`, or one of `admin_hosts`. A web page whose
//! own name an attacker rebinds to 127.0.0.1 (DNS rebinding) sends its
//! own name as `Host` and is refused, so it cannot read or end sessions
//! from a browser on the server's machine; no admin page can be framed.

use std::{net::IpAddr, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::Server;

/// Refuses (403) a request whose `Host` does not name this listener, and
/// forbids framing every answer.
pub(super) async fn named(State(server): State<Arc<Server>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let mut r = match host.is_none_or(|h| names_us(h, &server.config().admin_hosts)) {
        true => next.run(req).await,
        false => (
            StatusCode::FORBIDDEN,
            "this Host does not name the admin listener; add it to admin_hosts\n",
        )
            .into_response(),
    };
    let headers = r.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    r
}

/// Whether a `Host` value (`name[:port]`, `[v6][:port]`) names the admin
/// listener: an IP literal or `localhost` (no rebinding turns those into
/// another site's name), or a configured name.
fn names_us(host: &str, configured: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(a, _)| a),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.parse::<IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || configured.iter().any(|c| c.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_addresses_localhost_and_configured_names_pass() {
        let configured = ["admin.example.net".to_owned()];
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "[::1]:9090",
            "localhost:9090",
            "LOCALHOST",
            "198.18.0.1:9090",
            "admin.example.net:9090",
        ] {
            assert!(names_us(ok, &configured), "{ok}");
        }
        for no in [
            "evil.example:9090",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "",
            "[::1",
        ] {
            assert!(!names_us(no, &configured), "{no}");
        }
    }
}

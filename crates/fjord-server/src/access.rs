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
            uri = %without_userinfo(&req.uri),
            status,
            session = req.session_id().unwrap_or("-"),
            ms = %format_args!("{:.2}", took.as_secs_f64() * 1e3),
            "rtsp"
        );
    }
}

/// `uri` without the `user:password@` a client may put in it: logs are
/// read by more people than the credentials are meant for.
fn without_userinfo(uri: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.into();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]).into(),
        None => uri.into(),
    }
}

/// `target`: the request's path as sent (still percent-encoded; no scheme,
/// authority or query).
pub(crate) fn http(server: &Server, peer: SocketAddr, method: Method, target: &str, status: u16) {
    if server.config().access_log {
        let method = match method {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Options => "OPTIONS",
            Method::NotAllowed | Method::Unknown => "other",
        };
        tracing::info!(target: "fjord::access", %peer, method, target, status, "http");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_in_a_uri_are_not_logged() {
        use super::without_userinfo as w;
        assert_eq!(w("rtsp://alice:pw@h:554/a.ts"), "rtsp://h:554/a.ts");
        assert_eq!(w("rtsp://a@b:p@w@h/a@b.ts"), "rtsp://h/a@b.ts");
        assert_eq!(w("rtsp://h/a@b.ts"), "rtsp://h/a@b.ts");
        assert_eq!(w("/a.ts"), "/a.ts");
        assert_eq!(w("*"), "*");
    }
}

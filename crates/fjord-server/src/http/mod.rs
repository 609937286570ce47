//! HTTP/1.1 downloads beside RTSP (`http_port`): a title's file, whole or a
//! byte range, from the same roots and by the same names as
//! `rtsp://HOST/NAME`; HLS of TS, MP4, ADTS and MP3 titles
//! (`NAME/index.m3u8`, [`hls`], [`fmp4`], [`packed`]) and DASH of TS and
//! MP4 titles (`NAME/manifest.mpd`, [`dash`]); [`routes`] names what a
//! path asks for. Each request is planned without I/O
//! ([`fjord_proto::http`]); file bytes go by `sendfile` from the file,
//! never through user space, and only playlists and segment heads are
//! made here. Every response allows the configured origin (CORS).
//!
//! Downloads are bulk I/O: each piece not in the page cache is read into
//! it first, on a blocking thread, in bounded requests and after the
//! storage layer's bulk turn for its disk (stream read-ahead goes first),
//! then sent from the page cache, so no runtime thread waits for a disk.

mod dash;
mod fmp4;
mod hls;
mod packed;
mod routes;
mod send;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use crate::{
    CatalogError, Server,
    guard::Verdict,
    slots::{Slot, Slots},
};
use fjord_proto::http::{self as plan, Parsed, Response};
use routes::Route;

/// Accepts download connections until the server stops; `slots` bounds
/// them together with the RTSP connections, in all and per address.
pub(crate) async fn listen(server: Arc<Server>, listener: TcpListener, slots: Arc<Slots>) {
    let fragments = Arc::new(fmp4::Cache::default());
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let Some(slot) = crate::slots::take_or_log(&slots, peer, "HTTP") else {
            continue;
        };
        tokio::spawn(connection(
            server.clone(),
            fragments.clone(),
            stream,
            peer,
            slot,
        ));
    }
}

/// Whether the client opens with a TLS handshake (HTTPS and HTTP share
/// the port: a TLS record starts with 0x16, an HTTP request with a
/// letter); never with no certificate configured. `None`: it sent nothing
/// within the request timeout, or closed.
async fn tls_hello(server: &Server, stream: &TcpStream) -> Option<bool> {
    if server.tls.is_none() {
        return Some(false);
    }
    let mut first = [0u8; 1];
    let peek = tokio::time::timeout(server.config().request_timeout(), stream.peek(&mut first));
    match peek.await {
        Ok(Ok(1)) => Some(first[0] == 0x16),
        _ => None,
    }
}

/// Why a connection ends before its client closes it.
enum End {
    /// The client closed it, or it was idle for `idle_timeout_s`.
    Quiet,
    /// Answered with this response, then closed.
    Refused(Response),
}

async fn connection(
    server: Arc<Server>,
    fragments: Arc<fmp4::Cache>,
    mut stream: TcpStream,
    peer: SocketAddr,
    _slot: Slot,
) {
    let tls = match tls_hello(&server, &stream).await {
        Some(true) => {
            let Some(t) = &server.tls else { return };
            match t
                .accept(stream, peer, server.config().request_timeout())
                .await
            {
                Ok((bridge, _)) => stream = bridge,
                Err(e) => return tracing::debug!(%peer, "TLS handshake failed: {e}"),
            }
            true
        }
        Some(false) => false,
        None => return,
    };
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(1024);
    loop {
        let req = match next_request(&server, &mut stream, &mut buf).await {
            Ok(req) => req,
            Err(End::Quiet) => return,
            Err(End::Refused(r)) => {
                let _ = stream
                    .write_all(&r.head(std::time::SystemTime::now()))
                    .await;
                return;
            }
        };
        match answer(&server, &fragments, &mut stream, (peer, tls), req).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::debug!(%peer, "HTTP download ended: {e}");
                return;
            }
        }
    }
}

/// Reads the next request head into `buf` (bytes after it stay there:
/// pipelined requests), within the connection's timeouts and size limit.
async fn next_request(
    server: &Server,
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<plan::Request, End> {
    let cfg = server.config();
    let idle = Duration::from_secs(cfg.idle_timeout_s);
    let whole = Duration::from_secs(cfg.request_timeout_s);
    let mut started: Option<tokio::time::Instant> = None;
    loop {
        match plan::parse(buf) {
            Parsed::Request(req, len) => {
                buf.drain(..len);
                return Ok(req);
            }
            Parsed::Bad(status, why) => {
                return Err(End::Refused(Response::error(status, why, true)));
            }
            Parsed::Partial if buf.len() >= cfg.max_header_bytes => {
                let why = "the request head is larger than max_header_bytes";
                return Err(End::Refused(Response::error(431, why, true)));
            }
            Parsed::Partial => {}
        }
        let deadline = match started {
            Some(t) => t + whole,
            None if buf.is_empty() => tokio::time::Instant::now() + idle,
            None => *started.insert(tokio::time::Instant::now()) + whole,
        };
        let mut chunk = [0u8; 2048];
        let room = cfg.max_header_bytes - buf.len();
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk[..room.min(2048)]));
        match read.await {
            Ok(Ok(0)) | Ok(Err(_)) => return Err(End::Quiet),
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                started.get_or_insert_with(tokio::time::Instant::now);
            }
            Err(_) if buf.is_empty() => return Err(End::Quiet),
            Err(_) => {
                let why = "the request head did not arrive within request_timeout_s";
                return Err(End::Refused(Response::error(408, why, true)));
            }
        }
    }
}

/// Answers one request; whether the connection stays open.
async fn answer(
    server: &Arc<Server>,
    fragments: &Arc<fmp4::Cache>,
    stream: &mut TcpStream,
    (peer, tls): (SocketAddr, bool),
    req: plan::Request,
) -> std::io::Result<bool> {
    let now = std::time::SystemTime::now();
    let close = !req.keep_alive;
    let config = server.config();
    let origin = &config.http_allow_origin;
    if req.method == plan::Method::Options {
        let r = Response::preflight(&req).allow_origin(origin);
        crate::access::http(server, peer, req.method, &req.path, r.status);
        stream.write_all(&r.head(now)).await?;
        return Ok(!r.close);
    }
    // Before any lookup: a refusal says nothing about what exists.
    let title = routes::route_of(&req.path).map_or(req.path.as_str(), |(t, _)| t);
    let auth = req.authorization.as_deref();
    let method = if req.method == plan::Method::Head {
        "HEAD"
    } else {
        "GET"
    };
    if let Verdict::Deny(code, challenges) =
        server
            .guard
            .check_http(peer.ip(), method, auth, (title, &req.path), tls)
    {
        let why = if code == 401 {
            "credentials required"
        } else {
            "not allowed"
        };
        let r = (challenges.into_iter())
            .fold(Response::error(code, why, close), |r, c| {
                r.with_header("WWW-Authenticate", c)
            })
            .allow_origin(origin);
        crate::access::http(server, peer, req.method, &req.path, r.status);
        stream.write_all(&r.head(now)).await?;
        return Ok(!r.close);
    }
    // Finding and opening the file may read directories and inodes from
    // the disk: not on a runtime thread.
    let (srv, path) = (server.clone(), req.path.clone());
    let opened = tokio::task::spawn_blocking(move || {
        let path = srv.catalog.resolve(&path)?;
        let file = std::fs::File::open(&path).map_err(|_| CatalogError::NotFound)?;
        let meta = file.metadata().map_err(|_| CatalogError::NotFound)?;
        Ok::<_, CatalogError>((file, meta))
    })
    .await
    .map_err(std::io::Error::other)?;
    let (body, response) = match opened {
        Ok((file, meta)) => {
            let entity = plan::Entity::of(&meta, &req.path);
            let body = send::Body::file(Arc::new(file), entity.size);
            (Some(body), plan::respond(&req, &entity))
        }
        Err(_) => match routes::route_of(&req.path) {
            Some((title, Route::Playlist(which))) => {
                let text = hls::playlist(server, fragments, title, which).await;
                (None, generated(&req, "application/vnd.apple.mpegurl", text))
            }
            Some((title, Route::Manifest)) => {
                let text = dash::manifest(server, fragments, title).await;
                (None, generated(&req, "application/dash+xml", text))
            }
            Some((title, Route::Init(only))) => {
                segment(server, fragments, &req, title, only, None).await
            }
            Some((title, Route::Segment(only, i))) => {
                segment(server, fragments, &req, title, only, Some(i)).await
            }
            // The same answer for every name not served: no oracle for
            // what lies outside the roots.
            None => (None, Response::error(404, "no such title", close)),
        },
    };
    let response = match req.method {
        plan::Method::Head => response.for_head(),
        _ => response,
    }
    .allow_origin(origin);
    crate::access::http(server, peer, req.method, &req.path, response.status);
    stream.write_all(&response.head(now)).await?;
    if let (Some(body), Some(range)) = (body, response.body.clone()) {
        let pace = send::Pace {
            storage: server.storage.clone(),
            stall: Duration::from_secs(server.config().stall_timeout_s),
        };
        body.send(stream, range, &pace).await?;
    }
    Ok(!response.close)
}

/// The answer to a request for a playlist or manifest made as `text`.
fn generated(
    req: &plan::Request,
    content_type: &str,
    text: Result<String, (u16, String)>,
) -> Response {
    if !matches!(req.method, plan::Method::Get | plan::Method::Head) {
        return Response::error(405, "only GET and HEAD", !req.keep_alive);
    }
    match text {
        Ok(text) => Response::generated(req, content_type, text),
        Err((status, why)) => Response::error(status, &why, !req.keep_alive),
    }
}

/// The answer to a request for a fragmented title's init segment (`None`)
/// or media segment, every track's or track `only`'s, and its body.
async fn segment(
    server: &Arc<Server>,
    fragments: &Arc<fmp4::Cache>,
    req: &plan::Request,
    title: &str,
    only: Option<usize>,
    which: Option<usize>,
) -> (Option<send::Body>, Response) {
    let close = !req.keep_alive;
    let f = match fragments.get(server, title, only).await {
        Ok(f) => f,
        Err((status, why)) => return (None, Response::error(status, &why, close)),
    };
    let (Some(entity), Some(parts)) = (f.entity(which), f.parts(which)) else {
        return (None, Response::error(404, "no such segment", close));
    };
    let (path, etag) = (f.path.clone(), f.etag.clone());
    // The file opened must be the one the segments were cut from (it may
    // have been replaced since): its byte ranges are theirs.
    let opened = tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(&path).ok()?;
        let same = plan::Entity::of(&file.metadata().ok()?, "").etag == etag;
        Some((file, same))
    });
    let file = match opened.await.ok().flatten() {
        Some((file, true)) => file,
        Some((_, false)) => {
            let why = "the title changed while this segment was asked for; ask again";
            return (None, Response::error(503, why, close));
        }
        None => return (None, Response::error(404, "no such title", close)),
    };
    let body = send::Body::parts(Arc::new(file), parts);
    (Some(body), plan::respond(req, &entity))
}

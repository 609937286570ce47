//! HTTP/1.1 downloads beside RTSP (`http_port`): a title's file, whole or a
//! byte range, from the same roots and by the same names as
//! `rtsp://HOST/NAME`; HLS of TS, MP4, ADTS and MP3 titles
//! (`NAME/index.m3u8`, [`hls`], [`fmp4`], [`packed`]) and DASH of TS and
//! MP4 titles (`NAME/manifest.mpd`, [`dash`]); [`routes`] names what a
//! path asks for. Each request is planned without I/O
//! ([`fjord_proto::http`]); file bytes go by `sendfile` from the file,
//! never through user space, or over HTTPS are sealed from the page cache
//! in the connection's task ([`wire`]: the same requests and answers over
//! either stream); only playlists and segment heads are made here. Every response allows the configured origin (CORS) and says
//! how long caches may keep it (`[http_cache_control]`). Only titles are
//! served, by their canonical path: a file the catalog does not open as
//! media gets the same 404 as a missing one.
//!
//! Downloads are bulk I/O: each piece not in the page cache is read into
//! it first, on a blocking thread, in bounded requests and after the
//! storage layer's bulk turn for its disk (stream read-ahead goes first),
//! then sent from the page cache, so no runtime thread waits for a disk.

mod dash;
mod fmp4;
mod hls;
mod origin;
mod packed;
mod routes;
mod send;
mod wire;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use crate::{
    CatalogError, Server,
    guard::Verdict,
    kernel_tls::Handoff,
    slots::{Slot, Slots},
};
use fjord_proto::http::{self as plan, Parsed, Response};
use routes::{Playlist, Route};
use wire::Wire;

/// Accepts download connections until the server stops; `slots` bounds
/// them together with the RTSP connections, in all and per address.
pub(crate) async fn listen(server: Arc<Server>, listener: TcpListener, slots: Arc<Slots>) {
    let fragments = Arc::new(fmp4::Cache::default());
    let mut acceptor = crate::accept::Acceptor::new(&listener, "HTTP");
    loop {
        let (stream, peer) = acceptor.next().await;
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
    stream: TcpStream,
    peer: SocketAddr,
    _slot: Slot,
) {
    let _ = stream.set_nodelay(true);
    match tls_hello(&server, &stream).await {
        Some(true) => {
            let Some(t) = &server.tls else { return };
            if t.kernel() {
                return match t.handshake_to_kernel(stream, &server.config()).await {
                    Ok(Handoff::Kernel(k)) => {
                        server.metrics.https("kernel");
                        serve(&server, &fragments, k, (peer, true)).await
                    }
                    Ok(Handoff::User(tls, e)) => {
                        tracing::debug!(%peer, "the socket refused kTLS ({e}): user space");
                        server.metrics.https("user");
                        serve(&server, &fragments, wire::TlsWire::new(*tls), (peer, true)).await
                    }
                    Ok(Handoff::Refused(e)) => {
                        server.metrics.https("kernel_failed");
                        tracing::warn!(%peer, "the kernel refused the TLS keys: {e}")
                    }
                    Ok(Handoff::Client(e)) => {
                        tracing::debug!(%peer, "HTTPS ended before the kernel took it: {e}")
                    }
                    Err(e) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                };
            }
            match t.handshake(stream, &server.config()).await {
                Ok(tls) => {
                    server.metrics.https("user");
                    serve(&server, &fragments, wire::TlsWire::new(tls), (peer, true)).await
                }
                Err(e) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
            }
        }
        Some(false) => serve(&server, &fragments, stream, (peer, false)).await,
        None => {}
    }
}

/// Answers the requests of a connection, plain or TLS (`tls`), until it
/// ends; a TLS connection is closed with its close_notify.
async fn serve<S: Wire>(
    server: &Arc<Server>,
    fragments: &Arc<fmp4::Cache>,
    mut stream: S,
    (peer, tls): (SocketAddr, bool),
) {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let req = match next_request(server, &mut stream, &mut buf).await {
            Ok(req) => req,
            Err(End::Quiet) => break,
            Err(End::Refused(r)) => {
                let _ = stream
                    .write_all(&r.head(std::time::SystemTime::now()))
                    .await;
                break;
            }
        };
        match answer(server, fragments, &mut stream, (peer, tls), req).await {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                tracing::debug!(%peer, "HTTP download ended: {e}");
                return;
            }
        }
    }
    let stall = Duration::from_secs(server.config().stall_timeout_s);
    let _ = tokio::time::timeout(stall, stream.shutdown()).await;
}

/// Reads the next request head into `buf` (bytes after it stay there:
/// pipelined requests), within the connection's timeouts and size limit.
async fn next_request<S: Wire>(
    server: &Server,
    stream: &mut S,
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
async fn answer<S: Wire>(
    server: &Arc<Server>,
    fragments: &Arc<fmp4::Cache>,
    stream: &mut S,
    (peer, tls): (SocketAddr, bool),
    req: plan::Request,
) -> std::io::Result<bool> {
    let close = !req.keep_alive;
    if req.method == plan::Method::Options {
        let r = Response::preflight(&req);
        return reply(server, stream, peer, &req, r, None).await;
    }
    // A path that names no title in its canonical spelling is refused like
    // a missing title: aliases (`a//b`, `a/./b`) never reach the catalog.
    let Some(path) = req.path.as_deref() else {
        return reply(server, stream, peer, &req, not_found(close), None).await;
    };
    let route = routes::route_of(path);
    // Before any lookup: a refusal says nothing about what exists.
    let title = route.map_or(path, |(t, _)| t);
    if let Some(r) = refusal(server, peer, &req, title, tls) {
        return reply(server, stream, peer, &req, r, None).await;
    }
    if let Some(r) = moved(server, &req, title, route.map(|(_, r)| r), tls) {
        return reply(server, stream, peer, &req, r, None).await;
    }
    // Only titles: a file the catalog does not take as media (a key, a
    // config, notes) is answered as if it were not there.
    let (body, response) = match server.catalog.open(path).await {
        // A title named like a playlist or segment (`d/init.mp4`) is
        // checked against its own name too.
        Ok((_, opened)) => match route.and_then(|_| refusal(server, peer, &req, path, tls)) {
            Some(r) => (None, r),
            None => download(server, &req, path, opened).await,
        },
        Err(e) => match route {
            Some((title, route)) => adaptive(server, fragments, (&req, tls), title, route).await,
            None => (None, not_served(&e, close)),
        },
    };
    reply(server, stream, peer, &req, response, body).await
}

/// Sends `response` (and `body`, the file bytes it names) as the answer to
/// `req`, logged; whether the connection stays open.
async fn reply<S: Wire>(
    server: &Server,
    stream: &mut S,
    peer: SocketAddr,
    req: &plan::Request,
    response: Response,
    body: Option<send::Body>,
) -> std::io::Result<bool> {
    let response = match req.method {
        plan::Method::Head => response.for_head(),
        _ => response,
    }
    .allow_origin(&server.config().http_allow_origin);
    crate::access::http(server, peer, req.method, &req.target, response.status);
    stream
        .write_all(&response.head(std::time::SystemTime::now()))
        .await?;
    let stall = Duration::from_secs(server.config().stall_timeout_s);
    if let (Some(body), Some(range)) = (body, response.body.clone()) {
        let pace = send::Pace {
            storage: server.storage.clone(),
            stall,
        };
        body.send(stream, range, &pace).await?;
    }
    // TLS holds what the socket has not taken yet (plain TCP: nothing).
    tokio::time::timeout(stall, stream.flush())
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "the client took no data")
        })??;
    Ok(!response.close)
}

/// The 401/403/503 for `name` when its reader may not have it.
fn refusal(
    server: &Server,
    peer: SocketAddr,
    req: &plan::Request,
    name: &str,
    tls: bool,
) -> Option<Response> {
    let method = match req.method {
        plan::Method::Head => "HEAD",
        _ => "GET",
    };
    let auth = req.authorization.as_deref();
    let path = req.path.as_deref().unwrap_or_default();
    let verdict = (server.guard).check_http(peer.ip(), method, auth, (name, path), tls);
    let Verdict::Deny(code, challenges) = verdict else {
        return None;
    };
    let why = match code {
        401 => "credentials required",
        _ => "not allowed",
    };
    let r = Response::error(code, why, !req.keep_alive);
    Some(
        challenges
            .into_iter()
            .fold(r, |r, c| r.with_header("WWW-Authenticate", c)),
    )
}

/// A 302 to the member that serves `title` when it is not this node
/// ([`crate::cluster`]), for what starts a viewing: a download, a
/// multivariant playlist or a manifest. Media playlists and segments are
/// served where asked: a multivariant playlist names the nodes they are
/// asked of, its backups among them, which a player fails over to before
/// the cluster has noticed the failure. HTTPS goes to the member's
/// `https://` URL only (none: served here).
fn moved(
    server: &Server,
    req: &plan::Request,
    title: &str,
    route: Option<Route>,
    tls: bool,
) -> Option<Response> {
    let starts = |r| matches!(r, Route::Playlist(Playlist::Multivariant) | Route::Manifest);
    if route.is_some_and(|r| !starts(r)) {
        return None;
    }
    let path = match req.query.as_str() {
        "" => req.target.clone(),
        query => format!("{}?{query}", req.target),
    };
    let scheme = crate::cluster::Scheme::http(tls);
    let to = server.cluster.redirect(server, title, scheme, &path)?;
    let r = Response::error(302, "this title is served by another node", !req.keep_alive);
    Some(r.with_header("Location", to))
}

/// The same answer for every name not served: no oracle for what lies
/// under or outside the roots.
fn not_found(close: bool) -> Response {
    Response::error(404, "no such title", close)
}

/// The answer to a request for a title the catalog did not open. A file it
/// cannot serve is not a title: 404, as for a missing one.
fn not_served(e: &CatalogError, close: bool) -> Response {
    let (status, why) = refused(e);
    let r = Response::error(status, &why, close);
    match status {
        503 => r.with_header("Retry-After", RETRY_AFTER_S.to_string()),
        _ => r,
    }
}

/// When a client refused for an origin title it cannot have now should
/// ask again.
const RETRY_AFTER_S: u32 = 2;

/// The status and reason an HTTP client is given when a title cannot be
/// opened: 404 for a file that is not media (or not there), 500 without
/// detail (the server's log has it) when reading failed.
pub(crate) fn refused(e: &CatalogError) -> (u16, String) {
    match e {
        CatalogError::NotFound | CatalogError::Unsupported(_) => (404, "no such title".into()),
        CatalogError::Failed(_) => (
            500,
            "the title could not be read; see the server's log".into(),
        ),
        CatalogError::Unavailable(why) => (503, why.clone()),
    }
}

/// A title's file, whole or a range of it: the file under the roots, or
/// an origin title's media (`title`), filled in as it is sent.
async fn download(
    server: &Arc<Server>,
    req: &plan::Request,
    path: &str,
    title: Arc<fjord_engine::Title>,
) -> (Option<send::Body>, Response) {
    // Finding and opening the file may read directories and inodes from
    // the disk: not on a runtime thread.
    let (srv, name) = (server.clone(), path.to_owned());
    let opened = tokio::task::spawn_blocking(move || match srv.catalog.resolve(&name) {
        Ok(path) => {
            let file = std::fs::File::open(path).map_err(|_| CatalogError::NotFound)?;
            let meta = file.metadata().map_err(|_| CatalogError::NotFound)?;
            let mut entity = plan::Entity::of(&meta, &name);
            // A recording still written: its whole, synced fragments only.
            if let Some(durable) = srv.catalog.growing().durable(&name) {
                entity.size = durable.min(entity.size);
                entity.etag = format!("{}-g{durable}\"", entity.etag.trim_end_matches('"'));
            }
            Ok((send::Body::file(Arc::new(file), entity.size), entity))
        }
        Err(CatalogError::NotFound) if title.is_filled() => {
            let fd = title.fd().try_clone_to_owned();
            let file = std::fs::File::from(fd.map_err(|e| CatalogError::Failed(e.to_string()))?);
            let entity = origin_entity(&title, &name);
            let body = send::Body::file(Arc::new(file), entity.size).filled_from(title);
            Ok((body, entity))
        }
        Err(e) => Err(e),
    });
    match opened.await.unwrap_or(Err(CatalogError::NotFound)) {
        Ok((body, entity)) => {
            let media = &server.config().http_cache_control.media;
            let cache = recording_cache(server, path, media);
            (Some(body), plan::respond(req, &entity).cached(cache))
        }
        Err(e) => (None, not_served(&e, !req.keep_alive)),
    }
}

/// An origin title's media as HTTP names it: its validator is its index's
/// checksum (an index is made from one version of the media), its time
/// unknown.
fn origin_entity(title: &fjord_engine::Title, name: &str) -> plan::Entity {
    let sum = title.index().checksum();
    let hex: String = sum[..12].iter().map(|b| format!("{b:02x}")).collect();
    plan::Entity {
        size: title.media_len(),
        modified: std::time::SystemTime::UNIX_EPOCH,
        etag: format!("\"fj-{hex}\""),
        content_type: plan::content_type(name),
    }
}

/// The URLs of `leaf` beside what a request for a title's playlist
/// named (`/NAME/index.m3u8` → `/NAME/media.m3u8`) at the title's next
/// nodes of a cluster ([`crate::cluster::Cluster::elsewhere`]).
fn elsewhere(
    server: &Server,
    (req, tls): (&plan::Request, bool),
    title: &str,
    leaf: &str,
) -> Vec<String> {
    let path = crate::cluster::path_of(&req.target);
    let path = path.split('?').next().unwrap_or(path);
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    let scheme = crate::cluster::Scheme::http(tls);
    (server.cluster).elsewhere(title, scheme, &format!("{dir}/{leaf}"))
}

/// A playlist, manifest or segment of `title`.
async fn adaptive(
    server: &Arc<Server>,
    fragments: &Arc<fmp4::Cache>,
    (req, tls): (&plan::Request, bool),
    title: &str,
    route: Route,
) -> (Option<send::Body>, Response) {
    let cache = server.config().http_cache_control.clone();
    match route {
        Route::Playlist(which) => {
            let backups = match which {
                Playlist::Multivariant => elsewhere(server, (req, tls), title, "media.m3u8"),
                _ => Vec::new(),
            };
            let text = hls::playlist(server, fragments, title, (which, backups)).await;
            let r = generated(req, "application/vnd.apple.mpegurl", text);
            (
                None,
                r.cached(recording_cache(server, title, &cache.playlist)),
            )
        }
        Route::Manifest => {
            let text = dash::manifest(server, fragments, title).await;
            let r = generated(req, "application/dash+xml", text);
            (
                None,
                r.cached(recording_cache(server, title, &cache.playlist)),
            )
        }
        Route::Init(only) => segment(server, fragments, req, title, (only, false), None).await,
        Route::Segment(only, i) => {
            segment(server, fragments, req, title, (only, false), Some(i)).await
        }
        Route::WebmInit(k) => segment(server, fragments, req, title, (Some(k), true), None).await,
        Route::WebmSegment(k, i) => {
            segment(server, fragments, req, title, (Some(k), true), Some(i)).await
        }
    }
}

/// How long caches keep a playlist or manifest of `title`: as configured,
/// or a second while it is a recording that grows (players fetch it
/// again for the new segments, RFC 8216 §6.2.1).
fn recording_cache<'a>(server: &Server, title: &str, configured: &'a str) -> &'a str {
    match server.catalog.growing().durable(title) {
        Some(_) => "max-age=1",
        None => configured,
    }
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
/// or media segment, every track's or track `only`'s (in WebM: `webm`),
/// and its body.
async fn segment(
    server: &Arc<Server>,
    fragments: &Arc<fmp4::Cache>,
    req: &plan::Request,
    title: &str,
    (only, webm): (Option<usize>, bool),
    which: Option<usize>,
) -> (Option<send::Body>, Response) {
    let close = !req.keep_alive;
    let f = match fragments.get(server, title, only, webm).await {
        Ok(f) => f,
        Err((status, why)) => return (None, Response::error(status, &why, close)),
    };
    if let (Some(i), Some(_)) = (which, f.growing)
        && i >= hls::settled_of(&f)
    {
        // Not listed yet: it still grows with the recording.
        let why = "no such segment yet: the recording grows; fetch the playlist again";
        return (None, Response::error(404, why, close));
    }
    let (Some(entity), Some(parts)) = (f.entity(which), f.parts(which)) else {
        return (None, Response::error(404, "no such segment", close));
    };
    let (path, etag, origin) = (f.path.clone(), f.etag.clone(), f.origin.clone());
    let growing = f.growing;
    // The file opened must be the one the segments were cut from (it may
    // have been replaced since): its byte ranges are theirs. An origin
    // title's media is the version they were cut from; a growing
    // recording's, a prefix of the file, which is only appended to.
    let opened = tokio::task::spawn_blocking(move || match origin {
        Some(t) => Some((std::fs::File::from(t.fd().try_clone_to_owned().ok()?), true)),
        None => {
            let file = std::fs::File::open(&path).ok()?;
            let meta = file.metadata().ok()?;
            let same = match growing {
                Some(len) => meta.len() >= len,
                None => plan::Entity::of(&meta, "").etag == etag,
            };
            Some((file, same))
        }
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
    let body = match f.origin.clone() {
        Some(t) => body.filled_from(t),
        None => body,
    };
    let cache = &server.config().http_cache_control.media;
    (Some(body), plan::respond(req, &entity).cached(cache))
}

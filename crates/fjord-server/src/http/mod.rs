//! HTTP/1.1 downloads beside RTSP (`http_port`): a title's file, whole or a
//! byte range, from the same roots and by the same names as
//! `rtsp://HOST/NAME`, and HLS playlists of TS titles (`NAME/index.m3u8`,
//! [`hls`]). Each request is planned without I/O ([`fjord_proto::http`]);
//! the body goes by `sendfile` from the file, never through user space.
//!
//! Downloads are bulk I/O: each piece not in the page cache is read into
//! it first, on a blocking thread, in bounded requests and after the
//! storage layer's bulk turn for its disk (stream read-ahead goes first),
//! then sent from the page cache, so no runtime thread waits for a disk.

mod hls;
mod send;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use crate::{
    CatalogError, Server,
    slots::{Slot, Slots},
};
use fjord_proto::http::{self as plan, Parsed, Response};

/// Accepts download connections until the server stops; `slots` bounds
/// them together with the RTSP connections, in all and per address.
pub(crate) async fn listen(server: Arc<Server>, listener: TcpListener, slots: Arc<Slots>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let Some(slot) = crate::slots::take_or_log(&slots, peer, "HTTP") else {
            continue;
        };
        tokio::spawn(connection(server.clone(), stream, peer, slot));
    }
}

/// Why a connection ends before its client closes it.
enum End {
    /// The client closed it, or it was idle for `idle_timeout_s`.
    Quiet,
    /// Answered with this response, then closed.
    Refused(Response),
}

async fn connection(server: Arc<Server>, mut stream: TcpStream, peer: SocketAddr, _slot: Slot) {
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
        match answer(&server, &mut stream, req).await {
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
    let cfg = &server.config;
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
    stream: &mut TcpStream,
    req: plan::Request,
) -> std::io::Result<bool> {
    let now = std::time::SystemTime::now();
    let close = !req.keep_alive;
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
    let (file, response) = match opened {
        Ok((file, meta)) => {
            let entity = plan::Entity::of(&meta, &req.path);
            (Some(file), plan::respond(&req, &entity))
        }
        Err(_) if hls::playlist_of(&req.path).is_some() => (None, playlist(server, &req).await),
        // The same answer for every name not served: no oracle for what
        // lies outside the roots.
        Err(_) => (None, Response::error(404, "no such title", close)),
    };
    let response = match req.method {
        plan::Method::Head => response.for_head(),
        _ => response,
    };
    stream.write_all(&response.head(now)).await?;
    if let (Some(file), Some(range)) = (file, response.body.clone()) {
        let pace = send::Pace {
            storage: server.storage.clone(),
            stall: Duration::from_secs(server.config.stall_timeout_s),
        };
        send::body(stream, Arc::new(file), range, &pace).await?;
    }
    Ok(!response.close)
}

/// The answer to a request for a title's HLS playlist.
async fn playlist(server: &Arc<Server>, req: &plan::Request) -> Response {
    let Some((title, which)) = hls::playlist_of(&req.path) else {
        return Response::error(404, "no such title", !req.keep_alive);
    };
    if !matches!(req.method, plan::Method::Get | plan::Method::Head) {
        return Response::error(405, "only GET and HEAD", !req.keep_alive);
    }
    match hls::playlist(server, title, which).await {
        Ok(text) => Response::generated(req, "application/vnd.apple.mpegurl", text),
        Err((status, why)) => Response::error(status, &why, !req.keep_alive),
    }
}

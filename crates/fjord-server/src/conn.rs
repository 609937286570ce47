//! One RTSP connection: framing under limits, timeouts against silent or
//! trickling clients, replies in order, and cleanup when it closes.

use std::{
    net::SocketAddr,
    os::fd::AsFd,
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_engine::Command;
use fjord_proto::rtsp::{
    framing::{Frame, Request, next_frame},
    response::Response,
};
use tokio::{io::AsyncWriteExt, net::TcpStream, sync::OwnedSemaphorePermit};

use crate::{Server, control, session::Session};

pub(crate) struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// Not split into halves: that would put the stream behind an `Arc`.
    stream: TcpStream,
    /// Once a session streams interleaved on this connection the engine
    /// owns the write side, so replies queue behind its `$` frames.
    attached: bool,
    /// Interleaved channels already in use on this connection.
    pub channels: Vec<u8>,
    /// Sessions made on this connection (some may have timed out since).
    pub sessions: Vec<Arc<Session>>,
}

impl Conn {
    /// The sessions of this connection that are still alive.
    pub fn live_sessions(&mut self, server: &Server) -> &[Arc<Session>] {
        self.sessions.retain(|s| server.sessions.contains(s.id));
        &self.sessions
    }

    /// Hands the write side to the engine thread of this connection.
    pub fn attach(&mut self, server: &Server) -> std::io::Result<()> {
        if self.attached {
            return Ok(());
        }
        let fd = self.stream.as_fd().try_clone_to_owned()?;
        server
            .engine
            .send(self.id, Command::AttachConnection { conn: self.id, fd });
        self.attached = true;
        Ok(())
    }

    async fn write(&mut self, server: &Server, bytes: Vec<u8>) -> bool {
        if self.attached {
            server.engine.send(
                self.id,
                Command::Write {
                    conn: self.id,
                    bytes,
                },
            );
            return true;
        }
        let timeout = server.config.request_timeout();
        matches!(
            tokio::time::timeout(timeout, self.stream.write_all(&bytes)).await,
            Ok(Ok(()))
        )
    }
}

/// The task serving one connection; `permit` holds its place under the
/// connection limit until it closes. The connection is set up before the
/// `async` block, so the task holds only `Conn`, not the accepted stream
/// and address beside it: players keep one such task while they play.
pub(crate) fn serve_connection(
    server: Arc<Server>,
    stream: TcpStream,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
) -> Option<impl Future<Output = ()> + Send> {
    let local = stream.local_addr().ok()?;
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        id: server.next_id(),
        peer,
        local,
        stream,
        attached: false,
        channels: Vec::new(),
        sessions: Vec::new(),
    };
    Some(async move {
        tracing::debug!(peer = %conn.peer, conn = conn.id, "connected");
        run(&server, &mut conn).await;
        for s in conn.live_sessions(&server).to_vec() {
            server
                .sessions
                .remove(s.id, &server.engine, &server.admission);
        }
        if conn.attached {
            server
                .engine
                .send(conn.id, Command::DetachConnection { conn: conn.id });
        }
        tracing::debug!(peer = %conn.peer, conn = conn.id, "closed");
        drop(permit);
    })
}

enum Served {
    Close,
    /// When the last complete frame was read, if there was one.
    Frames(Option<Instant>),
}

/// Serves every complete frame at the front of `buf`, in order.
async fn serve_frames(server: &Server, conn: &mut Conn, buf: &mut Vec<u8>) -> Served {
    let mut last = None;
    loop {
        match next_frame(buf, &server.limits) {
            Ok(Some((frame, used))) => {
                buf.drain(..used);
                last = Some(Instant::now());
                match frame {
                    Frame::Request(req) => {
                        if !respond(server, conn, &req).await {
                            return Served::Close;
                        }
                    }
                    Frame::Interleaved { channel, payload } => {
                        control::on_interleaved(server, conn, channel, &payload);
                    }
                }
            }
            Ok(None) => return Served::Frames(last),
            Err(e) => {
                tracing::debug!(peer = %conn.peer, "bad request: {e}");
                let _ = conn
                    .write(server, Response::new(e.status()).to_bytes(None))
                    .await;
                return Served::Close;
            }
        }
    }
}

/// Answers one request; false when the connection is to close.
async fn respond(server: &Server, conn: &mut Conn, req: &Request) -> bool {
    let reply = control::handle(server, conn, req).await;
    if !conn
        .write(server, reply.response.to_bytes(req.cseq()))
        .await
    {
        return false;
    }
    if let Some(start) = reply.start {
        start.send(server);
    }
    !reply.close
}

/// Bytes read at a time; the buffer holds them only while a request is
/// being read, so an idle connection (a player between keepalives) keeps
/// no buffer.
const READ_CHUNK: usize = 4096;

/// Appends what the socket holds (up to [`READ_CHUNK`]) to `buf`, read
/// through the stack: `buf` grows by what arrived, not by a whole chunk
/// per connection in the middle of a request.
fn read_some(rd: &TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; READ_CHUNK];
    let n = rd.try_read(&mut chunk)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

async fn run(server: &Server, conn: &mut Conn) {
    let mut buf: Vec<u8> = Vec::new();
    let mut partial_since: Option<Instant> = None;
    // Until its first request a connection gets the request timeout, not
    // the idle timeout: a client that connects and says nothing goes soon.
    let mut last_request: Option<Instant> = None;
    let connected = Instant::now();
    loop {
        if !buf.is_empty() {
            // Boxed: parsing and serving requests takes a large future,
            // which the task of an idle connection need not hold.
            match Box::pin(serve_frames(server, conn, &mut buf)).await {
                Served::Close => return,
                Served::Frames(None) => {}
                Served::Frames(Some(at)) => {
                    partial_since = None;
                    last_request = Some(at);
                }
            }
        }
        if buf.is_empty() {
            buf = Vec::new();
        }
        let now = Instant::now();
        if !buf.is_empty() && partial_since.is_none() {
            partial_since = Some(now);
        }
        let deadline = match partial_since {
            Some(since) => since + server.config.request_timeout(),
            None if conn.live_sessions(server).is_empty() => match last_request {
                Some(at) => at + server.config.idle_timeout(),
                None => connected + server.config.request_timeout(),
            },
            // Sessions keep the connection; the session timeout ends them.
            None => now + Duration::from_secs(1),
        };
        // `poll_read_ready` keeps the waker in the socket's registration;
        // `readable()` would put a larger waiter in this task.
        let readable = std::future::poll_fn(|cx| conn.stream.poll_read_ready(cx));
        match tokio::time::timeout_at(deadline.into(), readable).await {
            Ok(Err(_)) => return,
            Ok(Ok(())) => match read_some(&conn.stream, &mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            },
            Err(_) if partial_since.is_some() || conn.live_sessions(server).is_empty() => {
                tracing::debug!(peer = %conn.peer, "dropping a silent or slow client");
                return;
            }
            Err(_) => {}
        }
    }
}

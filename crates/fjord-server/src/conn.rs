//! One RTSP connection: framing under limits, timeouts against silent or
//! trickling clients, replies in order, and cleanup when it closes.

use std::{
    net::SocketAddr,
    os::fd::AsFd,
    pin::Pin,
    sync::Arc,
    task::{Poll, Waker},
    time::Instant,
};

use fjord_engine::Command;
use fjord_proto::rtsp::{
    framing::{Frame, Request, next_frame},
    response::Response,
};
use tokio::{io::AsyncWriteExt, net::TcpStream, sync::OwnedSemaphorePermit, time::Sleep};

use crate::{Server, control, session::Session};

/// Its addresses are asked of the socket when needed rather than kept:
/// the connection's task holds a `Conn` for as long as its client plays.
pub(crate) struct Conn {
    pub id: u64,
    /// Not split into halves: that would put the stream behind an `Arc`.
    stream: TcpStream,
    /// Once a session streams interleaved on this connection the engine
    /// owns the write side, so replies queue behind its `$` frames.
    attached: bool,
    /// Interleaved channels already in use on this connection.
    pub channels: Vec<u8>,
    /// Sessions made on this connection (some may have timed out since).
    pub sessions: ConnSessions,
}

/// A connection's sessions, the first inline: players make one, and a
/// `Vec` of one would be an allocation per player.
#[derive(Default)]
pub(crate) struct ConnSessions {
    first: Option<Arc<Session>>,
    more: Vec<Arc<Session>>,
}

impl ConnSessions {
    pub fn push(&mut self, s: Arc<Session>) {
        match self.first {
            None => self.first = Some(s),
            Some(_) => self.more.push(s),
        }
    }

    /// Keeps the sessions `keep` picks, in order.
    fn retain(&mut self, keep: impl Fn(&Arc<Session>) -> bool) {
        self.first = self.first.take().filter(&keep);
        self.more.retain(&keep);
        if self.first.is_none() && !self.more.is_empty() {
            self.first = Some(self.more.remove(0));
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<Session>> {
        self.first.iter().chain(&self.more)
    }
}

impl Conn {
    pub fn peer(&self) -> std::io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    pub fn local(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The sessions of this connection that are still alive.
    pub fn live_sessions(&mut self, server: &Server) -> impl Iterator<Item = &Arc<Session>> {
        self.sessions.retain(|s| server.sessions.contains(s.id));
        self.sessions.iter()
    }

    /// Whether sessions keep the connection open; ending one of them then
    /// wakes `waker`.
    fn wake_when_a_session_ends(&mut self, server: &Server, waker: &Waker) -> bool {
        for s in self.live_sessions(server) {
            s.wake_on_end(waker);
        }
        // Checked again: a session that ended before it had the waker
        // would wake nobody.
        self.live_sessions(server).next().is_some()
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
) -> impl Future<Output = ()> + Send {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        id: server.next_id(),
        stream,
        attached: false,
        channels: Vec::new(),
        sessions: ConnSessions::default(),
    };
    tracing::debug!(%peer, conn = conn.id, "connected");
    async move {
        run(&server, &mut conn).await;
        for s in conn.live_sessions(&server) {
            server
                .sessions
                .remove(s.id, &server.engine, &server.admission);
        }
        if conn.attached {
            server
                .engine
                .send(conn.id, Command::DetachConnection { conn: conn.id });
        }
        tracing::debug!(conn = conn.id, "closed");
        drop(permit);
    }
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
                tracing::debug!(conn = conn.id, peer = ?conn.peer().ok(), "bad request: {e}");
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

/// What a waiting connection woke up for.
enum Woken {
    Readable(std::io::Result<()>),
    Deadline,
    /// A session that kept the connection open ended.
    SessionEnded,
}

async fn run(server: &Server, conn: &mut Conn) {
    let mut buf: Vec<u8> = Vec::new();
    let mut partial_since: Option<Instant> = None;
    // Until its first request a connection gets the request timeout, not
    // the idle timeout: a client that connects and says nothing goes soon.
    let mut idle_deadline = Instant::now() + server.config.request_timeout();
    // Boxed, and only while no session keeps the connection open: the
    // task of a player holds no timer.
    let mut timer: Option<Pin<Box<Sleep>>> = None;
    loop {
        if !buf.is_empty() {
            // Boxed: parsing and serving requests takes a large future,
            // which the task of an idle connection need not hold.
            match Box::pin(serve_frames(server, conn, &mut buf)).await {
                Served::Close => return,
                Served::Frames(None) => {}
                Served::Frames(Some(at)) => {
                    partial_since = None;
                    idle_deadline = at + server.config.idle_timeout();
                }
            }
        }
        if buf.is_empty() {
            buf = Vec::new();
        }
        if !buf.is_empty() && partial_since.is_none() {
            partial_since = Some(Instant::now());
        }
        let deadline = match partial_since {
            Some(since) => Some(since + server.config.request_timeout()),
            None if conn.live_sessions(server).next().is_none() => Some(idle_deadline),
            // Sessions keep the connection; the session timeout ends them,
            // and ending one wakes this task.
            None => None,
        };
        match (deadline, timer.as_mut()) {
            (Some(at), Some(t)) => t.as_mut().reset(at.into()),
            (Some(at), None) => timer = Some(Box::pin(tokio::time::sleep_until(at.into()))),
            (None, _) => timer = None,
        }
        // `poll_read_ready` keeps the waker in the socket's registration;
        // `readable()` would put a larger waiter in this task.
        let woken = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = conn.stream.poll_read_ready(cx) {
                return Poll::Ready(Woken::Readable(r));
            }
            match timer.as_mut() {
                Some(t) => t.as_mut().poll(cx).map(|()| Woken::Deadline),
                None if conn.wake_when_a_session_ends(server, cx.waker()) => Poll::Pending,
                None => Poll::Ready(Woken::SessionEnded),
            }
        })
        .await;
        match woken {
            Woken::Readable(Err(_)) => return,
            Woken::Readable(Ok(())) => match read_some(&conn.stream, &mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            },
            Woken::Deadline => {
                tracing::debug!(
                    conn = conn.id,
                    peer = ?conn.peer().ok(),
                    "dropping a silent or slow client"
                );
                return;
            }
            Woken::SessionEnded => {}
        }
    }
}

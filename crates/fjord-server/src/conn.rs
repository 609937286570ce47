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
use tokio::{io::AsyncWriteExt, net::TcpStream, time::Sleep};

use crate::{
    Server,
    control::Client,
    outbox::Outbox,
    rtsps::Encryption,
    session::{SessionId, Sessions},
};

/// Its addresses are asked of the socket when needed rather than kept,
/// and what few connections need is boxed: the connection's task holds a
/// `Conn` for as long as its client plays, and tokio sizes tasks in steps
/// of 128 B.
pub(crate) struct Conn {
    pub id: u64,
    /// Not split into halves: that would put the stream behind an `Arc`.
    stream: TcpStream,
    /// Once a session streams interleaved on this connection the engine
    /// owns the write side, so replies queue behind its `$` frames.
    attached: bool,
    /// The first session made on this connection (it may have timed out
    /// since): players make one.
    session: Option<SessionId>,
    /// Made on first use.
    more: Option<Box<More>>,
    /// RTSPS: who seals and opens its records (rustls's state is shared
    /// with the engine once it owns the write side).
    tls: Option<Encryption>,
}

#[derive(Default)]
struct More {
    /// Sessions made after the first, in order.
    sessions: Vec<SessionId>,
    /// Interleaved channels in use on this connection.
    channels: Vec<u8>,
}

impl Client for Conn {
    fn id(&self) -> u64 {
        self.id
    }

    fn peer(&self) -> std::io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    fn local(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    fn add_session(&mut self, s: SessionId) {
        match self.session {
            None => self.session = Some(s),
            Some(_) => self.more().sessions.push(s),
        }
    }

    fn channel_in_use(&self, channel: u8) -> bool {
        self.more
            .as_ref()
            .is_some_and(|m| m.channels.contains(&channel))
    }

    fn use_channels(&mut self, channels: [u8; 2]) {
        self.more().channels.extend(channels);
    }

    fn free_channels(&mut self, channels: [u8; 2]) {
        if let Some(m) = &mut self.more {
            m.channels.retain(|c| !channels.contains(c));
        }
    }

    fn attach(&mut self, out: &mut Outbox) -> std::io::Result<()> {
        if self.attached {
            return Ok(());
        }
        let fd = self.stream.as_fd().try_clone_to_owned()?;
        let seal = match &self.tls {
            Some(Encryption::User(t)) => Some(t.clone() as Arc<dyn fjord_engine::seal::Seal>),
            // The kernel seals what the engine writes.
            Some(Encryption::Kernel) | None => None,
        };
        out.push(
            self.id,
            Command::AttachConnection {
                conn: self.id,
                fd,
                seal,
            },
        );
        self.attached = true;
        Ok(())
    }
}

impl Conn {
    fn more(&mut self) -> &mut More {
        self.more.get_or_insert_default()
    }

    /// Whether sessions of this connection are still in `table`.
    fn has_sessions(&mut self, table: &Sessions) -> bool {
        self.forget_ended(table);
        self.session.is_some()
    }

    /// Forgets the sessions that are no longer in `table`.
    fn forget_ended(&mut self, table: &Sessions) {
        let live = |s: &SessionId| table.contains(*s);
        self.session = self.session.take().filter(live);
        if let Some(more) = &mut self.more {
            more.sessions.retain(live);
            if self.session.is_none() && !more.sessions.is_empty() {
                self.session = Some(more.sessions.remove(0));
            }
        }
    }

    fn sessions(&self) -> impl Iterator<Item = SessionId> + use<'_> {
        let more = self.more.as_deref().map_or(&[][..], |m| &m.sessions);
        self.session.iter().chain(more).copied()
    }

    /// A `$` frame from the client: RTCP of an interleaved stream.
    fn on_interleaved(&mut self, server: &Server, channel: u8, payload: &[u8], now: Instant) {
        let mut core = server.core.lock();
        let table = &mut core.sessions;
        self.forget_ended(table);
        for id in self.sessions() {
            let Some(s) = table.get_mut(id) else { continue };
            let stream = (s.streams.iter())
                .find(|st| st.interleaved.is_some_and(|(_, rtcp)| rtcp == channel))
                .map(|st| st.engine_id);
            if let Some(id) = stream {
                let infos = fjord_proto::rtcp::parse_compound(payload).unwrap_or_default();
                s.on_rtcp(|st| st.engine_id == id, &infos, now);
            }
        }
    }

    /// Whether sessions keep the connection open; ending one of them then
    /// wakes `waker`.
    fn wake_when_a_session_ends(&mut self, server: &Server, waker: &Waker) -> bool {
        let mut core = server.core.lock();
        let table = &mut core.sessions;
        self.forget_ended(table);
        for id in self.sessions() {
            if let Some(s) = table.get_mut(id) {
                s.wake_on_end(waker);
            }
        }
        self.session.is_some()
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
        let timeout = server.config().request_timeout();
        if let Some(Encryption::User(tls)) = &self.tls {
            return tls.write_all(&self.stream, &bytes, timeout).await.is_ok();
        }
        matches!(
            tokio::time::timeout(timeout, self.stream.write_all(&bytes)).await,
            Ok(Ok(()))
        )
    }

    /// Appends what the socket holds to `buf` (decrypted over TLS);
    /// `Ok(0)`: the client closed.
    fn read_some(&self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        match &self.tls {
            Some(Encryption::User(tls)) => tls.read_some(&self.stream, buf),
            Some(Encryption::Kernel) => crate::kernel_tls::read_some(&self.stream, buf),
            None => read_some(&self.stream, buf),
        }
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
    // A publisher's frames of one read reach the engine as one batch,
    // before any request that follows them.
    let mut live = false;
    let id = conn.id;
    let hand_out = |live: &mut bool| {
        if std::mem::take(live) {
            crate::control::live::hand_out_interleaved(server, id);
        }
    };
    loop {
        match next_frame(buf, &server.limits()) {
            Ok(Some((frame, used))) => {
                buf.drain(..used);
                let now = Instant::now();
                last = Some(now);
                match frame {
                    Frame::Request(req) => {
                        hand_out(&mut live);
                        if !respond(server, conn, &req, now).await {
                            return Served::Close;
                        }
                    }
                    Frame::Interleaved { channel, payload } => {
                        if crate::control::live::on_interleaved(server, conn.id, channel, &payload)
                        {
                            live = true;
                        } else {
                            conn.on_interleaved(server, channel, &payload, now);
                        }
                    }
                }
            }
            Ok(None) => {
                let published = live;
                hand_out(&mut live);
                if published && !report_to_publisher(server, conn).await {
                    return Served::Close;
                }
                return Served::Frames(last);
            }
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

/// Writes the receiver reports due to the publisher on `conn`; false when
/// the connection failed.
async fn report_to_publisher(server: &Server, conn: &mut Conn) -> bool {
    let Ok(local) = conn.local() else {
        return true;
    };
    for frame in crate::control::live::reports_due(server, conn.id, local.ip()) {
        if !conn.write(server, frame).await {
            return false;
        }
    }
    true
}

/// Answers one request; false when the connection is to close.
async fn respond(server: &Server, conn: &mut Conn, req: &Request, now: Instant) -> bool {
    let mut reply = crate::drive::request(server, conn, req, now).await;
    std::mem::take(&mut reply.commands).send_to(&server.engine);
    (server.metrics).request(&req.method, reply.response.status);
    crate::access::rtsp(
        server,
        conn.peer().ok(),
        req,
        reply.response.status,
        now.elapsed(),
    );
    if !conn
        .write(server, reply.response.to_bytes(req.cseq()))
        .await
    {
        return false;
    }
    if let Some(start) = reply.start {
        start.send(server);
        // Time to first packet is this, then the engine's part (which
        // warns on its own).
        let ms = now.elapsed().as_secs_f64() * 1e3;
        if ms > SLOW_PLAY_MS {
            tracing::warn!(conn = conn.id, "a PLAY took {ms:.1} ms to answer");
        }
    }
    !reply.close
}

/// A PLAY answered later than this is logged.
const SLOW_PLAY_MS: f64 = 20.0;

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

/// Bytes of a request still arriving, and since when: boxed, and only
/// while a request is being read, so an idle connection (a player between
/// keepalives) keeps neither.
struct Partial {
    buf: Vec<u8>,
    /// When the incomplete request began (none until it is known that a
    /// read did not complete it).
    since: Option<Instant>,
}

/// The task serving one connection until it closes, then ending its
/// sessions; `permit` holds its place under the connection limits. The
/// connection is set up before the `async` block, so the task holds only
/// `Conn`, not the accepted stream and address beside it; and it is one
/// block, not an `async fn` or a loop awaited inside it: either would keep
/// room for its arguments twice. Players keep this task while they play.
/// Serves an RTSP connection; `tls`, when it is RTSPS: who encrypts it,
/// and the bytes it sent that were opened before the kernel took it.
pub(crate) fn serve_connection(
    server: Arc<Server>,
    stream: TcpStream,
    peer: SocketAddr,
    permit: crate::slots::Slot,
    tls: Option<(Encryption, Vec<u8>)>,
) -> impl Future<Output = ()> + Send {
    let (tls, first) = tls.unzip();
    // Held by the task as its request buffer, not beside it.
    let mut partial =
        (first.filter(|b| !b.is_empty())).map(|buf| Box::new(Partial { buf, since: None }));
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        id: server.next_id(),
        stream,
        attached: false,
        session: None,
        more: None,
        tls,
    };
    tracing::debug!(%peer, conn = conn.id, "connected");
    async move {
        if let Some(Encryption::User(tls)) = &conn.tls {
            let mut buf = Vec::new();
            if tls.start(&conn.stream, &mut buf).is_err() {
                return;
            }
            partial = (!buf.is_empty()).then(|| Box::new(Partial { buf, since: None }));
        }
        // Until its first request a connection gets the request timeout, not
        // the idle timeout: a client that connects and says nothing goes soon.
        let mut idle_deadline = Instant::now() + server.config().request_timeout();
        // Boxed, and only while no session keeps the connection open: the
        // task of a player holds no timer.
        let mut timer: Option<Pin<Box<Sleep>>> = None;
        loop {
            if let Some(p) = partial.as_mut().filter(|p| !p.buf.is_empty()) {
                // Boxed: parsing and serving requests takes a large future,
                // which the task of an idle connection need not hold.
                match Box::pin(serve_frames(&server, &mut conn, &mut p.buf)).await {
                    Served::Close => break,
                    Served::Frames(None) => {}
                    Served::Frames(Some(at)) => {
                        idle_deadline = at + server.config().idle_timeout();
                        if let Some(p) = partial.as_mut() {
                            p.since = None;
                        }
                    }
                }
            }
            match partial.as_mut() {
                Some(p) if p.buf.is_empty() => partial = None,
                Some(p) => {
                    p.since.get_or_insert_with(Instant::now);
                }
                None => {}
            }
            let deadline = match partial.as_ref().and_then(|p| p.since) {
                Some(since) => Some(since + server.config().request_timeout()),
                None if !conn.has_sessions(&server.core.lock().sessions) => Some(idle_deadline),
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
                    None if conn.wake_when_a_session_ends(&server, cx.waker()) => Poll::Pending,
                    None => Poll::Ready(Woken::SessionEnded),
                }
            })
            .await;
            match woken {
                Woken::Readable(Err(_)) => break,
                Woken::Readable(Ok(())) => {
                    let p = partial.get_or_insert_with(|| {
                        Box::new(Partial {
                            buf: Vec::new(),
                            since: None,
                        })
                    });
                    match conn.read_some(&mut p.buf) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                }
                Woken::Deadline
                    if partial.as_ref().is_none_or(|p| p.since.is_none())
                        && crate::control::live::holds(&server, conn.id) =>
                {
                    // A publisher or live viewer: `live_timeout_s` ends it.
                    idle_deadline = Instant::now() + server.config().idle_timeout();
                }
                Woken::Deadline => {
                    tracing::debug!(
                        conn = conn.id,
                        peer = ?conn.peer().ok(),
                        "dropping a silent or slow client"
                    );
                    break;
                }
                Woken::SessionEnded => {}
            }
        }
        let mut core = server.core.lock();
        conn.forget_ended(&core.sessions);
        let mut out = Outbox::default();
        for id in conn.sessions() {
            core.remove(id, &mut out);
        }
        drop(core);
        out.send_to(&server.engine);
        crate::control::live::conn_closed(&server, conn.id);
        if conn.attached {
            server
                .engine
                .send(conn.id, Command::DetachConnection { conn: conn.id });
        }
        tracing::debug!(conn = conn.id, "closed");
        drop(permit);
    }
}

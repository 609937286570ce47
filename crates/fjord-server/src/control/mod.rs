//! RTSP methods (RFC 2326 §10): what each request does to sessions and the
//! engine, and the reply it gets.

use std::{net::SocketAddr, time::Instant};

use fjord_engine::Command;
use fjord_proto::rtsp::{
    framing::{Method, Request, Version},
    response::Response,
    session::allowed_methods,
    url::title_path,
};

use crate::{
    Server,
    guard::Verdict,
    outbox::Outbox,
    session::{Session, SessionId, Sessions, Stream},
};

mod ask;
mod describe;
pub(crate) mod live;
mod multicast;
mod pause;
mod play;
mod setup;
#[cfg(test)]
mod tests;
mod transport;

pub(crate) use ask::{Answer, PlayAsk, Question, Step, on_answer};
pub(crate) use setup::Read;
pub(crate) use transport::{Bind, Bound};

/// What the RTSP methods need of the connection a request came on; the
/// connection's task implements it over its socket.
pub(crate) trait Client: Send + Sync {
    fn id(&self) -> u64;
    fn peer(&self) -> std::io::Result<SocketAddr>;
    fn local(&self) -> std::io::Result<SocketAddr>;
    fn is_tls(&self) -> bool;
    /// The connection holds `s`: closing it ends the session.
    fn add_session(&mut self, s: SessionId);
    fn channel_in_use(&self, channel: u8) -> bool;
    fn use_channels(&mut self, channels: [u8; 2]);
    fn free_channels(&mut self, channels: [u8; 2]);
    /// Hands the connection's write side to the engine thread of the
    /// connection (interleaved streams), once: the command is put in `out`.
    fn attach(&mut self, out: &mut Outbox) -> std::io::Result<()>;
}

pub(crate) struct Reply {
    pub response: Response,
    /// Engine commands to send before the reply is written.
    pub commands: Outbox,
    /// Streams to start once the reply is written (PLAY).
    pub start: Option<PlayStart>,
    pub close: bool,
}

/// The streams a PLAY starts, all on one clock.
pub(crate) struct PlayStart {
    /// (engine shard, engine stream id)
    pub streams: Vec<(u64, u64)>,
    /// Title time at which playback starts.
    pub origin_ns: u64,
}

impl PlayStart {
    /// Starts every stream with title time `origin_ns` due now.
    pub(crate) fn send(self, server: &Server) {
        let at = std::time::Instant::now();
        for (shard, id) in self.streams {
            server.engine.send(
                shard,
                Command::Start {
                    id,
                    at,
                    origin_ns: self.origin_ns,
                },
            );
        }
    }
}

impl From<Response> for Reply {
    fn from(response: Response) -> Self {
        Reply {
            response,
            commands: Outbox::default(),
            start: None,
            close: false,
        }
    }
}

fn status(code: u16) -> Reply {
    Response::new(code).into()
}

/// An error reply with a one-line reason in a text body.
/// A refusal with its reason; a 503 (an origin title the origin cannot
/// give now) says when to ask again.
fn refuse(code: u16, reason: &str) -> Reply {
    let r = Response::new(code);
    let r = match code {
        503 => r.header("Retry-After", "2"),
        _ => r,
    };
    r.body("text/plain", format!("{reason}\r\n")).into()
}

/// Answers `req`, which arrived on `conn` at `now`: the reply, or a
/// question for the driver ([`on_answer`] takes its answer), with the
/// engine commands to send first.
pub(crate) fn handle(server: &Server, conn: &mut dyn Client, req: &Request, now: Instant) -> Step {
    let mut out = Outbox::default();
    let step = answer(server, (conn, &mut out), req, now);
    step.with_commands(out)
}

fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Step {
    if req.version != Version::V1_0 {
        return status(505).into();
    }
    if req.cseq().is_none() {
        return refuse(400, "missing or invalid CSeq").into();
    }
    if req.method != Method::Options
        && let Some(denied) = denied(server, conn, req)
    {
        return denied.into();
    }
    if let Some(live) = live::answer(server, (conn, out), req, now) {
        return live.into();
    }
    match &req.method {
        Method::Options => reply(Response::new(200).header("Public", allowed_methods())),
        Method::Describe => describe::answer(server, conn, req),
        Method::Setup => setup::answer(server, (conn, out), req, now),
        Method::Play => play::answer(server, conn, req, now),
        Method::Pause => pause::answer(server, (conn, out), req, now),
        Method::Teardown => teardown(server, (conn, out), req, now).into(),
        Method::GetParameter | Method::SetParameter => keepalive(server, conn, req, now).into(),
        Method::Announce | Method::Record | Method::Redirect => {
            reply(Response::new(405).header("Allow", allowed_methods()))
        }
        Method::Other(_) => status(501).into(),
    }
}

fn reply(response: Response) -> Step {
    Step::Reply(response.into())
}

/// The answer when the request's credentials may not read its title
/// ([`crate::guard`]): 401 with challenges, 403, or 503 while the address
/// is locked out for failed attempts.
fn denied(server: &Server, conn: &dyn Client, req: &Request) -> Option<Reply> {
    let path = title_path(&req.uri).map(|t| t.title).unwrap_or_default();
    let ip = conn
        .peer()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.ip());
    let auth = req.header("Authorization");
    let method = req.method.as_str();
    let verdict = match live::publishes(req) {
        true => (server.guard).check_publish(ip, method, auth, &path, conn.is_tls()),
        false => (server.guard).check(ip, method, auth, &path, conn.is_tls()),
    };
    match verdict {
        Verdict::Allow => None,
        Verdict::Deny(code, challenges) => {
            let mut r = Response::new(code);
            for c in challenges {
                r = r.header("WWW-Authenticate", c);
            }
            if code == 503 {
                r = r.header("Retry-After", "60");
            }
            Some(r.into())
        }
    }
}

fn session_header(server: &Server, id: SessionId) -> String {
    format!("{id};timeout={}", server.config().session_timeout_s)
}

/// The session a request names, of the connection it came on, kept
/// alive at `now`.
fn session_for<'a>(
    sessions: &'a mut Sessions,
    conn: &dyn Client,
    req: &Request,
    now: Instant,
) -> Result<&'a mut Session, Reply> {
    let Some(id) = req.session_id() else {
        // No session yet: SETUP has not happened (RFC 2326 §A.1).
        return Err(refuse(455, "SETUP first"));
    };
    let Some(session) = sessions.get(id) else {
        return Err(status(454));
    };
    if session.conn != conn.id() {
        return Err(status(454));
    }
    session.touch(now);
    Ok(session)
}

/// TEARDOWN of the session's URL ends the session; of one stream's URL
/// (RFC 2326 §10.7), that stream and its repair stream, and the session
/// goes on with the others (ended with its last).
fn teardown(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Reply {
    let mut core = server.core.lock();
    let sessions = &mut core.sessions;
    let session = match session_for(sessions, conn, req, now) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let tracks = session.title.index().track_count();
    let named = (title_path(&req.uri).ok())
        .filter(|t| *t.title == *session.title_name)
        .and_then(|t| t.track);
    let stream = named.map(|c| setup::stream_number(Some(&c), tracks));
    let ends = |st: &Stream| match stream {
        None => true,
        Some(None) => false,
        // A source stream takes its repair stream with it.
        Some(Some((track, repair))) => st.track as usize == track && (st.repair || !repair),
    };
    for (a, b) in (session.streams.iter())
        .filter(|st| ends(st))
        .filter_map(|st| st.interleaved)
    {
        conn.free_channels([a, b]);
    }
    let ending = session.streams.iter().filter(|st| ends(st)).count();
    let (all, id) = (session.streams.len(), session.id);
    // The engine sends a repair stream with its source; it cannot stop alone.
    if matches!(stream, Some(Some((_, true)))) && ending < all {
        return refuse(455, "a repair stream is torn down with its source track");
    }
    match ending {
        0 => return refuse(404, "no stream of this session has that URL"),
        n if n == all => drop(core.remove(id, out)),
        _ => core.remove_streams(id, ends, out),
    }
    status(200)
}

/// The session timeout (RFC 2326 §12.37): ends the sessions idle for
/// `session_timeout_s` at `now`, and says when the next could time out
/// (activity only moves a session's time later; a new one's is a whole
/// timeout away).
pub(crate) fn expire_idle(server: &Server, now: Instant) -> Instant {
    let timeout = server.config().session_timeout();
    let mut core = server.core.lock();
    let (idle, oldest) = match now.checked_sub(timeout) {
        Some(deadline) => core.sessions.idle_since(deadline),
        None => (Vec::new(), None),
    };
    let mut out = Outbox::default();
    for id in idle {
        tracing::info!(session = %id, "session timed out");
        core.remove(id, &mut out);
    }
    drop(core);
    out.send_to(&server.engine);
    oldest.map_or(now + timeout, |at| at + timeout)
}

/// GET_PARAMETER and SET_PARAMETER: keepalive; no parameters are settable.
fn keepalive(server: &Server, conn: &dyn Client, req: &Request, now: Instant) -> Reply {
    if req.session_id().is_some()
        && let Err(r) = session_for(&mut server.core.lock().sessions, conn, req, now)
    {
        return r;
    }
    if req.method == Method::SetParameter && !req.body.is_empty() {
        return refuse(451, "no parameter of this server can be set");
    }
    status(200)
}

//! PAUSE, now or at a Range's point ahead.

use std::time::Instant;

use fjord_engine::Command;
use fjord_proto::rtsp::{
    framing::{Method, Request},
    range,
    response::Response,
    session::next_state,
};

use super::{
    Client, Reply,
    ask::{Pending, Question, Step},
    multicast, refuse, session_for, session_header, status,
};
use crate::{
    Server,
    outbox::Outbox,
    session::{Session, SessionId},
};

/// A PAUSE: now (the engine commands in `out`), or at a Range's point
/// ahead ([`Question::PauseAt`]).
pub(super) fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Step {
    let (id, title, streams) = {
        let mut core = server.core.lock();
        let sessions = &mut core.sessions;
        let session = match session_for(sessions, conn, req, now) {
            Ok(s) => s,
            Err(r) => return r.into(),
        };
        if let Err(code) = next_state(session.state, &Method::Pause) {
            return status(code).into();
        }
        if multicast::is_member(session) {
            // The group plays on for the others (and this client keeps
            // receiving what it joined): the session only stops counting
            // as playing.
            return paused(server, session).into();
        }
        let streams: Vec<(u64, u64, u32)> = (session.streams.iter())
            .filter(|s| !s.repair)
            .map(|s| (s.shard, s.engine_id, s.track))
            .collect();
        (session.id, session.title.clone(), streams)
    };
    match pause_point(req) {
        Err(r) => r.into(),
        Ok(Some(ns)) => {
            let question = Question::PauseAt { title, streams, ns };
            Step::ask(question, Pending::Pause(id))
        }
        Ok(None) => {
            for &(shard, id, _) in &streams {
                out.push(shard, Command::Pause { id });
            }
            on_paused_at(server, id, Ok(()))
        }
    }
}

/// Every stream has its pause point, or not (`Err`: the status).
pub(super) fn on_paused_at(server: &Server, id: SessionId, set: Result<(), u16>) -> Step {
    match set {
        Err(457) => refuse(457, "the pause point is not ahead in the range playing").into(),
        Err(code) => status(code).into(),
        Ok(()) => match server.core.lock().sessions.get_mut(id) {
            Some(session) => paused(server, session).into(),
            None => status(454).into(),
        },
    }
}

/// The reply to a PAUSE that took effect: the session is paused.
fn paused(server: &Server, session: &mut Session) -> Reply {
    if let Ok(s) = next_state(session.state, &Method::Pause) {
        session.state = s;
    }
    Response::new(200)
        .header("Session", session_header(server, session.id))
        .into()
}

/// Where a PAUSE's Range asks the stream to halt (RFC 2326 §10.6: its
/// start, `npt=37` or `npt=37-`); `None`: now.
fn pause_point(req: &Request) -> Result<Option<u64>, Reply> {
    let Some(v) = req.header("Range") else {
        return Ok(None);
    };
    let v = if v.contains('-') {
        v.to_owned()
    } else {
        format!("{v}-")
    };
    match range::parse_npt(&v) {
        Ok(r) => Ok(r.start.map(|s| (s * 1e9) as u64)),
        Err(e) => Err(refuse(457, &e.to_string())),
    }
}

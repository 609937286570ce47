//! PAUSE, now or at a Range's point ahead.

use std::time::Instant;

use fjord_engine::Command;
use fjord_proto::rtsp::{
    framing::{Method, Request},
    range,
    response::Response,
    session::next_state,
};

use super::{Client, Reply, multicast, refuse, session_for, session_header, status};
use crate::{Server, outbox::Outbox, session::Session};

pub(super) async fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Reply {
    let (id, title, streams) = {
        let mut sessions = server.sessions.lock();
        let session = match session_for(&mut sessions, conn, req, now) {
            Ok(s) => s,
            Err(r) => return r,
        };
        if let Err(code) = next_state(session.state, &Method::Pause) {
            return status(code);
        }
        if multicast::is_member(session) {
            // The group plays on for the others (and this client keeps
            // receiving what it joined): the session only stops counting
            // as playing.
            return paused(server, session);
        }
        let streams: Vec<(u64, u64, u32)> = (session.streams.iter())
            .filter(|s| !s.repair)
            .map(|s| (s.shard, s.engine_id, s.track))
            .collect();
        (session.id, session.title.clone(), streams)
    };
    let point = match pause_point(req) {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Some(ns) = point {
        for &(shard, engine_id, track) in &streams {
            let title = title.clone();
            let Ok(packet) =
                tokio::task::spawn_blocking(move || title.end_packet(track as usize, ns)).await
            else {
                return status(500);
            };
            if !engine_pause_at(server, shard, engine_id, packet, ns).await {
                return refuse(457, "the pause point is not ahead in the range playing");
            }
        }
    } else {
        for &(shard, id, _) in &streams {
            out.push(shard, Command::Pause { id });
        }
    }
    match server.sessions.lock().get_mut(id) {
        Some(session) => paused(server, session),
        None => status(454),
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

/// Sets a pause point on an engine stream; false when it is not ahead.
async fn engine_pause_at(server: &Server, shard: u64, id: u64, packet: u32, ns: u64) -> bool {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reply = Box::new(move |ok| {
        let _ = tx.send(ok);
    });
    let pause = Command::PauseAt {
        id,
        packet,
        ns,
        reply,
    };
    server.engine.send(shard, pause);
    rx.await.unwrap_or(false)
}

//! SETUP and PLAY of multicast sessions: their streams are their
//! group's ([`crate::multicast`]), which plays from the title's start at
//! its own pace for every session in it. A PLAY is answered when its group
//! starts: the batching window delays the reply, not the data after it.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_engine::Title;
use fjord_proto::rtsp::{
    framing::{Method, Request},
    range,
    response::Response,
    rtp_info,
    session::{State, next_state},
    transport,
};

use super::{
    Client, Reply,
    ask::{Pending, Question, Step},
    refuse, session_header, status,
};
use crate::{
    Server,
    metrics::Refusal,
    multicast::{Group, GroupError, Started, Wish},
    outbox::Outbox,
    session::{ReceiverStats, Session, SessionId, Sessions, Stream, StreamRtcp},
};

/// How long before its group's first packet a PLAY is answered.
const REPLY_LEAD: Duration = Duration::from_millis(20);

/// Whether `session`'s streams are a multicast group's.
pub(super) fn is_member(session: &Session) -> bool {
    session.streams.iter().any(|s| s.group.is_some())
}

/// SETUP of `track` (its repair stream with `repair`) over multicast,
/// with the client's `wish`: the session (new, or `existing`) joins
/// its title's gathering group, or the group its other tracks are in.
pub(super) fn setup(
    server: &Server,
    (sessions, conn, out): (&mut Sessions, &mut dyn Client, &mut Outbox),
    req: &Request,
    existing: Option<SessionId>,
    (title_name, title): (Arc<str>, Arc<Title>),
    (track, repair, wish): (usize, bool, Wish),
    now: Instant,
) -> Reply {
    let (peer, local) = match (conn.peer(), conn.local()) {
        (Ok(p), Ok(l)) => (p, l.ip()),
        (Err(e), _) | (_, Err(e)) => return refuse(500, &e.to_string()),
    };
    let named = match existing {
        // It may have ended since it was named.
        Some(id) => match sessions.get_mut(id) {
            Some(s) => Some(s),
            None => return status(454),
        },
        None => None,
    };
    let group = match named.map(|s| group_of(s, track, repair)).transpose() {
        Ok(Some(g)) => g,
        Ok(None) => match server
            .multicast
            .group_for(&title_name, wish, &server.config())
        {
            Ok(g) => g,
            Err(e) => return refuse(e.status(), &e.to_string()),
        },
        Err(r) => return r,
    };
    // Joined first: leaving ends a group made for this SETUP alone.
    group.join();
    let id = match existing {
        Some(id) => id,
        None => {
            let s = Session::new(
                SessionId::random(),
                (conn.id(), peer),
                title_name,
                title.clone(),
                now,
            );
            let id = s.id;
            if let Err(r) = super::setup::admit_session(server, sessions, s) {
                group.leave(out, &mut sessions.admission);
                return r;
            }
            id
        }
    };
    let tracks = title.index().track_count();
    let stream = match repair {
        false => group.track(
            (server, &mut sessions.admission),
            &title,
            track as u32,
            local,
        ),
        true => {
            let pt = crate::title_streams::repair_payload_type(&title);
            group.repair(server, (track as u32, tracks), local, pt)
        }
    };
    let joined = stream.and_then(|t| Ok((t, member_share(&mut sessions.admission, t.1)?)));
    let ((engine_id, shard, ssrc), reservation) = match joined {
        Ok(j) => j,
        Err(e) => {
            group.leave(out, &mut sessions.admission);
            if existing.is_none() {
                sessions.remove(id, out);
            }
            count_refusal(server, &e);
            return refuse(e.status(), &e.to_string());
        }
    };
    let (rtp, rtcp) = group.ports(if repair { tracks + track } else { track });
    let reply = transport::reply_multicast(group.addr, rtp, rtcp, group.ttl, ssrc);
    // Still there: the table has been locked since it was found or added.
    let Some(session) = sessions.get_mut(id) else {
        sessions.admission.release(&reservation);
        group.leave(out, &mut sessions.admission);
        return status(454);
    };
    session.add_stream(Stream {
        track: track as u32,
        repair,
        engine_id,
        shard,
        url: req.uri.as_str().into(),
        interleaved: None,
        rtcp: StreamRtcp::None,
        reports: ReceiverStats::default(),
        reservation,
        _storage: None,
        _connected: None,
        group: Some(group),
    });
    super::setup::keep_stream(conn, session, existing.is_none(), now);
    Response::new(200)
        .header("Transport", &reply)
        .header("Session", session_header(server, id))
        .into()
}

/// The group `session`'s tracks are in; a session of unicast tracks, or
/// one playing, takes no multicast track.
fn group_of(session: &Session, track: usize, repair: bool) -> Result<Arc<Group>, Reply> {
    if session.state == State::Playing {
        return Err(refuse(455, "cannot add a track while playing"));
    }
    let same = |s: &Stream| s.track as usize == track && s.repair == repair;
    if session.streams.iter().any(same) {
        return Err(refuse(455, "track already set up in this session"));
    }
    match session.streams.iter().find_map(|s| s.group.clone()) {
        Some(g) => Ok(g),
        None => Err(refuse(
            461,
            "a session's tracks all go by multicast or none",
        )),
    }
}

/// A member's share of its group's engine thread: none (the group holds
/// the stream's), but every stream carries one.
fn member_share(
    admission: &mut crate::admission::Admission,
    shard: u64,
) -> Result<crate::admission::Reservation, GroupError> {
    admission
        .reserve(Some(shard as usize), 0)
        .ok_or(GroupError::Capacity)
}

fn count_refusal(server: &Server, e: &GroupError) {
    match e {
        GroupError::Capacity => server.metrics.refused(Refusal::Engine),
        GroupError::Storage(e) => server.metrics.refused(Refusal::Storage(e.limit())),
        _ => {}
    }
}

/// PLAY: the group starts (at its first PLAY, after the batching window)
/// or has ([`Question::GroupStart`]); the reply, sent as it starts, says
/// where its streams begin. A group plays from the title's start in real
/// time: a Range starting later, a `Scale` or a `Speed` other than 1
/// cannot be had.
pub(super) fn play(
    server: &Server,
    (id, title): (SessionId, Arc<Title>),
    req: &Request,
    now: Instant,
) -> Step {
    let one = |h: Option<&str>| h.is_none_or(|v| v.trim().parse::<f64>() == Ok(1.0));
    if !one(req.header("Scale")) || !one(req.header("Speed")) {
        let why = "a multicast stream plays at its own pace: no Scale or Speed";
        return refuse(456, why).into();
    }
    // Players ask for `npt=0-` or for the whole title by its duration.
    let whole_s = title.index().duration_ns() as f64 / 1e9 - 0.001;
    match req.header("Range").map(range::parse_npt) {
        Some(Err(e)) => return refuse(457, &e.to_string()).into(),
        Some(Ok(r)) if r.start.is_some_and(|s| s > 0.0) || r.end.is_some_and(|e| e < whole_s) => {
            let why = "a multicast stream is shared: it plays the whole title";
            return refuse(457, why).into();
        }
        _ => {}
    }
    let mut sessions = server.sessions.lock();
    let Some(s) = sessions.get_mut(id) else {
        return status(454).into();
    };
    if let Err(code) = next_state(s.state, &Method::Play) {
        return status(code).into();
    }
    let Some(group) = s.streams.iter().find_map(|st| st.group.clone()) else {
        return status(455).into();
    };
    // Now: the batching window may delay the reply past the timeout.
    s.played(now);
    Step::ask(
        Question::GroupStart { group, title },
        Pending::GroupStart(id),
    )
}

/// The group started (or could not): the reply waits for its start, less
/// [`REPLY_LEAD`]. Players (GStreamer) time what arrives from their
/// PLAY's reply, so data long after it is "late".
pub(super) fn on_started(id: SessionId, started: Option<Started>) -> Step {
    let Some(started) = started else {
        return status(500).into();
    };
    let reply_at = started.at.checked_sub(REPLY_LEAD).unwrap_or(started.at);
    Step::ask(Question::Wait(reply_at), Pending::GroupReply(id, started))
}

/// The reply to a multicast PLAY, due now: RTP-Info of the group's start.
pub(super) fn on_reply_due(server: &Server, id: SessionId, started: Started) -> Step {
    let rtp_info: Vec<(String, u16, u32)> = {
        let mut sessions = server.sessions.lock();
        let Some(s) = sessions.get_mut(id) else {
            return status(454).into();
        };
        if let Ok(state) = next_state(s.state, &Method::Play) {
            s.state = state;
        }
        (s.streams.iter())
            .filter_map(|st| {
                let &(_, seq, ts) = started.tracks.iter().find(|t| t.0 == st.track)?;
                Some((st.url.to_string(), seq, ts))
            })
            .collect()
    };
    // An open range: GStreamer clips a stream at a range's end counted
    // from its PLAY, which a group's batching window puts late.
    let response = Response::new(200)
        .header("Range", range::format_npt(0.0, None))
        .header("RTP-Info", rtp_info::format(&rtp_info))
        .header("Session", session_header(server, id));
    Step::Reply(response.into())
}

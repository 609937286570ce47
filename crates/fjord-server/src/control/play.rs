//! PLAY of a unicast session: its Range, Scale and Speed, where each
//! stream starts and stops, and the reply's RTP-Info.

use std::{sync::Arc, time::Instant};

use fjord_engine::{PlayInfo, Title};
use fjord_proto::rtsp::{
    framing::{Method, Request},
    range,
    response::Response,
    rtp_info,
    session::{State, next_state},
};

use super::{
    Client, PlayStart, Reply,
    ask::{Pending, PlayAsk, Question, Step},
    multicast, refuse, session_for, session_header, status,
};
use crate::{
    Server,
    admission::Admission,
    metrics::Refusal,
    scale,
    session::{Session, SessionId, Stream},
};

/// A PLAY: refused, or planned and put to the engine ([`Question::Play`],
/// after [`Question::Position`] for a trick play without a Range).
pub(super) fn answer(server: &Server, conn: &dyn Client, req: &Request, now: Instant) -> Step {
    let plan = match begin(server, conn, req, now) {
        Ok(Begun::Unicast(p)) => p,
        Ok(Begun::Multicast(member)) => return multicast::play(server, member, req, now),
        Err(r) => return r.into(),
    };
    // Into, out of or between trick plays without a Range: on from where
    // the title stands.
    if plan.from_where_it_stands
        && let Some(&(shard, id, ..)) = plan.streams.first()
    {
        return Step::ask(Question::Position { shard, id }, Pending::PlayFrom(plan));
    }
    position(plan)
}

/// The engine said where the session's first stream stands (`None`:
/// nowhere yet, so the streams resume).
pub(super) fn on_position(mut plan: Plan, at: Option<u64>) -> Step {
    plan.seek_ns = at;
    position(plan)
}

/// Asks the engine to position every stream where the plan says.
fn position(mut plan: Plan) -> Step {
    // A seek starts every track at the random-access point of the title's
    // first track that has them (the video) at or before the requested time;
    // before the first one (other tracks may start earlier), at that time.
    plan.seek_ns = plan.seek_ns.map(|ns| {
        let index = plan.title.index();
        let key = index.tracks().find(|t| t.sync_count() > 0);
        key.map_or(ns, |t| t.sync_before(ns).time_ns.min(ns))
    });
    let ask = PlayAsk {
        title: plan.title.clone(),
        streams: (plan.streams.iter())
            .map(|(shard, id, _, track)| (*shard, *id, *track))
            .collect(),
        seek_ns: plan.seek_ns,
        end_ns: plan.end_ns,
        rate: plan.rate,
        queue: plan.queue,
    };
    Step::ask(Question::Play(ask), Pending::Play(plan))
}

/// The engine positioned the streams (`infos`, in the plan's order), or
/// could not: the reply.
pub(super) fn on_played(server: &Server, plan: Plan, infos: Result<Vec<PlayInfo>, u16>) -> Step {
    let infos = match infos {
        Ok(i) if i.len() == plan.streams.len() => i,
        Ok(_) => return status(500).into(),
        Err(code) => return status(code).into(),
    };
    if !server.core.lock().sessions.contains(plan.session) {
        return status(454).into();
    }
    played(server, plan, infos).into()
}

/// What a PLAY's first look at its session finds.
enum Begun {
    Unicast(Plan),
    /// The session's streams are a multicast group's (its id and title).
    Multicast((SessionId, Arc<Title>)),
}

fn begin(server: &Server, conn: &dyn Client, req: &Request, now: Instant) -> Result<Begun, Reply> {
    let mut core = server.core.lock();
    let sessions = &mut core.sessions;
    let session = session_for(sessions, conn, req, now)?;
    if multicast::is_member(session) {
        return Ok(Begun::Multicast((session.id, session.title.clone())));
    }
    let id = session.id;
    let Some(found) = sessions.with_admission(id) else {
        return Err(status(454));
    };
    plan(server, found, req, now).map(Begun::Unicast)
}

/// What a PLAY does to a session's streams, decided before the engine
/// is asked anything.
pub(super) struct Plan {
    session: SessionId,
    title: Arc<Title>,
    /// (engine shard, engine id, RTP-Info URL, track) of each source stream.
    streams: Vec<(u64, u64, String, u32)>,
    rate: scale::Rate,
    /// Where to start (`None`: resume) and stop, as [`Requested`].
    seek_ns: Option<u64>,
    end_ns: Option<Option<u64>>,
    /// Start where the streams stand now (a change of direction or of
    /// trick play without a Range).
    from_where_it_stands: bool,
    /// Wait for the range playing to end (RFC 2326 §10.5).
    queue: bool,
    /// The request had a `Scale`, a `Speed` header: the reply has one.
    asked_scale: bool,
    asked_speed: bool,
}

/// Checks a PLAY against the session's state and the engine threads'
/// room, and moves the session to playing at its new rate.
fn plan(
    server: &Server,
    (session, admission): (&mut Session, &mut Admission),
    req: &Request,
    now: Instant,
) -> Result<Plan, Reply> {
    let (scale_h, speed_h) = (req.header("Scale"), req.header("Speed"));
    let rate = scale::requested(scale_h, speed_h, server.config().max_speed, &session.title)
        .map_err(|(code, why)| refuse(code, &why))?;
    let duration_ns = session.title.index().duration_ns();
    let (seek_ns, mut end_ns) = requested_range(req, duration_ns, rate.scale < 0)?;
    let was_playing = session.state == State::Playing;
    let playing = next_state(session.state, &Method::Play).map_err(status)?;
    let speed_was = session.speed;
    if !resize_for_speed(admission, &mut session.streams, speed_was, rate.speed) {
        server.metrics.refused(Refusal::Speed);
        return Err(refuse(453, "no room on the engine thread for that Speed"));
    }
    session.speed = rate.speed;
    session.state = playing;
    session.played(now);
    let scale_was = std::mem::replace(&mut session.scale, rate.scale);
    let streams = (session.streams.iter())
        .filter(|s| !s.repair)
        .map(|s| (s.shard, s.engine_id, s.url.to_string(), s.track))
        .collect();
    // A change of direction plays to the end of the new one.
    if rate.scale != scale_was && end_ns.is_none() {
        end_ns = Some(None);
    }
    let trick = rate.scale != scale_was || rate.scale != 1;
    Ok(Plan {
        session: session.id,
        title: session.title.clone(),
        streams,
        rate,
        seek_ns,
        end_ns,
        from_where_it_stands: trick && seek_ns.is_none(),
        queue: seek_ns.is_some() && was_playing && rate.scale == 1 && scale_was == 1,
        asked_scale: scale_h.is_some(),
        asked_speed: speed_h.is_some(),
    })
}

/// The reply to a PLAY the engine positioned every stream for: RTP-Info
/// of each, and the streams to start once it is written (not those
/// queued behind the range playing).
fn played(server: &Server, plan: Plan, infos: Vec<PlayInfo>) -> Reply {
    let infos: Vec<(String, (u64, u64), PlayInfo)> = (plan.streams.into_iter())
        .zip(infos)
        .map(|((shard, id, url, _), info)| (url, (shard, id), info))
        .collect();
    // Streams paused together stand at (nearly) the same time; the first
    // one's is the session's.
    let origin_ns = infos.first().map_or(0, |(.., i)| i.time_ns);
    let duration_ns = plan.title.index().duration_ns();
    let end_s = infos.first().map_or(duration_ns, |(.., i)| i.end_ns) as f64 / 1e9;
    let started = (infos.iter())
        .filter(|(.., i)| !i.queued)
        .map(|(_, stream, _)| *stream)
        .collect();
    let rtp_info: Vec<(String, u16, u32)> = (infos.into_iter())
        .map(|(u, _, i)| (u, i.seq, i.rtptime))
        .collect();
    let mut response = Response::new(200);
    if plan.asked_scale || plan.rate.scale != 1 {
        response.push_header("Scale", plan.rate.scale.to_string());
    }
    if plan.asked_speed {
        let speed = f64::from(plan.rate.speed) / f64::from(fjord_engine::REAL_TIME);
        response.push_header("Speed", speed.to_string());
    }
    let range = range::format_npt(origin_ns as f64 / 1e9, Some(end_s));
    Reply {
        commands: Default::default(),
        response: response
            .header("Range", range)
            .header("RTP-Info", rtp_info::format(&rtp_info))
            .header("Session", session_header(server, plan.session)),
        start: Some(PlayStart {
            streams: started,
            origin_ns,
        }),
        close: false,
    }
}

/// Where a PLAY's Range asks to start, in ns (`None`: resume) and to stop
/// (`None`: no Range, keep the previous end; `Some(None)`: the title's
/// end, or its start going `backwards`). `npt=now-` resumes; an end past
/// the title is its end.
type Requested = (Option<u64>, Option<Option<u64>>);

fn requested_range(req: &Request, duration_ns: u64, backwards: bool) -> Result<Requested, Reply> {
    let parse = if backwards {
        range::parse_npt_backwards
    } else {
        range::parse_npt
    };
    match req.header("Range").map(parse) {
        None => Ok((None, None)),
        Some(Err(e)) => Err(refuse(457, &e.to_string())),
        Some(Ok(r)) => {
            let seek_ns = r.start.map(|s| (s * 1e9) as u64);
            if seek_ns.is_some_and(|ns| ns > duration_ns) {
                return Err(refuse(457, "start beyond the end of the title"));
            }
            let end_ns = r.end.map(|e| ((e * 1e9) as u64).min(duration_ns));
            Ok((seek_ns, Some(end_ns)))
        }
    }
}

/// Sizes every stream's admission reservation for delivery at `speed`
/// (millionths) instead of `was`; false, and none changed, when a
/// thread has no room.
fn resize_for_speed(
    admission: &mut Admission,
    streams: &mut [Stream],
    was: u32,
    speed: u32,
) -> bool {
    for i in 0..streams.len() {
        if !admission.resize(&mut streams[i].reservation, speed) {
            for st in &mut streams[..i] {
                admission.resize(&mut st.reservation, was);
            }
            return false;
        }
    }
    true
}

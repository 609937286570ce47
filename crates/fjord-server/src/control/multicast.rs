//! SETUP and PLAY of multicast sessions: their streams are their
//! group's ([`crate::multicast`]), which plays from the title's start at
//! its own pace for every session in it. A PLAY is answered when its group
//! starts: the batching window delays the reply, not the data after it.

use std::{
    net::IpAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_engine::{Command, Output, PlayInfo, RepairSpec, SessionSpec, Title};
use fjord_proto::rtsp::{
    framing::{Method, Request},
    range,
    response::Response,
    rtp_info,
    session::{State, next_state},
    transport,
};
use fjord_storage::StorageReservation;

use super::{
    Client, PlayAsk, Reply,
    ask::{Pending, Question, Step},
    refuse, session_header, status,
    transport::{Bind, Bound},
};
use crate::{
    Server,
    admission::{Admission, Reservation},
    core::Core,
    metrics::Refusal,
    multicast::{GroupError, GroupId, GroupTrack, Starting, Wish},
    outbox::Outbox,
    scale::Rate,
    session::{ReceiverStats, Session, SessionId, Stream, StreamRtcp},
    title_streams,
};

/// How long before its group's first packet a PLAY is answered.
const REPLY_LEAD: Duration = Duration::from_millis(20);

/// How often a PLAY whose group's start is still being positioned looks
/// again, once the reply is due.
const START_POLL: Duration = Duration::from_millis(10);

/// Whether `session`'s streams are a multicast group's.
pub(super) fn is_member(session: &Session) -> bool {
    session.streams.iter().any(|s| s.group.is_some())
}

/// A SETUP joining a group, from its decision to its reply. It holds one
/// of the group's memberships until the stream it adds does, so the group
/// cannot end under it.
pub(crate) struct Joining {
    session: SessionId,
    /// The session was made by this SETUP: a failure ends it.
    new: bool,
    /// The connection holds the session already.
    on_conn: bool,
    group: GroupId,
    track: usize,
    repair: bool,
    url: Box<str>,
    now: Instant,
}

/// SETUP of `track` (its repair stream with `repair`) over multicast,
/// with the client's `wish`: the session (new, or `existing`) joins
/// its title's gathering group, or the group its other tracks are in.
/// A stream the group does not have yet is opened: its share of the
/// engine and the disk reserved, its sockets asked of the driver
/// ([`Bind::Group`]).
pub(super) fn setup(
    server: &Server,
    (core, conn, out): (&mut Core, &mut dyn Client, &mut Outbox),
    req: &Request,
    existing: Option<SessionId>,
    (title_name, title): (Arc<str>, Arc<Title>),
    (track, repair, wish): (usize, bool, Wish),
    now: Instant,
) -> Step {
    let (peer, local) = match (conn.peer(), conn.local()) {
        (Ok(p), Ok(l)) => (p, l.ip()),
        (Err(e), _) | (_, Err(e)) => return refuse(500, &e.to_string()).into(),
    };
    let named = match existing {
        // It may have ended since it was named.
        Some(id) => match core.sessions.get_mut(id) {
            Some(s) => Some(s),
            None => return status(454).into(),
        },
        None => None,
    };
    let group = match named.map(|s| group_of(s, track, repair)).transpose() {
        Ok(Some(g)) => g,
        Ok(None) => match (core.groups).group_for(&title_name, wish, &server.config(), now) {
            Ok(g) => g,
            Err(e) => return refuse(e.status(), &e.to_string()).into(),
        },
        Err(r) => return r.into(),
    };
    // Joined first: leaving ends a group made for this SETUP alone.
    if let Some(g) = core.groups.get_mut(group) {
        g.join();
    }
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
            if let Err(r) = super::setup::admit_session(server, &mut core.sessions, s) {
                core.groups.leave(group, out, &mut core.sessions.admission);
                return r.into();
            }
            id
        }
    };
    let j = Joining {
        session: id,
        new: existing.is_none(),
        on_conn: false,
        group,
        track,
        repair,
        url: req.uri.as_str().into(),
        now,
    };
    match found(core, &j) {
        Ok(Some(stream)) => joined(server, (core, conn, out), j, stream).into(),
        Ok(None) => open(server, (core, conn, out), j, &title, local),
        Err(e) => fail(server, (core, out), &j, e).into(),
    }
}

/// The group's stream the SETUP asks for (engine id, shard, SSRC), if
/// the group has it; a group that started takes no new one.
fn found(core: &Core, j: &Joining) -> Result<Option<(u64, u64, u32)>, GroupError> {
    let group = core.groups.get(j.group).ok_or(GroupError::Started)?;
    match j.repair {
        false => group.track(j.track as u32),
        true => group.repair(j.track as u32),
    }
}

/// The group `session`'s tracks are in; a session of unicast tracks, or
/// one playing, takes no multicast track.
fn group_of(session: &Session, track: usize, repair: bool) -> Result<GroupId, Reply> {
    if session.state == State::Playing {
        return Err(refuse(455, "cannot add a track while playing"));
    }
    let same = |s: &Stream| s.track as usize == track && s.repair == repair;
    if session.streams.iter().any(same) {
        return Err(refuse(455, "track already set up in this session"));
    }
    match session.streams.iter().find_map(|s| s.group) {
        Some(g) => Ok(g),
        None => Err(refuse(
            461,
            "a session's tracks all go by multicast or none",
        )),
    }
}

/// A SETUP that cannot join: it leaves the group (ending one made for it
/// alone) and ends a session it made.
fn fail(
    server: &Server,
    (core, out): (&mut Core, &mut Outbox),
    j: &Joining,
    e: GroupError,
) -> Reply {
    core.groups
        .leave(j.group, out, &mut core.sessions.admission);
    if j.new {
        core.remove(j.session, out);
    }
    count_refusal(server, &e);
    refuse(e.status(), &e.to_string())
}

/// The group's new stream: what it holds (none for a repair stream,
/// which its source's engine stream sends), then its sockets, asked of
/// the driver.
fn open(
    server: &Server,
    (core, conn, out): (&mut Core, &mut dyn Client, &mut Outbox),
    mut j: Joining,
    title: &Arc<Title>,
    local: IpAddr,
) -> Step {
    let Some(group) = core.groups.get(j.group) else {
        return fail(server, (core, out), &j, GroupError::Started).into();
    };
    let tracks = title.index().track_count();
    let (rtp, rtcp) = group.destination(stream_of(&j, tracks));
    let bind = Bind::Group {
        local,
        rtp,
        rtcp,
        ttl: group.ttl,
    };
    let held = match j.repair {
        true => None,
        false => match reserve(server, &mut core.sessions.admission, title, j.track) {
            Ok(h) => Some(h),
            Err(e) => return fail(server, (core, out), &j, e).into(),
        },
    };
    // Held by the connection now: one that fails is gone from the table,
    // which the connection then forgets.
    if j.new {
        conn.add_session(j.session);
        j.on_conn = true;
    }
    let binding = GroupBinding {
        joining: j,
        title: title.clone(),
        held,
    };
    Step::ask(Question::Bind(bind), Pending::GroupBind(Box::new(binding)))
}

/// Stream `n` of the group: track `i` is `i`, its repair stream
/// `tracks + i`.
fn stream_of(j: &Joining, tracks: usize) -> usize {
    if j.repair { tracks + j.track } else { j.track }
}

/// A SETUP waiting for the sockets of its group's new stream.
pub(crate) struct GroupBinding {
    joining: Joining,
    title: Arc<Title>,
    /// A track's share (none for a repair stream).
    held: Option<Share>,
}

/// A group track's share of an engine thread and of the storage layer,
/// held by its SETUP while its sockets are bound, then by the group.
struct Share {
    reservation: Reservation,
    storage: Option<Box<StorageReservation>>,
}

/// Gives back a share a SETUP held for a stream it did not add.
fn give_back(held: Option<Share>, admission: &mut Admission) {
    if let Some(share) = held {
        admission.release(&share.reservation);
    }
}

/// The track's share of an engine thread and of the storage layer.
fn reserve(
    server: &Server,
    admission: &mut Admission,
    title: &Title,
    track: usize,
) -> Result<Share, GroupError> {
    let pps = title_streams::track_pps(title, track);
    let reservation = admission.reserve(None, pps).ok_or(GroupError::Capacity)?;
    let Some(storage) = &server.storage else {
        return Ok(Share {
            reservation,
            storage: None,
        });
    };
    match storage.reserve(title, pps * title_streams::average_packet_bytes(title)) {
        Ok(r) => Ok(Share {
            reservation,
            storage: Some(Box::new(r)),
        }),
        Err(e) => {
            admission.release(&reservation);
            Err(GroupError::Storage(e))
        }
    }
}

/// The driver bound the group's new stream's sockets, or could not: the
/// stream is added to the group (unless another SETUP added it
/// meanwhile: this one's sockets and reservation go back) and the SETUP
/// joins it.
pub(super) fn on_bound(
    server: &Server,
    conn: &mut dyn Client,
    b: GroupBinding,
    bound: std::io::Result<Bound>,
) -> Step {
    let mut core = server.core.lock();
    let core = &mut *core;
    let mut out = Outbox::default();
    let GroupBinding {
        joining: j,
        title,
        held,
    } = b;
    if !core.sessions.contains(j.session) {
        give_back(held, &mut core.sessions.admission);
        core.groups
            .leave(j.group, &mut out, &mut core.sessions.admission);
        return Step::from(status(454)).with_commands(out);
    }
    let made = match bound {
        Ok(Bound::Group(output)) => add(server, (core, &mut out), &j, (&title, output), held),
        other => {
            give_back(held, &mut core.sessions.admission);
            let e = other.err();
            Err(GroupError::Io(
                e.unwrap_or_else(|| std::io::ErrorKind::Unsupported.into()),
            ))
        }
    };
    let step = match made {
        Ok(stream) => joined(server, (core, conn, &mut out), j, stream),
        Err(e) => fail(server, (core, &mut out), &j, e),
    };
    Step::from(step).with_commands(out)
}

/// Adds the stream `j` asks for to its group, sending with `output` (the
/// engine command in `out`); if the group has it already, the one it has.
fn add(
    server: &Server,
    (core, out): (&mut Core, &mut Outbox),
    j: &Joining,
    (title, output): (&Arc<Title>, Output),
    held: Option<Share>,
) -> Result<(u64, u64, u32), GroupError> {
    let found = found(core, j);
    let admission = &mut core.sessions.admission;
    let group = match (found, core.groups.get_mut(j.group)) {
        (Ok(None), Some(g)) => g,
        (found, _) => {
            give_back(held, admission);
            return found.and_then(|f| f.ok_or(GroupError::Started));
        }
    };
    let track = j.track as u32;
    if j.repair {
        let source = (group.track(track)?).ok_or(GroupError::NoSource)?;
        let (id, shard, _) = source;
        let ssrc = rand::random();
        let repair = Box::new(RepairSpec {
            ssrc,
            seq0: rand::random(),
            payload_type: title_streams::repair_payload_type(title),
            output,
        });
        out.push(shard, Command::AttachRepair { id, repair });
        group.add_repair(track, ssrc);
        return Ok((id, shard, ssrc));
    }
    let Some(Share {
        reservation,
        storage,
    }) = held
    else {
        return Err(GroupError::Capacity);
    };
    let ids = title
        .prefab_ids(j.track)
        .unwrap_or_else(|| fjord_media::prefab::Ids {
            ssrc: rand::random(),
            seq0: rand::random(),
            ts0: rand::random(),
        });
    let engine_id = server.next_id();
    let shard = reservation.thread as u64;
    out.push(
        shard,
        Command::Add(Box::new(SessionSpec {
            id: engine_id,
            title: title.clone(),
            track: j.track,
            ssrc: ids.ssrc,
            seq0: ids.seq0,
            ts0: ids.ts0,
            output,
        })),
    );
    group.add_track(GroupTrack {
        track,
        engine_id,
        shard,
        ssrc: ids.ssrc,
        repair: None,
        reservation,
        _storage: storage,
    });
    Ok((engine_id, shard, ids.ssrc))
}

/// The session takes its share of the group's `stream` (engine id,
/// shard, SSRC): the reply names the group and its ports.
fn joined(
    server: &Server,
    (core, conn, out): (&mut Core, &mut dyn Client, &mut Outbox),
    j: Joining,
    (engine_id, shard, ssrc): (u64, u64, u32),
) -> Reply {
    let reservation = match member_share(&mut core.sessions.admission, shard) {
        Ok(r) => r,
        Err(e) => return fail(server, (core, out), &j, e),
    };
    let (Some(group), Some(session)) = (core.groups.get(j.group), core.sessions.get_mut(j.session))
    else {
        // The session ended meanwhile.
        core.sessions.admission.release(&reservation);
        core.groups
            .leave(j.group, out, &mut core.sessions.admission);
        return status(454);
    };
    let tracks = session.title.index().track_count();
    let (rtp, rtcp) = group.ports(stream_of(&j, tracks));
    let reply = transport::reply_multicast(group.addr, rtp, rtcp, group.ttl, ssrc);
    session.add_stream(Stream {
        track: j.track as u32,
        repair: j.repair,
        engine_id,
        shard,
        url: j.url,
        interleaved: None,
        rtcp: StreamRtcp::None,
        reports: ReceiverStats::default(),
        reservation,
        _storage: None,
        _connected: None,
        group: Some(j.group),
    });
    super::setup::keep_stream(conn, session, j.new && !j.on_conn, j.now);
    Response::new(200)
        .header("Transport", &reply)
        .header("Session", session_header(server, j.session))
        .into()
}

/// A member's share of its group's engine thread: none (the group holds
/// the stream's), but every stream carries one.
fn member_share(admission: &mut Admission, shard: u64) -> Result<Reservation, GroupError> {
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

/// PLAY: the group starts (at its first PLAY, after the batching window:
/// the engine is asked to position its streams) or has; the reply, sent
/// as it starts, says where its streams begin. A group plays from the
/// title's start in real time: a Range starting later, a `Scale` or a
/// `Speed` other than 1 cannot be had.
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
    let mut core = server.core.lock();
    let core = &mut *core;
    let Some(s) = core.sessions.get_mut(id) else {
        return status(454).into();
    };
    if let Err(code) = next_state(s.state, &Method::Play) {
        return status(code).into();
    }
    let Some((gid, group)) =
        (s.streams.iter().find_map(|st| st.group)).and_then(|g| Some((g, core.groups.get_mut(g)?)))
    else {
        return status(455).into();
    };
    // Now: the batching window may delay the reply past the timeout.
    s.played(now);
    match group.start(now) {
        Starting::At(at) => reply_at_start(id, at),
        Starting::Position { at, streams } => {
            let ask = PlayAsk {
                title,
                streams: streams.clone(),
                seek_ns: Some(0),
                end_ns: Some(None),
                rate: Rate::NORMAL,
                queue: false,
            };
            let start = GroupStart {
                session: id,
                group: gid,
                at,
                streams,
            };
            Step::ask(Question::Play(ask), Pending::GroupStart(Box::new(start)))
        }
    }
}

/// A group's first PLAY, while the engine positions its streams.
pub(crate) struct GroupStart {
    session: SessionId,
    group: GroupId,
    at: Instant,
    /// (shard, engine id, track) of each of the group's streams.
    streams: Vec<(u64, u64, u32)>,
}

/// The engine positioned the group's streams (they start at the group's
/// start: the commands go with the step), or could not (500; the next
/// PLAY tries again).
pub(super) fn on_positioned(
    server: &Server,
    g: GroupStart,
    infos: Result<Vec<PlayInfo>, u16>,
) -> Step {
    let mut core = server.core.lock();
    // Every member left meanwhile.
    let Some(group) = core.groups.get_mut(g.group) else {
        return status(454).into();
    };
    match infos {
        Ok(infos) if infos.len() == g.streams.len() => {
            let mut out = Outbox::default();
            group.started(g.at, &g.streams, &infos, &mut out);
            reply_at_start(g.session, g.at).with_commands(out)
        }
        _ => {
            group.start_failed();
            status(500).into()
        }
    }
}

/// The reply waits for the group's start, less [`REPLY_LEAD`]. Players
/// (GStreamer) time what arrives from their PLAY's reply, so data long
/// after it is "late".
fn reply_at_start(id: SessionId, at: Instant) -> Step {
    let due = at.checked_sub(REPLY_LEAD).unwrap_or(at);
    Step::ask(Question::Wait(due), Pending::GroupReply(id, due))
}

/// The reply to a multicast PLAY, due at `due`: RTP-Info of the group's
/// start; if the engine is still positioning its streams, a little later.
pub(super) fn on_reply_due(server: &Server, id: SessionId, due: Instant) -> Step {
    let rtp_info: Vec<(String, u16, u32)> = {
        let mut core = server.core.lock();
        let core = &mut *core;
        let Some(s) = core.sessions.get_mut(id) else {
            return status(454).into();
        };
        let group = (s.streams.iter().find_map(|st| st.group)).and_then(|g| core.groups.get(g));
        let started = match group.map(|g| g.start_of()) {
            Some(Ok(Some(started))) => started,
            Some(Ok(None)) => {
                let again = due + START_POLL;
                return Step::ask(Question::Wait(again), Pending::GroupReply(id, again));
            }
            // It could not start.
            _ => return status(500).into(),
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

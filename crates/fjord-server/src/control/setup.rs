//! SETUP of a unicast stream: the session it joins or makes, the caps
//! and capacity it must fit, its transport (UDP, shared UDP or
//! interleaved) and the engine stream it becomes.

use std::{net::SocketAddr, sync::Arc, time::Instant};

use fjord_engine::{Command, RepairSpec, SessionSpec, Title};
use fjord_proto::rtsp::{
    framing::Request,
    response::Response,
    session::State,
    transport::{self, TransportRequest},
    url::title_path,
};
use fjord_storage::StorageReservation;

use super::{
    Client, Reply,
    ask::{Pending, Question, Step},
    describe::REPAIR_SUFFIX,
    multicast, refuse, session_header, status,
    transport::{Bind, Bound, Made, RtcpIn, Udp},
};
use crate::{
    Server,
    admission::{Admission, Reservation},
    catalog::CatalogError,
    core::Core,
    metrics::Refusal,
    outbox::Outbox,
    scale,
    session::{Caps, Full, ReceiverStats, Session, SessionId, Sessions, Stream, StreamRtcp},
    title_streams,
};

/// The track a control URL names and whether it is the track's repair stream.
pub(super) fn stream_number(control: Option<&str>, count: usize) -> Option<(usize, bool)> {
    match control.and_then(|c| c.strip_suffix(REPAIR_SUFFIX)) {
        Some(c) => Some((track_number(Some(c), count)?, true)),
        None => Some((track_number(control, count)?, false)),
    }
}

fn track_number(control: Option<&str>, count: usize) -> Option<usize> {
    match control {
        None if count == 1 => Some(0),
        None => None,
        Some(c) => {
            let n: usize = c
                .strip_prefix("trackID=")
                .or_else(|| c.strip_prefix("track"))
                .or_else(|| c.strip_prefix("streamid="))?
                .parse()
                .ok()?;
            (1..=count).contains(&n).then(|| n - 1)
        }
    }
}

pub(super) fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Step {
    let Ok(target) = title_path(&req.uri) else {
        return status(404).into();
    };
    // A `latest.mp4` is the recording it names, as its session holds it.
    let title = server.catalog.name_of(&target.title);
    // The table's lock is let go here: the SETUP takes it again.
    let named = named_session(&mut server.core.lock().sessions, conn, req, &title);
    match named {
        Ok(Some((id, name, title))) => {
            with_title(server, (conn, out), req, (Some(id), name, title), now)
        }
        Ok(None) => Step::ask(
            Question::Open(target.title.as_str().into()),
            Pending::Setup(Box::new(Opening {
                req: req.clone(),
                now,
            })),
        ),
        Err(r) => r.into(),
    }
}

/// A SETUP that makes a session, kept while its title opens.
pub(crate) struct Opening {
    req: Request,
    now: Instant,
}

/// Goes on with a SETUP whose title opened, or refuses it with why not.
pub(super) fn on_opened(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    o: Opening,
    opened: Result<(Arc<str>, Arc<Title>), CatalogError>,
) -> Step {
    match opened {
        Ok((name, title)) => match title.index().not_over_rtp() {
            Some(why) => refuse(415, why).into(),
            None => with_title(server, (conn, out), &o.req, (None, name, title), o.now),
        },
        Err(e) => refuse(e.status(), &e.to_string()).into(),
    }
}

/// SETUP of a stream of `title`, into session `existing` or a new one.
fn with_title(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    (existing, title_name, title): (Option<SessionId>, Arc<str>, Arc<Title>),
    now: Instant,
) -> Step {
    let Ok(target) = title_path(&req.uri) else {
        return status(404).into();
    };
    let Some((track, repair)) = stream_number(target.track.as_deref(), title.index().track_count())
    else {
        return status(404).into();
    };
    if repair && title.fec(track).is_none() {
        return status(404).into();
    }
    let Some(header) = req.header("Transport") else {
        return refuse(400, "SETUP needs a Transport header").into();
    };
    // Multicast only where the operator offers it: the group's packets
    // reach every host of the LAN that joins it.
    let request = match transport::choose_for(header, server.config().multicast) {
        Ok(t) => t,
        Err(e) => return refuse(e.status(), &e.to_string()).into(),
    };
    let mut core = server.core.lock();
    // The group and ports are the server's to pick: `destination=` and
    // `port=` are ignored.
    if let TransportRequest::Multicast { ttl, .. } = request {
        let wish = crate::multicast::Wish { ttl };
        let opened = (title_name, title);
        return multicast::setup(
            server,
            (&mut core, conn, out),
            req,
            existing,
            opened,
            (track, repair, wish),
            now,
        );
    }
    let wanted = Wanted {
        track,
        repair,
        source: None,
        request,
    };
    unicast(
        server,
        (&mut core, conn, out),
        req,
        existing,
        (title_name, title),
        wanted,
        now,
    )
}

/// SETUP of a unicast stream into session `existing`, or a new session
/// of the title.
fn unicast(
    server: &Server,
    (core, conn, out): (&mut Core, &mut dyn Client, &mut Outbox),
    req: &Request,
    existing: Option<SessionId>,
    (title_name, title): (Arc<str>, Arc<Title>),
    mut wanted: Wanted,
    now: Instant,
) -> Step {
    let id = match existing {
        // It may have ended since it was named.
        Some(id) => match core.sessions.get_mut(id) {
            None => return status(454).into(),
            Some(s) => match repair_source(s, wanted.track, wanted.repair, &wanted.request) {
                Ok(source) => {
                    wanted.source = source;
                    id
                }
                Err(r) => return r.into(),
            },
        },
        None if wanted.repair => {
            return refuse(455, "SETUP the source track before its repair stream").into();
        }
        None => {
            let peer =
                (conn.peer()).unwrap_or_else(|_| (std::net::Ipv4Addr::UNSPECIFIED, 0).into());
            let session = Session::new(
                SessionId::random(),
                (conn.id(), peer),
                title_name,
                title,
                now,
            );
            let id = session.id;
            // A new session takes its place in the table now, under the
            // limits; a failure below takes it out.
            if let Err(r) = admit_session(server, &mut core.sessions, session) {
                return r.into();
            }
            id
        }
    };
    let Some((session, admission)) = core.sessions.with_admission(id) else {
        return status(454).into();
    };
    let new = existing.is_none();
    match add_stream(server, (conn, out), req, (session, admission), wanted, now) {
        Ok(Added::Made(transport_reply)) => {
            keep_stream(conn, session, new, now);
            setup_reply(server, session, &transport_reply).into()
        }
        Ok(Added::Bind(bind, mut binding)) => {
            binding.new = new;
            // Held by the connection now: one that fails to bind is gone
            // from the table, which the connection then forgets.
            if new {
                conn.add_session(id);
            }
            Step::ask(Question::Bind(bind), Pending::Bind(binding))
        }
        Err(r) => {
            if new {
                core.remove(id, out);
            }
            r.into()
        }
    }
}

/// The reply to a SETUP that added its stream to `session`.
fn setup_reply(server: &Server, session: &Session, transport: &str) -> Reply {
    Response::new(200)
        .header("Transport", transport)
        .header("Session", session_header(server, session.id))
        .header("Media-Properties", scale::media_properties(&session.title))
        .into()
}

/// The session a SETUP's `Session` header names, if any (its id and
/// title): it must be this connection's, and of the same title.
type Named = Option<(SessionId, Arc<str>, Arc<Title>)>;

fn named_session(
    sessions: &mut Sessions,
    conn: &dyn Client,
    req: &Request,
    title: &str,
) -> Result<Named, Reply> {
    let Some(id) = req.session_id() else {
        return Ok(None);
    };
    match sessions.get(id) {
        Some(s) if s.conn == conn.id() && *s.title_name == *title => {
            Ok(Some((s.id, s.title_name.clone(), s.title.clone())))
        }
        Some(_) => Err(refuse(459, "a session serves one title")),
        None => Err(status(454)),
    }
}

/// The engine stream (shard, id) a repair stream joins: its source
/// track's, on the same thread and transport kind. `None` for a source
/// track; a refusal when the session cannot take the stream.
fn repair_source(
    s: &Session,
    track: usize,
    repair: bool,
    request: &TransportRequest,
) -> Result<Option<(u64, u64)>, Reply> {
    if s.state == State::Playing {
        return Err(refuse(455, "cannot add a track while playing"));
    }
    let set_up =
        |r: bool| (s.streams.iter()).find(|st| st.track as usize == track && st.repair == r);
    if set_up(repair).is_some() {
        return Err(refuse(455, "track already set up in this session"));
    }
    if !repair {
        return Ok(None);
    }
    let Some(src) = set_up(false) else {
        return Err(refuse(
            455,
            "SETUP the source track before its repair stream",
        ));
    };
    if src.interleaved.is_some() != matches!(request, TransportRequest::Tcp { .. }) {
        return Err(refuse(
            461,
            "a repair stream must use its source track's transport",
        ));
    }
    Ok(Some((src.shard, src.engine_id)))
}

/// The stream a SETUP asks for, once the session may take it.
struct Wanted {
    track: usize,
    repair: bool,
    /// A repair stream's source (engine shard, id).
    source: Option<(u64, u64)>,
    request: TransportRequest,
}

/// A stream SETUP decided on, before its transport is made.
struct NewStream {
    track: usize,
    repair: bool,
    source: Option<(u64, u64)>,
    url: Box<str>,
    ids: fjord_media::prefab::Ids,
    reservation: Reservation,
    storage: Option<Box<StorageReservation>>,
}

/// What a SETUP's stream got: its transport, or something to bind first.
enum Added {
    /// The reply's `Transport`.
    Made(String),
    Bind(Bind, Box<Binding>),
}

/// A UDP SETUP waiting for its sockets.
pub(super) struct Binding {
    session: SessionId,
    /// The session was made by this SETUP: a failure ends it.
    new: bool,
    stream: NewStream,
    udp: Udp,
    now: Instant,
}

/// Reserves the stream's share of an engine thread and of the storage
/// layer and makes its transport, or asks for its sockets; the refusal
/// gives everything back.
fn add_stream(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    (session, admission): (&mut Session, &mut Admission),
    wanted: Wanted,
    now: Instant,
) -> Result<Added, Reply> {
    let title = &session.title;
    let (reservation, storage) = reserve((server, admission), conn, title, &wanted)?;
    let ids = stream_ids(title, &wanted);
    let shard = reservation.thread as u64;
    let stream = NewStream {
        track: wanted.track,
        repair: wanted.repair,
        source: wanted.source,
        url: req.uri.as_str().into(),
        ids,
        reservation,
        storage,
    };
    let mut release = |r| {
        admission.release(&stream.reservation);
        r
    };
    match wanted.request {
        TransportRequest::Udp {
            client_rtp,
            client_rtcp,
            destination,
        } => {
            let client = (client_rtp, client_rtcp);
            let (bind, udp) =
                super::transport::udp(server, conn, client, destination, (shard, ids.ssrc))
                    .map_err(release)?;
            let session = session.id;
            // `new` is the caller's to say.
            let binding = Binding {
                session,
                new: false,
                stream,
                udp,
                now,
            };
            Ok(Added::Bind(bind, Box::new(binding)))
        }
        TransportRequest::Tcp {
            rtp_channel,
            rtcp_channel,
        } => {
            let channels = [rtp_channel, rtcp_channel];
            let made = super::transport::tcp((conn, out), channels, ids.ssrc).map_err(release)?;
            let (reply, _) = finish(server, out, session, stream, made);
            Ok(Added::Made(reply))
        }
        TransportRequest::Multicast { .. } => Err(release(status(500))),
    }
}

/// Hands the stream with its transport to the engine (the command in
/// `out`) and adds it to `session`: the reply's `Transport`, and the
/// RTCP socket a reader is to read (engine id, socket, client address).
fn finish(
    server: &Server,
    out: &mut Outbox,
    session: &mut Session,
    stream: NewStream,
    made: Made,
) -> (String, Option<(u64, socket2::Socket, SocketAddr)>) {
    let engine_id = server.next_id();
    let ids = stream.ids;
    let command = match stream.source {
        Some((_, source_id)) => Command::AttachRepair {
            id: source_id,
            repair: Box::new(RepairSpec {
                ssrc: ids.ssrc,
                seq0: rand::random(),
                payload_type: title_streams::repair_payload_type(&session.title),
                output: made.output,
            }),
        },
        None => Command::Add(Box::new(SessionSpec {
            id: engine_id,
            title: session.title.clone(),
            track: stream.track,
            ssrc: ids.ssrc,
            seq0: ids.seq0,
            ts0: ids.ts0,
            output: made.output,
        })),
    };
    out.push(made.shard, command);
    let (rtcp, connected, read) = match made.rtcp {
        // Read from once the driver has started its reader ([`on_reading`]).
        RtcpIn::Own(socket, peer) => (StreamRtcp::None, None, Some((engine_id, socket, peer))),
        RtcpIn::Routed(pair, client, place) => (StreamRtcp::Route(pair, client), place, None),
        RtcpIn::Interleaved => (StreamRtcp::None, None, None),
    };
    session.add_stream(Stream {
        track: stream.track as u32,
        repair: stream.repair,
        engine_id,
        shard: made.shard,
        url: stream.url,
        interleaved: made.interleaved,
        rtcp,
        reports: ReceiverStats::default(),
        reservation: stream.reservation,
        _storage: stream.storage,
        _connected: connected,
        group: None,
    });
    (made.reply, read)
}

/// The driver bound a UDP stream's sockets, or could not: the reply (a
/// failure ends a session the SETUP made), after its RTCP reader starts.
pub(super) fn on_bound(server: &Server, b: Binding, bound: std::io::Result<Bound>) -> Step {
    let mut core = server.core.lock();
    let Some(session) = core.sessions.get_mut(b.session) else {
        core.sessions.admission.release(&b.stream.reservation);
        return status(454).into();
    };
    let mut out = Outbox::default();
    let made = match super::transport::udp_made(b.session, &b.udp, bound) {
        Ok(m) => m,
        Err(mut r) => {
            core.sessions.admission.release(&b.stream.reservation);
            if b.new {
                core.remove(b.session, &mut out);
            }
            r.commands = out;
            return r.into();
        }
    };
    let (transport, read) = finish(server, &mut out, session, b.stream, made);
    if session.state == State::Init {
        session.state = State::Ready;
    }
    session.touch(b.now);
    let mut reply = setup_reply(server, session, &transport);
    reply.commands = out;
    match read {
        None => reply.into(),
        Some((engine_id, socket, client)) => {
            let read = Read {
                session: b.session,
                engine_id,
                socket,
                client,
            };
            let pending = Pending::Reading((b.session, engine_id), Box::new(reply));
            Step::ask(Question::ReadRtcp(read), pending)
        }
    }
}

/// A UDP stream's own RTCP socket, for the driver to read as long as the
/// stream lives (`crate::drive`).
pub(crate) struct Read {
    pub session: SessionId,
    pub engine_id: u64,
    pub socket: socket2::Socket,
    /// Only RTCP from this client's address counts.
    pub client: SocketAddr,
}

/// The driver started a stream's RTCP reader (`None`: it could not; the
/// stream plays without): the stream keeps it to stop it when it ends, or
/// it stops now if the stream has ended meanwhile.
pub(super) fn on_reading(
    server: &Server,
    (session, engine_id): (SessionId, u64),
    reader: Option<tokio::task::AbortHandle>,
) {
    let Some(reader) = reader else { return };
    let mut core = server.core.lock();
    let stream = (core.sessions.get_mut(session))
        .and_then(|s| s.streams.iter_mut().find(|st| st.engine_id == engine_id));
    match stream {
        Some(st) => st.rtcp = StreamRtcp::Reader(reader),
        None => reader.abort(),
    }
}

/// The stream's packet rate against its engine thread's budget
/// (interleaved streams live on their connection's thread, repair streams
/// on their source's), and the storage layer's promise: the disk's
/// bandwidth and the read-ahead memory it needs (held by the stream,
/// given back with it).
fn reserve(
    (server, admission): (&Server, &mut Admission),
    conn: &dyn Client,
    title: &Title,
    wanted: &Wanted,
) -> Result<(Reservation, Option<Box<StorageReservation>>), Reply> {
    let pps = title_streams::track_pps(title, wanted.track);
    let pps = match (wanted.repair, title.fec(wanted.track)) {
        (true, Some(fec)) => (pps * u64::from(fec.params().m)).div_ceil(u64::from(fec.params().k)),
        _ => pps,
    };
    let threads = admission.threads() as u64;
    let pinned = match (wanted.source, &wanted.request) {
        (Some((shard, _)), _) => Some((shard % threads) as usize),
        (None, TransportRequest::Tcp { .. }) => Some((conn.id() % threads) as usize),
        (None, TransportRequest::Udp { .. } | TransportRequest::Multicast { .. }) => None,
    };
    let Some(reservation) = admission.reserve(pinned, pps) else {
        server.metrics.refused(Refusal::Engine);
        return Err(refuse(
            453,
            "the server is at its capacity; try again later",
        ));
    };
    let Some(storage) = &server.storage else {
        return Ok((reservation, None));
    };
    match storage.reserve(title, pps * title_streams::average_packet_bytes(title)) {
        Ok(r) => Ok((reservation, Some(Box::new(r)))),
        Err(e) => {
            admission.release(&reservation);
            server.metrics.refused(Refusal::Storage(e.limit()));
            Err(refuse(453, &e.to_string()))
        }
    }
}

/// A source stream of a title with prefabricated packets takes their
/// header fields, so its packets can leave as they are stored; others
/// get random ones.
fn stream_ids(title: &Title, wanted: &Wanted) -> fjord_media::prefab::Ids {
    match wanted.source {
        None => title.prefab_ids(wanted.track),
        Some(_) => None,
    }
    .unwrap_or_else(|| fjord_media::prefab::Ids {
        ssrc: rand::random(),
        seq0: rand::random(),
        ts0: rand::random(),
    })
}

/// Puts a new session in the table, or the 453 saying which cap it meets:
/// `max_sessions`, or of them what one connection or one client address
/// may hold (so that one client cannot take every session).
pub(super) fn admit_session(
    server: &Server,
    sessions: &mut Sessions,
    session: Session,
) -> Result<(), Reply> {
    let config = server.config();
    let caps = Caps {
        total: config.max_sessions,
        per_connection: config.max_sessions_per_connection,
        per_address: config.max_sessions_per_address,
    };
    let (refusal, reason) = match sessions.insert_within(session, caps) {
        Ok(()) => return Ok(()),
        Err(Full::Server) => (Refusal::Sessions, "session limit reached".to_owned()),
        Err(Full::Connection) => (
            Refusal::ConnectionSessions,
            format!(
                "this connection has {} sessions, the most one may have (max_sessions_per_connection); tear one down first",
                caps.per_connection
            ),
        ),
        Err(Full::Address) => (
            Refusal::AddressSessions,
            format!(
                "your address has {} sessions, the most one may have (max_sessions_per_address); tear one down first",
                caps.per_address
            ),
        ),
    };
    server.metrics.refused(refusal);
    Err(refuse(453, &reason))
}

/// After a SETUP added its stream to `session`: the session is ready, and
/// the connection holds it when `new`.
pub(super) fn keep_stream(conn: &mut dyn Client, session: &mut Session, new: bool, now: Instant) {
    if session.state == State::Init {
        session.state = State::Ready;
    }
    if new {
        conn.add_session(session.id);
    }
    session.touch(now);
}

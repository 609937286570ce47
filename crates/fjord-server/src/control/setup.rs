//! SETUP of a unicast stream: the session it joins or makes, the caps
//! and capacity it must fit, its transport (UDP, shared UDP or
//! interleaved) and the engine stream it becomes.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Instant,
};

use fjord_engine::{Command, Output, RepairSpec, SessionSpec, Title, UdpSocket};
use fjord_proto::rtsp::{
    framing::Request,
    response::Response,
    session::State,
    transport::{self, TransportRequest},
    url::title_path,
};
use fjord_storage::StorageReservation;

use super::{Client, Reply, describe::REPAIR_SUFFIX, multicast, refuse, session_header, status};
use crate::{
    Server,
    admission::Reservation,
    metrics::Refusal,
    outbox::Outbox,
    scale,
    session::{
        Caps, Full, ReceiverStats, Session, SessionId, Sessions, Stream, StreamRtcp, rtcp_reader,
    },
    shared::{ConnectedPlace, RouteError, SharedPair},
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

pub(super) async fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Reply {
    let Ok(target) = title_path(&req.uri) else {
        return status(404);
    };
    let existing = match named_session(&mut server.sessions.lock(), conn, req, &target.title) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (title_name, title) = match &existing {
        Some((_, name, title)) => (name.clone(), title.clone()),
        None => match server.catalog.open(&target.title).await {
            Ok(opened) => opened,
            Err(e) => return refuse(e.status(), &e.to_string()),
        },
    };
    let existing = existing.map(|(id, ..)| id);
    let Some((track, repair)) = stream_number(target.track.as_deref(), title.index().track_count())
    else {
        return status(404);
    };
    if repair && title.fec(track).is_none() {
        return status(404);
    }
    let Some(header) = req.header("Transport") else {
        return refuse(400, "SETUP needs a Transport header");
    };
    // Multicast only where the operator offers it: the group's packets
    // reach every host of the LAN that joins it.
    let request = match transport::choose_for(header, server.config().multicast) {
        Ok(t) => t,
        Err(e) => return refuse(e.status(), &e.to_string()),
    };
    let mut sessions = server.sessions.lock();
    // The group and ports are the server's to pick: `destination=` and
    // `port=` are ignored.
    if let TransportRequest::Multicast { ttl, .. } = request {
        let wish = crate::multicast::Wish { ttl };
        let opened = (title_name, title);
        return multicast::setup(
            server,
            (&mut sessions, conn, out),
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
        (&mut sessions, conn, out),
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
    (sessions, conn, out): (&mut Sessions, &mut dyn Client, &mut Outbox),
    req: &Request,
    existing: Option<SessionId>,
    (title_name, title): (Arc<str>, Arc<Title>),
    mut wanted: Wanted,
    now: Instant,
) -> Reply {
    let id = match existing {
        // It may have ended since it was named.
        Some(id) => match sessions.get_mut(id) {
            None => return status(454),
            Some(s) => match repair_source(s, wanted.track, wanted.repair, &wanted.request) {
                Ok(source) => {
                    wanted.source = source;
                    id
                }
                Err(r) => return r,
            },
        },
        None if wanted.repair => {
            return refuse(455, "SETUP the source track before its repair stream");
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
            if let Err(r) = admit_session(server, sessions, session) {
                return r;
            }
            id
        }
    };
    let Some(session) = sessions.get_mut(id) else {
        return status(454);
    };
    match add_stream(server, (conn, out), req, session, wanted) {
        Ok(transport_reply) => {
            keep_stream(conn, session, existing.is_none(), now);
            Response::new(200)
                .header("Transport", &transport_reply)
                .header("Session", session_header(server, id))
                .header("Media-Properties", scale::media_properties(&session.title))
                .into()
        }
        Err(r) => {
            if existing.is_none() {
                sessions.remove(id, out, &server.admission);
            }
            r
        }
    }
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

/// The stream's transport, made: what the engine sends on, the thread
/// it lives on, the `Transport` reply, its interleaved channels and where
/// its RTCP comes in.
struct Made {
    output: Output,
    shard: u64,
    reply: String,
    interleaved: Option<(u8, u8)>,
    rtcp: RtcpIn,
}

/// Reserves the stream's share of an engine thread and of the storage
/// layer, makes its transport, and hands it to the engine; the reply's
/// `Transport` value, or the refusal (with everything given back).
fn add_stream(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    session: &mut Session,
    wanted: Wanted,
) -> Result<String, Reply> {
    let title = &session.title;
    let (reservation, storage) = reserve(server, conn, title, &wanted)?;
    let ids = stream_ids(title, &wanted);
    let made = match wanted.request {
        TransportRequest::Udp {
            client_rtp,
            client_rtcp,
            destination,
        } => udp_transport(
            server,
            conn,
            session.id,
            (client_rtp, client_rtcp),
            destination,
            reservation.thread as u64,
            ids.ssrc,
        ),
        TransportRequest::Tcp {
            rtp_channel,
            rtcp_channel,
        } => tcp_transport((conn, out), [rtp_channel, rtcp_channel], ids.ssrc),
        TransportRequest::Multicast { .. } => unreachable!("multicast SETUPs are answered before"),
    };
    let made = made.inspect_err(|_| server.admission.release(&reservation))?;
    let engine_id = server.next_id();
    let command = match wanted.source {
        Some((_, source_id)) => Command::AttachRepair {
            id: source_id,
            repair: Box::new(RepairSpec {
                ssrc: ids.ssrc,
                seq0: rand::random(),
                payload_type: title_streams::repair_payload_type(title),
                output: made.output,
            }),
        },
        None => Command::Add(Box::new(SessionSpec {
            id: engine_id,
            title: title.clone(),
            track: wanted.track,
            ssrc: ids.ssrc,
            seq0: ids.seq0,
            ts0: ids.ts0,
            output: made.output,
        })),
    };
    out.push(made.shard, command);
    let (rtcp, connected) = rtcp_in(server, made.rtcp, session.id, engine_id);
    session.add_stream(Stream {
        track: wanted.track as u32,
        repair: wanted.repair,
        engine_id,
        shard: made.shard,
        url: req.uri.as_str().into(),
        interleaved: made.interleaved,
        rtcp,
        reports: ReceiverStats::default(),
        reservation,
        _storage: storage,
        _connected: connected,
        group: None,
    });
    Ok(made.reply)
}

/// The stream's packet rate against its engine thread's budget
/// (interleaved streams live on their connection's thread, repair streams
/// on their source's), and the storage layer's promise: the disk's
/// bandwidth and the read-ahead memory it needs (held by the stream,
/// given back with it).
fn reserve(
    server: &Server,
    conn: &dyn Client,
    title: &Title,
    wanted: &Wanted,
) -> Result<(Reservation, Option<Box<StorageReservation>>), Reply> {
    let pps = title_streams::track_pps(title, wanted.track);
    let pps = match (wanted.repair, title.fec(wanted.track)) {
        (true, Some(fec)) => (pps * u64::from(fec.params().m)).div_ceil(u64::from(fec.params().k)),
        _ => pps,
    };
    let threads = server.admission.threads() as u64;
    let pinned = match (wanted.source, &wanted.request) {
        (Some((shard, _)), _) => Some((shard % threads) as usize),
        (None, TransportRequest::Tcp { .. }) => Some((conn.id() % threads) as usize),
        (None, TransportRequest::Udp { .. } | TransportRequest::Multicast { .. }) => None,
    };
    let Some(reservation) = server.admission.reserve(pinned, pps) else {
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
            server.admission.release(&reservation);
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

/// RTP and RTCP over UDP to the client (or to a `destination=` that
/// `destination_allow` permits): from the shared pair, or a pair of the
/// session's own.
fn udp_transport(
    server: &Server,
    conn: &dyn Client,
    session: SessionId,
    (client_rtp, client_rtcp): (u16, u16),
    destination: Option<IpAddr>,
    shard: u64,
    ssrc: u32,
) -> Result<Made, Reply> {
    let (peer, local) = match (conn.peer(), conn.local()) {
        (Ok(peer), Ok(local)) => (peer.ip(), local.ip()),
        (Err(e), _) | (_, Err(e)) => return Err(refuse(500, &e.to_string())),
    };
    let dest = destination.unwrap_or(peer);
    let allowed = |d: &IpAddr| {
        server
            .config()
            .destination_allow
            .iter()
            .any(|n| n.contains(d))
    };
    if dest != peer && !allowed(&dest) {
        return Err(refuse(
            403,
            "RTP goes only to the requesting client's address",
        ));
    }
    let reply = |server_rtp: u16| {
        transport::reply_udp(client_rtp, client_rtcp, server_rtp, server_rtp + 1, ssrc)
    };
    let Some(shared) = &server.shared else {
        let pair =
            udp_output(server, local, dest, client_rtp).map_err(|e| refuse(453, &e.to_string()))?;
        let rtcp_peer = SocketAddr::new(dest, client_rtcp);
        let reader = pair
            .rtcp
            .try_clone()
            .map_err(|e| refuse(500, &e.to_string()))?;
        return Ok(Made {
            reply: reply(pair.rtp_port),
            output: Output::Udp {
                rtp: pair.rtp.into(),
                rtp_peer: SocketAddr::new(dest, client_rtp),
                rtcp: pair.rtcp.into(),
                rtcp_peer,
            },
            shard,
            interleaved: None,
            rtcp: RtcpIn::Own(reader, rtcp_peer),
        });
    };
    let pair = shared
        .pair(local, &server.ports)
        .map_err(|e| refuse(453, &e.to_string()))?;
    let rtp_peer = pair.peer(SocketAddr::new(dest, client_rtp));
    let rtcp_peer = pair.peer(SocketAddr::new(dest, client_rtcp));
    match pair.route(rtcp_peer, session.number()) {
        Ok(()) => {}
        Err(RouteError::Taken) => {
            return Err(refuse(461, "client_port already in use by another stream"));
        }
        Err(RouteError::Full) => return Err(refuse(453, "too many UDP streams")),
    }
    let (rtp, place) = pair.rtp_for(shard, rtp_peer);
    Ok(Made {
        reply: reply(pair.rtp_port),
        output: Output::Udp {
            rtp,
            rtp_peer,
            rtcp: UdpSocket::Shared(pair.rtcp()),
            rtcp_peer,
        },
        shard,
        interleaved: None,
        rtcp: RtcpIn::Routed(pair, rtcp_peer, place),
    })
}

/// RTP and RTCP in `$` frames on the RTSP connection, whose write side
/// the engine thread of the connection then owns.
fn tcp_transport(
    (conn, out): (&mut dyn Client, &mut Outbox),
    [rtp_channel, rtcp_channel]: [u8; 2],
    ssrc: u32,
) -> Result<Made, Reply> {
    if conn.channel_in_use(rtp_channel) || conn.channel_in_use(rtcp_channel) {
        return Err(refuse(
            461,
            "interleaved channels already in use on this connection",
        ));
    }
    conn.attach(out).map_err(|e| refuse(500, &e.to_string()))?;
    conn.use_channels([rtp_channel, rtcp_channel]);
    Ok(Made {
        output: Output::Interleaved {
            conn: conn.id(),
            rtp_channel,
            rtcp_channel,
        },
        shard: conn.id(),
        reply: transport::reply_tcp(rtp_channel, rtcp_channel, ssrc),
        interleaved: Some((rtp_channel, rtcp_channel)),
        rtcp: RtcpIn::Interleaved,
    })
}

/// Sets up the stream's RTCP intake: a reader task on its own socket, or
/// its route on the shared pair (with the pair's connected-socket place).
fn rtcp_in(
    server: &Server,
    rtcp: RtcpIn,
    session: SessionId,
    engine_id: u64,
) -> (StreamRtcp, Option<ConnectedPlace>) {
    match rtcp {
        RtcpIn::Own(socket, peer) => {
            let task = (|| {
                socket.set_nonblocking(true).ok()?;
                let socket = tokio::net::UdpSocket::from_std(socket.into()).ok()?;
                let sessions = server.sessions.clone();
                let reader = rtcp_reader(socket, peer, sessions, (session, engine_id));
                Some(tokio::spawn(reader).abort_handle())
            })();
            (task.map_or(StreamRtcp::None, StreamRtcp::Reader), None)
        }
        RtcpIn::Routed(pair, client, place) => (StreamRtcp::Route(pair, client), place),
        RtcpIn::Interleaved => (StreamRtcp::None, None),
    }
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

/// Where a stream's RTCP from the client comes in.
enum RtcpIn {
    /// On the session's own RTCP socket (a reader task per stream), from
    /// the client's address.
    Own(socket2::Socket, SocketAddr),
    /// On the shared pair's socket, routed by the client's RTCP address;
    /// with the stream's place among the pair's connected RTP sockets.
    Routed(Arc<SharedPair>, SocketAddr, Option<ConnectedPlace>),
    /// In `$` frames on the RTSP connection.
    Interleaved,
}

fn udp_output(
    server: &Server,
    local: IpAddr,
    dest: IpAddr,
    client_rtp: u16,
) -> std::io::Result<crate::ports::PortPair> {
    let pair = server.ports.bind(local)?;
    pair.rtp
        .connect(&SocketAddr::new(dest, client_rtp).into())?;
    pair.rtp.set_nonblocking(true)?;
    Ok(pair)
}

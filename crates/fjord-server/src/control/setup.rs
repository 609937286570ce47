//! SETUP of a unicast stream: the session it joins or makes, the caps
//! and capacity it must fit, its transport (UDP, shared UDP or
//! interleaved) and the engine stream it becomes.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use fjord_engine::{Command, Output, RepairSpec, SessionSpec, UdpSocket};
use fjord_proto::rtsp::{
    framing::Request,
    response::Response,
    session::State,
    transport::{self, TransportRequest},
    url::title_path,
};

use super::{Client, Reply, describe::REPAIR_SUFFIX, multicast, refuse, session_header, status};
use crate::{
    Server,
    metrics::Refusal,
    scale,
    session::{Caps, Full, ReceiverStats, Session, SessionId, Stream, StreamRtcp, rtcp_reader},
    shared::{ConnectedPlace, RouteError, SharedPair},
    title_streams,
};

/// The track a control URL names and whether it is the track's repair stream.
fn stream_number(control: Option<&str>, count: usize) -> Option<(usize, bool)> {
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

pub(super) async fn answer(server: &Server, conn: &mut dyn Client, req: &Request) -> Reply {
    let Ok(target) = title_path(&req.uri) else {
        return status(404);
    };
    let existing = match req.session_id() {
        Some(id) => match server.sessions.get(id) {
            Some(s) if s.conn == conn.id() && *s.title_name == *target.title => Some(s),
            Some(_) => return refuse(459, "a session serves one title"),
            None => return status(454),
        },
        None => None,
    };
    let (title_name, title) = match &existing {
        Some(s) => (s.title_name.clone(), s.title.clone()),
        None => match server.catalog.open(&target.title).await {
            Ok(opened) => opened,
            Err(e) => return refuse(e.status(), &e.to_string()),
        },
    };
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
    // The group and ports are the server's to pick: `destination=` and
    // `port=` are ignored.
    if let TransportRequest::Multicast { ttl, .. } = request {
        let wish = crate::multicast::Wish { ttl };
        let opened = (title_name, title);
        return multicast::setup(server, conn, req, existing, opened, (track, repair), wish);
    }
    // A repair stream joins its source's engine session: same thread, same
    // transport kind.
    let mut source: Option<(u64, u64)> = None;
    if let Some(s) = &existing {
        let inner = s.lock();
        if inner.state == State::Playing {
            return refuse(455, "cannot add a track while playing");
        }
        if inner
            .streams
            .iter()
            .any(|st| st.track as usize == track && st.repair == repair)
        {
            return refuse(455, "track already set up in this session");
        }
        if repair {
            let Some(src) = inner
                .streams
                .iter()
                .find(|st| st.track as usize == track && !st.repair)
            else {
                return refuse(455, "SETUP the source track before its repair stream");
            };
            if src.interleaved.is_some() != matches!(request, TransportRequest::Tcp { .. }) {
                return refuse(461, "a repair stream must use its source track's transport");
            }
            source = Some((src.shard, src.engine_id));
        }
    } else if repair {
        return refuse(455, "SETUP the source track before its repair stream");
    }
    let peer = (conn.peer()).unwrap_or_else(|_| (std::net::Ipv4Addr::UNSPECIFIED, 0).into());
    let session = existing.clone().unwrap_or_else(|| {
        Arc::new(Session::new(
            SessionId::random(),
            (conn.id(), peer),
            title_name,
            title.clone(),
        ))
    });
    // A new session takes its place in the table now, under the limits, so
    // concurrent SETUPs cannot overshoot them; failures below take it out.
    if existing.is_none()
        && let Err(r) = admit_session(server, &session)
    {
        return r;
    }
    let abandon = || {
        if existing.is_none() {
            server
                .sessions
                .remove(session.id, &server.engine, &server.admission);
        }
    };
    // Admission: the stream's packet rate against its engine thread's
    // budget. Interleaved streams live on their connection's thread.
    let pps = title_streams::track_pps(&title, track);
    let pps = match (repair, title.fec(track)) {
        (true, Some(fec)) => (pps * u64::from(fec.params().m)).div_ceil(u64::from(fec.params().k)),
        _ => pps,
    };
    let threads = server.admission.threads() as u64;
    let pinned = match (source, &request) {
        (Some((shard, _)), _) => Some((shard % threads) as usize),
        (None, TransportRequest::Tcp { .. }) => Some((conn.id() % threads) as usize),
        (None, TransportRequest::Udp { .. } | TransportRequest::Multicast { .. }) => None,
    };
    let Some(reservation) = server.admission.reserve(pinned, pps) else {
        abandon();
        server.metrics.refused(Refusal::Engine);
        return refuse(453, "the server is at its capacity; try again later");
    };
    // The storage layer's promise: the disk's bandwidth and the read-ahead
    // memory the stream needs (held by the stream, given back with it).
    let storage = match &server.storage {
        None => None,
        Some(s) => match s.reserve(&*title, pps * title_streams::average_packet_bytes(&title)) {
            Ok(r) => Some(Box::new(r)),
            Err(e) => {
                server.admission.release(&reservation);
                abandon();
                server.metrics.refused(Refusal::Storage);
                return refuse(453, &e.to_string());
            }
        },
    };
    let fail = |code: u16, reason: &str| {
        server.admission.release(&reservation);
        abandon();
        refuse(code, reason)
    };
    let engine_id = server.next_id();
    // A source stream of a title with prefabricated packets takes their
    // header fields, so its packets can leave as they are stored.
    let ids = match source {
        None => title.prefab_ids(track),
        Some(_) => None,
    }
    .unwrap_or_else(|| fjord_media::prefab::Ids {
        ssrc: rand::random(),
        seq0: rand::random(),
        ts0: rand::random(),
    });
    let ssrc = ids.ssrc;
    let (output, shard, transport_reply, interleaved, rtcp) = match request {
        TransportRequest::Udp {
            client_rtp,
            client_rtcp,
            destination,
        } => {
            let (peer, local) = match (conn.peer(), conn.local()) {
                (Ok(peer), Ok(local)) => (peer.ip(), local.ip()),
                (Err(e), _) | (_, Err(e)) => return fail(500, &e.to_string()),
            };
            let dest = destination.unwrap_or(peer);
            if dest != peer
                && !server
                    .config()
                    .destination_allow
                    .iter()
                    .any(|n| n.contains(&dest))
            {
                return fail(403, "RTP goes only to the requesting client's address");
            }
            let shard = reservation.thread as u64;
            let reply = |server_rtp: u16| {
                transport::reply_udp(client_rtp, client_rtcp, server_rtp, server_rtp + 1, ssrc)
            };
            if let Some(shared) = &server.shared {
                let pair = match shared.pair(local, &server.ports) {
                    Ok(p) => p,
                    Err(e) => return fail(453, &e.to_string()),
                };
                let rtp_peer = pair.peer(SocketAddr::new(dest, client_rtp));
                let rtcp_peer = pair.peer(SocketAddr::new(dest, client_rtcp));
                match pair.route(rtcp_peer, &session) {
                    Ok(()) => {}
                    Err(RouteError::Taken) => {
                        return fail(461, "client_port already in use by another stream");
                    }
                    Err(RouteError::Full) => return fail(453, "too many UDP streams"),
                }
                let reply = reply(pair.rtp_port);
                let (rtp, place) = pair.rtp_for(shard, rtp_peer);
                let output = Output::Udp {
                    rtp,
                    rtp_peer,
                    rtcp: UdpSocket::Shared(pair.rtcp()),
                    rtcp_peer,
                };
                let rtcp = RtcpIn::Routed(pair, rtcp_peer, place);
                (output, shard, reply, None, rtcp)
            } else {
                let pair = match udp_output(server, local, dest, client_rtp) {
                    Ok(p) => p,
                    Err(e) => return fail(453, &e.to_string()),
                };
                let rtcp_peer = SocketAddr::new(dest, client_rtcp);
                let reader = match pair.rtcp.try_clone() {
                    Ok(r) => r,
                    Err(e) => return fail(500, &e.to_string()),
                };
                let reply = reply(pair.rtp_port);
                let output = Output::Udp {
                    rtp: pair.rtp.into(),
                    rtp_peer: SocketAddr::new(dest, client_rtp),
                    rtcp: pair.rtcp.into(),
                    rtcp_peer,
                };
                (output, shard, reply, None, RtcpIn::Own(reader, rtcp_peer))
            }
        }
        TransportRequest::Multicast { .. } => unreachable!("multicast SETUPs return above"),
        TransportRequest::Tcp {
            rtp_channel,
            rtcp_channel,
        } => {
            if conn.channel_in_use(rtp_channel) || conn.channel_in_use(rtcp_channel) {
                return fail(
                    461,
                    "interleaved channels already in use on this connection",
                );
            }
            if let Err(e) = conn.attach(&server.engine) {
                return fail(500, &e.to_string());
            }
            conn.use_channels([rtp_channel, rtcp_channel]);
            let output = Output::Interleaved {
                conn: conn.id(),
                rtp_channel,
                rtcp_channel,
            };
            let reply = transport::reply_tcp(rtp_channel, rtcp_channel, ssrc);
            (
                output,
                conn.id(),
                reply,
                Some((rtp_channel, rtcp_channel)),
                RtcpIn::Interleaved,
            )
        }
    };
    let command = match source {
        Some((_, source_id)) => Command::AttachRepair {
            id: source_id,
            repair: Box::new(RepairSpec {
                ssrc,
                seq0: rand::random(),
                payload_type: title_streams::repair_payload_type(&title),
                output,
            }),
        },
        None => Command::Add(Box::new(SessionSpec {
            id: engine_id,
            title: title.clone(),
            track,
            ssrc,
            seq0: ids.seq0,
            ts0: ids.ts0,
            output,
        })),
    };
    server.engine.send(shard, command);
    let mut connected = None;
    let rtcp = match rtcp {
        RtcpIn::Own(socket, peer) => {
            let task = (|| {
                socket.set_nonblocking(true).ok()?;
                let socket = tokio::net::UdpSocket::from_std(socket.into()).ok()?;
                Some(
                    tokio::spawn(rtcp_reader(socket, peer, session.clone(), engine_id))
                        .abort_handle(),
                )
            })();
            task.map_or(StreamRtcp::None, StreamRtcp::Reader)
        }
        RtcpIn::Routed(pair, client, place) => {
            connected = place;
            StreamRtcp::Route(pair, client)
        }
        RtcpIn::Interleaved => StreamRtcp::None,
    };
    {
        let mut inner = session.lock();
        inner.add_stream(Stream {
            track: track as u32,
            repair,
            engine_id,
            shard,
            url: req.uri.as_str().into(),
            interleaved,
            rtcp,
            reports: ReceiverStats::default(),
            reservation,
            _storage: storage,
            _connected: connected,
            group: None,
        });
    }
    keep_stream(conn, &session, existing.is_none());
    Response::new(200)
        .header("Transport", &transport_reply)
        .header("Session", session_header(server, session.id))
        .header("Media-Properties", scale::media_properties(&session.title))
        .into()
}

/// Puts a new session in the table, or the 453 saying which cap it meets:
/// `max_sessions`, or of them what one connection or one client address
/// may hold (so that one client cannot take every session).
pub(super) fn admit_session(server: &Server, session: &Arc<Session>) -> Result<(), Reply> {
    let config = server.config();
    let caps = Caps {
        total: config.max_sessions,
        per_connection: config.max_sessions_per_connection,
        per_address: config.max_sessions_per_address,
    };
    let (refusal, reason) = match server.sessions.insert_within(session.clone(), caps) {
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
pub(super) fn keep_stream(conn: &mut dyn Client, session: &Arc<Session>, new: bool) {
    {
        let mut inner = session.lock();
        if inner.state == State::Init {
            inner.state = State::Ready;
        }
    }
    if new {
        conn.add_session(session.clone());
    }
    session.touch();
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

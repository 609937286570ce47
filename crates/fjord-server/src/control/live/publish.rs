//! The publisher's requests: ANNOUNCE (the stream's SDP, the path taken,
//! or a held stream continued),
//! SETUP with `mode=record` (a track's transport: our UDP ports, or its
//! interleaved channels), RECORD (packets are taken from now on), and
//! TEARDOWN or keep-alives of its session.

use std::{collections::BTreeSet, net::IpAddr, time::Instant};

use fjord_live::{
    handover,
    publish::Publish,
    ring::Ring,
    sdp::{self, Announced},
};
use fjord_proto::rtsp::{
    framing::{Method, Request},
    response::Response,
    transport::{self, TransportRequest},
    url::title_path,
};

use super::super::{Client, Reply};
use super::{Stream, TrackIn, refuse, session_header, session_id};
use crate::Server;

pub(super) fn announce(server: &Server, conn: &dyn Client, req: &Request, now: Instant) -> Reply {
    let path = match title_path(&req.uri) {
        Ok(t) if t.track.is_none() => t.title,
        _ => return refuse(404, "ANNOUNCE names a stream, not a track"),
    };
    let config = server.config();
    let limits = config.live_limits();
    let announced = match sdp::parse(&req.body, &limits) {
        Ok(a) => a,
        Err(e) => return refuse(e.status(), &e.to_string()),
    };
    let announced = match take_over(server, conn, &path, announced, now) {
        Ok(reply) => return reply,
        Err(announced) => announced,
    };
    let key_track = announced.tracks.iter().position(|t| t.codec.is_video());
    let tracks = (announced.tracks.iter())
        .map(|t| TrackIn {
            feed: server.next_id(),
            codec: t.codec,
            clock_rate: t.clock_rate,
            channel: None,
            renumber: Default::default(),
            pending: Vec::new(),
            loss: Default::default(),
            reception: Default::default(),
            next_report: None,
            sync: None,
            early_report: None,
        })
        .collect();
    let id = server.next_id();
    let mut state = server.live.lock();
    let paths = (state.paths)
        .get_or_insert_with(|| fjord_live::publish::Paths::new(config.live_max_streams));
    if let Err(r) = paths.claim(&path, id) {
        return refuse(r.status, r.reason);
    }
    let session = session_id();
    let recording = super::record::start(server, &path, &announced.tracks);
    state.streams.insert(
        id,
        Stream {
            path: path.clone(),
            conn: Some(conn.id()),
            session: session.clone(),
            publisher: server.next_id(),
            publish: Publish::new(announced),
            tracks,
            ring: Ring::new(key_track, limits.max_buffer_bytes),
            threads: BTreeSet::new(),
            last: now,
            limits,
            refused: 0,
            tasks: Vec::new(),
            held: None,
            torn_down: false,
            recording,
        },
    );
    tracing::info!(path, conn = conn.id(), "live stream announced");
    Response::new(200)
        .header("Session", session_header(server, &session))
        .into()
}

/// An ANNOUNCE at the path of a held stream: of the same media, it
/// continues the stream (its viewers get this publisher's packets,
/// renumbered); of other media, the held stream ends (its viewers get BYE)
/// and the ANNOUNCE takes the path as a new stream (`Err`, with the SDP
/// back), as it does where no stream is held.
fn take_over(
    server: &Server,
    conn: &dyn Client,
    path: &str,
    announced: Announced,
    now: Instant,
) -> Result<Reply, Announced> {
    let mut state = server.live.lock();
    let Some(id) = state.paths.as_ref().and_then(|p| p.owner(path)) else {
        return Err(announced);
    };
    let Some(stream) = state.streams.get_mut(&id).filter(|s| s.held.is_some()) else {
        return Err(announced);
    };
    if let Err(why) = handover::continues(&stream.publish.announced, &announced) {
        drop(state);
        super::end(server, id, why);
        return Err(announced);
    }
    for task in stream.tasks.drain(..) {
        task.abort();
    }
    for t in &mut stream.tracks {
        t.renumber.next_publisher();
        // Its reports are its own: a report it sends before its first
        // packet (ffmpeg's first) is of no other source's.
        t.reception = Default::default();
    }
    // The last publisher's reports map its clock, not this one's.
    super::rtcp::clear_syncs(server, stream);
    if let Some(r) = stream.recording.as_mut() {
        r.next_publisher(&server.metrics);
    }
    stream.conn = Some(conn.id());
    stream.session = session_id();
    stream.publisher = server.next_id();
    stream.publish = Publish::new(announced);
    stream.limits = server.config().live_limits();
    (stream.last, stream.held) = (now, None);
    tracing::info!(
        path,
        conn = conn.id(),
        "live stream continued by a new publisher"
    );
    Ok(Response::new(200)
        .header("Session", session_header(server, &stream.session))
        .into())
}

/// The stream a publisher's request is about: by its session, else (the
/// first SETUP, before a session) the one it announced at that path.
fn stream_of(server: &Server, conn: &dyn Client, req: &Request) -> Result<u64, Reply> {
    let state = server.live.lock();
    let mine = |s: &&Stream| s.conn == Some(conn.id());
    let found = match req.session_id() {
        Some(id) => state.streams.iter().find(|(_, s)| s.session == id),
        None => {
            let path = title_path(&req.uri).map(|t| t.title).unwrap_or_default();
            (state.streams.iter()).find(|(_, s)| mine(s) && s.path == path)
        }
    };
    match found {
        Some((id, s)) if mine(&s) => Ok(*id),
        Some(_) => Err(refuse(454, "that session is not this connection's")),
        None if req.session_id().is_some() => Err(refuse(454, "no such session")),
        None => Err(refuse(455, "ANNOUNCE the stream first")),
    }
}

pub(super) fn setup(server: &Server, conn: &mut dyn Client, req: &Request, now: Instant) -> Reply {
    let id = match stream_of(server, conn, req) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let asked = match transport::choose_record(req.header("Transport").unwrap_or_default()) {
        Ok(t) => t,
        Err(e) => return refuse(e.status(), &e.to_string()),
    };
    let (peer, local) = match (conn.peer(), conn.local()) {
        (Ok(p), Ok(l)) => (p.ip(), l.ip()),
        (Err(e), _) | (_, Err(e)) => return refuse(500, &e.to_string()),
    };
    let mut state = server.live.lock();
    let Some(stream) = state.streams.get_mut(&id) else {
        return refuse(454, "the stream ended");
    };
    let track = match stream.publish.setup(&req.uri) {
        Ok(t) => t,
        Err(r) => return refuse(r.status, r.reason),
    };
    stream.last = now;
    let reply = match asked {
        TransportRequest::Tcp {
            rtp_channel,
            rtcp_channel,
        } => {
            if conn.channel_in_use(rtp_channel) || conn.channel_in_use(rtcp_channel) {
                return refuse(461, "interleaved channels in use");
            }
            conn.use_channels([rtp_channel, rtcp_channel]);
            stream.tracks[track].channel = Some(rtp_channel);
            format!("RTP/AVP/TCP;unicast;interleaved={rtp_channel}-{rtcp_channel};mode=record")
        }
        TransportRequest::Udp {
            client_rtp,
            client_rtcp,
            ..
        } => match udp(
            server,
            (local, peer, client_rtcp),
            (id, track, stream.publisher),
        ) {
            Ok((port, tasks)) => {
                stream.tasks.extend(tasks);
                format!(
                    "RTP/AVP/UDP;unicast;client_port={client_rtp}-{client_rtcp};server_port={port}-{};mode=record",
                    port + 1
                )
            }
            Err(e) => return refuse(453, &format!("no UDP port for the track: {e}")),
        },
        TransportRequest::Multicast { .. } => return refuse(461, "publishing is unicast"),
    };
    Response::new(200)
        .header("Transport", reply)
        .header("Session", session_header(server, &stream.session))
        .into()
}

/// Binds a port pair for a track, starts reading its RTP port, and on
/// its RTCP port the publisher's reports, to which receiver reports go
/// back (to `peer`'s port `rtcp`).
fn udp(
    server: &Server,
    (local, peer, rtcp): (IpAddr, IpAddr, u16),
    track: (u64, usize, u64),
) -> std::io::Result<(u16, [tokio::task::AbortHandle; 2])> {
    let pair = server.ports.bind(local)?;
    let port = pair.rtp_port;
    let tokio_socket = |s: socket2::Socket| {
        s.set_nonblocking(true)?;
        tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(s))
    };
    let (socket, reports) = (tokio_socket(pair.rtp)?, tokio_socket(pair.rtcp)?);
    let weak = (server.live.server.get().cloned()).unwrap_or_default();
    let receive = tokio::spawn(super::intake::receive(weak.clone(), track, socket, peer));
    let to = std::net::SocketAddr::new(peer, rtcp);
    let report = tokio::spawn(super::rtcp::report(weak, track, reports, to));
    Ok((port, [receive.abort_handle(), report.abort_handle()]))
}

pub(super) fn record(server: &Server, conn: &dyn Client, req: &Request, now: Instant) -> Reply {
    let id = match stream_of(server, conn, req) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let mut state = server.live.lock();
    let Some(stream) = state.streams.get_mut(&id) else {
        return refuse(454, "the stream ended");
    };
    if let Err(r) = stream.publish.record() {
        return refuse(r.status, r.reason);
    }
    stream.last = now;
    tracing::info!(path = stream.path, "live stream recording");
    Response::new(200)
        .header("Session", session_header(server, &stream.session))
        .into()
}

/// TEARDOWN, keep-alives and anything else of a publisher's session;
/// `None`: the request names no publisher's session.
pub(super) fn answer(
    server: &Server,
    conn: &dyn Client,
    req: &Request,
    now: Instant,
) -> Option<Reply> {
    let session = req.session_id()?;
    let mut state = server.live.lock();
    let (&id, stream) = state
        .streams
        .iter_mut()
        .find(|(_, s)| s.session == session)?;
    if stream.conn != Some(conn.id()) {
        return Some(refuse(454, "that session is not this connection's"));
    }
    stream.last = now;
    let header = session_header(server, session);
    drop(state);
    Some(match req.method {
        Method::Teardown => {
            super::end_soon(server, id, "its publisher tore it down");
            Response::new(200).into()
        }
        // GStreamer's rtspclientsink PAUSEs before its TEARDOWN (RFC 2326
        // §10.6): the stream stays; a pause past live_timeout_s ends it.
        Method::GetParameter | Method::SetParameter | Method::Options | Method::Pause => {
            Response::new(200).header("Session", header).into()
        }
        _ => refuse(
            455,
            "a publisher's session takes SETUP, RECORD, PAUSE and TEARDOWN",
        ),
    })
}

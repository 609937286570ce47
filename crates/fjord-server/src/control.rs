//! RTSP methods (RFC 2326 §10): what each request does to sessions and the
//! engine, and the reply it gets.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use fjord_engine::{Command, Output, RepairSpec, SessionSpec, Start, Title, UdpSocket, Until};
use fjord_media::index::TrackKind;
use fjord_proto::{
    rtsp::{
        framing::{Method, Request, Version},
        range,
        response::Response,
        rtp_info,
        session::{State, allowed_methods, next_state},
        transport::{self, TransportRequest},
        url::title_path,
    },
    sdp,
};

mod multicast;

/// What the RTSP methods need of the connection a request came on; the
/// connection's task implements it over its socket.
pub(crate) trait Client: Send + Sync {
    fn id(&self) -> u64;
    fn peer(&self) -> std::io::Result<SocketAddr>;
    fn local(&self) -> std::io::Result<SocketAddr>;
    fn is_tls(&self) -> bool;
    /// The connection holds `s`: closing it ends the session.
    fn add_session(&mut self, s: Arc<Session>);
    fn channel_in_use(&self, channel: u8) -> bool;
    fn use_channels(&mut self, channels: [u8; 2]);
    fn free_channels(&mut self, channels: [u8; 2]);
    /// Hands the connection's write side to the engine thread of the
    /// connection (interleaved streams), once.
    fn attach(&mut self, engine: &fjord_engine::Engine) -> std::io::Result<()>;
}

use crate::{
    Server,
    admission::Admission,
    guard::Verdict,
    metrics::Refusal,
    scale,
    session::{Caps, Full, ReceiverStats, Session, SessionId, Stream, StreamRtcp, rtcp_reader},
    shared::{ConnectedPlace, RouteError, SharedPair},
    title_streams,
};

pub(crate) struct Reply {
    pub response: Response,
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
            start: None,
            close: false,
        }
    }
}

fn status(code: u16) -> Reply {
    Response::new(code).into()
}

/// An error reply with a one-line reason in a text body.
fn refuse(code: u16, reason: &str) -> Reply {
    Response::new(code)
        .body("text/plain", format!("{reason}\r\n"))
        .into()
}

pub(crate) async fn handle(server: &Server, conn: &mut dyn Client, req: &Request) -> Reply {
    if req.version != Version::V1_0 {
        return status(505);
    }
    if req.cseq().is_none() {
        return refuse(400, "missing or invalid CSeq");
    }
    if req.method != Method::Options
        && let Some(denied) = denied(server, conn, req)
    {
        return denied;
    }
    match &req.method {
        Method::Options => Response::new(200)
            .header("Public", allowed_methods())
            .into(),
        Method::Describe => describe(server, conn, req).await,
        Method::Setup => setup(server, conn, req).await,
        Method::Play => play(server, conn, req).await,
        Method::Pause => pause(server, conn, req).await,
        Method::Teardown => teardown(server, conn, req),
        Method::GetParameter | Method::SetParameter => keepalive(server, conn, req),
        Method::Announce | Method::Record | Method::Redirect => {
            Response::new(405).header("Allow", allowed_methods()).into()
        }
        Method::Other(_) => status(501),
    }
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
    match (server.guard).check(ip, method, auth, &path, conn.is_tls()) {
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

async fn describe(server: &Server, conn: &dyn Client, req: &Request) -> Reply {
    let Ok(target) = title_path(&req.uri) else {
        return status(404);
    };
    if target.track.is_some() {
        return status(404);
    }
    if broadcast_query(&req.uri) {
        return match server.broadcasts.schedule(&target.title) {
            Some(json) => Response::new(200)
                .body("application/json", json.to_string())
                .into(),
            None if server
                .broadcasts
                .configured(&server.config(), &target.title) =>
            {
                Response::new(503)
                    .header("Retry-After", "1")
                    .body(
                        "text/plain",
                        "the broadcast is starting (its parity is being made)\r\n",
                    )
                    .into()
            }
            None => refuse(404, "this title is not broadcast"),
        };
    }
    let title = match server.catalog.open(&target.title).await {
        Ok((_, t)) => t,
        Err(e) => return refuse(e.status(), &e.to_string()),
    };
    let local = match conn.local() {
        Ok(a) => a,
        Err(e) => return refuse(500, &e.to_string()),
    };
    let index = title.index();
    let n = index.track_count();
    let controls: Vec<String> = (0..n).map(track_control).collect();
    let repair_controls: Vec<String> = controls
        .iter()
        .map(|c| format!("{c}{REPAIR_SUFFIX}"))
        .collect();
    let mids: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("S{i}"), format!("R{i}")))
        .collect();
    // Players set up every stream the SDP lists (ffmpeg makes the repair
    // stream a data stream of its output), so repair streams are offered
    // only to clients that say they support them.
    let offer_fec = supports(req, FEC_FEATURE);
    let repair_fmtps: Vec<Option<String>> = (0..n)
        .map(|i| repair_fmtp(&title, i).filter(|_| offer_fec))
        .collect();
    let repair_pt = title_streams::repair_payload_type(&title);
    let mut tracks: Vec<sdp::SdpTrack> = Vec::with_capacity(2 * n);
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for (i, t) in index.tracks().enumerate() {
        let protected = repair_fmtps[i].is_some();
        tracks.push(sdp::SdpTrack {
            media: sdp_media(t.kind()),
            payload_type: t.payload_type(),
            encoding: t.encoding(),
            clock_rate: t.clock_rate(),
            channels: t.channels(),
            fmtp: Some(t.fmtp()).filter(|f| !f.is_empty()),
            control: &controls[i],
            mid: protected.then_some(mids[i].0.as_str()),
        });
        if let Some(fmtp) = &repair_fmtps[i] {
            tracks.push(sdp::SdpTrack {
                media: "application",
                payload_type: repair_pt,
                encoding: REPAIR_ENCODING,
                clock_rate: t.clock_rate(),
                channels: 0,
                fmtp: Some(fmtp),
                control: &repair_controls[i],
                mid: Some(&mids[i].1),
            });
            groups.push((&mids[i].0, &mids[i].1));
        }
    }
    let body = sdp::describe(&sdp::SdpTitle {
        name: &target.title,
        origin_addr: local.ip(),
        session_id: rand::random::<u32>() as u64,
        duration_s: index.duration_ns() as f64 / 1e9,
        tracks: &tracks,
        fec_groups: &groups,
    });
    let base = format!(
        "{}/",
        req.uri
            .split('?')
            .next()
            .unwrap_or("")
            .trim_end_matches('/')
    );
    let mut response = Response::new(200).header("Content-Base", &base);
    if (0..n).any(|i| title.fec(i).is_some()) {
        response = response.header("Supported", FEC_FEATURE);
    }
    response.body("application/sdp", body).into()
}

/// The RTSP feature tag (RFC 7826 `Supported`) a client sends with
/// DESCRIBE to be offered repair streams; a reply names it when the title
/// has them.
const FEC_FEATURE: &str = "fjord.fec";

/// Whether the request's `Supported` headers list `feature`.
/// `?broadcast` in a request URI: the title's broadcast schedule.
fn broadcast_query(uri: &str) -> bool {
    uri.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p == "broadcast"))
}

fn supports(req: &Request, feature: &str) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("Supported"))
        .flat_map(|(_, value)| value.split(','))
        .any(|tag| tag.trim().eq_ignore_ascii_case(feature))
}

fn sdp_media(kind: TrackKind) -> &'static str {
    match kind {
        TrackKind::Video => "video",
        TrackKind::Audio => "audio",
        TrackKind::Data => "application",
    }
}

fn track_control(i: usize) -> String {
    format!("track{}", i + 1)
}

/// A repair stream's control URL is its track's with this appended.
const REPAIR_SUFFIX: &str = "-fec";
/// The repair payload format of `docs/fec.md`.
const REPAIR_ENCODING: &str = fjord_fec::symbol::REPAIR_ENCODING;

/// `a=fmtp` of track `t`'s repair stream, when the title has parity for it:
/// RFC 6865's FEC Encoding ID and scheme-specific information (E and m, in
/// RFC 6364's `fssi` form), the block layout and the repair window.
fn repair_fmtp(title: &Title, t: usize) -> Option<String> {
    let fec = title.fec(t)?;
    let params = fec.params();
    let window_us = title.repair_window_ns(t)?.div_ceil(1000);
    Some(format!(
        "encoding-id={}; fssi=E:{},m:8; k={}; repair={}; repair-window={window_us}",
        fjord_fec::symbol::FEC_ENCODING_ID,
        fec.symbol_len(),
        params.k,
        params.m
    ))
}

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

async fn setup(server: &Server, conn: &mut dyn Client, req: &Request) -> Reply {
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
fn admit_session(server: &Server, session: &Arc<Session>) -> Result<(), Reply> {
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
fn keep_stream(conn: &mut dyn Client, session: &Arc<Session>, new: bool) {
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

fn session_header(server: &Server, id: SessionId) -> String {
    format!("{id};timeout={}", server.config().session_timeout_s)
}

/// The session a request names, with its state advanced by `method`.
fn session_for(server: &Server, conn: &dyn Client, req: &Request) -> Result<Arc<Session>, Reply> {
    let Some(id) = req.session_id() else {
        // No session yet: SETUP has not happened (RFC 2326 §A.1).
        return Err(refuse(455, "SETUP first"));
    };
    let Some(session) = server.sessions.get(id) else {
        return Err(status(454));
    };
    if session.conn != conn.id() {
        return Err(status(454));
    }
    session.touch();
    Ok(session)
}

async fn play(server: &Server, conn: &dyn Client, req: &Request) -> Reply {
    let session = match session_for(server, conn, req) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if multicast::is_member(&session) {
        return multicast::play(server, &session, req).await;
    }
    let (scale_h, speed_h) = (req.header("Scale"), req.header("Speed"));
    let rate = match scale::requested(scale_h, speed_h, server.config().max_speed, &session.title) {
        Ok(r) => r,
        Err((code, why)) => return refuse(code, &why),
    };
    let scale = rate.scale;
    let duration_ns = session.title.index().duration_ns();
    let (mut seek_ns, mut end_ns) = match requested_range(req, duration_ns, scale < 0) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let ranged = seek_ns.is_some();
    let (streams, scale_was, was_playing) = {
        let mut inner = session.lock();
        let was_playing = inner.state == State::Playing;
        if let Err(code) = next_state(inner.state, &Method::Play) {
            return status(code);
        }
        let speed_was = inner.speed;
        if !resize_for_speed(&server.admission, &mut inner.streams, speed_was, rate.speed) {
            server.metrics.refused(Refusal::Speed);
            return refuse(453, "no room on the engine thread for that Speed");
        }
        inner.speed = rate.speed;
        if let Ok(s) = next_state(inner.state, &Method::Play) {
            inner.state = s;
        }
        inner.played();
        let was = std::mem::replace(&mut inner.scale, scale);
        let streams: Vec<(u64, u64, String, u32)> = inner
            .streams
            .iter()
            .filter(|s| !s.repair)
            .map(|s| (s.shard, s.engine_id, s.url.to_string(), s.track))
            .collect();
        (streams, was, was_playing)
    };
    // RFC 2326 §10.5: a PLAY with a Range while one plays waits for it
    // when it plays to a given end (the engine decides; else it seeks).
    let queue = ranged && was_playing && scale == 1 && scale_was == 1;
    // Into, out of or between trick plays without a Range: on from where
    // the title stands, to the end of the new direction.
    if scale != scale_was || scale != 1 {
        if seek_ns.is_none()
            && let Some(&(shard, id, ..)) = streams.first()
        {
            seek_ns = engine_position(server, shard, id).await;
        }
        if scale != scale_was && end_ns.is_none() {
            end_ns = Some(None);
        }
    }
    // A seek starts every track at the random-access point of the title's
    // first track that has them (the video) at or before the requested time;
    // before the first one (other tracks may start earlier), at that time.
    let seek_ns = seek_ns.map(|ns| {
        let index = session.title.index();
        let key = index.tracks().find(|t| t.sync_count() > 0);
        key.map_or(ns, |t| t.sync_before(ns).time_ns.min(ns))
    });
    let mut infos = Vec::with_capacity(streams.len());
    let mut started = Vec::with_capacity(streams.len());
    for (shard, id, url, track) in streams {
        let title = session.title.clone();
        let Some((start, until)) = start_and_end(title, track as usize, seek_ns, end_ns).await
        else {
            return status(500);
        };
        let Some(info) =
            title_streams::play(&server.engine, shard, id, start, until, rate, queue).await
        else {
            return status(454);
        };
        infos.push((url, info));
        if !info.queued {
            started.push((shard, id));
        }
    }
    // Streams paused together stand at (nearly) the same time; the first
    // one's is the session's.
    let origin_ns = infos.first().map_or(0, |(_, i)| i.time_ns);
    let end_s = infos.first().map_or(duration_ns, |(_, i)| i.end_ns) as f64 / 1e9;
    let rtp_info: Vec<(String, u16, u32)> = infos
        .into_iter()
        .map(|(u, i)| (u, i.seq, i.rtptime))
        .collect();
    let mut response = Response::new(200);
    if req.header("Scale").is_some() || scale != 1 {
        response.push_header("Scale", scale.to_string());
    }
    if speed_h.is_some() {
        let speed = f64::from(rate.speed) / f64::from(fjord_engine::REAL_TIME);
        response.push_header("Speed", speed.to_string());
    }
    Reply {
        response: response
            .header(
                "Range",
                range::format_npt(origin_ns as f64 / 1e9, Some(end_s)),
            )
            .header("RTP-Info", rtp_info::format(&rtp_info))
            .header("Session", session_header(server, session.id)),
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

/// Where track `track` starts and stops. Finding the packets may read the
/// index from disk: not on an engine thread, and off the runtime's
/// threads. `None` if that task failed.
async fn start_and_end(
    title: Arc<Title>,
    track: usize,
    seek_ns: Option<u64>,
    end_ns: Option<Option<u64>>,
) -> Option<(Start, Until)> {
    let lookup = seek_ns.is_some() || matches!(end_ns, Some(Some(_)));
    let find = move || {
        let start = seek_ns.map_or(Start::Resume, |ns| Start::at(&title, track, ns));
        let until = match end_ns {
            None => Until::Previous,
            Some(None) => Until::End,
            Some(Some(ns)) => Until::at(&title, track, ns),
        };
        (start, until)
    };
    if !lookup {
        return Some(find());
    }
    let asked = std::time::Instant::now();
    let found = tokio::task::spawn_blocking(find).await.ok()?;
    slow_start_lookup(asked.elapsed());
    Some(found)
}

/// Logs a start-packet lookup that took long enough to delay a first
/// packet noticeably (the index page was on the disk, behind others).
fn slow_start_lookup(took: std::time::Duration) {
    if took > std::time::Duration::from_millis(50) {
        tracing::warn!("finding a PLAY's start packet took {} ms", took.as_millis());
    }
}

/// Sizes every stream's admission reservation for delivery at `speed`
/// (millionths) instead of `was`; false, and none changed, when a
/// thread has no room.
fn resize_for_speed(admission: &Admission, streams: &mut [Stream], was: u32, speed: u32) -> bool {
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

/// Where an engine stream stands on the title timeline now.
async fn engine_position(server: &Server, shard: u64, id: u64) -> Option<u64> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reply = Box::new(move |at| {
        let _ = tx.send(at);
    });
    server.engine.send(shard, Command::Position { id, reply });
    rx.await.ok().flatten()
}

async fn pause(server: &Server, conn: &dyn Client, req: &Request) -> Reply {
    let session = match session_for(server, conn, req) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Err(code) = next_state(session.lock().state, &Method::Pause) {
        return status(code);
    }
    if multicast::is_member(&session) {
        // The group plays on for the others (and this client keeps
        // receiving what it joined): the session only stops counting as
        // playing.
        return paused(server, &session);
    }
    let point = match pause_point(req) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let streams: Vec<(u64, u64, u32)> = (session.lock().streams.iter())
        .filter(|s| !s.repair)
        .map(|s| (s.shard, s.engine_id, s.track))
        .collect();
    if let Some(ns) = point {
        for &(shard, id, track) in &streams {
            let title = session.title.clone();
            let Ok(packet) =
                tokio::task::spawn_blocking(move || title.end_packet(track as usize, ns)).await
            else {
                return status(500);
            };
            if !engine_pause_at(server, shard, id, packet, ns).await {
                return refuse(457, "the pause point is not ahead in the range playing");
            }
        }
    } else {
        for &(shard, id, _) in &streams {
            server.engine.send(shard, Command::Pause { id });
        }
    }
    paused(server, &session)
}

/// The reply to a PAUSE that took effect: the session is paused.
fn paused(server: &Server, session: &Session) -> Reply {
    let mut inner = session.lock();
    if let Ok(s) = next_state(inner.state, &Method::Pause) {
        inner.state = s;
    }
    drop(inner);
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

fn teardown(server: &Server, conn: &mut dyn Client, req: &Request) -> Reply {
    let session = match session_for(server, conn, req) {
        Ok(s) => s,
        Err(r) => return r,
    };
    for st in session.lock().streams.iter() {
        if let Some((a, b)) = st.interleaved {
            conn.free_channels([a, b]);
        }
    }
    server
        .sessions
        .remove(session.id, &server.engine, &server.admission);
    status(200)
}

/// GET_PARAMETER and SET_PARAMETER: keepalive; no parameters are settable.
fn keepalive(server: &Server, conn: &dyn Client, req: &Request) -> Reply {
    if req.session_id().is_some()
        && let Err(r) = session_for(server, conn, req)
    {
        return r;
    }
    if req.method == Method::SetParameter && !req.body.is_empty() {
        return refuse(451, "no parameter of this server can be set");
    }
    status(200)
}

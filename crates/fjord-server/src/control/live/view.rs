//! Viewers of a live stream: DESCRIBE (the publisher's SDP, rewritten),
//! SETUP of a track over UDP or TCP (over multicast: the stream's group,
//! `multicast.rs`), PLAY from the last key frame, TEARDOWN. The engine
//! sends; this hands it each viewer's output and numbering, and the
//! packets it joins with. A viewer that sends neither
//! a request nor RTCP for `session_timeout_s` is ended (RFC 2326 §12.37),
//! as a VOD session is: its UDP RTCP is read by a task per track
//! (`alive.rs`; a multicast member's, by its group's), its interleaved
//! RTCP comes with the connection's `$` frames.

use std::{net::SocketAddr, time::Instant};

use fjord_engine::{Backlog, Command, LiveViewer, Output};
use fjord_proto::rtsp::{
    framing::{Method, Request},
    response::Response,
    transport::{self, TransportRequest},
    url::title_path,
};

use super::super::{Client, PlayStart, Reply};
use super::{Stream, alive::Heard, refuse, session_header, session_id};
use crate::{Server, outbox::Outbox};

/// A viewer's RTSP session.
pub(super) struct Viewing {
    pub conn: u64,
    /// The stream's id.
    pub stream: u64,
    tracks: Vec<Watched>,
    /// The tracks it set up over multicast: it is a member of the
    /// stream's group (`multicast.rs`), and has no `tracks`.
    group: Vec<usize>,
    pub playing: bool,
    /// When it last sent a request or RTCP.
    pub last: Instant,
}

impl Viewing {
    pub(super) fn new(conn: u64, stream: u64) -> Viewing {
        Viewing {
            conn,
            stream,
            tracks: Vec::new(),
            group: Vec::new(),
            playing: false,
            last: Instant::now(),
        }
    }

    /// It takes `track` from the stream's group; true if it is its first
    /// (it joins the group). A session's tracks all go by multicast or
    /// none.
    pub(super) fn watch_group(&mut self, track: usize) -> Result<bool, Reply> {
        self.may_add(true)?;
        let first = self.group.is_empty();
        if !self.group.contains(&track) {
            self.group.push(track);
        }
        Ok(first)
    }

    /// Why it cannot take another track (from the group when
    /// `multicast`), if it cannot.
    pub(super) fn may_add(&self, multicast: bool) -> Result<(), Reply> {
        if self.playing {
            return Err(refuse(455, "SETUP before PLAY"));
        }
        match multicast {
            true if !self.tracks.is_empty() => {}
            false if !self.group.is_empty() => {}
            _ => return Ok(()),
        }
        Err(refuse(
            461,
            "a session's tracks all go by multicast or none",
        ))
    }

    /// The tracks it set up over multicast.
    pub(super) fn group_tracks(&self) -> &[usize] {
        &self.group
    }

    /// Its RTCP is no longer read (it ended), so its sockets close.
    pub(super) fn stop_reading(&self) {
        self.tracks.iter().for_each(Watched::stop_reading);
    }
}

impl Watched {
    fn stop_reading(&self) {
        if let Some(task) = &self.rtcp {
            task.abort();
        }
    }
}

/// One track a viewer set up.
struct Watched {
    track: usize,
    /// The engine's id for this viewer of the track.
    id: u64,
    ssrc: u32,
    /// Until PLAY hands it to the engine.
    output: Option<Output>,
    channels: Option<[u8; 2]>,
    /// The task reading its RTCP (UDP), ended with it.
    rtcp: Option<tokio::task::AbortHandle>,
}

/// A viewer's request, when it is about a live path or session.
pub(super) fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
) -> Option<Reply> {
    if let Some(id) = req.session_id().filter(|id| id.starts_with("live")) {
        return Some(in_session(server, (conn, out), req, id));
    }
    let target = title_path(&req.uri).ok()?;
    let stream = live_stream(server, &target.title)?;
    match req.method {
        Method::Describe if target.track.is_none() => Some(describe(server, req, stream)),
        Method::Setup => Some(setup(server, (conn, out), req, (stream, None))),
        _ => None,
    }
}

/// The recording stream at `path`, if any.
fn live_stream(server: &Server, path: &str) -> Option<u64> {
    let state = server.live.lock();
    let id = state.paths.as_ref()?.owner(path)?;
    state.streams.get(&id)?.publish.is_recording().then_some(id)
}

fn describe(server: &Server, req: &Request, id: u64) -> Reply {
    let state = server.live.lock();
    let Some(stream) = state.streams.get(&id) else {
        return refuse(404, "the stream ended");
    };
    let base = super::super::describe::content_base(&req.uri);
    Response::new(200)
        .header("Content-Base", base)
        .body(
            "application/sdp",
            stream.publish.announced.viewer_sdp.clone(),
        )
        .into()
}

fn in_session(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    id: &str,
) -> Reply {
    let stream = {
        let mut state = server.live.lock();
        match state.viewers.get_mut(id) {
            Some(v) if v.conn == conn.id() => {
                v.last = Instant::now();
                v.stream
            }
            // The stream ended (the viewer got BYE): nothing left to end.
            None if req.method == Method::Teardown => return Response::new(200).into(),
            _ => return refuse(454, "no such session on this connection"),
        }
    };
    let member = server
        .live
        .lock()
        .viewers
        .get(id)
        .is_some_and(|v| !v.group.is_empty());
    match req.method {
        Method::Setup => setup(server, (conn, out), req, (stream, Some(id))),
        Method::Play if member => super::multicast::play(server, id),
        Method::Play => play(server, conn, id),
        Method::Teardown => {
            for ch in remove(server, id) {
                conn.free_channels(ch);
            }
            Response::new(200).into()
        }
        Method::GetParameter | Method::SetParameter | Method::Options => Response::new(200)
            .header("Session", session_header(server, id))
            .into(),
        _ => refuse(455, "a live stream plays until TEARDOWN"),
    }
}

/// The track a viewer's SETUP names: `trackID=N` as the viewer SDP says.
fn track_of(req: &Request, stream: &Stream) -> Option<usize> {
    let t = title_path(&req.uri).ok()?.track?;
    let n: usize = t.strip_prefix("trackID=")?.parse().ok()?;
    (n < stream.tracks.len()).then_some(n)
}

fn setup(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    (stream, session): (u64, Option<&str>),
) -> Reply {
    let offered = server.config().multicast;
    let asked = match transport::choose_for(req.header("Transport").unwrap_or_default(), offered) {
        Ok(t) => t,
        Err(e) => return refuse(e.status(), &e.to_string()),
    };
    let track = {
        let state = server.live.lock();
        let Some(s) = state.streams.get(&stream) else {
            return refuse(404, "the stream ended");
        };
        match track_of(req, s) {
            Some(t) => t,
            None => return refuse(404, "no track of the stream has that URL"),
        }
    };
    if let TransportRequest::Multicast { .. } = asked {
        return super::multicast::setup(server, conn, (stream, session), track);
    }
    let ssrc: u32 = rand::random();
    let id = session.map_or_else(session_id, str::to_owned);
    let (output, channels, reply) = match transport_for(server, (conn, out), asked, ssrc) {
        Ok(made) => made,
        Err(r) => return r,
    };
    let rtcp = read_rtcp(server, &id, &output);
    let mut state = server.live.lock();
    let viewing =
        (state.viewers.entry(id.clone())).or_insert_with(|| Viewing::new(conn.id(), stream));
    if let Err(r) = viewing.may_add(false) {
        if let Some(task) = rtcp {
            task.abort();
        }
        return r;
    }
    (viewing.tracks.iter())
        .filter(|w| w.track == track)
        .for_each(Watched::stop_reading);
    viewing.tracks.retain(|w| w.track != track);
    viewing.tracks.push(Watched {
        track,
        id: server.next_id(),
        ssrc,
        output: Some(output),
        channels,
        rtcp,
    });
    Response::new(200)
        .header("Transport", reply)
        .header("Session", session_header(server, &id))
        .into()
}

type Made = (Output, Option<[u8; 2]>, String);

/// Starts reading the RTCP of viewer session `id` arriving on `output`'s
/// RTCP socket (UDP; `None` for interleaved, or when the socket cannot be
/// shared or read: the viewer then lives on its requests alone).
fn read_rtcp(server: &Server, id: &str, output: &Output) -> Option<tokio::task::AbortHandle> {
    let Output::Udp {
        rtcp, rtcp_peer, ..
    } = output
    else {
        return None;
    };
    let socket = rtcp.socket().try_clone().ok()?;
    let (id, from) = (id.to_owned(), rtcp_peer.ip().to_canonical());
    super::alive::read(server, Heard::Viewer { id, from }, socket.into())
}

/// A `$` frame on connection `conn`: taken when it is RTCP of one of its
/// live viewers (a sign of life).
pub(super) fn interleaved_rtcp(server: &Server, conn: u64, channel: u8, payload: &[u8]) -> bool {
    let mut state = server.live.lock();
    let ours = |w: &Watched| w.channels.is_some_and(|[_, rtcp]| rtcp == channel);
    let Some(v) =
        (state.viewers.values_mut()).find(|v| v.conn == conn && v.tracks.iter().any(ours))
    else {
        return false;
    };
    if fjord_proto::rtcp::parse_compound(payload).is_ok() {
        v.last = Instant::now();
    }
    true
}

/// Ends the viewers that sent neither a request nor RTCP for
/// `session_timeout_s` at `now`.
pub(super) fn expire_idle(server: &Server, now: Instant) {
    let timeout = server.config().session_timeout();
    let idle: Vec<String> = (server.live.lock().viewers.iter())
        .filter(|(_, v)| now.saturating_duration_since(v.last) >= timeout)
        .map(|(id, _)| id.clone())
        .collect();
    for id in idle {
        tracing::info!(session = id, "live viewer timed out");
        // Its interleaved channels stay taken on its connection, which
        // closes once idle (it holds no live session now).
        remove(server, &id);
    }
}

fn transport_for(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    asked: TransportRequest,
    ssrc: u32,
) -> Result<Made, Reply> {
    let io = |e: std::io::Error| refuse(500, &e.to_string());
    match asked {
        TransportRequest::Udp {
            client_rtp,
            client_rtcp,
            destination,
        } => {
            let peer = conn.peer().map_err(io)?.ip();
            if destination.is_some_and(|d| d != peer) {
                return Err(refuse(
                    403,
                    "RTP goes only to the requesting client's address",
                ));
            }
            let pair = (server.ports)
                .bind(conn.local().map_err(io)?.ip())
                .map_err(|e| refuse(453, &e.to_string()))?;
            let port = pair.rtp_port;
            let output = Output::Udp {
                rtp: pair.rtp.into(),
                rtp_peer: SocketAddr::new(peer, client_rtp),
                rtcp: pair.rtcp.into(),
                rtcp_peer: SocketAddr::new(peer, client_rtcp),
            };
            let reply = transport::reply_udp(client_rtp, client_rtcp, port, port + 1, ssrc);
            Ok((output, None, reply))
        }
        TransportRequest::Tcp {
            rtp_channel,
            rtcp_channel,
        } => {
            if conn.channel_in_use(rtp_channel) || conn.channel_in_use(rtcp_channel) {
                return Err(refuse(461, "interleaved channels in use"));
            }
            conn.attach(out).map_err(io)?;
            conn.use_channels([rtp_channel, rtcp_channel]);
            let output = Output::Interleaved {
                conn: conn.id(),
                rtp_channel,
                rtcp_channel,
            };
            let reply = transport::reply_tcp(rtp_channel, rtcp_channel, ssrc);
            Ok((output, Some([rtp_channel, rtcp_channel]), reply))
        }
        TransportRequest::Multicast { .. } => Err(refuse(500, "multicast is a group's")),
    }
}

/// PLAY: each track's viewer is handed to the engine thread of the
/// connection with the packets since the last key frame, and started once
/// the reply is written (the reply's [`PlayStart`]).
fn play(server: &Server, conn: &dyn Client, id: &str) -> Reply {
    let mut state = server.live.lock();
    if let Some(stream) = state.viewers.get(id).map(|v| v.stream) {
        super::intake::hand_out_pending(server, &mut state, stream);
    }
    let super::State {
        streams, viewers, ..
    } = &mut *state;
    let Some(viewing) = viewers.get_mut(id) else {
        return refuse(454, "no such session");
    };
    let Some(stream) = streams.get_mut(&viewing.stream) else {
        return refuse(404, "the stream ended");
    };
    if viewing.playing {
        return Response::new(200)
            .header("Session", session_header(server, id))
            .into();
    }
    let thread = conn.id() % server.engine.threads() as u64;
    let (mut infos, mut starts) = (Vec::new(), Vec::new());
    let relay = super::rtcp::all_synced(stream, viewing.tracks.iter().map(|w| w.track));
    for w in &mut viewing.tracks {
        let Some(output) = w.output.take() else {
            continue;
        };
        let backlog = backlog(stream, w.track);
        let t = &stream.tracks[w.track];
        let (seq_delta, ts_delta): (u16, u32) = (rand::random(), rand::random());
        // The first packet it will get: the backlog's, else the next.
        let first = (backlog.iter().next())
            .map(|p| header_of(p))
            .or(t.renumber.last().map(|(s, ts)| (s.wrapping_add(1), ts)));
        if let Some((seq, ts)) = first {
            infos.push(format!(
                "url=trackID={};seq={};rtptime={}",
                w.track,
                seq.wrapping_add(seq_delta),
                ts.wrapping_add(ts_delta)
            ));
        }
        let viewer = LiveViewer {
            id: w.id,
            feed: t.feed,
            ssrc: w.ssrc,
            seq_delta,
            ts_delta,
            output,
            backlog,
            started: false,
            clock_rate: t.clock_rate,
            sent: (0, 0),
            relay,
        };
        server
            .engine
            .send(conn.id(), Command::LiveAdd(Box::new(viewer)));
        super::rtcp::share_sync(server, conn.id(), t);
        starts.push((conn.id(), w.id));
    }
    stream.threads.insert(thread);
    viewing.playing = true;
    play_reply(server, id, &infos, starts)
}

/// The reply to viewer session `id`'s PLAY: its RTP-Info `infos`, and the
/// engine viewers `starts` (thread key, id) started once it is written.
pub(super) fn play_reply(
    server: &Server,
    id: &str,
    infos: &[String],
    starts: Vec<(u64, u64)>,
) -> Reply {
    let mut response = Response::new(200)
        .header("Session", session_header(server, id))
        .header("Range", "npt=0.000-");
    if !infos.is_empty() {
        response = response.header("RTP-Info", infos.join(","));
    }
    let mut reply: Reply = response.into();
    if !starts.is_empty() {
        reply.start = Some(PlayStart {
            streams: starts,
            origin_ns: 0,
        });
    }
    reply
}

/// Track `track`'s packets since the stream's last key frame, as the
/// ring's shared chunks.
pub(super) fn backlog(stream: &mut Stream, track: usize) -> Backlog {
    let joined = stream.ring.backlog(track);
    Backlog {
        chunks: joined.chunks,
        skip: joined.skip,
    }
}

/// Sequence number and timestamp of a packet the intake checked.
pub(super) fn header_of(p: &[u8]) -> (u16, u32) {
    let seq = u16::from_be_bytes([p[2], p[3]]);
    let ts = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
    (seq, ts)
}

/// Ends viewer session `id`: its engine viewers go; the interleaved
/// channels it held are returned for the connection to free.
pub(super) fn remove(server: &Server, id: &str) -> Vec<[u8; 2]> {
    let Some(viewing) = server.live.lock().viewers.remove(id) else {
        return Vec::new();
    };
    for w in &viewing.tracks {
        (server.engine).send(viewing.conn, Command::LiveRemove { id: w.id });
    }
    viewing.stop_reading();
    if !viewing.group.is_empty() {
        super::multicast::leave(server, (viewing.stream, id));
    }
    viewing.tracks.iter().filter_map(|w| w.channels).collect()
}

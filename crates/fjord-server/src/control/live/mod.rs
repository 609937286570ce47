//! Live input (`docs/live.md`): publishers send a stream with RTSP
//! ANNOUNCE, SETUP (`mode=record`) and RECORD, its RTP over UDP or
//! interleaved on their connection; viewers DESCRIBE, SETUP and PLAY the
//! same path. Each packet is held once ([`fjord_engine::LivePacket`]) and
//! handed to the engine threads that have viewers of it, which send it to
//! each by reference. A viewer joins at the last key frame (the
//! [`fjord_live::ring::Ring`] of the stream). Multicast viewers share the
//! stream's one group (`multicast.rs`), sent each packet once. Viewers'
//! RTCP, their members' to a group too, keeps them alive (`alive.rs`). The
//! publisher's RTCP sender reports are read (`rtcp.rs`) and each track's
//! latest handed to the engine threads with viewers, which relay it in
//! each viewer's numbering ([`fjord_engine::LiveSync`]).
//!
//! A stream whose publisher went (its connection closed, or it sent nothing
//! for `live_timeout_s`) is held `live_grace_s` with its viewers: a
//! publisher that announces the same media there within it continues the
//! stream, renumbered so that viewers see one stream
//! ([`fjord_live::handover`]); past it the viewers get RTCP BYE.
//!
//! The sans-IO parts (SDP, RTP, key frames, the ring, the publish steps,
//! the handover) are `fjord-live`'s; this module is their I/O: sockets,
//! tasks, the engine commands, the timeouts.

mod alive;
mod intake;
mod multicast;
mod publish;
mod record;
pub(crate) mod report;
mod rtcp;
mod view;

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard, OnceLock, Weak},
    time::{Duration, Instant},
};

use fjord_engine::{Command, LivePacket, LiveSync};
use fjord_live::{handover::Renumber, publish::Paths, ring::Ring, sdp::Codec};
use fjord_proto::rtsp::{
    framing::{Method, Request},
    response::Response,
    transport,
};

use super::{Client, Reply};
use crate::{Server, outbox::Outbox};

/// The live streams and their viewers.
#[derive(Default)]
pub(crate) struct Live {
    state: Mutex<State>,
    /// For the tasks that read publishers' UDP ports (set by [`start`]).
    server: OnceLock<Weak<Server>>,
}

#[derive(Default)]
struct State {
    /// Which stream holds which path; made with the first ANNOUNCE.
    paths: Option<Paths<u64>>,
    streams: HashMap<u64, Stream>,
    /// Viewers' RTSP sessions, by session id.
    viewers: HashMap<String, view::Viewing>,
    /// The multicast group of a stream, by stream id.
    groups: HashMap<u64, multicast::Group>,
}

/// One publisher's stream.
struct Stream {
    path: String,
    /// The publisher's RTSP connection and session; no connection while
    /// the stream is held for the next publisher.
    conn: Option<u64>,
    session: String,
    /// Names the current publisher, for its UDP tasks (a new id for each).
    publisher: u64,
    publish: fjord_live::publish::Publish,
    tracks: Vec<TrackIn>,
    ring: Ring<LivePacket>,
    /// Engine threads with viewers of this stream (each gets every packet once).
    threads: BTreeSet<u64>,
    /// When the publisher last sent a packet (or a request).
    last: Instant,
    limits: fjord_live::Limits,
    /// Packets refused (malformed, too large, of an unknown channel).
    refused: u64,
    /// The tasks reading its UDP ports, ended with it.
    tasks: Vec<tokio::task::AbortHandle>,
    /// Its publisher went: it ends then unless one continues it.
    held: Option<Instant>,
    /// Torn down: it ends after [`DRAIN`], never held or continued.
    torn_down: bool,
    /// Its recording (`live_record`), across publishers; dropped with
    /// the stream, which closes the file and makes it a title.
    recording: Option<record::Recording>,
}

/// One track as it arrives.
struct TrackIn {
    /// The engine's name for the track's packets.
    feed: u64,
    codec: Codec,
    clock_rate: u32,
    /// The interleaved channel its RTP arrives on (TCP), and RTCP beside it.
    channel: Option<u8>,
    /// Its numbering as viewers see it, across publishers.
    renumber: Renumber,
    /// Interleaved packets of the current read, not yet handed out.
    pending: Vec<LivePacket>,
    /// Packets received and lost on the way in, by viewers' numbering
    /// (a continued stream counts on, not anew).
    loss: fjord_live::loss::Loss,
    /// What the receiver reports to the publisher say: of its own
    /// numbering ([`rtcp::report`] over UDP, [`rtcp::due_interleaved`]
    /// over TCP).
    reception: fjord_live::reception::Reception,
    /// When a publisher over TCP is next sent a receiver report.
    next_report: Option<Instant>,
    /// The current publisher's last sender report, in viewers' numbering
    /// (as the engine threads with viewers were told it): the mapping
    /// their sender reports carry.
    sync: Option<LiveSync>,
    /// A new publisher's sender report (NTP time, its own RTP time, when
    /// it came) sent before its first packet set the renumbering (ffmpeg's
    /// first): the mapping once that packet came ([`rtcp::early_report`]).
    early_report: Option<(fjord_proto::rtcp::NtpTime, u32, Instant)>,
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Lets publishers' UDP tasks reach the server; every second, streams
/// whose publisher went silent (`live_timeout_s`) lose it, those held
/// past their grace end, and viewers silent for `session_timeout_s` go.
pub(crate) fn start(server: &Arc<Server>) {
    let _ = server.live.server.set(Arc::downgrade(server));
    let weak = Arc::downgrade(server);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let Some(server) = weak.upgrade() else { return };
            let timeout = Duration::from_secs(server.config().live_timeout_s);
            let now = Instant::now();
            let (mut silent, mut expired) = (Vec::new(), Vec::new());
            for (&id, s) in server.live.lock().streams.iter() {
                match s.held {
                    Some(until) if until <= now => expired.push(id),
                    Some(_) => {}
                    None if now.saturating_duration_since(s.last) >= timeout => silent.push(id),
                    None => {}
                }
            }
            for id in silent {
                lose(&server, id, "its publisher sent nothing for live_timeout_s");
            }
            for id in expired {
                end(&server, id, "no publisher continued it within live_grace_s");
            }
            view::expire_idle(&server, now);
        }
    });
}

/// Whether `req` publishes (it is checked against `publish` rules, not
/// read rules): ANNOUNCE, RECORD, or SETUP with `mode=record`.
pub(crate) fn publishes(req: &Request) -> bool {
    match req.method {
        Method::Announce | Method::Record => true,
        Method::Setup => req.header("Transport").is_some_and(transport::is_record),
        _ => false,
    }
}

/// The answer when `req` is about a live stream or a live session;
/// `None`: it is not, and the VOD methods answer it.
pub(crate) fn answer(
    server: &Server,
    (conn, out): (&mut dyn Client, &mut Outbox),
    req: &Request,
    now: Instant,
) -> Option<Reply> {
    if publishes(req) && server.config().users.is_empty() {
        // An open server has no publish rule, so no publisher: 405.
        return None;
    }
    match req.method {
        Method::Announce => Some(publish::announce(server, conn, req, now)),
        Method::Setup if publishes(req) => Some(publish::setup(server, conn, req, now)),
        Method::Record => Some(publish::record(server, conn, req, now)),
        _ => {
            if let Some(r) = publish::answer(server, conn, req, now) {
                return Some(r);
            }
            view::answer(server, (conn, out), req)
        }
    }
}

/// A `$` frame on connection `conn`: taken when it is a publisher's, or
/// RTCP of a live viewer.
pub(crate) fn on_interleaved(server: &Server, conn: u64, channel: u8, payload: &[u8]) -> bool {
    intake::interleaved(server, conn, channel, payload)
        || view::interleaved_rtcp(server, conn, channel, payload)
}

/// The packets connection `conn`'s publisher sent since the last call go
/// to the engine: called after each read's frames, and before a request.
pub(crate) fn hand_out_interleaved(server: &Server, conn: u64) {
    intake::hand_out_interleaved(server, conn)
}

/// Receiver reports due to connection `conn`'s publisher, as interleaved
/// frames to write; `local`: the connection's own address (the CNAME).
pub(crate) fn reports_due(server: &Server, conn: u64, local: std::net::IpAddr) -> Vec<Vec<u8>> {
    rtcp::due_interleaved(server, conn, local, Instant::now())
}

/// Whether connection `conn` publishes or views a live stream: it is not
/// closed for being idle (a publisher sends no requests while it records,
/// a viewer maybe none while it watches).
pub(crate) fn holds(server: &Server, conn: u64) -> bool {
    let state = server.live.lock();
    state.streams.values().any(|s| s.conn == Some(conn))
        || state.viewers.values().any(|v| v.conn == conn)
}

/// Connection `conn` closed: its streams end, its viewers go.
pub(crate) fn conn_closed(server: &Server, conn: u64) {
    let (streams, viewers): (Vec<u64>, Vec<String>) = {
        let state = server.live.lock();
        let streams = state.streams.iter().filter(|(_, s)| s.conn == Some(conn));
        let viewers = state.viewers.iter().filter(|(_, v)| v.conn == conn);
        (
            streams.map(|(id, _)| *id).collect(),
            viewers.map(|(id, _)| id.clone()).collect(),
        )
    };
    for id in streams {
        lose(server, id, "its publisher's connection closed");
    }
    for id in viewers {
        view::remove(server, &id);
    }
}

/// How long a stream whose publisher went still takes its packets: a UDP
/// publisher's last packets may be behind its TEARDOWN or its close.
const DRAIN: Duration = Duration::from_millis(100);

/// Ends stream `id` once what its publisher sent before has arrived.
fn end_soon(server: &Server, id: u64, why: &'static str) {
    if let Some(s) = server.live.lock().streams.get_mut(&id) {
        s.torn_down = true;
    }
    let Some(weak) = server.live.server.get().cloned() else {
        return end(server, id, why);
    };
    tokio::spawn(async move {
        tokio::time::sleep(DRAIN).await;
        if let Some(server) = weak.upgrade() {
            end(&server, id, why);
        }
    });
}

/// Stream `id`'s publisher went: the stream is held for `live_grace_s`,
/// its viewers waiting for a publisher to continue it (its UDP ports read
/// for [`DRAIN`] more); with no grace it ends.
fn lose(server: &Server, id: u64, why: &str) {
    let grace = Duration::from_secs(server.config().live_grace_s);
    let mut state = server.live.lock();
    // Held already; or torn down: it ends after its drain ([`end_soon`]),
    // its publisher's last UDP packets, behind the TEARDOWN, taken too.
    let Some(s) = (state.streams.get_mut(&id)).filter(|s| s.held.is_none() && !s.torn_down) else {
        return;
    };
    let Some(until) = fjord_live::handover::hold(Instant::now(), grace) else {
        drop(state);
        return end(server, id, why);
    };
    s.held = Some(until);
    s.conn = None;
    // The old publisher's session no longer names the stream.
    s.session.clear();
    for t in &mut s.tracks {
        t.channel = None;
        t.pending.clear();
    }
    let tasks = std::mem::take(&mut s.tasks);
    tracing::info!(path = s.path, "live stream held for live_grace_s: {why}");
    drop(state);
    let abort = move || tasks.iter().for_each(tokio::task::AbortHandle::abort);
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn(async move {
            tokio::time::sleep(DRAIN).await;
            abort();
        })),
        Err(_) => abort(),
    }
}

/// Ends stream `id`: its viewers get RTCP BYE, its path is free again.
fn end(server: &Server, id: u64, why: &str) {
    let mut state = server.live.lock();
    let Some(stream) = state.streams.remove(&id) else {
        return;
    };
    if let Some(paths) = state.paths.as_mut() {
        paths.release(&stream.path, id);
    }
    state.viewers.retain(|_, v| {
        let watches = v.stream == id;
        if watches {
            v.stop_reading();
        }
        !watches
    });
    let group = state.groups.remove(&id);
    drop(state);
    for task in &stream.tasks {
        task.abort();
    }
    for t in &stream.tracks {
        for &thread in &stream.threads {
            server
                .engine
                .send(thread, Command::LiveEnd { feed: t.feed });
        }
    }
    if let Some(g) = group {
        multicast::stream_ended(server, g);
    }
    tracing::info!(
        path = stream.path,
        refused = stream.refused,
        "live stream ended: {why}"
    );
}

/// A new session id, unlike the VOD sessions' (which are hex digits).
fn session_id() -> String {
    format!("live{:016x}", rand::random::<u64>())
}

fn refuse(code: u16, reason: &str) -> Reply {
    Response::new(code)
        .body("text/plain", format!("{reason}\r\n"))
        .into()
}

fn session_header(server: &Server, id: &str) -> String {
    format!("{id};timeout={}", server.config().session_timeout_s)
}

//! What the server is doing now, gathered on request for `/metrics`, the
//! API and the status page: the engine threads' counters, each session as
//! the control plane and its engine streams know it, connections, the
//! storage layer.

use std::time::Instant;

use fjord_engine::{Command, ThreadStats};
use fjord_proto::rtsp::session::State;
use serde::Serialize;

use crate::{Server, session::Session};

pub(crate) fn unix_ms() -> u64 {
    (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH))
        .unwrap_or_default()
        .as_millis() as u64
}

/// Every engine thread's counters, in thread order. Awaited, not waited
/// for on the blocking pool: asked every second (the status page's
/// history) and at each scrape, that kept a pool thread or two alive.
pub(crate) async fn threads(server: &Server) -> Vec<ThreadStats> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    server.engine.ask_stats(move |i, s| {
        let _ = tx.send((i, s));
    });
    let mut all = Vec::new();
    // Ends when every thread has answered (and dropped its sender).
    while let Some(answer) = rx.recv().await {
        all.push(answer);
    }
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, s)| s).collect()
}

#[derive(Serialize)]
pub(crate) struct SessionView {
    pub id: String,
    pub client: String,
    pub title: String,
    pub format: String,
    /// `init`, `ready` (set up or paused) or `playing`.
    pub state: &'static str,
    /// `udp`, `tcp` (interleaved) or `none` (no stream set up).
    pub transport: &'static str,
    pub scale: i32,
    pub speed: f64,
    /// Where the first stream stands on the title, seconds.
    pub position_s: Option<f64>,
    /// Since the client's last request or RTCP.
    pub idle_s: f64,
    pub streams: Vec<StreamView>,
}

#[derive(Serialize)]
pub(crate) struct StreamView {
    pub track: u32,
    pub repair: bool,
    pub thread: usize,
    /// From the client's latest RTCP receiver report (RFC 3550 §6.4.2).
    pub receiver_reports: u64,
    pub fraction_lost: f64,
    /// Cumulative, a signed 24-bit figure on the wire (duplicates make it
    /// negative).
    pub lost: i32,
    pub jitter_ms: f64,
}

fn state_name(s: State) -> &'static str {
    match s {
        State::Init => "init",
        State::Ready => "ready",
        State::Playing => "playing",
    }
}

/// Every session, sorted by id, with where each stands: the position
/// queries go to all engine threads before the first answer is awaited.
pub(crate) async fn sessions(server: &Server) -> Vec<SessionView> {
    let mut asked: Vec<_> = (server.core.lock().sessions.all())
        .map(|s| (view(s), ask_position(server, s)))
        .collect();
    asked.sort_by(|(a, _), (b, _)| a.id.cmp(&b.id));
    let mut views = Vec::with_capacity(asked.len());
    for (mut view, rx) in asked {
        if let Some(rx) = rx {
            let at = rx.await.ok().flatten();
            view.position_s = at.map(|ns| ns as f64 / 1e9);
        }
        views.push(view);
    }
    views
}

fn ask_position(
    server: &Server,
    s: &Session,
) -> Option<tokio::sync::oneshot::Receiver<Option<u64>>> {
    let st = s.streams.iter().find(|st| !st.repair)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reply = Box::new(move |at| {
        let _ = tx.send(at);
    });
    (server.engine).send(
        st.shard,
        Command::Position {
            id: st.engine_id,
            reply,
        },
    );
    Some(rx)
}

/// The session's view, its position not yet known.
fn view(s: &Session) -> SessionView {
    let index = s.title.index();
    let streams = (s.streams.iter())
        .map(|st| {
            let clock = index
                .track(st.track as usize)
                .map_or(90_000, |t| t.clock_rate());
            let r = st.reports;
            StreamView {
                track: st.track,
                repair: st.repair,
                thread: st.reservation.thread,
                receiver_reports: r.reports,
                fraction_lost: f64::from(r.fraction_lost) / 256.0,
                lost: r.lost(),
                jitter_ms: f64::from(r.jitter) * 1e3 / f64::from(clock),
            }
        })
        .collect();
    SessionView {
        id: s.id.to_string(),
        client: s.peer.to_string(),
        title: s.title_name.to_string(),
        format: index.format(),
        state: state_name(s.state),
        transport: match s.streams.first() {
            None => "none",
            Some(st) if st.interleaved.is_some() => "tcp",
            Some(st) if st.group.is_some() => "multicast",
            Some(_) => "udp",
        },
        scale: s.scale,
        speed: f64::from(s.speed) / f64::from(fjord_engine::REAL_TIME),
        position_s: None,
        idle_s: Instant::now()
            .saturating_duration_since(s.last_activity)
            .as_secs_f64(),
        streams,
    }
}

//! The tokio side of the control core: a connection's task hands a
//! request to [`control::handle`] and, while the decision asks something
//! ([`Question`]), finds the answer (a title opened, the engine's, an
//! index lookup on the blocking pool, time passing) and feeds it back ([`control::on_answer`]).
//! All the awaiting of the control plane is here; the decisions await none.

use std::{sync::Arc, time::Instant};

use fjord_engine::{Command, PlayInfo, Start, Title, Until};
use fjord_proto::rtsp::framing::Request;

use crate::{
    Server,
    control::{self, Answer, Bind, Bound, Client, PlayAsk, Question, Read, Reply, Step},
    core::CoreLock,
    title_streams,
};

/// The reply to `req`, which arrived on `conn` at `now`, with the engine
/// commands to send before it is written (those made before each question
/// are sent before it is asked).
pub(crate) async fn request(
    server: &Server,
    conn: &mut dyn Client,
    req: &Request,
    now: Instant,
) -> Reply {
    let mut step = control::handle(server, conn, req, now);
    loop {
        match step {
            Step::Reply(reply) => return reply,
            Step::Ask(ask) => {
                let (commands, question, resume) = ask.into_parts();
                commands.send_to(&server.engine);
                let answer = answer(server, question).await;
                step = control::on_answer(server, conn, resume, answer);
            }
        }
    }
}

/// Finds out what `question` asks.
pub(crate) async fn answer(server: &Server, question: Question) -> Answer {
    match question {
        Question::Open(title) => Answer::Opened(server.catalog.open(&title).await),
        Question::Position { shard, id } => Answer::Position(position(server, shard, id).await),
        Question::Play(ask) => Answer::Played(play(server, &ask).await),
        Question::PauseAt { title, streams, ns } => {
            Answer::PausedAt(pause_at(server, &title, &streams, ns).await)
        }
        Question::Wait(at) => {
            tokio::time::sleep_until(at.into()).await;
            Answer::Woke
        }
        Question::Bind(bind) => Answer::Bound(self::bind(server, bind)),
        Question::ReadRtcp(read) => Answer::Reading(start_reader(server, read)),
    }
}

/// Binds what a UDP stream needs.
fn bind(server: &Server, bind: Bind) -> std::io::Result<Bound> {
    match bind {
        Bind::Own { local, rtp_peer } => {
            let pair = server.ports.bind(local)?;
            pair.rtp.connect(&rtp_peer.into())?;
            pair.rtp.set_nonblocking(true)?;
            Ok(Bound::Own(pair))
        }
        Bind::Shared { local, rtp, shard } => {
            let Some(shared) = &server.shared else {
                return Err(std::io::ErrorKind::Unsupported.into());
            };
            let pair = shared.pair(local, &server.ports)?;
            let rtp_peer = pair.peer(rtp);
            let (rtp, place) = pair.rtp_for(shard, rtp_peer);
            Ok(Bound::Shared {
                pair,
                rtp,
                rtp_peer,
                place,
            })
        }
        Bind::Group {
            local,
            rtp,
            rtcp,
            ttl,
        } => Ok(Bound::Group(server.ports.bind_to_group(
            local,
            (rtp, rtcp),
            ttl,
        )?)),
    }
}

/// Starts reading a stream's own RTCP socket; `None` if it cannot be read.
fn start_reader(server: &Server, read: Read) -> Option<tokio::task::AbortHandle> {
    read.socket.set_nonblocking(true).ok()?;
    let socket = tokio::net::UdpSocket::from_std(read.socket.into()).ok()?;
    let core = server.core.clone();
    let stream = (read.session, read.engine_id);
    let reader = rtcp_reader(socket, read.client, core, stream);
    Some(tokio::spawn(reader).abort_handle())
}

/// Positions every stream of a PLAY, in order; 500 when a lookup failed,
/// 454 when the engine has the stream no more.
async fn play(server: &Server, ask: &PlayAsk) -> Result<Vec<PlayInfo>, u16> {
    let mut infos = Vec::with_capacity(ask.streams.len());
    for &(shard, id, track) in &ask.streams {
        let title = ask.title.clone();
        let (start, until) = start_and_end(title, track as usize, ask.seek_ns, ask.end_ns)
            .await
            .ok_or(500u16)?;
        let (rate, queue) = (ask.rate, ask.queue);
        let played = title_streams::play(&server.engine, shard, id, start, until, rate, queue);
        infos.push(played.await.ok_or(454u16)?);
    }
    Ok(infos)
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

/// Where an engine stream stands on the title timeline now.
async fn position(server: &Server, shard: u64, id: u64) -> Option<u64> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reply = Box::new(move |at| {
        let _ = tx.send(at);
    });
    server.engine.send(shard, Command::Position { id, reply });
    rx.await.ok().flatten()
}

/// Sets a pause point at `ns` on each stream (shard, id, track): 457 when
/// it is not ahead of one, 500 when a lookup failed.
async fn pause_at(
    server: &Server,
    title: &Arc<Title>,
    streams: &[(u64, u64, u32)],
    ns: u64,
) -> Result<(), u16> {
    for &(shard, id, track) in streams {
        let title = title.clone();
        let packet = tokio::task::spawn_blocking(move || title.end_packet(track as usize, ns))
            .await
            .map_err(|_| 500u16)?;
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
        if !rx.await.unwrap_or(false) {
            return Err(457);
        }
    }
    Ok(())
}

/// Reads RTCP from a UDP client for as long as the stream lives; only the
/// client's own address counts.
async fn rtcp_reader(
    socket: tokio::net::UdpSocket,
    client: std::net::SocketAddr,
    core: Arc<CoreLock>,
    (session, engine_id): (crate::session::SessionId, u64),
) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            return;
        };
        if from.ip() != client.ip() {
            continue;
        }
        if let Ok(infos) = fjord_proto::rtcp::parse_compound(&buf[..n]) {
            let mut core = core.lock();
            if let Some(s) = core.sessions.get_mut(session) {
                s.on_rtcp(|st| st.engine_id == engine_id, &infos, Instant::now());
            }
        }
    }
}

//! PLAY of a unicast session: its Range, Scale and Speed, where each
//! stream starts and stops, and the reply's RTP-Info.

use std::sync::Arc;

use fjord_engine::{Command, Start, Title, Until};
use fjord_proto::rtsp::{
    framing::{Method, Request},
    range,
    response::Response,
    rtp_info,
    session::{State, next_state},
};

use super::{Client, PlayStart, Reply, multicast, refuse, session_for, session_header, status};
use crate::{
    Server, admission::Admission, metrics::Refusal, scale, session::Stream, title_streams,
};

pub(super) async fn answer(server: &Server, conn: &dyn Client, req: &Request) -> Reply {
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

//! RTCP with a publisher (RFC 3550 §6.4): its sender reports are read
//! (their time is echoed back; their NTP-to-RTP mapping, renumbered as its
//! packets are, goes to the engine threads with viewers of the stream,
//! whose sender reports carry it: [`fjord_engine::LiveSync`]), and every `rtcp_interval_s` it gets a
//! receiver report of each track: loss, highest sequence number and
//! jitter of its own numbering ([`fjord_live::reception`]). Over UDP a task
//! per track reads its RTCP port and sends ([`report`]; it ends with the
//! stream or its publisher); over TCP the reports are read from the
//! track's RTCP channel and written on it after a read of the publisher's
//! frames ([`due_interleaved`]).

use std::{
    net::{IpAddr, SocketAddr},
    sync::Weak,
    time::{Duration, Instant},
};

use fjord_live::reception::Reception;
use fjord_proto::rtcp::{RECEIVER_REPORT_MAX_LEN, RtcpInfo, parse_compound, write_receiver_report};

use fjord_engine::{Command, LiveSync};

use super::{State, Stream, TrackIn};
use crate::Server;

/// Reads track `track` of stream `id`'s RTCP from `socket` and reports to
/// the publisher at `to`, while `publisher` publishes it.
pub(super) async fn report(
    server: Weak<Server>,
    (id, track, publisher): (u64, usize, u64),
    socket: tokio::net::UdpSocket,
    to: SocketAddr,
) {
    let Some(interval) = server.upgrade().map(|s| s.config().rtcp_interval_s.max(1)) else {
        return;
    };
    let mut tick = tokio::time::interval(Duration::from_secs(interval));
    // The first tick is at once: nothing is received yet.
    tick.tick().await;
    let cname = format!("fjord@{}", socket.local_addr().map_or(to.ip(), |a| a.ip()));
    let ours = our_ssrc(id, track);
    let (mut buf, mut out) = (vec![0u8; 1500], [0u8; RECEIVER_REPORT_MAX_LEN]);
    loop {
        let block = tokio::select! {
            got = socket.recv_from(&mut buf) => {
                // An error is the ICMP of a report the publisher did not
                // take (its RTCP port closed): no reason to stop.
                let Ok((n, from)) = got else { continue };
                let Ok(reports) = parse_compound(&buf[..n]) else { continue };
                if from.ip() != to.ip() {
                    continue;
                }
                let Some(server) = server.upgrade() else { return };
                let mut state = server.live.lock();
                if reception(&mut state, (id, track, publisher)).is_none() {
                    return;
                }
                sender_reports(&server, &mut state, (id, track), reports);
                continue;
            }
            _ = tick.tick() => {
                let Some(server) = server.upgrade() else { return };
                let mut state = server.live.lock();
                let Some(r) = reception(&mut state, (id, track, publisher)) else { return };
                r.block(Instant::now())
            }
        };
        if let Some(block) = block {
            let n = write_receiver_report(&mut out, ours, &block, &cname);
            let _ = socket.send_to(&out[..n], to).await;
        }
    }
}

/// The SSRC fjord's reports on track `track` of stream `id` go out as:
/// any will do, the reports name the publisher's.
fn our_ssrc(id: u64, track: usize) -> u32 {
    (id as u32).wrapping_mul(0x9e37_79b9) ^ track as u32
}

/// Track `track` of stream `id`'s reception, while `publisher` publishes it.
fn reception(
    state: &mut State,
    (id, track, publisher): (u64, usize, u64),
) -> Option<&mut Reception> {
    let stream = state.streams.get_mut(&id)?;
    (stream.publisher == publisher).then_some(())?;
    stream.tracks.get_mut(track).map(|t| &mut t.reception)
}

/// An interleaved publisher's RTCP on track `track` of stream `id`
/// ([`sender_reports`]).
pub(super) fn read_interleaved(
    server: &Server,
    state: &mut State,
    (id, track): (u64, usize),
    payload: &[u8],
) {
    if let Ok(reports) = parse_compound(payload) {
        sender_reports(server, state, (id, track), reports);
    }
}

/// The publisher's RTCP `reports` on track `track` of stream `id`: a
/// sender report of the source its packets come from (or of any before
/// its first packet) is noted for the next receiver report and, once its
/// packets set the renumbering, is the track's mapping, handed to the
/// engine threads with viewers (a command per report: ordered with the
/// packets, no lock on the engine's side).
fn sender_reports(
    server: &Server,
    state: &mut State,
    (id, track): (u64, usize),
    reports: Vec<RtcpInfo>,
) {
    let Some(stream) = state.streams.get_mut(&id) else {
        return;
    };
    let now = Instant::now();
    for info in reports {
        let RtcpInfo::SenderReport {
            ssrc, ntp, rtp_ts, ..
        } = info
        else {
            continue;
        };
        let Some(t) = stream.tracks.get_mut(track) else {
            return;
        };
        // ffmpeg sends its first report just before its first packet:
        // a source not seen yet is taken at its word.
        let ours = t.reception.sender_report(ssrc, ntp, now);
        if !ours && t.reception.source().is_some() {
            continue;
        }
        match t.renumber.timestamp(rtp_ts) {
            Some(rtp) => set_sync(server, stream, track, LiveSync { ntp, rtp, at: now }),
            // A publisher continuing a held stream, before its first
            // packet sets its renumbering: kept for that packet.
            None => t.early_report = Some((ntp, rtp_ts, now)),
        }
    }
}

/// After a packet of track `track` of `stream`: the sender report its
/// publisher sent before its first packet, now that the renumbering is
/// set, is the track's mapping.
pub(super) fn early_report(server: &Server, stream: &mut Stream, track: usize) {
    let Some(t) = stream.tracks.get_mut(track) else {
        return;
    };
    let Some((ntp, rtp_ts, at)) = t.early_report.take() else {
        return;
    };
    if let Some(rtp) = t.renumber.timestamp(rtp_ts) {
        set_sync(server, stream, track, LiveSync { ntp, rtp, at });
    }
}

/// `sync` is track `track`'s mapping, handed to the engine threads with
/// viewers of `stream`.
fn set_sync(server: &Server, stream: &mut Stream, track: usize, sync: LiveSync) {
    let Some(t) = stream.tracks.get_mut(track) else {
        return;
    };
    if t.sync.is_none() {
        tracing::info!(
            path = stream.path,
            track,
            "live track's sender reports relayed"
        );
    }
    t.sync = Some(sync);
    for &thread in &stream.threads {
        let (feed, sync) = (t.feed, t.sync);
        server.engine.send(thread, Command::LiveSync { feed, sync });
    }
}

/// A new publisher continues `stream`: the last one's mappings are
/// forgotten, here and by the engine threads (whose viewers there now
/// then relay no more), until it sends its own.
pub(super) fn clear_syncs(server: &Server, stream: &mut Stream) {
    for t in &mut stream.tracks {
        t.early_report = None;
        if t.sync.take().is_none() {
            continue;
        }
        for &thread in &stream.threads {
            let feed = t.feed;
            server
                .engine
                .send(thread, Command::LiveSync { feed, sync: None });
        }
    }
}

/// Whether each of `tracks` of `stream` has a publisher's mapping now: a
/// viewer of them relays the reports only then
/// ([`fjord_engine::LiveViewer::relay`]).
pub(super) fn all_synced(stream: &Stream, mut tracks: impl Iterator<Item = usize>) -> bool {
    tracks.all(|i| stream.tracks.get(i).is_some_and(|t| t.sync.is_some()))
}

/// Track `t`'s mapping, if it has one, to the engine thread of `key`,
/// after a viewer of it was added there.
pub(super) fn share_sync(server: &Server, key: u64, t: &TrackIn) {
    if let Some(sync) = t.sync {
        let feed = t.feed;
        server.engine.send(
            key,
            Command::LiveSync {
                feed,
                sync: Some(sync),
            },
        );
    }
}

/// The receiver reports due at `now` to connection `conn`'s publisher
/// over TCP: a `$` frame on each track's RTCP channel every
/// `rtcp_interval_s`, the first an interval after the first call.
pub(super) fn due_interleaved(
    server: &Server,
    conn: u64,
    local: IpAddr,
    now: Instant,
) -> Vec<Vec<u8>> {
    let interval = Duration::from_secs(server.config().rtcp_interval_s.max(1));
    let mut state = server.live.lock();
    let mut frames = Vec::new();
    for (&id, s) in (state.streams.iter_mut()).filter(|(_, s)| s.conn == Some(conn)) {
        for (i, t) in s.tracks.iter_mut().enumerate() {
            let Some(channel) = t.channel else { continue };
            let due = *t.next_report.get_or_insert(now + interval);
            if now < due {
                continue;
            }
            t.next_report = Some(now + interval);
            let Some(block) = t.reception.block(now) else {
                continue;
            };
            let mut out = [0u8; RECEIVER_REPORT_MAX_LEN];
            let cname = format!("fjord@{local}");
            let n = write_receiver_report(&mut out, our_ssrc(id, i), &block, &cname);
            let mut frame = vec![b'$', channel.wrapping_add(1)];
            frame.extend_from_slice(&(n as u16).to_be_bytes());
            frame.extend_from_slice(&out[..n]);
            frames.push(frame);
        }
    }
    frames
}

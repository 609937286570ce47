//! A publisher's packets arriving: checked, renumbered when a publisher
//! continues a held stream (`fjord_live::handover`), kept once, handed to the
//! engine threads with viewers a receive batch at a time (one command per
//! thread per batch, not per packet). UDP ports are read by a task per
//! track, which takes what the socket holds, up to [`MAX_BATCH`] packets,
//! after each wake-up; interleaved frames come from the connection's task.

use std::{
    net::IpAddr,
    sync::{Arc, Weak},
    time::Instant,
};

use fjord_engine::{Command, LiveBatch, LivePacket};
use fjord_live::keyframe;

use super::State;
use crate::Server;

/// Most packets one receive batch takes: bounds the batch's memory and how
/// long its first packet waits for the last.
pub(super) const MAX_BATCH: usize = 64;

/// Takes one packet of track `track` of stream `id` into `batch`; false
/// when the stream is gone.
fn take(
    server: &Server,
    state: &mut State,
    (id, track): (u64, usize),
    bytes: &[u8],
    batch: &mut Vec<LivePacket>,
) -> bool {
    let Some(stream) = state.streams.get_mut(&id) else {
        return false;
    };
    let now = Instant::now();
    stream.last = now;
    if !stream.publish.is_recording() {
        return true;
    }
    let header = match fjord_live::rtp::parse(bytes, &stream.limits) {
        Ok(h) => h,
        Err(e) => {
            stream.refused += 1;
            if stream.refused.is_power_of_two() {
                tracing::debug!(path = stream.path, "publisher packet refused: {e}");
            }
            return true;
        }
    };
    let Some(t) = stream.tracks.get_mut(track) else {
        return true;
    };
    let raw = (header.ssrc, header.seq, header.timestamp);
    t.reception.packet(raw, t.clock_rate, now);
    let key = keyframe::starts_key(t.codec, &bytes[header.payload]);
    let numbered = (header.seq, header.timestamp);
    let (seq, ts) = t.renumber.map(numbered, now, t.clock_rate);
    t.loss.on(seq);
    // The one copy fjord keeps: every viewer's send borrows it.
    let packet: LivePacket = match t.renumber.shifts() {
        true => renumbered(bytes, seq, ts),
        false => Arc::from(bytes),
    };
    stream
        .ring
        .push(track, ts, key, bytes.len(), packet.clone());
    if let Some(r) = stream.recording.as_mut() {
        r.packet(&server.metrics, (track, key), &packet);
    }
    batch.push(packet);
    super::rtcp::early_report(server, stream, track);
    true
}

/// `bytes` (a checked RTP packet) with sequence number `seq` and timestamp
/// `ts`, made in the one copy kept.
fn renumbered(bytes: &[u8], seq: u16, ts: u32) -> LivePacket {
    let mut packet: LivePacket = Arc::from(bytes);
    // Just made, so held nowhere else: the header is patched in place.
    if let Some(head) = Arc::get_mut(&mut packet) {
        head[2..4].copy_from_slice(&seq.to_be_bytes());
        head[4..8].copy_from_slice(&ts.to_be_bytes());
    }
    packet
}

/// Hands `batch` (packets of track `track` of stream `id`) to each engine
/// thread with viewers of the stream, in one command each.
fn hand_out(
    server: &Server,
    state: &State,
    (id, track): (u64, usize),
    batch: &mut Vec<LivePacket>,
) {
    if batch.is_empty() {
        return;
    }
    let packets: LiveBatch = batch.drain(..).collect();
    let Some(stream) = state.streams.get(&id) else {
        return;
    };
    let Some(feed) = stream.tracks.get(track).map(|t| t.feed) else {
        return;
    };
    for &thread in &stream.threads {
        let packets = packets.clone();
        (server.engine).send(thread, Command::LivePackets { feed, packets });
    }
}

/// A `$` frame on `conn`: a publisher's RTP is taken (handed out with the
/// rest of the read, [`hand_out_interleaved`], or at [`MAX_BATCH`]), its
/// RTCP read for sender reports.
pub(super) fn interleaved(server: &Server, conn: u64, channel: u8, payload: &[u8]) -> bool {
    let mut state = server.live.lock();
    let found = state.streams.iter().find_map(|(id, s)| {
        (s.conn == Some(conn)).then_some(())?;
        s.tracks.iter().enumerate().find_map(|(i, t)| {
            let c = t.channel?;
            (channel == c || channel == c.wrapping_add(1)).then_some((*id, i, channel == c))
        })
    });
    match found {
        Some((id, track, true)) => {
            fn pending(s: &mut State, (id, track): (u64, usize)) -> Option<&mut Vec<LivePacket>> {
                let stream = s.streams.get_mut(&id)?;
                stream.tracks.get_mut(track).map(|t| &mut t.pending)
            }
            let mut batch = pending(&mut state, (id, track))
                .map(std::mem::take)
                .unwrap_or_default();
            take(server, &mut state, (id, track), payload, &mut batch);
            if batch.len() >= MAX_BATCH {
                hand_out(server, &state, (id, track), &mut batch);
            }
            if let Some(p) = pending(&mut state, (id, track)) {
                *p = batch;
            }
            true
        }
        Some((id, track, false)) => {
            super::rtcp::read_interleaved(server, &mut state, (id, track), payload);
            true
        }
        None => false,
    }
}

/// Hands out what connection `conn`'s publisher sent since the last time.
pub(super) fn hand_out_interleaved(server: &Server, conn: u64) {
    let mut state = server.live.lock();
    let ids: Vec<u64> = (state.streams.iter())
        .filter_map(|(&id, s)| (s.conn == Some(conn)).then_some(id))
        .collect();
    for id in ids {
        hand_out_pending(server, &mut state, id);
    }
}

/// Hands out what stream `id`'s interleaved publisher sent and is not yet
/// handed out. A viewer joining gets those packets in its backlog (the
/// ring has them), so they go first: handed out after, they would reach
/// it twice.
pub(super) fn hand_out_pending(server: &Server, state: &mut State, id: u64) {
    let Some(s) = state.streams.get_mut(&id) else {
        return;
    };
    let batches: Vec<_> = (s.tracks.iter_mut().enumerate())
        .filter(|(_, t)| !t.pending.is_empty())
        .map(|(track, t)| (track, std::mem::take(&mut t.pending)))
        .collect();
    for (track, mut batch) in batches {
        hand_out(server, state, (id, track), &mut batch);
    }
}

/// Reads track `track` of stream `id` from `socket` until the stream
/// ends or another publisher continues it, a batch per wake-up; packets
/// from any address but the publisher's are dropped.
pub(super) async fn receive(
    server: Weak<Server>,
    (id, track, publisher): (u64, usize, u64),
    socket: tokio::net::UdpSocket,
    from: IpAddr,
) {
    let mut buf = vec![0u8; 65_536];
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        if socket.readable().await.is_err() {
            return;
        }
        let Some(server) = server.upgrade() else {
            return;
        };
        let mut state = server.live.lock();
        if state
            .streams
            .get(&id)
            .is_none_or(|s| s.publisher != publisher)
        {
            return;
        }
        // What the socket holds now, without waiting; the lock is held for
        // the batch so a viewer joins between batches, never inside one.
        for _ in 0..MAX_BATCH {
            let (n, src) = match socket.try_recv_from(&mut buf) {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            };
            if src.ip() == from && !take(&server, &mut state, (id, track), &buf[..n], &mut batch) {
                return;
            }
        }
        hand_out(&server, &state, (id, track), &mut batch);
    }
}

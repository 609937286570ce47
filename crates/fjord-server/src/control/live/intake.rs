//! A publisher's packets arriving: checked, kept once, handed to the
//! engine threads with viewers. UDP ports are read by a task per track;
//! interleaved frames come from the connection's task.

use std::{
    net::IpAddr,
    sync::{Arc, Weak},
    time::Instant,
};

use fjord_engine::{Command, LivePacket};
use fjord_live::keyframe;

use super::State;
use crate::Server;

/// Takes one packet of track `track` of stream `id`; false when the
/// stream is gone.
fn take(server: &Server, state: &mut State, (id, track): (u64, usize), bytes: &[u8]) -> bool {
    let Some(stream) = state.streams.get_mut(&id) else {
        return false;
    };
    stream.last = Instant::now();
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
    let key = keyframe::starts_key(t.codec, &bytes[header.payload]);
    t.last = Some((header.seq, header.timestamp));
    let feed = t.feed;
    // The one copy fjord keeps: every viewer's send borrows it.
    let packet: LivePacket = Arc::from(bytes);
    stream
        .ring
        .push(track, header.timestamp, key, bytes.len(), packet.clone());
    for &thread in &stream.threads {
        let packet = packet.clone();
        server
            .engine
            .send(thread, Command::LivePacket { feed, packet });
    }
    true
}

/// A `$` frame on `conn`: a publisher's RTP is taken, its RTCP dropped.
pub(super) fn interleaved(server: &Server, conn: u64, channel: u8, payload: &[u8]) -> bool {
    let mut state = server.live.lock();
    let found = state.streams.iter().find_map(|(id, s)| {
        (s.conn == conn).then_some(())?;
        s.tracks.iter().enumerate().find_map(|(i, t)| {
            let c = t.channel?;
            (channel == c || channel == c.wrapping_add(1)).then_some((*id, i, channel == c))
        })
    });
    match found {
        Some((id, track, true)) => {
            take(server, &mut state, (id, track), payload);
            true
        }
        Some((_, _, false)) => true,
        None => false,
    }
}

/// Reads track `track` of stream `id` from `socket` until the stream
/// ends; packets from any address but the publisher's are dropped.
pub(super) async fn receive(
    server: Weak<Server>,
    (id, track): (u64, usize),
    socket: tokio::net::UdpSocket,
    from: IpAddr,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, src)) = socket.recv_from(&mut buf).await else {
            return;
        };
        if src.ip() != from {
            continue;
        }
        let Some(server) = server.upgrade() else {
            return;
        };
        let mut state = server.live.lock();
        if !take(&server, &mut state, (id, track), &buf[..n]) {
            return;
        }
    }
}

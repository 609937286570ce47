//! RTCP with a UDP publisher (RFC 3550 §6.4): on a track's RTCP port its
//! sender reports are read (their time is echoed back), and every
//! `rtcp_interval_s` it gets a receiver report of that track: loss,
//! highest sequence number and jitter of its own numbering
//! ([`fjord_live::reception`]). Ends with the stream or its publisher.

use std::{
    net::SocketAddr,
    sync::Weak,
    time::{Duration, Instant},
};

use fjord_live::reception::Reception;
use fjord_proto::rtcp::{RECEIVER_REPORT_MAX_LEN, RtcpInfo, parse_compound, write_receiver_report};

use super::State;
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
    // Any SSRC of ours will do: reports name the publisher's.
    let ours = (id as u32).wrapping_mul(0x9e37_79b9) ^ track as u32;
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
                let Some(r) = reception(&mut state, (id, track, publisher)) else { return };
                for info in reports {
                    if let RtcpInfo::SenderReport { ssrc, ntp, .. } = info {
                        r.sender_report(ssrc, ntp, Instant::now());
                    }
                }
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

/// Track `track` of stream `id`'s reception, while `publisher` publishes it.
fn reception(
    state: &mut State,
    (id, track, publisher): (u64, usize, u64),
) -> Option<&mut Reception> {
    let stream = state.streams.get_mut(&id)?;
    (stream.publisher == publisher).then_some(())?;
    stream.tracks.get_mut(track).map(|t| &mut t.reception)
}

//! What the control plane asks of a title's streams: what one costs (its
//! packet rate, bytes per packet: admission and the storage layer reserve
//! by them), the payload type of its repair stream, and positioning one in
//! the engine. Used by unicast, multicast and broadcast sessions alike.

use fjord_engine::{Command, Engine, PlayInfo, Start, Title, Until};

use crate::scale;

/// The lowest dynamic payload type no track of the title uses (repair
/// streams have their own SSRC and `m=` line, so they share it).
pub(crate) fn repair_payload_type(title: &Title) -> u8 {
    (96..=127)
        .find(|pt| title.index().tracks().all(|t| t.payload_type() != *pt))
        .unwrap_or(127)
}

/// Packets per second of `track` played in real time.
pub(crate) fn track_pps(title: &Title, track: usize) -> u64 {
    let index = title.index();
    match index.duration_ns() {
        0 => 0,
        d => {
            (index.track(track).map_or(0, |t| t.packet_count() as u64) * 1_000_000_000).div_ceil(d)
        }
    }
}

/// Bytes per packet over the whole title (its media file's size over all
/// its packets): enough to turn a stream's packet rate into disk bandwidth.
pub(crate) fn average_packet_bytes(title: &Title) -> u64 {
    let packets: u64 = title
        .index()
        .tracks()
        .map(|t| t.packet_count() as u64)
        .sum();
    title.index().source().size / packets.max(1)
}

/// Positions an engine stream and waits for where it will start.
pub(crate) async fn play(
    engine: &Engine,
    shard: u64,
    id: u64,
    start: Start,
    until: Until,
    rate: scale::Rate,
    queue: bool,
) -> Option<PlayInfo> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    engine.send(
        shard,
        Command::Play {
            id,
            start,
            until,
            scale: rate.scale,
            speed: rate.speed,
            queue,
            reply: Box::new(move |info| {
                let _ = tx.send(info);
            }),
        },
    );
    rx.await.ok().flatten()
}

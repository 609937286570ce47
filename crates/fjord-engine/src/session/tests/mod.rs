//! Unit tests of a session, driven one tick at a time without an engine
//! thread: the helpers here build titles, sessions and ticks; the tests are
//! by concern in the files below.

use std::{collections::HashMap, net::UdpSocket, os::fd::OwnedFd, time::Duration};

use fjord_media::{
    index::{self, Index},
    no_parity,
    plan::PacketRecord,
    synthetic::{write_constant_rate, write_video_track},
};
use fjord_proto::{
    rtcp::{RtcpInfo, parse_compound},
    rtp,
};

use super::{
    pacing::{BYE_DELAY, RETRY},
    *,
};
use crate::{
    Start, ThreadStats, Until,
    datapath::{Batch, Packet},
    lateness::TickStart,
};

mod pacing;
mod play;
mod repair;

const MS: u64 = 1_000_000;

/// Ten 188-byte packets, one every 10 ms, each filled with its number.
fn title(dir: &std::path::Path) -> Arc<Title> {
    let media = dir.join("t.ts");
    let index = write_constant_rate(&media, 188, 10 * MS, 10, &no_parity).unwrap();
    Arc::new(Title::new(index, &media).unwrap())
}

fn udp() -> socket2::Socket {
    socket2::Socket::from(UdpSocket::bind("127.0.0.1:0").unwrap())
}

fn session_with(title: Arc<Title>, output: Output) -> Session {
    Session::new(
        SessionSpec {
            id: 1,
            title,
            track: 0,
            ssrc: 0x1234,
            seq0: 65534,
            ts0: u32::MAX - 100,
            output,
        },
        "test",
    )
}

fn session(title: Arc<Title>, client_rtcp: &UdpSocket) -> Session {
    session_with(
        title,
        Output::Udp {
            rtp: udp().into(),
            rtp_peer: "127.0.0.1:9".parse().unwrap(),
            rtcp: udp().into(),
            rtcp_peer: client_rtcp.local_addr().unwrap(),
        },
    )
}

/// Twelve packets in the elementary-stream shape, one every 10 ms:
/// payload-header bytes of 0 to 8 bytes, runs at odd and even offsets,
/// every third packet split in two runs. Returns the title and each
/// packet's RTP payload as it must arrive.
fn prefixed_title(dir: &std::path::Path) -> (Arc<Title>, Vec<Vec<u8>>) {
    let media = dir.join("t.h264");
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let mut packets = vec![];
    let mut expected = vec![];
    let mut offset = 1;
    for i in 0..12u32 {
        let prefix: Vec<u8> = (0..(i % 9) as u8).map(|k| 0xf0 | k).collect();
        let (skip, len2) = if i % 3 == 2 { (7, 150 + i) } else { (0, 0) };
        let rec = PacketRecord {
            skip,
            len2,
            ..PacketRecord::file_run(u64::from(i) * 10 * MS, i * 900, offset, 300 + i)
                .with_prefix(&prefix)
        };
        let run1 = &data[rec.offset as usize..][..rec.len as usize];
        let run2 = &data[rec.offset2() as usize..][..len2 as usize];
        expected.push([&prefix[..], run1, run2].concat());
        offset = rec.file_end() + u64::from(i % 2);
        packets.push(rec);
    }
    let index = write_video_track(&media, &data, packets, 120 * MS).unwrap();
    (Arc::new(Title::new(index, &media).unwrap()), expected)
}

/// [`prefixed_title`] with its packet file.
fn prefabricated_title(dir: &std::path::Path) -> (Arc<Title>, Vec<Vec<u8>>) {
    let (_, expected) = prefixed_title(dir);
    let media = dir.join("t.h264");
    fjord_media::prefab::prefabricate(&media, &mut |_, _| {}).unwrap();
    let index = Index::open(&index::index_path_for(&media)).unwrap();
    let mut title = Title::new(index, &media).unwrap();
    let prefab = fjord_media::prefab::prefab_path_for(&media);
    title.attach_prefab(&prefab, index::Check::Now).unwrap();
    (Arc::new(title), expected)
}

/// (sequence number, RTP timestamp, payload) of a packet that left.
type Sent = (u16, u32, Vec<u8>);

fn sent_packet(p: &Packet<'_>) -> Sent {
    let b = p.parts().collect::<Vec<_>>().concat();
    (
        u16::from_be_bytes([b[2], b[3]]),
        u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        b[rtp::RTP_HEADER_LEN..].to_vec(),
    )
}

/// One engine tick for one session with a data path that sends `room`
/// packets at most; returns (seq, ts, payload) of what left, and the wake.
fn tick(s: &mut Session, now: Instant, room: usize) -> (Vec<Sent>, Option<Instant>) {
    tick_counted(s, now, room, &mut ThreadStats::default())
}

/// [`tick`], counting into `stats`.
fn tick_counted(
    s: &mut Session,
    now: Instant,
    room: usize,
    stats: &mut ThreadStats,
) -> (Vec<Sent>, Option<Instant>) {
    let mut batch = Batch::default();
    let planned = s.collect(now, Duration::from_millis(15), true, &mut batch);
    let sent = (planned.source + planned.repair).min(room);
    let out = batch.packets[..sent].iter().map(sent_packet).collect();
    drop(batch);
    let mut connections = HashMap::new();
    let mut p = Pacing {
        now,
        start: TickStart::default(),
        sent_at: now,
        stats,
        burst: Duration::from_millis(15),
        rtcp_interval: Duration::from_secs(5),
        connections: &mut connections,
    };
    let sent = Planned {
        source: sent.min(planned.source),
        repair: sent.min(planned.repair),
    };
    (out, s.advance(planned, sent, &mut p))
}

//! Live streams: packets a publisher sent, held once by the control plane
//! (reference-counted), sent by an engine thread to each of its viewers of
//! the track. Per viewer only the 12-byte RTP header is rewritten
//! (sequence number, timestamp and SSRC shifted by the viewer's offsets);
//! the rest of the packet leaves by reference. A viewer gets the packets
//! since the stream's last key frame first ([`LiveViewer::backlog`]), then
//! each new one as it arrives: the publisher paces the stream.
//!
//! An interleaved viewer whose connection is full has the frame queued
//! (copied once, within the connection's bound) rather than lost: a TCP
//! viewer gets every packet or is dropped as stalled.

use std::{
    collections::HashMap,
    io::IoSlice,
    net::SocketAddr,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use fjord_proto::rtcp::{NtpTime, SENDER_REPORT_MAX_LEN, sender_report};

use crate::{
    Output,
    command::{LivePacket, LiveViewer, ThreadStats},
    interleaved::Connection,
};

/// An engine thread's live viewers, by feed.
#[derive(Default)]
pub(crate) struct Live {
    feeds: HashMap<u64, Vec<LiveViewer>>,
}

/// Where a packet is sent and what the thread counts.
pub(crate) struct Sink<'a> {
    pub connections: &'a mut HashMap<u64, Connection>,
    pub stats: &'a mut ThreadStats,
    pub cname: &'a str,
}

impl Live {
    pub(crate) fn add(&mut self, viewer: LiveViewer, sink: &mut Sink<'_>) {
        let feed = viewer.feed;
        let viewers = self.feeds.entry(feed).or_default();
        viewers.push(viewer);
        if let Some(v) = viewers.last_mut().filter(|v| v.started) {
            v.started = false;
            start(v, sink);
        }
    }

    /// Starts viewer `id`: what waited for it leaves, then what arrives.
    /// False if no live viewer has that id (it is a VOD session's).
    pub(crate) fn start(&mut self, id: u64, sink: &mut Sink<'_>) -> bool {
        let found = (self.feeds.values_mut().flat_map(|v| v.iter_mut())).find(|v| v.id == id);
        match found {
            Some(v) if !v.started => {
                start(v, sink);
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// A packet of `feed`, to every viewer of it on this thread.
    pub(crate) fn packet(&mut self, feed: u64, packet: &LivePacket, sink: &mut Sink<'_>) {
        if let Some(viewers) = self.feeds.get_mut(&feed) {
            for v in viewers {
                match v.started {
                    true => send(v, packet, sink),
                    false => v.backlog.push(packet.clone()),
                }
            }
        }
    }

    pub(crate) fn remove(&mut self, id: u64) {
        for viewers in self.feeds.values_mut() {
            viewers.retain(|v| v.id != id);
        }
        self.feeds.retain(|_, v| !v.is_empty());
    }

    /// The stream ended: each viewer gets RTCP BYE and is forgotten.
    pub(crate) fn end(&mut self, feed: u64, sink: &mut Sink<'_>) {
        for v in self.feeds.remove(&feed).unwrap_or_default() {
            bye(&v, sink);
        }
    }

    /// A connection closed: its interleaved viewers go.
    pub(crate) fn detach(&mut self, conn: u64) {
        for viewers in self.feeds.values_mut() {
            viewers
                .retain(|v| !matches!(v.output, Output::Interleaved { conn: c, .. } if c == conn));
        }
        self.feeds.retain(|_, v| !v.is_empty());
    }

    pub(crate) fn viewers(&self) -> usize {
        self.feeds.values().map(Vec::len).sum()
    }
}

fn start(v: &mut LiveViewer, sink: &mut Sink<'_>) {
    for p in std::mem::take(&mut v.backlog) {
        send(v, &p, sink);
    }
    v.started = true;
}

/// The publisher's header with the viewer's numbering.
fn header(v: &LiveViewer, packet: &[u8]) -> Option<[u8; 12]> {
    let mut h: [u8; 12] = packet.get(..12)?.try_into().ok()?;
    let seq = u16::from_be_bytes([h[2], h[3]]).wrapping_add(v.seq_delta);
    let ts = u32::from_be_bytes([h[4], h[5], h[6], h[7]]).wrapping_add(v.ts_delta);
    h[2..4].copy_from_slice(&seq.to_be_bytes());
    h[4..8].copy_from_slice(&ts.to_be_bytes());
    h[8..12].copy_from_slice(&v.ssrc.to_be_bytes());
    Some(h)
}

fn send(v: &LiveViewer, packet: &LivePacket, sink: &mut Sink<'_>) {
    let Some(head) = header(v, packet) else {
        return;
    };
    let body = &packet[12..];
    let sent = match &v.output {
        Output::Udp { rtp, rtp_peer, .. } => udp(rtp.socket(), *rtp_peer, &[&head, body]),
        Output::Interleaved {
            conn, rtp_channel, ..
        } => (sink.connections.get_mut(conn))
            .is_some_and(|c| c.send_or_queue(*rtp_channel, [&head, body, &[]], Instant::now())),
    };
    if sent {
        sink.stats.packets += 1;
        sink.stats.bytes += body.len() as u64;
    }
}

fn udp(socket: &socket2::Socket, peer: SocketAddr, parts: &[&[u8]; 2]) -> bool {
    let iov = [IoSlice::new(parts[0]), IoSlice::new(parts[1])];
    socket.send_to_vectored(&iov, &peer.into()).is_ok()
}

fn bye(v: &LiveViewer, sink: &mut Sink<'_>) {
    let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let n = sender_report(
        &mut buf,
        v.ssrc,
        NtpTime::from_unix(now),
        0,
        0,
        0,
        sink.cname,
        true,
    );
    let report = &buf[..n];
    match &v.output {
        Output::Udp {
            rtcp, rtcp_peer, ..
        } => {
            let _ = rtcp.socket().send_to(report, &(*rtcp_peer).into());
        }
        Output::Interleaved {
            conn, rtcp_channel, ..
        } => {
            if let Some(c) = sink.connections.get_mut(conn) {
                c.send_or_queue(*rtcp_channel, [&[], report, &[]], Instant::now());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_rewritten_and_the_payload_left_alone() {
        let (a, b) = (
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap(),
            std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        a.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let peer = b.local_addr().unwrap();
        let rtcp = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        let packet: LivePacket =
            vec![0x80, 96, 0xff, 0xff, 0, 0, 0, 10, 1, 2, 3, 4, 0x65, 9, 9].into();
        let viewer = LiveViewer {
            id: 1,
            feed: 7,
            ssrc: 0xdead_beef,
            seq_delta: 2,
            ts_delta: 5,
            output: Output::Udp {
                rtp: a.into(),
                rtp_peer: peer,
                rtcp: rtcp.into(),
                rtcp_peer: peer,
            },
            backlog: vec![packet.clone()],
            started: false,
        };
        let (mut connections, mut stats) = (HashMap::new(), ThreadStats::default());
        let mut sink = Sink {
            connections: &mut connections,
            stats: &mut stats,
            cname: "fjord",
        };
        let mut live = Live::default();
        live.add(viewer, &mut sink);
        live.packet(7, &packet, &mut sink);
        live.packet(8, &packet, &mut sink);
        assert!(
            b.set_nonblocking(true).is_ok() && b.recv(&mut [0; 64]).is_err(),
            "not started"
        );
        b.set_nonblocking(false).unwrap();
        assert!(live.start(1, &mut sink) && !live.start(2, &mut sink));
        assert_eq!(live.viewers(), 1);
        let mut buf = [0u8; 64];
        for _ in 0..2 {
            let n = b.recv(&mut buf).unwrap();
            assert_eq!(
                &buf[..n],
                &[
                    0x80, 96, 0, 1, 0, 0, 0, 15, 0xde, 0xad, 0xbe, 0xef, 0x65, 9, 9
                ]
            );
        }
        assert_eq!(stats.packets, 2);
        live.remove(1);
        assert_eq!(live.viewers(), 0);
    }
}

//! A session as an engine thread owns it: a position in a track, a clock that
//! maps index send times to wall time, and the RTP/RTCP counters.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use fjord_media::{index::Track, ts::FLAG_MARKER};
use fjord_proto::{
    rtcp::{self, NtpTime},
    rtp,
};

use crate::{
    PlayInfo, Start, Title,
    command::{Output, SessionSpec},
    datapath::DataPath,
    interleaved::{Connection, FrameResult},
};

/// After the last packet, wait this long before RTCP BYE so the client has
/// read the final packets before it learns the stream ended.
const BYE_DELAY: Duration = Duration::from_millis(500);
/// Room for SR + SDES + BYE.
const RTCP_BUF: usize = 256;

enum State {
    /// Set up, paused, or positioned by PLAY and waiting for `Start`.
    Stopped,
    /// Packet `origin` is due at wall time `t0`.
    Playing { t0: Instant, origin_ns: u64 },
    /// Past the last packet; BYE sent.
    Ended,
}

pub(crate) struct Session {
    title: Arc<Title>,
    track: usize,
    ssrc: u32,
    ts0: u32,
    output: Output,
    next: u32,
    seq: u16,
    packets: u32,
    octets: u32,
    state: State,
    next_report: Instant,
}

pub(crate) struct Pacing<'a> {
    pub now: Instant,
    pub burst: Duration,
    pub rtcp_interval: Duration,
    pub cname: &'a str,
    pub connections: &'a mut HashMap<u64, Connection>,
}

impl Session {
    pub(crate) fn new(spec: SessionSpec) -> Self {
        Self {
            title: spec.title,
            track: spec.track,
            ssrc: spec.ssrc,
            ts0: spec.ts0,
            output: spec.output,
            next: 0,
            seq: spec.seq0,
            packets: 0,
            octets: 0,
            state: State::Stopped,
            next_report: Instant::now(),
        }
    }

    pub(crate) fn connection(&self) -> Option<u64> {
        match self.output {
            Output::Interleaved { conn, .. } => Some(conn),
            Output::Udp { .. } => None,
        }
    }

    fn track(&self) -> Option<Track<'_>> {
        self.title.index().track(self.track)
    }

    fn count(&self) -> u32 {
        self.track().map_or(0, |t| t.packet_count() as u32)
    }

    /// Media time and RTP timestamp of packet `i`; one past the end maps to
    /// the title's duration.
    fn media_time(&self, i: u32) -> (u64, u32) {
        let track = self.track();
        match track.and_then(|t| t.packet(i as usize)) {
            Some(rec) => (rec.send_time_ns, rec.rtp_ts),
            None => {
                let ns = self.title.index().duration_ns();
                let clock = track.map_or(90_000, |t| t.clock_rate());
                (ns, ns_to_ticks(ns, clock) as u32)
            }
        }
    }

    pub(crate) fn play(&mut self, start: Start) -> PlayInfo {
        if let Start::Packet(p) = start {
            self.next = p.min(self.count());
        }
        self.state = State::Stopped;
        let (time_ns, rtp_ts) = self.media_time(self.next);
        PlayInfo {
            packet: self.next,
            seq: self.seq,
            rtptime: self.ts0.wrapping_add(rtp_ts),
            time_ns,
        }
    }

    pub(crate) fn start(&mut self, now: Instant) {
        let (origin_ns, _) = self.media_time(self.next);
        self.state = State::Playing { t0: now, origin_ns };
        self.next_report = now;
    }

    pub(crate) fn pause(&mut self) {
        if matches!(self.state, State::Playing { .. }) {
            self.state = State::Stopped;
        }
    }

    /// Sends every packet due by `now + burst`; returns when to come back.
    pub(crate) fn pump(&mut self, p: &mut Pacing, path: &mut impl DataPath) -> Option<Instant> {
        let State::Playing { t0, origin_ns } = self.state else {
            return None;
        };
        let due = |ns: u64| t0 + Duration::from_nanos(ns.saturating_sub(origin_ns));
        let horizon = p.now + p.burst;
        let title = self.title.clone();
        let Some(track) = title.index().track(self.track) else {
            self.state = State::Ended;
            return None;
        };
        let count = track.packet_count() as u32;
        let pt = track.payload_type();
        let mut header = [0u8; rtp::RTP_HEADER_LEN];
        let mut wake = None;
        while let Some(rec) = track.packet(self.next as usize) {
            let at = due(rec.send_time_ns);
            if at > horizon {
                wake = Some(at);
                break;
            }
            let Some(payload) = title.payload(&rec) else {
                tracing::warn!(
                    ssrc = self.ssrc,
                    "media file shrank under a playing session; stopping it"
                );
                self.state = State::Ended;
                return None;
            };
            let ts = self.ts0.wrapping_add(rec.rtp_ts);
            let marker = rec.flags & FLAG_MARKER != 0;
            rtp::write_header(&mut header, pt, marker, self.seq, ts, self.ssrc);
            if !self.send(p, path, &header, payload) {
                wake = Some(p.now + Duration::from_millis(1));
                break;
            }
            self.next += 1;
            self.seq = self.seq.wrapping_add(1);
            self.packets = self.packets.wrapping_add(1);
            self.octets = self.octets.wrapping_add(payload.len() as u32);
        }
        if self.next >= count {
            let (last_ns, _) = self.media_time(count.saturating_sub(1));
            let bye_at = due(last_ns) + BYE_DELAY;
            if p.now >= bye_at {
                self.report(p, true);
                self.state = State::Ended;
                return None;
            }
            wake = Some(bye_at);
        }
        if p.now >= self.next_report && self.packets > 0 {
            self.report(p, false);
            self.next_report = p.now + p.rtcp_interval;
        }
        wake.map(|w| w.min(self.next_report.max(p.now)))
    }

    /// True when the packet left (or was lost to the network, as UDP may);
    /// false when the output is full and the packet must wait.
    fn send(
        &mut self,
        p: &mut Pacing,
        path: &mut impl DataPath,
        header: &[u8],
        payload: &[u8],
    ) -> bool {
        match &self.output {
            Output::Udp { rtp, .. } => {
                if let Err(e) = path.send_datagram(rtp, header, payload) {
                    if e.kind() == std::io::ErrorKind::WouldBlock {
                        return false;
                    }
                    // ICMP errors (client gone) surface here; the session
                    // timeout reclaims a client that never comes back.
                    tracing::debug!(ssrc = self.ssrc, "rtp send: {e}");
                }
                true
            }
            Output::Interleaved {
                conn, rtp_channel, ..
            } => match p.connections.get_mut(conn) {
                Some(c) => match c.send_frame(*rtp_channel, header, payload) {
                    FrameResult::Sent | FrameResult::Broken => true,
                    FrameResult::Blocked => false,
                },
                None => true,
            },
        }
    }

    /// RTCP sender report (RFC 3550 §6.4.1): the wall clock now against the
    /// RTP timestamp the stream's clock has now, so players can sync tracks.
    fn report(&mut self, p: &mut Pacing, bye: bool) {
        let State::Playing { t0, origin_ns } = self.state else {
            return;
        };
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        let media_ns = origin_ns + p.now.saturating_duration_since(t0).as_nanos() as u64;
        let rtp_now = self.ts0.wrapping_add(ns_to_ticks(media_ns, clock) as u32);
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut buf = [0u8; RTCP_BUF];
        let len = rtcp::sender_report(
            &mut buf,
            self.ssrc,
            NtpTime::from_unix(wall),
            rtp_now,
            self.packets,
            self.octets,
            p.cname,
            bye,
        );
        let Some(bytes) = buf.get(..len) else { return };
        match &self.output {
            Output::Udp {
                rtcp, rtcp_peer, ..
            } => {
                let _ = rtcp.send_to(bytes, &(*rtcp_peer).into());
            }
            Output::Interleaved {
                conn, rtcp_channel, ..
            } => {
                if let Some(c) = p.connections.get_mut(conn) {
                    let _ = c.send_frame(*rtcp_channel, bytes, &[]);
                }
            }
        }
    }
}

fn ns_to_ticks(ns: u64, clock_rate: u32) -> u64 {
    (ns as u128 * clock_rate as u128 / 1_000_000_000) as u64
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use fjord_media::{
        index::{self, Index, SourceId, TrackDesc},
        ts::{IngestReport, PacketRecord, Packetization, SyncPoint, TimingSource},
    };
    use fjord_proto::rtcp::{RtcpInfo, parse_compound};

    use super::*;
    use crate::datapath::DataPath;

    const MS: u64 = 1_000_000;

    /// Records what the engine would send instead of sending it.
    #[derive(Default)]
    struct Recorder(Vec<(u16, u32, Vec<u8>)>);

    impl DataPath for Recorder {
        fn send_datagram(
            &mut self,
            _: &socket2::Socket,
            header: &[u8],
            payload: &[u8],
        ) -> std::io::Result<()> {
            let seq = u16::from_be_bytes([header[2], header[3]]);
            let ts = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
            self.0.push((seq, ts, payload.to_vec()));
            Ok(())
        }
    }

    /// Ten 188-byte packets, one every 10 ms, each filled with its number.
    fn title(dir: &std::path::Path) -> Arc<Title> {
        let media = dir.join("t.ts");
        let data: Vec<u8> = (0..10u8).flat_map(|i| [i; 188]).collect();
        std::fs::write(&media, &data).unwrap();
        let packets = (0..10u64)
            .map(|i| PacketRecord {
                send_time_ns: i * 10 * MS,
                rtp_ts: (i * 900) as u32,
                offset: i * 188,
                len: 188,
                flags: 0,
            })
            .collect();
        let p = Packetization {
            packets,
            sync: vec![SyncPoint {
                packet: 0,
                time_ns: 0,
            }],
            duration_ns: 100 * MS,
            ts_per_rtp: 1,
            report: IngestReport {
                ts_packets: 10,
                rtp_packets: 10,
                resyncs: 0,
                skipped_bytes: 0,
                truncated_tail_bytes: 0,
                pcr_count: 2,
                timing: TimingSource::Pcr,
                warnings: vec![],
                bitrate_bps: 150_400,
            },
        };
        let meta = std::fs::metadata(&media).unwrap();
        let idx = dir.join("t.ts.fjidx");
        index::write(&idx, &p, &SourceId::of(&data, &meta), &TrackDesc::mpeg_ts()).unwrap();
        Arc::new(Title::new(Index::open(&idx).unwrap(), &media).unwrap())
    }

    fn session(title: Arc<Title>, client_rtcp: &UdpSocket) -> Session {
        let udp = || socket2::Socket::from(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
        Session::new(SessionSpec {
            id: 1,
            title,
            track: 0,
            ssrc: 0x1234,
            seq0: 65534,
            ts0: u32::MAX - 100,
            output: Output::Udp {
                rtp: udp(),
                rtcp: udp(),
                rtcp_peer: client_rtcp.local_addr().unwrap(),
            },
        })
    }

    fn pump(s: &mut Session, path: &mut Recorder, now: Instant) -> Option<Instant> {
        let mut connections = HashMap::new();
        let mut p = Pacing {
            now,
            burst: Duration::from_millis(15),
            rtcp_interval: Duration::from_secs(5),
            cname: "test",
            connections: &mut connections,
        };
        s.pump(&mut p, path)
    }

    #[test]
    fn packets_leave_on_schedule_within_the_burst_limit() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let mut path = Recorder::default();
        let info = s.play(Start::Resume);
        assert_eq!(
            (info.packet, info.seq, info.rtptime),
            (0, 65534, u32::MAX - 100)
        );

        let t0 = Instant::now();
        s.start(t0);
        let wake = pump(&mut s, &mut path, t0);
        // Due at 0 and 10 ms: inside the 15 ms burst; 20 ms is not.
        assert_eq!(path.0.len(), 2);
        assert_eq!(wake, Some(t0 + Duration::from_millis(20)));
        assert_eq!(
            pump(&mut s, &mut path, t0 + Duration::from_millis(20)),
            Some(t0 + Duration::from_millis(40))
        );
        let seqs: Vec<u16> = path.0.iter().map(|p| p.0).collect();
        assert_eq!(seqs, [65534, 65535, 0, 1], "sequence numbers wrap");
        assert_eq!(
            path.0[2].1,
            (u32::MAX - 100).wrapping_add(1800),
            "timestamps wrap"
        );
        assert!(
            path.0
                .iter()
                .enumerate()
                .all(|(i, p)| p.2 == vec![i as u8; 188])
        );
    }

    #[test]
    fn pause_resume_and_seek_continue_the_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let mut path = Recorder::default();
        s.play(Start::Resume);
        let t0 = Instant::now();
        s.start(t0);
        pump(&mut s, &mut path, t0);
        s.pause();
        assert_eq!(pump(&mut s, &mut path, t0 + Duration::from_secs(1)), None);
        assert_eq!(path.0.len(), 2);

        let info = s.play(Start::Resume);
        assert_eq!((info.packet, info.seq, info.time_ns), (2, 0, 20 * MS));
        let t1 = t0 + Duration::from_secs(2);
        s.start(t1);
        pump(&mut s, &mut path, t1);
        assert_eq!(
            path.0[2],
            (0, (u32::MAX - 100).wrapping_add(1800), vec![2; 188])
        );

        let info = s.play(Start::Packet(8));
        assert_eq!((info.packet, info.seq), (8, 2));
        assert_eq!(info.rtptime, (u32::MAX - 100).wrapping_add(8 * 900));
        s.start(t1);
        pump(&mut s, &mut path, t1);
        assert_eq!(path.0.last().unwrap().2, vec![9; 188]);
    }

    #[test]
    fn end_of_stream_sends_a_sender_report_with_bye() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let mut path = Recorder::default();
        s.play(Start::Resume);
        let t0 = Instant::now();
        s.start(t0);
        let wake = pump(&mut s, &mut path, t0 + Duration::from_millis(90)).unwrap();
        assert_eq!(path.0.len(), 10);
        assert_eq!(wake, t0 + Duration::from_millis(90) + BYE_DELAY);
        let mut buf = [0u8; 512];
        let n = rtcp.recv(&mut buf).unwrap();
        let first = parse_compound(&buf[..n]).unwrap();
        assert!(matches!(
            first[0],
            RtcpInfo::SenderReport {
                packets: 10,
                octets: 1880,
                ..
            }
        ));
        assert_eq!(pump(&mut s, &mut path, wake), None);
        let n = rtcp.recv(&mut buf).unwrap();
        let last = parse_compound(&buf[..n]).unwrap();
        assert!(last.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })));
    }
}

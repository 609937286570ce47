//! Live streams: packets a publisher sent, held once by the control plane
//! (reference-counted), sent by an engine thread to each of its viewers of
//! the track. Per viewer only the 12-byte RTP header is rewritten
//! (sequence number, timestamp and SSRC shifted by the viewer's offsets);
//! the rest of the packet leaves by reference. A viewer gets the packets
//! since the stream's last key frame first ([`LiveViewer::backlog`]), then
//! each new one as it arrives: the publisher paces the stream. A viewer
//! whose output is a multicast group's sockets is the whole group's: one
//! send per packet for all its members. [`Command::Bye`] of a viewer's id
//! ends it with RTCP BYE (a group's last member left).
//!
//! Packets arrive in batches ([`Command::LivePackets`], one per receive
//! batch of a publisher's track) and wait in `pending` [`GATHER`] after the
//! first came (none when [`FLUSH_AT`] packets wait, a viewer is added or
//! the stream ends); one flush then sends them all: each UDP viewer gets one burst (its backlog, then the
//! new packets of its feed) in the thread's [`Batch`], through its
//! [`DataPath`] as VOD packets go (GSO or `sendmmsg`: a system call per
//! GSO group or per batch, not per packet and viewer). A path that cannot
//! send from memory (the file-reading ones) gives way to `mmap-writev`.
//!
//! An interleaved viewer whose connection is full has the frame queued
//! (copied once, within the connection's bound) rather than lost: a TCP
//! viewer gets every packet or is dropped as stalled.
//!
//! Sender reports ([`report`]): a viewer's first goes just before its
//! first packets, then all the thread's viewers get one every
//! `rtcp_interval_s` (checked at each flush), each of its feed's
//! publisher's mapping ([`Command::LiveSync`]); a feed without one gets
//! none until its BYE.
//!
//! [`Command::LivePackets`]: crate::Command::LivePackets
//! [`Command::Bye`]: crate::Command::Bye
//! [`Command::LiveSync`]: crate::Command::LiveSync

mod report;

use std::{
    collections::HashMap,
    net::SocketAddr,
    os::fd::{AsFd, BorrowedFd},
    time::{Duration, Instant},
};

use report::Clock;

use crate::{
    Output,
    command::{Backlog, LiveBatch, LivePacket, LiveSync, LiveViewer, ThreadStats},
    datapath::{self, Batch, Burst, DataPath, MAX_BATCH_PACKETS, MmapWritev, Packet},
    interleaved::Connection,
};

/// Packets waiting for a flush before one is made anyway, while commands
/// keep coming: bounds how long a packet waits behind the inbox.
pub(crate) const FLUSH_AT: usize = 1024;

/// How long a live packet waits for those right behind it: a publisher
/// sends a video frame's packets back to back, and gathered they leave in
/// one GSO burst per viewer, not one send per viewer per packet (measured
/// here at 100 viewers: 6.3 µs of CPU per packet flushing each packet as
/// it came, against 2.8 for VOD).
pub(crate) const GATHER: Duration = Duration::from_micros(500);

/// An engine thread's live viewers, by feed, and the packets not yet sent.
#[derive(Default)]
pub(crate) struct Live {
    feeds: HashMap<u64, Vec<LiveViewer>>,
    /// Batches arrived since the last flush, in order, with their feed.
    pending: Vec<(u64, LiveBatch)>,
    pending_packets: usize,
    /// When the oldest pending batch arrived.
    since: Option<Instant>,
    /// A started viewer has its backlog still to send.
    backlog_due: bool,
    /// For a thread whose path cannot send from memory, or failed here.
    fallback: MmapWritev,
    use_fallback: bool,
    /// Each feed's clock, for the sender report of a BYE when its
    /// publisher sent none ([`report`]).
    clocks: HashMap<u64, Clock>,
    /// Each feed's publisher's last sender report, for its viewers'.
    syncs: HashMap<u64, LiveSync>,
    /// When the viewers' next sender reports are due.
    next_report: Option<Instant>,
}

/// Where a packet is sent and what the thread counts.
pub(crate) struct Sink<'a> {
    pub connections: &'a mut HashMap<u64, Connection>,
    pub stats: &'a mut ThreadStats,
    pub cname: &'a str,
    pub rtcp_interval: Duration,
}

/// The thread's data path and its reused batch, lent for a flush.
pub(crate) struct Out<'a> {
    pub path: &'a mut dyn DataPath,
    pub batch: &'a mut Option<Batch<'static>>,
    pub sent: &'a mut Vec<usize>,
}

impl Live {
    /// Adds a viewer; what was pending leaves first, so the viewer, whose
    /// backlog the control plane took after those packets, gets none twice.
    pub(crate) fn add(&mut self, viewer: LiveViewer, out: &mut Out<'_>, sink: &mut Sink<'_>) {
        self.flush(out, sink);
        self.backlog_due |= viewer.started;
        self.feeds.entry(viewer.feed).or_default().push(viewer);
    }

    /// Starts viewer `id`: its backlog, then what arrives, leave with the
    /// next flush. False if no live viewer has that id (it is a VOD
    /// session's).
    pub(crate) fn start(&mut self, id: u64) -> bool {
        let found = (self.feeds.values_mut().flat_map(|v| v.iter_mut())).find(|v| v.id == id);
        let Some(v) = found else { return false };
        self.backlog_due |= !v.started;
        v.started = true;
        true
    }

    /// A batch of `feed`'s packets, arrived at `now`, sent at the next
    /// flush.
    pub(crate) fn packets(&mut self, feed: u64, packets: LiveBatch, now: Instant) {
        if self.feeds.contains_key(&feed) && !packets.is_empty() {
            if let (Some(c), None) = (Clock::of_batch(&packets, now), self.clocks.get(&feed)) {
                self.clocks.insert(feed, c);
            }
            self.pending_packets += packets.len();
            self.pending.push((feed, packets));
            self.since.get_or_insert(now);
        }
    }

    /// Feed `feed`'s publisher's sender report mapping, or none (its
    /// publisher changed): its viewers' next reports carry it. Viewers
    /// there when the publisher changed relay no more: the stream's
    /// timestamps go on without the time it was held, so the next
    /// publisher's line differs from the last by that time, and a player
    /// moves its timeline at such a change (ffmpeg then drops a frame).
    pub(crate) fn sync(&mut self, feed: u64, sync: Option<LiveSync>) {
        match sync {
            Some(s) if self.feeds.contains_key(&feed) => {
                self.syncs.insert(feed, s);
            }
            _ => {
                self.syncs.remove(&feed);
                for v in self.feeds.get_mut(&feed).into_iter().flatten() {
                    v.relay = false;
                }
            }
        }
    }

    /// Whether enough waits that the thread should flush before reading on.
    pub(crate) fn must_flush(&self) -> bool {
        self.pending_packets >= FLUSH_AT
    }

    /// When the next flush is due: [`GATHER`] after the oldest pending
    /// packet came, at once for a backlog; none when nothing waits.
    pub(crate) fn due(&self) -> Option<Instant> {
        match (self.backlog_due, self.since) {
            (true, Some(t)) => Some(t),
            (true, None) => Some(Instant::now()),
            (false, t) => t.map(|t| t + GATHER),
        }
    }

    pub(crate) fn remove(&mut self, id: u64) {
        for viewers in self.feeds.values_mut() {
            viewers.retain(|v| v.id != id);
        }
        self.forget_empty();
    }

    /// Ends viewer `id` with RTCP BYE (a multicast group's last member
    /// left), after what was pending.
    pub(crate) fn bye(&mut self, id: u64, out: &mut Out<'_>, sink: &mut Sink<'_>) {
        if (self.feeds.values().flatten()).any(|v| v.id == id) {
            self.flush(out, sink);
            for (feed, viewers) in &self.feeds {
                for v in viewers.iter().filter(|v| v.id == id) {
                    let sync = self.syncs.get(feed).filter(|_| v.relay);
                    report::send(v, (sync, self.clocks.get(feed)), sink, true);
                }
            }
            self.remove(id);
        }
    }

    /// The stream ended: each viewer gets what was pending, then RTCP BYE,
    /// and is forgotten.
    pub(crate) fn end(&mut self, feed: u64, out: &mut Out<'_>, sink: &mut Sink<'_>) {
        self.flush(out, sink);
        let (sync, clock) = (self.syncs.remove(&feed), self.clocks.remove(&feed));
        for v in self.feeds.remove(&feed).unwrap_or_default() {
            let sync = sync.as_ref().filter(|_| v.relay);
            report::send(&v, (sync, clock.as_ref()), sink, true);
        }
    }

    /// A connection closed: its interleaved viewers go.
    pub(crate) fn detach(&mut self, conn: u64) {
        for viewers in self.feeds.values_mut() {
            viewers
                .retain(|v| !matches!(v.output, Output::Interleaved { conn: c, .. } if c == conn));
        }
        self.forget_empty();
    }

    fn forget_empty(&mut self) {
        self.feeds.retain(|_, v| !v.is_empty());
        let feeds = &self.feeds;
        self.clocks.retain(|f, _| feeds.contains_key(f));
        self.syncs.retain(|f, _| feeds.contains_key(f));
        self.pending.retain(|(f, _)| feeds.contains_key(f));
        self.pending_packets = self.pending.iter().map(|(_, p)| p.len()).sum();
        if self.pending.is_empty() {
            self.since = None;
        }
    }

    pub(crate) fn viewers(&self) -> usize {
        self.feeds.values().map(Vec::len).sum()
    }
}

impl Live {
    /// Sends what is pending, and the backlogs of viewers just started, to
    /// every started viewer; unstarted viewers keep the new packets, by
    /// reference, for their start.
    pub(crate) fn flush(&mut self, out: &mut Out<'_>, sink: &mut Sink<'_>) {
        if self.pending.is_empty() && !self.backlog_due {
            return;
        }
        let Self {
            feeds,
            pending,
            fallback,
            use_fallback,
            syncs,
            ..
        } = self;
        for (feed, packets) in pending.iter() {
            let waiting = feeds.get_mut(feed).into_iter().flatten();
            for v in waiting.filter(|v| !v.started) {
                v.backlog.chunks.push(packets.clone());
            }
        }
        first_reports(feeds, pending, syncs, sink);
        *use_fallback |= !out.path.sends_memory();
        let mut flow = Flow {
            path: &mut *out.path,
            fallback,
            use_fallback,
            sent: &mut *out.sent,
            packets: 0,
            bytes: 0,
        };
        let mut batch = out.batch.take().unwrap_or_default().recycle();
        for (feed, viewers) in feeds.iter() {
            let new = (pending.iter())
                .filter(|(f, _)| f == feed)
                .flat_map(|(_, p)| p.iter());
            for v in viewers.iter().filter(|v| v.started) {
                let run = v.backlog.iter().chain(new.clone());
                match &v.output {
                    Output::Udp { rtp, rtp_peer, .. } => {
                        let to = (rtp.socket(), *rtp_peer);
                        add_run(&mut batch, to, v, run, &mut |b| flow.send(b));
                    }
                    Output::Interleaved {
                        conn, rtp_channel, ..
                    } => {
                        let c = sink.connections.get_mut(conn);
                        flow.interleave(c, *rtp_channel, v, run);
                    }
                }
            }
        }
        flow.send(&mut batch);
        *out.batch = Some(batch.recycle());
        sink.stats.packets += flow.packets;
        sink.stats.bytes += flow.bytes;
        for (feed, viewers) in feeds.iter_mut() {
            let new = counted(
                (pending.iter())
                    .filter(|(f, _)| f == feed)
                    .flat_map(|(_, p)| p.iter()),
            );
            for v in viewers.iter_mut().filter(|v| v.started) {
                let old = counted(v.backlog.iter());
                v.backlog = Backlog::default();
                v.sent.0 = v.sent.0.wrapping_add(old.0).wrapping_add(new.0);
                v.sent.1 = v.sent.1.wrapping_add(old.1).wrapping_add(new.1);
            }
        }
        pending.clear();
        self.pending_packets = 0;
        self.since = None;
        self.backlog_due = false;
        self.report(sink);
    }

    /// Sends each started viewer whose feed has a publisher's mapping a
    /// sender report when they are due.
    fn report(&mut self, sink: &mut Sink<'_>) {
        // The first are an interval on: a viewer's first went before its
        // first packets.
        let now = Instant::now();
        if now < *self.next_report.get_or_insert(now + sink.rtcp_interval) {
            return;
        }
        self.next_report = Some(now + sink.rtcp_interval);
        for (feed, sync) in &self.syncs {
            let viewers = self.feeds.get(feed).into_iter().flatten();
            for v in viewers.filter(|v| v.started && v.relay && v.sent != (0, 0)) {
                report::send(v, (Some(sync), None), sink, false);
            }
        }
    }
}

/// Before a flush sends `pending`: each started viewer about to get its
/// first packets gets its first sender report now, if its feed has a
/// publisher's mapping and it relays them, and else relays none: a player
/// that maps a track by its first report (ffmpeg) then has the mapping
/// from the start, never a jump to it.
fn first_reports(
    feeds: &mut HashMap<u64, Vec<LiveViewer>>,
    pending: &[(u64, LiveBatch)],
    syncs: &HashMap<u64, LiveSync>,
    sink: &mut Sink<'_>,
) {
    for (feed, viewers) in feeds.iter_mut() {
        let new = pending.iter().any(|(f, p)| f == feed && !p.is_empty());
        let first = viewers.iter_mut().filter(|v| v.started && v.sent == (0, 0));
        for v in first.filter(|v| new || v.backlog.iter().next().is_some()) {
            let sync = syncs.get(feed).filter(|_| v.relay);
            v.relay = sync.is_some();
            if sync.is_some() {
                report::send(v, (sync, None), sink, false);
            }
        }
    }
}

/// Packets and payload octets of `packets` as a viewer is sent them
/// (those with a whole RTP header), for sender reports.
fn counted<'a>(packets: impl Iterator<Item = &'a LivePacket>) -> (u32, u32) {
    packets.filter(|p| p.len() >= 12).fold((0, 0), |(n, o), p| {
        (n.wrapping_add(1), o.wrapping_add((p.len() - 12) as u32))
    })
}

/// Puts `run` (packets for viewer `v`, whose RTP leaves `socket` for
/// `dest`) in `batch` as one burst, headers rewritten, payloads by
/// reference; a full batch goes to `full`, which sends and empties it, and
/// the run goes on in the next.
fn add_run<'a>(
    batch: &mut Batch<'a>,
    (socket, dest): (&'a socket2::Socket, SocketAddr),
    v: &LiveViewer,
    run: impl Iterator<Item = &'a LivePacket>,
    full: &mut impl FnMut(&mut Batch<'a>),
) {
    // Live bytes are in memory, not in a file: only paths that send from
    // memory get them (`DataPath::sends_memory`), and those never read
    // `Packet::file`, so any open descriptor will do.
    let fd: BorrowedFd<'a> = socket.as_fd();
    // The viewer's socket is bound, not connected: each message names it.
    let close = |batch: &mut Batch<'a>, first: usize| {
        if batch.packets.len() > first {
            let packets = first..batch.packets.len();
            (batch.bursts).push(Burst {
                socket,
                dest,
                shared: true,
                packets,
            });
        }
    };
    let mut first = batch.packets.len();
    for p in run {
        let Some(head) = header(v, p) else { continue };
        if batch.packets.len() == MAX_BATCH_PACKETS {
            close(batch, first);
            full(batch);
            first = batch.packets.len();
        }
        batch.packets.push(Packet::new(&head, &[], &p[12..], fd, 0));
    }
    close(batch, first);
}

/// Sends a flush's batches and counts what left.
struct Flow<'p> {
    path: &'p mut dyn DataPath,
    fallback: &'p mut MmapWritev,
    use_fallback: &'p mut bool,
    sent: &'p mut Vec<usize>,
    packets: u64,
    bytes: u64,
}

impl Flow<'_> {
    /// Sends `batch` and empties it. A packet a full socket did not take
    /// is lost, as UDP may lose it anyway: a live packet cannot wait.
    fn send(&mut self, batch: &mut Batch<'_>) {
        if !batch.is_empty() {
            self.sent.clear();
            self.sent.resize(batch.bursts.len(), 0);
            let path: &mut dyn DataPath = match *self.use_fallback {
                true => &mut *self.fallback,
                false => &mut *self.path,
            };
            match path.send(batch, self.sent) {
                Ok(()) => self.count(batch),
                Err(e) if datapath::is_unsupported(&e) && !*self.use_fallback => {
                    tracing::warn!("live: data path {} failed ({e}); mmap-writev", path.name());
                    *self.use_fallback = true;
                    return self.send(batch);
                }
                Err(e) => tracing::warn!("live: data path {}: {e}", path.name()),
            }
        }
        batch.packets.clear();
        batch.bursts.clear();
    }

    fn count(&mut self, batch: &Batch<'_>) {
        for (i, &n) in self.sent.iter().enumerate() {
            let n = if n == datapath::FAULTED { 0 } else { n };
            for p in &batch.burst(i)[..n] {
                self.packets += 1;
                self.bytes += p.payload.len() as u64;
            }
        }
    }

    /// Writes `run` to `v`'s connection `conn` (queued when it is full).
    fn interleave<'a>(
        &mut self,
        mut conn: Option<&mut Connection>,
        channel: u8,
        v: &LiveViewer,
        run: impl Iterator<Item = &'a LivePacket>,
    ) {
        for p in run {
            let Some(head) = header(v, p) else { continue };
            let body = &p[12..];
            let frame = [&head[..], body, &[]];
            if (conn.as_deref_mut())
                .is_some_and(|c| c.send_or_queue(channel, frame, Instant::now()))
            {
                self.packets += 1;
                self.bytes += body.len() as u64;
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;
    use crate::datapath::{Counters, Gso};

    /// A data path that keeps what it was given: each burst's
    /// destination, its packets' bytes, and where their payloads were.
    #[derive(Default)]
    struct Recorder {
        bursts: Vec<(SocketAddr, Vec<Vec<u8>>, Vec<usize>)>,
    }

    impl DataPath for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
            for (i, b) in batch.bursts.iter().enumerate() {
                assert!(b.shared, "a live burst names its destination");
                let packets = batch.burst(i);
                let wire = packets
                    .iter()
                    .map(|p| p.parts().collect::<Vec<_>>().concat());
                let at = packets.iter().map(|p| p.payload.as_ptr() as usize);
                self.bursts.push((b.dest, wire.collect(), at.collect()));
                sent[i] = packets.len();
            }
            Ok(())
        }
        fn counters(&self) -> Counters {
            Counters::default()
        }
        fn sends_memory(&self) -> bool {
            true
        }
    }

    fn packet(seq: u16) -> LivePacket {
        let [a, b] = seq.to_be_bytes();
        vec![0x80, 96, a, b, 0, 0, 0, 10, 1, 2, 3, 4, 0x65, a, b].into()
    }

    fn socket() -> socket2::Socket {
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap()
    }

    /// A viewer of feed 7 at `port` of 198.18.0.1, its numbering shifted
    /// by `port`.
    fn viewer(id: u64, port: u16, backlog: Vec<LivePacket>) -> LiveViewer {
        let peer = SocketAddr::from(([198, 18, 0, 1], port));
        LiveViewer {
            id,
            feed: 7,
            ssrc: u32::from(port),
            seq_delta: port,
            ts_delta: u32::from(port),
            output: Output::Udp {
                rtp: socket().into(),
                rtp_peer: peer,
                rtcp: socket().into(),
                rtcp_peer: peer,
            },
            backlog: Backlog {
                chunks: vec![backlog.into()],
                skip: 0,
            },
            started: false,
            clock_rate: 90_000,
            sent: (0, 0),
            relay: true,
        }
    }

    /// What viewer `port` must receive for publisher packet `p`.
    fn as_sent_to(port: u16, p: &LivePacket) -> Vec<u8> {
        let mut want = p.to_vec();
        let seq = u16::from_be_bytes([p[2], p[3]]).wrapping_add(port);
        want[2..4].copy_from_slice(&seq.to_be_bytes());
        want[4..8].copy_from_slice(&(10 + u32::from(port)).to_be_bytes());
        want[8..12].copy_from_slice(&u32::from(port).to_be_bytes());
        want
    }

    /// Runs `f` with a flush's data path `path` and a sink; returns what
    /// the sink counted.
    fn with(path: &mut dyn DataPath, f: impl FnOnce(&mut Out<'_>, &mut Sink<'_>)) -> ThreadStats {
        let (mut batch, mut sent) = (Some(Batch::default()), vec![]);
        let (mut connections, mut stats) = (HashMap::new(), ThreadStats::default());
        let mut out = Out {
            path,
            batch: &mut batch,
            sent: &mut sent,
        };
        let mut sink = Sink {
            connections: &mut connections,
            stats: &mut stats,
            cname: "fjord",
            rtcp_interval: Duration::from_secs(5),
        };
        f(&mut out, &mut sink);
        stats
    }

    /// Packets wait for the flush; then each started viewer gets one
    /// burst of them (a viewer just started, its backlog first), headers
    /// its own, payloads the publisher's packets' own bytes. A viewer
    /// added while packets wait gets none of them twice.
    #[test]
    fn a_flush_sends_each_started_viewer_one_burst_by_reference() {
        let p: Vec<LivePacket> = (0..4).map(packet).collect();
        let mut live = Live::default();
        let mut path = Recorder::default();
        with(&mut path, |out, sink| {
            let mut a = viewer(1, 5000, vec![]);
            a.started = true;
            live.add(a, out, sink);
            live.add(viewer(2, 6000, vec![p[0].clone()]), out, sink);
            live.packets(7, vec![p[1].clone(), p[2].clone()].into(), Instant::now());
            live.packets(8, vec![p[3].clone()].into(), Instant::now());
        });
        assert!(path.bursts.is_empty(), "nothing before the flush");
        let stats = with(&mut path, |out, sink| live.flush(out, sink));
        assert_eq!(stats.packets, 2);
        let (to, wire, at) = path.bursts.pop().unwrap();
        assert!(
            path.bursts.is_empty(),
            "one burst: viewer 2 waits for its start"
        );
        assert_eq!(to.port(), 5000);
        assert_eq!(wire, [as_sent_to(5000, &p[1]), as_sent_to(5000, &p[2])]);
        let addr = |p: &LivePacket| p[12..].as_ptr() as usize;
        assert_eq!(at, [addr(&p[1]), addr(&p[2])], "by reference");
        assert!(live.start(2) && !live.start(3));
        with(&mut path, |out, sink| {
            live.flush(out, sink);
            live.packets(7, vec![p[3].clone()].into(), Instant::now());
            live.add(viewer(3, 7000, vec![p[3].clone()]), out, sink);
            live.start(3);
            live.flush(out, sink);
        });
        let got: Vec<(u16, Vec<Vec<u8>>)> = (path.bursts.drain(..))
            .map(|(to, wire, _)| (to.port(), wire))
            .collect();
        let want = |port: u16, of: &[usize]| {
            let wire = of.iter().map(|&i| as_sent_to(port, &p[i]));
            (port, wire.collect::<Vec<_>>())
        };
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], want(6000, &[0, 1, 2]), "a backlog, then what came");
        assert!(got[1..3].contains(&want(5000, &[3])));
        assert!(got[1..3].contains(&want(6000, &[3])));
        assert_eq!(got[3], want(7000, &[3]), "once");
        assert_eq!(live.viewers(), 3);
        live.remove(1);
        assert_eq!(live.viewers(), 2);
    }

    /// Packets wait [`GATHER`] after the first of them came, or until
    /// [`FLUSH_AT`] of them do; a started viewer's backlog is due at once;
    /// a feed with no viewer here keeps none.
    #[test]
    fn pending_packets_are_bounded_in_time_and_number() {
        let mut live = Live::default();
        with(&mut Recorder::default(), |out, sink| {
            live.add(viewer(1, 5000, vec![packet(0)]), out, sink);
        });
        assert_eq!(live.due(), None);
        let t0 = Instant::now();
        let batch: LiveBatch = (0..64).map(packet).collect();
        live.packets(8, batch.clone(), t0);
        assert!(live.pending.is_empty());
        assert_eq!(live.due(), None);
        for i in 0..FLUSH_AT / 64 - 1 {
            live.packets(7, batch.clone(), t0 + Duration::from_micros(i as u64));
        }
        assert_eq!(live.due(), Some(t0 + GATHER), "the oldest packet's wait");
        assert!(!live.must_flush());
        live.packets(7, batch.clone(), t0);
        assert!(live.must_flush());
        live.start(1);
        assert_eq!(live.due(), Some(t0), "a backlog goes at once");
        live.remove(1);
        assert!(live.pending.is_empty() && !live.must_flush());
    }

    /// A run longer than a batch's room fills the batch, which is sent,
    /// and goes on in the next one; each part is a burst of its own.
    #[test]
    fn a_run_longer_than_a_batch_goes_on_in_the_next() {
        let p: Vec<LivePacket> = (0..10).map(packet).collect();
        let v = viewer(1, 5000, vec![]);
        let Output::Udp { rtp, rtp_peer, .. } = &v.output else {
            unreachable!()
        };
        let to = (rtp.socket(), *rtp_peer);
        let run = (0..MAX_BATCH_PACKETS - 5).map(|i| &p[i % 10]);
        let mut batch = Batch::default();
        let mut fulls = vec![];
        let mut full = |b: &mut Batch<'_>| {
            let bursts = b.bursts.iter().map(|b| b.packets.clone());
            fulls.push((b.packets.len(), bursts.collect::<Vec<_>>()));
            b.packets.clear();
            b.bursts.clear();
        };
        add_run(&mut batch, to, &v, run, &mut full);
        add_run(&mut batch, to, &v, p.iter(), &mut full);
        let n = MAX_BATCH_PACKETS;
        assert_eq!(fulls, [(n, vec![0..n - 5, n - 5..n])]);
        assert_eq!(batch.packets.len(), 5);
        assert_eq!(batch.bursts.len(), 1);
        assert_eq!(batch.bursts[0].packets, 0..5);
        assert_eq!(batch.packets[0].head(), &as_sent_to(5000, &p[5])[..12]);
    }

    /// `bye` of a viewer (a multicast group's last member left): what was
    /// pending leaves first, then RTCP BYE to its RTCP peer, and it is
    /// forgotten; another id is no viewer's.
    #[test]
    fn a_viewer_ended_with_bye_gets_what_was_pending_then_bye() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut v = viewer(1, 5000, vec![]);
        v.started = true;
        if let Output::Udp { rtcp_peer, .. } = &mut v.output {
            *rtcp_peer = rx.local_addr().unwrap();
        }
        let mut live = Live::default();
        let mut path = Recorder::default();
        with(&mut path, |out, sink| {
            live.add(v, out, sink);
            live.packets(7, vec![packet(1)].into(), Instant::now());
            live.bye(2, out, sink);
            assert_eq!(live.viewers(), 1, "no viewer 2");
            live.bye(1, out, sink);
        });
        assert_eq!(live.viewers(), 0);
        assert_eq!(path.bursts.len(), 1, "the pending packet");
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        let parsed = fjord_proto::rtcp::parse_compound(&buf[..n]).unwrap();
        let bye = fjord_proto::rtcp::RtcpInfo::Bye { ssrcs: vec![5000] };
        assert!(parsed.contains(&bye), "{parsed:?}");
        // Its sender report counts the packet it was sent.
        let counted = parsed.iter().any(|i| {
            matches!(
                i,
                fjord_proto::rtcp::RtcpInfo::SenderReport {
                    packets: 1,
                    octets: 3,
                    ..
                }
            )
        });
        assert!(counted, "{parsed:?}");
    }

    /// The sender report `rx` holds now, if any: (NTP, RTP, packets).
    fn report_on(rx: &std::net::UdpSocket) -> Option<(u64, u32, u32)> {
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).ok()?;
        let parsed = fjord_proto::rtcp::parse_compound(&buf[..n]).unwrap();
        parsed.into_iter().find_map(|i| match i {
            fjord_proto::rtcp::RtcpInfo::SenderReport {
                ntp,
                rtp_ts,
                packets,
                ..
            } => Some((ntp.0, rtp_ts, packets)),
            _ => None,
        })
    }

    /// A feed's publisher's mapping reaches its viewers' reports in each
    /// one's numbering: a viewer that relays them and starts after it came
    /// gets one before its first packet, and its BYE's carries it; a
    /// viewer whose first packets left without one, or that relays none
    /// (its session had a track without), gets none, its BYE's the wall
    /// clock; so does a feed whose mapping was cleared (a handover).
    #[test]
    fn viewers_report_the_publishers_mapping_in_their_numbering() {
        let rx: Vec<_> = (0..4)
            .map(|_| {
                let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                rx.set_nonblocking(true).unwrap();
                rx
            })
            .collect();
        let viewer_to = |id: u64, relay| {
            let mut v = viewer(id, 5000 + id as u16, vec![packet(1)]);
            (v.started, v.relay) = (true, relay);
            if let Output::Udp { rtcp_peer, .. } = &mut v.output {
                *rtcp_peer = rx[id as usize - 1].local_addr().unwrap();
            }
            v
        };
        let report = |id: usize| report_on(&rx[id - 1]);
        // In 1909, unlike the wall clock; the RTP time about to wrap.
        let sync = LiveSync {
            ntp: fjord_proto::rtcp::NtpTime(0x1234_5678_0000_0000),
            rtp: u32::MAX - 1000,
            at: Instant::now(),
        };
        // On the line of `sync`, shifted by viewer `id`'s delta.
        let on_line = |(ntp, rtp, _): (u64, u32, u32), id: u32| {
            let ticks = rtp.wrapping_sub(5000 + id).wrapping_sub(sync.rtp);
            ticks < 90_000 && ntp - sync.ntp.0 == (u64::from(ticks) << 32) / 90_000
        };
        let wall = |(ntp, _, _): (u64, u32, u32)| ntp >> 32 > 0xe000_0000;
        let mut live = Live::default();
        let mut path = Recorder::default();
        with(&mut path, |out, sink| {
            live.sync(7, Some(sync));
            live.add(viewer_to(1, true), out, sink);
            live.flush(out, sink);
            assert_eq!(report(1), None, "a mapping before any viewer is not kept");
            live.sync(7, Some(sync));
            live.add(viewer_to(2, true), out, sink);
            live.add(viewer_to(3, false), out, sink);
            live.add(viewer_to(4, true), out, sink);
            live.flush(out, sink);
            for id in [2, 4] {
                let first = report(id).expect("a report before its first packet");
                assert!(on_line(first, id as u32) && first.2 == 0, "{first:?}");
            }
            assert_eq!(report(1), None, "its first packets went without");
            assert_eq!(report(3), None, "it relays none");
            live.bye(4, out, sink);
            let bye = report(4).unwrap();
            assert!(on_line(bye, 4) && bye.2 == 1, "{bye:?}");
            for id in [1, 3] {
                live.bye(id as u64, out, sink);
                assert!(report(id).is_some_and(wall), "viewer {id}");
            }
            live.sync(7, None);
            live.bye(2, out, sink);
            assert!(report(2).is_some_and(wall), "cleared");
        });
    }

    /// Through a real data path (GSO) to a real socket: a viewer's socket
    /// is bound but not connected, and each packet arrives whole, its
    /// header the viewer's.
    #[test]
    fn live_packets_leave_through_the_data_path() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let timeout = std::time::Duration::from_secs(2);
        rx.set_read_timeout(Some(timeout)).unwrap();
        let port = rx.local_addr().unwrap().port();
        let tx = socket();
        tx.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let mut v = viewer(1, port, vec![packet(1)]);
        v.output = Output::Udp {
            rtp: tx.into(),
            rtp_peer: rx.local_addr().unwrap(),
            rtcp: socket().into(),
            rtcp_peer: rx.local_addr().unwrap(),
        };
        v.started = true;
        let mut live = Live::default();
        let stats = with(&mut Gso::default(), |out, sink| {
            live.add(v, out, sink);
            live.packets(7, (2..5).map(packet).collect(), Instant::now());
            live.flush(out, sink);
        });
        let mut buf = [0u8; 64];
        for seq in 1..5 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], as_sent_to(port, &packet(seq)));
        }
        assert_eq!((stats.packets, stats.bytes), (4, 4 * 3));
    }
}

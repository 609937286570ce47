//! Messages from the control plane to an engine thread.

use std::{
    net::SocketAddr,
    os::fd::OwnedFd,
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_proto::rtcp::NtpTime;

use crate::{
    Title,
    datapath::{Counters, UdpSocket},
    lateness::{self, Cause, Hold, TickStart},
};
pub use crate::{clock::REAL_TIME, lateness::LATE, trick::MAX_SCALE};

/// Everything the engine needs to stream one track to one client.
pub struct SessionSpec {
    pub id: u64,
    pub title: Arc<Title>,
    pub track: usize,
    pub ssrc: u32,
    /// Sequence number of the first packet ever sent.
    pub seq0: u16,
    /// Random RTP timestamp offset added to the index's timestamps.
    pub ts0: u32,
    pub output: Output,
}

/// The repair stream of a source stream (`docs/fec.md`): sent by the source
/// stream's session, one block's repair packets right after the block.
pub struct RepairSpec {
    pub ssrc: u32,
    /// Sequence number of the first repair packet.
    pub seq0: u16,
    pub payload_type: u8,
    /// Same kind as the source's output (both UDP or both interleaved on
    /// the same connection), so one engine thread sends both.
    pub output: Output,
}

pub enum Output {
    /// RTP to the client's RTP port; RTCP (sender reports, BYE) to its RTCP
    /// port from a second socket, which the control plane also reads for
    /// receiver reports.
    Udp {
        rtp: UdpSocket,
        rtp_peer: SocketAddr,
        rtcp: UdpSocket,
        rtcp_peer: SocketAddr,
    },
    /// `$`-framed on the client's RTSP connection, attached with
    /// [`Command::AttachConnection`].
    Interleaved {
        conn: u64,
        rtp_channel: u8,
        rtcp_channel: u8,
    },
}

/// Where a PLAY starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// At time `ns` on the title timeline (a seek; the control plane chose
    /// the time of a random-access point), from packet `packet`: see
    /// [`Start::at`].
    At { ns: u64, packet: u32 },
    /// Where the session stopped (resume after PAUSE), or at the beginning.
    Resume,
}

impl Start {
    /// A seek of track `track` to `ns`: a track with sync points starts at
    /// its last one at or before it, any other track at its first packet
    /// sent at or after it, so all tracks of a title start together. The
    /// caller finds the packet, since that may read the index from disk,
    /// which an engine thread never waits for.
    pub fn at(title: &Title, track: usize, ns: u64) -> Start {
        Start::At {
            ns,
            packet: title.start_packet(track, ns),
        }
    }
}

/// Where a PLAY stops (RFC 2326 `Range: npt=a-b`): the stream ends, with
/// RTCP BYE, before its first packet sent at or after `b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Where the previous PLAY was to stop (a PLAY without a Range resumes
    /// the range it paused).
    Previous,
    /// At time `ns` on the title timeline, before packet `packet`: see
    /// [`Until::at`].
    At { ns: u64, packet: u32 },
    /// At the end of the title.
    End,
    /// At time `ns`, before packet `packet`, and then again from where the
    /// PLAY started, for ever, with the same packets (headers included),
    /// each round `period` after the one before (zero: at once): a periodic
    /// broadcast's channel, which repeats its segments.
    Loop {
        ns: u64,
        packet: u32,
        period: std::time::Duration,
    },
}

impl Until {
    /// Track `track` stops at `ns`; the caller finds the packet, for the
    /// reason [`Start::at`] gives.
    pub fn at(title: &Title, track: usize, ns: u64) -> Until {
        Until::At {
            ns,
            packet: title.end_packet(track, ns),
        }
    }
}

/// What the RTSP PLAY reply reports for one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlayInfo {
    /// The first packet the session will send.
    pub packet: u32,
    pub seq: u16,
    /// RTP timestamp of `time_ns` (RFC 2326 `RTP-Info: rtptime` belongs to
    /// the `Range` start, not to the first packet).
    pub rtptime: u32,
    /// Where playback stands on the title timeline, in nanoseconds.
    pub time_ns: u64,
    /// Where it will stop (the title's duration when at its end).
    pub end_ns: u64,
    /// The PLAY waits for the one playing to reach its end
    /// ([`Command::Play`]'s `queue`): the stream goes on by itself there,
    /// and no [`Command::Start`] is wanted.
    pub queued: bool,
}

/// One packet of a live stream, as the publisher sent it (RTP header
/// included). Held once; every viewer's send borrows it.
pub type LivePacket = Arc<[u8]>;

/// Packets of one live track received together, handed to every engine
/// thread with viewers of it in one command (one allocation per batch,
/// shared by the threads).
pub type LiveBatch = Arc<[LivePacket]>;

/// A live viewer's packets to send first: those of `chunks`, shared with
/// the stream's other viewers, in order, less the first `skip`. A
/// reference per chunk, not per packet, as the control plane holds them
/// (`fjord_live::ring`).
#[derive(Default)]
pub struct Backlog {
    pub chunks: Vec<LiveBatch>,
    pub skip: usize,
}

impl Backlog {
    pub fn iter(&self) -> impl Iterator<Item = &LivePacket> + Clone {
        self.chunks.iter().flat_map(|c| c.iter()).skip(self.skip)
    }
}

/// A viewer of one track of a live stream.
pub struct LiveViewer {
    /// Unique among the engine's streams.
    pub id: u64,
    /// The track's feed, which [`Command::LivePackets`] names.
    pub feed: u64,
    pub ssrc: u32,
    /// Added to the publisher's sequence numbers and timestamps.
    pub seq_delta: u16,
    pub ts_delta: u32,
    pub output: Output,
    /// Packets to send first, in order: the stream since its last key
    /// frame. Packets that arrive before the viewer starts
    /// ([`Command::Start`], once its PLAY reply is written) join
    /// them, a batch by reference.
    pub backlog: Backlog,
    /// Whether it was started; the control plane adds it unstarted.
    pub started: bool,
    /// The track's RTP clock rate, for its sender reports' timestamps.
    pub clock_rate: u32,
    /// Packets and payload octets sent to it, for its sender reports:
    /// counted by the engine, zero when added.
    pub sent: (u32, u32),
    /// Whether it is sent the publisher's mapping in sender reports: set
    /// when every track of its session had one at its PLAY, so each
    /// track's first report leaves before its first packet (kept only if
    /// its feed still has one then). A player that aligns tracks by their
    /// first reports (ffmpeg) shifts a track whose first report comes
    /// after its packets, by as much as its first packet's time differs
    /// from the first reported track's: frames out of order.
    pub relay: bool,
}

/// A live track's publisher's latest RTCP sender report, in the stream's
/// numbering (`fjord_live::handover`): RTP time `rtp` is NTP time `ntp` of
/// the publisher's clock; it arrived at `at`. Each track's comes from the
/// publisher's one NTP clock, so the viewers' reports of them keep the
/// tracks in sync as the publisher meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveSync {
    pub ntp: NtpTime,
    pub rtp: u32,
    pub at: Instant,
}

pub enum Command {
    Add(Box<SessionSpec>),
    /// Gives session `id` a repair stream; ignored when its title has no
    /// parity for the track or the output kinds differ.
    AttachRepair {
        id: u64,
        repair: Box<RepairSpec>,
    },
    /// Position the session and stop sending; reply with where it will start.
    /// Sending begins with [`Command::Start`], after the control plane has
    /// written the PLAY reply, so a client never sees data before its reply.
    Play {
        id: u64,
        start: Start,
        until: Until,
        /// RFC 2326 `Scale`: 1, or key frames only at that speed
        /// (backwards when negative; at most [`MAX_SCALE`] either way).
        scale: i32,
        /// RFC 2326 `Speed` in millionths ([`REAL_TIME`]): 1,000,000 delivers in real time,
        /// 2000 twice as fast (timestamps unchanged).
        speed: u32,
        /// A PLAY with a Range that arrived while the session plays: when
        /// the PLAY playing has a given end, this one plays on from there
        /// (RFC 2326 §10.5); else it seeks at once.
        queue: bool,
        reply: Box<dyn FnOnce(Option<PlayInfo>) + Send>,
    },
    /// A pause point (PAUSE with a Range): the stream stops before packet
    /// `packet`, at title time `ns`, without ending; the reply says
    /// whether that lies ahead of where the session plays.
    PauseAt {
        id: u64,
        packet: u32,
        ns: u64,
        reply: Box<dyn FnOnce(bool) + Send>,
    },
    /// Where session `id` stands on the title timeline now (for a PLAY
    /// without a Range after trick play, which resumes there).
    Position {
        id: u64,
        reply: Box<dyn FnOnce(Option<u64>) + Send>,
    },
    /// Start sending: packets sent at title time `origin_ns` are due at `at`.
    /// Every stream of an RTSP session gets the same clock, so their RTCP
    /// sender reports agree and players lip-sync.
    Start {
        id: u64,
        at: Instant,
        origin_ns: u64,
    },
    Pause {
        id: u64,
    },
    Remove {
        id: u64,
    },
    /// Packets `first..` of session `id` are due `offsets[i - first]` ns
    /// after the time its next PLAY starts at, instead of at their media
    /// times: a broadcast channel sends its segment at a constant byte
    /// rate. Packets past the table keep their media times.
    Pace {
        id: u64,
        first: u32,
        offsets: Box<[u64]>,
    },
    /// Hand the write side of an RTSP connection to this engine thread: from
    /// now on every byte to that client (RTSP replies included) goes through
    /// the engine so replies and `$` frames never interleave mid-frame.
    /// `seal`: an RTSPS connection's encryption, which its bytes go through.
    AttachConnection {
        conn: u64,
        fd: OwnedFd,
        seal: Option<Arc<dyn crate::seal::Seal>>,
    },
    /// Bytes of an RTSP reply for an attached connection.
    Write {
        conn: u64,
        bytes: Vec<u8>,
    },
    DetachConnection {
        conn: u64,
    },
    /// End session `id` now, as the server shuts down or an operator ends
    /// it: RTCP BYE, playing or paused, and never woken again (a `Remove`
    /// follows). A live viewer's `id`: RTCP BYE, and it is forgotten.
    Bye {
        id: u64,
    },
    /// A viewer of a live stream's track (`live.rs`).
    LiveAdd(Box<LiveViewer>),
    /// Packets of a live track, in order, to every viewer of it on the
    /// thread.
    LivePackets {
        feed: u64,
        packets: LiveBatch,
    },
    LiveRemove {
        id: u64,
    },
    /// Live track `feed`'s sender report mapping, for its viewers' sender
    /// reports; none: the publisher changed and its successor sent none
    /// yet. One per publisher report, not per packet: ordered with the
    /// packets and read without a lock.
    LiveSync {
        feed: u64,
        sync: Option<LiveSync>,
    },
    /// The live track ended: its viewers get RTCP BYE.
    LiveEnd {
        feed: u64,
    },
    /// What the thread has done so far.
    Stats {
        reply: Box<dyn FnOnce(ThreadStats) + Send>,
    },
}

impl Command {
    /// The command's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Add(_) => "Add",
            Command::AttachRepair { .. } => "AttachRepair",
            Command::Play { .. } => "Play",
            Command::PauseAt { .. } => "PauseAt",
            Command::Position { .. } => "Position",
            Command::Start { .. } => "Start",
            Command::Pause { .. } => "Pause",
            Command::Remove { .. } => "Remove",
            Command::Pace { .. } => "Pace",
            Command::AttachConnection { .. } => "AttachConnection",
            Command::Write { .. } => "Write",
            Command::DetachConnection { .. } => "DetachConnection",
            Command::Bye { .. } => "Bye",
            Command::LiveAdd(_) => "LiveAdd",
            Command::LivePackets { .. } => "LivePackets",
            Command::LiveRemove { .. } => "LiveRemove",
            Command::LiveSync { .. } => "LiveSync",
            Command::LiveEnd { .. } => "LiveEnd",
            Command::Stats { .. } => "Stats",
        }
    }
}

/// One engine thread's account, for benchmarks and admission figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadStats {
    pub sessions: usize,
    /// Media packets sent, and their RTP payload bytes.
    pub packets: u64,
    pub bytes: u64,
    /// FEC repair packets sent (not in `packets`).
    pub repair_packets: u64,
    /// Packets that left more than [`LATE`] after their scheduled time;
    /// of them, those late mostly because the thread woke late for their
    /// tick (the kernel or the hypervisor ran it late) or because it was
    /// busy (with earlier work, or in the tick); the rest their sessions
    /// held back: waiting for the storage layer, for a full socket, or for
    /// no reason a session knew of. See `lateness.rs`.
    pub late: u64,
    pub late_woke: u64,
    pub late_busy: u64,
    pub late_storage: u64,
    pub late_socket: u64,
    pub max_late: Duration,
    /// Times a session's next packet was not resident yet and it was
    /// looked at again shortly (the storage layer was still reading it).
    pub not_ready: u64,
    /// CPU the thread used, user and system.
    pub user: Duration,
    pub system: Duration,
    pub datapath: Counters,
}

impl ThreadStats {
    /// A packet of `bytes` left `lateness` after its schedule, `in_tick`
    /// into a tick that began as `start` says, from a session that waited
    /// for `hold` since its last packet left.
    pub(crate) fn count(
        &mut self,
        lateness: Duration,
        bytes: u32,
        start: TickStart,
        in_tick: Duration,
        hold: Option<Hold>,
    ) {
        self.packets += 1;
        self.bytes += u64::from(bytes);
        if lateness > LATE {
            self.late += 1;
            match lateness::cause(lateness, start, in_tick, hold) {
                Cause::WokeLate => self.late_woke += 1,
                Cause::Busy => self.late_busy += 1,
                Cause::Held(Some(Hold::Storage)) => self.late_storage += 1,
                Cause::Held(Some(Hold::Socket)) => self.late_socket += 1,
                Cause::Held(None) => {}
            }
        }
        self.max_late = self.max_late.max(lateness);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn start(lag: u64, overslept: u64) -> TickStart {
        TickStart {
            lag: ms(lag),
            overslept: ms(overslept),
        }
    }

    #[test]
    fn thread_stats_count_each_late_packet_once_by_its_cause() {
        let mut s = ThreadStats::default();
        let woke = start(4, 4);
        s.count(ms(1), 100, woke, ms(0), None);
        s.count(ms(5), 100, woke, ms(0), None);
        s.count(ms(9), 100, woke, ms(0), Some(Hold::Storage));
        s.count(ms(3), 100, start(3, 0), ms(0), Some(Hold::Socket));
        s.count(ms(3), 100, TickStart::default(), ms(2), None);
        s.count(ms(5), 100, TickStart::default(), ms(0), Some(Hold::Socket));
        s.count(ms(6), 100, TickStart::default(), ms(0), None);
        assert_eq!((s.packets, s.late), (7, 6));
        assert_eq!((s.late_woke, s.late_busy), (1, 2));
        assert_eq!((s.late_storage, s.late_socket), (1, 1));
        assert_eq!(s.max_late, ms(9));
    }
}

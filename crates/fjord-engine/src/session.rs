//! A session as an engine thread owns it: a position in a track, a clock that
//! maps index send times to wall time, and the RTP/RTCP counters. A session
//! may also send the track's repair stream: when a block's last source
//! packet has left, the next tick sends that block's repair packets (and
//! no source packets), so they always follow their block on one clock.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use fjord_fec::{
    RepairHeader,
    live::LiveEncoder,
    symbol::{REPAIR_HEADER_LEN, SymbolMeta},
};
use fjord_media::{
    index::Track,
    plan::{PacketRecord, rtp_ticks},
    prefab::Ids,
};
use fjord_proto::{
    rtcp::{NtpTime, SenderReportTemplate},
    rtp,
};
use fjord_storage::{Mode, ReadAhead, Storage, Uses};

use crate::{
    PlayInfo, Start, ThreadStats, Title, Until,
    clock::{Clock, REAL_TIME},
    command::{Output, RepairSpec, SessionSpec},
    datapath::{Batch, Packet},
    interleaved::{Connection, Frame, MAX_FRAMES},
    lateness::{Hold, TickStart},
    trick::Trick,
};

/// After the last packet was due and after it actually left (a stalled
/// thread may send it late), wait this long before RTCP BYE, so the client
/// has read the final packets before it learns the stream ended.
const BYE_DELAY: Duration = Duration::from_secs(1);
/// The most packets one session puts in one tick's batch (one GSO send).
pub(crate) const MAX_BURST_PACKETS: usize = 64;
/// How soon to retry a session whose socket was full.
const RETRY: Duration = Duration::from_millis(1);
/// A first packet that leaves later than this after its schedule is logged.
const SLOW_START_MS: f64 = 20.0;
/// How soon to look again at a session whose next packet is not resident
/// yet (the storage layer is reading it).
const NOT_READY_RETRY: Duration = Duration::from_millis(2);

/// What happens where a PLAY stops.
#[derive(Clone, Copy, Debug)]
enum AtEnd {
    /// The stream ends: RTCP BYE.
    Bye,
    /// A pause point (PAUSE with a Range): the session stops there, to
    /// play on to `then` (the PLAY's own stop) when played again.
    Pause { then: Option<(u32, u64)> },
    /// A PLAY that came while this one was playing to a given end
    /// (RFC 2326 §10.5): it plays on from there, on the same clock.
    Play { start: Start, until: Until },
    /// Start over from packet `packet` at title time `ns`, `period` after
    /// the round before began (see [`Until::Loop`]).
    Loop {
        packet: u32,
        ns: u64,
        period: Duration,
    },
}

#[derive(Clone, Copy)]
enum State {
    /// Set up, paused, or positioned by PLAY and waiting for `Start`.
    Stopped,
    /// Sending, on this clock.
    Playing(Clock),
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
    /// Where playback stands on the title timeline while stopped.
    position_ns: u64,
    /// Where the RTP clock stands while stopped (stream time): the
    /// position, unless trick play ran the title at another speed.
    clock_ns: u64,
    /// Key frames only, at another speed (RFC 2326 `Scale`); boxed, since
    /// few sessions play tricks.
    trick: Option<Box<Trick>>,
    /// How fast the next PLAY delivers, in millionths of real time
    /// (RFC 2326 `Speed`).
    speed: u32,
    /// Where the PLAY stops: before this packet, at this time (`None`: at
    /// the end of the track).
    end: Option<(u32, u64)>,
    at_end: AtEnd,
    /// Packet `i` carries sequence number `seq0 + i` and RTP timestamp
    /// `ts0` plus its own; a seek moves both so the stream goes on
    /// ([`Session::splice`]).
    seq0: u16,
    /// The title's prefabricated packets carry this session's header fields
    /// (its SSRC, `seq0` and `ts0`), so they may be sent as they are.
    prefab: bool,
    packets: u32,
    octets: u32,
    state: State,
    next_report: Instant,
    report: SenderReportTemplate,
    /// Boxed: few sessions send a repair stream, and its state is as large
    /// as the rest of a session.
    repair: Option<Box<Repair>>,
    /// A broadcast channel's byte-rate schedule ([`crate::Command::Pace`]);
    /// boxed, as few sessions have one.
    pace: Option<Box<Pace>>,
    /// When the latest packet left (the BYE waits for it, too).
    last_sent: Option<Instant>,
    /// First packet of the latest seek: blocks that start before it get no
    /// repair packets, since part of them was never sent in this sequence.
    floor: u32,
    /// The storage layer's read-ahead for this session: which packets are
    /// resident. Without it (tests, in-memory benches) every packet is.
    readahead: Option<ReadAhead>,
    /// No packet has left since PLAY started the session: while its first
    /// one is not resident, its clock waits too (the stream starts late
    /// rather than in a burst of packets already due).
    starting: bool,
    /// When the latest PLAY started the session (its first packet's delay
    /// after it is logged when long).
    started: Option<Instant>,
    /// Times the first packet of the latest PLAY was not resident yet.
    start_waits: u32,
    /// What the session waited for since its latest packet left: the cause
    /// of the lateness of the packets it sends next.
    hold: Option<Hold>,
    /// A wait for the storage layer after the stream started was logged
    /// (once per session, at debug level: the read-ahead fell behind).
    storage_wait_logged: bool,
}

/// When packets are due in a paced session: `offsets[i - first]` after
/// `base_ns`, the title time the PLAY starts at.
struct Pace {
    first: u32,
    base_ns: u64,
    offsets: Box<[u64]>,
}

impl Pace {
    fn due_ns(&self, i: u32) -> Option<u64> {
        let k = i.checked_sub(self.first)?;
        Some(self.base_ns + *self.offsets.get(k as usize)?)
    }
}

struct Repair {
    ssrc: u32,
    seq: u16,
    pt: u8,
    output: Output,
    pending: Option<PendingRepair>,
    /// The repair stream's own RTCP sender reports and BYE (RFC 3550: every
    /// RTP stream reports its counts, and ends with BYE).
    report: SenderReportTemplate,
    packets: u32,
    octets: u32,
    /// Repair symbols encoded here as the source packets leave, when the
    /// title asks for it ([`Title::encode_parity_live`]).
    live: Option<LiveEncoder>,
}

/// A block whose repair packets are due.
#[derive(Clone, Copy, Debug)]
struct PendingRepair {
    block: u64,
    /// The next repair packet to send.
    esi: u16,
    /// RTP sequence number the block's first source packet had.
    seq_base: u16,
}

/// Packets a session put in a batch: a burst of repair packets or one of
/// source packets (a session never puts both in one batch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Planned {
    pub source: usize,
    pub repair: usize,
}

impl Planned {
    pub(crate) fn bursts(&self) -> usize {
        usize::from(self.source > 0) + usize::from(self.repair > 0)
    }
}

pub(crate) struct Pacing<'a> {
    /// When the tick began: what is due is due by then.
    pub now: Instant,
    /// How the tick began, and when the packets being accounted left (for
    /// their lateness and its cause).
    pub start: TickStart,
    pub sent_at: Instant,
    pub stats: &'a mut ThreadStats,
    pub burst: Duration,
    pub rtcp_interval: Duration,
    pub connections: &'a mut HashMap<u64, Connection>,
}

impl Session {
    pub(crate) fn new(spec: SessionSpec, cname: &str) -> Self {
        let prefab = spec.title.prefab_ids(spec.track)
            == Some(Ids {
                ssrc: spec.ssrc,
                seq0: spec.seq0,
                ts0: spec.ts0,
            });
        Self {
            report: SenderReportTemplate::new(spec.ssrc, cname),
            title: spec.title,
            track: spec.track,
            ssrc: spec.ssrc,
            ts0: spec.ts0,
            output: spec.output,
            next: 0,
            position_ns: 0,
            clock_ns: 0,
            trick: None,
            speed: REAL_TIME,
            end: None,
            at_end: AtEnd::Bye,
            seq0: spec.seq0,
            prefab,
            packets: 0,
            octets: 0,
            state: State::Stopped,
            next_report: Instant::now(),
            repair: None,
            pace: None,
            last_sent: None,
            floor: 0,
            readahead: None,
            starting: false,
            started: None,
            start_waits: 0,
            hold: None,
            storage_wait_logged: false,
        }
    }

    /// Has the storage layer read ahead of this session; `prefab_path`:
    /// the engine's data path sends prefabricated packets.
    pub(crate) fn attach_storage(&mut self, storage: &Storage, prefab_path: bool) {
        match storage.register(self.title.clone(), self.track, self.uses(prefab_path)) {
            Ok(r) => self.readahead = Some(r),
            Err(e) => tracing::warn!("no read-ahead for a session: {e}"),
        }
    }

    /// The files this session reads when the data path sends prefabricated
    /// packets (`prefab_path`) or not.
    fn uses(&self, prefab_path: bool) -> Uses {
        let packets = if self.prefab && (prefab_path || self.is_interleaved()) {
            Uses::PREFAB
        } else {
            Uses::MEDIA
        };
        let parity = match &self.repair {
            Some(r) if r.live.is_none() => Uses::PARITY,
            _ => Uses(0),
        };
        Uses::INDEX | packets | parity
    }

    /// The data path changed: read ahead what the session now sends.
    pub(crate) fn set_prefab_path(&self, prefab_path: bool) {
        let uses = self.uses(prefab_path);
        if let Some(r) = &self.readahead {
            r.set_uses(uses);
        }
    }

    /// How many packets from the next one are resident.
    fn ready(&self) -> u32 {
        self.readahead
            .as_ref()
            .map_or(u32::MAX, |r| r.cursor().ready_from(self.next))
    }

    /// A line about the session for a log: its stream, where it is and how
    /// it plays.
    pub(crate) fn describe(&self) -> String {
        let state = match self.state {
            State::Stopped => "stopped".to_string(),
            State::Playing(c) => format!("playing on {c:?}"),
            State::Ended => "ended".to_string(),
        };
        format!(
            "ssrc {:08X}, track {}, packet {}, {state}{}{}, ends at {:?}, then {:?}",
            self.ssrc,
            self.track,
            self.next,
            if self.trick.is_some() {
                ", trick play"
            } else {
                ""
            },
            if self.is_interleaved() {
                ", interleaved"
            } else {
                ""
            },
            self.end,
            self.at_end
        )
    }

    /// The next packet is not resident yet: look again shortly. Before the
    /// first packet of a PLAY the session's clock slips with the wait: the
    /// stream starts late rather than in a burst of packets already due.
    /// Elsewhere a wait makes late packets, and counts them.
    fn not_ready(&mut self, p: &mut Pacing) -> Option<Instant> {
        p.stats.not_ready += 1;
        self.hold = Some(Hold::Storage);
        let retry = p.now + NOT_READY_RETRY;
        if self.starting {
            self.start_waits += 1;
        } else {
            self.log_storage_wait();
        }
        if self.starting
            && let State::Playing(c) = self.state
        {
            // The first packet is due at t0 (its record is not read: its
            // index page may be what the disk is reading). A clock that
            // starts later (a multicast group's batching window, a loop's
            // next round) keeps its start.
            let t0 = c.t0.max(retry);
            self.state = State::Playing(Clock { t0, ..c });
            self.next_report = self.next_report.max(t0);
        }
        Some(retry)
    }

    /// Logs (debug) the session's first wait for the storage layer in
    /// mid-stream, with what the storage layer had resident: the read-ahead
    /// fell behind. Most such waits make no packet late (the session sends
    /// ahead of time); the late ones are counted (`late_storage`).
    fn log_storage_wait(&mut self) {
        if self.storage_wait_logged {
            return;
        }
        self.storage_wait_logged = true;
        let resident = self.readahead.as_ref().map(|r| r.cursor().resident());
        tracing::debug!(
            ssrc = self.ssrc,
            track = self.track,
            next = self.next,
            ?resident,
            sent = self.packets,
            "a playing session's next packet is not read yet (logged once per session)"
        );
    }

    /// Whether the storage layer found the title's files changed or
    /// unreadable.
    fn storage_failed(&self) -> bool {
        self.readahead.as_ref().is_some_and(|r| r.cursor().failed())
    }

    /// Tells the storage layer where the session stands, how, and how fast
    /// it moves through its title (its clock's speed, times the scale in
    /// fast forward: it reads ahead that much further).
    fn tell_storage(&self, mode: Mode) {
        if let Some(r) = &self.readahead {
            let forward = self.trick.as_ref().map_or(1, |t| t.forward());
            r.position(self.next, mode, self.speed.saturating_mul(forward));
        }
    }

    /// Attaches a repair stream; false (and nothing changes) when the title
    /// has no parity for the track or the repair output is not of the
    /// source's kind (UDP, or interleaved on the same connection).
    pub(crate) fn attach_repair(&mut self, spec: RepairSpec, cname: &str) -> bool {
        let same_kind = match (&self.output, &spec.output) {
            (Output::Udp { .. }, Output::Udp { .. }) => true,
            (Output::Interleaved { conn: a, .. }, Output::Interleaved { conn: b, .. }) => a == b,
            _ => false,
        };
        let Some(fec) = self.title.fec(self.track).filter(|_| same_kind) else {
            return false;
        };
        let live = self
            .title
            .parity_is_live()
            .then(|| LiveEncoder::new(usize::from(fec.params().m), fec.symbol_len() as usize));
        self.repair = Some(Box::new(Repair {
            report: SenderReportTemplate::new(spec.ssrc, cname),
            ssrc: spec.ssrc,
            seq: spec.seq0,
            pt: spec.payload_type,
            output: spec.output,
            pending: None,
            packets: 0,
            octets: 0,
            live,
        }));
        if let Some(r) = &self.readahead {
            let prefab_path = r.cursor().uses().has(Uses::PREFAB);
            r.set_uses(self.uses(prefab_path));
        }
        true
    }

    fn repair_pending(&self) -> Option<PendingRepair> {
        self.repair.as_ref()?.pending
    }

    /// One past the last packet of the block holding the next packet, when
    /// the session sends repair packets: a burst of source packets ends there.
    fn block_end(&self) -> Option<usize> {
        self.repair.as_ref()?;
        if self.trick.is_some() {
            return None;
        }
        let fec = self.title.fec(self.track)?;
        let b = fec.block_of(u64::from(self.next))?;
        usize::try_from(fec.block(b)?.packets().end).ok()
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

    /// One past the last packet this PLAY sends.
    fn count(&self) -> u32 {
        let all = self.track().map_or(0, |t| t.packet_count() as u32);
        self.end.map_or(all, |(p, _)| p.min(all))
    }

    /// One past the last packet the next burst may take: the end of the
    /// PLAY, or of the key frame being sent.
    fn run_end(&self) -> usize {
        match &self.trick {
            Some(t) => t.limit().unwrap_or(self.next) as usize,
            None => self.count() as usize,
        }
    }

    /// Whether the PLAY has packets left to send.
    fn more(&self) -> bool {
        match &self.trick {
            Some(t) => t.first_packet().is_some(),
            None => self.next < self.count(),
        }
    }

    /// Stream time packet `i` (record `rec`) is due.
    #[inline]
    fn due_ns(&self, i: u32, rec: &PacketRecord) -> u64 {
        match (&self.trick, &self.pace) {
            (Some(t), _) => t.due_ns(i),
            (None, Some(p)) => p.due_ns(i).unwrap_or(rec.send_time_ns),
            (None, None) => rec.send_time_ns,
        }
    }

    /// Packets `first..` due at `offsets` from the PLAY's start
    /// ([`crate::Command::Pace`]).
    pub(crate) fn pace(&mut self, first: u32, offsets: Box<[u64]>) {
        let base_ns = self.position_ns;
        self.pace = Some(Box::new(Pace {
            first,
            base_ns,
            offsets,
        }));
    }

    /// Whether a burst must end after packet `i`: the last of a key frame
    /// in trick play.
    #[inline]
    fn ends_burst(&self, i: u32, rec: &PacketRecord) -> bool {
        self.trick.as_ref().is_some_and(|t| t.ends_frame(i, rec))
    }

    /// Stream time of the PLAY's last packet.
    fn last_due_ns(&self) -> u64 {
        match &self.trick {
            Some(t) => t.last_due_ns(),
            None => self.media_time(self.count().saturating_sub(1)).0,
        }
    }

    /// Where playback stands on the title timeline at `now`.
    pub(crate) fn position_at(&self, now: Instant) -> u64 {
        match (self.state, &self.trick) {
            (State::Playing(_), Some(t)) => t.npt(self.stream_ns(now)),
            (State::Playing(_), None) => self.stream_ns(now).min(self.end_ns()),
            (State::Stopped, _) => self.position_ns,
            (State::Ended, Some(t)) => t.stop_ns(),
            (State::Ended, None) => self.end_ns(),
        }
    }

    /// Where the RTP clock stands at `now` (stream time).
    fn stream_ns(&self, now: Instant) -> u64 {
        match self.state {
            State::Playing(c) => c.at(now),
            State::Stopped => self.clock_ns,
            State::Ended => self.last_due_ns(),
        }
    }
    fn end_ns(&self) -> u64 {
        self.end
            .map_or(self.title.index().duration_ns(), |(_, ns)| ns)
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
                (ns, rtp_ticks(ns, clock))
            }
        }
    }

    pub(crate) fn play(
        &mut self,
        start: Start,
        until: Until,
        scale: i32,
        now: Instant,
    ) -> PlayInfo {
        self.at_end = AtEnd::Bye;
        match until {
            Until::Previous => {}
            Until::At { ns, packet } | Until::Loop { ns, packet, .. } => {
                self.end = Some((packet, ns));
            }
            Until::End => self.end = None,
        }
        if scale != 1 {
            return self.play_trick(start, scale, now);
        }
        // Back from trick play: on from the key frame it stands at.
        let start = match (start, &self.trick) {
            (Start::Resume, Some(_)) => Start::At {
                ns: self.position_ns,
                packet: self.next,
            },
            (start, _) => start,
        };
        if let Start::At { ns, packet } = start {
            let all = self.track().map_or(0, |t| t.packet_count() as u32);
            self.move_to(packet.min(all), ns, now);
        }
        self.trick = None;
        self.state = State::Stopped;
        if let Until::Loop { period, .. } = until {
            let (packet, ns) = (self.next, self.position_ns);
            self.at_end = AtEnd::Loop { packet, ns, period };
        }
        if let Some(p) = &mut self.pace {
            p.base_ns = self.position_ns;
        }
        self.tell_storage(Mode::Starting);
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        PlayInfo {
            packet: self.next,
            seq: self.seq0.wrapping_add(self.next as u16),
            rtptime: self.ts0.wrapping_add(rtp_ticks(self.position_ns, clock)),
            time_ns: self.position_ns,
            end_ns: self.end_ns(),
            queued: false,
        }
    }

    /// A PLAY to `start`..`until` after the one playing, when that one
    /// plays to a given end (RFC 2326 §10.5 pipelining); `None` (and
    /// nothing changes) otherwise. The reply names the sequence number and
    /// RTP time the stream will have there.
    pub(crate) fn queue(&mut self, start: Start, until: Until) -> Option<PlayInfo> {
        let (State::Playing(_), Some((end_packet, end_ns)), None, Start::At { ns, packet }) =
            (self.state, self.end, &self.trick, start)
        else {
            return None;
        };
        if !matches!(self.at_end, AtEnd::Bye) {
            return None;
        }
        self.at_end = AtEnd::Play { start, until };
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        Some(PlayInfo {
            packet,
            seq: self.seq0.wrapping_add(end_packet as u16),
            rtptime: self.ts0.wrapping_add(rtp_ticks(end_ns, clock)),
            time_ns: ns,
            end_ns: match until {
                Until::At { ns, .. } => ns,
                _ => self.title.index().duration_ns(),
            },
            queued: true,
        })
    }

    /// A pause point (PAUSE with a Range, RFC 2326 §10.6): the stream
    /// stops before packet `packet`, at title time `ns`, without BYE; false
    /// (and nothing changes) when that is not ahead of where it plays.
    pub(crate) fn pause_at(&mut self, packet: u32, ns: u64, now: Instant) -> bool {
        let ahead = matches!(self.state, State::Playing(_))
            && self.trick.is_none()
            && matches!(self.at_end, AtEnd::Bye)
            && ns >= self.stream_ns(now)
            && ns <= self.end_ns();
        if ahead {
            self.at_end = AtEnd::Pause { then: self.end };
            self.end = Some((packet, ns));
        }
        ahead
    }

    /// The PLAY's stop is reached at stream time `end_ns`, due at `at`:
    /// stop there (a pause point) or play on (a pipelined PLAY). `None`:
    /// nothing to do now or ever; `Some(at)`: look again at `at`.
    fn reach_end(&mut self, at: Instant, end_ns: u64, now: Instant) -> Option<Instant> {
        if now < at {
            return Some(at);
        }
        if let AtEnd::Loop { packet, ns, period } = self.at_end
            && let State::Playing(c) = self.state
        {
            let again = if period.is_zero() { at } else { c.t0 + period };
            self.loop_again(packet, ns, again);
            return Some(now);
        }
        self.state = State::Stopped;
        self.clock_ns = end_ns;
        match std::mem::replace(&mut self.at_end, AtEnd::Bye) {
            AtEnd::Bye => None,
            AtEnd::Pause { then } => {
                self.position_ns = end_ns;
                self.end = then;
                self.tell_storage(Mode::Paused);
                None
            }
            AtEnd::Play { start, until } => {
                let info = self.play(start, until, 1, at);
                self.start(at, info.time_ns);
                Some(now)
            }
            AtEnd::Loop { .. } => None,
        }
    }

    /// Sets up the next round of a loop, starting at `again` (once the
    /// round before has ended): the same packets, headers and all, no
    /// splice.
    fn loop_again(&mut self, packet: u32, ns: u64, again: Instant) {
        (self.next, self.position_ns, self.clock_ns, self.floor) = (packet, ns, ns, packet);
        if let Some(r) = &mut self.repair {
            r.pending = None;
        }
        self.start(again, ns);
    }

    /// Positions the session for trick play at `scale` from `start` (where
    /// it stands for [`Start::Resume`]); the stream goes on as after a seek.
    fn play_trick(&mut self, start: Start, scale: i32, now: Instant) -> PlayInfo {
        let at_ns = match start {
            Start::At { ns, .. } => ns,
            Start::Resume => self.position_ns,
        };
        let duration_ns = self.title.index().duration_ns();
        let stop_ns = self.end.map(|(_, ns)| ns);
        let trick = self
            .track()
            .map(|t| Trick::new(t, scale, at_ns, stop_ns, duration_ns));
        let Some(trick) = trick else {
            return self.play(start, Until::Previous, 1, now);
        };
        let origin_ns = trick.origin_ns();
        let first = trick.first_packet().unwrap_or(self.next);
        self.move_to(first, origin_ns, now);
        let mut trick = Box::new(trick);
        trick.seq = self.seq0.wrapping_add(first as u16);
        self.build_headers();
        let info = PlayInfo {
            packet: first,
            seq: trick.seq,
            rtptime: self.ts0.wrapping_add(trick.rtp_ts()),
            time_ns: origin_ns,
            end_ns: trick.stop_ns(),
            queued: false,
        };
        self.trick = Some(trick);
        self.state = State::Stopped;
        self.tell_storage(Mode::Starting);
        info
    }

    /// Moves the session to packet `packet` at title time `ns`; after
    /// packets have left, the stream goes on ([`Session::splice`]).
    fn move_to(&mut self, packet: u32, ns: u64, now: Instant) {
        if self.last_sent.is_some() {
            self.splice(packet, ns, now);
        }
        self.next = packet;
        self.position_ns = ns;
        self.clock_ns = ns;
        self.floor = packet;
        if let Some(r) = &mut self.repair {
            r.pending = None;
        }
    }

    /// The headers differ from the prefabricated ones from now on: build
    /// them, and read the media instead of the packet file.
    fn build_headers(&mut self) {
        if self.prefab {
            self.prefab = false;
            if let Some(r) = &self.readahead {
                r.set_uses(self.uses(false));
            }
        }
    }

    /// The sequence number the next packet gets.
    fn next_seq(&self) -> u16 {
        match &self.trick {
            Some(t) => t.seq,
            None => self.seq0.wrapping_add(self.next as u16),
        }
    }

    /// A seek after packets have left continues the stream instead of
    /// jumping it: RFC 3550 receivers (ffmpeg among them) take a jump of
    /// the sequence numbers for a restart and drop what follows. Packet
    /// `packet` gets the next sequence number, and the RTP clock goes on
    /// from where the stream stands `now` (as its sender reports say) as if
    /// time `ns` followed. The headers then differ from the prefabricated
    /// ones: the session builds its own from here.
    fn splice(&mut self, packet: u32, ns: u64, now: Instant) {
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        let cut = rtp_ticks(self.stream_ns(now), clock);
        self.seq0 = self.next_seq().wrapping_sub(packet as u16);
        self.ts0 = self
            .ts0
            .wrapping_add(cut)
            .wrapping_sub(rtp_ticks(ns, clock));
        self.build_headers();
    }

    pub(crate) fn start(&mut self, at: Instant, origin_ns: u64) {
        self.state = State::Playing(Clock {
            t0: at,
            origin_ns,
            speed: self.speed,
        });
        self.next_report = at;
        self.starting = true;
        self.started = Some(at);
        self.start_waits = 0;
        self.hold = None;
        self.tell_storage(Mode::Playing);
    }

    pub(crate) fn pause(&mut self, now: Instant) {
        if let State::Playing(_) = self.state {
            self.position_ns = self.position_at(now);
            self.clock_ns = self.stream_ns(now);
            self.state = State::Stopped;
            self.tell_storage(Mode::Paused);
        }
    }

    fn playing(&self) -> Option<Clock> {
        match self.state {
            State::Playing(c) => Some(c),
            _ => None,
        }
    }

    /// RFC 2326 `Speed` of the next PLAY's delivery, in millionths.
    pub(crate) fn set_speed(&mut self, speed: u32) {
        self.speed = speed.max(1);
    }

    pub(crate) fn is_interleaved(&self) -> bool {
        matches!(self.output, Output::Interleaved { .. })
    }

    /// Adds to `batch` the due repair packets of a finished block, or else
    /// a burst of every source packet due by `now + burst` (at most
    /// [`MAX_BURST_PACKETS`], ending at a block's end when the session
    /// sends repair packets; prefabricated ones when the title has them and
    /// `prefab`); returns how many of each it added.
    pub(crate) fn collect<'a>(
        &'a self,
        now: Instant,
        burst: Duration,
        prefab: bool,
        batch: &mut Batch<'a>,
    ) -> Planned {
        let mut planned = Planned::default();
        let (Some(clock), Output::Udp { rtp, rtp_peer, .. }) = (self.playing(), &self.output)
        else {
            return planned;
        };
        if let (Some(r), Some(pending)) = (&self.repair, self.repair_pending()) {
            let Output::Udp { rtp, rtp_peer, .. } = &r.output else {
                return planned;
            };
            let first = batch.packets.len();
            let mut seq = r.seq;
            for esi in pending.esi..u16::MAX {
                if batch.packets.len() - first >= MAX_BURST_PACKETS {
                    break;
                }
                let Some(packet) = self.repair_packet(&self.title, r, pending, esi, seq) else {
                    break;
                };
                batch.packets.push(packet);
                seq = seq.wrapping_add(1);
            }
            planned.repair = batch.close_burst(first, rtp, *rtp_peer);
            return planned;
        }
        let Some(track) = self.title.index().track(self.track) else {
            return planned;
        };
        let Some(limit_ns) = clock.due_by(now + burst) else {
            return planned;
        };
        let pt = track.payload_type();
        let first = batch.packets.len();
        let ready = self.next as usize + self.ready() as usize;
        let end = self
            .block_end()
            .unwrap_or(usize::MAX)
            .min(ready)
            .min(self.run_end());
        for i in self.next as usize..end {
            let Some(rec) = track.packet(i) else { break };
            if self.due_ns(i as u32, &rec) > limit_ns
                || batch.packets.len() - first >= MAX_BURST_PACKETS
            {
                break;
            }
            let Some(packet) = self.packet(&self.title, pt, &rec, i, prefab) else {
                break;
            };
            batch.packets.push(packet);
            if self.ends_burst(i as u32, &rec) {
                break;
            }
        }
        planned.source = batch.close_burst(first, rtp, *rtp_peer);
        planned
    }

    /// Repair packet `esi` (the block's repair index j; its ESI on the wire
    /// is k + j) of a finished block as it leaves: the RTP header
    /// (sequence `seq`, the timestamp of the block's first source packet as
    /// sent), the FEC payload ID, and the repair symbol by reference into
    /// the sidecar. `None` past the block's last repair packet.
    fn repair_packet<'t>(
        &self,
        title: &'t Title,
        r: &'t Repair,
        pending: PendingRepair,
        esi: u16,
        seq: u16,
    ) -> Option<Packet<'t>> {
        let blk = title.fec(self.track)?.block(pending.block)?;
        let (fd, offset, symbol) = match &r.live {
            Some(live) if esi < blk.repair_count => (title.fd(), 0, live.repair(esi.into())?),
            Some(_) => return None,
            None => title.repair_symbol(self.track, pending.block, esi)?,
        };
        let first = title
            .index()
            .track(self.track)?
            .packet(usize::try_from(blk.first_packet).ok()?)?;
        let mut header = [0u8; rtp::RTP_HEADER_LEN];
        let ts = self.ts0.wrapping_add(first.rtp_ts);
        rtp::write_header(&mut header, r.pt, false, seq, ts, r.ssrc);
        let id = RepairHeader::new(pending.block, blk.source_count, esi, pending.seq_base);
        Some(Packet::new(&header, &id.to_bytes(), symbol, fd, offset))
    }

    /// Moves past `sent` repair packets that left; the block is done when
    /// its last one has.
    fn account_repair(&mut self, sent: usize, p: &mut Pacing) {
        let Some(r) = &mut self.repair else { return };
        let Some(pending) = &mut r.pending else {
            return;
        };
        let (m, len) = self
            .title
            .fec(self.track)
            .and_then(|f| f.block(pending.block))
            .map_or((0, 0), |b| {
                (b.repair_count, REPAIR_HEADER_LEN as u32 + b.symbol_len)
            });
        pending.esi = pending.esi.saturating_add(sent as u16);
        r.seq = r.seq.wrapping_add(sent as u16);
        r.packets = r.packets.wrapping_add(sent as u32);
        if sent > 0 {
            self.last_sent = Some(p.now);
        }
        r.octets = r.octets.wrapping_add(len.wrapping_mul(sent as u32));
        p.stats.repair_packets += sent as u64;
        if pending.esi >= m {
            r.pending = None;
        }
    }

    /// Packet `i` (record `rec`) as it leaves: prefabricated when the title
    /// has it and `prefab`, else the RTP header (the session's sequence
    /// base, timestamp offset and SSRC), the record's payload-header bytes
    /// and its file runs in `title`. `None` when a run lies outside the
    /// mapping.
    fn packet<'t>(
        &self,
        title: &'t Title,
        pt: u8,
        rec: &PacketRecord,
        i: usize,
        prefab: bool,
    ) -> Option<Packet<'t>> {
        if prefab && self.prefab {
            let (offset, bytes) = title.prefab(self.track)?.packet(i)?;
            return Some(Packet::prefabricated(bytes, title.prefab_fd()?, offset));
        }
        let (run1, run2) = title.runs(rec)?;
        let mut header = [0u8; rtp::RTP_HEADER_LEN];
        let (seq, ts) = match &self.trick {
            Some(t) => {
                let seq = t
                    .seq
                    .wrapping_add((i as u32).wrapping_sub(self.next) as u16);
                (seq, self.ts0.wrapping_add(t.rtp_ts()))
            }
            None => (
                self.seq0.wrapping_add(i as u16),
                self.ts0.wrapping_add(rec.rtp_ts),
            ),
        };
        rtp::write_header(&mut header, pt, rec.marker(), seq, ts, self.ssrc);
        Some(
            Packet::new(&header, rec.prefix(), run1, title.fd(), rec.offset)
                .with_second_run(run2, rec.offset2()),
        )
    }

    /// Accounts for the `sent` of `planned` packets the data path sent, sends
    /// RTCP when due, and says when the session wants the engine next.
    pub(crate) fn advance(
        &mut self,
        planned: Planned,
        sent: Planned,
        p: &mut Pacing,
    ) -> Option<Instant> {
        let clock = self.playing()?;
        if self.storage_failed() {
            return self.end_unreadable(p);
        }
        if planned == Planned::default() && self.more() && self.ready() == 0 {
            return self.not_ready(p);
        }
        if planned == Planned::default()
            && let Some(r) = &mut self.repair
            && r.pending.take().is_some()
        {
            tracing::warn!(
                ssrc = r.ssrc,
                "repair packets of a block unreadable; skipped"
            );
        }
        if planned.repair > 0 {
            self.account_repair(sent.repair, p);
            if sent.repair < planned.repair {
                self.hold = Some(Hold::Socket);
                return Some(p.now + RETRY);
            }
            return self.after_sending(clock, p);
        }
        let (planned, sent) = (planned.source, sent.source);
        let title = self.title.clone();
        let Some(track) = title.index().track(self.track) else {
            self.state = State::Ended;
            return None;
        };
        if planned == 0 && self.more() && title.runs(&track.packet(self.next as usize)?).is_none() {
            tracing::warn!(
                ssrc = self.ssrc,
                "media file shrank under a playing session; stopping it"
            );
            self.state = State::Ended;
            return None;
        }
        self.account(track, sent, clock, p);
        if sent < planned {
            // The socket is full: try again shortly.
            self.hold = Some(Hold::Socket);
            return Some(p.now + RETRY);
        }
        self.after_sending(clock, p)
    }

    /// Sends what is due through the RTSP connection (TCP interleaved), many
    /// frames per `writev`.
    pub(crate) fn pump_interleaved(&mut self, p: &mut Pacing) -> Option<Instant> {
        let clock = self.playing()?;
        let Output::Interleaved {
            conn, rtp_channel, ..
        } = self.output
        else {
            return None;
        };
        if self.storage_failed() {
            return self.end_unreadable(p);
        }
        let title = self.title.clone();
        let track = title.index().track(self.track)?;
        let limit_ns = clock.due_by(p.now + p.burst);
        let pt = track.payload_type();
        // A stalled client's connection takes nothing before its next try:
        // build no frames for it.
        if p.connections.get(&conn).is_some_and(|c| !c.may_try(p.now)) {
            return Some(self.connection_full(conn, p));
        }
        loop {
            if !self.pump_repair_interleaved(&title, p) {
                return Some(self.connection_full(conn, p));
            }
            let ready = self.ready();
            if ready == 0 && self.more() {
                return self.not_ready(p);
            }
            let ready = self.next as usize + ready as usize;
            let end = self
                .block_end()
                .unwrap_or(usize::MAX)
                .min(ready)
                .min(self.run_end());
            let mut packets: [Option<Packet<'_>>; MAX_FRAMES] = [None; MAX_FRAMES];
            let mut n = 0;
            while n < MAX_FRAMES && (self.next as usize + n) < end {
                let i = self.next as usize + n;
                let Some(rec) = track.packet(i) else {
                    break;
                };
                if limit_ns.is_none_or(|l| self.due_ns(i as u32, &rec) > l) {
                    break;
                }
                let Some(packet) = self.packet(&title, pt, &rec, i, true) else {
                    if n == 0 {
                        tracing::warn!(
                            ssrc = self.ssrc,
                            "media file shrank under a playing session; stopping it"
                        );
                        self.state = State::Ended;
                        return None;
                    }
                    break;
                };
                packets[n] = Some(packet);
                n += 1;
                if self.ends_burst(i as u32, &rec) {
                    break;
                }
            }
            if n == 0 {
                break;
            }
            let mut frames: [Frame<'_>; MAX_FRAMES] = [[&[]; 3]; MAX_FRAMES];
            for (frame, p) in frames.iter_mut().zip(packets.iter().flatten()) {
                *frame = [p.head(), p.payload, p.payload2];
            }
            let Some(c) = p.connections.get_mut(&conn) else {
                break;
            };
            let (taken, broken) = c.send_frames(rtp_channel, &frames[..n], p.now);
            let taken = if broken { n } else { taken };
            self.account(track, taken, clock, p);
            if taken < n {
                return Some(self.connection_full(conn, p));
            }
        }
        self.after_sending(clock, p)
    }

    /// When a session whose connection was full tries again: the
    /// connection's next try (later and later while its client takes
    /// nothing).
    fn connection_full(&mut self, conn: u64, p: &Pacing) -> Instant {
        self.hold = Some(Hold::Socket);
        p.connections
            .get(&conn)
            .and_then(Connection::retry_at)
            .unwrap_or(p.now + RETRY)
    }

    /// Sends the pending repair packets on the connection; false when it is
    /// full before they all went.
    fn pump_repair_interleaved(&mut self, title: &Title, p: &mut Pacing) -> bool {
        loop {
            let (Some(r), Some(pending)) = (&self.repair, self.repair_pending()) else {
                return true;
            };
            let Output::Interleaved {
                conn, rtp_channel, ..
            } = r.output
            else {
                return true;
            };
            let mut packets: [Option<Packet<'_>>; MAX_FRAMES] = [None; MAX_FRAMES];
            let mut n = 0;
            while n < MAX_FRAMES {
                let esi = pending.esi.saturating_add(n as u16);
                let seq = r.seq.wrapping_add(n as u16);
                let Some(packet) = self.repair_packet(title, r, pending, esi, seq) else {
                    break;
                };
                packets[n] = Some(packet);
                n += 1;
            }
            if n == 0 {
                if let Some(r) = &mut self.repair {
                    r.pending = None;
                }
                return true;
            }
            let mut frames: [Frame<'_>; MAX_FRAMES] = [[&[]; 3]; MAX_FRAMES];
            for (frame, p) in frames.iter_mut().zip(packets.iter().flatten()) {
                *frame = [p.head(), p.payload, p.payload2];
            }
            let Some(c) = p.connections.get_mut(&conn) else {
                return true;
            };
            let (taken, broken) = c.send_frames(rtp_channel, &frames[..n], p.now);
            let taken = if broken { n } else { taken };
            self.account_repair(taken, p);
            if taken < n {
                return false;
            }
        }
    }

    /// Logs the first packet of a PLAY answered at `answered` when it left
    /// (at `sent_at`) long after its schedule on the clock the PLAY started:
    /// a seek's first packets may be due well after the reply (its tracks
    /// start at their own packets), and only the delay beyond that is the
    /// server's. The clock may have slipped since (waiting for storage):
    /// that slip counts.
    fn log_slow_start(&self, track: Track<'_>, answered: Instant, clock: Clock, sent_at: Instant) {
        let Some(rec) = track.packet(self.next as usize) else {
            return;
        };
        let planned = Clock {
            t0: answered,
            ..clock
        };
        let due = planned.due(self.due_ns(self.next, &rec)).max(answered);
        let ms = sent_at.saturating_duration_since(due).as_secs_f64() * 1e3;
        if ms > SLOW_START_MS {
            // Says whose the wait was: the storage layer's (not resident:
            // looked at again every 2 ms) or the engine's.
            tracing::warn!(
                ssrc = self.ssrc,
                not_ready_waits = self.start_waits,
                interleaved = self.is_interleaved(),
                trick = self.trick.is_some(),
                "a session's first packet left {ms:.1} ms after it was due"
            );
        }
    }

    /// Moves past `sent` packets that left: counters for RTCP, lateness for
    /// the engine's statistics; when that finishes a block, its repair
    /// packets are due.
    fn account(&mut self, track: Track<'_>, sent: usize, clock: Clock, p: &mut Pacing) {
        let sent_ns = clock.at(p.sent_at);
        let in_tick = p.sent_at.saturating_duration_since(p.now);
        let mut jumped = false;
        for k in 0..sent as u32 {
            let i = self.next + k;
            let Some(rec) = track.packet(i as usize) else {
                continue;
            };
            let len = rec.payload_len() as u32;
            self.octets = self.octets.wrapping_add(len);
            p.stats.count(
                clock.lateness(self.due_ns(i, &rec), sent_ns),
                len,
                p.start,
                in_tick,
                self.hold,
            );
            match &mut self.trick {
                Some(t) => jumped |= t.sent(track, i, t.ends_frame(i, &rec)),
                None => self.encode_live(track, u64::from(i), &rec),
            }
        }
        if sent > 0 {
            self.last_sent = Some(p.now);
            self.starting = false;
            self.hold = None;
            if let Some(at) = self.started.take() {
                self.log_slow_start(track, at, clock, p.sent_at);
            }
        }
        self.packets = self.packets.wrapping_add(sent as u32);
        self.next += sent as u32;
        if let Some(t) = &self.trick {
            // Trick play sends no repair packets (its blocks are partial).
            if jumped {
                // On to the next key frame: a seek for the storage layer.
                self.next = t.first_packet().unwrap_or(self.next);
                self.tell_storage(Mode::Starting);
            }
            return;
        }
        let looping = matches!(self.at_end, AtEnd::Loop { .. });
        let round_end = u64::from(self.count());
        let (Some(r), Some(fec)) = (&mut self.repair, self.title.fec(self.track)) else {
            return;
        };
        let next = u64::from(self.next);
        // A loop (a broadcast channel's segment) sends the repair packets of
        // every block it touches, after the block's last packet in the
        // loop: receivers take the block's other packets from other
        // channels. Otherwise only whole blocks sent since the seek.
        let finished = (sent > 0)
            .then(|| fec.block_of(next - 1))
            .flatten()
            .and_then(|b| Some((b, fec.block(b)?)))
            .filter(|(_, blk)| match looping {
                true => blk.packets().end == next || next == round_end,
                false => blk.packets().end == next && blk.first_packet >= u64::from(self.floor),
            });
        if let Some((block, blk)) = finished {
            // A session only sends source packets once the previous block's
            // repair packets are out, so none are pending here.
            r.pending = Some(PendingRepair {
                block,
                esi: 0,
                seq_base: self.seq0.wrapping_add(blk.first_packet as u16),
            });
        }
    }

    /// Multiplies packet `i` (just sent) into its block's repair symbols
    /// when the session encodes them on the fly.
    fn encode_live(&mut self, track: Track<'_>, i: u64, rec: &PacketRecord) {
        // Checked first: this runs for every packet sent, and only the
        // bench's live-encoding sessions go past it.
        let Some(live) = self.repair.as_mut().and_then(|r| r.live.as_mut()) else {
            return;
        };
        let Some(fec) = self.title.fec(self.track) else {
            return;
        };
        let Some(blk) = fec.block_of(i).and_then(|b| fec.block(b)) else {
            return;
        };
        let at = (i - blk.first_packet) as usize;
        let Some(first) = track.packet(blk.first_packet as usize) else {
            return;
        };
        let Some((run1, run2)) = self.title.runs(rec) else {
            return;
        };
        let meta = SymbolMeta {
            marker: rec.marker(),
            ts_delta: rec.rtp_ts.wrapping_sub(first.rtp_ts),
        };
        let started = at > 0 || live.start_block(blk.source_count.into()).is_ok();
        if started && let Err(e) = live.add(at, &[rec.prefix(), run1, run2], meta) {
            tracing::warn!("live parity: {e}");
        }
    }

    /// RTCP and the next wake-up once the due packets are out.
    fn after_sending(&mut self, clock: Clock, p: &mut Pacing) -> Option<Instant> {
        if self.repair_pending().is_some() {
            return Some(p.now);
        }
        let wake = if self.more() && self.ready() == 0 {
            // Not resident yet: its due time is in the index page that is not.
            self.hold = Some(Hold::Storage);
            p.now + NOT_READY_RETRY
        } else if self.more() {
            // Wake a quarter burst before the next packet is due: it may
            // leave that early anyway, and a late wake-up (a busy CPU)
            // then costs slack instead of a late packet.
            let ns = match (
                &self.trick,
                self.pace.as_ref().and_then(|p| p.due_ns(self.next)),
            ) {
                (Some(t), _) => t.due_ns(self.next),
                (None, Some(ns)) => ns,
                (None, None) => self.media_time(self.next).0,
            };
            let at = clock.due(ns);
            at.checked_sub(p.burst / 4).unwrap_or(at)
        } else if !matches!(self.at_end, AtEnd::Bye) {
            let end_ns = self.end_ns();
            return self.reach_end(clock.due(end_ns), end_ns, p.now);
        } else {
            let last_ns = self.last_due_ns();
            let last_left = self.last_sent.unwrap_or(p.now);
            let bye_at = clock.due(last_ns).max(last_left) + BYE_DELAY;
            if p.now >= bye_at {
                self.report(p, true);
                self.state = State::Ended;
                return None;
            }
            bye_at
        };
        if p.now >= self.next_report && self.packets > 0 {
            self.report(p, false);
            self.next_report = p.now + p.rtcp_interval;
        }
        Some(wake.min(self.next_report.max(p.now)))
    }

    /// Whether a file of the session's title shrank under its mapping and
    /// was read since ([`Title::damaged`]).
    pub(crate) fn title_damaged(&self) -> bool {
        self.title.damaged()
    }

    /// Ends a session whose title can no longer be read (a burst failed
    /// with EFAULT, [`Self::title_damaged`], or the storage layer found a
    /// file of it changed or unreadable): an RTCP BYE tells the client the
    /// stream ended, and the engine never wakes it again (the client's
    /// TEARDOWN or the session timeout removes it).
    pub(crate) fn end_unreadable(&mut self, p: &mut Pacing) -> Option<Instant> {
        if matches!(self.state, State::Playing(_)) {
            tracing::warn!(
                ssrc = self.ssrc,
                track = self.track,
                "a file of the title changed or cannot be read under a playing session; ending the session"
            );
        }
        self.end(p)
    }

    /// Ends the stream where it stands, playing or paused: RTCP BYE; the
    /// engine never wakes it again.
    pub(crate) fn end(&mut self, p: &mut Pacing) -> Option<Instant> {
        self.report(p, true);
        self.state = State::Ended;
        None
    }

    /// RTCP sender report (RFC 3550 §6.4.1): the wall clock now against the
    /// RTP timestamp the stream's clock has now, so players can sync tracks.
    /// A stopped stream reports (and says BYE) only when it ends; an ended
    /// one has said BYE already.
    fn report(&mut self, p: &mut Pacing, bye: bool) {
        match self.state {
            State::Playing(_) => {}
            State::Stopped if bye => {}
            State::Stopped | State::Ended => return,
        }
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        let media_ns = self.stream_ns(p.now);
        let rtp_now = self.ts0.wrapping_add(rtp_ticks(media_ns, clock));
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let ntp = NtpTime::from_unix(wall);
        let bytes = self
            .report
            .fill(ntp, rtp_now, self.packets, self.octets, bye);
        send_rtcp(&self.output, bytes, p);
        // The repair stream's timestamps are the source's (docs/fec.md), so
        // its report maps the same instant to the same RTP time.
        if let Some(r) = &mut self.repair
            && (r.packets > 0 || bye)
        {
            let bytes = r.report.fill(ntp, rtp_now, r.packets, r.octets, bye);
            send_rtcp(&r.output, bytes, p);
        }
    }
}

fn send_rtcp(output: &Output, bytes: &[u8], p: &mut Pacing) {
    match output {
        Output::Udp {
            rtcp, rtcp_peer, ..
        } => {
            let _ = rtcp.socket().send_to(bytes, &(*rtcp_peer).into());
        }
        Output::Interleaved {
            conn, rtcp_channel, ..
        } => {
            if let Some(c) = p.connections.get_mut(conn) {
                c.send_frame(*rtcp_channel, bytes, p.now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use std::{
        io::Read,
        net::{TcpListener, TcpStream},
        os::fd::OwnedFd,
    };

    use fjord_media::{
        index::{self, Index},
        no_parity,
        synthetic::{write_constant_rate, write_video_track},
    };
    use fjord_proto::rtcp::{RtcpInfo, parse_compound};

    use super::*;
    use crate::datapath;

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

    #[test]
    fn packets_leave_on_schedule_within_the_burst_limit() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let info = s.play(Start::Resume, Until::Previous, 1, Instant::now());
        assert_eq!(
            (info.packet, info.seq, info.rtptime),
            (0, 65534, u32::MAX - 100)
        );

        let t0 = Instant::now();
        s.start(t0, 0);
        // Due at 0 and 10 ms: inside the 15 ms burst; 20 ms is not.
        let (a, wake) = tick(&mut s, t0, usize::MAX);
        // Wake a quarter burst before the next one is due.
        let slack = Duration::from_millis(15) / 4;
        assert_eq!(a.len(), 2);
        assert_eq!(wake, Some(t0 + Duration::from_millis(20) - slack));
        let (b, wake) = tick(&mut s, t0 + Duration::from_millis(20) - slack, usize::MAX);
        assert_eq!(wake, Some(t0 + Duration::from_millis(40) - slack));
        let all: Vec<_> = a.into_iter().chain(b).collect();
        let seqs: Vec<u16> = all.iter().map(|p| p.0).collect();
        assert_eq!(seqs, [65534, 65535, 0, 1], "sequence numbers wrap");
        assert_eq!(
            all[2].1,
            (u32::MAX - 100).wrapping_add(1800),
            "timestamps wrap"
        );
        assert!(
            all.iter()
                .enumerate()
                .all(|(i, p)| p.2 == vec![i as u8; 188])
        );
    }

    /// RFC 2326 `Speed` 2: the same packets, with the same timestamps,
    /// due twice as fast.
    #[test]
    fn a_faster_speed_sends_the_same_packets_sooner() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        s.set_speed(2 * REAL_TIME);
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        // The 15 ms burst covers 30 ms of the title: packets 0-3.
        let (a, wake) = tick(&mut s, t0, usize::MAX);
        assert_eq!(a.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(a[3].1.wrapping_sub(a[0].1), 30 * 90, "timestamps as stored");
        let slack = Duration::from_millis(15) / 4;
        assert_eq!(
            wake,
            Some(t0 + Duration::from_millis(20) - slack),
            "40 ms in 20"
        );
    }

    #[test]
    fn a_full_socket_keeps_the_rest_for_the_next_tick() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        let late = t0 + Duration::from_millis(50);
        let mut stats = ThreadStats::default();
        let (a, wake) = tick_counted(&mut s, late, 3, &mut stats);
        assert_eq!(a.len(), 3);
        assert_eq!(wake, Some(late + RETRY));
        // Late in a tick on time, with nothing waited for: held, no reason.
        assert_eq!((stats.late, stats.late_socket), (3, 0));
        let mut stats = ThreadStats::default();
        let (b, _) = tick_counted(&mut s, late + RETRY, usize::MAX, &mut stats);
        assert_eq!(b[0].2, vec![3; 188], "resumes with the first unsent packet");
        assert_eq!(b[0].0, a[2].0.wrapping_add(1));
        // Packets 3 and 4 (due at 30 and 40 ms) late after the full socket.
        assert_eq!((stats.late, stats.late_socket), (2, 2));
        let (c, _) = tick_counted(&mut s, t0 + Duration::from_millis(90), 9, &mut stats);
        // Packets 7-9; 7 and 8 late, with no full socket since a send.
        assert_eq!(c.len(), 3);
        assert_eq!((stats.late, stats.late_socket), (4, 2));
    }

    #[test]
    fn pause_resume_and_seek_continue_the_sequence_and_the_rtp_clock() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        assert_eq!(tick(&mut s, t0, usize::MAX).0.len(), 2);
        s.pause(t0 + Duration::from_millis(15));
        assert_eq!(
            tick(&mut s, t0 + Duration::from_secs(1), usize::MAX),
            (vec![], None)
        );

        // Resumes where the clock stopped: packet 2 (due at 20 ms) is next.
        let info = s.play(Start::Resume, Until::Previous, 1, Instant::now());
        assert_eq!((info.packet, info.seq, info.time_ns), (2, 0, 15 * MS));
        assert_eq!(info.rtptime, (u32::MAX - 100).wrapping_add(1350));
        let t1 = t0 + Duration::from_secs(2);
        s.start(t1, info.time_ns);
        let (c, wake) = tick(&mut s, t1, usize::MAX);
        assert_eq!(c[0], (0, (u32::MAX - 100).wrapping_add(1800), vec![2; 188]));
        assert_eq!(c.len(), 2, "20 and 30 ms are within the burst of 15 ms");
        assert_eq!(
            wake,
            Some(t1 + Duration::from_millis(25) - Duration::from_millis(15) / 4)
        );

        // A seek on a track without sync points enters at the first packet
        // at or after the time. Packets 0-3 have left: packet 8 goes on
        // with the next sequence number, and the RTP clock goes on from
        // where the stream stands (40 ms) as if 75 ms followed.
        let info = s.play(
            Start::at(&s.title.clone(), 0, 75 * MS),
            Until::Previous,
            1,
            t1 + Duration::from_millis(25),
        );
        assert_eq!((info.packet, info.seq), (8, 65534u16.wrapping_add(4)));
        let cut = (u32::MAX - 100).wrapping_add(40 * 90);
        assert_eq!(info.rtptime, cut);
        s.start(t1, info.time_ns);
        let (d, _) = tick(&mut s, t1, usize::MAX);
        assert_eq!(d.last().unwrap().2, vec![9; 188]);
        assert_eq!(d[0].0, info.seq, "RTP-Info names the first packet's number");
        assert_eq!(
            d[0].1,
            cut.wrapping_add(5 * 90),
            "packet 8 is 5 ms after 75 ms"
        );
        assert_eq!(d[1].0, info.seq.wrapping_add(1));
    }

    /// A session whose header fields are the title's sends the packet file's
    /// bytes, which are exactly the packets it would build, one contiguous
    /// run per burst; a session with its own fields builds its headers.
    #[test]
    fn prefabricated_packets_are_the_packets_a_session_builds() {
        let dir = tempfile::tempdir().unwrap();
        let (title, expected) = prefabricated_title(dir.path());
        let ids = title.prefab_ids(0).unwrap();
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let make = |ssrc: u32| {
            let rtp = udp();
            rtp.connect(&rx.local_addr().unwrap().into()).unwrap();
            let mut s = Session::new(
                SessionSpec {
                    id: 1,
                    title: title.clone(),
                    track: 0,
                    ssrc,
                    seq0: ids.seq0,
                    ts0: ids.ts0,
                    output: Output::Udp {
                        rtp: rtp.into(),
                        rtp_peer: rx.local_addr().unwrap(),
                        rtcp: udp().into(),
                        rtcp_peer: "127.0.0.1:9".parse().unwrap(),
                    },
                },
                "test",
            );
            s.play(Start::Resume, Until::Previous, 1, Instant::now());
            s
        };
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(1);
        let burst = Duration::from_millis(15);
        let (mut prefab, mut built, mut own) = (make(ids.ssrc), make(ids.ssrc), make(!ids.ssrc));
        let (mut a, mut b, mut c) = (Batch::default(), Batch::default(), Batch::default());
        for s in [&mut prefab, &mut built, &mut own] {
            s.start(t0, 0);
        }
        assert_eq!(prefab.collect(late, burst, true, &mut a).source, 12);
        assert_eq!(built.collect(late, burst, false, &mut b).source, 12);
        assert_eq!(own.collect(late, burst, true, &mut c).source, 12);
        for (i, want) in expected.iter().enumerate() {
            let (p, q) = (&a.packets[i], &b.packets[i]);
            assert!(p.head().is_empty() && !q.head().is_empty(), "packet {i}");
            assert_eq!(
                p.parts().collect::<Vec<_>>().concat(),
                q.parts().collect::<Vec<_>>().concat()
            );
            assert_eq!(
                sent_packet(p),
                (
                    ids.seq0.wrapping_add(i as u16),
                    ids.ts0.wrapping_add(i as u32 * 900),
                    want.clone()
                )
            );
            let own = c.packets[i].head();
            assert_eq!(
                own[8..12],
                (!ids.ssrc).to_be_bytes(),
                "packet {i}: own SSRC"
            );
            if i > 0 {
                let prev = a.packets[i - 1].payload.as_ptr_range().end;
                assert_eq!(
                    prev,
                    p.payload.as_ptr(),
                    "packet {i} follows packet {}",
                    i - 1
                );
            }
        }
        // Over UDP the burst leaves as it was made.
        let mut sent = [0];
        let mut path = datapath::by_name("gso").unwrap();
        path.send(&a, &mut sent).unwrap();
        assert_eq!(sent, [12]);
        let mut buf = [0u8; 2048];
        for (i, want) in expected.iter().enumerate() {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[rtp::RTP_HEADER_LEN..n], &want[..], "UDP packet {i}");
        }
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

    /// The packet file's headers number the title's packets in order: a
    /// session that seeks after packets have left builds its own headers,
    /// numbered on from the last one sent, over the same payloads.
    #[test]
    fn a_seek_after_packets_left_builds_headers_that_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let (title, expected) = prefabricated_title(dir.path());
        let ids = title.prefab_ids(0).unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title.clone(), &rtcp);
        (s.ssrc, s.seq0, s.ts0) = (ids.ssrc, ids.seq0, ids.ts0);
        s.prefab = true;
        let at = |ms: u64| Start::At {
            ns: ms * MS,
            packet: (ms / 10) as u32,
        };
        s.play(at(20), Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 20 * MS);
        let (first, _) = tick(&mut s, t0, usize::MAX);
        assert_eq!(first.len(), 2, "packets 2 and 3 (the burst is 15 ms)");
        assert!(s.prefab, "a first PLAY at a position sends the packet file");

        let info = s.play(at(80), Until::Previous, 1, t0 + Duration::from_millis(20));
        assert!(!s.prefab);
        assert_eq!((info.packet, info.seq), (8, ids.seq0.wrapping_add(4)));
        s.start(t0, 80 * MS);
        let mut batch = Batch::default();
        assert_eq!(
            s.collect(t0, Duration::from_millis(15), true, &mut batch)
                .source,
            2
        );
        for (k, p) in batch.packets.iter().enumerate() {
            assert!(!p.head().is_empty(), "packet {k} has a built header");
            let (seq, ts, payload) = sent_packet(p);
            assert_eq!(seq, info.seq.wrapping_add(k as u16));
            assert_eq!(ts, info.rtptime.wrapping_add(k as u32 * 900));
            assert_eq!(payload, expected[8 + k]);
        }
    }

    /// A broadcast channel: packets 2..5 over and over, each time with the
    /// packet file's own headers, at a tenth of real time.
    #[test]
    fn a_loop_repeats_its_packets_as_stored_at_its_speed() {
        let dir = tempfile::tempdir().unwrap();
        let (title, expected) = prefabricated_title(dir.path());
        let ids = title.prefab_ids(0).unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title.clone(), &rtcp);
        (s.ssrc, s.seq0, s.ts0) = (ids.ssrc, ids.seq0, ids.ts0);
        s.prefab = true;
        s.set_speed(REAL_TIME / 10);
        let start = Start::At {
            ns: 20 * MS,
            packet: 2,
        };
        let until = Until::Loop {
            ns: 50 * MS,
            packet: 5,
            period: Duration::ZERO,
        };
        s.play(start, until, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 20 * MS);
        let mut got = Vec::new();
        let mut now = t0;
        // 10 ms of title time per packet take 100 ms at a tenth of speed.
        while now < t0 + Duration::from_millis(700) {
            let (sent, _) = tick(&mut s, now, usize::MAX);
            got.extend(sent.into_iter().map(|(seq, _, payload)| (seq, payload)));
            now += Duration::from_millis(20);
        }
        assert!(s.prefab, "a loop keeps the stored headers");
        let want: Vec<(u16, Vec<u8>)> = [2, 3, 4, 2, 3, 4, 2]
            .iter()
            .map(|&i| (ids.seq0.wrapping_add(i as u16), expected[i].clone()))
            .collect();
        assert_eq!(got, want, "seven packets in 700 ms, round and round");
    }

    /// A paced channel: packets 2..5 at 0, 5 and 30 ms of each round, a
    /// round every 100 ms, whatever their media times.
    #[test]
    fn a_paced_loop_sends_at_its_offsets_each_period() {
        let dir = tempfile::tempdir().unwrap();
        let (title, _) = prefabricated_title(dir.path());
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title.clone(), &rtcp);
        s.pace(2, vec![0, 5 * MS, 30 * MS].into_boxed_slice());
        let start = Start::At {
            ns: 20 * MS,
            packet: 2,
        };
        let until = Until::Loop {
            ns: 20 * MS + 31 * MS,
            packet: 5,
            period: Duration::from_millis(100),
        };
        s.play(start, until, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 20 * MS);
        let mut sent_at = Vec::new();
        for ms in 0..250 {
            let now = t0 + Duration::from_millis(ms);
            let (sent, _) = tick(&mut s, now, usize::MAX);
            sent_at.extend(sent.iter().map(|_| ms));
        }
        // A packet leaves up to a burst (15 ms) early: by its due time.
        let due = [0, 5, 30, 100, 105, 130, 200, 205, 230];
        assert_eq!(sent_at.len(), due.len(), "{sent_at:?}");
        for (at, due) in sent_at.iter().zip(due) {
            assert!(
                *at <= due && due < at + 16,
                "sent at {at} ms, due {due}: {sent_at:?}"
            );
        }
    }

    #[test]
    fn trick_play_sends_key_frames_and_the_stream_goes_on_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (media, index) = crate::trick::tests::gop_title(dir.path());
        let title = Arc::new(Title::new(index, &media).unwrap());
        let sync = |s: usize| title.index().track(0).unwrap().sync_point(s).unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title.clone(), &rtcp);
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        let (first, _) = tick(&mut s, t0, usize::MAX);
        assert_eq!(first.len(), 10, "the first key frame");

        let at = |k: usize| Start::At {
            ns: sync(k).time_ns,
            packet: sync(k).packet,
        };
        let info = s.play(at(2), Until::End, 4, t0 + Duration::from_millis(20));
        assert_eq!(
            info.seq,
            65534u16.wrapping_add(10),
            "on from the last packet sent"
        );
        assert_eq!(info.time_ns, sync(2).time_ns);
        let t1 = t0 + Duration::from_millis(40);
        s.start(t1, info.time_ns);
        let mut got = vec![];
        for ms in (0..2_000).step_by(5) {
            let (sent, _) = tick(&mut s, t1 + Duration::from_millis(ms), usize::MAX);
            got.extend(sent.into_iter().map(|p| (ms, p)));
        }
        // Key frames 2..9 (10 packets each), a quarter second apart.
        assert_eq!(got.len(), 80);
        for (n, (ms, (seq, ts, payload))) in got.iter().enumerate() {
            let (frame, k) = (2 + n / 10, n % 10);
            let packet = sync(frame).packet as usize + k;
            assert_eq!(payload[0], packet as u8, "packet {n}: key frame {frame}");
            assert_eq!(*seq, info.seq.wrapping_add(n as u16));
            let due_ms = (frame as u64 - 2) * 250;
            assert!(
                *ms + 15 >= due_ms && *ms <= due_ms + 250,
                "{n} left at {ms}"
            );
            let ticks = (frame as u32 - 2) * 250 * 90;
            assert_eq!(*ts, info.rtptime.wrapping_add(ticks));
        }

        // Back to every packet from 5 s: the numbers go on.
        let back = s.play(at(5), Until::End, 1, t1 + Duration::from_secs(2));
        assert_eq!(back.seq, info.seq.wrapping_add(80));
        let t2 = t1 + Duration::from_secs(3);
        s.start(t2, back.time_ns);
        let (sent, _) = tick(&mut s, t2, usize::MAX);
        let first = &sent[0];
        assert_eq!((first.0, first.2[0]), (back.seq, sync(5).packet as u8));
        assert_eq!(sent.len(), 10, "the key frame only (a 15 ms burst)");
    }

    #[test]
    fn end_of_stream_sends_a_sender_report_with_bye() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        let (all, wake) = tick(&mut s, t0 + Duration::from_millis(90), usize::MAX);
        assert_eq!(all.len(), 10);
        let wake = wake.unwrap();
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
        assert_eq!(tick(&mut s, wake, usize::MAX).1, None);
        let n = rtcp.recv(&mut buf).unwrap();
        let last = parse_compound(&buf[..n]).unwrap();
        assert!(last.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })));
    }

    /// `Range: npt=a-b`: the stream ends with BYE at b, a PLAY without a
    /// Range keeps that end, and one with an open end plays to the end.
    #[test]
    fn a_range_end_stops_the_stream_there() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let title = s.title.clone();
        let info = s.play(
            Start::at(&title, 0, 20 * MS),
            Until::at(&title, 0, 55 * MS),
            1,
            Instant::now(),
        );
        assert_eq!((info.packet, info.end_ns), (2, 55 * MS));
        let t0 = Instant::now();
        s.start(t0, 20 * MS);
        let (c, _) = tick(&mut s, t0, usize::MAX);
        assert_eq!(c.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [2, 3]);
        s.pause(t0 + Duration::from_millis(12));
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        s.start(t0, 32 * MS);
        let late = t0 + Duration::from_secs(1);
        let (c, wake) = tick(&mut s, late, usize::MAX);
        let sent: Vec<u8> = c.iter().map(|p| p.2[0]).collect();
        assert_eq!(sent, [4, 5], "packet 6 (60 ms) is past the end");
        assert_eq!(wake, Some(late + BYE_DELAY));
        assert_eq!(tick(&mut s, late + BYE_DELAY, usize::MAX).1, None);
        let mut buf = [0u8; 512];
        let bye = (0..3).any(|_| {
            let n = rtcp.recv(&mut buf).unwrap_or(0);
            parse_compound(&buf[..n])
                .is_ok_and(|r| r.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })))
        });
        assert!(bye, "BYE at the range's end");

        let info = s.play(Start::at(&title, 0, 70 * MS), Until::End, 1, Instant::now());
        assert_eq!(info.end_ns, title.index().duration_ns());
        s.start(late, 70 * MS);
        let (c, _) = tick(&mut s, late + Duration::from_secs(1), usize::MAX);
        assert_eq!(c.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [7, 8, 9]);
    }

    /// A PLAY that comes while one plays to a given end waits for that end
    /// and goes on there on the same clock, the sequence numbers and RTP
    /// time as its reply predicted; no BYE between the two.
    #[test]
    fn a_pipelined_play_goes_on_where_the_playing_one_ends() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let title = s.title.clone();
        s.play(
            Start::Resume,
            Until::at(&title, 0, 30 * MS),
            1,
            Instant::now(),
        );
        let t0 = Instant::now();
        s.start(t0, 0);
        let next = s
            .queue(Start::at(&title, 0, 60 * MS), Until::End)
            .expect("queued behind the range playing");
        assert!(next.queued);
        assert_eq!((next.packet, next.seq), (6, 65534u16.wrapping_add(3)));
        let mut sent = vec![];
        let mut at = t0;
        while let (c, Some(wake)) = tick(&mut s, at, usize::MAX) {
            sent.extend(c);
            at = wake.max(at + Duration::from_millis(1));
        }
        let ids: Vec<u8> = sent.iter().map(|p| p.2[0]).collect();
        assert_eq!(ids, [0, 1, 2, 6, 7, 8, 9]);
        let seqs: Vec<u16> = sent.iter().map(|p| p.0).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
            "{seqs:?}"
        );
        assert_eq!(
            sent[3].1, next.rtptime,
            "packet 6 has the RTP time the reply named"
        );
        assert_eq!(
            sent[3].1.wrapping_sub(sent[2].1),
            10 * 90,
            "10 ms after packet 2"
        );
        let mut buf = [0u8; 512];
        rtcp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut byes = 0;
        while let Ok(n) = rtcp.recv(&mut buf) {
            let bye = parse_compound(&buf[..n])
                .is_ok_and(|r| r.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })));
            byes += usize::from(bye);
        }
        assert_eq!(byes, 1, "one BYE, at the end of the second range");
        assert!(
            s.queue(Start::at(&title, 0, 0), Until::End).is_none(),
            "nothing is queued behind an ended stream"
        );
    }

    /// A PAUSE with a Range stops the stream at its pause point without
    /// BYE; a PLAY then plays on to the range's own end.
    #[test]
    fn a_pause_point_stops_the_stream_there_and_play_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title(dir.path()), &rtcp);
        let title = s.title.clone();
        s.play(
            Start::Resume,
            Until::at(&title, 0, 80 * MS),
            1,
            Instant::now(),
        );
        let t0 = Instant::now();
        s.start(t0, 0);
        assert!(!s.pause_at(0, 0, t0 + Duration::from_millis(20)), "behind");
        assert!(s.pause_at(4, 40 * MS, t0));
        let mut sent = vec![];
        let mut at = t0;
        while let (c, Some(wake)) = tick(&mut s, at, usize::MAX) {
            sent.extend(c);
            at = wake.max(at + Duration::from_millis(1));
        }
        assert_eq!(
            sent.iter().map(|p| p.2[0]).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(s.position_at(at), 40 * MS);
        let info = s.play(Start::Resume, Until::Previous, 1, at);
        assert_eq!((info.packet, info.end_ns), (4, 80 * MS));
        s.start(at, info.time_ns);
        let (c, _) = tick(&mut s, at + Duration::from_secs(1), usize::MAX);
        assert_eq!(c.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [4, 5, 6, 7]);
    }

    /// Payload-header bytes and both file runs arrive as the RTP payload,
    /// over UDP (through a data path) and interleaved in the RTSP
    /// connection; RTCP counts them as payload octets.
    #[test]
    fn payload_headers_and_split_runs_arrive_intact_over_udp_and_tcp() {
        let dir = tempfile::tempdir().unwrap();
        let (title, expected) = prefixed_title(dir.path());
        let t0 = Instant::now();
        let late = t0 + Duration::from_secs(1);

        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let rtp = udp();
        rtp.connect(&rx.local_addr().unwrap().into()).unwrap();
        let mut s = session_with(
            title.clone(),
            Output::Udp {
                rtp: rtp.into(),
                rtp_peer: rx.local_addr().unwrap(),
                rtcp: udp().into(),
                rtcp_peer: rx.local_addr().unwrap(),
            },
        );
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        s.start(t0, 0);
        let mut batch = Batch::default();
        assert_eq!(
            s.collect(late, Duration::from_millis(15), true, &mut batch),
            Planned {
                source: 12,
                repair: 0
            }
        );
        let mut sent = [0];
        let mut path = datapath::by_name("mmap-writev").unwrap();
        path.send(&batch, &mut sent).unwrap();
        assert_eq!(sent, [12]);
        let mut buf = [0u8; 2048];
        for (i, want) in expected.iter().enumerate() {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(buf[1] & 0x7f, 96, "UDP packet {i}: payload type");
            assert_eq!(
                &buf[rtp::RTP_HEADER_LEN..n],
                &want[..],
                "UDP packet {i}: payload"
            );
        }

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let (server, _) = listener.accept().unwrap();
        let mut connections = HashMap::new();
        connections.insert(
            7,
            Connection::new(OwnedFd::from(server), Duration::from_secs(10)).unwrap(),
        );
        let mut s = session_with(
            title,
            Output::Interleaved {
                conn: 7,
                rtp_channel: 0,
                rtcp_channel: 1,
            },
        );
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        s.start(t0, 0);
        let mut stats = ThreadStats::default();
        let mut p = Pacing {
            now: late,
            start: TickStart::default(),
            sent_at: late,
            stats: &mut stats,
            burst: Duration::from_millis(15),
            rtcp_interval: Duration::from_secs(5),
            connections: &mut connections,
        };
        s.pump_interleaved(&mut p);
        let mut rtp_frames = vec![];
        let mut octets = None;
        while rtp_frames.len() < expected.len() || octets.is_none() {
            let mut prefix = [0u8; 4];
            client.read_exact(&mut prefix).unwrap();
            assert_eq!(prefix[0], b'$');
            let mut frame = vec![0; usize::from(u16::from_be_bytes([prefix[2], prefix[3]]))];
            client.read_exact(&mut frame).unwrap();
            if prefix[1] == 0 {
                rtp_frames.push(frame[rtp::RTP_HEADER_LEN..].to_vec());
            } else if let Some(RtcpInfo::SenderReport { octets: o, .. }) =
                parse_compound(&frame).unwrap().first()
            {
                octets = Some(*o);
            }
        }
        assert_eq!(rtp_frames, expected, "interleaved payloads");
        let total: usize = expected.iter().map(Vec::len).sum();
        assert_eq!(octets, Some(total as u32), "RTCP payload octets");
    }

    /// With a repair stream, each block's source packets leave in one tick
    /// and its M repair packets in the next, before any packet of the next
    /// block: RTP header of the repair stream (own SSRC and sequence, the
    /// timestamp of the block's first source packet as sent), the FEC
    /// payload ID (`seq_base` = that packet's sequence number) and the
    /// sidecar's bytes, which rebuild lost source packets.
    /// A 10-packet title with 4:2 parity (a short last block), its sidecar
    /// attached; `live`: sessions encode the repair symbols themselves.
    fn protected_title(dir: &std::path::Path, live: bool) -> Title {
        use fjord_fec::{FecChoice, FecParams};

        let media = dir.join("t.ts");
        if !media.exists() {
            let choice = FecChoice::Fixed(FecParams::new(4, 2).unwrap());
            let layouts = fjord_fec::layouts(choice);
            drop(write_constant_rate(&media, 188, 10 * MS, 10, &layouts).unwrap());
            fjord_fec::protect(&media, &mut |_, _| {}).unwrap();
        }
        let index = Index::open(&index::index_path_for(&media)).unwrap();
        let mut title = Title::new(index, &media).unwrap();
        title
            .attach_fec(
                &fjord_fec::sidecar_path_for(&media),
                &index::index_path_for(&media),
                index::Check::Now,
            )
            .unwrap();
        assert!(!live || title.encode_parity_live());
        title
    }

    /// A repair stream (SSRC 0x5678, PT 100) whose RTCP goes to `rtcp`.
    fn repair_spec(seq0: u16, rtcp: &UdpSocket) -> RepairSpec {
        RepairSpec {
            ssrc: 0x5678,
            seq0,
            payload_type: 100,
            output: Output::Udp {
                rtp: udp().into(),
                rtp_peer: "127.0.0.1:9".parse().unwrap(),
                rtcp: udp().into(),
                rtcp_peer: rtcp.local_addr().unwrap(),
            },
        }
    }

    /// Repair symbols encoded on the fly as the packets leave (the bench's
    /// model of a server without stored parity) are the sidecar's bytes,
    /// the short last block included.
    #[test]
    fn live_parity_equals_the_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let repairs = |live: bool| {
            let title = protected_title(dir.path(), live);
            let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut s = session(Arc::new(title), &rtcp);
            let spec = repair_spec(7, &rtcp);
            assert!(s.attach_repair(spec, "test"));
            s.play(Start::Resume, Until::Previous, 1, Instant::now());
            let t0 = Instant::now();
            s.start(t0, 0);
            (0..7)
                .map(|_| tick(&mut s, t0 + Duration::from_secs(1), usize::MAX).0)
                .collect::<Vec<_>>()
        };
        let (stored, live) = (repairs(false), repairs(true));
        assert_eq!(
            stored.iter().map(Vec::len).collect::<Vec<_>>(),
            [4, 2, 4, 2, 2, 2, 0]
        );
        assert!(
            stored == live,
            "live-encoded repair packets differ from the sidecar's"
        );
    }

    /// A broadcast channel's segment, packets 2..7 of blocks 0..4 and
    /// 4..8: every round sends block 0's repair packets after packet 3 and
    /// block 1's after packet 6, the end of the round, though neither
    /// block lies whole in the segment (receivers hold the rest from other
    /// channels).
    #[test]
    fn a_loop_sends_the_repair_packets_of_every_block_it_touches() {
        let dir = tempfile::tempdir().unwrap();
        let title = Arc::new(protected_title(dir.path(), false));
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title.clone(), &rtcp);
        assert!(s.attach_repair(repair_spec(30_000, &rtcp), "test"));
        let start = Start::At {
            ns: 20 * MS,
            packet: 2,
        };
        let until = Until::Loop {
            ns: 70 * MS,
            packet: 7,
            period: Duration::ZERO,
        };
        let info = s.play(start, until, 1, Instant::now());
        let seq0 = info.seq.wrapping_sub(2);
        let t0 = Instant::now();
        s.start(t0, 20 * MS);
        // Each packet sent: `S<index>` or `R<block>`.
        let mut sent = Vec::new();
        let mut now = t0;
        while sent.len() < 18 && now < t0 + Duration::from_secs(2) {
            for (seq, _, payload) in tick(&mut s, now, usize::MAX).0 {
                sent.push(match seq.wrapping_sub(30_000) < 100 {
                    true => format!("R{}", RepairHeader::parse(&payload).unwrap().0.sbn),
                    false => format!("S{}", seq.wrapping_sub(seq0)),
                });
            }
            now += Duration::from_millis(5);
        }
        let round = ["S2", "S3", "R0", "R0", "S4", "S5", "S6", "R1", "R1"];
        assert_eq!(sent, [round, round].concat(), "two rounds");
    }

    #[test]
    fn repair_packets_follow_their_block() {
        use fjord_fec::{BlockDecoder, SourcePacket};

        let dir = tempfile::tempdir().unwrap();
        let title = Arc::new(protected_title(dir.path(), false));
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(title.clone(), &rtcp);
        let repair_output = || repair_spec(65535, &rtcp);
        assert!(s.attach_repair(repair_output(), "test"));
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        let late = t0 + Duration::from_secs(1);
        let mut ticks = vec![];
        for _ in 0..7 {
            ticks.push(tick(&mut s, late, usize::MAX).0);
        }
        let lens: Vec<usize> = ticks.iter().map(Vec::len).collect();
        assert_eq!(lens, [4, 2, 4, 2, 2, 2, 0], "source, repair, source, ...");
        let fec = title.fec(0).unwrap();
        // The repair stream reports for itself and ends with its own BYE;
        // its final report counts every repair packet and payload octet.
        let repair_octets: u32 = (0..3)
            .map(|b| 2 * (REPAIR_HEADER_LEN as u32 + fec.block(b).unwrap().symbol_len))
            .sum();
        // The BYEs leave BYE_DELAY after the last packet did.
        assert!(tick(&mut s, late + BYE_DELAY, usize::MAX).0.is_empty());
        rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 512];
        let last_repair_report = loop {
            let n = rtcp.recv(&mut buf).expect("the repair stream's BYE");
            let items = parse_compound(&buf[..n]).unwrap();
            let bye = items
                .iter()
                .any(|i| matches!(i, RtcpInfo::Bye { ssrcs } if ssrcs == &[0x5678]));
            if bye {
                break items;
            }
        };
        assert!(
            matches!(
                last_repair_report[0],
                RtcpInfo::SenderReport { ssrc: 0x5678, packets: 6, octets, .. } if octets == repair_octets
            ),
            "{last_repair_report:?}"
        );
        let mut repair_seq = 65535u16;
        for (b, (sources, repairs)) in ticks.chunks(2).take(3).map(|t| (&t[0], &t[1])).enumerate() {
            let blk = fec.block(b as u64).unwrap();
            let ts_base = sources[0].1;
            let mut dec = BlockDecoder::new();
            dec.reset(blk.source_count, blk.repair_count);
            for (j, (seq, ts, payload)) in repairs.iter().enumerate() {
                assert_eq!((*seq, *ts), (repair_seq, ts_base), "block {b} repair {j}");
                repair_seq = repair_seq.wrapping_add(1);
                let (h, symbol) = RepairHeader::parse(payload).unwrap();
                assert_eq!(
                    h,
                    RepairHeader {
                        sbn: b as u32,
                        esi: blk.source_count as u8 + j as u8,
                        k: blk.source_count,
                        seq_base: sources[0].0,
                    }
                );
                let (off, len) = blk.repair_symbol_range(j as u16).unwrap();
                let want = &title.fec(0).unwrap().repair_data(&blk).unwrap()
                    [(off - blk.repair_off) as usize..][..len];
                assert_eq!(symbol, want, "block {b} repair {j}: sidecar bytes");
                dec.add_repair(&h, *ts, symbol).unwrap();
            }
            // Lose the block's first two source packets; the repair rebuilds them.
            for (seq, ts, payload) in &sources[2..] {
                let esi = seq.wrapping_sub(sources[0].0);
                let packet = SourcePacket {
                    payload: payload.clone(),
                    marker: false,
                    timestamp: *ts,
                };
                dec.add_source(esi, packet).unwrap();
            }
            let got = dec.recover().unwrap();
            let want: Vec<(u16, SourcePacket)> = sources[..2]
                .iter()
                .enumerate()
                .map(|(i, (_, ts, payload))| {
                    (
                        i as u16,
                        SourcePacket {
                            payload: payload.clone(),
                            marker: false,
                            timestamp: *ts,
                        },
                    )
                })
                .collect();
            assert_eq!(got, want, "block {b}: rebuilt");
        }

        // A seek into the middle of a block: that block gets no repair
        // packets (part of it was never sent), the next one does.
        let info = s.play(
            Start::at(&title, 0, 50 * MS),
            Until::Previous,
            1,
            Instant::now(),
        );
        assert_eq!(info.packet, 5);
        s.start(late, info.time_ns);
        let a = tick(&mut s, late + Duration::from_secs(1), usize::MAX).0;
        let b = tick(&mut s, late + Duration::from_secs(1), usize::MAX).0;
        let c = tick(&mut s, late + Duration::from_secs(1), usize::MAX).0;
        assert_eq!((a.len(), b.len(), c.len()), (3, 2, 2));
        assert_eq!(b[0].2, vec![8; 188]);
        assert_eq!(RepairHeader::parse(&c[0].2).unwrap().0.seq_base, b[0].0);

        // A title without parity cannot take a repair stream.
        let (plain, _) = prefixed_title(dir.path());
        let mut s = session(plain.clone(), &rtcp);
        assert!(!s.attach_repair(repair_output(), "test"));
    }
}

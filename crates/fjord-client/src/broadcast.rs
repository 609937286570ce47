//! Receiving a title by periodic broadcasting: the schedule a server
//! publishes, and everything a client does with the datagrams of its
//! channels, sans-IO; sockets and clocks are `fjord play --broadcast`'s
//! (the one socket helper here is [`channel_socket`]).
//!
//! The contract with the server:
//! - `DESCRIBE rtsp://HOST:PORT/NAME?broadcast` with
//!   `Accept: application/json` answers a [`Schedule`] as JSON (at most
//!   [`MAX_SCHEDULE_BYTES`]); a client refuses versions other than
//!   [`SCHEDULE_VERSION`].
//! - `channels[c]` carries plan channel `c`: RTP to `group:port` (RTCP on
//!   `port + 1`, which this client does not use). Packet `i` of the title is
//!   sent with the schedule's SSRC and payload type, sequence number
//!   `seq0 + i` (mod 2^16) and timestamp `ts0 +` its media timestamp, its
//!   payload as stored; the description's packet table
//!   (`plan.packets[i] = [pts_ns, bytes]`) gives its presentation time and
//!   its payload length (1 for an empty payload). A channel sends its
//!   slots' segments at the times `Plan::emissions(c)` gives, from the
//!   wall-clock instant `epoch_unix_ns`, over and over: sequence numbers
//!   repeat every cycle, which is not an error here.
//! - The payloads in index order are the title (for MPEG-TS: the stored
//!   file, byte for byte).
//!
//! A client joins at `a` (ns since the epoch), follows `Plan::join(a)`'s
//! windows, and:
//! - identifies each datagram from (channel, seq, ts) alone ([`identify`]):
//!   anything that is not RTP of the schedule's SSRC and payload type, maps
//!   to no packet of that channel's segments, or whose payload length is not
//!   the table's, is counted and ignored ([`Receiver::datagram`]);
//! - puts packets back in order ([`Reassembly`]) and hands out the
//!   contiguous prefix as it grows;
//! - rebuilds lost packets from the channels' repair packets when the
//!   schedule has a repair flow ([`Repairs`]);
//! - measures each packet against its play time, `start + pts`
//!   ([`Playout`]): late packets (underruns) and the peak buffer;
//! - leaves a channel as soon as it holds every packet the plan expects
//!   from it ([`Carousel`]). A packet lost in its window comes again one
//!   period later on the same channel, so the client stays past the window
//!   until it has them, for at most [`REPAIR_PERIODS`] more periods of that
//!   channel: repair by the carousel, for what FEC could not rebuild.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::ops::Range;

mod fec;

pub use fec::{RepairOutcome, Repairs};
pub use fjord_broadcast::schedule::{
    ChannelGroup, MAX_SCHEDULE_BYTES, RepairFlow, SCHEDULE_VERSION, Schedule, ScheduleError,
};
pub use fjord_broadcast::{Description, JoinPlan, Plan, PlanError};
use fjord_fec::SourcePacket;
use socket2::{Domain, Protocol, Socket, Type};

use crate::rtp::{Received, parse_rtp};

/// A channel is heard for at most this many periods past its window while
/// packets lost in the window are missing: a packet lost in its window and
/// in every one of these rounds, with independent loss p, is given up with
/// probability p^9 (5 % loss: 2e-12; with 3 rounds it was 6e-6 per packet,
/// one failed download in twenty of 8,000 packets).
pub const REPAIR_PERIODS: u64 = 8;

/// A non-blocking socket hearing channel group `g`: `SO_REUSEADDR`, bound
/// to `0.0.0.0:port`, the group joined on any interface, delivering only
/// the groups it joined (`IP_MULTICAST_ALL` off: channels may share a
/// port), a `recv_buffer`-byte receive buffer if the kernel allows, no GRO.
/// Closing it leaves the group.
pub fn channel_socket(g: ChannelGroup, recv_buffer: usize) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_multicast_all_v4(false)?;
    let _ = s.set_recv_buffer_size(recv_buffer); // capped by the kernel
    s.bind(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, g.port).into())?;
    s.join_multicast_v4(&g.group, &Ipv4Addr::UNSPECIFIED)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// How RTP numbers the title's packets on every channel (`schedule`'s).
pub fn numbering(schedule: &Schedule) -> Numbering {
    Numbering {
        seq0: schedule.seq0,
        ts0: schedule.ts0,
        clock_rate: schedule.clock_rate,
    }
}

/// How RTP numbers the title's packets on every channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numbering {
    pub seq0: u16,
    pub ts0: u32,
    pub clock_rate: u32,
}

impl Numbering {
    /// The sequence number of packet `i`.
    pub fn seq_of(&self, i: u32) -> u16 {
        self.seq0.wrapping_add(i as u16)
    }

    /// The timestamp of a packet presented at `pts_ns` (floor, mod 2^32).
    pub fn ts_of(&self, pts_ns: u64) -> u32 {
        self.ts0.wrapping_add(self.ticks(pts_ns))
    }

    fn ticks(&self, pts_ns: u64) -> u32 {
        (u128::from(pts_ns) * u128::from(self.clock_rate) / 1_000_000_000) as u32
    }
}

/// The packet a datagram of sequence number `seq` and timestamp `ts` is,
/// among the packet indices in `ranges` (a channel's segments, ascending):
/// those with `seq0 + i ≡ seq` (mod 2^16); of several (segments spanning
/// more than 2^16 packets), the one whose timestamp is nearest `ts` (mod
/// 2^32; ties: the lowest index). `None`: no packet of `ranges` has `seq`.
pub fn identify(
    ranges: &[Range<u32>],
    pts_ns: impl Fn(u32) -> u64,
    n: Numbering,
    seq: u16,
    ts: u32,
) -> Option<u32> {
    let want = seq.wrapping_sub(n.seq0); // i mod 2^16
    let got = ts.wrapping_sub(n.ts0);
    let mut best: Option<(u32, u32)> = None; // (tick distance, index)
    for r in ranges {
        let skip = want.wrapping_sub(r.start as u16);
        let mut i = u64::from(r.start) + u64::from(skip);
        while i < u64::from(r.end) {
            let index = i as u32;
            let expected = n.ticks(pts_ns(index));
            let d = got.wrapping_sub(expected).min(expected.wrapping_sub(got));
            if best.is_none_or(|(bd, _)| d < bd) {
                best = Some((d, index));
            }
            i += 1 << 16;
        }
    }
    best.map(|(_, i)| i)
}

/// Packet indices as ascending, disjoint, non-adjacent ranges.
fn merge(mut ranges: Vec<Range<u32>>) -> Vec<Range<u32>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<Range<u32>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

fn contains(ranges: &[Range<u32>], i: u32) -> bool {
    let k = ranges.partition_point(|r| r.end <= i);
    ranges.get(k).is_some_and(|r| r.start <= i)
}

fn count(ranges: &[Range<u32>]) -> u64 {
    ranges.iter().map(|r| u64::from(r.end - r.start)).sum()
}

/// The packets of channel `c`'s segments (what its datagrams may be).
pub fn channel_packets(plan: &Plan, c: usize) -> Vec<Range<u32>> {
    let segments = plan.segments();
    let ranges = plan.channels()[c]
        .slots
        .iter()
        .filter_map(|s| segments.get(s.segment as usize))
        .map(|s| s.first_packet..s.first_packet + s.packet_count)
        .collect();
    merge(ranges)
}

/// The packets channel `c` sends in `window` (ns since the epoch): what a
/// client hearing it then expects from it.
pub fn window_packets(plan: &Plan, c: usize, window: &Range<u64>) -> Vec<Range<u32>> {
    let mut ranges: Vec<Range<u32>> = Vec::new();
    for e in plan
        .emissions_from(c, window.start)
        .take_while(|e| e.due_ns < window.end)
    {
        match ranges.last_mut() {
            Some(r) if r.end == e.packet => r.end += 1,
            _ => ranges.push(e.packet..e.packet + 1),
        }
    }
    merge(ranges)
}

/// What [`Reassembly::insert`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    New,
    Duplicate,
    OutOfRange,
}

/// Packets back in index order: insert them as they come, take the
/// contiguous prefix as it grows. A packet is held until it is taken, and
/// with FEC blocks ([`Reassembly::with_blocks`]) until its block is whole
/// (the decoder needs it): at most the one block the prefix stops in.
#[derive(Debug)]
pub struct Reassembly {
    packets: Vec<Option<SourcePacket>>,
    have: Vec<bool>,
    next: usize,
    held: u64,
    held_bytes: u64,
    /// Packets per FEC block, and each block's count of packets held.
    blocks: Option<(u32, Vec<u32>)>,
}

impl Reassembly {
    pub fn new(packets: usize) -> Reassembly {
        Reassembly {
            packets: vec![None; packets],
            have: vec![false; packets],
            next: 0,
            held: 0,
            held_bytes: 0,
            blocks: None,
        }
    }

    /// Keeps taken packets until their block of `k` is whole.
    pub fn with_blocks(mut self, k: u32) -> Reassembly {
        let k = k.max(1);
        let n = (self.have.len() as u64).div_ceil(u64::from(k));
        self.blocks = Some((k, vec![0; n as usize]));
        self
    }

    pub fn insert(&mut self, i: u32, packet: SourcePacket) -> Insert {
        let at = i as usize;
        match self.have.get(at) {
            None => Insert::OutOfRange,
            Some(true) => Insert::Duplicate,
            Some(false) => {
                self.have[at] = true;
                self.held += 1;
                // Not taken yet: the prefix stops before any packet missing.
                self.held_bytes += packet.payload.len() as u64;
                self.packets[at] = Some(packet);
                self.count_in_block(i);
                Insert::New
            }
        }
    }

    /// Counts packet `i` in its block; a block now whole lets go of its
    /// packets taken already.
    fn count_in_block(&mut self, i: u32) {
        let Some((k, held)) = &mut self.blocks else {
            return;
        };
        let b = (i / *k) as usize;
        held[b] += 1;
        let first = b * *k as usize;
        let end = (first + *k as usize).min(self.have.len());
        if held[b] as usize == end - first {
            for p in &mut self.packets[first..end.min(self.next).max(first)] {
                *p = None;
            }
        }
    }

    pub fn has(&self, i: u32) -> bool {
        self.have.get(i as usize).copied().unwrap_or(false)
    }

    /// Packet `i`, if it is held (received and not let go).
    pub fn packet(&self, i: u32) -> Option<&SourcePacket> {
        self.packets.get(i as usize)?.as_ref()
    }

    /// The packets of block `b` (with [`Reassembly::with_blocks`]), and how
    /// many of them are held.
    pub fn block(&self, b: u32) -> Option<(std::ops::Range<u32>, u32)> {
        let (k, held) = self.blocks.as_ref()?;
        let first = b.checked_mul(*k)?;
        let end = first.checked_add(*k)?.min(self.have.len() as u32);
        Some((first..end, *held.get(b as usize)?))
    }

    /// The next payload of the contiguous prefix, if it has arrived.
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        let i = self.next;
        let whole = match &self.blocks {
            None => true,
            Some((k, held)) => {
                let b = i / *k as usize;
                let len = (*k as usize).min(self.have.len() - b * *k as usize);
                held.get(b).is_some_and(|&h| h as usize == len)
            }
        };
        let slot = self.packets.get_mut(i)?;
        let payload = match whole {
            true => slot.take()?.payload,
            false => slot.as_ref()?.payload.clone(),
        };
        self.next += 1;
        self.held_bytes -= payload.len() as u64;
        Some(payload)
    }

    /// Packets handed out so far (the prefix's length).
    pub fn taken(&self) -> usize {
        self.next
    }

    /// Packets received (each once).
    pub fn received(&self) -> u64 {
        self.held
    }

    /// Payload bytes received and not yet taken.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    pub fn is_complete(&self) -> bool {
        self.held as usize == self.have.len()
    }

    /// The packets not received, as ranges.
    pub fn missing(&self) -> Vec<Range<u32>> {
        missing_in(0..self.have.len() as u32, |i| self.has(i))
    }
}

/// The packets of `packets` (ascending) without `has`, as ranges.
fn missing_in(packets: impl Iterator<Item = u32>, has: impl Fn(u32) -> bool) -> Vec<Range<u32>> {
    let mut out: Vec<Range<u32>> = Vec::new();
    for i in packets.filter(|&i| !has(i)) {
        match out.last_mut() {
            Some(r) if r.end == i => r.end += 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// `0-4, 9, 12-13 (and 5 more)`: packet ranges for people.
pub fn show_ranges(ranges: &[Range<u32>], most: usize) -> String {
    let mut shown: Vec<String> = ranges
        .iter()
        .take(most)
        .map(|r| match r.end - r.start {
            1 => r.start.to_string(),
            _ => format!("{}-{}", r.start, r.end - 1),
        })
        .collect();
    if ranges.len() > most {
        shown.push(format!("(and {} more ranges)", ranges.len() - most));
    }
    shown.join(", ")
}

/// Each packet's arrival against its play time `start + pts`: late
/// packets (underruns: arrived after it) and the most payload bytes held
/// at once, received but not yet played (a packet arriving at or after its
/// play time is never held), as [`Plan::join`] and `simulate` count.
/// Arrivals are given in time order.
#[derive(Debug)]
pub struct Playout {
    start_ns: u64,
    packets: Vec<(u64, u32)>,
    held: Vec<bool>,
    played: usize,
    buffered: u64,
    peak: u64,
    late: u64,
}

impl Playout {
    /// `packets`: each packet's `(pts_ns, bytes)`.
    pub fn new(start_ns: u64, packets: Vec<(u64, u32)>) -> Playout {
        let n = packets.len();
        Playout {
            start_ns,
            packets,
            held: vec![false; n],
            played: 0,
            buffered: 0,
            peak: 0,
            late: 0,
        }
    }

    fn play_time(&self, i: usize) -> u64 {
        self.start_ns.saturating_add(self.packets[i].0)
    }

    /// Packet `i` arrived at `t_ns` (each packet once). Whether it is late.
    pub fn arrive(&mut self, i: u32, t_ns: u64) -> bool {
        let i = i as usize;
        if i >= self.packets.len() {
            return false;
        }
        while self.played < self.packets.len() && self.play_time(self.played) <= t_ns {
            if self.held[self.played] {
                self.buffered -= u64::from(self.packets[self.played].1);
            }
            self.played += 1;
        }
        let due = self.play_time(i);
        if t_ns >= due {
            // Just in time is on time, but never held.
            self.late += u64::from(t_ns > due);
            return t_ns > due;
        }
        self.held[i] = true;
        self.buffered += u64::from(self.packets[i].1);
        self.peak = self.peak.max(self.buffered);
        false
    }

    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn peak_bytes(&self) -> u64 {
        self.peak
    }
}

/// Where a channel of a join plan stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneState {
    /// Its window has not opened.
    Waiting,
    Listening,
    /// Left holding every packet expected from it (or never joined: they
    /// came from other channels first).
    Done,
    /// Left [`REPAIR_PERIODS`] periods after its window with packets missing.
    GaveUp,
}

/// One channel a client hears.
#[derive(Clone, Debug)]
pub struct Tune {
    pub channel: usize,
    /// Join at `join_ns`; the plan's window ends at `window_end_ns` (plus
    /// the grace); a packet still missing at `give_up_ns` is given up.
    pub join_ns: u64,
    pub window_end_ns: u64,
    pub give_up_ns: u64,
    /// The packets expected from this channel.
    pub expected: Vec<Range<u32>>,
    /// How many of them are not held yet (from any channel).
    pub missing: u64,
    pub state: TuneState,
    /// Whether it was joined, and heard past its window.
    pub joined: bool,
    pub extended: bool,
}

/// How a real network bends the plan's windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Margins {
    /// Join each channel this long before its window opens (what a join
    /// takes to take effect; packets heard early are kept).
    pub ahead_ns: u64,
    /// Packets arriving this long after a window's end are still the
    /// window's (the sender's lateness), not repair by the carousel.
    pub grace_ns: u64,
}

/// Open or close a channel's socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Join(usize),
    Leave(usize),
}

/// When to join and leave which channel: the plan's windows, each left as
/// soon as every packet expected from it is held and kept past its window
/// while some are missing (repair by the carousel), up to
/// [`REPAIR_PERIODS`] periods.
#[derive(Clone, Debug)]
pub struct Carousel {
    pub tunes: Vec<Tune>,
}

impl Carousel {
    /// The tunes of `join`.
    pub fn new(plan: &Plan, join: &JoinPlan, m: Margins) -> Carousel {
        let tunes = join
            .listens
            .iter()
            .map(|l| {
                let expected = window_packets(plan, l.channel, &l.listen);
                let period = plan.channels()[l.channel].period_ns;
                Tune {
                    channel: l.channel,
                    join_ns: l.listen.start.saturating_sub(m.ahead_ns),
                    window_end_ns: l.listen.end.saturating_add(m.grace_ns),
                    give_up_ns: l
                        .listen
                        .end
                        .saturating_add(m.grace_ns)
                        .saturating_add(period.saturating_mul(REPAIR_PERIODS)),
                    missing: count(&expected),
                    expected,
                    state: TuneState::Waiting,
                    joined: false,
                    extended: false,
                }
            })
            .collect();
        Carousel { tunes }
    }

    /// The packets of `0..packets` no tune expects (empty for a sound plan).
    pub fn uncovered(&self, packets: u32) -> Vec<Range<u32>> {
        let all = merge(self.tunes.iter().flat_map(|t| t.expected.clone()).collect());
        missing_in(0..packets, |i| contains(&all, i))
    }

    /// Packet `i` is held now (call once per packet).
    pub fn got(&mut self, i: u32) {
        for t in &mut self.tunes {
            if contains(&t.expected, i) {
                t.missing -= 1;
            }
        }
    }

    /// What to do at `now_ns`.
    pub fn step(&mut self, now_ns: u64) -> Vec<Action> {
        let mut out = Vec::new();
        for t in &mut self.tunes {
            match t.state {
                TuneState::Waiting if t.missing == 0 => t.state = TuneState::Done,
                TuneState::Waiting if now_ns >= t.join_ns => {
                    t.state = TuneState::Listening;
                    t.joined = true;
                    out.push(Action::Join(t.channel));
                }
                TuneState::Listening if t.missing == 0 => {
                    t.state = TuneState::Done;
                    out.push(Action::Leave(t.channel));
                }
                TuneState::Listening if now_ns >= t.give_up_ns => {
                    t.state = TuneState::GaveUp;
                    out.push(Action::Leave(t.channel));
                }
                TuneState::Listening if now_ns >= t.window_end_ns => t.extended = true,
                _ => {}
            }
        }
        out
    }

    /// The next time [`Carousel::step`] has something to do by the clock
    /// (`None`: nothing left but what arriving packets finish).
    pub fn next_deadline(&self) -> Option<u64> {
        self.tunes
            .iter()
            .filter_map(|t| match t.state {
                TuneState::Waiting => Some(t.join_ns),
                TuneState::Listening if !t.extended => Some(t.window_end_ns),
                TuneState::Listening => Some(t.give_up_ns),
                _ => None,
            })
            .min()
    }

    pub fn is_finished(&self) -> bool {
        self.tunes
            .iter()
            .all(|t| matches!(t.state, TuneState::Done | TuneState::GaveUp))
    }

    /// Whether channel `c` is being heard.
    pub fn listening(&self, c: usize) -> bool {
        self.tunes
            .iter()
            .any(|t| t.channel == c && t.state == TuneState::Listening)
    }

    /// The packets tune `t` expected and does not hold.
    pub fn missing_of(&self, t: usize, has: impl Fn(u32) -> bool) -> Vec<Range<u32>> {
        missing_in(self.tunes[t].expected.iter().flat_map(Clone::clone), has)
    }
}

/// What a client counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets of the title received (each once).
    pub received: u64,
    pub duplicates: u64,
    /// Datagrams that are not a packet of the schedule on that channel.
    pub ignored: u64,
    /// Packets that arrived after their play time (underruns).
    pub late: u64,
    /// Repair packets received, and packets they rebuilt (counted in
    /// `received` too).
    pub repair_packets: u64,
    pub rebuilt: u64,
}

/// What [`Receiver::datagram`] made of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    New(u32),
    Duplicate(u32),
    /// A repair packet, and how many packets it (with those held) rebuilt.
    Repair(usize),
    Ignored,
}

/// A client of one broadcast title, sans-IO: datagrams in (with the
/// channel they came on and when, in ns since the epoch), join and leave
/// actions and the title's payloads in order out.
#[derive(Debug)]
pub struct Receiver {
    ssrc: u32,
    payload_type: u8,
    numbering: Numbering,
    plan: Plan,
    /// Per plan channel, the packets of its segments.
    channel_packets: Vec<Vec<Range<u32>>>,
    pub join: JoinPlan,
    pub reassembly: Reassembly,
    pub playout: Playout,
    pub carousel: Carousel,
    /// The channels' FEC, when the schedule has a repair flow.
    pub repairs: Option<Repairs>,
    pub stats: Stats,
}

impl Receiver {
    /// A client arriving at `arrival_ns`.
    pub fn new(schedule: &Schedule, plan: Plan, arrival_ns: u64, m: Margins) -> Receiver {
        let join = plan.join(arrival_ns);
        let carousel = Carousel::new(&plan, &join, m);
        let packets = plan.title().packets();
        let playout = Playout::new(
            join.start_ns,
            packets.iter().map(|p| (p.pts_ns, p.bytes)).collect(),
        );
        let n = packets.len() as u32;
        let repairs = (schedule.repair).and_then(|f| Repairs::new(f, numbering(schedule), n));
        let mut reassembly = Reassembly::new(packets.len());
        if let Some(f) = schedule.repair.filter(|_| repairs.is_some()) {
            reassembly = reassembly.with_blocks(u32::from(f.k));
        }
        Receiver {
            ssrc: schedule.ssrc,
            payload_type: schedule.payload_type,
            numbering: numbering(schedule),
            channel_packets: (0..plan.channels().len())
                .map(|c| channel_packets(&plan, c))
                .collect(),
            reassembly,
            plan,
            join,
            playout,
            carousel,
            repairs,
            stats: Stats::default(),
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// A datagram that came on channel `c` at `t_ns`.
    pub fn datagram(&mut self, c: usize, data: &[u8], t_ns: u64) -> Outcome {
        let Ok(rtp) = parse_rtp(data, std::time::Instant::now()) else {
            self.stats.ignored += 1;
            return Outcome::Ignored;
        };
        if self.repairs.as_ref().is_some_and(|r| r.ssrc() == rtp.ssrc) {
            return self.repair(&rtp, t_ns);
        }
        let Some(i) = self.packet_of(c, &rtp) else {
            self.stats.ignored += 1;
            return Outcome::Ignored;
        };
        let packet = SourcePacket {
            payload: rtp.payload,
            marker: rtp.marker,
            timestamp: rtp.rtp_ts,
        };
        match self.reassembly.insert(i, packet) {
            Insert::New => {
                self.arrived(i, t_ns);
                if let Some(r) = &mut self.repairs
                    && let RepairOutcome::Rebuilt(packets) = r.source(i, &self.reassembly)
                {
                    self.rebuilt(packets, t_ns);
                }
                Outcome::New(i)
            }
            Insert::Duplicate => {
                self.stats.duplicates += 1;
                Outcome::Duplicate(i)
            }
            Insert::OutOfRange => {
                self.stats.ignored += 1;
                Outcome::Ignored
            }
        }
    }

    fn arrived(&mut self, i: u32, t_ns: u64) {
        self.stats.received += 1;
        self.stats.late += u64::from(self.playout.arrive(i, t_ns));
        self.carousel.got(i);
    }

    fn repair(&mut self, rtp: &Received, t_ns: u64) -> Outcome {
        let Some(r) = &mut self.repairs else {
            return Outcome::Ignored;
        };
        match r.repair(rtp, &self.reassembly) {
            RepairOutcome::Refused => {
                self.stats.ignored += 1;
                Outcome::Ignored
            }
            RepairOutcome::Kept => {
                self.stats.repair_packets += 1;
                Outcome::Repair(0)
            }
            RepairOutcome::Rebuilt(packets) => {
                self.stats.repair_packets += 1;
                let n = packets.len();
                self.rebuilt(packets, t_ns);
                Outcome::Repair(n)
            }
        }
    }

    /// Packets the decoder rebuilt, as if they had arrived now; one whose
    /// length is not the table's (forged repair symbols) is not kept.
    fn rebuilt(&mut self, packets: Vec<(u32, SourcePacket)>, t_ns: u64) {
        for (i, p) in packets {
            let bytes = self.plan.title().packets().get(i as usize).map(|t| t.bytes);
            if bytes != Some(p.payload.len().max(1) as u32) {
                self.stats.ignored += 1;
                continue;
            }
            if self.reassembly.insert(i, p) == Insert::New {
                self.stats.rebuilt += 1;
                self.arrived(i, t_ns);
            }
        }
    }

    /// The packet a datagram of channel `c` is, checked against the table.
    fn packet_of(&self, c: usize, rtp: &Received) -> Option<u32> {
        if rtp.ssrc != self.ssrc || rtp.pt != self.payload_type {
            return None;
        }
        let packets = self.plan.title().packets();
        let i = identify(
            self.channel_packets.get(c)?,
            |i| packets[i as usize].pts_ns,
            self.numbering,
            rtp.seq,
            rtp.rtp_ts,
        )?;
        let bytes = packets.get(i as usize)?.bytes as usize;
        (rtp.payload.len().max(1) == bytes).then_some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_broadcast::CHANNEL_LIMIT;
    use fjord_broadcast::{Config, Packet, Scheme, Title};
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    /// A constant-rate title: `n` packets of `bytes`, one every `step_ns`,
    /// a sync point every `gop` packets.
    fn title(n: u32, bytes: u32, step_ns: u64, gop: u32) -> Title {
        let packets = (0..n)
            .map(|i| Packet {
                pts_ns: u64::from(i) * step_ns,
                bytes,
            })
            .collect();
        let sync = (0..n).step_by(gop as usize).collect();
        Title::new(packets, sync, u64::from(n) * step_ns).unwrap()
    }

    fn schedule(plan: &Plan) -> Schedule {
        Schedule {
            version: SCHEDULE_VERSION,
            title: "news.ts".into(),
            epoch_unix_ns: 1_700_000_000 * S,
            ssrc: 0x1234_5678,
            seq0: 65_000,
            ts0: 4_000_000_000,
            clock_rate: 90_000,
            payload_type: 33,
            ttl: 1,
            channels: (0..plan.channels().len())
                .map(|c| ChannelGroup {
                    group: Ipv4Addr::new(239, 255, 0, c as u8),
                    port: 5004 + 2 * c as u16,
                })
                .collect(),
            plan: plan.description(),
            repair: None,
        }
    }

    /// A source packet of `payload`.
    fn sp(payload: Vec<u8>) -> SourcePacket {
        SourcePacket {
            payload,
            marker: false,
            timestamp: 0,
        }
    }

    /// Packet i's payload: its index, then its low byte.
    fn payload(i: u32, bytes: u32) -> Vec<u8> {
        let mut p = vec![i as u8; bytes as usize];
        let n = p.len().min(4);
        p[..n].copy_from_slice(&i.to_be_bytes()[..n]);
        p
    }

    fn rtp(s: &Schedule, i: u32, pts_ns: u64, body: &[u8]) -> Vec<u8> {
        let n = numbering(s);
        let mut p = vec![0x80, s.payload_type];
        p.extend_from_slice(&n.seq_of(i).to_be_bytes());
        p.extend_from_slice(&n.ts_of(pts_ns).to_be_bytes());
        p.extend_from_slice(&s.ssrc.to_be_bytes());
        p.extend_from_slice(body);
        p
    }

    #[test]
    fn schedule_round_trips_as_json_with_the_published_field_names() {
        let plan = Plan::new(
            title(2000, 1316, 10_000_000, 50),
            Config::new(Scheme::Skyscraper { width: 52 }, 2 * S),
        )
        .unwrap();
        let s = schedule(&plan);
        let json = serde_json::to_vec(&s).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        for key in [
            "version",
            "title",
            "epoch_unix_ns",
            "ssrc",
            "seq0",
            "ts0",
            "clock_rate",
            "payload_type",
            "ttl",
            "channels",
            "plan",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["channels"][1]["group"], "239.255.0.1");
        assert_eq!(v["channels"][1]["port"], 5006);
        let (back, rebuilt) = Schedule::from_json(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(rebuilt.description(), plan.description());
    }

    #[test]
    fn refuses_bad_schedules() {
        let plan = Plan::new(
            title(1000, 188, 10_000_000, 25),
            Config::new(Scheme::Staggered, 3 * S),
        )
        .unwrap();
        let good = schedule(&plan);
        let refused = |f: &dyn Fn(&mut Schedule)| {
            let mut s = good.clone();
            f(&mut s);
            Schedule::from_json(&serde_json::to_vec(&s).unwrap()).unwrap_err()
        };
        assert!(matches!(
            refused(&|s| s.version = 2),
            ScheduleError::Version(2)
        ));
        assert!(matches!(
            refused(&|s| {
                s.channels.pop();
            }),
            ScheduleError::Invalid(_)
        ));
        assert!(matches!(
            refused(&|s| s.channels[0].group = Ipv4Addr::new(10, 0, 0, 1)),
            ScheduleError::Invalid(_)
        ));
        assert!(matches!(
            refused(&|s| s.channels[1] = s.channels[0]),
            ScheduleError::Invalid(_)
        ));
        assert!(matches!(
            refused(&|s| s.clock_rate = 0),
            ScheduleError::Invalid(_)
        ));
        assert!(matches!(
            refused(&|s| s.plan.config.max_channels = 1),
            ScheduleError::Invalid(_)
        ));
        assert!(matches!(
            refused(&|s| s.plan.packets[3][1] += 1),
            ScheduleError::Plan(_)
        ));
        let flow = RepairFlow {
            ssrc: 1,
            payload_type: 96,
            k: 100,
            m: 10,
            symbol_len: 1324,
        };
        for bad in [
            RepairFlow { k: 0, ..flow },
            RepairFlow { m: 0, ..flow },
            RepairFlow { k: 250, ..flow },
            RepairFlow {
                symbol_len: 8,
                ..flow
            },
            RepairFlow {
                ssrc: good.ssrc,
                ..flow
            },
        ] {
            let e = refused(&|s| s.repair = Some(bad));
            assert!(matches!(e, ScheduleError::Invalid(_)), "{bad:?}: {e}");
        }
        let with_repair = Schedule {
            repair: Some(flow),
            ..good.clone()
        };
        let json = serde_json::to_vec(&with_repair).unwrap();
        assert_eq!(Schedule::from_json(&json).unwrap().0, with_repair);
        let too_many = |s: &mut Schedule| {
            let c = s.plan.channels[0].clone();
            s.plan.channels = vec![c; CHANNEL_LIMIT + 1];
            s.channels = (0..=CHANNEL_LIMIT)
                .map(|p| ChannelGroup {
                    group: Ipv4Addr::new(239, 1, 1, 1),
                    port: 1 + p as u16,
                })
                .collect();
        };
        assert!(matches!(refused(&too_many), ScheduleError::Invalid(_)));
        assert!(matches!(
            Schedule::from_json(b"{"),
            Err(ScheduleError::Json(_))
        ));
        let huge = vec![b' '; MAX_SCHEDULE_BYTES + 1];
        assert!(matches!(
            Schedule::from_json(&huge),
            Err(ScheduleError::TooLarge(_))
        ));
    }

    #[test]
    fn identifies_by_sequence_number_then_timestamp() {
        let n = Numbering {
            seq0: 65_530,
            ts0: u32::MAX - 10,
            clock_rate: 90_000,
        };
        let pts = |i: u32| u64::from(i) * 1_000_000; // 90 ticks apart
        let ranges = [10..20, 100..200_000];
        let id = |i: u32| identify(&ranges, pts, n, n.seq_of(i), n.ts_of(pts(i)));
        // Sequence numbers wrap; so do timestamps.
        assert_eq!(id(10), Some(10));
        assert_eq!(id(19), Some(19));
        // 100 + 65536 k: four packets share a sequence number.
        for i in [100, 65_636, 131_172, 196_708] {
            assert_eq!(id(i), Some(i));
        }
        // A timestamp a little off still picks the nearest.
        let near = identify(
            &ranges,
            pts,
            n,
            n.seq_of(65_636),
            n.ts_of(pts(65_636)) + 1000,
        );
        assert_eq!(near, Some(65_636));
        // Sequence numbers of no packet of these segments.
        let first = &ranges[..1];
        assert_eq!(identify(first, pts, n, n.seq_of(9), 0), None);
        assert_eq!(identify(first, pts, n, n.seq_of(20), 0), None);
        assert_eq!(identify(&[], pts, n, 0, 0), None);
    }

    /// Ascending, disjoint ranges from gaps and lengths.
    fn ranges_of(parts: &[(u32, u32)]) -> Vec<Range<u32>> {
        let mut at = 0u32;
        parts
            .iter()
            .map(|&(gap, len)| {
                let r = at + gap..at + gap + len;
                at = r.end;
                r
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn identify_finds_every_packet_and_only_packets_of_the_ranges(
            parts in proptest::collection::vec((0u32..70_000, 1u32..60_000), 1..5),
            step_ns in 10_000u64..1_000_000,
            clock_rate in 1_000u32..200_000,
            seq0 in any::<u16>(),
            ts0 in any::<u32>(),
            picks in proptest::collection::vec(any::<proptest::sample::Index>(), 32),
            seq in any::<u16>(),
            ts in any::<u32>(),
        ) {
            let ranges = ranges_of(&parts);
            let n = Numbering { seq0, ts0, clock_rate };
            let pts = |i: u32| u64::from(i) * step_ns;
            let all: Vec<u32> = ranges.iter().flat_map(Clone::clone).collect();
            for p in &picks {
                let i = all[p.index(all.len())];
                prop_assert_eq!(identify(&ranges, pts, n, n.seq_of(i), n.ts_of(pts(i))), Some(i));
            }
            let got = identify(&ranges, pts, n, seq, ts);
            let exists = all.iter().any(|&i| n.seq_of(i) == seq);
            prop_assert_eq!(got.is_some(), exists);
            if let Some(j) = got {
                prop_assert!(contains(&ranges, j));
                prop_assert_eq!(n.seq_of(j), seq);
            }
        }
    }

    #[test]
    fn reassembly_hands_out_the_contiguous_prefix() {
        let mut r = Reassembly::new(4);
        assert_eq!(r.insert(1, sp(vec![1])), Insert::New);
        assert_eq!(r.pop_ready(), None);
        assert_eq!(r.insert(1, sp(vec![9])), Insert::Duplicate);
        assert_eq!(r.insert(4, sp(vec![4])), Insert::OutOfRange);
        assert_eq!(r.insert(3, sp(vec![3, 3])), Insert::New);
        assert_eq!(r.missing(), vec![0..1, 2..3]);
        assert_eq!(r.held_bytes(), 3);
        assert_eq!(r.insert(0, sp(vec![0])), Insert::New);
        assert_eq!(r.pop_ready(), Some(vec![0]));
        assert_eq!(r.pop_ready(), Some(vec![1]));
        assert_eq!(r.pop_ready(), None);
        assert_eq!((r.taken(), r.held_bytes()), (2, 2));
        assert!(!r.is_complete());
        assert_eq!(r.insert(2, sp(vec![2])), Insert::New);
        assert_eq!(r.insert(0, sp(vec![7])), Insert::Duplicate);
        assert_eq!(r.pop_ready(), Some(vec![2]));
        assert_eq!(r.pop_ready(), Some(vec![3, 3]));
        assert_eq!(r.pop_ready(), None);
        assert!(r.is_complete());
        assert_eq!(r.missing(), vec![]);
        assert_eq!(r.received(), 4);
    }

    /// With FEC blocks, a packet taken before its block is whole stays for
    /// the decoder, and goes once the block is whole.
    #[test]
    fn reassembly_keeps_taken_packets_until_their_block_is_whole() {
        let mut r = Reassembly::new(5).with_blocks(2);
        assert_eq!(r.insert(3, sp(vec![3])), Insert::New); // block 1 before the prefix
        assert_eq!(r.insert(2, sp(vec![2])), Insert::New);
        assert_eq!(r.insert(0, sp(vec![0])), Insert::New);
        assert_eq!(r.pop_ready(), Some(vec![0]));
        assert_eq!(r.packet(0).map(|p| p.payload.clone()), Some(vec![0]));
        assert_eq!(r.block(0), Some((0..2, 1)));
        assert_eq!(r.insert(1, sp(vec![1])), Insert::New);
        assert_eq!(r.packet(0), None, "block 0 whole: let go");
        assert_eq!(r.block(2), Some((4..5, 0)), "the short last block");
        let taken: Vec<Vec<u8>> = std::iter::from_fn(|| r.pop_ready()).collect();
        assert_eq!(taken, [vec![1], vec![2], vec![3]]);
        assert_eq!((r.packet(2), r.held_bytes()), (None, 0));
    }

    #[test]
    fn playout_counts_late_packets_and_the_peak_held() {
        // Played at 100, 110, 120.
        let mut p = Playout::new(100, vec![(0, 10), (10, 20), (20, 40)]);
        assert!(!p.arrive(2, 50)); // held: 40
        assert!(!p.arrive(0, 60)); // 50
        assert!(p.arrive(1, 111)); // packet 0 played; 1 late
        assert_eq!((p.late(), p.peak_bytes()), (1, 50));
        let mut q = Playout::new(0, vec![(5, 1), (6, 1)]);
        assert!(!q.arrive(0, 5)); // at its play time: on time, never held
        assert!(q.arrive(1, 7));
        assert_eq!((q.late(), q.peak_bytes()), (1, 0));
    }

    #[test]
    fn shows_ranges_for_people() {
        assert_eq!(show_ranges(&[0..5, 9..10, 12..14], 9), "0-4, 9, 12-13");
        assert_eq!(show_ranges(&[0..1, 3..4], 1), "0, (and 1 more ranges)");
    }

    #[test]
    fn carousel_joins_leaves_and_repairs_within_bounds() {
        let plan = Plan::new(
            title(600, 1000, 100_000_000, 10),
            Config::new(Scheme::Harmonic, 10 * S),
        )
        .unwrap();
        let join = plan.join(3 * S);
        let m = Margins {
            ahead_ns: 5,
            grace_ns: 7,
        };
        let shifted = Carousel::new(&plan, &join, m);
        for (t, l) in shifted.tunes.iter().zip(&join.listens) {
            assert_eq!(
                (t.join_ns, t.window_end_ns),
                (l.listen.start - 5, l.listen.end + 7)
            );
        }
        let mut k = Carousel::new(&plan, &join, Margins::default());
        assert_eq!(k.uncovered(600), vec![]);
        let acts = k.step(3 * S);
        assert_eq!(
            acts.len(),
            k.tunes.len(),
            "harmonic hears every channel at once"
        );
        assert!(
            k.tunes
                .iter()
                .all(|t| t.joined && t.state == TuneState::Listening)
        );
        // Everything but packet 0 arrives.
        let mut r = Reassembly::new(600);
        for i in 1..600 {
            r.insert(i, sp(vec![0]));
            k.got(i);
        }
        let acts = k.step(3 * S);
        assert_eq!(acts.len(), k.tunes.len() - 1);
        assert!(
            acts.iter()
                .all(|a| matches!(a, Action::Leave(c) if *c != 0))
        );
        let t0 = k.tunes.iter().position(|t| t.channel == 0).unwrap();
        assert_eq!(k.missing_of(t0, |i| r.has(i)), vec![0..1]);
        // Past its window it stays (repair by the carousel)...
        let end = k.tunes[t0].window_end_ns;
        assert_eq!(k.next_deadline(), Some(end));
        assert!(k.step(end).is_empty());
        assert!(k.tunes[t0].extended && k.listening(0));
        // ...for REPAIR_PERIODS periods, then gives up.
        let give_up = k.tunes[t0].give_up_ns;
        assert_eq!(give_up - end, REPAIR_PERIODS * plan.channels()[0].period_ns);
        assert_eq!(k.next_deadline(), Some(give_up));
        assert_eq!(k.step(give_up), vec![Action::Leave(0)]);
        assert_eq!(k.tunes[t0].state, TuneState::GaveUp);
        assert!(k.is_finished());
        assert_eq!(k.next_deadline(), None);
    }

    #[test]
    fn carousel_skips_a_channel_whose_packets_came_already() {
        let plan = Plan::new(
            title(600, 1000, 100_000_000, 10),
            Config::new(Scheme::Skyscraper { width: 52 }, 10 * S),
        )
        .unwrap();
        let mut k = Carousel::new(&plan, &plan.join(0), Margins::default());
        for i in 0..600 {
            k.got(i);
        }
        assert!(k.step(0).is_empty());
        assert!(k.is_finished());
        assert!(k.tunes.iter().all(|t| !t.joined));
    }

    /// What a fake network did to a client.
    struct Run {
        rx: Receiver,
        out: Vec<u8>,
    }

    /// A client arriving at `arrival_ns` hears the channels' emissions at
    /// their due times while its carousel listens, losing those `lose`
    /// says, plus stray datagrams; returns what it did.
    fn run(plan: &Plan, arrival_ns: u64, lose: &dyn Fn(u64) -> bool) -> Run {
        let s = schedule(plan);
        let mut rx = Receiver::new(&s, plan.clone(), arrival_ns, Margins::default());
        let packets = plan.title().packets().to_vec();
        let mut cursors: Vec<_> = (0..plan.channels().len())
            .map(|c| plan.emissions_from(c, arrival_ns).peekable())
            .collect();
        let (mut out, mut k) = (Vec::new(), 0u64);
        let longest = plan.channels().iter().map(|c| c.period_ns).max().unwrap();
        let limit = arrival_ns
            + plan.worst_wait_ns()
            + plan.title().duration_ns()
            + (REPAIR_PERIODS + 1) * longest;
        loop {
            let next = (0..cursors.len())
                .filter_map(|c| cursors[c].peek().map(|e| (e.due_ns, c)))
                .min();
            let Some((t, c)) = next.filter(|&(t, _)| t < limit) else {
                break;
            };
            let e = cursors[c].next().unwrap();
            rx.carousel.step(t);
            if rx.carousel.is_finished() {
                break;
            }
            if !rx.carousel.listening(c) {
                continue;
            }
            k += 1;
            if lose(k) {
                continue;
            }
            let p = packets[e.packet as usize];
            let body = payload(e.packet, p.bytes);
            rx.datagram(c, &rtp(&s, e.packet, p.pts_ns, &body), t);
            if k % 1000 == 0 {
                // Strays: another SSRC, garbage, a sequence number of
                // another channel's segment, a wrong length.
                let mut other = rtp(&s, e.packet, p.pts_ns, &body);
                other[8] ^= 1;
                assert_eq!(rx.datagram(c, &other, t), Outcome::Ignored);
                assert_eq!(rx.datagram(c, b"junk", t), Outcome::Ignored);
                let short = rtp(&s, e.packet, p.pts_ns, &body[1..]);
                assert_eq!(rx.datagram(c, &short, t), Outcome::Ignored);
            }
            while let Some(p) = rx.reassembly.pop_ready() {
                out.extend_from_slice(&p);
            }
        }
        rx.carousel.step(limit);
        Run { rx, out }
    }

    fn whole(plan: &Plan) -> Vec<u8> {
        let packets = plan.title().packets();
        (0..packets.len() as u32)
            .flat_map(|i| payload(i, packets[i as usize].bytes))
            .collect()
    }

    fn plans() -> Vec<Plan> {
        // 60 s at 1 Mbit/s in 1316-byte packets, a sync point every 0.5 s.
        let t = title(5700, 1316, 60 * S / 5700, 47);
        Scheme::ALL
            .iter()
            .map(|&scheme| Plan::new(t.clone(), Config::new(scheme, 5 * S)).unwrap())
            .collect()
    }

    #[test]
    fn a_client_of_every_scheme_gets_the_title_on_time_with_the_planned_buffer() {
        for plan in plans() {
            for arrival in [0, 7 * S / 3, 31 * S] {
                let r = run(&plan, arrival, &|_| false);
                let name = plan.config().scheme.name();
                assert!(r.rx.reassembly.is_complete(), "{name} at {arrival}");
                assert_eq!(r.out, whole(&plan), "{name} at {arrival}");
                assert_eq!(r.rx.stats.late, 0, "{name} at {arrival}");
                assert_eq!(
                    r.rx.playout.peak_bytes(),
                    r.rx.join.peak_buffer_bytes,
                    "{name} at {arrival}"
                );
                assert!(r.rx.stats.ignored > 0);
                assert!(
                    r.rx.carousel
                        .tunes
                        .iter()
                        .all(|t| t.state == TuneState::Done)
                );
                assert!(r.rx.carousel.tunes.iter().all(|t| !t.extended));
            }
        }
    }

    #[test]
    fn the_carousel_repairs_losses() {
        for plan in plans() {
            // About 2 % lost, deterministically.
            let lose = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58 == 0;
            let r = run(&plan, 4 * S, &lose);
            let name = plan.config().scheme.name();
            assert!(r.rx.reassembly.is_complete(), "{name}");
            assert_eq!(r.out, whole(&plan), "{name}");
            assert!(r.rx.carousel.tunes.iter().any(|t| t.extended), "{name}");
            assert!(r.rx.carousel.is_finished());
        }
    }

    #[test]
    fn a_client_gives_up_on_a_channel_that_never_delivers() {
        let plan = &plans()[3]; // harmonic
        let s = schedule(plan);
        let mut rx = Receiver::new(&s, plan.clone(), 0, Margins::default());
        rx.carousel.step(0);
        let packets = plan.title().packets();
        // Every channel but the last delivers everything.
        let last = plan.channels().len() - 1;
        let lost = channel_packets(plan, last);
        for i in 0..packets.len() as u32 {
            if !contains(&lost, i) {
                let body = payload(i, packets[i as usize].bytes);
                let c = (0..last)
                    .find(|&c| contains(&channel_packets(plan, c), i))
                    .unwrap();
                rx.datagram(c, &rtp(&s, i, packets[i as usize].pts_ns, &body), 0);
            }
        }
        let t = rx
            .carousel
            .tunes
            .iter()
            .position(|t| t.channel == last)
            .unwrap();
        rx.carousel.step(rx.carousel.tunes[t].join_ns);
        assert!(rx.carousel.listening(last));
        assert!(!rx.carousel.listening(0));
        let give_up = rx.carousel.tunes[t].give_up_ns;
        assert_eq!(rx.carousel.step(give_up - 1), vec![]);
        assert_eq!(rx.carousel.step(give_up), vec![Action::Leave(last)]);
        assert_eq!(rx.reassembly.missing(), lost);
        assert_eq!(rx.carousel.missing_of(t, |i| rx.reassembly.has(i)), lost);
    }

    #[test]
    fn identifies_on_a_channel_spanning_more_than_2_16_packets() {
        // 70,000 packets of 100 bytes, 1 ms apart: staggered channels carry
        // all of them, so sequence numbers repeat within a channel.
        let plan = Plan::new(
            title(70_000, 100, 1_000_000, 1000),
            Config::new(Scheme::Staggered, 35 * S),
        )
        .unwrap();
        let r = run(&plan, 10 * S, &|_| false);
        assert!(r.rx.reassembly.is_complete());
        assert_eq!(r.out, whole(&plan));
        assert_eq!(r.rx.stats.late, 0);
    }
}

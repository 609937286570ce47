//! A session as an engine thread owns it: a position in a track, a clock that
//! maps index send times to wall time, and the RTP/RTCP counters. A session
//! may also send the track's repair stream: when a block's last source
//! packet has left, the next tick sends that block's repair packets (and
//! no source packets), so they always follow their block on one clock.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_media::{index::Track, plan::PacketRecord, prefab::Ids};
use fjord_proto::{rtcp::SenderReportTemplate, rtp};
use fjord_storage::{Mode, ReadAhead};

use crate::{
    ThreadStats, Title,
    clock::{Clock, REAL_TIME},
    command::{Output, SessionSpec},
    datapath::{Batch, Packet},
    interleaved::Connection,
    lateness::{Hold, TickStart},
    trick::Trick,
};

mod interleaved;
mod play;
mod readiness;
mod repair;
mod rtcp;
mod seek;
mod stops;
mod timeline;

use readiness::NOT_READY_RETRY;
use repair::Repair;
use stops::AtEnd;
use timeline::Pace;

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

    pub(crate) fn connection(&self) -> Option<u64> {
        match self.output {
            Output::Interleaved { conn, .. } => Some(conn),
            Output::Udp { .. } => None,
        }
    }

    fn playing(&self) -> Option<Clock> {
        match self.state {
            State::Playing(c) => Some(c),
            _ => None,
        }
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
        if let Some(repair) = self.collect_repair(batch) {
            planned.repair = repair;
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
        self.finish_block(sent);
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
}

#[cfg(test)]
mod tests;

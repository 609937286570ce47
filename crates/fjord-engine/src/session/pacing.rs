//! Pacing, the hot path: each tick puts every session's due packets in the
//! thread's batch (`collect`: by reference into the title's mapping, no
//! copy, no allocation, no lock), and each session then accounts for those
//! that left and says when it wants the engine next (`advance`).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use fjord_media::{index::Track, plan::PacketRecord};
use fjord_proto::rtp;
use fjord_storage::Mode;

use super::{AtEnd, Session, State};
use crate::{
    ThreadStats, Title,
    clock::Clock,
    command::Output,
    datapath::{Batch, Packet},
    interleaved::Connection,
    lateness::{Hold, TickStart},
};

/// After the last packet was due and after it actually left (a stalled
/// thread may send it late), wait this long before RTCP BYE, so the client
/// has read the final packets before it learns the stream ended.
pub(super) const BYE_DELAY: Duration = Duration::from_secs(1);

/// The most packets one session puts in one tick's batch (one GSO send).
pub(crate) const MAX_BURST_PACKETS: usize = 64;

/// How soon to retry a session whose socket was full.
pub(super) const RETRY: Duration = Duration::from_millis(1);

/// How soon to look again at a session whose next packet is not resident
/// yet (the storage layer is reading it).
pub(super) const NOT_READY_RETRY: Duration = Duration::from_millis(2);

/// A first packet that leaves later than this after its schedule is logged.
const SLOW_START_MS: f64 = 20.0;

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
    pub(super) fn packet<'t>(
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

    /// Moves past `sent` packets that left: counters for RTCP, lateness for
    /// the engine's statistics; when that finishes a block, its repair
    /// packets are due.
    pub(super) fn account(&mut self, track: Track<'_>, sent: usize, clock: Clock, p: &mut Pacing) {
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

    /// RTCP and the next wake-up once the due packets are out.
    pub(super) fn after_sending(&mut self, clock: Clock, p: &mut Pacing) -> Option<Instant> {
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

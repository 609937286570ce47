//! A session as an engine thread owns it: a position in a track, a clock that
//! maps index send times to wall time, and the RTP/RTCP counters. This file
//! holds the type and its state; what it does is split by concern, one
//! `impl Session` per file:
//!
//! - `timeline`: where the session stands, and when each packet is due;
//! - `play`: PLAY and PAUSE: positioning, starting and stopping the clock,
//!   trick play;
//! - `seek`: a seek continues the stream's sequence numbers and RTP clock;
//! - `stops`: where a PLAY stops: BYE, a pause point, a pipelined PLAY, a
//!   loop's next round;
//! - `pacing`: a tick's due packets into the batch, and the account of
//!   those that left (the hot path);
//! - `interleaved`: the same over the client's RTSP connection;
//! - `repair`: the FEC repair stream, each block's repair packets after it;
//! - `readiness`: the storage layer: which of the next packets are resident;
//! - `rtcp`: sender reports and BYE.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_media::prefab::Ids;
use fjord_proto::rtcp::SenderReportTemplate;
use fjord_storage::ReadAhead;

use crate::{
    Start, Title, Until,
    clock::{Clock, REAL_TIME},
    command::{Output, SessionSpec},
    lateness::Hold,
    trick::Trick,
};

mod interleaved;
mod pacing;
mod play;
mod readiness;
mod repair;
mod rtcp;
mod seek;
mod stops;
mod timeline;

pub(crate) use pacing::{MAX_BURST_PACKETS, Pacing, Planned};
use repair::Repair;
use timeline::Pace;

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
}

#[cfg(test)]
mod tests;

//! The schedule a server publishes for a broadcast title
//! (`DESCRIBE rtsp://HOST/NAME?broadcast`, `docs/broadcast.md`): the plan's
//! description, the wall-clock instant of its epoch, the RTP numbering of
//! the title's packets and the group of every channel. The server writes
//! it, a client reads and checks it ([`Schedule::from_json`]) before it
//! trusts any of it.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::{CHANNEL_LIMIT, Description, Plan, PlanError};

/// The schedule format this client reads.
pub const SCHEDULE_VERSION: u32 = 1;
/// The largest schedule a client reads (a title's packet table costs about
/// 20 bytes a packet: hours of video).
pub const MAX_SCHEDULE_BYTES: usize = 64 << 20;
/// What a server publishes for a broadcast title.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// [`SCHEDULE_VERSION`].
    pub version: u32,
    /// The title's name, for people.
    pub title: String,
    /// The plan's epoch (time 0 of every channel) as a wall-clock instant,
    /// ns since the UNIX epoch (`CLOCK_REALTIME`).
    pub epoch_unix_ns: u64,
    pub ssrc: u32,
    /// Packet i is sent with sequence number `seq0 + i` (mod 2^16)...
    pub seq0: u16,
    /// ...and timestamp `ts0 +` its media timestamp (mod 2^32), in
    /// `clock_rate` Hz.
    pub ts0: u32,
    pub clock_rate: u32,
    pub payload_type: u8,
    /// The multicast TTL the server sends with (informative).
    pub ttl: u8,
    /// `channels[c]` carries the plan's channel c.
    pub channels: Vec<ChannelGroup>,
    pub plan: Description,
    /// The FEC repair flow every channel carries beside the title's
    /// packets; absent when the title has no parity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairFlow>,
}

/// The repair packets of a broadcast title (`docs/fec.md`'s repair stream,
/// `docs/broadcast.md`): a channel sends those of every block of `k`
/// packets its segments touch, right after the block's last packet in the
/// segment, to its own group and port with SSRC `ssrc`. Block `b` holds
/// packets `b·k ..` (the last block fewer); its repair packets say so in
/// their FEC payload ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairFlow {
    pub ssrc: u32,
    pub payload_type: u8,
    /// Source packets per block.
    pub k: u16,
    /// Repair packets per block.
    pub m: u16,
    /// E, the bytes of a repair symbol (after the 8-byte FEC payload ID).
    pub symbol_len: u16,
}

/// RFC 6865 over GF(2^8): a block's source and repair symbols number at
/// most 255.
const MAX_BLOCK_SYMBOLS: u32 = 255;
/// A symbol's header (`docs/fec.md`): no symbol is this short.
const SYMBOL_HEADER_LEN: u16 = 8;

/// Where a channel is sent: RTP to `group:port`, RTCP to `port + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelGroup {
    pub group: Ipv4Addr,
    pub port: u16,
}

/// Why a schedule is refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("the schedule is {0} bytes; at most {MAX_SCHEDULE_BYTES} are read")]
    TooLarge(usize),
    #[error("the schedule is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("schedule version {0}; this client reads version {SCHEDULE_VERSION}")]
    Version(u32),
    #[error("invalid schedule: {0}")]
    Invalid(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
}

impl Schedule {
    /// Parses and checks a published schedule, rebuilding its plan.
    pub fn from_json(body: &[u8]) -> Result<(Schedule, Plan), ScheduleError> {
        if body.len() > MAX_SCHEDULE_BYTES {
            return Err(ScheduleError::TooLarge(body.len()));
        }
        let s: Schedule = serde_json::from_slice(body)?;
        let plan = s.check()?;
        Ok((s, plan))
    }

    /// Checks everything but the plan, then rebuilds the plan (which checks
    /// itself against its description).
    pub fn check(&self) -> Result<Plan, ScheduleError> {
        if self.version != SCHEDULE_VERSION {
            return Err(ScheduleError::Version(self.version));
        }
        let invalid = |what: String| Err(ScheduleError::Invalid(what));
        let n = self.channels.len();
        if n == 0 || n > CHANNEL_LIMIT || n != self.plan.channels.len() {
            return invalid(format!(
                "{n} channel groups for {} plan channels (1..={CHANNEL_LIMIT})",
                self.plan.channels.len()
            ));
        }
        if n > self.plan.config.max_channels {
            return invalid(format!(
                "{n} channels, over the plan's cap of {}",
                self.plan.config.max_channels
            ));
        }
        if self.clock_rate == 0 {
            return invalid("clock rate 0".into());
        }
        let mut seen = BTreeSet::new();
        for (c, g) in self.channels.iter().enumerate() {
            if !g.group.is_multicast() || g.port == 0 || g.port == u16::MAX {
                return invalid(format!("channel {c}: {}:{}", g.group, g.port));
            }
            if !seen.insert((g.group, g.port)) {
                return invalid(format!("channel {c}: {}:{} twice", g.group, g.port));
            }
        }
        if let Some(r) = &self.repair {
            let symbols = u32::from(r.k) + u32::from(r.m);
            if r.k == 0 || r.m == 0 || symbols > MAX_BLOCK_SYMBOLS {
                return invalid(format!("repair flow: {}:{} blocks", r.k, r.m));
            }
            if r.symbol_len <= SYMBOL_HEADER_LEN || r.ssrc == self.ssrc {
                return invalid(format!(
                    "repair flow: symbol length {}, SSRC {:08X}",
                    r.symbol_len, r.ssrc
                ));
            }
        }
        Ok(Plan::from_description(&self.plan)?)
    }
}

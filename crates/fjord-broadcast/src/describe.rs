//! A plan as data (serde; JSON for publishing): what a server announces and
//! a client rebuilds the same plan from. Times of channels are ns from the
//! schedule's epoch (the server says which wall-clock instant that is);
//! times of segments and packets are ns of the title's timeline.
//!
//! The packet table (presentation time and payload size of every packet)
//! is part of it because the send times are derived from packet sizes;
//! in JSON it costs about 20 bytes per packet (1.2 MB for three minutes
//! at 3.5 Mbit/s in 1316-byte packets).

use serde::{Deserialize, Serialize};

use crate::channel::Channel;
use crate::scheme::Config;
use crate::segment::Segment;
use crate::{Packet, Plan, PlanError, Title};

/// The description's format; a client refuses others.
pub const DESCRIPTION_VERSION: u32 = 1;

/// How a channel orders its packets (the one order there is, spelled out
/// for readers of the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PacketOrder {
    /// Slots in order from each cycle's start; a slot's packets in index
    /// order, packet j at `phase + m·period + offset + floor(bytes of the
    /// segment before j · rate.per_ns / rate.bytes)`.
    SlotsThenPacketIndex,
}

/// One channel as published.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChannelDescription {
    #[serde(flatten)]
    pub channel: Channel,
    /// Informative: the sending rate and the mean over a cycle.
    pub bytes_per_s: f64,
    pub mean_bytes_per_s: f64,
    pub packet_order: PacketOrder,
}

/// A plan as published.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Description {
    pub version: u32,
    pub config: Config,
    pub duration_ns: u64,
    /// Derived from the rest; a client checks it gets the same.
    pub start_delay_ns: u64,
    pub worst_wait_ns: u64,
    pub segments: Vec<Segment>,
    pub channels: Vec<ChannelDescription>,
    /// Every packet's `[pts_ns, bytes]`, in order.
    pub packets: Vec<[u64; 2]>,
}

impl Plan {
    pub fn description(&self) -> Description {
        let channels = self
            .channels
            .iter()
            .enumerate()
            .map(|(c, ch)| ChannelDescription {
                channel: ch.clone(),
                bytes_per_s: ch.bytes_per_s(),
                mean_bytes_per_s: self.cycle_bytes(c) as f64 * 1e9 / ch.period_ns as f64,
                packet_order: PacketOrder::SlotsThenPacketIndex,
            })
            .collect();
        Description {
            version: DESCRIPTION_VERSION,
            config: self.config,
            duration_ns: self.title.duration_ns(),
            start_delay_ns: self.delay_ns,
            worst_wait_ns: self.worst_wait_ns,
            segments: self.segments.clone(),
            channels,
            packets: self
                .title
                .packets()
                .iter()
                .map(|p| [p.pts_ns, u64::from(p.bytes)])
                .collect(),
        }
    }

    /// Rebuilds a plan from a description, checking everything in it (it
    /// comes from the network): the packets, that the segments tile them,
    /// that every slot fits its channel, and that the derived start delay
    /// and worst wait are the described ones.
    pub fn from_description(d: &Description) -> Result<Plan, PlanError> {
        if d.version != DESCRIPTION_VERSION {
            return Err(PlanError::invalid(format!(
                "version {} (this client reads {DESCRIPTION_VERSION})",
                d.version
            )));
        }
        let title = title_of(d)?;
        let channels = d.channels.iter().map(|c| c.channel.clone()).collect();
        let plan = Plan::assemble(title, d.config, d.segments.clone(), channels)?;
        if (plan.delay_ns, plan.worst_wait_ns) != (d.start_delay_ns, d.worst_wait_ns) {
            return Err(PlanError::invalid(format!(
                "start delay and worst wait derive as {} and {} ns, described as {} and {}",
                plan.delay_ns, plan.worst_wait_ns, d.start_delay_ns, d.worst_wait_ns
            )));
        }
        Ok(plan)
    }
}

/// The title of a description; its sync points are the segments' starts
/// (the only ones a plan uses).
fn title_of(d: &Description) -> Result<Title, PlanError> {
    let packets = d
        .packets
        .iter()
        .map(|&[pts_ns, bytes]| {
            let bytes =
                u32::try_from(bytes).map_err(|_| PlanError::invalid("packet over 4 GiB"))?;
            Ok(Packet { pts_ns, bytes })
        })
        .collect::<Result<Vec<_>, PlanError>>()?;
    let sync = d.segments.iter().map(|s| s.first_packet).collect();
    Title::new(packets, sync, d.duration_ns)
}

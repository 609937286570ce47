//! A client of one broadcast title, sans-IO ([`Receiver`]): each datagram
//! identified, put in order, measured against its play time and counted;
//! repair packets to the channels' FEC.

use std::ops::Range;

use fjord_broadcast::schedule::Schedule;
use fjord_broadcast::{JoinPlan, Plan};
use fjord_fec::SourcePacket;

use super::carousel::{Carousel, Margins};
use super::fec::{RepairOutcome, Repairs};
use super::identify::{Numbering, channel_packets, identify, numbering};
use super::playout::Playout;
use super::reassembly::{Insert, Reassembly};
use crate::rtp::{Received, parse_rtp};

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

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

mod carousel;
mod fec;
mod identify;
mod playout;
mod ranges;
mod reassembly;
mod receiver;
#[cfg(test)]
mod tests;

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

pub use carousel::{Action, Carousel, Margins, Tune, TuneState};
pub use fec::{RepairOutcome, Repairs};
pub use fjord_broadcast::schedule::{
    ChannelGroup, MAX_SCHEDULE_BYTES, RepairFlow, SCHEDULE_VERSION, Schedule, ScheduleError,
};
pub use fjord_broadcast::{Description, JoinPlan, Plan, PlanError};
pub use identify::{Numbering, channel_packets, identify, numbering, window_packets};
pub use playout::Playout;
pub use ranges::show_ranges;
pub use reassembly::{Insert, Reassembly};
pub use receiver::{Outcome, Receiver, Stats};

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

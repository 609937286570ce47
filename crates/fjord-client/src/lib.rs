//! fjord-client: a small blocking RTSP/RTP client.
//!
//! It speaks just enough RTSP/1.0 to play a title from a fjord server (or any
//! server offering one MP2T track): DESCRIBE, SETUP over UDP or TCP
//! interleaved, PLAY with an optional range, PAUSE, TEARDOWN and keepalives.
//! Media arrives as [`Event`]s — RTP packets stamped with their arrival time,
//! and RTCP compound packets — from a [`UdpReceiver`] or from the RTSP
//! connection itself ([`RtspClient::recv_interleaved`]); [`capture`] collects
//! a whole stream until the server's RTCP BYE or a quiet period.
//!
//! The client is a verifier of what a server sends, so its RTP and RTCP
//! parsers are written here independently of the server's serializers in
//! `fjord-proto`: a bug shared by both sides could not hide behind a test.
//!
//! `rtsps://` URLs speak TLS ([`tls`], rustls; the certificate is not
//! checked: this client verifies what a server sends, it trusts it with
//! nothing).
//!
//! Everything is `std` only: no async runtime, one thread per UDP socket.
//! The exception is [`load`], the load generator behind `fjord load`: one
//! thread for all sessions, epoll and `recvmmsg` with `UDP_GRO` through libc
//! ([`recv`], which the benchmarks' receivers share).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod broadcast;
mod capture;
mod error;
pub mod fec;
pub mod load;
pub mod recv;
mod rtcp;
mod rtp;
mod rtsp;
pub mod tls;
mod udp;

pub use capture::{Capture, EndReason, PacketSource, capture};
pub use error::Error;
pub use rtcp::{RtcpPacket, RtcpReceived, parse_rtcp_compound};
pub use rtp::{Received, RtpError, parse_rtp};
pub use rtsp::{
    Describe, PlayReply, Response, RtpInfo, RtspClient, Session, TransportKind, parse_npt_range,
    parse_rtp_info,
};
pub use udp::{UdpReceiver, bind_pair};

use std::time::Instant;

/// One thing that arrived from the server on the media channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An RTP packet.
    Rtp(Received),
    /// An RTCP compound packet.
    Rtcp(RtcpReceived),
    /// Bytes on a media channel that do not parse as RTP/RTCP.
    Garbage {
        /// When they arrived.
        arrival: Instant,
        /// Interleaved channel, or 0 for the UDP RTP port and 1 for RTCP.
        channel: u8,
        /// The bytes.
        data: Vec<u8>,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

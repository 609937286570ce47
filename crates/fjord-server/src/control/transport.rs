//! A SETUP's transport: where a stream's RTP and RTCP go and come from.
//! Interleaved channels are decided at once; UDP asks the driver to bind
//! ([`Bind`]: a port pair of the stream's own, or the shared pair) and is
//! made from what it bound ([`Bound`]), or refused as its failure says.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use fjord_engine::{Output, UdpSocket};
use fjord_proto::rtsp::transport;

use super::{Client, Reply, refuse};
use crate::{
    Server,
    outbox::Outbox,
    ports::PortPair,
    session::SessionId,
    shared::{ConnectedPlace, RouteError, SharedPair},
};

/// The sockets a UDP stream needs, for the driver to bind.
pub(crate) enum Bind {
    /// A pair of the server's range on `local` for the stream alone, its
    /// RTP socket connected to `rtp_peer`.
    Own { local: IpAddr, rtp_peer: SocketAddr },
    /// The shared pair on `local` (bound the first time), and the RTP
    /// socket of a stream of engine thread `shard` to the client's `rtp`
    /// address (one of its own, connected, while the pair has room).
    Shared {
        local: IpAddr,
        rtp: SocketAddr,
        shard: u64,
    },
    /// A pair of the server's range on `local` sending a multicast
    /// group's stream to `rtp` and `rtcp` with `ttl`.
    Group {
        local: IpAddr,
        rtp: SocketAddr,
        rtcp: SocketAddr,
        ttl: u8,
    },
}

/// What the driver bound for a [`Bind`].
pub(crate) enum Bound {
    Own(PortPair),
    /// What a group's stream sends on.
    Group(Output),
    Shared {
        pair: Arc<SharedPair>,
        rtp: UdpSocket,
        /// The client's RTP address as the pair's sockets spell it.
        rtp_peer: SocketAddr,
        place: Option<ConnectedPlace>,
    },
}

/// A UDP stream's addresses, decided before anything is bound.
pub(super) struct Udp {
    pub dest: IpAddr,
    pub client: (u16, u16),
    pub shard: u64,
    pub ssrc: u32,
}

/// The stream's transport, made: what the engine sends on, the thread
/// it lives on, the `Transport` reply, its interleaved channels and where
/// its RTCP comes in.
pub(super) struct Made {
    pub output: Output,
    pub shard: u64,
    pub reply: String,
    pub interleaved: Option<(u8, u8)>,
    pub rtcp: RtcpIn,
}

/// Where a stream's RTCP from the client comes in.
pub(super) enum RtcpIn {
    /// On the stream's own RTCP socket (a reader task per stream), from
    /// the client's address.
    Own(socket2::Socket, SocketAddr),
    /// On the shared pair's socket, routed by the client's RTCP address;
    /// with the stream's place among the pair's connected RTP sockets.
    Routed(Arc<SharedPair>, SocketAddr, Option<ConnectedPlace>),
    /// In `$` frames on the RTSP connection.
    Interleaved,
}

/// RTP and RTCP over UDP to the client (or to a `destination=` that
/// `destination_allow` permits): what to bind for it, from the shared
/// pair or a pair of the session's own.
pub(super) fn udp(
    server: &Server,
    conn: &dyn Client,
    (client_rtp, client_rtcp): (u16, u16),
    destination: Option<IpAddr>,
    (shard, ssrc): (u64, u32),
) -> Result<(Bind, Udp), Reply> {
    let (peer, local) = match (conn.peer(), conn.local()) {
        (Ok(peer), Ok(local)) => (peer.ip(), local.ip()),
        (Err(e), _) | (_, Err(e)) => return Err(refuse(500, &e.to_string())),
    };
    let dest = destination.unwrap_or(peer);
    let allowed = |d: &IpAddr| {
        (server.config().destination_allow)
            .iter()
            .any(|n| n.contains(d))
    };
    if dest != peer && !allowed(&dest) {
        return Err(refuse(
            403,
            "RTP goes only to the requesting client's address",
        ));
    }
    let rtp = SocketAddr::new(dest, client_rtp);
    let bind = match server.shared {
        None => Bind::Own {
            local,
            rtp_peer: rtp,
        },
        Some(_) => Bind::Shared { local, rtp, shard },
    };
    let client = (client_rtp, client_rtcp);
    Ok((
        bind,
        Udp {
            dest,
            client,
            shard,
            ssrc,
        },
    ))
}

/// The UDP transport of `session`'s stream from what was bound for it; a
/// bind that failed is 453 (no free pair), as is a shared pair with no
/// room for another client.
pub(super) fn udp_made(
    session: SessionId,
    udp: &Udp,
    bound: std::io::Result<Bound>,
) -> Result<Made, Reply> {
    let (client_rtp, client_rtcp) = udp.client;
    let reply = |server_rtp: u16| {
        transport::reply_udp(
            client_rtp,
            client_rtcp,
            server_rtp,
            server_rtp + 1,
            udp.ssrc,
        )
    };
    match bound.map_err(|e| refuse(453, &e.to_string()))? {
        Bound::Group(_) => Err(refuse(500, "a group's sockets for a unicast stream")),
        Bound::Own(pair) => {
            let rtcp_peer = SocketAddr::new(udp.dest, client_rtcp);
            let reader = (pair.rtcp.try_clone()).map_err(|e| refuse(500, &e.to_string()))?;
            Ok(Made {
                reply: reply(pair.rtp_port),
                output: Output::Udp {
                    rtp: pair.rtp.into(),
                    rtp_peer: SocketAddr::new(udp.dest, client_rtp),
                    rtcp: pair.rtcp.into(),
                    rtcp_peer,
                },
                shard: udp.shard,
                interleaved: None,
                rtcp: RtcpIn::Own(reader, rtcp_peer),
            })
        }
        Bound::Shared {
            pair,
            rtp,
            rtp_peer,
            place,
        } => {
            let rtcp_peer = pair.peer(SocketAddr::new(udp.dest, client_rtcp));
            match pair.route(rtcp_peer, session.number()) {
                Ok(()) => {}
                Err(RouteError::Taken) => {
                    return Err(refuse(461, "client_port already in use by another stream"));
                }
                Err(RouteError::Full) => return Err(refuse(453, "too many UDP streams")),
            }
            Ok(Made {
                reply: reply(pair.rtp_port),
                output: Output::Udp {
                    rtp,
                    rtp_peer,
                    rtcp: UdpSocket::Shared(pair.rtcp()),
                    rtcp_peer,
                },
                shard: udp.shard,
                interleaved: None,
                rtcp: RtcpIn::Routed(pair, rtcp_peer, place),
            })
        }
    }
}

/// RTP and RTCP in `$` frames on the RTSP connection, whose write side
/// the engine thread of the connection then owns.
pub(super) fn tcp(
    (conn, out): (&mut dyn Client, &mut Outbox),
    [rtp_channel, rtcp_channel]: [u8; 2],
    ssrc: u32,
) -> Result<Made, Reply> {
    if conn.channel_in_use(rtp_channel) || conn.channel_in_use(rtcp_channel) {
        return Err(refuse(
            461,
            "interleaved channels already in use on this connection",
        ));
    }
    conn.attach(out).map_err(|e| refuse(500, &e.to_string()))?;
    conn.use_channels([rtp_channel, rtcp_channel]);
    Ok(Made {
        output: Output::Interleaved {
            conn: conn.id(),
            rtp_channel,
            rtcp_channel,
        },
        shard: conn.id(),
        reply: transport::reply_tcp(rtp_channel, rtcp_channel, ssrc),
        interleaved: Some((rtp_channel, rtcp_channel)),
        rtcp: RtcpIn::Interleaved,
    })
}

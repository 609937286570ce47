//! One server port pair for every UDP session (`udp_sockets = "shared"`),
//! as live555 and most RTSP servers do: SETUP gives every client the same
//! `server_port=`. Per local address the server binds one pair; each engine
//! thread sends RTP from its own unconnected socket bound to the pair's RTP
//! port (`SO_REUSEPORT`; its zero-copy completions stay its own), with the
//! destination in every message; sender reports and BYE leave from the
//! RTCP socket, which also receives every client's receiver reports. A
//! report is routed by its source address to the stream whose client
//! announced that RTCP port; from any other address it is dropped. The
//! kernel then holds two sockets per local address and engine thread, not
//! two per session, besides the connected RTP sockets of a pair's first
//! streams ([`connected`]).

mod connected;

use std::{
    collections::HashMap,
    io,
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::{Arc, Mutex, MutexGuard, Weak, atomic::AtomicUsize},
    time::Instant,
};

pub use connected::Place as ConnectedPlace;
use fjord_engine::UdpSocket;
use fjord_proto::rtcp::RtcpInfo;

use socket2::Socket;

use crate::ports::{PortPool, bind_rtp_again};

/// Who takes the RTCP a route's client sends: the sessions, each route
/// naming its owner (the session whose stream the client set up with that
/// address) by a number of the sink's.
pub trait RtcpSink: Send + Sync {
    /// RTCP `infos` arrived from `client`, a route of `owner`'s.
    fn rtcp_from(&self, owner: u64, client: SocketAddr, infos: &[RtcpInfo], now: Instant);
}

/// RTCP routes a pair holds per `max_sessions`: a session's streams each
/// have one (video, audio, their repair streams).
pub const ROUTES_PER_SESSION: usize = 4;

/// The shared pairs, one per local address, made on first use.
pub struct SharedPorts {
    threads: usize,
    /// The most RTCP routes one pair holds.
    limit: usize,
    /// The most streams of one pair with a connected RTP socket.
    connected: usize,
    pairs: Mutex<HashMap<IpAddr, Arc<SharedPair>>>,
    sink: Arc<dyn RtcpSink>,
}

impl SharedPorts {
    /// Pairs with a socket for each of `threads` engine threads, each
    /// routing RTCP for at most `limit` streams, and giving `connected`
    /// streams a connected RTP socket ([`connected`]), and handing the
    /// RTCP they route to `sink`.
    pub fn new(threads: usize, limit: usize, connected: usize, sink: Arc<dyn RtcpSink>) -> Self {
        Self {
            threads: threads.max(1),
            limit,
            connected,
            pairs: Mutex::default(),
            sink,
        }
    }

    /// The pair on `ip`: bound from `pool` and its RTCP reader started
    /// the first time (inside the tokio runtime).
    pub fn pair(&self, ip: IpAddr, pool: &PortPool) -> io::Result<Arc<SharedPair>> {
        let mut pairs = self.pairs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pairs.get(&ip) {
            return Ok(p.clone());
        }
        let (pair, reader) = SharedPair::bind(ip, pool, self)?;
        let reader = tokio::net::UdpSocket::from_std(reader.into())?;
        tokio::spawn(read_rtcp(Arc::downgrade(&pair), reader));
        tracing::info!(%ip, rtp_port = pair.rtp_port, "shared UDP port pair");
        pairs.insert(ip, pair.clone());
        Ok(pair)
    }
}

/// A client's RTCP address as a route's key: IPv4 as IPv4-mapped IPv6,
/// 18 bytes where a `SocketAddr` takes 32 (the table has an entry per
/// stream).
type RouteKey = (Ipv6Addr, u16);

/// Whether two client addresses are one route (the kernel may report an
/// IPv4 client as IPv4-mapped IPv6).
pub fn same_client(a: SocketAddr, b: SocketAddr) -> bool {
    route_key(a) == route_key(b)
}

fn route_key(client: SocketAddr) -> RouteKey {
    let ip = match client.ip() {
        IpAddr::V4(ip) => ip.to_ipv6_mapped(),
        IpAddr::V6(ip) => ip,
    };
    (ip, client.port())
}

#[derive(Debug, PartialEq, Eq)]
pub enum RouteError {
    /// Another stream's client already announced this RTCP address.
    Taken,
    /// The table holds its limit of streams.
    Full,
}

pub struct SharedPair {
    pub rtp_port: u16,
    /// One RTP socket per engine thread, all on `rtp_port`.
    rtp: Vec<Arc<Socket>>,
    rtp_addr: SocketAddr,
    /// Streams with a connected RTP socket of their own, and their limit.
    connected: Arc<AtomicUsize>,
    connected_limit: usize,
    rtcp: Arc<Socket>,
    /// The owner (a session) of each client's RTCP address (as the kernel
    /// reports a source); its stream is the one set up with that address.
    routes: Mutex<HashMap<RouteKey, u64>>,
    limit: usize,
    sink: Arc<dyn RtcpSink>,
}

impl SharedPair {
    /// Binds the pair (as `ports` sets pairs up) and returns it with a
    /// handle on its RTCP socket for the reader.
    fn bind(ip: IpAddr, pool: &PortPool, ports: &SharedPorts) -> io::Result<(Arc<Self>, Socket)> {
        let pair = pool.bind_shared(ip)?;
        let addr = SocketAddr::new(ip, pair.rtp_port);
        let mut rtp = vec![pair.rtp];
        for _ in 1..ports.threads {
            rtp.push(bind_rtp_again(addr)?);
        }
        let rtp = rtp
            .into_iter()
            .map(|s| {
                fjord_engine::datapath::prepare_shared(&s)?;
                // Nobody reads the RTP port: keep what clients send to it
                // (NAT keep-alives) from piling up.
                let _ = s.set_recv_buffer_size(0);
                Ok(Arc::new(s))
            })
            .collect::<io::Result<Vec<_>>>()?;
        pair.rtcp.set_nonblocking(true)?;
        let reader = pair.rtcp.try_clone()?;
        Ok((
            Arc::new(Self {
                rtp_port: pair.rtp_port,
                rtp,
                rtp_addr: addr,
                connected: Arc::default(),
                connected_limit: ports.connected,
                rtcp: Arc::new(pair.rtcp),
                routes: Mutex::default(),
                limit: ports.limit,
                sink: ports.sink.clone(),
            }),
            reader,
        ))
    }

    /// The RTP socket of the engine thread that `shard` names.
    pub fn rtp(&self, shard: u64) -> Arc<Socket> {
        self.rtp[(shard % self.rtp.len() as u64) as usize].clone()
    }

    /// The RTP socket for a stream of engine thread `shard` to `peer` (as
    /// [`Self::peer`] gives it): one of its own, connected, while the pair
    /// has a place for it ([`connected`]), with that place; else the
    /// thread's shared socket.
    pub fn rtp_for(&self, shard: u64, peer: SocketAddr) -> (UdpSocket, Option<ConnectedPlace>) {
        let limit = self.connected_limit;
        match connected::connect(self.rtp_addr, peer, &self.connected, limit) {
            Some(Ok((socket, place))) => return (UdpSocket::Own(socket), Some(place)),
            Some(Err(e)) => tracing::debug!(%peer, "no connected RTP socket ({e}); the shared one"),
            None => {}
        }
        (UdpSocket::Shared(self.rtp(shard)), None)
    }

    pub fn rtcp(&self) -> Arc<Socket> {
        self.rtcp.clone()
    }

    /// `client` as the kernel reports the source of a datagram to this
    /// pair's sockets (IPv4 clients of an IPv6 socket appear mapped).
    pub fn peer(&self, client: SocketAddr) -> SocketAddr {
        match (
            client,
            self.rtcp.local_addr().ok().and_then(|a| a.as_socket()),
        ) {
            (SocketAddr::V4(a), Some(SocketAddr::V6(_))) => {
                SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port())
            }
            _ => client,
        }
    }

    fn routes(&self) -> MutexGuard<'_, HashMap<RouteKey, u64>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends RTCP from `client` to `owner`'s stream set up with that
    /// address (the owner unroutes it when the stream ends).
    pub fn route(&self, client: SocketAddr, owner: u64) -> Result<(), RouteError> {
        let key = route_key(client);
        let mut routes = self.routes();
        if routes.contains_key(&key) {
            return Err(RouteError::Taken);
        }
        if routes.len() >= self.limit {
            return Err(RouteError::Full);
        }
        routes.insert(key, owner);
        Ok(())
    }

    /// Forgets the route from `client` if it is `owner`'s (one address
    /// routes to one stream, so that is the stream's).
    pub fn unroute(&self, client: SocketAddr, owner: u64) {
        let key = route_key(client);
        let mut routes = self.routes();
        if routes.get(&key) == Some(&owner) {
            routes.remove(&key);
        }
    }

    #[cfg(test)]
    pub fn route_count(&self) -> usize {
        self.routes().len()
    }

    /// One RTCP datagram from `from`: to its stream's session, or dropped
    /// (false) when no stream's client announced that address.
    pub fn deliver(&self, from: SocketAddr, bytes: &[u8], now: Instant) -> bool {
        // The routes' lock is let go before the sink takes its own.
        let owner = self.routes().get(&route_key(from)).copied();
        let Some(owner) = owner else {
            return false;
        };
        if let Ok(infos) = fjord_proto::rtcp::parse_compound(bytes) {
            self.sink.rtcp_from(owner, from, &infos, now);
        }
        true
    }
}

/// Reads the pair's RTCP socket for as long as the pair lives.
async fn read_rtcp(pair: Weak<SharedPair>, socket: tokio::net::UdpSocket) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            // ICMP errors (a client's RTCP port closed) end no reader.
            continue;
        };
        let Some(pair) = pair.upgrade() else { return };
        if !pair.deliver(from, &buf[..n], Instant::now()) {
            tracing::debug!(%from, "RTCP from an address no stream announced; dropped");
        }
    }
}

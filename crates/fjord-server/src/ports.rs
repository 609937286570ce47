//! Server-side RTP/RTCP port pairs for UDP sessions: an even port for RTP and
//! the next odd one for RTCP (RFC 3550 §11), taken round-robin from the
//! configured range. The kernel is the bookkeeper: a pair is free when both
//! binds succeed, and returns to the pool when its sockets close.

use std::{
    io,
    net::{IpAddr, SocketAddr},
    sync::atomic::{AtomicU32, Ordering},
};

use socket2::{Domain, Protocol, Socket, Type};

pub struct PortPool {
    first_pair: u32,
    pairs: u32,
    cursor: AtomicU32,
}

pub struct PortPair {
    pub rtp: Socket,
    pub rtcp: Socket,
    pub rtp_port: u16,
}

impl PortPool {
    pub fn new(min: u16, max: u16) -> Self {
        let first = u32::from(min).div_ceil(2);
        let last = u32::from(max).saturating_sub(1) / 2;
        Self {
            first_pair: first,
            pairs: last.saturating_sub(first) + 1,
            cursor: AtomicU32::new(0),
        }
    }

    /// Binds a free pair on `ip`; fails when every pair in the range is taken.
    pub fn bind(&self, ip: IpAddr) -> io::Result<PortPair> {
        self.bind_with(ip, false)
    }

    /// Binds a free pair on `ip` whose RTP port more sockets may join
    /// with [`bind_rtp_again`] (`SO_REUSEPORT`, one per engine thread). The
    /// RTCP port, bound first and exclusively, keeps the pair ours.
    pub fn bind_shared(&self, ip: IpAddr) -> io::Result<PortPair> {
        self.bind_with(ip, true)
    }

    /// A free pair on `local` sending to a multicast group, RTP to `rtp`
    /// and RTCP to `rtcp`, `ttl` hops at most: what a group's engine
    /// stream sends on (a session's group, a broadcast channel).
    pub fn bind_to_group(
        &self,
        local: IpAddr,
        (rtp, rtcp): (SocketAddr, SocketAddr),
        ttl: u8,
    ) -> io::Result<fjord_engine::Output> {
        let pair = self.bind(local)?;
        for s in [&pair.rtp, &pair.rtcp] {
            match rtp.ip() {
                IpAddr::V4(_) => s.set_multicast_ttl_v4(u32::from(ttl))?,
                IpAddr::V6(_) => s.set_multicast_hops_v6(u32::from(ttl))?,
            }
        }
        pair.rtp.connect(&rtp.into())?;
        pair.rtp.set_nonblocking(true)?;
        Ok(fjord_engine::Output::Udp {
            rtp: pair.rtp.into(),
            rtp_peer: rtp,
            rtcp: pair.rtcp.into(),
            rtcp_peer: rtcp,
        })
    }

    fn bind_with(&self, ip: IpAddr, shared: bool) -> io::Result<PortPair> {
        for _ in 0..self.pairs {
            let k = self.cursor.fetch_add(1, Ordering::Relaxed) % self.pairs;
            let rtp_port = ((self.first_pair + k) * 2) as u16;
            let Ok(rtcp) = udp(SocketAddr::new(ip, rtp_port + 1), false) else {
                continue;
            };
            let Ok(rtp) = udp(SocketAddr::new(ip, rtp_port), shared) else {
                continue;
            };
            return Ok(PortPair {
                rtp,
                rtcp,
                rtp_port,
            });
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "no free RTP port pair in the configured range",
        ))
    }
}

/// Another socket on the RTP port of a pair from [`PortPool::bind_shared`].
pub fn bind_rtp_again(addr: SocketAddr) -> io::Result<Socket> {
    udp(addr, true)
}

fn udp(addr: SocketAddr, reuse_port: bool) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    s.bind(&addr.into())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_even_odd_and_distinct_until_the_range_is_used_up() {
        let pool = PortPool::new(47000, 47005);
        let ip = "127.0.0.1".parse().unwrap();
        let a = pool.bind(ip).unwrap();
        let b = pool.bind(ip).unwrap();
        let c = pool.bind(ip).unwrap();
        let mut ports = [a.rtp_port, b.rtp_port, c.rtp_port];
        ports.sort();
        assert_eq!(ports, [47000, 47002, 47004]);
        assert!(pool.bind(ip).is_err(), "range holds three pairs");
        drop(b);
        assert_eq!(pool.bind(ip).unwrap().rtp_port % 2, 0);
    }
}

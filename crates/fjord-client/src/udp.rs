//! Receiving RTP/RTCP over a UDP port pair.
//!
//! One thread per socket stamps each datagram with its arrival time the
//! moment it is read and hands it over a channel, so arrival times are not
//! skewed by whoever consumes the events.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::capture::PacketSource;
use crate::rtcp::{RtcpReceived, empty_receiver_report, parse_rtcp_compound};
use crate::rtp::parse_rtp;
use crate::{Event, Result};

/// A bound even/odd UDP port pair and the threads reading it.
#[derive(Debug)]
pub struct UdpReceiver {
    rtp_port: u16,
    rtcp: UdpSocket,
    /// `None` when the events go to a channel given to [`UdpReceiver::bind_into`].
    events: Option<Receiver<Event>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    server_rtcp: Option<SocketAddr>,
    ssrc: u32,
}

impl UdpReceiver {
    /// Binds an even port and the odd one above it on `ip`, and starts
    /// reading both.
    pub fn bind(ip: IpAddr) -> io::Result<UdpReceiver> {
        let (tx, events) = mpsc::channel();
        let mut rx = UdpReceiver::bind_into(ip, tx)?;
        rx.events = Some(events);
        Ok(rx)
    }

    /// Like [`UdpReceiver::bind`], sending the events to `tx`.
    pub fn bind_into(ip: IpAddr, tx: mpsc::Sender<Event>) -> io::Result<UdpReceiver> {
        let (rtp, rtcp) = bind_pair(ip)?;
        let rtp_port = rtp.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (sock, is_rtcp) in [(rtp, false), (rtcp.try_clone()?, true)] {
            sock.set_read_timeout(Some(Duration::from_millis(50)))?;
            let tx = tx.clone();
            let stop = Arc::clone(&stop);
            threads.push(std::thread::spawn(move || {
                read_loop(&sock, is_rtcp, &tx, &stop)
            }));
        }
        Ok(UdpReceiver {
            rtp_port,
            rtcp,
            events: None,
            stop,
            threads,
            server_rtcp: None,
            ssrc: std::process::id().rotate_left(16) ^ u32::from(rtp_port),
        })
    }

    /// The RTP port (even); RTCP is one above.
    pub fn rtp_port(&self) -> u16 {
        self.rtp_port
    }

    /// Sets where receiver reports go (the server's RTCP port).
    pub fn set_server_rtcp(&mut self, addr: SocketAddr) {
        self.server_rtcp = Some(addr);
    }

    /// Sends an empty receiver report to the server's RTCP port, if known.
    pub fn send_receiver_report(&self) -> io::Result<()> {
        if let Some(addr) = self.server_rtcp {
            self.rtcp.send_to(&empty_receiver_report(self.ssrc), addr)?;
        }
        Ok(())
    }

    /// The next event, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Option<Event> {
        match &self.events {
            Some(events) => events.recv_timeout(timeout).ok(),
            None => {
                std::thread::sleep(timeout);
                None
            }
        }
    }
}

impl PacketSource for UdpReceiver {
    fn recv_event(&mut self, timeout: Duration) -> Result<Option<Event>> {
        Ok(self.recv(timeout))
    }
}

impl Drop for UdpReceiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn read_loop(sock: &UdpSocket, is_rtcp: bool, tx: &mpsc::Sender<Event>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(_) => return,
        };
        let arrival = Instant::now();
        let data = &buf[..n];
        let event = if is_rtcp {
            match parse_rtcp_compound(data) {
                Some(packets) => Event::Rtcp(RtcpReceived { arrival, packets }),
                None => garbage(arrival, 1, data),
            }
        } else {
            match parse_rtp(data, arrival) {
                Ok(p) => Event::Rtp(p),
                Err(_) => garbage(arrival, 0, data),
            }
        };
        if tx.send(event).is_err() {
            return;
        }
    }
}

fn garbage(arrival: Instant, channel: u8, data: &[u8]) -> Event {
    Event::Garbage {
        arrival,
        channel,
        data: data.to_vec(),
    }
}

/// Binds an even port and its odd successor (RTP and RTCP, RFC 3550 §11).
pub fn bind_pair(ip: IpAddr) -> io::Result<(UdpSocket, UdpSocket)> {
    for _ in 0..500 {
        let a = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        let port = a.local_addr()?.port();
        if port % 2 != 0 || port == u16::MAX {
            continue;
        }
        if let Ok(b) = UdpSocket::bind(SocketAddr::new(ip, port + 1)) {
            return Ok((a, b));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free even/odd UDP port pair",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn binds_even_pair_and_receives() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut r = UdpReceiver::bind(lo).unwrap();
        assert_eq!(r.rtp_port() % 2, 0);
        let tx = UdpSocket::bind((lo, 0)).unwrap();
        let mut pkt = vec![0x80, 33, 0, 9, 0, 0, 0, 1, 0, 0, 0, 2];
        pkt.extend_from_slice(&[0x47; 188]);
        tx.send_to(&pkt, (lo, r.rtp_port())).unwrap();
        tx.send_to(&[0x81, 203, 0, 1, 0, 0, 0, 2], (lo, r.rtp_port() + 1))
            .unwrap();
        tx.send_to(b"junk", (lo, r.rtp_port())).unwrap();
        let mut got = Vec::new();
        while let Some(e) = r.recv(Duration::from_secs(2)) {
            got.push(e);
            if got.len() == 3 {
                break;
            }
        }
        assert_eq!(got.len(), 3);
        assert!(
            got.iter()
                .any(|e| matches!(e, Event::Rtp(p) if p.seq == 9 && p.payload.len() == 188))
        );
        assert!(
            got.iter()
                .any(|e| matches!(e, Event::Rtcp(r) if r.is_bye()))
        );
        assert!(
            got.iter()
                .any(|e| matches!(e, Event::Garbage { channel: 0, .. }))
        );
    }
}

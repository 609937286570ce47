//! The system calls of the load generator, wrapped: UDP port pairs set up
//! to receive ([`crate::recv`]: big buffers, `UDP_GRO`, kernel timestamps;
//! epoll and `recvmmsg` come from there too), nonblocking TCP connects, the
//! realtime clock and per-thread CPU.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

pub use crate::recv::{BATCH, Epoll, RecvBatch, UdpOptions};
use crate::recv::{getsockopt_int, receive_options, setsockopt_int};

/// Nanoseconds on `CLOCK_REALTIME`, the clock of `SO_TIMESTAMPNS`.
pub fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// User and system CPU seconds of the calling thread.
pub fn thread_cpu() -> (f64, f64) {
    // SAFETY: zeroed rusage is a valid out value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// Binds an even RTP port and the odd RTCP port above it on `ip`, both
/// nonblocking; the RTP socket gets a big receive buffer, `UDP_GRO` (if
/// `gro`) and kernel timestamps where the kernel allows.
pub fn udp_pair(
    ip: IpAddr,
    rcvbuf: usize,
    gro: bool,
) -> io::Result<(UdpSocket, UdpSocket, UdpOptions)> {
    let (rtp, rtcp) = crate::udp::bind_pair(ip)?;
    rtp.set_nonblocking(true)?;
    rtcp.set_nonblocking(true)?;
    let opts = receive_options(rtp.as_raw_fd(), rcvbuf, gro);
    Ok((rtp, rtcp, opts))
}

/// Starts a nonblocking TCP connect; it completes when the socket is writable.
pub fn connect_nonblocking(addr: SocketAddr) -> io::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_nonblocking(true)?;
    s.set_tcp_nodelay(true)?;
    match s.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(s.into())
}

/// The pending error of a socket (a finished nonblocking connect).
pub fn take_socket_error(fd: RawFd) -> io::Result<()> {
    match getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR) {
        Some(0) => Ok(()),
        Some(e) => Err(io::Error::from_raw_os_error(e)),
        None => Err(io::Error::last_os_error()),
    }
}

/// Asks the kernel to acknowledge at once what arrives next on a TCP socket
/// (`TCP_QUICKACK`; the kernel drops back to delayed ACKs on its own, so
/// this is re-armed after every read).
pub fn quickack(fd: RawFd) {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, 1);
}

/// Reads from a nonblocking fd into `buf`: `Ok(None)` when nothing is there.
pub fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for writes of its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn recvmmsg_reads_a_batch_with_timestamps() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (rx, _rtcp, opts) = udp_pair(lo, 1 << 20, true).unwrap();
        assert!(opts.rcvbuf > 0);
        let tx = UdpSocket::bind((lo, 0)).unwrap();
        let port = rx.local_addr().unwrap().port();
        for i in 0..5u8 {
            tx.send_to(&[i; 100], (lo, port)).unwrap();
        }
        let mut batch = RecvBatch::new();
        let mut got = Vec::new();
        let before = now_ns();
        for _ in 0..100 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let m = batch.message(i);
                assert!(!m.truncated);
                if opts.timestamps {
                    let ts = m.timestamp.expect("kernel timestamp");
                    assert!((ts - before).abs() < 5_000_000_000);
                }
                for seg in crate::load::stats::gro_segments(m.data, m.gso_size) {
                    got.push(seg[0]);
                }
            }
            if got.len() == 5 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
    }

    /// Sends `data` as one GSO send of `seg`-byte segments: `UDP_SEGMENT`
    /// set on the socket cuts a plain send, no control message needed.
    fn send_gso(sock: &UdpSocket, to: SocketAddr, data: &[u8], seg: u16) -> io::Result<()> {
        let fd = sock.as_raw_fd();
        if !setsockopt_int(fd, libc::SOL_UDP, libc::UDP_SEGMENT, seg.into()) {
            return Err(io::Error::last_os_error());
        }
        sock.send_to(data, to).map(drop)
    }

    #[test]
    fn a_gso_burst_arrives_whole_with_gro_and_splits_back() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (rx, _rtcp, opts) = udp_pair(lo, 1 << 20, true).unwrap();
        let tx = UdpSocket::bind((lo, 0)).unwrap();
        let data: Vec<u8> = (0..350u32).map(|i| (i / 100) as u8).collect();
        if send_gso(&tx, rx.local_addr().unwrap(), &data, 100).is_err() {
            eprintln!("kernel without UDP_SEGMENT: skipped");
            return;
        }
        let mut batch = RecvBatch::new();
        let mut segs: Vec<Vec<u8>> = Vec::new();
        let mut datagrams = 0;
        for _ in 0..100 {
            let n = batch.recv(rx.as_raw_fd()).unwrap();
            for i in 0..n {
                let m = batch.message(i);
                datagrams += 1;
                segs.extend(
                    crate::load::stats::gro_segments(m.data, m.gso_size).map(<[u8]>::to_vec),
                );
            }
            if segs.len() >= 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let lens: Vec<usize> = segs.iter().map(Vec::len).collect();
        assert_eq!(lens, [100, 100, 100, 50]);
        assert!(
            segs.iter()
                .enumerate()
                .all(|(k, s)| s.iter().all(|&b| b == k as u8))
        );
        if opts.gro {
            assert_eq!(datagrams, 1, "with UDP_GRO the burst stays one datagram");
        }
    }
}

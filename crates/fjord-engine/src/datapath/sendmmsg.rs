//! The MARS aggregated stream call: every packet of the tick, across all
//! sessions, in one `sendmmsg` (chunks of `UIO_MAXIOV` = 1024 messages),
//! each message [head, payload] (and the second file run if any) by
//! reference into the batch and the mapping, and
//! addressed with `msg_name` = the burst's destination.
//!
//! Per packet: 1/1024 to 1/packets-in-tick system calls; the payload is
//! copied once, in the kernel (`user_copies` 0).
//!
//! `sendmmsg` takes one descriptor. Sessions on the engine thread's shared
//! socket (the server's one RTP port, `udp_sockets = "shared"`) go out
//! from it, so their source port is the announced `server_port`; a chunk
//! ends where the socket changes. Sessions with their own connected socket
//! (`udp_sockets = "per-session"`) go out from this path's own unconnected
//! socket (IPv6 dual-stack, IPv4 where the host has no IPv6). Caveat there:
//! the packets' source port is that socket's ephemeral port, not the
//! session's `server_port` from SETUP, and the source address is what the
//! route picks; receivers that filter on the source (connected sockets,
//! `filter_src`, strict NAT) drop them; ffmpeg and GStreamer by default do
//! not. ICMP errors are not seen on an unconnected socket, so refused
//! packets count as sent.

use std::{
    io, mem,
    net::{Ipv6Addr, SocketAddr, SocketAddrV6},
    os::fd::AsRawFd,
};

use crate::prefault::prefault;
use socket2::{Domain, SockAddr, Socket, Type};

use super::{Batch, Counters, DataPath, FAULTED, MAX_BATCH_PACKETS, iovec, is_fault, is_transient};

/// The most messages one `sendmmsg` takes (`UIO_MAXIOV`).
const MAX_MESSAGES: usize = 1024;
/// Send buffer of the shared socket: it carries the whole tick.
const SNDBUF: usize = 8 << 20;

pub struct Sendmmsg {
    socket: Option<Socket>,
    v6: bool,
    /// Reused from call to call; the pointers in them are rewritten before
    /// each call and mean nothing between calls.
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    /// One destination per burst.
    addrs: Vec<SockAddr>,
    counters: Counters,
}

// SAFETY: the raw pointers in `msgs`/`iovs` are only dereferenced (by the
// kernel) inside `send`, after being rewritten to point at the batch being
// sent; between calls they are dead values, so moving the path to another
// thread is sound.
unsafe impl Send for Sendmmsg {}

impl Default for Sendmmsg {
    /// Arrays reserved for the largest call and batch up front, resident
    /// (see `crate::prefault`).
    fn default() -> Self {
        let mut path = Self {
            socket: None,
            v6: false,
            msgs: Vec::with_capacity(MAX_MESSAGES),
            iovs: Vec::with_capacity(3 * MAX_MESSAGES),
            addrs: Vec::with_capacity(MAX_BATCH_PACKETS),
            counters: Counters::default(),
        };
        prefault(&mut path.msgs);
        prefault(&mut path.iovs);
        prefault(&mut path.addrs);
        path
    }
}

impl Sendmmsg {
    fn socket(&mut self) -> io::Result<libc::c_int> {
        if self.socket.is_none() {
            let (s, v6) = match Socket::new(Domain::IPV6, Type::DGRAM, None) {
                Ok(s) => {
                    s.set_only_v6(false)?;
                    (s, true)
                }
                Err(_) => (Socket::new(Domain::IPV4, Type::DGRAM, None)?, false),
            };
            s.set_nonblocking(true)?;
            // Best effort: the kernel caps it at wmem_max.
            let _ = s.set_send_buffer_size(SNDBUF);
            self.socket = Some(s);
            self.v6 = v6;
        }
        Ok(self.socket.as_ref().map(|s| s.as_raw_fd()).unwrap_or(-1))
    }

    fn address(&self, dest: SocketAddr) -> SockAddr {
        match dest {
            SocketAddr::V4(a) if self.v6 => {
                SockAddr::from(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
            }
            SocketAddr::V6(a) if !self.v6 => {
                // Unreachable from an IPv4 socket: the kernel refuses it
                // (EAFNOSUPPORT), which counts as a lost packet.
                SockAddr::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a.port(), 0, 0))
            }
            a => SockAddr::from(a),
        }
    }
}

impl DataPath for Sendmmsg {
    fn name(&self) -> &'static str {
        "sendmmsg"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        let own = if batch.bursts.iter().all(|b| b.shared) {
            -1
        } else {
            self.socket()?
        };
        self.addrs.clear();
        for b in &batch.bursts {
            let a = if b.shared {
                SockAddr::from(b.dest)
            } else {
                self.address(b.dest)
            };
            self.addrs.push(a);
        }
        let fd_of = |b: &super::Burst<'_>| {
            if b.shared { b.socket.as_raw_fd() } else { own }
        };
        for s in sent.iter_mut().take(batch.bursts.len()) {
            *s = 0;
        }
        // Every packet of every burst, in order: (burst, packet index).
        let total: usize = batch.bursts.iter().map(|b| b.packets.len()).sum();
        let mut burst = 0;
        let mut in_burst = 0;
        let mut done = 0;
        while done < total {
            // Fill up to MAX_MESSAGES messages from (burst, in_burst) on,
            // all from one socket.
            self.msgs.clear();
            self.iovs.clear();
            let (mut b, mut k) = (burst, in_burst);
            while k >= batch.bursts[b].packets.len() {
                b += 1;
                k = 0;
            }
            let fd = fd_of(&batch.bursts[b]);
            for _ in 0..(total - done).min(MAX_MESSAGES) {
                while k >= batch.bursts[b].packets.len() {
                    b += 1;
                    k = 0;
                }
                if fd_of(&batch.bursts[b]) != fd {
                    break;
                }
                let p = &batch.packets[batch.bursts[b].packets.start + k];
                let before = self.iovs.len();
                self.iovs.extend(p.parts().map(iovec));
                // SAFETY: all-zero is a valid mmsghdr.
                let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                m.msg_hdr.msg_name = self.addrs[b].as_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_namelen = self.addrs[b].len();
                m.msg_hdr.msg_iovlen = self.iovs.len() - before;
                self.msgs.push(m);
                k += 1;
            }
            let n = self.msgs.len();
            // The iovec array is complete (within its reserved capacity, so
            // never moved): point the messages into it.
            let mut at = 0;
            for m in &mut self.msgs {
                m.msg_hdr.msg_iov = self.iovs[at..].as_mut_ptr();
                at += m.msg_hdr.msg_iovlen;
            }
            self.counters.syscalls += 1;
            // SAFETY: `msgs` holds `n` initialised messages whose names,
            // iovecs, headers and payloads all outlive the call.
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    self.msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_NOSIGNAL,
                )
            };
            let (went, stop) = if r < 0 {
                let e = io::Error::last_os_error();
                if is_fault(&e) {
                    // The first message's bytes are gone (its file shrank):
                    // its burst is done for, the next one goes on.
                    let rest = batch.bursts[burst].packets.len() - in_burst;
                    sent[burst] = FAULTED;
                    done += rest;
                    burst += 1;
                    in_burst = 0;
                    continue;
                }
                if e.kind() == io::ErrorKind::WouldBlock {
                    (0, true)
                } else if e.kind() == io::ErrorKind::Interrupted {
                    (0, false)
                } else if is_transient(&e) || e.raw_os_error() == Some(libc::EAFNOSUPPORT) {
                    // The first message is lost; go on with the next.
                    (1, false)
                } else {
                    return Err(e);
                }
            } else {
                (r as usize, false)
            };
            // Account `went` packets to their bursts.
            let mut left = went;
            while left > 0 {
                let room = batch.bursts[burst].packets.len() - in_burst;
                let take = room.min(left);
                sent[burst] += take;
                in_burst += take;
                left -= take;
                if in_burst == batch.bursts[burst].packets.len() {
                    burst += 1;
                    in_burst = 0;
                }
            }
            done += went;
            if r > 0 {
                self.counters.packets += r as u64;
            }
            if stop {
                break;
            }
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

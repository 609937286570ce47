//! The MARS aggregated stream call: every packet of the tick that leaves
//! from one socket, across sessions, in one `sendmmsg` (chunks of
//! `UIO_MAXIOV` = 1024 messages), each message [head, payload] (and the
//! second file run if any) by reference into the batch and the mapping,
//! addressed with `msg_name` = the burst's destination on a shared socket.
//!
//! Per packet: 1/1024 to 1/packets-in-tick system calls on a shared
//! socket, 1/packets-in-burst on a session's own; the payload is copied
//! once, in the kernel (`user_copies` 0).
//!
//! `sendmmsg` takes one descriptor, so a call carries a run of bursts on
//! one socket: the sessions on the engine thread's shared socket (the
//! server's one RTP port, `udp_sockets = "shared"`) go out together; a
//! session with a connected socket of its own goes out in a call of its
//! own, from that socket (the announced `server_port`, its cached route),
//! its messages naming no address. A full socket holds back only the
//! bursts queued on it.

use std::{io, mem, os::fd::AsRawFd};

use crate::prefault::prefault;
use socket2::SockAddr;

use super::{
    Batch, Burst, Counters, DataPath, FAULTED, MAX_BATCH_PACKETS, iovec, is_fault, is_transient,
};

/// The most messages one `sendmmsg` takes (`UIO_MAXIOV`).
const MAX_MESSAGES: usize = 1024;

pub struct Sendmmsg {
    /// Reused from call to call; the pointers in them are rewritten before
    /// each call and mean nothing between calls.
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    /// One destination per burst (named by messages on a shared socket).
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
    /// Fills `msgs` with the packets of `batch` from packet `k` of burst
    /// `b` on, while their bursts are on that burst's socket, at most
    /// [`MAX_MESSAGES`]; returns how many.
    fn fill(&mut self, batch: &Batch<'_>, mut b: usize, mut k: usize) -> usize {
        self.msgs.clear();
        self.iovs.clear();
        let fd = batch.bursts[b].socket.as_raw_fd();
        while self.msgs.len() < MAX_MESSAGES && b < batch.bursts.len() {
            let burst = &batch.bursts[b];
            if burst.socket.as_raw_fd() != fd {
                break;
            }
            if k >= burst.packets.len() {
                (b, k) = (b + 1, 0);
                continue;
            }
            let p = &batch.packets[burst.packets.start + k];
            let before = self.iovs.len();
            self.iovs.extend(p.parts().map(iovec));
            // SAFETY: all-zero is a valid mmsghdr.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            if burst.shared {
                m.msg_hdr.msg_name = self.addrs[b].as_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_namelen = self.addrs[b].len();
            }
            m.msg_hdr.msg_iovlen = self.iovs.len() - before;
            self.msgs.push(m);
            k += 1;
        }
        // The iovec array is complete (within its reserved capacity, so
        // never moved): point the messages into it.
        let mut at = 0;
        for m in &mut self.msgs {
            m.msg_hdr.msg_iov = self.iovs[at..].as_mut_ptr();
            at += m.msg_hdr.msg_iovlen;
        }
        self.msgs.len()
    }
}

impl DataPath for Sendmmsg {
    fn sends_memory(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "sendmmsg"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        let bursts = &batch.bursts;
        self.addrs.clear();
        self.addrs
            .extend(bursts.iter().map(|b| SockAddr::from(b.dest)));
        for s in sent.iter_mut().take(bursts.len()) {
            *s = 0;
        }
        let fd_of = |b: &Burst<'_>| b.socket.as_raw_fd();
        // The next packet to send: packet `in_burst` of burst `burst`.
        let (mut burst, mut in_burst) = (0, 0);
        loop {
            while burst < bursts.len() && in_burst >= bursts[burst].packets.len() {
                burst += 1;
                in_burst = 0;
            }
            if burst == bursts.len() {
                return Ok(());
            }
            let fd = fd_of(&bursts[burst]);
            let n = self.fill(batch, burst, in_burst);
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
            let went = if r >= 0 {
                self.counters.packets += r as u64;
                r as usize
            } else {
                let e = io::Error::last_os_error();
                if is_fault(&e) {
                    // The first message's bytes are gone (its file shrank):
                    // its burst is done for, the next one goes on.
                    sent[burst] = FAULTED;
                    (burst, in_burst) = (burst + 1, 0);
                    continue;
                }
                if e.kind() == io::ErrorKind::WouldBlock {
                    // This socket is full: the rest of its run waits for
                    // the session's retry; other sockets' bursts go on.
                    while burst < bursts.len() && fd_of(&bursts[burst]) == fd {
                        burst += 1;
                    }
                    in_burst = 0;
                    continue;
                }
                match e.kind() {
                    io::ErrorKind::Interrupted => 0,
                    // The first message is lost; go on with the next.
                    _ if is_transient(&e) => 1,
                    _ => return Err(e),
                }
            };
            // Account `went` packets to their bursts.
            let mut left = went;
            while left > 0 {
                let take = (bursts[burst].packets.len() - in_burst).min(left);
                sent[burst] += take;
                in_burst += take;
                left -= take;
                if left > 0 {
                    (burst, in_burst) = (burst + 1, 0);
                }
            }
        }
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

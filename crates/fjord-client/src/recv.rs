//! Receiving many UDP sockets on one thread, as `fjord load` does (and the
//! benchmarks' receivers, which must drain the way it does): receive
//! options (a big buffer, `UDP_GRO`, kernel timestamps), a level-triggered
//! epoll set, and `recvmmsg` batches with their control messages read.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(crate) fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
) -> bool {
    // SAFETY: a c_int option value of the right size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

pub(crate) fn getsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a c_int out value of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

/// What a UDP receive socket got from the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct UdpOptions {
    /// `UDP_GRO` is on.
    pub gro: bool,
    /// `SO_TIMESTAMPNS` is on.
    pub timestamps: bool,
    /// The receive buffer the kernel reports (twice what was granted).
    pub rcvbuf: usize,
}

/// Sets up the UDP socket `fd` to receive as `fjord load`'s do: a receive
/// buffer of `rcvbuf` bytes (past `rmem_max` with `CAP_NET_ADMIN`, else
/// what `rmem_max` allows), `UDP_GRO` if `gro`, and kernel timestamps,
/// where the kernel allows each.
pub fn receive_options(fd: RawFd, rcvbuf: usize, gro: bool) -> UdpOptions {
    let want = rcvbuf.min(i32::MAX as usize) as libc::c_int;
    if !setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, want) {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, want);
    }
    UdpOptions {
        gro: gro && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1),
        timestamps: setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1),
        rcvbuf: getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0) as usize,
    }
}

/// A level-triggered epoll set with a fixed event array.
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub fn new(capacity: usize) -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: a fresh fd we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | if write { libc::EPOLLOUT } else { 0 }) as u32,
            u64: token,
        };
        // SAFETY: valid event pointer.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    pub fn add(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, write)
    }

    pub fn modify(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, write)
    }

    pub fn delete(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: valid event pointer; errors (fd not registered) are fine.
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout_ms`; returns how many events are ready.
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<usize> {
        // SAFETY: the event array outlives the call.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(n as usize)
    }

    /// Ready event `i` of the last wait: (token, event bits).
    pub fn event(&self, i: usize) -> (u64, u32) {
        let e = self.events[i];
        (e.u64, e.events)
    }
}

/// Messages per `recvmmsg`.
pub const BATCH: usize = 32;
/// Bytes per message slot: a whole GRO datagram.
pub const SLOT: usize = 65536;
/// Control bytes per message, as u64 words (aligned for cmsghdr).
const CTRL_WORDS: usize = 16;

/// One message of a batch.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub data: &'a [u8],
    /// The `UDP_GRO` segment size, 0 for a single datagram.
    pub gso_size: usize,
    /// Kernel receive time (`SO_TIMESTAMPNS`), realtime ns.
    pub timestamp: Option<i64>,
    /// The datagram did not fit the slot.
    pub truncated: bool,
}

/// Reusable `recvmmsg` buffers: no allocation per call.
pub struct RecvBatch {
    bufs: Box<[u8]>,
    ctrl: Box<[u64]>,
    iov: Box<[libc::iovec]>,
    hdrs: Box<[libc::mmsghdr]>,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    pub fn new() -> RecvBatch {
        let mut bufs = vec![0u8; BATCH * SLOT].into_boxed_slice();
        let mut ctrl = vec![0u64; BATCH * CTRL_WORDS].into_boxed_slice();
        let mut iov: Box<[libc::iovec]> = (0..BATCH)
            .map(|i| libc::iovec {
                // SAFETY: in bounds of `bufs`.
                iov_base: unsafe { bufs.as_mut_ptr().add(i * SLOT) }.cast(),
                iov_len: SLOT,
            })
            .collect();
        let hdrs: Box<[libc::mmsghdr]> = (0..BATCH)
            .map(|i| {
                // SAFETY: zeroed msghdr is valid; pointers filled below.
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                // SAFETY: in bounds of `iov` and `ctrl`.
                h.msg_hdr.msg_iov = unsafe { iov.as_mut_ptr().add(i) };
                h.msg_hdr.msg_iovlen = 1;
                // SAFETY: in bounds.
                h.msg_hdr.msg_control = unsafe { ctrl.as_mut_ptr().add(i * CTRL_WORDS) }.cast();
                h.msg_hdr.msg_controllen = CTRL_WORDS * 8;
                h
            })
            .collect();
        RecvBatch {
            bufs,
            ctrl,
            iov,
            hdrs,
        }
    }

    /// One `recvmmsg(MSG_DONTWAIT)`; returns how many messages arrived
    /// (0 when the socket is empty).
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let _ = (&self.bufs, &self.ctrl, &self.iov);
        for h in self.hdrs.iter_mut() {
            h.msg_hdr.msg_controllen = CTRL_WORDS * 8;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points into buffers owned by self.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // ICMP errors queued on the socket are not ours to handle.
                io::ErrorKind::ConnectionRefused => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n as usize)
    }

    /// The length of message `i` of the last [`RecvBatch::recv`] (a whole
    /// GRO datagram's), without reading its control messages.
    pub fn msg_len(&self, i: usize) -> usize {
        self.hdrs[i].msg_len as usize
    }

    /// Message `i` of the last [`RecvBatch::recv`].
    pub fn message(&self, i: usize) -> Message<'_> {
        let h = &self.hdrs[i];
        let len = (h.msg_len as usize).min(SLOT);
        let mut m = Message {
            data: &self.bufs[i * SLOT..i * SLOT + len],
            gso_size: 0,
            timestamp: None,
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
        // SAFETY: walking the control buffer the kernel filled, within
        // msg_controllen, with the libc CMSG macros.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
            while !c.is_null() {
                let level = (*c).cmsg_level;
                let ty = (*c).cmsg_type;
                let data = libc::CMSG_DATA(c);
                if level == libc::SOL_UDP && ty == libc::UDP_GRO {
                    let v: libc::c_int = std::ptr::read_unaligned(data.cast());
                    m.gso_size = v.max(0) as usize;
                } else if level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = std::ptr::read_unaligned(data.cast());
                    m.timestamp = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
                }
                c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
            }
        }
        m
    }
}

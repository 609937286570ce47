//! `gso` with `MSG_ZEROCOPY`: a session's burst leaves in `UDP_SEGMENT`
//! sends as in [`super::Gso`], but the kernel pins the user pages instead
//! of copying them into the socket buffer, and the device reads the payload
//! straight from the page cache (where it can gather and checksum; else
//! the kernel copies after all and says so in the completion).
//!
//! Per packet: about 1/7 system call to send (see [`zc_group_len`]: the
//! kernel's fragment limit, not GSO's 64 segments, bounds a send), plus about one error-queue
//! `recvmsg` per burst to reap completions; 0 payload copies where the
//! device can gather (`zerocopy_copied` counts the sends the kernel copied
//! anyway, e.g. all of them over loopback), else 1 in the kernel.
//!
//! What must stay put until a send's completion arrives:
//! - **Payload.** The kernel takes a reference on every page it pinned
//!   (`skb_zerocopy_iter_dgram` → `iov_iter_get_pages2`), so unmapping the
//!   title's file early (the session ends and drops its `Arc<Title>`) cannot
//!   free the pages under the device: they are page-cache pages of a file
//!   that is replaced by rename, never rewritten in place. Nothing more is
//!   needed from `Packet`/`Burst`.
//! - **Heads** (RTP header and payload-header bytes). They live in the
//!   batch, which the next tick rewrites. So this path copies each group's
//!   heads (12 to 20 bytes a packet) into a block of its own slab and
//!   returns the block when the completion
//!   arrives. A completion that never comes (the socket closed with it
//!   queued, or the descriptor now names another socket) is detected by its
//!   age and `SO_ZEROCOPY` being off; under slab pressure a block older than
//!   [`STALE`] is reclaimed. On drop with sends outstanding the slab is
//!   leaked, not freed.
//!
//! Groups under [`MIN_ZEROCOPY_BYTES`] go without `MSG_ZEROCOPY` (pinning
//! and the completion cost more than the copy), and so do groups when the
//! slab is full or the socket's option memory is (`ENOBUFS`).

use std::{
    collections::VecDeque,
    io,
    mem::{self, MaybeUninit},
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use super::{
    Batch, Counters, DataPath, MAX_HEAD, Packet,
    cmsg::{MAX_SEGMENTS, read_completion},
    gso::{MAX_GROUP_IOVECS, fill_gso_msg, per_group, send_group},
    set_name,
};
use socket2::SockAddr;

/// Smallest send worth pinning pages for. The kernel's guidance is ~10 KB,
/// but see [`zc_group_len`]: a zero-copy RTP send holds only ~7 packets.
pub const MIN_ZEROCOPY_BYTES: usize = 4 * 1024;
/// Page fragments one zero-copy datagram may hold: the kernel's
/// `MAX_SKB_FRAGS` (17 unless built otherwise; more gives `EMSGSIZE`).
pub const MAX_FRAGS: usize = 17;
const PAGE: usize = 4096;
/// Header blocks in the slab: at most this many zero-copy sends in flight.
const BLOCKS: usize = 2048;
/// A send this old with no completion makes us check the socket.
const SUSPECT: Duration = Duration::from_millis(200);
/// A send this old is given up on under slab pressure.
const STALE: Duration = Duration::from_secs(2);

type HeadBlock = [[u8; MAX_HEAD]; MAX_SEGMENTS];

/// One zero-copy send waiting for its completion.
#[derive(Clone, Copy)]
struct Inflight {
    id: u32,
    block: u32,
    at: Instant,
}

#[derive(Default)]
struct FdState {
    /// `SO_ZEROCOPY` is on (or could not be turned on: `failed`).
    enabled: bool,
    failed: bool,
    /// The kernel's id of our next zero-copy send on this socket.
    next_id: u32,
    /// Listed in `active`.
    listed: bool,
    inflight: VecDeque<Inflight>,
}

pub struct GsoZerocopy {
    counters: Counters,
    /// Per descriptor number.
    fds: Vec<FdState>,
    /// Descriptors that may have sends in flight (pruned by `sweep`).
    active: Vec<libc::c_int>,
    slab: Box<[HeadBlock]>,
    free: Vec<u32>,
}

impl Default for GsoZerocopy {
    fn default() -> Self {
        Self {
            counters: Counters::default(),
            fds: Vec::new(),
            active: Vec::new(),
            // Zeroed: the pages are committed only as blocks are used.
            slab: vec![[[0; MAX_HEAD]; MAX_SEGMENTS]; BLOCKS].into_boxed_slice(),
            free: (0..BLOCKS as u32).rev().collect(),
        }
    }
}

impl Drop for GsoZerocopy {
    fn drop(&mut self) {
        for fd in mem::take(&mut self.active) {
            self.reap(fd);
        }
        if self.fds.iter().any(|s| !s.inflight.is_empty()) {
            // The kernel may still read headers from the slab.
            mem::forget(mem::take(&mut self.slab));
        }
    }
}

fn set_zerocopy(fd: libc::c_int) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid option value pointer and length.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn zerocopy_is_on(fd: libc::c_int) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid option value pointer and length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    r == 0 && v != 0
}

/// Pages `len` bytes at address `addr` touch.
fn pages(addr: usize, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (addr + len - 1) / PAGE - addr / PAGE + 1
    }
}

/// How many packets from the front of `pkts` (one GSO group, see
/// `gso::group_len`) fit in one zero-copy send, whose pinned pages become
/// at most [`MAX_FRAGS`] fragments of one buffer. Head `i` is at address
/// `head(i)`. A part that continues the previous one in the same page
/// shares its fragment (the kernel coalesces them); otherwise each part
/// costs its own. Heads and file runs alternate in different pages: about
/// 2.3 fragments per 1316-byte packet, so 7 packets per send; consecutive
/// prefabricated packets are one run of pages: about 48 (GSO's 64 KB).
pub(crate) fn zc_group_len(pkts: &[Packet<'_>], head: impl Fn(usize) -> usize) -> usize {
    let mut frags = 0;
    let mut end = 0;
    for (i, p) in pkts.iter().enumerate() {
        let parts = [
            (head(i), p.head().len()),
            (p.payload.as_ptr() as usize, p.payload.len()),
            (p.payload2.as_ptr() as usize, p.payload2.len()),
        ];
        for (addr, len) in parts.into_iter().filter(|&(_, len)| len > 0) {
            frags += pages(addr, len);
            if addr == end && !addr.is_multiple_of(PAGE) {
                frags -= 1;
            }
            end = addr + len;
        }
        if frags > MAX_FRAGS {
            return i.max(1);
        }
    }
    pkts.len()
}

/// `id` in the wrapping range `lo..=hi`.
fn in_range(id: u32, lo: u32, hi: u32) -> bool {
    id.wrapping_sub(lo) <= hi.wrapping_sub(lo)
}

/// One `sendmsg` of `pkts` on `fd` (to `to` when it is unconnected) with
/// heads from `heads`, segmented at the first packet's size when there is
/// more than one.
pub(crate) fn send_group_heads(
    fd: libc::c_int,
    to: Option<&SockAddr>,
    pkts: &[Packet<'_>],
    heads: &[[u8; MAX_HEAD]],
    flags: libc::c_int,
) -> io::Result<()> {
    let mut iov = [MaybeUninit::<libc::iovec>::uninit(); MAX_GROUP_IOVECS];
    let mut control = [0u64; 4];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    fill_gso_msg(&mut msg, &mut iov, &mut control, pkts, Some(heads));
    set_name(&mut msg, to);
    // SAFETY: the msghdr points at initialised iovecs whose buffers (heads
    // in the slab, payloads in the mapping) outlive the call.
    let r = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl GsoZerocopy {
    fn state(&mut self, fd: libc::c_int) -> &mut FdState {
        let i = fd as usize;
        if i >= self.fds.len() {
            self.fds.resize_with(i + 1, FdState::default);
        }
        &mut self.fds[i]
    }

    /// Reads `fd`'s completions until none of its sends is outstanding or
    /// the queue is empty; returns its blocks to the slab.
    fn reap(&mut self, fd: libc::c_int) {
        while !self.fds[fd as usize].inflight.is_empty() {
            self.counters.syscalls += 1;
            let c = match read_completion(fd) {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(_) => {
                    // Not a socket any more: its completions are gone.
                    self.forget(fd);
                    break;
                }
            };
            let n = c.sends();
            self.counters.zerocopy_done += n;
            if c.copied {
                self.counters.zerocopy_copied += n;
            }
            let st = &mut self.fds[fd as usize];
            let free = &mut self.free;
            st.inflight.retain(|f| {
                let done = in_range(f.id, c.lo, c.hi);
                if done {
                    free.push(f.block);
                }
                !done
            });
        }
    }

    /// Gives up on every send in flight on `fd` and on its state.
    fn forget(&mut self, fd: libc::c_int) {
        let st = &mut self.fds[fd as usize];
        for f in st.inflight.drain(..) {
            self.free.push(f.block);
        }
        *st = FdState {
            listed: st.listed,
            ..FdState::default()
        };
    }

    /// Before sending on `fd`: reap its completions, and notice when the
    /// descriptor now names another socket (ours had `SO_ZEROCOPY` on).
    fn prepare(&mut self, fd: libc::c_int, now: Instant) {
        if self.state(fd).inflight.is_empty() {
            return;
        }
        self.reap(fd);
        let st = &self.fds[fd as usize];
        if st
            .inflight
            .front()
            .is_some_and(|f| now.duration_since(f.at) > SUSPECT)
        {
            self.counters.syscalls += 1;
            if !zerocopy_is_on(fd) {
                self.forget(fd);
            }
        }
    }

    /// Under slab pressure: reap everything, give up on stale sends, and
    /// prune `active`.
    fn sweep(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.active.len() {
            let fd = self.active[i];
            self.reap(fd);
            let st = &mut self.fds[fd as usize];
            while st
                .inflight
                .front()
                .is_some_and(|f| now.duration_since(f.at) > STALE)
            {
                if let Some(f) = st.inflight.pop_front() {
                    self.free.push(f.block);
                }
            }
            if st.inflight.is_empty() {
                st.listed = false;
                self.active.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Sends the front of one GSO group `pkts`: zero-copy when it pays and
    /// resources allow, else the whole group by copy. Returns how many
    /// packets went.
    fn send_one(
        &mut self,
        fd: libc::c_int,
        to: Option<&SockAddr>,
        pkts: &[Packet<'_>],
        now: Instant,
    ) -> io::Result<usize> {
        let st = self.state(fd);
        if !st.enabled && !st.failed {
            match set_zerocopy(fd) {
                Ok(()) => st.enabled = true,
                Err(_) => st.failed = true,
            }
            self.counters.syscalls += 1;
        }
        let plain = |c: &mut Counters| {
            c.syscalls += 1;
            send_group(fd, to, pkts, 0).map(|()| pkts.len())
        };
        if !self.fds[fd as usize].enabled {
            return plain(&mut self.counters);
        }
        let Some(&block) = self.free.last() else {
            return plain(&mut self.counters);
        };
        let heads = &mut self.slab[block as usize];
        let base = heads.as_ptr() as usize;
        let n = zc_group_len(pkts, |i| base + i * MAX_HEAD);
        let bytes: usize = pkts[..n].iter().map(Packet::wire_len).sum();
        if bytes < MIN_ZEROCOPY_BYTES {
            return plain(&mut self.counters);
        }
        self.free.pop();
        for (h, p) in heads.iter_mut().zip(&pkts[..n]) {
            h[..p.head().len()].copy_from_slice(p.head());
        }
        self.counters.syscalls += 1;
        match send_group_heads(fd, to, &pkts[..n], &heads[..n], libc::MSG_ZEROCOPY) {
            Ok(()) => {
                let st = &mut self.fds[fd as usize];
                if !st.listed {
                    st.listed = true;
                    self.active.push(fd);
                }
                st.inflight.push_back(Inflight {
                    id: st.next_id,
                    block,
                    at: now,
                });
                st.next_id = st.next_id.wrapping_add(1);
                Ok(n)
            }
            Err(e) => {
                self.free.push(block);
                if e.raw_os_error() == Some(libc::ENOBUFS) {
                    // Option memory for the notification is full.
                    plain(&mut self.counters)
                } else {
                    Err(e)
                }
            }
        }
    }
}

impl DataPath for GsoZerocopy {
    fn name(&self) -> &'static str {
        "gso-zerocopy"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        let now = Instant::now();
        if self.free.len() < BLOCKS / 4 {
            self.sweep(now);
        }
        let mut packets = 0;
        let result = per_group(batch, sent, &mut packets, |burst, group, first| {
            let fd = burst.socket.as_raw_fd();
            if first {
                self.prepare(fd, now);
            }
            let to = burst.address();
            self.send_one(fd, to.as_ref(), group, now)
        });
        self.counters.packets += packets;
        result
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

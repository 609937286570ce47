//! The tick's GSO sends through io_uring: one `IORING_OP_SENDMSG` per GSO
//! group (as `gso` cuts them), the groups of one burst linked so they run
//! in order and a failure cancels the rest of that burst, and one
//! `io_uring_enter` (`submit_and_wait`) per tick for up to [`ENTRIES`]
//! groups.
//!
//! Per packet: 1/(packets in the tick) system calls, up to 1/64 sends in the
//! kernel; the payload is copied once, in the kernel. The `uring-zc`
//! variant uses `IORING_OP_SENDMSG_ZC` for groups of at least
//! [`MIN_ZEROCOPY_BYTES`], cut to the kernel's fragment limit (about 7
//! packets, see `gso_zerocopy::zc_group_len`): no copy where the device can gather, and the
//! tick also waits for those sends' notifications (the kernel is done
//! with the pages and the batch's headers), so nothing outlives the call.
//!
//! Where io_uring cannot be set up (kernel, seccomp, `io_uring_disabled`)
//! the path still constructs, and `send` returns `EOPNOTSUPP` so the engine
//! falls back.

use std::{
    io,
    mem::{self, MaybeUninit},
    os::fd::AsRawFd,
};

use io_uring::{IoUring, Probe, cqueue, opcode, squeue, types};

use super::{
    Batch, Counters, DataPath, FAULTED, MAX_BATCH_PACKETS, Packet,
    cmsg::SegmentControl,
    gso::{MAX_GROUP_IOVECS, fill_gso_msg, group_len},
    gso_zerocopy::{MIN_ZEROCOPY_BYTES, zc_group_len},
    is_transient, set_name,
};
use crate::prefault::prefault;
use socket2::SockAddr;

/// Submission queue entries: the most groups in one `io_uring_enter`.
pub const ENTRIES: u32 = 512;

type Iovecs = [MaybeUninit<libc::iovec>; MAX_GROUP_IOVECS];

/// One GSO group: burst `burst`, packets `start..start + len` of it.
#[derive(Clone, Copy)]
struct Group {
    burst: u32,
    start: u32,
    len: u32,
    zc: bool,
    /// The send's result (bytes or -errno).
    res: i32,
}

pub struct Uring {
    ring: Result<IoUring, i32>,
    zerocopy: bool,
    groups: Vec<Group>,
    /// Per group of the chunk in flight; never reallocated while the kernel
    /// holds pointers into them (reserved to `ENTRIES` up front).
    msgs: Vec<libc::msghdr>,
    iovs: Vec<Iovecs>,
    controls: Vec<SegmentControl>,
    /// Destination of each message on a shared socket (unused slots `None`).
    addrs: Vec<Option<SockAddr>>,
    /// Bursts that stopped (socket full or failed) this tick.
    stopped: Vec<bool>,
    counters: Counters,
}

// SAFETY: the raw pointers in `msgs` are only used by the kernel inside
// `send`, which rewrites them first and waits for every completion before
// returning; between calls they are dead values. `IoUring` is `Send`.
unsafe impl Send for Uring {}

impl Default for Uring {
    fn default() -> Self {
        Self::new(false)
    }
}

fn setup() -> Result<IoUring, i32> {
    let err = |e: io::Error| e.raw_os_error().unwrap_or(libc::EOPNOTSUPP);
    let ring = IoUring::new(ENTRIES).map_err(err)?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(err)?;
    if !probe.is_supported(opcode::SendMsg::CODE) {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(ring)
}

impl Uring {
    /// `zerocopy`: `SENDMSG_ZC` for large groups (the `uring-zc` path).
    pub fn new(zerocopy: bool) -> Self {
        let mut ring = setup();
        if zerocopy && let Ok(r) = &ring {
            let mut probe = Probe::new();
            if r.submitter().register_probe(&mut probe).is_err()
                || !probe.is_supported(opcode::SendMsgZc::CODE)
            {
                ring = Err(libc::EOPNOTSUPP);
            }
        }
        let n = ENTRIES as usize;
        let mut path = Self {
            ring,
            zerocopy,
            // Room for a large tick up front, resident (see
            // `crate::prefault`): steady state allocates nothing.
            groups: Vec::with_capacity(MAX_BATCH_PACKETS),
            msgs: Vec::with_capacity(n),
            iovs: Vec::with_capacity(n),
            controls: Vec::with_capacity(n),
            addrs: Vec::with_capacity(n),
            stopped: Vec::with_capacity(MAX_BATCH_PACKETS),
            counters: Counters::default(),
        };
        prefault(&mut path.groups);
        prefault(&mut path.msgs);
        prefault(&mut path.iovs);
        prefault(&mut path.controls);
        prefault(&mut path.addrs);
        prefault(&mut path.stopped);
        path
    }

    /// Submits `groups[range]` (at most `ENTRIES`), waits for all of them,
    /// and stores each result in its group.
    fn submit_chunk(&mut self, batch: &Batch<'_>, range: std::ops::Range<usize>) -> io::Result<()> {
        let Ok(ring) = &mut self.ring else {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        };
        self.msgs.clear();
        self.iovs.clear();
        self.controls.clear();
        self.addrs.clear();
        // Capacity is ENTRIES and range.len() <= ENTRIES: no reallocation
        // below, so the pointers taken stay valid.
        debug_assert!(range.len() <= self.msgs.capacity());
        let mut live = 0usize;
        for gi in range.clone() {
            let g = self.groups[gi];
            if self.stopped[g.burst as usize] {
                self.groups[gi].res = -libc::ECANCELED;
                continue;
            }
            let b = &batch.bursts[g.burst as usize];
            let start = b.packets.start + g.start as usize;
            let pkts: &[Packet<'_>] = &batch.packets[start..start + g.len as usize];
            // SAFETY: all-zero is a valid msghdr.
            self.msgs.push(unsafe { mem::zeroed() });
            self.iovs.push([MaybeUninit::uninit(); MAX_GROUP_IOVECS]);
            self.controls.push(SegmentControl::default());
            self.addrs.push(b.address());
            let k = self.msgs.len() - 1;
            // Heads by reference into the batch: it is not touched until
            // every completion (and zero-copy notification) is in.
            fill_gso_msg(
                &mut self.msgs[k],
                &mut self.iovs[k],
                &mut self.controls[k],
                pkts,
                None,
            );
            set_name(&mut self.msgs[k], self.addrs[k].as_ref());
            let fd = types::Fd(b.socket.as_raw_fd());
            let flags = (libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) as u32;
            let msg = &self.msgs[k] as *const libc::msghdr;
            let entry = if g.zc {
                opcode::SendMsgZc::new(fd, msg).flags(flags).build()
            } else {
                opcode::SendMsg::new(fd, msg).flags(flags).build()
            };
            // Link to the next group of the same burst, in this chunk.
            let link = gi + 1 < range.end && self.groups[gi + 1].burst == g.burst;
            let entry = entry.user_data(gi as u64).flags(if link {
                squeue::Flags::IO_LINK
            } else {
                squeue::Flags::empty()
            });
            // SAFETY: the entry points at a msghdr, iovecs, control buffer,
            // headers and payloads that all stay valid and unmoved until its
            // completion (and notification) is read below.
            unsafe {
                ring.submission()
                    .push(&entry)
                    .map_err(|_| io::Error::other("submission queue full"))?;
            }
            live += 1;
        }
        if live == 0 {
            return Ok(());
        }
        let mut results = 0;
        let mut notifs_due = 0usize;
        let mut notifs = 0usize;
        let mut want = live;
        loop {
            self.counters.syscalls += 1;
            match ring.submit_and_wait(want) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            for cqe in ring.completion() {
                let gi = cqe.user_data() as usize;
                if cqueue::notif(cqe.flags()) {
                    notifs += 1;
                    self.counters.zerocopy_done += 1;
                    continue;
                }
                if cqueue::more(cqe.flags()) {
                    notifs_due += 1;
                }
                self.groups[gi].res = cqe.result();
                results += 1;
            }
            if results >= live && notifs >= notifs_due {
                return Ok(());
            }
            want = (live - results) + (notifs_due - notifs);
        }
    }
}

impl DataPath for Uring {
    fn sends_memory(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        if self.zerocopy { "uring-zc" } else { "uring" }
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        if self.ring.is_err() {
            // Set-up failed (kernel, seccomp, io_uring_disabled): tell the
            // engine to use another path.
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        self.groups.clear();
        for bi in 0..batch.bursts.len() {
            let pkts = batch.burst(bi);
            let mut done = 0;
            while done < pkts.len() {
                let mut n = group_len(&pkts[done..]);
                let mut zc = false;
                if self.zerocopy {
                    let rest = &pkts[done..done + n];
                    let k = zc_group_len(rest, |i| rest[i].head().as_ptr() as usize);
                    let bytes: usize = rest[..k].iter().map(Packet::wire_len).sum();
                    if bytes >= MIN_ZEROCOPY_BYTES {
                        n = k;
                        zc = true;
                    }
                }
                self.groups.push(Group {
                    burst: bi as u32,
                    start: done as u32,
                    len: n as u32,
                    zc,
                    res: 0,
                });
                done += n;
            }
        }
        self.stopped.clear();
        self.stopped.resize(batch.bursts.len(), false);
        for s in sent.iter_mut().take(batch.bursts.len()) {
            *s = 0;
        }
        let mut failure = None;
        let mut from = 0;
        while from < self.groups.len() {
            let to = (from + ENTRIES as usize).min(self.groups.len());
            self.submit_chunk(batch, from..to)?;
            for g in &self.groups[from..to] {
                let b = g.burst as usize;
                if self.stopped[b] {
                    continue;
                }
                // A refused packet counts as sent; a full socket, a
                // cancelled link or a failure stops the burst there.
                let ok = g.res >= 0 || is_transient(&io::Error::from_raw_os_error(-g.res));
                if ok {
                    sent[b] += g.len as usize;
                    self.counters.packets += g.len as u64;
                    continue;
                }
                self.stopped[b] = true;
                if -g.res == libc::EFAULT {
                    // Its bytes are gone (the file shrank): see FAULTED.
                    sent[b] = FAULTED;
                    continue;
                }
                if ![libc::EAGAIN, libc::ECANCELED, libc::EINTR].contains(&-g.res) {
                    failure.get_or_insert(io::Error::from_raw_os_error(-g.res));
                }
            }
            from = to;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

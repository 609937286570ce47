//! UDP generic segmentation offload: a session's burst leaves in one
//! `sendmsg` of [head, payload(, second run)]… iovecs (one iovec for
//! prefabricated packets) with a `UDP_SEGMENT` control message; the kernel cuts it into datagrams (in the NIC where it
//! can), one pass down the stack for up to 64 packets. The payload stays in
//! the mapping until the kernel copies it once into the socket buffer.

use std::{
    io,
    mem::{self, MaybeUninit},
    os::fd::AsRawFd,
};

use socket2::SockAddr;

use super::{
    Batch, Burst, Counters, DataPath, FAULTED, MAX_HEAD, Packet,
    cmsg::{MAX_SEGMENTED_BYTES, MAX_SEGMENTS, SegmentControl, set_udp_segment},
    iovec, is_fault, is_transient, set_name,
};

/// Iovecs of one GSO send: head, payload and a second run per segment.
pub(crate) const MAX_GROUP_IOVECS: usize = 3 * MAX_SEGMENTS;

#[derive(Default)]
pub struct Gso {
    counters: Counters,
}

/// True when this kernel accepts `UDP_SEGMENT` (probed on a scratch socket).
pub fn supported() -> bool {
    let Ok(s) = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None) else {
        return false;
    };
    let size: libc::c_int = 1200;
    // SAFETY: a valid socket, option value pointer and length.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&size as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// The loop both GSO paths share: bursts in order, each cut into groups of
/// [`group_len`] handed to `send` (the burst, the group, whether it is the
/// burst's first), which returns how many of the group's packets went. A
/// full socket ends the burst's prefix, a transient error loses only that
/// group, unreadable bytes end the burst as [`FAULTED`], any other error is
/// the path's (as in `per_packet`). `packets` counts what went.
pub(crate) fn per_group(
    batch: &Batch<'_>,
    sent: &mut [usize],
    packets: &mut u64,
    mut send: impl FnMut(&Burst<'_>, &[Packet<'_>], bool) -> io::Result<usize>,
) -> io::Result<()> {
    for (i, burst) in batch.bursts.iter().enumerate() {
        let pkts = batch.burst(i);
        let mut done = 0;
        while done < pkts.len() {
            let group = &pkts[done..done + group_len(&pkts[done..])];
            let n = match send(burst, group, done == 0) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if is_fault(&e) => {
                    done = FAULTED;
                    break;
                }
                Err(e) if is_transient(&e) => group.len(),
                Err(e) => {
                    sent[i] = done;
                    return Err(e);
                }
            };
            done += n;
            *packets += n as u64;
        }
        sent[i] = done;
    }
    Ok(())
}

/// How many packets from the front of `pkts` go in one GSO send: all of the
/// first one's size, the last possibly shorter.
pub(crate) fn group_len(pkts: &[Packet<'_>]) -> usize {
    let Some(first) = pkts.first() else { return 0 };
    let seg = first.wire_len();
    let mut n = 1;
    let mut total = seg;
    while n < pkts.len() && n < MAX_SEGMENTS {
        let len = pkts[n].wire_len();
        if len > seg || total + len > MAX_SEGMENTED_BYTES {
            break;
        }
        total += len;
        n += 1;
        if len < seg {
            break;
        }
    }
    n
}

/// One `sendmsg` of `pkts` on `fd` (to `to` when it is unconnected),
/// segmented at the first packet's size when there is more than one.
/// `flags` adds e.g. `MSG_ZEROCOPY`.
pub(crate) fn send_group(
    fd: libc::c_int,
    to: Option<&SockAddr>,
    pkts: &[Packet<'_>],
    flags: libc::c_int,
) -> io::Result<()> {
    let mut iov = [MaybeUninit::<libc::iovec>::uninit(); MAX_GROUP_IOVECS];
    // Room for one cmsg carrying a u16, u64-aligned as cmsghdr needs.
    let mut control = SegmentControl::default();
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    fill_gso_msg(&mut msg, &mut iov, &mut control, pkts, None);
    set_name(&mut msg, to);
    // SAFETY: the msghdr points at initialised iovecs whose buffers (heads
    // in the batch, payloads in the mapping) and the address outlive the
    // call.
    let r = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Points `msg` at [head, payload(, second run)]… iovecs in `iov` (filled
/// here) and, for more than one packet, a `UDP_SEGMENT` control message in
/// `control`. The heads come from `heads` when given (`heads[i]` holding at
/// least packet `i`'s head), else from the packets.
pub(crate) fn fill_gso_msg(
    msg: &mut libc::msghdr,
    iov: &mut [MaybeUninit<libc::iovec>; MAX_GROUP_IOVECS],
    control: &mut SegmentControl,
    pkts: &[Packet<'_>],
    heads: Option<&[[u8; MAX_HEAD]]>,
) {
    let n = pkts
        .len()
        .min(MAX_SEGMENTS)
        .min(heads.map_or(usize::MAX, <[_]>::len));
    // At most 3 iovecs per packet and n <= MAX_SEGMENTS: `iov` has room.
    let mut len = 0;
    // Where the last iovec ends: a part that starts there (the next of
    // consecutive prefabricated packets) extends it, so a burst of them is
    // one iovec.
    let mut end = std::ptr::null::<u8>();
    let mut push = |bytes: &[u8]| {
        if bytes.is_empty() {
            return;
        }
        if len > 0 && bytes.as_ptr() == end {
            // SAFETY: iov[len - 1] was written below.
            unsafe { iov[len - 1].assume_init_mut() }.iov_len += bytes.len();
        } else {
            iov[len].write(iovec(bytes));
            len += 1;
        }
        end = bytes.as_ptr_range().end;
    };
    for (i, p) in pkts[..n].iter().enumerate() {
        let head = match heads {
            Some(h) => &h[i][..p.head().len()],
            None => p.head(),
        };
        push(head);
        push(p.payload);
        push(p.payload2);
    }
    msg.msg_iov = iov.as_mut_ptr().cast();
    msg.msg_iovlen = len;
    if n > 1 {
        set_udp_segment(msg, control, pkts[0].wire_len() as u16);
    } else {
        msg.msg_control = std::ptr::null_mut();
        msg.msg_controllen = 0;
    }
}

impl DataPath for Gso {
    fn sends_memory(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "gso"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        let counters = &mut self.counters;
        per_group(batch, sent, &mut counters.packets, |burst, group, _| {
            counters.syscalls += 1;
            let to = burst.address();
            send_group(burst.socket.as_raw_fd(), to.as_ref(), group, 0).map(|()| group.len())
        })
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

//! The control messages of UDP sends, in one place: `UDP_SEGMENT` (one
//! `sendmsg` the kernel cuts into datagrams of a given size) and the
//! `MSG_ZEROCOPY` completions read from a socket's error queue. The GSO
//! data paths use them, and so do the benchmarks' kernel floors
//! (`fjord-bench`), so a floor makes the same system call as the path it
//! is the floor of.

use std::{io, mem};

/// Segments per `UDP_SEGMENT` send: the kernel's `UDP_MAX_SEGMENTS` is 64
/// on older kernels.
pub const MAX_SEGMENTS: usize = 64;
/// Bytes per `UDP_SEGMENT` send: it is one UDP datagram as far as its
/// length field goes.
pub const MAX_SEGMENTED_BYTES: usize = 65_000;

/// `SO_EE_ORIGIN_ZEROCOPY`: a zero-copy completion (linux/errqueue.h).
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied the data after all.
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Room for one control message carrying a `u16` (`CMSG_SPACE(2)`, 24
/// bytes), aligned as `cmsghdr` needs.
pub type SegmentControl = [u64; 4];

/// Points `msg` at a `UDP_SEGMENT` control message written into `control`:
/// the kernel cuts the send into datagrams of `seg` bytes (the last may be
/// shorter). `control` must outlive the `sendmsg` of `msg`.
pub fn set_udp_segment(msg: &mut libc::msghdr, control: &mut SegmentControl, seg: u16) {
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE of a u16 is 24 bytes, inside `control`; the cmsg
    // pointers come from the msghdr that points at it.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(mem::size_of::<u16>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(msg);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = libc::UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), seg);
    }
}

/// One `sendmsg` on the connected socket `fd` gathering `iov` (packets of
/// `seg` bytes, the last possibly shorter), with `UDP_SEGMENT` of `seg`
/// when it holds more than one packet. `flags` adds e.g. `MSG_ZEROCOPY`.
pub fn send_segmented(
    fd: libc::c_int,
    iov: &[libc::iovec],
    seg: u16,
    flags: libc::c_int,
) -> io::Result<()> {
    let len: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut control = SegmentControl::default();
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len();
    if len > usize::from(seg) {
        set_udp_segment(&mut msg, &mut control, seg);
    }
    // SAFETY: the msghdr points at live iovecs, buffers and control block;
    // the kernel only reads through the iovecs.
    let r = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A zero-copy completion read from a socket's error queue: the kernel's
/// ids `lo..=hi` of its zero-copy sends on that socket are done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub lo: u32,
    pub hi: u32,
    /// The kernel copied the data after all (e.g. over loopback).
    pub copied: bool,
}

impl Completion {
    /// How many sends it completes.
    pub fn sends(&self) -> u64 {
        u64::from(self.hi.wrapping_sub(self.lo)) + 1
    }
}

/// Reads one zero-copy completion from `fd`'s error queue. `Ok(None)` when
/// the queue is empty or held something else.
pub fn read_completion(fd: libc::c_int) -> io::Result<Option<Completion>> {
    let mut control = [0u64; 16];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control);
    // SAFETY: the msghdr points at a control buffer that outlives the call;
    // no data buffer is needed for error-queue notifications.
    let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; the
    // CMSG macros stay inside it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            if (c.cmsg_level == libc::SOL_IP && c.cmsg_type == libc::IP_RECVERR)
                || (c.cmsg_level == libc::SOL_IPV6 && c.cmsg_type == libc::IPV6_RECVERR)
            {
                let ee = std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                );
                if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                    return Ok(Some(Completion {
                        lo: ee.ee_info,
                        hi: ee.ee_data,
                        copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                    }));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::{net::UdpSocket, os::fd::AsRawFd, time::Duration};

    use super::*;

    #[test]
    fn a_segmented_send_arrives_as_datagrams_of_its_size() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let data: Vec<u8> = (0..350u32).map(|i| (i / 100) as u8).collect();
        let (a, b) = data.split_at(120);
        let iov = [a, b].map(|p| libc::iovec {
            iov_base: p.as_ptr().cast_mut().cast(),
            iov_len: p.len(),
        });
        if let Err(e) = send_segmented(tx.as_raw_fd(), &iov, 100, 0) {
            eprintln!("kernel without UDP_SEGMENT ({e}): skipped");
            return;
        }
        let mut buf = [0u8; 512];
        let mut got = Vec::new();
        for _ in 0..4 {
            let n = rx.recv(&mut buf).unwrap();
            got.push(buf[..n].to_vec());
        }
        assert_eq!(
            got.iter().map(Vec::len).collect::<Vec<_>>(),
            [100, 100, 100, 50]
        );
        assert!(
            got.iter()
                .enumerate()
                .all(|(k, d)| d.iter().all(|&x| x == k as u8))
        );
        // One packet: no control message, one datagram.
        send_segmented(tx.as_raw_fd(), &iov[..1], 200, 0).unwrap();
        assert_eq!(rx.recv(&mut buf).unwrap(), 120);
    }

    #[test]
    fn a_completion_counts_its_ids_across_the_wrap() {
        let c = |lo, hi| Completion {
            lo,
            hi,
            copied: false,
        };
        assert_eq!(c(7, 7).sends(), 1);
        assert_eq!(c(3, 10).sends(), 8);
        assert_eq!(c(u32::MAX, 1).sends(), 3);
    }

    #[test]
    fn an_empty_error_queue_has_no_completion() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(read_completion(s.as_raw_fd()).unwrap(), None);
    }
}

//! One `sendmsg` per packet, head (RTP header and payload-header bytes) and
//! payload as two iovecs (three with a second file run), the payload by
//! reference into the mapping (the seeds' "mmap + writev": one copy, in the
//! kernel, and one system call per packet).

use std::io::{self, IoSlice};

use socket2::{SockAddr, Socket};

use super::{Batch, Counters, DataPath, Packet, per_packet};

#[derive(Default)]
pub struct MmapWritev {
    counters: Counters,
}

/// One `sendmsg` of `p`'s parts from the batch and the mapping (to `to`
/// when `socket` is unconnected).
pub(crate) fn send_mapped(
    c: &mut Counters,
    socket: &Socket,
    to: Option<&SockAddr>,
    p: &Packet<'_>,
) -> io::Result<()> {
    let mut iov = [IoSlice::new(&[]); 3];
    let mut n = 0;
    for (slot, part) in iov.iter_mut().zip(p.parts()) {
        *slot = IoSlice::new(part);
        n += 1;
    }
    c.syscalls += 1;
    match to {
        Some(to) => socket.send_to_vectored_with_flags(&iov[..n], to, libc::MSG_NOSIGNAL),
        None => socket.send_vectored_with_flags(&iov[..n], libc::MSG_NOSIGNAL),
    }
    .map(drop)
}

impl DataPath for MmapWritev {
    fn sends_memory(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "mmap-writev"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        per_packet(batch, sent, &mut self.counters, |c, burst, p| {
            send_mapped(c, burst.socket, burst.address().as_ref(), p)
        })
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn prefabricated(&self) -> bool {
        false
    }
}

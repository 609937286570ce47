//! One `sendmsg` per packet, header and payload as two iovecs, the payload
//! by reference into the mapping (the seeds' "mmap + writev": one copy, in
//! the kernel, and one system call per packet).

use std::io::{self, IoSlice};

use super::{Batch, Counters, DataPath, per_packet};

#[derive(Default)]
pub struct MmapWritev {
    counters: Counters,
}

impl DataPath for MmapWritev {
    fn name(&self) -> &'static str {
        "mmap-writev"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        per_packet(batch, sent, &mut self.counters, |c, burst, p| {
            let iov = [IoSlice::new(&p.header), IoSlice::new(p.payload)];
            c.syscalls += 1;
            burst
                .socket
                .send_vectored_with_flags(&iov, libc::MSG_NOSIGNAL)
                .map(drop)
        })
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

//! One `sendmsg` per packet, header and payload as two iovecs, the payload
//! by reference into the mapping (the seeds' "mmap + writev": one copy, in
//! the kernel, and one system call per packet).

use std::io::{self, IoSlice};

use super::{Batch, Counters, DataPath, is_transient};

#[derive(Default)]
pub struct MmapWritev {
    counters: Counters,
}

impl DataPath for MmapWritev {
    fn name(&self) -> &'static str {
        "mmap-writev"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        for (i, burst) in batch.bursts.iter().enumerate() {
            sent[i] = 0;
            for p in batch.burst(i) {
                let iov = [IoSlice::new(&p.header), IoSlice::new(p.payload)];
                self.counters.syscalls += 1;
                match burst
                    .socket
                    .send_vectored_with_flags(&iov, libc::MSG_NOSIGNAL)
                {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if is_transient(&e) => {}
                    Err(e) => return Err(e),
                }
                sent[i] += 1;
                self.counters.packets += 1;
            }
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

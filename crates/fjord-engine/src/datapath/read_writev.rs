//! The seeds' reference line, "read + writev": per packet, `pread` the
//! payload into a reused buffer, then one `sendmsg` of [head, buffer] (the
//! head: RTP header and payload-header bytes).
//!
//! Per packet: 2 system calls (`pread`, `sendmsg`; one more `pread` for a
//! second file run), 2 payload copies (page
//! cache → user buffer, user buffer → socket buffer); `user_copies`
//! counts 1.

use std::io::{self, IoSlice};

use super::{Batch, Counters, DataPath, per_packet, read_send::pread_runs};

/// Large enough for any payload a UDP datagram can carry.
const BUF_LEN: usize = 65_536;

pub struct ReadWritev {
    buf: Box<[u8]>,
    counters: Counters,
}

impl Default for ReadWritev {
    fn default() -> Self {
        Self {
            buf: vec![0; BUF_LEN].into_boxed_slice(),
            counters: Counters::default(),
        }
    }
}

impl DataPath for ReadWritev {
    fn name(&self) -> &'static str {
        "read-writev"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        let buf = &mut self.buf;
        per_packet(batch, sent, &mut self.counters, |c, burst, p| {
            let payload = buf
                .get_mut(..p.payload.len() + p.payload2.len())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
            pread_runs(c, p, payload)?;
            let iov = [IoSlice::new(p.head()), IoSlice::new(payload)];
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

    fn prefabricated(&self) -> bool {
        false
    }
}

//! The seeds' reference line, "read + writev": per packet, `pread` the
//! payload into a reused buffer, then one `sendmsg` of [header, buffer].
//!
//! Per packet: 2 system calls (`pread`, `sendmsg`), 2 payload copies (page
//! cache → user buffer, user buffer → socket buffer); `user_copies`
//! counts 1.

use std::{
    io::{self, IoSlice},
    os::fd::AsRawFd,
};

use super::{Batch, Counters, DataPath, is_transient, read_send::pread_full};

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
        for (i, burst) in batch.bursts.iter().enumerate() {
            sent[i] = 0;
            for p in batch.burst(i) {
                let len = p.payload.len();
                if len > self.buf.len() {
                    return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
                }
                self.counters.syscalls += 1;
                let got = pread_full(p.file.as_raw_fd(), &mut self.buf[..len], p.offset)?;
                self.counters.user_copies += 1;
                if got < len {
                    // The file shrank under the session: the packet is lost,
                    // the session notices through its mapping.
                    sent[i] += 1;
                    continue;
                }
                let iov = [IoSlice::new(&p.header), IoSlice::new(&self.buf[..len])];
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

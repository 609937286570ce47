//! The seeds' "read send rtp": per packet, `pread` the payload from the
//! media file into one reused buffer just behind the RTP header, then one
//! `send` of the whole datagram.
//!
//! Per packet: 2 system calls (`pread`, `send`), 2 payload copies (page
//! cache → user buffer in `pread`, user buffer → socket buffer in `send`);
//! `user_copies` counts 1.

use std::{io, os::fd::AsRawFd};

use fjord_proto::rtp::RTP_HEADER_LEN;

use super::{Batch, Counters, DataPath, is_transient};

/// Large enough for any payload a UDP datagram can carry.
const BUF_LEN: usize = 65_536;

pub struct ReadSend {
    buf: Box<[u8]>,
    counters: Counters,
}

impl Default for ReadSend {
    fn default() -> Self {
        Self {
            buf: vec![0; BUF_LEN].into_boxed_slice(),
            counters: Counters::default(),
        }
    }
}

/// `pread` of `buf.len()` bytes at `offset`, retried on short reads; returns
/// how many bytes were read (fewer only at end of file).
pub(crate) fn pread_full(fd: libc::c_int, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        let r = unsafe {
            libc::pread(
                fd,
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset + done as u64) as libc::off_t,
            )
        };
        match r {
            0 => break,
            r if r > 0 => done += r as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

impl DataPath for ReadSend {
    fn name(&self) -> &'static str {
        "read-send"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        for (i, burst) in batch.bursts.iter().enumerate() {
            sent[i] = 0;
            for p in batch.burst(i) {
                let len = p.payload.len();
                let end = RTP_HEADER_LEN + len;
                if end > self.buf.len() {
                    return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
                }
                self.counters.syscalls += 1;
                let got = pread_full(
                    p.file.as_raw_fd(),
                    &mut self.buf[RTP_HEADER_LEN..end],
                    p.offset,
                )?;
                self.counters.user_copies += 1;
                if got < len {
                    // The file shrank under the session: the packet is lost,
                    // the session notices through its mapping.
                    sent[i] += 1;
                    continue;
                }
                self.buf[..RTP_HEADER_LEN].copy_from_slice(&p.header);
                self.counters.syscalls += 1;
                match burst
                    .socket
                    .send_with_flags(&self.buf[..end], libc::MSG_NOSIGNAL)
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

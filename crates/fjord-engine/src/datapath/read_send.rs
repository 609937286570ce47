//! The seeds' "read send rtp": per packet, `pread` the payload from the
//! media file into one reused buffer just behind the RTP header (and the
//! payload-header bytes), then one `send` of the whole datagram.
//!
//! Per packet: 2 system calls (`pread`, `send`; one more `pread` for a
//! second file run), 2 payload copies (page cache → user buffer in `pread`,
//! user buffer → socket buffer in `send`); `user_copies` counts 1.

use std::{io, os::fd::AsRawFd};

use super::{Batch, Counters, DataPath, Packet, per_packet, shrank, transfer_all};

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
    transfer_all(buf.len(), |done| {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is a valid writable buffer of `rest.len()` bytes.
        unsafe {
            libc::pread(
                fd,
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset + done as u64) as libc::off_t,
            )
        }
    })
}

/// Reads both file runs of `p` into `buf` (exactly their length), counting
/// the calls and the copy; EFAULT when the file ended first (it shrank
/// under the session: see `FAULTED`).
pub(crate) fn pread_runs(c: &mut Counters, p: &Packet<'_>, buf: &mut [u8]) -> io::Result<()> {
    let fd = p.file.as_raw_fd();
    let (run1, run2) = buf.split_at_mut(p.payload.len());
    c.user_copies += 1;
    c.syscalls += 1;
    if pread_full(fd, run1, p.offset)? < run1.len() {
        return Err(shrank());
    }
    if run2.is_empty() {
        return Ok(());
    }
    c.syscalls += 1;
    if pread_full(fd, run2, p.offset2)? < run2.len() {
        return Err(shrank());
    }
    Ok(())
}

impl DataPath for ReadSend {
    fn name(&self) -> &'static str {
        "read-send"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        let buf = &mut self.buf;
        per_packet(batch, sent, &mut self.counters, |c, burst, p| {
            let packet = buf
                .get_mut(..p.wire_len())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EMSGSIZE))?;
            let (head, runs) = packet.split_at_mut(p.head().len());
            pread_runs(c, p, runs)?;
            head.copy_from_slice(p.head());
            c.syscalls += 1;
            match burst.address() {
                Some(to) => burst
                    .socket
                    .send_to_with_flags(packet, &to, libc::MSG_NOSIGNAL),
                None => burst.socket.send_with_flags(packet, libc::MSG_NOSIGNAL),
            }
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

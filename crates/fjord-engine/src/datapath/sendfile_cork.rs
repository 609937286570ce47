//! The seeds' "rtp sendfile": per packet, `send` the RTP header with
//! `MSG_MORE` (the UDP socket holds it corked), then `sendfile` the payload
//! from the media file onto the same socket; the end of the `sendfile`
//! uncorks, and header and payload leave as one datagram.
//!
//! Per packet: 2 system calls (`send`, `sendfile`); the payload is not
//! copied in user space (`user_copies` 0): `sendfile` splices page-cache
//! pages into the datagram, and the kernel copies at most once (into a
//! linear buffer where the device cannot gather, as for every path here).
//!
//! If `sendfile` fails after the header was corked, the cork is pushed with
//! an empty `send` so no stale header ever prefixes the socket's next
//! datagram; that packet leaves truncated (counted sent, like a packet
//! damaged on the way).

use std::{io, os::fd::AsRawFd};

use super::{Batch, Counters, DataPath, is_transient, per_packet, transfer_all};

#[derive(Default)]
pub struct SendfileCork {
    counters: Counters,
}

fn send_raw(fd: libc::c_int, buf: &[u8], flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `buf` is a valid readable buffer of `buf.len()` bytes.
    let r = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `sendfile` of exactly `len` bytes at `offset`; returns the bytes sent
/// (fewer only when the file ends first).
fn sendfile_all(
    sock: libc::c_int,
    file: libc::c_int,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off = offset as libc::off_t;
    // SAFETY: valid descriptors and a valid offset pointer.
    transfer_all(len, |done| unsafe {
        libc::sendfile(sock, file, &mut off, len - done)
    })
}

impl DataPath for SendfileCork {
    fn name(&self) -> &'static str {
        "sendfile-cork"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        per_packet(batch, sent, &mut self.counters, |c, burst, p| {
            let sock = burst.socket.as_raw_fd();
            c.syscalls += 1;
            send_raw(sock, &p.header, libc::MSG_MORE | libc::MSG_NOSIGNAL)?;
            c.syscalls += 1;
            let r = sendfile_all(sock, p.file.as_raw_fd(), p.offset, p.payload.len());
            if !matches!(r, Ok(n) if n == p.payload.len()) {
                // Never leave the header corked on the socket.
                c.syscalls += 1;
                let _ = send_raw(sock, &[], libc::MSG_NOSIGNAL);
            }
            match r {
                // The header left: a payload the socket refused now is lost.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || is_transient(&e) => Ok(()),
                r => r.map(drop),
            }
        })
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

//! The seeds' "rtp sendfile": per packet, `send` the head (RTP header and
//! payload-header bytes) with `MSG_MORE` (the UDP socket holds it corked),
//! then `sendfile` the payload from the media file onto the same socket; the
//! end of the `sendfile` uncorks, and head and payload leave as one
//! datagram.
//!
//! A packet with a second file run needs two `sendfile`s, and the end of
//! the first would already uncork (`sendfile` passes `MSG_MORE` down only
//! while more of *its own* range is to come). So those packets set
//! `UDP_CORK` around the head and both runs, and clearing it sends the
//! datagram: 5 system calls instead of 2.
//!
//! Per packet: 2 system calls (`send`, `sendfile`); the payload is not
//! copied in user space (`user_copies` 0): `sendfile` splices page-cache
//! pages into the datagram, and the kernel copies at most once (into a
//! linear buffer where the device cannot gather, as for every path here).
//!
//! A packet with a run at an odd file offset leaves another way: Linux
//! (seen on 6.18) checksums a spliced run wrongly when it starts at an odd
//! offset, crosses a page boundary and follows corked bytes, and the
//! receiver drops the datagram as corrupt. Such packets (odd offset, page
//! crossing or not) go in one `sendmsg` from the mapping, as in
//! `mmap-writev`: one system call, one copy in the kernel. MPEG-TS runs
//! start at multiples of 188 bytes unless ingest skipped junk;
//! elementary-stream runs start anywhere.
//!
//! If `sendfile` fails after the head was corked, the cork is pushed (an
//! empty `send`, or clearing `UDP_CORK`) so no stale head ever prefixes the
//! socket's next datagram; that packet leaves truncated (counted sent, like
//! a packet damaged on the way).

use std::{io, mem, os::fd::AsRawFd};

use super::{
    Batch, Counters, DataPath, Packet, is_transient, mmap_writev::send_mapped, per_packet, shrank,
    transfer_all,
};

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

fn set_cork(fd: libc::c_int, on: bool) -> io::Result<()> {
    let v = libc::c_int::from(on);
    // SAFETY: a valid option value pointer and length.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_CORK,
            (&v as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What a failed `sendfile` after the head left means for the packet: the
/// head went, so a payload the socket refused now is lost, not retried.
fn after_head(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || is_transient(&e) => Ok(()),
        r => r,
    }
}

/// Head with `MSG_MORE`, then the one run; the end of the `sendfile` sends.
fn send_one_run(c: &mut Counters, sock: libc::c_int, p: &Packet<'_>) -> io::Result<()> {
    c.syscalls += 1;
    send_raw(sock, p.head(), libc::MSG_MORE | libc::MSG_NOSIGNAL)?;
    c.syscalls += 1;
    let r = sendfile_all(sock, p.file.as_raw_fd(), p.offset, p.payload.len());
    if !matches!(r, Ok(n) if n == p.payload.len()) {
        // Never leave the head corked on the socket.
        c.syscalls += 1;
        let _ = send_raw(sock, &[], libc::MSG_NOSIGNAL);
    }
    // The file ended first: it shrank under the session (see FAULTED).
    after_head(r.and_then(|n| {
        if n < p.payload.len() {
            Err(shrank())
        } else {
            Ok(())
        }
    }))
}

/// Head and both runs under `UDP_CORK`; clearing it sends the datagram.
fn send_two_runs(c: &mut Counters, sock: libc::c_int, p: &Packet<'_>) -> io::Result<()> {
    let file = p.file.as_raw_fd();
    c.syscalls += 1;
    set_cork(sock, true)?;
    c.syscalls += 1;
    let head = send_raw(sock, p.head(), libc::MSG_NOSIGNAL);
    let runs = if head.is_ok() {
        c.syscalls += 1;
        sendfile_all(sock, file, p.offset, p.payload.len()).and_then(|n| {
            if n < p.payload.len() {
                // The file shrank (see FAULTED): the packet leaves truncated.
                return Err(shrank());
            }
            c.syscalls += 1;
            sendfile_all(sock, file, p.offset2, p.payload2.len()).and_then(|n| {
                if n < p.payload2.len() {
                    Err(shrank())
                } else {
                    Ok(())
                }
            })
        })
    } else {
        Ok(())
    };
    c.syscalls += 1;
    set_cork(sock, false)?;
    head?;
    after_head(runs)
}

impl DataPath for SendfileCork {
    fn name(&self) -> &'static str {
        "sendfile-cork"
    }

    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()> {
        per_packet(batch, sent, &mut self.counters, |c, burst, p| {
            let sock = burst.socket.as_raw_fd();
            let odd = |offset: u64, run: &[u8]| offset % 2 == 1 && !run.is_empty();
            if odd(p.offset, p.payload) || odd(p.offset2, p.payload2) {
                send_mapped(c, burst.socket, None, p)
            } else if p.payload2.is_empty() {
                send_one_run(c, sock, p)
            } else {
                send_two_runs(c, sock, p)
            }
        })
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn prefabricated(&self) -> bool {
        false
    }
}

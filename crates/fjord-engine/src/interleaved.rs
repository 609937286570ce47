//! The write side of an RTSP connection carrying `$`-framed RTP/RTCP
//! (RFC 2326 §10.12). RTSP replies and frames share one byte stream, so one
//! owner writes both, in order, and never splits a frame with a reply.

use std::{
    io::{self, IoSlice},
    os::fd::OwnedFd,
};

use socket2::Socket;

use crate::datapath::MAX_HEAD;

/// More unsent bytes than this means the client stopped reading: drop it.
const MAX_PENDING: usize = 1 << 20;
/// Frames per `writev` (at most three iovecs each, well under `IOV_MAX`).
pub(crate) const MAX_FRAMES: usize = 64;

/// One `$` frame's content: a head of at most [`MAX_HEAD`] bytes (RTP
/// header and payload-header bytes; copied), then two runs by reference
/// (either may be empty).
pub(crate) type Frame<'a> = [&'a [u8]; 3];

pub(crate) struct Connection {
    socket: Socket,
    /// Bytes accepted but not yet written (a frame's tail after a short
    /// write, or replies queued behind it).
    pending: Vec<u8>,
    broken: bool,
}

impl Connection {
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Self> {
        let socket = Socket::from(fd);
        socket.set_nonblocking(true)?;
        Ok(Self {
            socket,
            pending: Vec::new(),
            broken: false,
        })
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Queues control bytes (an RTSP reply) behind whatever is pending.
    pub(crate) fn write_control(&mut self, bytes: &[u8]) {
        if self.broken {
            return;
        }
        if self.pending.len() + bytes.len() > MAX_PENDING {
            self.fail();
            return;
        }
        self.pending.extend_from_slice(bytes);
        self.flush();
    }

    /// Writes what is pending; true when nothing is left.
    pub(crate) fn flush(&mut self) -> bool {
        while !self.pending.is_empty() && !self.broken {
            match self
                .socket
                .send_with_flags(&self.pending, libc::MSG_NOSIGNAL)
            {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.fail(),
            }
        }
        self.pending.is_empty()
    }

    /// Sends one RTCP frame; dropped when the connection is full (RTCP
    /// tolerates loss).
    pub(crate) fn send_frame(&mut self, channel: u8, data: &[u8]) {
        self.send_frames(channel, &[[&[], data, &[]]]);
    }

    /// Sends many `$` frames of `channel` in one `writev`: each frame's `$`
    /// prefix and head from a small scratch area, its runs by reference.
    /// Returns how many frames were taken (a short write copies only the
    /// unsent tail of the last one) and whether the client is gone.
    pub(crate) fn send_frames(&mut self, channel: u8, frames: &[Frame<'_>]) -> (usize, bool) {
        if self.broken {
            return (0, true);
        }
        if !self.flush() {
            return (0, false);
        }
        let frames = &frames[..frames.len().min(MAX_FRAMES)];
        let mut heads = [[0u8; 4 + MAX_HEAD]; MAX_FRAMES];
        let mut head_lens = [0usize; MAX_FRAMES];
        for (i, [head, run1, run2]) in frames.iter().enumerate() {
            let head = &head[..head.len().min(MAX_HEAD)];
            let Ok(len) = u16::try_from(head.len() + run1.len() + run2.len()) else {
                self.fail();
                return (0, true);
            };
            heads[i][..4].copy_from_slice(&[b'$', channel, (len >> 8) as u8, len as u8]);
            heads[i][4..4 + head.len()].copy_from_slice(head);
            head_lens[i] = 4 + head.len();
        }
        let parts = |i: usize| {
            let [_, run1, run2] = frames[i];
            [&heads[i][..head_lens[i]], run1, run2]
        };
        let mut iov = [IoSlice::new(&[]); 3 * MAX_FRAMES];
        let mut n_iov = 0;
        for i in 0..frames.len() {
            for part in parts(i).into_iter().filter(|p| !p.is_empty()) {
                iov[n_iov] = IoSlice::new(part);
                n_iov += 1;
            }
        }
        loop {
            match self
                .socket
                .send_vectored_with_flags(&iov[..n_iov], libc::MSG_NOSIGNAL)
            {
                Ok(n) => {
                    // Whole frames written, then the tail of a partial one.
                    let mut left = n;
                    for i in 0..frames.len() {
                        let frame = parts(i);
                        let len: usize = frame.iter().map(|p| p.len()).sum();
                        if left >= len {
                            left -= len;
                            continue;
                        }
                        if left == 0 {
                            return (i, false);
                        }
                        for part in frame {
                            if left >= part.len() {
                                left -= part.len();
                            } else {
                                self.pending.extend_from_slice(&part[left..]);
                                left = 0;
                            }
                        }
                        return (i + 1, false);
                    }
                    return (frames.len(), false);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (0, false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.fail();
                    return (0, true);
                }
            }
        }
    }

    /// Gives up on the client: shutting the socket down also ends the control
    /// plane's reader, which then tears the connection's sessions down.
    fn fail(&mut self) {
        self.broken = true;
        self.pending = Vec::new();
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

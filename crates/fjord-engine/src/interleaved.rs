//! The write side of an RTSP connection carrying `$`-framed RTP/RTCP
//! (RFC 2326 §10.12). RTSP replies and frames share one byte stream, so one
//! owner writes both, in order, and never splits a frame with a reply.

use std::{
    io::{self, IoSlice},
    os::fd::OwnedFd,
};

use fjord_proto::rtp::RTP_HEADER_LEN;
use socket2::Socket;

/// More unsent bytes than this means the client stopped reading: drop it.
const MAX_PENDING: usize = 1 << 20;
/// Frames per `writev` (two iovecs each, well under `IOV_MAX`).
pub(crate) const MAX_FRAMES: usize = 64;

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
        self.send_frames(channel, &[(&[], data)]);
    }

    /// Sends many `$` frames of `channel` in one `writev`: each frame's
    /// prefix and header from a small scratch area, its payload by
    /// reference. Returns how many frames were taken (a short write copies
    /// only the unsent tail of the last one) and whether the client is gone.
    pub(crate) fn send_frames(&mut self, channel: u8, frames: &[(&[u8], &[u8])]) -> (usize, bool) {
        if self.broken {
            return (0, true);
        }
        if !self.flush() {
            return (0, false);
        }
        let frames = &frames[..frames.len().min(MAX_FRAMES)];
        let mut heads = [[0u8; 4 + RTP_HEADER_LEN]; MAX_FRAMES];
        let mut head_lens = [0usize; MAX_FRAMES];
        for (i, (header, payload)) in frames.iter().enumerate() {
            let Ok(len) = u16::try_from(header.len() + payload.len()) else {
                self.fail();
                return (0, true);
            };
            let n = header.len().min(RTP_HEADER_LEN);
            heads[i][..4].copy_from_slice(&[b'$', channel, (len >> 8) as u8, len as u8]);
            heads[i][4..4 + n].copy_from_slice(&header[..n]);
            head_lens[i] = 4 + n;
        }
        let mut iov = [IoSlice::new(&[]); 2 * MAX_FRAMES];
        for (i, (_, payload)) in frames.iter().enumerate() {
            iov[2 * i] = IoSlice::new(&heads[i][..head_lens[i]]);
            iov[2 * i + 1] = IoSlice::new(payload);
        }
        let iov = &iov[..2 * frames.len()];
        loop {
            match self
                .socket
                .send_vectored_with_flags(iov, libc::MSG_NOSIGNAL)
            {
                Ok(n) => {
                    // Whole frames written, then the tail of a partial one.
                    let mut left = n;
                    for (i, pair) in iov.chunks(2).enumerate() {
                        let len = pair[0].len() + pair[1].len();
                        if left >= len {
                            left -= len;
                            continue;
                        }
                        if left == 0 {
                            return (i, false);
                        }
                        for part in pair {
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

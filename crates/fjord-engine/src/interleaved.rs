//! The write side of an RTSP connection carrying `$`-framed RTP/RTCP
//! (RFC 2326 §10.12). RTSP replies and frames share one byte stream, so one
//! owner writes both, in order, and never splits a frame with a reply.

use std::{
    io::{self, IoSlice},
    os::fd::OwnedFd,
};

use socket2::Socket;

/// More unsent bytes than this means the client stopped reading: drop it.
const MAX_PENDING: usize = 1 << 20;

pub(crate) struct Connection {
    socket: Socket,
    /// Bytes accepted but not yet written (a frame's tail after a short
    /// write, or replies queued behind it).
    pending: Vec<u8>,
    broken: bool,
}

pub(crate) enum FrameResult {
    Sent,
    /// The socket is full: keep the packet and try again later.
    Blocked,
    Broken,
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

    /// Sends one frame: `$`, channel, length, then header and payload by
    /// reference. Only a short write copies (the unsent tail).
    pub(crate) fn send_frame(&mut self, channel: u8, header: &[u8], payload: &[u8]) -> FrameResult {
        if self.broken {
            return FrameResult::Broken;
        }
        if !self.flush() {
            return FrameResult::Blocked;
        }
        let total = header.len() + payload.len();
        let Ok(len) = u16::try_from(total) else {
            return FrameResult::Broken;
        };
        let len = len.to_be_bytes();
        let prefix = [b'$', channel, len[0], len[1]];
        let iov = [
            IoSlice::new(&prefix),
            IoSlice::new(header),
            IoSlice::new(payload),
        ];
        loop {
            match self
                .socket
                .send_vectored_with_flags(&iov, libc::MSG_NOSIGNAL)
            {
                Ok(n) => {
                    let mut skip = n;
                    for part in [&prefix[..], header, payload] {
                        if skip >= part.len() {
                            skip -= part.len();
                        } else {
                            self.pending.extend_from_slice(&part[skip..]);
                            skip = 0;
                        }
                    }
                    return FrameResult::Sent;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return FrameResult::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.fail();
                    return FrameResult::Broken;
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

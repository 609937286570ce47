//! How packets leave: the data path, behind one trait so faster paths
//! (sendmmsg, UDP GSO, `MSG_ZEROCOPY`, io_uring) replace the per-packet one
//! without touching sessions or pacing.

use std::io::{self, IoSlice};

use socket2::Socket;

pub trait DataPath {
    /// Sends one RTP packet, `header` then `payload`, as one datagram on a
    /// connected socket. `payload` points into the mapped media file.
    fn send_datagram(&mut self, socket: &Socket, header: &[u8], payload: &[u8]) -> io::Result<()>;
}

/// One `sendmsg` per packet with the payload by reference into the mapping
/// (the seeds' "mmap + writev" path: one copy, in the kernel).
#[derive(Default)]
pub struct SendMsg;

impl DataPath for SendMsg {
    fn send_datagram(&mut self, socket: &Socket, header: &[u8], payload: &[u8]) -> io::Result<()> {
        let iov = [IoSlice::new(header), IoSlice::new(payload)];
        let sent = socket.send_vectored_with_flags(&iov, libc::MSG_NOSIGNAL)?;
        if sent != header.len() + payload.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short datagram send",
            ));
        }
        Ok(())
    }
}

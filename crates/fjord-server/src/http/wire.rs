//! The byte stream an HTTP connection speaks, and how a file's bytes go
//! into it: plain TCP takes them by `sendfile`, never through user space;
//! HTTPS encrypts them in the connection's own task, read from the page
//! cache into a buffer the connection keeps and sealed by rustls straight
//! into the socket's send queue (no loopback bridge, no second task), or,
//! where the kernel holds the connection's keys (kTLS), by `sendfile` too.
//!
//! The file is read, not mapped: a title truncated while it is served
//! would raise SIGBUS in a mapping, and a read of resident pages costs
//! one copy that stays in the CPU's cache until rustls seals it.

use std::{
    future::Future,
    io,
    ops::Range,
    os::fd::{AsRawFd, RawFd},
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::server::TlsStream;

use crate::kernel_tls::KernelTls;

/// Plaintext read and sealed at a time over TLS: four full records, so a
/// write fills rustls's send queue (64 KiB by default) in one call.
const CHUNK: usize = 64 << 10;

/// A connection's stream: requests are read and heads written through
/// `AsyncRead`/`AsyncWrite`, file bytes through [`Wire::send_resident`].
pub(crate) trait Wire: AsyncRead + AsyncWrite + Unpin + Send {
    /// Sends bytes `range` of `fd`, resident in the page cache, as the
    /// client takes them; a client that takes nothing for `stall` is
    /// dropped.
    fn send_resident(
        &mut self,
        fd: RawFd,
        range: Range<u64>,
        stall: Duration,
    ) -> impl Future<Output = io::Result<()>> + Send;
}

fn stalled() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the client took no data")
}

/// The file is shorter than when the response began: the client sees a
/// body shorter than Content-Length.
fn shrank() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank")
}

impl Wire for TcpStream {
    /// `sendfile` as the socket takes the bytes.
    async fn send_resident(
        &mut self,
        fd: RawFd,
        range: Range<u64>,
        stall: Duration,
    ) -> io::Result<()> {
        let mut off = range.start as libc::off_t;
        let end = range.end as libc::off_t;
        while off < end {
            tokio::time::timeout(stall, self.writable())
                .await
                .map_err(|_| stalled())??;
            let sent = self.try_io(Interest::WRITABLE, || {
                // SAFETY: sendfile between descriptors we hold; it advances off.
                let n =
                    unsafe { libc::sendfile(self.as_raw_fd(), fd, &mut off, (end - off) as usize) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n)
                }
            });
            match sent {
                Ok(0) => return Err(shrank()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// An HTTPS connection after its handshake, with the buffer its file
/// bytes pass through (made at its first body, kept for the next). `IO`:
/// the socket, or the socket as read for a handoff to the kernel that the
/// socket refused (`kernel_tls`).
pub(crate) struct TlsWire<IO> {
    stream: TlsStream<IO>,
    buf: Vec<u8>,
}

impl<IO> TlsWire<IO> {
    pub(crate) fn new(stream: TlsStream<IO>) -> TlsWire<IO> {
        TlsWire {
            stream,
            buf: Vec::new(),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send> Wire for TlsWire<IO> {
    async fn send_resident(
        &mut self,
        fd: RawFd,
        range: Range<u64>,
        stall: Duration,
    ) -> io::Result<()> {
        self.buf.resize(CHUNK, 0);
        let mut at = range.start;
        while at < range.end {
            let want = (range.end - at).min(CHUNK as u64) as usize;
            // Resident pages: the read copies them and does not wait for
            // a disk (the caller has read them in).
            // SAFETY: pread into a buffer of at least `want` bytes we own.
            let n = unsafe { libc::pread(fd, self.buf.as_mut_ptr().cast(), want, at as i64) };
            let n = match n {
                n if n < 0 => return Err(io::Error::last_os_error()),
                0 => return Err(shrank()),
                n => n as usize,
            };
            tokio::time::timeout(stall, self.stream.write_all(&self.buf[..n]))
                .await
                .map_err(|_| stalled())??;
            at += n as u64;
        }
        // rustls holds what the socket has not taken yet.
        tokio::time::timeout(stall, self.stream.flush())
            .await
            .map_err(|_| stalled())?
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsWire<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsWire<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// An HTTPS connection whose keys the kernel holds (kTLS): heads are
/// written through it, file bytes by `sendfile` as over plain TCP; the
/// kernel encrypts both.
impl Wire for KernelTls {
    async fn send_resident(
        &mut self,
        fd: RawFd,
        range: Range<u64>,
        stall: Duration,
    ) -> io::Result<()> {
        self.tcp().send_resident(fd, range, stall).await
    }
}

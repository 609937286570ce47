//! An RTSPS connection after its handshake, served on its own socket with
//! no loopback bridge ([`Encryption`]). Where the kernel holds its keys
//! (kTLS), it is read a record at a time (`kernel_tls::read_some`) and
//! written as a plain one, the engine's interleaved RTP too. Else one
//! rustls state ([`TlsConn`]), behind a mutex, shared by the
//! connection's task, which reads requests and RTCP through it (and writes
//! replies until the engine owns the write side), and the engine thread
//! that sends the connection's interleaved RTP, which seals each burst's
//! `$` frames from the title's mapping into records and writes them
//! ([`Seal`]). Neither holds the lock across a wait: every call is one
//! non-blocking pass over the socket.
//!
//! Why shared and not split into a reading and a writing half: rustls
//! has no such halves, and a TLS 1.3 KeyUpdate from the client changes the
//! keys of both directions; the lock is taken per burst and per record
//! received, never per packet.

use std::{
    io::{self, IoSlice, Read, Write},
    os::fd::{AsFd, BorrowedFd},
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use fjord_engine::seal::{Flushed, Seal};
use rustls::ServerConnection;
use socket2::SockRef;
use tokio::{io::Interest, net::TcpStream};

/// Who seals and opens an RTSPS connection's records.
pub(crate) enum Encryption {
    /// rustls, in this process.
    User(Arc<TlsConn>),
    /// The kernel, which holds the keys (kTLS).
    Kernel,
}

impl Encryption {
    /// The metric's name for it (`fjord_rtsps_connections_total`).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Encryption::User(_) => "user",
            Encryption::Kernel => "kernel",
        }
    }
}

pub(crate) struct TlsConn(Mutex<ServerConnection>);

/// Reads through tokio (a `WouldBlock` clears the socket's readiness).
struct TryRead<'a>(&'a TcpStream);

impl Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

/// Writes to a non-blocking socket by descriptor (the engine holds its
/// own duplicate of the connection's).
struct SocketWrite<'a>(SockRef<'a>);

impl Write for SocketWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send_with_flags(buf, libc::MSG_NOSIGNAL)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes queued records until none is left (`Ok`) or the socket is full
/// (`WouldBlock`); `wrote` is set when the socket took any byte.
fn write_out(c: &mut ServerConnection, socket: BorrowedFd<'_>, wrote: &mut bool) -> io::Result<()> {
    let mut w = SocketWrite(SockRef::from(&socket));
    while c.wants_write() {
        match c.write_tls(&mut w) {
            Ok(n) => *wrote |= n > 0,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn would_block_is_fine(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
        _ => Ok(()),
    }
}

impl TlsConn {
    pub(crate) fn new(c: ServerConnection) -> TlsConn {
        TlsConn(Mutex::new(c))
    }

    fn lock(&self) -> MutexGuard<'_, ServerConnection> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends the plaintext rustls holds to `buf` (all of it: at most a
    /// record's worth arrives per read).
    fn take_plaintext(c: &mut ServerConnection, buf: &mut Vec<u8>) -> io::Result<()> {
        let at = buf.len();
        let n = c.process_new_packets().map_err(io::Error::other)?;
        buf.resize(at + n.plaintext_bytes_to_read(), 0);
        c.reader().read_exact(&mut buf[at..])
    }

    /// What arrived before the task began (a request sent right behind
    /// the handshake), and the records rustls queued (session tickets).
    pub(crate) fn start(&self, stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
        let mut c = self.lock();
        Self::take_plaintext(&mut c, buf)?;
        would_block_is_fine(stream.try_io(Interest::WRITABLE, || {
            write_out(&mut c, stream.as_fd(), &mut false)
        }))
    }

    /// Reads what the socket holds, appends its plaintext to `buf` and
    /// writes what rustls answers (alerts, a KeyUpdate). Returns the bytes
    /// read from the socket: 0 when the client closed. A record that does
    /// not decrypt is an error: the connection ends.
    pub(crate) fn read_some(&self, stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut c = self.lock();
        let n = c.read_tls(&mut TryRead(stream))?;
        let got = Self::take_plaintext(&mut c, buf);
        let sent = stream.try_io(Interest::WRITABLE, || {
            write_out(&mut c, stream.as_fd(), &mut false)
        });
        got?;
        would_block_is_fine(sent)?;
        Ok(n)
    }

    /// Seals `bytes` (a reply) and writes them, waiting for the socket up
    /// to `timeout` in all.
    pub(crate) async fn write_all(
        &self,
        stream: &TcpStream,
        mut bytes: &[u8],
        timeout: Duration,
    ) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = {
                let mut c = self.lock();
                let n = c.writer().write(bytes)?;
                bytes = &bytes[n..];
                would_block_is_fine(stream.try_io(Interest::WRITABLE, || {
                    write_out(&mut c, stream.as_fd(), &mut false)
                }))?;
                bytes.is_empty() && !c.wants_write()
            };
            if done {
                return Ok(());
            }
            tokio::time::timeout_at(deadline, stream.writable())
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        }
    }
}

impl Seal for TlsConn {
    fn seal(&self, socket: BorrowedFd<'_>, data: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut c = self.lock();
        let mut wrote = false;
        would_block_is_fine(write_out(&mut c, socket, &mut wrote))?;
        // rustls cuts the slices into records without joining them first,
        // and takes no more than its send queue's limit (64 KiB).
        let n = c.writer().write_vectored(data)?;
        would_block_is_fine(write_out(&mut c, socket, &mut wrote))?;
        Ok(n)
    }

    fn flush(&self, socket: BorrowedFd<'_>) -> io::Result<Flushed> {
        let mut c = self.lock();
        let mut wrote = false;
        would_block_is_fine(write_out(&mut c, socket, &mut wrote))?;
        Ok(Flushed {
            wrote,
            empty: !c.wants_write(),
        })
    }
}

//! HTTPS and RTSPS connections whose keys the kernel holds (kTLS, the
//! `tls` upper-layer protocol): after rustls's handshake the session's keys
//! go to the socket, and from then on what is written to it, by `sendfile`
//! or the engine's `writev` of interleaved RTP too, is sealed by the
//! kernel, and what is read is opened by it, a record at a time with the
//! record's type beside.
//!
//! The handoff ([`handoff`]) sets the ULP first, while rustls still holds
//! the session: a socket that refuses it (the kernel wants an established
//! connection, and a client that sent its request and half-closed is not
//! one any more) stays with rustls, in user space. Then the plaintext
//! rustls has opened is taken out (finishing a record the client has
//! begun, within the idle timeout), and the keys are extracted and given
//! for both directions; a refusal now (a cipher this kernel lacks) closes
//! the connection, since rustls has given its keys up.
//!
//! Reads take each record's type ([`record`]): application data is the
//! client's requests, an alert ends the stream, and anything else (a
//! change_cipher_spec, a TLS 1.3 KeyUpdate the kernel cannot follow) is an
//! error that closes the connection; never a panic.

use std::{
    io,
    os::fd::{AsRawFd, RawFd},
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use ktls::{CorkStream, CryptoInfo};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf},
    net::TcpStream,
};
use tokio_rustls::server::TlsStream;

/// A connection after rustls's handshake, read a record at a time so none
/// is left half in rustls when the kernel takes over.
pub(crate) type Handshaken = TlsStream<CorkStream<TcpStream>>;

/// Where a handshaken connection went.
pub(crate) enum Handoff {
    /// The kernel holds its keys.
    Kernel(KernelTls),
    /// The socket refused the ULP (why): rustls keeps the connection.
    User(Box<Handshaken>, io::Error),
    /// The kernel refused the keys rustls gave up: the connection is lost.
    Refused(io::Error),
    /// The client stalled mid-record, sent a bad one, or closed.
    Client(io::Error),
}

/// Gives the keys of `tls` to the kernel, if it takes them.
pub(crate) async fn handoff(mut tls: Handshaken, idle: Duration) -> Handoff {
    let fd = tls.get_ref().0.io.as_raw_fd();
    if let Err(e) = set_ulp(fd) {
        return Handoff::User(Box::new(tls), e);
    }
    let drained = match tokio::time::timeout(idle, drain(&mut tls)).await {
        Ok(Ok(drained)) => drained,
        Ok(Err(e)) => return Handoff::Client(e),
        Err(_) => return Handoff::Client(io::Error::from(io::ErrorKind::TimedOut)),
    };
    let (cork, conn) = tls.into_inner();
    match keys_to_kernel(fd, conn) {
        Ok(()) => Handoff::Kernel(KernelTls {
            tcp: cork.io,
            drained,
            ended: false,
            notified: false,
        }),
        Err(e) => Handoff::Refused(e),
    }
}

/// Whether this kernel takes TLS keys: the ULP set on a loopback
/// connection (the kernel loads its module on demand; `ENOENT` when it has
/// none).
pub(crate) fn available() -> bool {
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        return false;
    };
    let conn = listener.local_addr().and_then(std::net::TcpStream::connect);
    conn.is_ok_and(|c| set_ulp(c.as_raw_fd()).is_ok())
}

fn set_ulp(fd: RawFd) -> io::Result<()> {
    // SAFETY: setsockopt on a socket we hold, with a 3-byte value we own.
    let set =
        unsafe { libc::setsockopt(fd, libc::SOL_TCP, libc::TCP_ULP, b"tls".as_ptr().cast(), 3) };
    match set {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Sends what rustls has sealed (TLS 1.3 session tickets: the kernel's
/// record count starts after them) and takes out what it has opened,
/// ending at a record boundary.
async fn drain(tls: &mut Handshaken) -> io::Result<Vec<u8>> {
    tls.flush().await?;
    tls.get_mut().0.corked = true;
    let (mut drained, mut chunk) = (Vec::new(), [0u8; 4096]);
    loop {
        match tls.read(&mut chunk).await {
            // The corked stream's end: a record boundary.
            Ok(0) => return Ok(drained),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(drained),
            Ok(n) => drained.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(e),
        }
    }
}

fn keys_to_kernel(fd: RawFd, conn: rustls::ServerConnection) -> io::Result<()> {
    let suite = (conn.negotiated_cipher_suite()).ok_or_else(|| io::Error::other("no suite"))?;
    let secrets = conn.dangerous_extract_secrets().map_err(io::Error::other)?;
    for (direction, secret) in [(libc::TLS_TX, secrets.tx), (libc::TLS_RX, secrets.rx)] {
        let info = CryptoInfo::from_rustls(suite, secret).map_err(io::Error::other)?;
        // SAFETY: setsockopt on a socket we hold, with a crypto_info struct
        // we own and its size.
        let set = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_TLS,
                direction,
                info.as_ptr(),
                info.size() as _,
            )
        };
        if set != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A connection whose keys the kernel holds.
pub(crate) struct KernelTls {
    tcp: TcpStream,
    /// Requests rustls had opened before the handoff, read first.
    drained: Vec<u8>,
    /// The client's alert was read: the stream has ended.
    ended: bool,
    /// Our close_notify was sent.
    notified: bool,
}

impl KernelTls {
    /// The socket, for `sendfile`: the kernel seals what it sends.
    pub(crate) fn tcp(&mut self) -> &mut TcpStream {
        &mut self.tcp
    }

    /// The socket, and what rustls had opened before the handoff (to be
    /// read first): an RTSPS connection reads it with [`read_some`].
    pub(crate) fn into_parts(self) -> (TcpStream, Vec<u8>) {
        (self.tcp, self.drained)
    }
}

/// Reads the bytes of the stream `tcp` holds now into `room`, without
/// waiting (`WouldBlock`): `Ok(0)` at its end, the client's close_notify
/// or the socket's; a record of another type is an error.
fn try_read(tcp: &TcpStream, room: &mut [u8]) -> io::Result<usize> {
    let fd = tcp.as_raw_fd();
    let (n, kind) = tcp.try_io(Interest::READABLE, || recv_record(fd, room))?;
    match record(kind, &room[..n]) {
        Record::Data => Ok(n),
        Record::End => Ok(0),
        Record::Bad(why) => Err(io::Error::new(io::ErrorKind::InvalidData, why)),
    }
}

/// Appends what `tcp` holds to `buf`, as a plain connection's read does:
/// `Ok(0)` when the client closed.
pub(crate) fn read_some(tcp: &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; 4096];
    let n = try_read(tcp, &mut chunk)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

const CHANGE_CIPHER_SPEC: u8 = 20;
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

/// What a read record means for the stream.
#[derive(Debug, PartialEq)]
enum Record {
    /// Bytes of the stream (none: the client closed the socket).
    Data,
    /// The client's close_notify: the stream has ended.
    End,
    Bad(String),
}

/// A record of type `kind` (none: no record, the socket's end) and body.
fn record(kind: Option<u8>, body: &[u8]) -> Record {
    match kind {
        None | Some(APPLICATION_DATA) => Record::Data,
        Some(ALERT) => match body {
            [_, 0] => Record::End,
            [_, why] => Record::Bad(format!("the client sent alert {why}")),
            _ => Record::Bad(format!("an alert of {} bytes", body.len())),
        },
        Some(HANDSHAKE) => Record::Bad("a handshake message after the handshake".into()),
        Some(CHANGE_CIPHER_SPEC) => Record::Bad("a change_cipher_spec record".into()),
        Some(t) => Record::Bad(format!("a record of type {t}")),
    }
}

/// Room for one control message of one byte, aligned for its header.
type Control = [u64; 4];

/// One record's bytes into `buf` (a record at most: the kernel stops at
/// a change of type), and its type.
fn recv_record(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u8>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control: Control = [0; 4];
    // SAFETY: a zeroed msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of::<Control>();
    // SAFETY: recvmsg into the buffers msg points to, which we own.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the control messages the kernel wrote into `control`.
    let kind = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        let tls = !c.is_null()
            && (*c).cmsg_level == libc::SOL_TLS
            && (*c).cmsg_type == libc::TLS_GET_RECORD_TYPE;
        tls.then(|| *libc::CMSG_DATA(c))
    };
    Ok((n as usize, kind))
}

/// Sends a close_notify alert: a record of its own type.
fn send_close_notify(fd: RawFd) -> io::Result<()> {
    let body = [1u8, 0]; // warning, close_notify
    let mut iov = libc::iovec {
        iov_base: body.as_ptr() as *mut _,
        iov_len: body.len(),
    };
    let mut control: Control = [0; 4];
    // SAFETY: a zeroed msghdr is a valid empty one; its control message is
    // built within `control`, which has room for a header and a byte.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = ALERT;
        libc::sendmsg(fd, &msg, 0)
    };
    match sent {
        n if n < 0 => Err(io::Error::last_os_error()),
        _ => Ok(()),
    }
}

impl AsyncRead for KernelTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.drained.is_empty() {
            let n = this.drained.len().min(buf.remaining());
            buf.put_slice(&this.drained[..n]);
            this.drained.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if this.ended || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            match try_read(&this.tcp, buf.initialize_unfilled()) {
                Ok(n) => {
                    this.ended = n == 0;
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for KernelTls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    /// Sends the close_notify, then the FIN.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let fd = this.tcp.as_raw_fd();
        while !this.notified {
            ready!(this.tcp.poll_write_ready(cx))?;
            match this
                .tcp
                .try_io(Interest::WRITABLE, || send_close_notify(fd))
            {
                Ok(()) => this.notified = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_data_and_the_sockets_end_are_the_stream() {
        assert_eq!(
            record(Some(APPLICATION_DATA), b"GET / HTTP/1.1"),
            Record::Data
        );
        assert_eq!(record(None, b""), Record::Data);
    }

    #[test]
    fn a_close_notify_ends_the_stream_at_either_level() {
        assert_eq!(record(Some(ALERT), &[1, 0]), Record::End);
        assert_eq!(record(Some(ALERT), &[2, 0]), Record::End);
    }

    #[test]
    fn other_records_are_errors_not_panics() {
        let bad = |kind, body: &[u8]| matches!(record(Some(kind), body), Record::Bad(_));
        assert!(bad(ALERT, &[2, 40]), "a fatal alert");
        assert!(bad(ALERT, &[]), "an empty alert");
        assert!(bad(ALERT, &[1]), "half an alert");
        assert!(bad(ALERT, &[1, 0, 0]), "an alert too long");
        assert!(bad(CHANGE_CIPHER_SPEC, &[1]));
        assert!(bad(HANDSHAKE, &[24, 0, 0, 1, 0]), "a TLS 1.3 KeyUpdate");
        assert!(bad(99, b"x"));
    }
}

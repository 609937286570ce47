//! A download's body: bytes of a file sent by `sendfile` from the page
//! cache, each piece not already there (`cachestat`) read into it first by
//! a blocking thread at the disk's bulk pace, so the runtime's threads
//! never wait for the disk.

use std::{
    fs::File,
    io,
    ops::Range,
    os::fd::{AsRawFd, RawFd},
    sync::Arc,
    time::Duration,
};

use tokio::{io::Interest, net::TcpStream};

/// A piece read into the cache before it is sent: a few milliseconds of a
/// disk, so bulk turns interleave with stream read-ahead finely.
const PIECE: u64 = 1 << 20;

/// How a body is paced.
pub(crate) struct Pace {
    /// The storage layer, whose bulk turns a piece waits for (none: the
    /// piece is read at once).
    pub storage: Option<fjord_storage::Storage>,
    /// A client that takes no bytes for this long is dropped.
    pub stall: Duration,
}

/// Sends bytes `range` of `file` on `stream`.
pub(crate) async fn body(
    stream: &TcpStream,
    file: Arc<File>,
    range: Range<u64>,
    pace: &Pace,
) -> io::Result<()> {
    // No read-ahead of the kernel's own: the pieces below ask for what
    // they need in bounded requests.
    // SAFETY: a plain syscall on a descriptor we hold.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
    let device = fjord_storage::device_of(file.as_raw_fd());
    let mut at = range.start;
    while at < range.end {
        let n = (range.end - at).min(PIECE);
        if !fjord_storage::pin::resident(file.as_raw_fd(), at, n) {
            let (f, storage) = (file.clone(), pace.storage.clone());
            tokio::task::spawn_blocking(move || {
                let _turn = storage.as_ref().map(|s| s.bulk(device, n)).transpose()?;
                fjord_storage::pin::read_in_requests(f.as_raw_fd(), at, n)
                    .map_err(|e| io::Error::other(e.to_string()))
            })
            .await
            .map_err(io::Error::other)??;
        }
        send_piece(stream, file.as_raw_fd(), at..at + n, pace.stall).await?;
        at += n;
    }
    Ok(())
}

/// `sendfile` of bytes `range` (resident) as the socket takes them.
async fn send_piece(
    stream: &TcpStream,
    fd: RawFd,
    range: Range<u64>,
    stall: Duration,
) -> io::Result<()> {
    let mut off = range.start as libc::off_t;
    let end = range.end as libc::off_t;
    while off < end {
        tokio::time::timeout(stall, stream.writable())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the client took no data"))??;
        let sent = stream.try_io(Interest::WRITABLE, || {
            // SAFETY: sendfile between descriptors we hold; it advances off.
            let n =
                unsafe { libc::sendfile(stream.as_raw_fd(), fd, &mut off, (end - off) as usize) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n)
            }
        });
        match sent {
            Ok(0) => {
                // The file is shorter than when the response began: the
                // client sees a body shorter than Content-Length.
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank",
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

//! The write side of an RTSP connection carrying `$`-framed RTP/RTCP
//! (RFC 2326 §10.12). RTSP replies and frames share one byte stream, so one
//! owner writes both, in order, and never splits a frame with a reply.
//! Over TLS (RTSPS) the same bytes go through the connection's [`Seal`]
//! instead of `writev`: taken means sealed and queued, as a plain socket's
//! send buffer takes them.

use std::{
    io::{self, IoSlice},
    os::fd::{AsFd, OwnedFd},
    sync::Arc,
    time::{Duration, Instant},
};

use socket2::Socket;

use crate::{datapath::MAX_HEAD, seal::Seal};

/// More unsent bytes than this means the client stopped reading: drop it.
const MAX_PENDING: usize = 1 << 20;
/// Frames per `writev` (at most three iovecs each, well under `IOV_MAX`).
pub(crate) const MAX_FRAMES: usize = 64;

/// One `$` frame's content: a head of at most [`MAX_HEAD`] bytes (RTP
/// header and payload-header bytes; copied), then two runs by reference
/// (either may be empty).
pub(crate) type Frame<'a> = [&'a [u8]; 3];

/// A client that takes nothing is tried again after a quarter of the time
/// it has taken nothing, within these bounds: one that stopped reading
/// costs a write attempt a second, not one every millisecond, and one
/// that reads again after a long stall waits at most a second more.
const RETRY_MIN: Duration = Duration::from_millis(1);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Tries fall on a grid, so the stalled clients of a thread share its
/// wake-ups instead of waking it each at its own time.
const RETRY_GRID: Duration = Duration::from_millis(10);
/// The connection's send buffer (the kernel doubles it): a few seconds of
/// a video stream and a fast link's bandwidth-delay product, where the
/// kernel's autotuning would let each client that stops reading hold up
/// to 4 MB (and fill it for seconds before it is seen to stall).
const SEND_BUFFER: usize = 256 << 10;

pub(crate) struct Connection {
    socket: Socket,
    /// Bytes accepted but not yet written (a frame's tail after a short
    /// write, or replies queued behind it).
    pending: Vec<u8>,
    broken: bool,
    /// Since when the client has taken no byte of what waits for it.
    stalled_since: Option<Instant>,
    /// No write is tried before this while the client is stalled.
    next_try: Option<Instant>,
    /// A client stalled this long is dropped.
    stall_timeout: Duration,
    /// RTSPS: what encrypts the bytes before the socket.
    seal: Option<Arc<dyn Seal>>,
}

impl Connection {
    pub(crate) fn new(
        fd: OwnedFd,
        stall_timeout: Duration,
        seal: Option<Arc<dyn Seal>>,
    ) -> io::Result<Self> {
        let socket = Socket::from(fd);
        socket.set_nonblocking(true)?;
        socket.set_send_buffer_size(SEND_BUFFER)?;
        Ok(Self {
            socket,
            pending: Vec::new(),
            broken: false,
            stalled_since: None,
            next_try: None,
            stall_timeout,
            seal,
        })
    }

    /// Writes a prefix of `iov`: to the socket, or sealed (a full seal
    /// queue is `WouldBlock`, as a full socket).
    fn send(&self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        match &self.seal {
            None => self
                .socket
                .send_vectored_with_flags(iov, libc::MSG_NOSIGNAL),
            Some(seal) => match seal.seal(self.socket.as_fd(), iov)? {
                0 if iov.iter().any(|b| !b.is_empty()) => Err(io::ErrorKind::WouldBlock.into()),
                n => Ok(n),
            },
        }
    }

    /// When to try writing again (`None`: now, the client keeps up).
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.next_try
    }

    /// Records a write attempt: whether it wrote anything and whether
    /// bytes are left waiting. A client that took nothing for
    /// `stall_timeout` is dropped (its sessions end with the connection).
    fn attempted(&mut self, wrote: bool, left: bool, now: Instant) {
        if wrote || !left {
            self.stalled_since = None;
            self.next_try = None;
            return;
        }
        let stalled = now.saturating_duration_since(*self.stalled_since.get_or_insert(now));
        if stalled >= self.stall_timeout {
            tracing::warn!(
                "an interleaved RTSP client took no data for {} s; dropping its connection",
                stalled.as_secs()
            );
            self.fail();
            return;
        }
        self.next_try = Some(on_grid(now + (stalled / 4).clamp(RETRY_MIN, RETRY_MAX)));
    }

    /// Whether a write may be tried `now` (not before a stalled client's
    /// next try).
    pub(crate) fn may_try(&self, now: Instant) -> bool {
        self.next_try.is_none_or(|t| now >= t)
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Queues control bytes (an RTSP reply) behind whatever is pending.
    pub(crate) fn write_control(&mut self, bytes: &[u8], now: Instant) {
        if self.broken {
            return;
        }
        if self.pending.len() + bytes.len() > MAX_PENDING {
            self.fail();
            return;
        }
        self.pending.extend_from_slice(bytes);
        self.flush(now);
    }

    /// Writes what is pending (and, over TLS, the records the seal still
    /// holds); true when nothing is left. A stalled client's bytes wait
    /// for its next try.
    pub(crate) fn flush(&mut self, now: Instant) -> bool {
        if self.broken || (self.pending.is_empty() && self.seal.is_none()) {
            return self.pending.is_empty();
        }
        if !self.may_try(now) {
            return false;
        }
        let mut wrote = false;
        while !self.pending.is_empty() && !self.broken {
            match self.send(&[IoSlice::new(&self.pending)]) {
                Ok(n) => {
                    wrote |= n > 0;
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.fail(),
            }
        }
        let mut queued = false;
        if let (Some(seal), false) = (&self.seal, self.broken) {
            match seal.flush(self.socket.as_fd()) {
                Ok(f) => (wrote, queued) = (wrote | f.wrote, !f.empty),
                Err(_) => self.fail(),
            }
        }
        let left = !self.pending.is_empty() || queued;
        if !self.broken {
            self.attempted(wrote, left, now);
        }
        !left
    }

    /// Sends one RTCP frame; dropped when the connection is full (RTCP
    /// tolerates loss).
    pub(crate) fn send_frame(&mut self, channel: u8, data: &[u8], now: Instant) {
        self.send_frames(channel, &[[&[], data, &[]]], now);
    }

    /// Sends many `$` frames of `channel` in one `writev`: each frame's `$`
    /// prefix and head from a small scratch area, its runs by reference.
    /// Returns how many frames were taken (a short write copies only the
    /// unsent tail of the last one) and whether the client is gone.
    pub(crate) fn send_frames(
        &mut self,
        channel: u8,
        frames: &[Frame<'_>],
        now: Instant,
    ) -> (usize, bool) {
        if self.broken {
            return (0, true);
        }
        if !self.flush(now) || !self.may_try(now) {
            return (0, false);
        }
        let (taken, broken) = self.write_frames(channel, frames);
        if !broken && !frames.is_empty() {
            let left = taken < frames.len().min(MAX_FRAMES) || !self.pending.is_empty();
            self.attempted(taken > 0, left, now);
        }
        (taken, broken || self.broken)
    }

    /// Sends one frame, or queues a copy of it behind what is pending when
    /// the client is behind (a live stream's packet cannot wait for the
    /// next tick); false when the client is gone or over its bound.
    pub(crate) fn send_or_queue(&mut self, channel: u8, frame: Frame<'_>, now: Instant) -> bool {
        let (taken, broken) = self.send_frames(channel, &[frame], now);
        if broken {
            return false;
        }
        if taken == 0 {
            let len: usize = frame.iter().map(|p| p.len()).sum();
            let Ok(len) = u16::try_from(len) else {
                return false;
            };
            if self.pending.len() + 4 + usize::from(len) > MAX_PENDING {
                self.fail();
                return false;
            }
            (self.pending).extend_from_slice(&[b'$', channel, (len >> 8) as u8, len as u8]);
            frame.iter().for_each(|p| self.pending.extend_from_slice(p));
        }
        true
    }

    /// Bytes accepted and not yet written.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn write_frames(&mut self, channel: u8, frames: &[Frame<'_>]) -> (usize, bool) {
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
            match self.send(&iov[..n_iov]) {
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

/// `t` rounded up to the next point of [`RETRY_GRID`] (counted from the
/// first call in the process).
fn on_grid(t: Instant) -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    let grid = RETRY_GRID.as_nanos();
    let since = t.saturating_duration_since(epoch).as_nanos();
    let up = since.div_ceil(grid) * grid - since;
    t + Duration::from_nanos(up as u64)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    use super::*;

    /// A connection (stall timeout 10 s) whose client has not read: `frames`
    /// are sent at `t0` until one attempt takes nothing.
    fn stalled(frames: &[Frame<'_>], t0: Instant) -> (Connection, UnixStream) {
        let (ours, client) = UnixStream::pair().unwrap();
        let mut c = Connection::new(OwnedFd::from(ours), Duration::from_secs(10), None).unwrap();
        let mut filled = 0;
        while c.send_frames(0, frames, t0) == (frames.len(), false) {
            filled += 1;
            assert!(filled < 10_000, "the socket never filled");
        }
        // The last write took part of a frame; the next takes nothing.
        assert_eq!(c.send_frames(0, frames, t0), (0, false));
        (c, client)
    }

    /// A client that stops reading is tried less and less often (no write
    /// before its next try), dropped after the stall timeout (its socket
    /// shut down, so its reader sees the end), and one that reads again
    /// is tried at once.
    #[test]
    fn a_stalled_client_is_retried_ever_less_often_then_dropped() {
        let payload = vec![7u8; 1200];
        let frames: Vec<Frame<'_>> = vec![[&[], &payload, &[]]; MAX_FRAMES];
        let t0 = Instant::now();
        let (mut c, mut client) = stalled(&frames, t0);
        let first = c.retry_at().unwrap() - t0;
        assert!(
            first >= RETRY_MIN && first <= RETRY_MIN + RETRY_GRID,
            "{first:?}"
        );
        // Before its next try nothing is written, whatever is offered.
        assert_eq!(c.send_frames(0, &frames, t0), (0, false));
        let mut now = t0;
        let mut gaps = vec![];
        while let Some(next) = c.retry_at() {
            gaps.push(next - now);
            now = next;
            assert_eq!(c.send_frames(0, &frames, now).0, 0);
            if c.is_broken() {
                break;
            }
        }
        assert!(c.is_broken(), "dropped");
        assert!(now - t0 >= Duration::from_secs(10) && now - t0 < Duration::from_secs(11));
        assert!(
            gaps.iter().all(|g| *g <= RETRY_MAX + RETRY_GRID),
            "{gaps:?}"
        );
        assert!(
            gaps[gaps.len() - 5..].iter().all(|g| *g >= RETRY_MAX),
            "{gaps:?}"
        );
        assert!(gaps.len() < 60, "{} tries in 10 s", gaps.len());
        // The client reads what was sent, then the end.
        let mut rest = vec![];
        client.read_to_end(&mut rest).unwrap();
        assert!(!rest.is_empty());
    }

    #[test]
    fn a_client_that_reads_again_is_tried_at_once() {
        let payload = vec![7u8; 1200];
        let frames: Vec<Frame<'_>> = vec![[&[], &payload, &[]]; MAX_FRAMES];
        let t0 = Instant::now();
        let (mut c, mut client) = stalled(&frames, t0);
        let later = t0 + Duration::from_secs(4);
        c.send_frames(0, &frames, later);
        let next = c.retry_at().unwrap();
        assert!(next - later >= RETRY_MAX, "{:?}", next - later);
        client.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while client.read(&mut buf).is_ok_and(|n| n > 0) {}
        let (taken, broken) = c.send_frames(0, &frames, next);
        assert!(taken > 0 && !broken);
        assert_eq!(c.retry_at(), None);
    }

    /// A seal that "encrypts" by adding 1 to each byte and queues at most
    /// `limit` bytes, as rustls does with its send queue.
    struct AddOne {
        queue: std::sync::Mutex<Vec<u8>>,
        limit: usize,
    }

    impl AddOne {
        fn write_out(&self, q: &mut Vec<u8>, socket: BorrowedFd<'_>) -> io::Result<bool> {
            let mut wrote = false;
            while !q.is_empty() {
                match socket2::SockRef::from(&socket).send(q) {
                    Ok(n) => {
                        wrote |= n > 0;
                        q.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(wrote)
        }
    }

    impl Seal for AddOne {
        fn seal(&self, socket: BorrowedFd<'_>, data: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut q = self.queue.lock().unwrap();
            self.write_out(&mut q, socket)?;
            let mut taken = 0;
            for b in data.iter().flat_map(|s| s.iter()) {
                if q.len() >= self.limit {
                    break;
                }
                q.push(b.wrapping_add(1));
                taken += 1;
            }
            self.write_out(&mut q, socket)?;
            Ok(taken)
        }

        fn flush(&self, socket: BorrowedFd<'_>) -> io::Result<crate::seal::Flushed> {
            let mut q = self.queue.lock().unwrap();
            let wrote = self.write_out(&mut q, socket)?;
            Ok(crate::seal::Flushed {
                wrote,
                empty: q.is_empty(),
            })
        }
    }

    use std::os::fd::BorrowedFd;

    /// Through a seal, the frames arrive whole and in order (as the plain
    /// path writes them, sealed); a client that stops reading fills the
    /// seal's queue and is dropped after the stall timeout; what the seal
    /// still holds is written once the client reads again.
    #[test]
    fn sealed_frames_arrive_in_order_and_a_full_seal_is_a_full_socket() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        let seal = Arc::new(AddOne {
            queue: Default::default(),
            limit: 4096,
        });
        let mut c = Connection::new(
            OwnedFd::from(ours),
            Duration::from_secs(10),
            Some(seal.clone()),
        )
        .unwrap();
        let payload: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
        let frames: Vec<Frame<'_>> = vec![[&[9, 9], &payload, &[7]]; 4];
        let t0 = Instant::now();
        assert_eq!(c.send_frames(3, &frames, t0), (4, false));
        c.write_control(b"RTSP/1.0 200 OK\r\n\r\n", t0);
        assert!(c.flush(t0));
        client.set_nonblocking(true).unwrap();
        let mut got = vec![0u8; 1 << 16];
        let n = client.read(&mut got).unwrap();
        let plain: Vec<u8> = got[..n].iter().map(|b| b.wrapping_sub(1)).collect();
        let mut want = Vec::new();
        for _ in 0..4 {
            want.extend_from_slice(&[b'$', 3, 0x04, 0xb3, 9, 9]);
            want.extend_from_slice(&payload);
            want.push(7);
        }
        want.extend_from_slice(b"RTSP/1.0 200 OK\r\n\r\n");
        assert_eq!(plain, want);
        // The client stops reading: the seal's queue fills, then nothing
        // is taken, and the stall timeout drops it.
        let mut now = t0;
        while c.send_frames(3, &frames, now).0 > 0 {}
        assert!(!seal.queue.lock().unwrap().is_empty());
        assert!(!c.flush(now), "the seal holds bytes");
        while let Some(next) = c.retry_at() {
            now = next;
            c.send_frames(3, &frames, now);
            if c.is_broken() {
                break;
            }
        }
        assert!(c.is_broken());
        assert!(now - t0 >= Duration::from_secs(10) && now - t0 < Duration::from_secs(11));
    }

    #[test]
    fn what_the_seal_holds_goes_once_the_client_reads() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        let seal = Arc::new(AddOne {
            queue: Default::default(),
            limit: 1 << 16,
        });
        let mut c = Connection::new(
            OwnedFd::from(ours),
            Duration::from_secs(10),
            Some(seal.clone()),
        )
        .unwrap();
        let payload = vec![5u8; 1200];
        let frames: Vec<Frame<'_>> = vec![[&[], &payload, &[]]; MAX_FRAMES];
        let t0 = Instant::now();
        let mut sent = 0;
        while c.send_frames(1, &frames, t0).0 > 0 {
            sent += 1;
            assert!(sent < 10_000);
        }
        assert!(!c.flush(t0));
        client.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0;
        let later = t0 + Duration::from_secs(2);
        loop {
            while let Ok(n) = client.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n;
            }
            if c.flush(later) {
                break;
            }
        }
        while let Ok(n) = client.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        assert!(seal.queue.lock().unwrap().is_empty());
        assert_eq!(total % (4 + 1200), 0, "whole frames: {total}");
        assert!(!c.is_broken());
    }
}

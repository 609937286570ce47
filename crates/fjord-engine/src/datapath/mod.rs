//! How packets leave: the data path, behind one trait so every way of
//! sending (the seeds' per-packet paths, sendmmsg, UDP GSO, `MSG_ZEROCOPY`,
//! io_uring) plugs into the same engine and the same benchmark.
//!
//! Each engine tick gathers every packet due in all its sessions into one
//! [`Batch`]: bursts of consecutive packets per session, headers built, the
//! payloads by reference (into the mapped file, and as file + offset for the
//! paths that read or sendfile). A path sends what it can of each burst.

pub mod cmsg;
mod gso;
mod gso_zerocopy;
mod mmap_writev;
mod read_send;
mod read_writev;
mod sendfile_cork;
mod sendmmsg;
mod uring;

use std::{io, net::SocketAddr, ops::Range, os::fd::BorrowedFd, sync::Arc};

use fjord_fec::symbol::REPAIR_HEADER_LEN;
use fjord_media::plan::MAX_PREFIX;
use fjord_proto::rtp::RTP_HEADER_LEN;
use socket2::{SockAddr, Socket};

use crate::prefault::prefault;

pub use gso::Gso;
pub use gso_zerocopy::GsoZerocopy;
pub use mmap_writev::MmapWritev;
pub use read_send::ReadSend;
pub use read_writev::ReadWritev;
pub use sendfile_cork::SendfileCork;
pub use sendmmsg::Sendmmsg;
pub use uring::Uring;

/// A batch never holds more packets than this (so never more bursts or GSO
/// groups either): paths size their reused arrays by it once, and steady
/// state allocates nothing.
pub const MAX_BATCH_PACKETS: usize = 4096;

/// Most bytes a packet carries before its file bytes: the RTP header, then
/// the record's payload-header bytes or a repair packet's FEC payload ID.
pub const MAX_HEAD: usize = RTP_HEADER_LEN + max(MAX_PREFIX, REPAIR_HEADER_LEN);

const fn max(a: usize, b: usize) -> usize {
    if a > b { a } else { b }
}

/// One RTP packet ready to leave: the head (RTP header, then payload-header
/// bytes), then one or two runs of the media file. A prefabricated packet
/// has no head: its one run in the packet file is the whole packet.
#[derive(Clone, Copy)]
pub struct Packet<'a> {
    head: [u8; MAX_HEAD],
    head_len: u8,
    /// The first run in the mapped media file.
    pub payload: &'a [u8],
    /// The second run in the mapping; empty for most packets.
    pub payload2: &'a [u8],
    /// The media file and the runs' offsets in it.
    pub file: BorrowedFd<'a>,
    pub offset: u64,
    pub offset2: u64,
}

impl<'a> Packet<'a> {
    /// A packet of `header`, `prefix` (at most [`MAX_HEAD`] bytes in all
    /// are used) and the file run `payload` found at `offset` in `file`.
    #[inline]
    pub fn new(
        header: &[u8; RTP_HEADER_LEN],
        prefix: &[u8],
        payload: &'a [u8],
        file: BorrowedFd<'a>,
        offset: u64,
    ) -> Self {
        let prefix = &prefix[..prefix.len().min(MAX_HEAD - RTP_HEADER_LEN)];
        let mut head = [0; MAX_HEAD];
        head[..RTP_HEADER_LEN].copy_from_slice(header);
        // Most packets (MPEG-TS, AAC, MP3) have none: no copy call then.
        if !prefix.is_empty() {
            head[RTP_HEADER_LEN..][..prefix.len()].copy_from_slice(prefix);
        }
        Self {
            head,
            head_len: (RTP_HEADER_LEN + prefix.len()) as u8,
            payload,
            payload2: &[],
            file,
            offset,
            offset2: 0,
        }
    }

    /// A prefabricated packet: `bytes` (header and payload) found at `offset`
    /// in the packet file `file`.
    #[inline]
    pub fn prefabricated(bytes: &'a [u8], file: BorrowedFd<'a>, offset: u64) -> Self {
        Self {
            head: [0; MAX_HEAD],
            head_len: 0,
            payload: bytes,
            payload2: &[],
            file,
            offset,
            offset2: 0,
        }
    }

    /// Adds the second file run `payload2`, found at `offset2`.
    #[inline]
    pub fn with_second_run(self, payload2: &'a [u8], offset2: u64) -> Self {
        Self {
            payload2,
            offset2,
            ..self
        }
    }

    /// The RTP header and payload-header bytes: what precedes the file runs.
    #[inline]
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// What the kernel gathers for this packet, in order: the head (none
    /// when prefabricated), the first run, and the second run only when
    /// there is one.
    #[inline]
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        let skip = usize::from(self.head_len == 0);
        let n = if self.payload2.is_empty() { 2 } else { 3 };
        [self.head(), self.payload, self.payload2]
            .into_iter()
            .take(n)
            .skip(skip)
    }

    /// Bytes on the wire above UDP: head and both runs.
    #[inline]
    pub fn wire_len(&self) -> usize {
        usize::from(self.head_len) + self.payload.len() + self.payload2.len()
    }
}

/// An iovec for `bytes`; the kernel only reads through it.
#[inline]
fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }
}

/// Consecutive packets of one session due in this tick.
pub struct Burst<'a> {
    /// The UDP socket to send from: connected to the client's RTP port, or
    /// (`shared`) unconnected and shared by many sessions.
    pub socket: &'a Socket,
    /// The client's RTP address.
    pub dest: SocketAddr,
    /// `socket` is unconnected: every message must name `dest`.
    pub shared: bool,
    pub packets: Range<usize>,
}

impl Burst<'_> {
    /// The address a message of this burst names (`msg_name`): `dest` on a
    /// shared socket, none on a connected one.
    pub fn address(&self) -> Option<SockAddr> {
        self.shared.then(|| SockAddr::from(self.dest))
    }
}

/// Points `msg` at `to` (or at no address).
fn set_name(msg: &mut libc::msghdr, to: Option<&SockAddr>) {
    match to {
        Some(a) => {
            msg.msg_name = a.as_ptr() as *mut libc::c_void;
            msg.msg_namelen = a.len();
        }
        None => {
            msg.msg_name = std::ptr::null_mut();
            msg.msg_namelen = 0;
        }
    }
}

/// Everything one tick sends. Reused from tick to tick: steady state
/// allocates nothing.
#[derive(Default)]
pub struct Batch<'a> {
    pub packets: Vec<Packet<'a>>,
    pub bursts: Vec<Burst<'a>>,
}

impl<'a> Batch<'a> {
    /// Room for `packets` and `bursts`, resident at once (see
    /// [`crate::prefault`]).
    pub fn with_capacity(packets: usize, bursts: usize) -> Self {
        let mut batch = Self {
            packets: Vec::with_capacity(packets),
            bursts: Vec::with_capacity(bursts),
        };
        prefault(&mut batch.packets);
        prefault(&mut batch.bursts);
        batch
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Empties the batch and hands its storage to a batch of another
    /// lifetime, without freeing it.
    pub fn recycle<'b>(mut self) -> Batch<'b> {
        self.packets.clear();
        self.bursts.clear();
        Batch {
            packets: self.packets.into_iter().map(|_| unreachable!()).collect(),
            bursts: self.bursts.into_iter().map(|_| unreachable!()).collect(),
        }
    }

    /// Makes the packets added since index `first` one burst to `dest`
    /// from `socket` (none if there are none); returns how many there are.
    #[inline]
    pub fn close_burst(&mut self, first: usize, socket: &'a UdpSocket, dest: SocketAddr) -> usize {
        let n = self.packets.len() - first;
        if n > 0 {
            self.bursts.push(Burst {
                socket: socket.socket(),
                dest,
                shared: socket.is_shared(),
                packets: first..self.packets.len(),
            });
        }
        n
    }

    pub fn burst(&self, i: usize) -> &[Packet<'a>] {
        &self.packets[self.bursts[i].packets.clone()]
    }
}

/// A UDP socket a stream sends from.
pub enum UdpSocket {
    /// The stream's own socket: for RTP, connected to the peer (the paths
    /// that cannot address each message need that); for RTCP, bound to the
    /// session's server port and addressed per message.
    Own(socket2::Socket),
    /// An unconnected socket that many streams of one engine thread share
    /// (bound to the server's one RTP or RTCP port): every message names
    /// its destination. Only an engine thread's own streams may share an
    /// RTP socket (zero-copy completions are read per socket).
    Shared(Arc<socket2::Socket>),
}

impl UdpSocket {
    pub fn socket(&self) -> &socket2::Socket {
        match self {
            UdpSocket::Own(s) => s,
            UdpSocket::Shared(s) => s,
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, UdpSocket::Shared(_))
    }
}

impl From<socket2::Socket> for UdpSocket {
    fn from(s: socket2::Socket) -> Self {
        UdpSocket::Own(s)
    }
}

/// What a path did, for the benchmark and for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub syscalls: u64,
    /// Packets whose payload was copied into user space (one per packet on
    /// the read paths, none elsewhere): a count of packets, not bytes.
    pub user_copies: u64,
    /// Zero-copy sends the kernel completed by copying after all.
    pub zerocopy_copied: u64,
    pub zerocopy_done: u64,
}

/// `sent[i]` of a burst whose bytes cannot be read: the kernel answered
/// EFAULT (a page of the mapped media or packet file vanished: the file was
/// truncated underneath), or a `pread`/`sendfile` found the file shorter
/// than the packet. Such a burst never leaves, however often it is tried:
/// the path goes on with the next burst (so the other sessions of the
/// batch are not starved), and the engine ends the session.
pub const FAULTED: usize = usize::MAX;

/// An error that means "this burst's bytes are gone", not "this path does
/// not work": see [`FAULTED`].
fn is_fault(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EFAULT)
}

/// What a read path reports when the file ended before a packet's run: as
/// a vanished page does, EFAULT.
fn shrank() -> io::Error {
    io::Error::from_raw_os_error(libc::EFAULT)
}

pub trait DataPath: Send {
    fn name(&self) -> &'static str;

    /// Sends what it can of every burst of `batch`. `sent[i]` receives how
    /// many packets of burst `i` left (always a prefix; the rest wait for the
    /// next tick because the socket was full), or [`FAULTED`]. A packet the
    /// network refused (e.g. ICMP port unreachable) counts as sent: UDP may
    /// lose it anyway. An error means the path itself does not work here
    /// (the engine then falls back to a simpler one).
    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()>;

    fn counters(&self) -> Counters;

    /// Whether the path sends prefabricated packets when a title has them.
    /// The seeds' per-packet reference lines (`read-send`, `read-writev`,
    /// `mmap-writev`, `sendfile-cork`) do not: they build each header and
    /// take the payload from the media file, as the servers they model did.
    fn prefabricated(&self) -> bool {
        true
    }

    /// Whether the path sends from the packets' bytes in memory and is done
    /// with them when `send` returns: live packets (`live.rs`) have no file
    /// behind them and may be freed right after. The paths that read or
    /// sendfile from the file, and `gso-zerocopy` (whose pages the kernel
    /// reads after the call), do not.
    fn sends_memory(&self) -> bool {
        false
    }
}

/// The loop every per-packet path shares: bursts in order, one `send_one`
/// per packet. A full socket (`WouldBlock`) ends the burst's prefix; a
/// transient error loses only that packet; unreadable bytes end the burst
/// as [`FAULTED`]; any other error is the path's.
fn per_packet(
    batch: &Batch<'_>,
    sent: &mut [usize],
    counters: &mut Counters,
    mut send_one: impl FnMut(&mut Counters, &Burst<'_>, &Packet<'_>) -> io::Result<()>,
) -> io::Result<()> {
    for (i, burst) in batch.bursts.iter().enumerate() {
        sent[i] = 0;
        for p in batch.burst(i) {
            match send_one(counters, burst, p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if is_fault(&e) => {
                    sent[i] = FAULTED;
                    break;
                }
                Err(e) if is_transient(&e) => {}
                Err(e) => return Err(e),
            }
            sent[i] += 1;
            counters.packets += 1;
        }
    }
    Ok(())
}

/// Repeats a system call that moves part of `len` bytes (`step(done)`
/// returns what one call moved, as `pread`/`sendfile` do) until all moved,
/// the file ended (0) or it failed other than by EINTR; returns bytes moved.
fn transfer_all(len: usize, mut step: impl FnMut(usize) -> isize) -> io::Result<usize> {
    let mut done = 0;
    while done < len {
        match step(done) {
            0 => break,
            r if r > 0 => done += r as usize,
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

/// Errors after which a path is not used again (the quinn-udp rule for GSO).
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

/// Per-socket errors that lose the packet but not the path.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EPERM
                | libc::ENOBUFS
        )
    )
}

/// Whether path `name` can send from a socket shared by many sessions,
/// naming each message's destination. `read-writev` (`writev`) and
/// `sendfile-cork` (`sendfile`) cannot: they need a connected socket per
/// session.
pub fn addresses_each_message(name: &str) -> bool {
    !matches!(name, "read-writev" | "sendfile-cork")
}

/// Send buffer of a socket that many sessions share: it carries a whole
/// tick of an engine thread.
pub const SHARED_SNDBUF: usize = 32 << 20;

/// Readies `s` to be shared by an engine thread's sessions: non-blocking,
/// a send buffer of [`SHARED_SNDBUF`] (beyond `wmem_max` where allowed:
/// `SO_SNDBUFFORCE` needs CAP_NET_ADMIN; else as much as `wmem_max` lets).
pub fn prepare_shared(s: &Socket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    s.set_nonblocking(true)?;
    let size = SHARED_SNDBUF as libc::c_int;
    // SAFETY: a valid socket, option value pointer and length.
    let forced = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    };
    if !forced {
        let _ = s.set_send_buffer_size(SHARED_SNDBUF);
    }
    Ok(())
}

/// Every data path, simplest first.
pub const NAMES: &[&str] = &[
    "read-send",
    "read-writev",
    "mmap-writev",
    "sendfile-cork",
    "sendmmsg",
    "gso",
    "gso-zerocopy",
    "uring",
    "uring-zc",
];

/// A fresh instance of the path called `name`.
pub fn by_name(name: &str) -> Option<Box<dyn DataPath>> {
    Some(match name {
        "read-send" => Box::new(ReadSend::default()),
        "read-writev" => Box::new(ReadWritev::default()),
        "mmap-writev" => Box::new(MmapWritev::default()),
        "sendfile-cork" => Box::new(SendfileCork::default()),
        "sendmmsg" => Box::new(Sendmmsg::default()),
        "gso" => Box::new(Gso::default()),
        "gso-zerocopy" => Box::new(GsoZerocopy::default()),
        "uring" => Box::new(Uring::new(false)),
        "uring-zc" => Box::new(Uring::new(true)),
        _ => return None,
    })
}

/// The path to use for a configured name: `auto` picks the best this kernel
/// supports: `gso`, else `mmap-writev`. Measured here (6.18, 1316-byte
/// payloads, 16 sessions × 48-packet bursts into the veth sink): `gso`
/// ≈ 330 ns/packet, `uring` the same within noise, `gso-zerocopy` ≈ 650
/// and `uring-zc` ≈ 480 (a zero-copy send holds only ~7 packets: the
/// kernel's 17-fragment limit, see `gso_zerocopy`), `mmap-writev` ≈ 1570.
pub fn resolve(name: &str) -> io::Result<&'static str> {
    if name == "auto" {
        return Ok(if gso::supported() {
            "gso"
        } else {
            "mmap-writev"
        });
    }
    NAMES.iter().copied().find(|n| *n == name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "unknown data path {name:?}; choose auto or one of {}",
                NAMES.join(", ")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::{io::Write, net::UdpSocket, os::fd::AsFd, time::Duration};

    use super::*;

    /// Paths this machine cannot run, named in `FJORD_TEST_SKIP_PATHS`
    /// (comma-separated); any other unsupported path fails the test.
    fn skipped(name: &str) -> bool {
        std::env::var("FJORD_TEST_SKIP_PATHS").is_ok_and(|v| v.split(',').any(|n| n.trim() == name))
    }

    /// A burst whose bytes vanished (its mapped file truncated underneath:
    /// EFAULT from the kernel, or a read or sendfile finding the file
    /// short) is FAULTED by every path, which goes on with the next bursts:
    /// they arrive intact.
    #[test]
    fn every_path_faults_a_vanished_burst_and_sends_the_others() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut good = tempfile::tempfile().unwrap();
        good.write_all(&data).unwrap();
        let mut gone = tempfile::tempfile().unwrap();
        gone.write_all(&data).unwrap();
        // SAFETY: never read in user space once truncated (only the kernel
        // is handed its pages, and answers EFAULT).
        let map = unsafe { memmap2::Mmap::map(&gone) }.unwrap();
        gone.set_len(0).unwrap();
        const N: usize = 3;
        const LEN: usize = 1316;
        let header = [0x80u8, 33, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        for name in NAMES {
            let rxs: Vec<UdpSocket> = (0..4)
                .map(|_| {
                    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
                    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    rx
                })
                .collect();
            let txs: Vec<Socket> = rxs
                .iter()
                .map(|rx| {
                    let tx = Socket::from(UdpSocket::bind("127.0.0.1:0").unwrap());
                    tx.connect(&rx.local_addr().unwrap().into()).unwrap();
                    tx
                })
                .collect();
            let mut batch = Batch::default();
            for (b, tx) in txs.iter().enumerate() {
                let first = batch.packets.len();
                for i in 0..N {
                    let at = 65_536 + 2 * LEN * i;
                    let (bytes, file) = if b % 2 == 0 {
                        (&map[..], gone.as_fd())
                    } else {
                        (&data[..], good.as_fd())
                    };
                    batch.packets.push(Packet::new(
                        &header,
                        &[],
                        &bytes[at..at + LEN],
                        file,
                        at as u64,
                    ));
                }
                batch.bursts.push(Burst {
                    socket: tx,
                    dest: rxs[b].local_addr().unwrap(),
                    shared: false,
                    packets: first..batch.packets.len(),
                });
            }
            let mut path = by_name(name).unwrap();
            let mut sent = vec![0; 4];
            match path.send(&batch, &mut sent) {
                Ok(()) => {}
                Err(e) if is_unsupported(&e) && skipped(name) => {
                    eprintln!("{name}: SKIPPED, unsupported here ({e})");
                    continue;
                }
                Err(e) => panic!("{name}: {e}"),
            }
            assert_eq!(sent, [FAULTED, N, FAULTED, N], "{name}");
            let mut buf = [0u8; 2048];
            for b in [1, 3] {
                for i in 0..N {
                    let n = rxs[b].recv(&mut buf).unwrap();
                    let at = 65_536 + 2 * LEN * i;
                    assert_eq!(n, RTP_HEADER_LEN + LEN, "{name}: burst {b}");
                    assert!(
                        buf[RTP_HEADER_LEN..n] == data[at..at + LEN],
                        "{name}: burst {b}"
                    );
                }
            }
        }
    }

    /// One test packet: `prefix` payload-header bytes, `len` file bytes,
    /// then (when `len2` > 0) `len2` more starting `skip` bytes later.
    #[derive(Clone, Copy)]
    struct Spec {
        prefix: usize,
        len: usize,
        skip: usize,
        len2: usize,
    }

    fn plain(len: usize) -> Spec {
        Spec {
            prefix: 0,
            len,
            skip: 0,
            len2: 0,
        }
    }

    /// `n` packets of `wire` bytes above UDP each, made of every mix of
    /// prefix (0 to 8 bytes) and one or two file runs.
    fn mixed(n: usize, wire: usize) -> Vec<Spec> {
        (0..n)
            .map(|i| {
                let prefix = i % (MAX_PREFIX + 1);
                let len2 = if i % 3 == 1 { 100 + i } else { 0 };
                Spec {
                    prefix,
                    len: wire - RTP_HEADER_LEN - prefix - len2,
                    skip: if len2 > 0 { 7 * i % 50 } else { 0 },
                    len2,
                }
            })
            .collect()
    }

    /// Every path delivers each packet as its own datagram, in order, bytes
    /// intact (head, payload-header bytes, first run, second run): bursts of
    /// unequal sizes, more than one GSO send per burst, packets of equal
    /// wire length but different make-up in one GSO send, and several
    /// sessions (sockets) in one batch, twice over (the second round reaps
    /// the first round's zero-copy completions).
    #[test]
    fn every_path_delivers_every_packet_intact() {
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..400_000u32).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all(&data).unwrap();
        // One burst per session.
        let bursts: Vec<Vec<Spec>> = vec![
            [vec![1316; 70], vec![500, 1316, 1316, 200], vec![1316; 3]]
                .concat()
                .into_iter()
                .map(plain)
                .collect(),
            mixed(40, RTP_HEADER_LEN + 1316),
            vec![Spec {
                prefix: MAX_PREFIX,
                len: 400,
                skip: 14,
                len2: 300,
            }],
            [mixed(20, 1000), mixed(20, 1400), mixed(5, 300)].concat(),
        ];
        let gso_sends = |specs: &[Spec]| {
            let heads = [[0u8; RTP_HEADER_LEN]; 1];
            let file = file.as_fd();
            let pkts: Vec<Packet<'_>> = specs
                .iter()
                .map(|s| {
                    Packet::new(
                        &heads[0],
                        &[0; MAX_PREFIX][..s.prefix],
                        &data[..s.len],
                        file,
                        0,
                    )
                    .with_second_run(&data[..s.len2], 0)
                })
                .collect();
            let mut sends = 0;
            let mut at = 0;
            while at < pkts.len() {
                at += gso::group_len(&pkts[at..]);
                sends += 1;
            }
            sends
        };
        assert_eq!(gso_sends(&bursts[1]), 1, "equal wire lengths: one GSO send");
        // Each session on its own connected socket, then all on one shared
        // unconnected socket (the paths that address each message).
        let modes = NAMES.iter().map(|n| (*n, false)).chain(
            NAMES
                .iter()
                .filter(|n| addresses_each_message(n))
                .map(|n| (*n, true)),
        );
        for (name, shared) in modes {
            let name = &name;
            let rxs: Vec<UdpSocket> = bursts
                .iter()
                .map(|_| {
                    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
                    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    socket2::SockRef::from(&rx)
                        .set_recv_buffer_size(4 << 20)
                        .unwrap();
                    rx
                })
                .collect();
            let one = Socket::from(UdpSocket::bind("127.0.0.1:0").unwrap());
            let txs: Vec<Socket> = rxs
                .iter()
                .map(|rx| {
                    let tx = Socket::from(UdpSocket::bind("127.0.0.1:0").unwrap());
                    tx.connect(&rx.local_addr().unwrap().into()).unwrap();
                    tx
                })
                .collect();
            let source = |b: usize| {
                if shared { &one } else { &txs[b] }
                    .local_addr()
                    .unwrap()
                    .as_socket()
                    .unwrap()
            };
            let mut path = by_name(name).unwrap();
            let mut total = 0u64;
            for round in 0..2u16 {
                let mut batch = Batch::default();
                // What each packet must arrive as, built from the file
                // independently of `Packet`.
                let mut expected: Vec<Vec<Vec<u8>>> = vec![];
                let mut offset = 0;
                for (b, specs) in bursts.iter().enumerate() {
                    let first = batch.packets.len();
                    let mut wire = vec![];
                    for (i, s) in specs.iter().enumerate() {
                        let mut header = [0u8; RTP_HEADER_LEN];
                        header[0] = 0x80;
                        header[1] = b as u8;
                        header[2..4].copy_from_slice(&(i as u16).to_be_bytes());
                        header[4..6].copy_from_slice(&round.to_be_bytes());
                        let prefix: Vec<u8> = (0..s.prefix).map(|k| 0xa0 + (i + k) as u8).collect();
                        let run1 = &data[offset..offset + s.len];
                        let offset2 = offset + s.len + s.skip;
                        let run2 = &data[offset2..offset2 + s.len2];
                        batch.packets.push(
                            Packet::new(&header, &prefix, run1, file.as_fd(), offset as u64)
                                .with_second_run(run2, offset2 as u64),
                        );
                        wire.push([&header[..], &prefix, run1, run2].concat());
                        offset = offset2 + s.len2;
                    }
                    expected.push(wire);
                    batch.bursts.push(Burst {
                        socket: if shared { &one } else { &txs[b] },
                        dest: rxs[b].local_addr().unwrap(),
                        shared,
                        packets: first..batch.packets.len(),
                    });
                }
                let mut sent = vec![0; bursts.len()];
                match path.send(&batch, &mut sent) {
                    Ok(()) => {}
                    Err(e) if is_unsupported(&e) && skipped(name) => {
                        eprintln!("{name}: SKIPPED, unsupported here ({e})");
                        break;
                    }
                    Err(e) => panic!(
                        "{name}: cannot run here ({e}); \
                         set FJORD_TEST_SKIP_PATHS={name} to skip it knowingly"
                    ),
                }
                let mut buf = [0u8; 70_000];
                for (b, rx) in rxs.iter().enumerate() {
                    assert_eq!(sent[b], bursts[b].len(), "{name}: burst {b} sent");
                    for (i, want) in expected[b].iter().enumerate() {
                        let (n, from) = rx
                            .recv_from(&mut buf)
                            .unwrap_or_else(|e| panic!("{name}: burst {b} packet {i}: {e}"));
                        assert_eq!(from, source(b), "{name} shared={shared}: source");
                        assert_eq!(
                            n,
                            want.len(),
                            "{name}: burst {b} packet {i}: one datagram per packet"
                        );
                        assert!(
                            buf[..n] == want[..],
                            "{name}: burst {b} packet {i}: bytes differ at {:?}",
                            (0..n).find(|&k| buf[k] != want[k])
                        );
                    }
                    total += bursts[b].len() as u64;
                }
                assert_eq!(path.counters().packets, total, "{name}");
            }
            let c = path.counters();
            if name.contains("zc") || name.contains("zerocopy") {
                assert!(
                    c.zerocopy_done > 0,
                    "{name}: no zero-copy completion: {c:?}"
                );
            }
            for rx in &rxs {
                rx.set_nonblocking(true).unwrap();
                assert!(rx.recv(&mut [0u8; 16]).is_err(), "{name}: extra datagram");
            }
        }
    }
}

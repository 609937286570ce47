//! How packets leave: the data path, behind one trait so every way of
//! sending (the seeds' per-packet paths, sendmmsg, UDP GSO, `MSG_ZEROCOPY`,
//! io_uring) plugs into the same engine and the same benchmark.
//!
//! Each engine tick gathers every packet due in all its sessions into one
//! [`Batch`]: bursts of consecutive packets per session, headers built, the
//! payloads by reference (into the mapped file, and as file + offset for the
//! paths that read or sendfile). A path sends what it can of each burst.

mod gso;
mod mmap_writev;

use std::{io, net::SocketAddr, ops::Range, os::fd::BorrowedFd};

use fjord_proto::rtp::RTP_HEADER_LEN;
use socket2::Socket;

pub use gso::Gso;
pub use mmap_writev::MmapWritev;

/// One RTP packet ready to leave.
#[derive(Clone, Copy)]
pub struct Packet<'a> {
    pub header: [u8; RTP_HEADER_LEN],
    /// The payload in the mapped media file.
    pub payload: &'a [u8],
    /// The media file and the payload's offset in it.
    pub file: BorrowedFd<'a>,
    pub offset: u64,
}

impl Packet<'_> {
    /// Bytes on the wire above UDP: header and payload.
    pub fn wire_len(&self) -> usize {
        RTP_HEADER_LEN + self.payload.len()
    }
}

/// Consecutive packets of one session due in this tick.
pub struct Burst<'a> {
    /// UDP socket connected to the client's RTP port.
    pub socket: &'a Socket,
    /// The client's RTP address (for paths sending from a shared socket).
    pub dest: SocketAddr,
    pub packets: Range<usize>,
}

/// Everything one tick sends. Reused from tick to tick: steady state
/// allocates nothing.
#[derive(Default)]
pub struct Batch<'a> {
    pub packets: Vec<Packet<'a>>,
    pub bursts: Vec<Burst<'a>>,
}

impl<'a> Batch<'a> {
    pub fn with_capacity(packets: usize, bursts: usize) -> Self {
        Self {
            packets: Vec::with_capacity(packets),
            bursts: Vec::with_capacity(bursts),
        }
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

    pub fn burst(&self, i: usize) -> &[Packet<'a>] {
        &self.packets[self.bursts[i].packets.clone()]
    }
}

/// What a path did, for the benchmark and for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub packets: u64,
    pub syscalls: u64,
    /// Payload bytes copied in user space (the read paths).
    pub user_copies: u64,
    /// Zero-copy sends the kernel completed by copying after all.
    pub zerocopy_copied: u64,
    pub zerocopy_done: u64,
}

pub trait DataPath: Send {
    fn name(&self) -> &'static str;

    /// Sends what it can of every burst of `batch`. `sent[i]` receives how
    /// many packets of burst `i` left (always a prefix; the rest wait for the
    /// next tick because the socket was full). A packet the network refused
    /// (e.g. ICMP port unreachable) counts as sent: UDP may lose it anyway.
    /// An error means the path itself does not work here (the engine then
    /// falls back to a simpler one).
    fn send(&mut self, batch: &Batch<'_>, sent: &mut [usize]) -> io::Result<()>;

    fn counters(&self) -> Counters;
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

/// Every data path, simplest first.
pub const NAMES: &[&str] = &["mmap-writev", "gso"];

/// A fresh instance of the path called `name`.
pub fn by_name(name: &str) -> Option<Box<dyn DataPath>> {
    Some(match name {
        "mmap-writev" => Box::new(MmapWritev::default()),
        "gso" => Box::new(Gso::default()),
        _ => return None,
    })
}

/// The path to use for a configured name: `auto` picks the best this kernel
/// supports.
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

    /// Every path delivers each packet as its own datagram, in order, bytes
    /// intact, including bursts of unequal sizes and more than one GSO send.
    #[test]
    fn every_path_delivers_every_packet_intact() {
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all(&data).unwrap();
        let sizes: Vec<usize> =
            [vec![1316; 70], vec![500, 1316, 1316, 200], vec![1316; 3]].concat();
        for name in NAMES {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            socket2::SockRef::from(&rx)
                .set_recv_buffer_size(4 << 20)
                .unwrap();
            let tx = socket2::Socket::from(UdpSocket::bind("127.0.0.1:0").unwrap());
            tx.connect(&rx.local_addr().unwrap().into()).unwrap();
            let mut batch = Batch::default();
            let mut offset = 0;
            for (i, &len) in sizes.iter().enumerate() {
                let mut header = [0u8; RTP_HEADER_LEN];
                header[0] = 0x80;
                header[2..4].copy_from_slice(&(i as u16).to_be_bytes());
                batch.packets.push(Packet {
                    header,
                    payload: &data[offset..offset + len],
                    file: file.as_fd(),
                    offset: offset as u64,
                });
                offset += len;
            }
            batch.bursts.push(Burst {
                socket: &tx,
                dest: rx.local_addr().unwrap(),
                packets: 0..sizes.len(),
            });
            let mut path = by_name(name).unwrap();
            let mut sent = vec![0];
            path.send(&batch, &mut sent).unwrap();
            assert_eq!(sent[0], sizes.len(), "{name}");
            let mut buf = [0u8; 2048];
            for (i, p) in batch.packets.iter().enumerate() {
                let n = rx.recv(&mut buf).unwrap();
                assert_eq!(
                    &buf[..RTP_HEADER_LEN],
                    &p.header,
                    "{name}: packet {i} header"
                );
                assert_eq!(
                    &buf[RTP_HEADER_LEN..n],
                    p.payload,
                    "{name}: packet {i} payload"
                );
            }
            assert_eq!(path.counters().packets, sizes.len() as u64, "{name}");
        }
    }
}

//! The floor of a data path: the same kernel path with no server logic.
//! Packets are prebuilt (header and payload contiguous in one user buffer)
//! and sent by the plainest call of the path's kind, as many as the path
//! sent, in the same shape (a burst per session per tick):
//!
//! | floor | call | used for |
//! |---|---|---|
//! | `send` | one `send` of a prebuilt packet | read-send, read-writev, mmap-writev, sendfile-cork, other per-packet paths |
//! | `sendmmsg` | one `sendmmsg` of the tick's prebuilt packets (one socket, an address per message) | sendmmsg |
//! | `gso` | one `sendmsg` per burst of a contiguous prebuilt buffer with `UDP_SEGMENT` | gso, uring |
//! | `gso-zerocopy` | the same with `MSG_ZEROCOPY`, completions drained each tick | gso-zerocopy |
//! | `gso-iov` | one `sendmsg` per burst with `UDP_SEGMENT` of [prebuilt header, payload in the mapped file] iovecs: the gso paths' kernel call in their shape, without the server | (shown beside `gso`) |
//!
//! `gso-iov` separates what the gso paths cost above `gso` into the
//! kernel's share (gathering two iovecs per packet instead of one buffer)
//! and the server's (everything else).
//!
//! The prebuilt packets are a ring of at most [`RING_BYTES`] copied from the
//! file, sent round and round: payload bytes are as cold as a working set of
//! that size makes them.

use std::{
    io,
    mem::{self, MaybeUninit},
    os::fd::AsRawFd,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use fjord_engine::datapath::cmsg::{
    MAX_SEGMENTED_BYTES, MAX_SEGMENTS, read_completion, send_segmented,
};
use fjord_proto::rtp::{RTP_HEADER_LEN, write_header};
use socket2::{SockAddr, Socket};

use crate::{
    cpu::ThreadCpu,
    workload::{MediaFile, PT, Sample, Sessions, packet_count},
};

/// Largest ring of prebuilt packets.
pub const RING_BYTES: usize = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FloorKind {
    Send,
    Sendmmsg,
    Gso,
    GsoZerocopy,
    GsoIov,
}

impl FloorKind {
    pub const ALL: [FloorKind; 5] = [
        Self::Send,
        Self::Sendmmsg,
        Self::Gso,
        Self::GsoZerocopy,
        Self::GsoIov,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Send => "floor:send",
            Self::Sendmmsg => "floor:sendmmsg",
            Self::Gso => "floor:gso",
            Self::GsoZerocopy => "floor:gso-zerocopy",
            Self::GsoIov => "floor:gso-iov",
        }
    }

    /// Payload copies per packet the CPU makes (before completions say
    /// otherwise for zero-copy).
    pub fn copies(self) -> f64 {
        match self {
            Self::GsoZerocopy => 0.0,
            _ => 1.0,
        }
    }
}

/// The floor a data path is compared with, by its name.
pub fn floor_of(path: &str) -> FloorKind {
    if path.contains("zerocopy") || path.ends_with("-zc") {
        FloorKind::GsoZerocopy
    } else if path.contains("gso") || path.contains("uring") {
        FloorKind::Gso
    } else if path.contains("mmsg") {
        FloorKind::Sendmmsg
    } else {
        FloorKind::Send
    }
}

/// Sends `packet_count(media.len(), size)` prebuilt packets the `kind` way.
pub fn run(
    kind: FloorKind,
    media: &MediaFile,
    size: usize,
    sessions: &Sessions,
    shared: &Socket,
    burst: usize,
) -> anyhow::Result<Sample> {
    let total = packet_count(media.len(), size) as usize;
    let n_sessions = sessions.sockets.len();
    let pkt = RTP_HEADER_LEN + size;
    let tick = n_sessions * burst;
    // Whole ticks, at least one, within RING_BYTES (or the file).
    let ticks = (RING_BYTES.min(media.len().max(pkt * tick)) / (pkt * tick)).max(1);
    let ring_pkts = ticks * tick;
    let mut ring = vec![0u8; ring_pkts * pkt];
    for (r, slot) in ring.chunks_exact_mut(pkt).enumerate() {
        let (h, p) = slot.split_at_mut(RTP_HEADER_LEN);
        let h: &mut [u8; RTP_HEADER_LEN] = h.try_into().unwrap();
        let s = (r % tick) / burst;
        write_header(
            h,
            PT,
            false,
            r as u16,
            r as u32 * 90,
            0x464a_0000 + s as u32,
        );
        let off = (r * size) % media.len().saturating_sub(size).max(1);
        let src = &media.map[off..(off + size).min(media.len())];
        p[..src.len()].copy_from_slice(src);
    }
    if kind == FloorKind::GsoZerocopy {
        for s in &sessions.sockets {
            set_zerocopy(s).context("SO_ZEROCOPY")?;
        }
    }
    // The headers of the ring's first tick, for the gso-iov floor.
    let heads: Vec<[u8; RTP_HEADER_LEN]> = ring
        .chunks_exact(pkt)
        .take(tick)
        .map(|p| p[..RTP_HEADER_LEN].try_into().unwrap())
        .collect();
    let mmsg = if kind == FloorKind::Sendmmsg {
        Some(Mmsg::new(&ring, pkt, tick, burst, &sessions.dests))
    } else {
        None
    };
    let mut zc = (0u64, 0u64);
    let mut syscalls = 0u64;
    let cpu0 = ThreadCpu::now();
    let t0 = Instant::now();
    let mut done = 0usize;
    let mut slot = 0usize; // ring index of the tick's first packet
    while done < total {
        let this = tick.min(total - done);
        match kind {
            FloorKind::Send => {
                for i in 0..this {
                    let fd = sessions.sockets[i / burst].as_raw_fd();
                    let p = &ring[(slot + i) * pkt..(slot + i + 1) * pkt];
                    syscalls += 1;
                    // SAFETY: a valid buffer of p.len() bytes.
                    let r =
                        unsafe { libc::send(fd, p.as_ptr().cast(), p.len(), libc::MSG_NOSIGNAL) };
                    if r < 0 {
                        check(io::Error::last_os_error())?;
                    }
                }
            }
            FloorKind::Sendmmsg => {
                let m = mmsg.as_ref().unwrap();
                let mut at = 0;
                while at < this {
                    syscalls += 1;
                    match m.send(shared.as_raw_fd(), slot + at, this - at) {
                        Ok(n) => at += n,
                        Err(e) => {
                            check(e)?;
                            at += 1;
                        }
                    }
                }
            }
            FloorKind::GsoIov => {
                let group = MAX_SEGMENTS.min(MAX_SEGMENTED_BYTES / pkt).max(1);
                let mut iov = [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; 2 * MAX_SEGMENTS];
                let mut i = 0;
                while i < this {
                    let s = i / burst;
                    let burst_end = ((s + 1) * burst).min(this);
                    let n = group.min(burst_end - i);
                    for (j, pair) in iov[..2 * n].chunks_exact_mut(2).enumerate() {
                        // A prebuilt header (one tick's worth, hot as the
                        // path's are); the payload where the path finds it:
                        // packet `done + i + j` of the file.
                        let head = &heads[i + j];
                        let off = (done + i + j) * size;
                        let payload = &media.map[off..(off + size).min(media.len())];
                        pair[0] = iovec(head);
                        pair[1] = iovec(payload);
                    }
                    syscalls += 1;
                    if let Err(e) = send_segmented(
                        sessions.sockets[s].as_raw_fd(),
                        &iov[..2 * n],
                        pkt as u16,
                        0,
                    ) {
                        check(e)?;
                    }
                    i += n;
                }
            }
            FloorKind::Gso | FloorKind::GsoZerocopy => {
                let flags = if kind == FloorKind::GsoZerocopy {
                    libc::MSG_ZEROCOPY
                } else {
                    0
                };
                let group = MAX_SEGMENTS.min(MAX_SEGMENTED_BYTES / pkt).max(1);
                let mut i = 0;
                while i < this {
                    let s = i / burst;
                    let burst_end = ((s + 1) * burst).min(this);
                    let n = group.min(burst_end - i);
                    let buf = &ring[(slot + i) * pkt..(slot + i + n) * pkt];
                    let fd = sessions.sockets[s].as_raw_fd();
                    let mut tries = 0;
                    loop {
                        syscalls += 1;
                        match send_segmented(fd, &[iovec(buf)], pkt as u16, flags) {
                            Ok(()) => break,
                            Err(e)
                                if flags != 0
                                    && e.raw_os_error() == Some(libc::ENOBUFS)
                                    && tries < 1000 =>
                            {
                                // Out of option memory for notifications:
                                // collect them and try again.
                                tries += 1;
                                for s in &sessions.sockets {
                                    add(&mut zc, drain_zerocopy(s.as_raw_fd()));
                                }
                                std::thread::yield_now();
                            }
                            Err(e) => {
                                check(e)?;
                                break;
                            }
                        }
                    }
                    i += n;
                }
                if flags != 0 {
                    for s in &sessions.sockets {
                        add(&mut zc, drain_zerocopy(s.as_raw_fd()));
                    }
                }
            }
        }
        done += this;
        slot = (slot + tick) % ring_pkts;
    }
    if kind == FloorKind::GsoZerocopy {
        // The ring must outlive the sends: wait for the last completions.
        let deadline = Instant::now() + Duration::from_secs(2);
        while zc.0 < syscalls && Instant::now() < deadline {
            for s in &sessions.sockets {
                add(&mut zc, drain_zerocopy(s.as_raw_fd()));
            }
            std::thread::yield_now();
        }
    }
    let wall = t0.elapsed();
    let cpu = ThreadCpu::now().since(cpu0);
    Ok(Sample {
        packets: total as u64,
        cpu,
        wall,
        syscalls,
        zerocopy_done: zc.0,
        zerocopy_copied: zc.1,
    })
}

fn add(acc: &mut (u64, u64), x: (u64, u64)) {
    acc.0 += x.0;
    acc.1 += x.1;
}

/// Errors that lose a packet but are no failure of the floor.
fn check(e: io::Error) -> anyhow::Result<()> {
    match e.raw_os_error() {
        Some(
            libc::ENOBUFS
            | libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EAGAIN,
        ) => Ok(()),
        _ => bail!(e),
    }
}

fn set_zerocopy(s: &Socket) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: a valid socket and option value.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn iovec(bytes: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }
}

/// Reads every zero-copy completion queued on `fd`: (sends completed, of
/// which the kernel copied).
pub fn drain_zerocopy(fd: libc::c_int) -> (u64, u64) {
    let (mut done, mut copied) = (0u64, 0u64);
    while let Ok(Some(c)) = read_completion(fd) {
        done += c.sends();
        if c.copied {
            copied += c.sends();
        }
    }
    (done, copied)
}

/// Prebuilt `mmsghdr`s over the ring, message `r` addressed to its
/// session's destination.
struct Mmsg {
    _addrs: Vec<SockAddr>,
    _iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Mmsg {
    fn new(
        ring: &[u8],
        pkt: usize,
        tick: usize,
        burst: usize,
        dests: &[std::net::SocketAddr],
    ) -> Self {
        let addrs: Vec<SockAddr> = dests.iter().map(|d| SockAddr::from(*d)).collect();
        let mut iovs: Vec<libc::iovec> = ring
            .chunks_exact(pkt)
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let msgs = iovs
            .iter_mut()
            .enumerate()
            .map(|(r, iov)| {
                let a = &addrs[(r % tick) / burst];
                // SAFETY: all-zero is a valid mmsghdr.
                let mut m: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
                m.msg_hdr.msg_name = a.as_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_namelen = a.len();
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        Self {
            _addrs: addrs,
            _iovs: iovs,
            msgs,
        }
    }

    /// `sendmmsg` of messages `from..from + n` (at most 1024).
    fn send(&self, fd: libc::c_int, from: usize, n: usize) -> io::Result<usize> {
        let n = n.min(1024);
        // SAFETY: the messages point at the ring, addresses and iovecs,
        // all alive in `self` or the caller; sendmmsg writes only msg_len.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.msgs[from..from + n].as_ptr() as *mut libc::mmsghdr,
                n as libc::c_uint,
                libc::MSG_NOSIGNAL,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_by_path_name() {
        assert_eq!(floor_of("read-send"), FloorKind::Send);
        assert_eq!(floor_of("read-writev"), FloorKind::Send);
        assert_eq!(floor_of("mmap-writev"), FloorKind::Send);
        assert_eq!(floor_of("sendfile-cork"), FloorKind::Send);
        assert_eq!(floor_of("sendmmsg"), FloorKind::Sendmmsg);
        assert_eq!(floor_of("gso"), FloorKind::Gso);
        assert_eq!(floor_of("gso-zerocopy"), FloorKind::GsoZerocopy);
        assert_eq!(floor_of("uring"), FloorKind::Gso);
        assert!(FloorKind::ALL.contains(&FloorKind::GsoIov));
    }
}

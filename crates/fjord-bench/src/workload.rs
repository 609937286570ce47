//! The streaming workload: a cached file sliced into RTP packets of one
//! payload size, sent by a data path in the engine's shape (a burst per
//! session per tick, every session's burst in one [`Batch`]) until the whole
//! file has gone. Paths that send prefabricated packets get them from a
//! [`PacketFile`], as the engine gets them from a title's packet file.

use std::{
    fs::File,
    io::{self, Read, Seek, Write},
    ops::Range,
    os::fd::AsFd,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use fjord_engine::datapath::{Batch, Burst, DataPath, Packet};
use fjord_proto::rtp::{RTP_HEADER_LEN, write_header};
use memmap2::Mmap;
use socket2::Socket;

use crate::{cpu::ThreadCpu, stats::SplitMix64};

/// RTP payload type of the bench's packets (MP2T).
pub const PT: u8 = 33;

/// A temporary file of random bytes, mapped and read once so it is in the
/// page cache.
pub struct MediaFile {
    pub file: File,
    pub map: Mmap,
}

impl MediaFile {
    /// Writes `bytes` of random data to a temporary file in `dir` (the
    /// system's temporary directory when `None`), then reads it through once.
    pub fn create(bytes: u64, dir: Option<&Path>) -> io::Result<Self> {
        let mut file = match dir {
            Some(d) => tempfile::tempfile_in(d)?,
            None => tempfile::tempfile()?,
        };
        let mut rng = SplitMix64(0xf10d_da7a);
        let mut chunk = vec![0u8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            for w in chunk.chunks_exact_mut(8) {
                w.copy_from_slice(&rng.next_u64().to_le_bytes());
            }
            let n = left.min(chunk.len() as u64) as usize;
            file.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        file.flush()?;
        file.rewind()?;
        // Read it once: the page cache holds it from here on.
        let mut sink = vec![0u8; 1 << 20];
        while file.read(&mut sink)? > 0 {}
        // SAFETY: the file is ours (an unlinked temporary) and never
        // truncated while mapped.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Self { file, map })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The media file's packets of one payload size prefabricated as ingest
/// writes them: each slice behind its RTP header, back to back, cached.
pub struct PacketFile {
    file: File,
    map: Mmap,
    size: usize,
}

impl PacketFile {
    pub fn create(media: &MediaFile, size: usize, dir: Option<&Path>) -> io::Result<Self> {
        let file = match dir {
            Some(d) => tempfile::tempfile_in(d)?,
            None => tempfile::tempfile()?,
        };
        let mut out = io::BufWriter::with_capacity(1 << 20, &file);
        for (i, r) in packet_ranges(media.len(), size).enumerate() {
            out.write_all(&header(i as u16, 0))?;
            out.write_all(&media.map[r])?;
        }
        out.flush()?;
        drop(out);
        // SAFETY: the file is ours (an unlinked temporary) and never
        // truncated while mapped.
        let map = unsafe { Mmap::map(&file)? };
        // Touch every page: the page cache holds it from here on.
        let _ = map.iter().step_by(4096).fold(0u8, |a, &b| a ^ b);
        Ok(Self { file, map, size })
    }

    /// Packet `i` with its header, as a session would send it.
    fn packet(&self, i: usize) -> Packet<'_> {
        let start = i * (RTP_HEADER_LEN + self.size);
        let end = (start + RTP_HEADER_LEN + self.size).min(self.map.len());
        Packet::prefabricated(&self.map[start..end], self.file.as_fd(), start as u64)
    }
}

/// The header of the bench's packet with sequence number `seq` of session `s`.
fn header(seq: u16, s: usize) -> [u8; RTP_HEADER_LEN] {
    let mut h = [0u8; RTP_HEADER_LEN];
    let ts = u32::from(seq).wrapping_mul(90);
    write_header(&mut h, PT, false, seq, ts, 0x464a_0000 + s as u32);
    h
}

/// Number of packets of `size` payload bytes a file of `len` bytes makes
/// (the last one shorter).
pub fn packet_count(len: usize, size: usize) -> u64 {
    len.div_ceil(size) as u64
}

/// Payload byte ranges of the packets of `size` bytes of a file of `len`.
pub fn packet_ranges(len: usize, size: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len)
        .step_by(size.max(1))
        .map(move |start| start..(start + size).min(len))
}

/// What one run (a path or a floor, one size, one repetition) did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub packets: u64,
    pub cpu: ThreadCpu,
    pub wall: Duration,
    pub syscalls: u64,
    pub zerocopy_done: u64,
    pub zerocopy_copied: u64,
}

impl Sample {
    pub fn ns_per_packet(&self) -> f64 {
        self.cpu.total().as_nanos() as f64 / self.packets.max(1) as f64
    }
    pub fn user_ns_per_packet(&self) -> f64 {
        self.cpu.user.as_nanos() as f64 / self.packets.max(1) as f64
    }
    pub fn sys_ns_per_packet(&self) -> f64 {
        self.cpu.sys.as_nanos() as f64 / self.packets.max(1) as f64
    }
    pub fn syscalls_per_packet(&self) -> f64 {
        self.syscalls as f64 / self.packets.max(1) as f64
    }
}

/// The sessions of a run: a connected UDP socket each and where it sends.
pub struct Sessions {
    pub sockets: Vec<Socket>,
    pub dests: Vec<std::net::SocketAddr>,
}

/// Streams the whole of `media` through `path` in packets of `size` payload
/// bytes: per tick one burst of up to `burst` packets per session, from
/// `packets` when given and the path sends prefabricated packets, else
/// with headers built as the engine builds them; unsent remainders sent
/// again until every packet has left. Sessions send from their own
/// connected sockets, or all from `shared` (unconnected, each message
/// naming its session's destination) when given. Measures the calling
/// thread's CPU.
pub fn stream(
    path: &mut dyn DataPath,
    media: &MediaFile,
    packets: Option<&PacketFile>,
    size: usize,
    sessions: &Sessions,
    shared: Option<&Socket>,
    burst: usize,
) -> anyhow::Result<Sample> {
    let packets = packets.filter(|p| p.size == size && path.prefabricated());
    let n_sessions = sessions.sockets.len();
    let len = media.len();
    let data: &[u8] = &media.map;
    let fd = media.file.as_fd();
    let mut batch: Batch<'_> = Batch::with_capacity(n_sessions * burst, n_sessions);
    let mut sent = vec![0usize; n_sessions];
    let mut seq: Vec<u16> = (0..n_sessions).map(|s| (s as u16) * 1000).collect();
    let before = path.counters();
    let cpu0 = ThreadCpu::now();
    let t0 = Instant::now();
    let mut off = 0usize;
    let mut delivered = 0u64;
    while off < len {
        batch.packets.clear();
        batch.bursts.clear();
        for (s, next_seq) in seq.iter_mut().enumerate() {
            if off >= len {
                break;
            }
            let first = batch.packets.len();
            for _ in 0..burst {
                if off >= len {
                    break;
                }
                let end = (off + size).min(len);
                let packet = match packets {
                    Some(p) => p.packet(off / size),
                    None => {
                        let q = *next_seq;
                        *next_seq = q.wrapping_add(1);
                        Packet::new(&header(q, s), &[], &data[off..end], fd, off as u64)
                    }
                };
                batch.packets.push(packet);
                off = end;
            }
            batch.bursts.push(Burst {
                socket: shared.unwrap_or(&sessions.sockets[s]),
                dest: sessions.dests[s],
                shared: shared.is_some(),
                packets: first..batch.packets.len(),
            });
        }
        let mut stalls = 0u32;
        while !batch.bursts.is_empty() {
            let nb = batch.bursts.len();
            sent[..nb].fill(0);
            path.send(&batch, &mut sent[..nb])
                .with_context(|| format!("{} failed", path.name()))?;
            let mut k = 0;
            let mut progress = 0;
            batch.bursts.retain_mut(|b| {
                let s = sent[k].min(b.packets.len());
                k += 1;
                progress += s;
                b.packets.start += s;
                !b.packets.is_empty()
            });
            delivered += progress as u64;
            if progress == 0 {
                stalls += 1;
                if stalls > 10_000 {
                    bail!("{} makes no progress", path.name());
                }
                std::thread::yield_now();
            } else {
                stalls = 0;
            }
        }
    }
    let wall = t0.elapsed();
    let cpu = ThreadCpu::now().since(cpu0);
    let after = path.counters();
    let expected = packet_count(len, size);
    if delivered != expected || after.packets - before.packets != expected {
        bail!(
            "{}: {} packets delivered, path counted {}, file has {}",
            path.name(),
            delivered,
            after.packets - before.packets,
            expected
        );
    }
    Ok(Sample {
        packets: delivered,
        cpu,
        wall,
        syscalls: after.syscalls - before.syscalls,
        zerocopy_done: after.zerocopy_done - before.zerocopy_done,
        zerocopy_copied: after.zerocopy_copied - before.zerocopy_copied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slicing_covers_the_file_exactly() {
        for (len, size) in [
            (10_000, 1316),
            (2632, 1316),
            (1, 256),
            (0, 256),
            (1316, 1316),
        ] {
            let ranges: Vec<_> = packet_ranges(len, size).collect();
            assert_eq!(ranges.len() as u64, packet_count(len, size), "{len}/{size}");
            let mut at = 0;
            for (i, r) in ranges.iter().enumerate() {
                assert_eq!(r.start, at);
                assert!(r.len() <= size && !r.is_empty());
                if i + 1 < ranges.len() {
                    assert_eq!(r.len(), size, "only the last is short");
                }
                at = r.end;
            }
            assert_eq!(at, len);
        }
        assert_eq!(packet_count(10_000, 1316), 8);
        assert_eq!(packet_ranges(10_000, 1316).last(), Some(9212..10_000));
    }

    #[test]
    fn media_file_has_the_size_asked_for() {
        let m = MediaFile::create(3 * 1024 * 1024 + 5, None).unwrap();
        assert_eq!(m.len(), 3 * 1024 * 1024 + 5);
        // Random, not zeros.
        assert!(m.map[..4096].iter().filter(|&&b| b == 0).count() < 100);
    }
}

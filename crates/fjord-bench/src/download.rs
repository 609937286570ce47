//! The download experiment (the seeds' Fig. 3, Table 3): a whole file over
//! TCP with no per-packet headers, to a local receiver thread that reads and
//! discards. TCP cannot go into the `pfifo limit 0` sink (every segment
//! would be dropped), so this runs over loopback; receive-side softirq work
//! partly lands on the sender.
//!
//! | method | calls | payload copies |
//! |---|---|---|
//! | read-write | n `read` + n `write` of `size` bytes | 2 |
//! | mmap-write | n `write` of `size` bytes from the mapping | 1 |
//! | sendfile | n `sendfile` of `size` bytes | 0 |
//! | sendfile-whole | one `sendfile` for the whole file (repeated on short sends) | 0 |

use std::{
    io::{self, Read},
    net::{Shutdown, TcpListener, TcpStream},
    os::fd::AsRawFd,
    thread::JoinHandle,
    time::Instant,
};

use anyhow::{Context, bail};

use crate::{cpu::ThreadCpu, workload::MediaFile, workload::Sample};

pub const METHODS: &[&str] = &["read-write", "mmap-write", "sendfile", "sendfile-whole"];

/// Payload copies the CPU makes per byte sent.
pub fn copies(method: &str) -> f64 {
    match method {
        "read-write" => 2.0,
        "mmap-write" => 1.0,
        _ => 0.0,
    }
}

/// A loopback TCP connection whose far end reads and discards.
struct Receiver {
    stream: TcpStream,
    thread: JoinHandle<io::Result<u64>>,
}

fn connect() -> io::Result<Receiver> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let thread = std::thread::Builder::new()
        .name("bench-download-rx".into())
        .spawn(move || -> io::Result<u64> {
            let (mut s, _) = listener.accept()?;
            let mut buf = vec![0u8; 256 << 10];
            let mut got = 0u64;
            loop {
                match s.read(&mut buf)? {
                    0 => return Ok(got),
                    n => got += n as u64,
                }
            }
        })?;
    let stream = TcpStream::connect(addr)?;
    Ok(Receiver { stream, thread })
}

/// Sends the whole of `media` by `method` in `size`-byte operations
/// (`sendfile-whole` ignores `size`). `packets` in the sample counts bytes
/// here; `syscalls` the calls made.
pub fn run(method: &str, media: &MediaFile, size: usize) -> anyhow::Result<Sample> {
    let rx = connect().context("loopback TCP receiver")?;
    let fd = rx.stream.as_raw_fd();
    let file_fd = media.file.as_raw_fd();
    let len = media.len();
    let mut buf = vec![0u8; size];
    let mut syscalls = 0u64;
    let cpu0 = ThreadCpu::now();
    let t0 = Instant::now();
    match method {
        "read-write" => {
            let mut off = 0usize;
            while off < len {
                let n = size.min(len - off);
                syscalls += 1;
                // SAFETY: a valid buffer of at least n bytes.
                let r = unsafe { libc::pread(file_fd, buf.as_mut_ptr().cast(), n, off as i64) };
                if r <= 0 {
                    bail!("pread: {}", io::Error::last_os_error());
                }
                let r = r as usize;
                write_all(fd, &buf[..r], &mut syscalls)?;
                off += r;
            }
        }
        "mmap-write" => {
            for chunk in media.map.chunks(size) {
                write_all(fd, chunk, &mut syscalls)?;
            }
        }
        "sendfile" | "sendfile-whole" => {
            let step = if method == "sendfile" { size } else { len };
            let mut off: libc::off_t = 0;
            while (off as usize) < len {
                let n = step.min(len - off as usize);
                syscalls += 1;
                // SAFETY: valid descriptors and offset pointer.
                let r = unsafe { libc::sendfile(fd, file_fd, &mut off, n) };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        bail!("sendfile: {e}");
                    }
                }
            }
        }
        _ => bail!("unknown download method {method:?}"),
    }
    let cpu = ThreadCpu::now().since(cpu0);
    let wall = t0.elapsed();
    rx.stream.shutdown(Shutdown::Write)?;
    let got = rx
        .thread
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    if got != len as u64 {
        bail!("{method}: receiver got {got} of {len} bytes");
    }
    Ok(Sample {
        packets: len as u64,
        cpu,
        wall,
        syscalls,
        ..Sample::default()
    })
}

fn write_all(fd: libc::c_int, mut b: &[u8], syscalls: &mut u64) -> anyhow::Result<()> {
    while !b.is_empty() {
        *syscalls += 1;
        // SAFETY: a valid buffer.
        let r = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            bail!("write: {e}");
        }
        b = &b[r as usize..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_delivers_the_whole_file() {
        let media = MediaFile::create(1 << 20, None).unwrap();
        for m in METHODS {
            let s = run(m, &media, 4096).unwrap();
            assert_eq!(s.packets, 1 << 20, "{m}");
            assert!(s.syscalls >= 1, "{m}");
        }
    }
}

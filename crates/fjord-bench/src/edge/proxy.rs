//! A TCP forwarder that holds every segment it reads for a while before
//! passing it on, each way: the origin's round trip as a link has it
//! (this kernel has no `netem`). Each direction is a reader that stamps
//! what it reads and a writer that sends it when its time comes, so the
//! delay adds latency, not a limit on the rate.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running forwarder; stops accepting when dropped (connections in
/// flight end with their peers).
pub struct DelayProxy {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Forwards connections on a free loopback port to `to`, holding each
/// segment `hold` in each direction.
pub fn start(to: SocketAddr, hold: Duration) -> std::io::Result<DelayProxy> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            if stopped.load(Ordering::Relaxed) {
                break;
            }
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(to) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            for (from, into) in [(&client, &server), (&server, &client)] {
                if let (Ok(from), Ok(into)) = (from.try_clone(), into.try_clone()) {
                    pump(from, into, hold);
                }
            }
        }
    });
    Ok(DelayProxy { addr, stop })
}

/// Reader and writer threads for one direction.
fn pump(mut from: TcpStream, mut into: TcpStream, hold: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buf).unwrap_or(0);
            // An empty segment is the end.
            if tx.send((Instant::now() + hold, buf[..n].to_vec())).is_err() || n == 0 {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        for (due, bytes) in rx {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if bytes.is_empty() || into.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = into.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round trip through the forwarder takes at least two holds, and
    /// the bytes arrive whole and in order.
    #[test]
    fn a_round_trip_takes_two_holds_and_bytes_pass_whole() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0;
            while got < buf.len() {
                got += s.read(&mut buf[got..]).unwrap();
            }
            s.write_all(&buf).unwrap();
        });
        let proxy = start(to, Duration::from_millis(10)).unwrap();
        let mut c = TcpStream::connect(proxy.addr).unwrap();
        let sent: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        let t = Instant::now();
        c.write_all(&sent).unwrap();
        let mut back = vec![0u8; sent.len()];
        c.read_exact(&mut back).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "{:?}",
            t.elapsed()
        );
        assert!(back == sent);
    }
}

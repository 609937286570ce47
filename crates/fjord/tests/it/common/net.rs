//! Talking to a server by hand: free ports, raw requests on a connection
//! of their own, RTSP status lines; and a private network namespace for
//! multicast.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// A TCP port on loopback free now (for a listener the server opens).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Sends `bytes` on a fresh connection and reads what comes back until the
/// connection closes or `limit` passes. Returns the text and whether the
/// server closed the connection.
pub fn raw_exchange(addr: &str, bytes: &[u8], limit: Duration) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(bytes);
    read_until_close(&mut s, limit)
}

/// Reads until EOF or `limit`; (text, closed).
pub fn read_until_close(s: &mut TcpStream, limit: Duration) -> (String, bool) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return (String::from_utf8_lossy(&got).into_owned(), false);
        }
        s.set_read_timeout(Some(deadline - now)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&got).into_owned(), true);
            }
            Err(_) => {}
        }
    }
}

/// The value of `key` in a Transport header, if it has one.
pub fn transport_param<'a>(transport: &'a str, key: &str) -> Option<&'a str> {
    transport
        .split(';')
        .find_map(|p| p.trim().strip_prefix(key)?.strip_prefix('='))
}

/// The status code of the first response in `text`.
pub fn status_of(text: &str) -> Option<u16> {
    let line = text.lines().next()?;
    let mut parts = line.split_whitespace();
    if parts.next()? != "RTSP/1.0" {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Runs `f` on a thread of its own inside a new network namespace whose
/// only link, the loopback, carries multicast (239.0.0.0/8 is routed to
/// it): servers and clients `f` starts live there too, and nothing they
/// multicast can leave it. Needs root, as `make test` runs.
pub fn in_private_network<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        let joined = s
            .spawn(|| {
                // SAFETY: unshare(2) changes only this thread's namespace.
                let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "unshare -n: {}", std::io::Error::last_os_error());
                for args in [
                    &["link", "set", "lo", "up"][..],
                    &["link", "set", "lo", "multicast", "on"],
                    &["route", "add", "239.0.0.0/8", "dev", "lo"],
                ] {
                    let out = Command::new("ip").args(args).output().unwrap();
                    assert!(out.status.success(), "ip {args:?}: {out:?}");
                }
                f()
            })
            .join();
        joined.unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// What a player of `url`'s first track over UDP receives: SETUP and PLAY,
/// then packets until `quiet` passes without one (or `limit`).
pub fn view_udp(url: &str, quiet: Duration, limit: Duration) -> fjord_client::Capture {
    let mut c = fjord_client::RtspClient::connect(url).unwrap();
    let d = c.describe().unwrap();
    let (_, mut rx) = c.setup_udp(&d.track_urls[0]).unwrap();
    c.play(None).unwrap();
    fjord_client::capture(&mut rx, quiet, limit, None).unwrap()
}

//! One session's RTSP connection, nonblocking: requests written (with a
//! queue for what the socket does not take at once), and the byte stream
//! split into responses and interleaved `$` frames without copying frames.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use crate::Response;

/// A piece of the server's byte stream.
#[derive(Debug)]
pub enum Item<'a> {
    /// An interleaved frame: channel and data.
    Frame(u8, &'a [u8]),
    /// An RTSP response.
    Response(Response),
}

/// Splits `buf` into items, handing each to `on_item`; returns how many bytes
/// were used (the rest is an incomplete item), or an error for bytes that are
/// neither a frame nor a response.
pub fn parse_stream(buf: &[u8], mut on_item: impl FnMut(Item<'_>)) -> Result<usize, String> {
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        match rest[0] {
            b'$' => {
                if rest.len() < 4 {
                    break;
                }
                let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
                if rest.len() < 4 + len {
                    break;
                }
                on_item(Item::Frame(rest[1], &rest[4..4 + len]));
                pos += 4 + len;
            }
            b'\r' | b'\n' => pos += 1,
            _ => match rtsp_types::Message::<Vec<u8>>::parse(rest) {
                Ok((rtsp_types::Message::Response(r), n)) => {
                    on_item(Item::Response(Response::from(&r)));
                    pos += n;
                }
                // Requests from the server are not answered by a load generator.
                Ok((_, n)) => pos += n,
                Err(rtsp_types::ParseError::Incomplete(_)) => break,
                Err(rtsp_types::ParseError::Error) => {
                    let shown = String::from_utf8_lossy(&rest[..rest.len().min(60)]).into_owned();
                    return Err(format!("unparsable bytes from the server: {shown:?}"));
                }
            },
        }
    }
    Ok(pos)
}

/// What a request was, to route its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Setup,
    /// SETUP of the source track's repair stream (`--fec`).
    SetupRepair,
    Play,
    Replay,
    Teardown,
}

/// A nonblocking RTSP connection.
pub struct Control {
    pub stream: TcpStream,
    /// Bytes of an incomplete item carried to the next read.
    pub carry: Vec<u8>,
    out: Vec<u8>,
    cseq: u32,
    pending: VecDeque<(u32, Request)>,
    /// `Session` header value once SETUP succeeded.
    pub session: Option<String>,
    user_agent: &'static str,
    /// `rtsps://`: the TLS state every byte goes through (after the
    /// handshake, [`Control::start_tls`]).
    tls: Option<Box<rustls::ClientConnection>>,
}

impl Control {
    pub fn new(stream: TcpStream) -> Control {
        Control {
            stream,
            carry: Vec::with_capacity(4096),
            out: Vec::new(),
            cseq: 0,
            pending: VecDeque::with_capacity(4),
            session: None,
            user_agent: concat!("fjord-load/", env!("CARGO_PKG_VERSION")),
            tls: None,
        }
    }

    /// The TLS handshake, blocking (on loopback, a millisecond or so), on
    /// the connected socket; it is non-blocking again after.
    pub fn start_tls(&mut self, host: &str) -> io::Result<()> {
        let timeout = std::time::Duration::from_secs(10);
        let c = crate::tls::handshake(&mut self.stream, host, timeout)?;
        self.stream.set_nonblocking(true)?;
        self.tls = Some(Box::new(c));
        Ok(())
    }

    /// Reads what arrived into `buf` (decrypted over TLS): `Ok(None)` when
    /// nothing did, `Ok(Some(0))` when the server closed.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match &mut self.tls {
            Some(c) => crate::tls::read_nonblocking(c, &mut self.stream, buf),
            None => super::sys::read_some(self.stream.as_raw_fd(), buf),
        }
    }

    /// Whether bytes wait for the socket to become writable.
    pub fn wants_write(&self) -> bool {
        !self.out.is_empty() || self.tls.as_ref().is_some_and(|c| c.wants_write())
    }

    /// Queues a request and writes what the socket takes.
    pub fn request(
        &mut self,
        kind: Request,
        method: &str,
        uri: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<()> {
        self.cseq += 1;
        let mut msg = format!(
            "{method} {uri} RTSP/1.0\r\nCSeq: {}\r\nUser-Agent: {}\r\n",
            self.cseq, self.user_agent
        );
        if let Some(s) = &self.session {
            msg.push_str(&format!("Session: {s}\r\n"));
        }
        for (n, v) in extra {
            msg.push_str(&format!("{n}: {v}\r\n"));
        }
        msg.push_str("\r\n");
        self.pending.push_back((self.cseq, kind));
        self.send(msg.as_bytes())
    }

    /// Writes raw bytes (an interleaved RTCP frame), queueing what does not fit.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Some(c) = &mut self.tls {
            return crate::tls::write_nonblocking(c, &mut self.stream, bytes);
        }
        if self.out.is_empty() {
            let n = match self.stream.write(bytes) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => return Err(e),
            };
            self.out.extend_from_slice(&bytes[n..]);
        } else {
            self.out.extend_from_slice(bytes);
        }
        Ok(())
    }

    /// Writes queued bytes; true when the queue is empty.
    pub fn flush(&mut self) -> io::Result<bool> {
        if let Some(c) = &mut self.tls {
            return crate::tls::flush_nonblocking(c, &mut self.stream);
        }
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Which request `r` answers (by CSeq; else the oldest pending).
    pub fn answered(&mut self, r: &Response) -> Option<Request> {
        if let Some(cseq) = r.cseq()
            && let Some(i) = self.pending.iter().position(|(c, _)| *c == cseq)
        {
            return self.pending.remove(i).map(|(_, k)| k);
        }
        self.pending.pop_front().map(|(_, k)| k)
    }

    /// Whether a request of `kind` awaits its response.
    pub fn awaiting(&self, kind: Request) -> bool {
        self.pending.iter().any(|(_, k)| *k == kind)
    }
}

/// The `Session` id of a SETUP reply (without `;timeout=`).
pub fn session_id(r: &Response) -> Option<String> {
    let v = r.header("Session")?;
    let id = v.split(';').next()?.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// A `key=value` parameter of a `Transport` header.
pub fn transport_param<'a>(transport: &'a str, key: &str) -> Option<&'a str> {
    transport.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim().eq_ignore_ascii_case(key).then_some(v.trim())
    })
}

/// `a-b` as two numbers.
pub fn pair<T: std::str::FromStr>(v: &str) -> Option<(T, T)> {
    let (a, b) = v.split_once('-')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_and_responses_and_keeps_partials() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"RTSP/1.0 200 OK\r\nCSeq: 2\r\nSession: AB;timeout=60\r\n\r\n");
        bytes.extend_from_slice(&[b'$', 0, 0, 3, 1, 2, 3]);
        bytes.extend_from_slice(&[b'$', 1, 0, 1, 9]);
        bytes.extend_from_slice(
            b"RTSP/1.0 454 Session Not Found\r\nCSeq: 3\r\nContent-Length: 2\r\n\r\nhi",
        );
        bytes.extend_from_slice(&[b'$', 0, 0, 5, 1, 2]);
        let mut items = Vec::new();
        let used = parse_stream(&bytes, |i| {
            items.push(match i {
                Item::Frame(c, d) => format!("frame {c} {d:?}"),
                Item::Response(r) => format!("{} {:?} {:?}", r.status, r.cseq(), session_id(&r)),
            })
        })
        .unwrap();
        assert_eq!(
            items,
            [
                "200 Some(2) Some(\"AB\")",
                "frame 0 [1, 2, 3]",
                "frame 1 [9]",
                "454 Some(3) None",
            ]
        );
        assert_eq!(used, bytes.len() - 6, "the partial frame stays");
        assert_eq!(parse_stream(b"RTSP/1.0 200", |_| panic!()).unwrap(), 0);
        assert!(parse_stream(b"\x00\x01garbage\r\n\r\n", |_| {}).is_err());
    }

    #[test]
    fn transport_parameters() {
        let t = "RTP/AVP;unicast;client_port=5000-5001;server_port=40000-40001;ssrc=0A0B0C0D";
        assert_eq!(
            transport_param(t, "server_port").and_then(pair::<u16>),
            Some((40000, 40001))
        );
        assert_eq!(transport_param(t, "ssrc"), Some("0A0B0C0D"));
        assert_eq!(transport_param(t, "interleaved"), None);
    }
}

//! The RTSP/1.0 control connection.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::capture::PacketSource;
use crate::rtcp::{RtcpReceived, parse_rtcp_compound};
use crate::rtp::parse_rtp;
use crate::udp::UdpReceiver;
use crate::{Error, Event, Result};

/// An RTSP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Headers in the order the parser reports them.
    pub headers: Vec<(String, String)>,
    /// Body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

impl From<&rtsp_types::Response<Vec<u8>>> for Response {
    fn from(r: &rtsp_types::Response<Vec<u8>>) -> Self {
        Response {
            status: u16::from(r.status()),
            reason: r.reason_phrase().to_string(),
            headers: r
                .headers()
                .map(|(n, v)| (n.as_str().to_string(), v.as_str().to_string()))
                .collect(),
            body: r.body().clone(),
        }
    }
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `CSeq` header as a number.
    pub fn cseq(&self) -> Option<u32> {
        self.header("CSeq").and_then(|v| v.trim().parse().ok())
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The result of DESCRIBE.
#[derive(Debug, Clone, PartialEq)]
pub struct Describe {
    /// The SDP text.
    pub sdp: String,
    /// `Content-Base` (or `Content-Location`, or the request URL with a
    /// trailing slash).
    pub content_base: String,
    /// The end of the session-level `a=range:npt=0-D`, if given.
    pub duration: Option<f64>,
    /// The aggregate control URL (session-level `a=control`, resolved).
    pub aggregate_url: String,
    /// Each media section's control URL, resolved against the base.
    pub track_urls: Vec<String>,
}

/// How media flows for a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// RTP/AVP over UDP.
    Udp {
        /// Our RTP port (RTCP is one above).
        client_port: u16,
        /// The server's RTP port from the reply, if it named one.
        server_port: Option<(u16, u16)>,
    },
    /// RTP/AVP/TCP interleaved on the RTSP connection.
    Tcp {
        /// Channel of RTP.
        rtp_channel: u8,
        /// Channel of RTCP.
        rtcp_channel: u8,
    },
}

/// An RTSP session as established by SETUP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The session id (without `;timeout=`).
    pub id: String,
    /// The timeout the server announced, in seconds.
    pub timeout: Option<u64>,
    /// The reply's `Transport` header.
    pub transport: String,
    /// The transport parameters.
    pub kind: TransportKind,
    /// The `ssrc=` of the reply's transport, if any.
    pub ssrc: Option<u32>,
}

/// One entry of an `RTP-Info` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpInfo {
    /// The stream URL.
    pub url: String,
    /// The sequence number of the first packet after PLAY.
    pub seq: Option<u16>,
    /// The RTP timestamp of the first packet after PLAY.
    pub rtptime: Option<u32>,
}

/// The result of PLAY.
#[derive(Debug, Clone, PartialEq)]
pub struct PlayReply {
    /// The reply's `Range` header.
    pub range: Option<String>,
    /// Start of an `npt=S-[E]` range.
    pub start: Option<f64>,
    /// End of an `npt=S-E` range.
    pub end: Option<f64>,
    /// The `RTP-Info` entries.
    pub rtp_info: Vec<RtpInfo>,
}

/// A blocking RTSP client on one TCP connection.
#[derive(Debug)]
pub struct RtspClient {
    stream: TcpStream,
    /// `rtsps://`: every byte through TLS.
    tls: Option<Box<crate::tls::Tls>>,
    url: String,
    cseq: u32,
    timeout: Duration,
    demux: Demux,
    session: Option<Session>,
    aggregate_url: Option<String>,
    user_agent: String,
}

impl RtspClient {
    /// Connects to the server named in `url` (`rtsp://host[:port]/path`).
    pub fn connect(url: &str) -> Result<RtspClient> {
        let addr = url_socket_addr(url)?;
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        Self::on(stream, url)
    }

    /// Connects from local address `from` (as another client would, e.g.
    /// 127.0.0.2 beside 127.0.0.1).
    pub fn connect_from(url: &str, from: IpAddr) -> Result<RtspClient> {
        use socket2::{Domain, Socket, Type};
        let addr = url_socket_addr(url)?;
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        socket.bind(&SocketAddr::new(from, 0).into())?;
        socket.connect_timeout(&addr.into(), Duration::from_secs(10))?;
        Self::on(socket.into(), url)
    }

    fn on(mut stream: TcpStream, url: &str) -> Result<RtspClient> {
        stream.set_nodelay(true)?;
        let timeout = Duration::from_secs(10);
        let tls = match crate::tls::is_rtsps(url) {
            true => {
                let c = crate::tls::handshake(&mut stream, crate::tls::host_of(url), timeout)?;
                Some(Box::new(crate::tls::Tls(c)))
            }
            false => None,
        };
        Ok(RtspClient {
            stream,
            tls,
            url: url.to_string(),
            cseq: 0,
            timeout: Duration::from_secs(10),
            demux: Demux::default(),
            session: None,
            aggregate_url: None,
            user_agent: concat!("fjord-client/", env!("CARGO_PKG_VERSION")).to_string(),
        })
    }

    /// How long to wait for a reply (default 10 s).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The URL given to [`RtspClient::connect`].
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Our address on the control connection.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// The server's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// The current session, if SETUP succeeded.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Overrides the session id sent with requests (`None` sends none).
    pub fn set_session_id(&mut self, id: Option<&str>) {
        match (id, &mut self.session) {
            (None, _) => self.session = None,
            (Some(id), Some(s)) => s.id = id.to_string(),
            (Some(id), None) => {
                self.session = Some(Session {
                    id: id.to_string(),
                    timeout: None,
                    transport: String::new(),
                    kind: TransportKind::Tcp {
                        rtp_channel: 0,
                        rtcp_channel: 1,
                    },
                    ssrc: None,
                })
            }
        }
    }

    /// The URL PLAY/PAUSE/TEARDOWN go to: the aggregate control URL from
    /// DESCRIBE, or the connect URL.
    pub fn control_url(&self) -> &str {
        self.aggregate_url.as_deref().unwrap_or(&self.url)
    }

    /// Sends a request and waits for its reply, whatever its status. Adds
    /// `CSeq`, `User-Agent`, `Session` (when there is one and `extra` has
    /// none) and `Content-Length` (when `body` is not empty). Interleaved
    /// frames arriving meanwhile are kept for [`RtspClient::recv_interleaved`].
    pub fn request(
        &mut self,
        method: &str,
        uri: &str,
        extra: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response> {
        self.cseq += 1;
        let cseq = self.cseq;
        let mut msg = format!("{method} {uri} RTSP/1.0\r\nCSeq: {cseq}\r\n");
        msg.push_str(&format!("User-Agent: {}\r\n", self.user_agent));
        let has = |name: &str| extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        if let Some(s) = &self.session
            && !has("Session")
        {
            msg.push_str(&format!("Session: {}\r\n", s.id));
        }
        for (n, v) in extra {
            msg.push_str(&format!("{n}: {v}\r\n"));
        }
        if !body.is_empty() && !has("Content-Length") {
            msg.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        msg.push_str("\r\n");
        let mut bytes = msg.into_bytes();
        bytes.extend_from_slice(body);
        self.write_all(&bytes)?;
        self.read_response(cseq)
    }

    /// Writes raw bytes on the control connection.
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_all(bytes)?;
        Ok(())
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.tls {
            Some(t) => t.write_all(&mut self.stream, bytes),
            None => self.stream.write_all(bytes),
        }
    }

    /// Waits for the next response (any CSeq).
    pub fn read_any_response(&mut self) -> Result<Response> {
        self.wait_response(None)
    }

    fn read_response(&mut self, cseq: u32) -> Result<Response> {
        self.wait_response(Some(cseq))
    }

    fn wait_response(&mut self, cseq: Option<u32>) -> Result<Response> {
        let deadline = Instant::now() + self.timeout;
        loop {
            while let Some(r) = self.demux.responses.pop_front() {
                match (cseq, r.cseq()) {
                    (Some(want), Some(got)) if got < want => continue, // stale reply
                    _ => return Ok(r),
                }
            }
            self.fill(deadline)?;
        }
    }

    /// Reads once from the connection (until `deadline`) and demultiplexes.
    fn fill(&mut self, deadline: Instant) -> Result<()> {
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::Timeout);
        }
        self.stream
            .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
        let mut buf = [0u8; 65536];
        let read = match &mut self.tls {
            Some(t) => t.read(&mut self.stream, &mut buf),
            None => self.stream.read(&mut buf),
        };
        match read {
            Ok(0) => Err(Error::Closed),
            Ok(n) => self.demux.feed(&buf[..n], Instant::now()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    Err(Error::Timeout)
                } else {
                    Ok(())
                }
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Err(Error::Closed),
            Err(e) => Err(e.into()),
        }
    }

    fn expect_ok(&mut self, method: &str, uri: &str, extra: &[(&str, &str)]) -> Result<Response> {
        let r = self.request(method, uri, extra, &[])?;
        if r.is_success() {
            Ok(r)
        } else {
            Err(Error::Status {
                method: method.to_string(),
                response: Box::new(r),
            })
        }
    }

    /// OPTIONS `*`.
    pub fn options(&mut self) -> Result<Response> {
        self.expect_ok("OPTIONS", "*", &[])
    }

    /// DESCRIBE the connect URL.
    pub fn describe(&mut self) -> Result<Describe> {
        self.describe_with(&[("Accept", "application/sdp")])
    }

    /// DESCRIBE saying the client supports fjord's repair streams
    /// (`Supported: fjord.fec`, docs/fec.md), so the SDP offers them.
    pub fn describe_fec(&mut self) -> Result<Describe> {
        self.describe_with(&[("Accept", "application/sdp"), ("Supported", "fjord.fec")])
    }

    fn describe_with(&mut self, headers: &[(&str, &str)]) -> Result<Describe> {
        let url = self.url.clone();
        let r = self.expect_ok("DESCRIBE", &url, headers)?;
        let sdp = String::from_utf8(r.body.clone())
            .map_err(|_| Error::Protocol("SDP is not UTF-8".into()))?;
        let content_base = r
            .header("Content-Base")
            .or_else(|| r.header("Content-Location"))
            .map(str::to_string)
            .unwrap_or_else(|| format!("{}/", url.trim_end_matches('/')));
        let d = parse_sdp(&sdp, &content_base);
        self.aggregate_url = Some(d.aggregate_url.clone());
        Ok(d)
    }

    /// SETUP `url` with RTP over UDP to a freshly bound even/odd port pair.
    pub fn setup_udp(&mut self, url: &str) -> Result<(Session, UdpReceiver)> {
        let ip = self.stream.local_addr()?.ip();
        let rx = UdpReceiver::bind(ip)?;
        self.setup_udp_with(url, rx)
    }

    /// Like [`RtspClient::setup_udp`], with events going to `events`
    /// (several streams into one channel; tell them apart by SSRC).
    pub fn setup_udp_into(
        &mut self,
        url: &str,
        events: std::sync::mpsc::Sender<Event>,
    ) -> Result<(Session, UdpReceiver)> {
        let ip = self.stream.local_addr()?.ip();
        let rx = UdpReceiver::bind_into(ip, events)?;
        self.setup_udp_with(url, rx)
    }

    fn setup_udp_with(&mut self, url: &str, mut rx: UdpReceiver) -> Result<(Session, UdpReceiver)> {
        let p = rx.rtp_port();
        let transport = format!("RTP/AVP;unicast;client_port={}-{}", p, p + 1);
        let r = self.expect_ok("SETUP", url, &[("Transport", &transport)])?;
        let session = self.take_session(&r, p)?;
        if let TransportKind::Udp {
            server_port: Some((_, rtcp)),
            ..
        } = session.kind
        {
            rx.set_server_rtcp(SocketAddr::new(self.stream.peer_addr()?.ip(), rtcp));
        }
        Ok((session, rx))
    }

    /// SETUP `url` with RTP interleaved on this connection (channels 0-1).
    pub fn setup_tcp(&mut self, url: &str) -> Result<Session> {
        self.setup_tcp_on(url, 0)
    }

    /// SETUP `url` with RTP interleaved on channels `rtp` and `rtp + 1`;
    /// frames of every stream set up so far arrive as events.
    pub fn setup_tcp_on(&mut self, url: &str, rtp: u8) -> Result<Session> {
        let transport = format!(
            "RTP/AVP/TCP;unicast;interleaved={rtp}-{}",
            rtp.wrapping_add(1)
        );
        let r = self.expect_ok("SETUP", url, &[("Transport", &transport)])?;
        self.take_session(&r, 0)
    }

    fn take_session(&mut self, r: &Response, client_port: u16) -> Result<Session> {
        let raw = r
            .header("Session")
            .ok_or_else(|| Error::Protocol("SETUP reply without Session".into()))?;
        let mut parts = raw.split(';');
        let id = parts.next().unwrap_or_default().trim().to_string();
        let timeout = parts
            .filter_map(|p| p.trim().strip_prefix("timeout="))
            .find_map(|v| v.trim().parse().ok());
        let transport = r.header("Transport").unwrap_or_default().to_string();
        let params = transport_params(&transport);
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let kind = if transport.to_ascii_uppercase().contains("/TCP") {
            let (a, b) = get("interleaved")
                .and_then(parse_pair::<u8>)
                .unwrap_or((0, 1));
            TransportKind::Tcp {
                rtp_channel: a,
                rtcp_channel: b,
            }
        } else {
            TransportKind::Udp {
                client_port,
                server_port: get("server_port").and_then(parse_pair::<u16>),
            }
        };
        let ssrc = get("ssrc").and_then(|v| u32::from_str_radix(v, 16).ok());
        let s = Session {
            id,
            timeout,
            transport,
            kind,
            ssrc,
        };
        if let TransportKind::Tcp {
            rtp_channel,
            rtcp_channel,
        } = kind
        {
            self.demux.channels.retain(|&(a, _)| a != rtp_channel);
            self.demux.channels.push((rtp_channel, rtcp_channel));
        }
        self.session = Some(s.clone());
        Ok(s)
    }

    /// PLAY the session, from `range` (a `Range` header value such as
    /// `npt=5-`) or from where it paused.
    pub fn play(&mut self, range: Option<&str>) -> Result<PlayReply> {
        if self.session.is_none() {
            return Err(Error::NoSession);
        }
        let url = self.control_url().to_string();
        let r = match range {
            Some(v) => self.expect_ok("PLAY", &url, &[("Range", v)])?,
            None => self.expect_ok("PLAY", &url, &[])?,
        };
        let range = r.header("Range").map(str::to_string);
        let (start, end) = range
            .as_deref()
            .and_then(parse_npt_range)
            .map_or((None, None), |(s, e)| (Some(s), e));
        Ok(PlayReply {
            range,
            start,
            end,
            rtp_info: r.header("RTP-Info").map(parse_rtp_info).unwrap_or_default(),
        })
    }

    /// PAUSE the session.
    pub fn pause(&mut self) -> Result<Response> {
        if self.session.is_none() {
            return Err(Error::NoSession);
        }
        let url = self.control_url().to_string();
        self.expect_ok("PAUSE", &url, &[])
    }

    /// TEARDOWN the session and forget it.
    pub fn teardown(&mut self) -> Result<Response> {
        if self.session.is_none() {
            return Err(Error::NoSession);
        }
        let url = self.control_url().to_string();
        let r = self.expect_ok("TEARDOWN", &url, &[]);
        self.session = None;
        r
    }

    /// GET_PARAMETER with no body: keeps the session alive.
    pub fn keepalive(&mut self) -> Result<Response> {
        let url = self.control_url().to_string();
        self.expect_ok("GET_PARAMETER", &url, &[])
    }

    /// The next interleaved RTP/RTCP frame, waiting at most `timeout`.
    /// Responses arriving meanwhile are kept for the next request.
    pub fn recv_interleaved(&mut self, timeout: Duration) -> Result<Option<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.demux.events.pop_front() {
                return Ok(Some(e));
            }
            match self.fill(deadline) {
                Ok(()) => {}
                Err(Error::Timeout) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }
}

impl PacketSource for RtspClient {
    fn recv_event(&mut self, timeout: Duration) -> Result<Option<Event>> {
        self.recv_interleaved(timeout)
    }
}

/// Splits the connection's byte stream into responses and interleaved
/// frames (`$`, channel, 16-bit length, data), never dropping either.
#[derive(Debug)]
pub(crate) struct Demux {
    buf: Vec<u8>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) responses: VecDeque<Response>,
    /// (RTP channel, RTCP channel) of each stream set up.
    pub(crate) channels: Vec<(u8, u8)>,
}

impl Default for Demux {
    fn default() -> Self {
        Demux {
            buf: Vec::new(),
            events: VecDeque::new(),
            responses: VecDeque::new(),
            channels: vec![(0, 1)],
        }
    }
}

impl Demux {
    pub(crate) fn feed(&mut self, data: &[u8], arrival: Instant) -> Result<()> {
        self.buf.extend_from_slice(data);
        let mut pos = 0;
        let result = loop {
            let rest = &self.buf[pos..];
            if rest.is_empty() {
                break Ok(());
            }
            if rest[0] == b'\r' || rest[0] == b'\n' {
                pos += 1;
                continue;
            }
            if rest[0] == b'$' {
                if rest.len() < 4 {
                    break Ok(());
                }
                let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
                if rest.len() < 4 + len {
                    break Ok(());
                }
                let channel = rest[1];
                let frame = &rest[4..4 + len];
                let event = self.frame_event(channel, frame, arrival);
                self.events.push_back(event);
                pos += 4 + len;
                continue;
            }
            match rtsp_types::Message::<Vec<u8>>::parse(rest) {
                Ok((rtsp_types::Message::Response(r), n)) => {
                    self.responses.push_back(Response::from(&r));
                    pos += n;
                }
                // Requests from the server (and data, handled above) are skipped.
                Ok((_, n)) => pos += n,
                Err(rtsp_types::ParseError::Incomplete(_)) => break Ok(()),
                Err(rtsp_types::ParseError::Error) => {
                    let shown = String::from_utf8_lossy(&rest[..rest.len().min(80)]).into_owned();
                    pos = self.buf.len();
                    break Err(Error::Protocol(format!("unparsable data: {shown:?}")));
                }
            }
        };
        self.buf.drain(..pos);
        result
    }

    fn frame_event(&self, channel: u8, frame: &[u8], arrival: Instant) -> Event {
        let garbage = || Event::Garbage {
            arrival,
            channel,
            data: frame.to_vec(),
        };
        if self.channels.iter().any(|&(rtp, _)| rtp == channel) {
            parse_rtp(frame, arrival).map_or_else(|_| garbage(), Event::Rtp)
        } else if self.channels.iter().any(|&(_, rtcp)| rtcp == channel) {
            parse_rtcp_compound(frame).map_or_else(garbage, |packets| {
                Event::Rtcp(RtcpReceived { arrival, packets })
            })
        } else {
            garbage()
        }
    }
}

fn url_socket_addr(url: &str) -> Result<SocketAddr> {
    let bad = || Error::Url(url.to_string());
    let tls = crate::tls::is_rtsps(url);
    let rest = match tls {
        true => &url[8..],
        false => (url.strip_prefix("rtsp://"))
            .or_else(|| url.strip_prefix("RTSP://"))
            .ok_or_else(bad)?,
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, p) = v6.split_once(']').ok_or_else(bad)?;
        (h, p.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port: u16 = match port {
        Some(p) => p.parse().map_err(|_| bad())?,
        None if tls => 322,
        None => 554,
    };
    if host.is_empty() {
        return Err(bad());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|_| bad())?
        .next()
        .ok_or_else(bad)
}

/// Resolves a control attribute against a base URL.
fn resolve(base: &str, control: &str) -> String {
    if control == "*" || control.is_empty() {
        base.to_string()
    } else if control.contains("://") {
        control.to_string()
    } else if let Some(abs) = control.strip_prefix('/') {
        // Absolute path: keep scheme and authority.
        let after_scheme = base.find("://").map_or(0, |i| i + 3);
        let end = base[after_scheme..]
            .find('/')
            .map_or(base.len(), |i| after_scheme + i);
        format!("{}/{abs}", &base[..end])
    } else {
        let dir_end = base.rfind('/').map_or(base.len(), |i| i + 1);
        let dir = &base[..dir_end];
        if dir.ends_with('/') {
            format!("{dir}{control}")
        } else {
            format!("{dir}/{control}")
        }
    }
}

fn parse_sdp(sdp: &str, content_base: &str) -> Describe {
    let mut session_control = None;
    let mut duration = None;
    let mut track_controls: Vec<Option<String>> = Vec::new();
    for line in sdp.lines() {
        let line = line.trim_end();
        if line.starts_with("m=") {
            track_controls.push(None);
        } else if let Some(c) = line.strip_prefix("a=control:") {
            match track_controls.last_mut() {
                Some(t) => *t = Some(c.trim().to_string()),
                None => session_control = Some(c.trim().to_string()),
            }
        } else if let Some(r) = line.strip_prefix("a=range:")
            && track_controls.is_empty()
        {
            duration = parse_npt_range(r).and_then(|(_, e)| e);
        }
    }
    Describe {
        sdp: sdp.to_string(),
        content_base: content_base.to_string(),
        duration,
        aggregate_url: resolve(content_base, session_control.as_deref().unwrap_or("*")),
        track_urls: track_controls
            .iter()
            .map(|c| resolve(content_base, c.as_deref().unwrap_or("*")))
            .collect(),
    }
}

/// Parses `npt=S-[E]` (also `npt=now-`, read as 0) into seconds.
pub fn parse_npt_range(v: &str) -> Option<(f64, Option<f64>)> {
    let v = v.trim();
    let v = v.split(';').next()?.trim();
    let r = v.strip_prefix("npt=")?;
    let (s, e) = r.split_once('-')?;
    let s = s.trim();
    let start = if s == "now" || s.is_empty() {
        0.0
    } else {
        parse_npt_time(s)?
    };
    let e = e.trim();
    let end = if e.is_empty() {
        None
    } else {
        Some(parse_npt_time(e)?)
    };
    Some((start, end))
}

/// `123.45` or `h:mm:ss[.frac]`.
fn parse_npt_time(t: &str) -> Option<f64> {
    let parts: Vec<&str> = t.split(':').collect();
    match parts.as_slice() {
        [s] => s.parse().ok(),
        [h, m, s] => {
            let h: f64 = h.parse().ok()?;
            let m: f64 = m.parse().ok()?;
            let s: f64 = s.parse().ok()?;
            Some(h * 3600.0 + m * 60.0 + s)
        }
        _ => None,
    }
}

/// Parses an `RTP-Info` header: `url=U;seq=N;rtptime=T[, ...]`.
pub fn parse_rtp_info(v: &str) -> Vec<RtpInfo> {
    v.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|entry| {
            let mut info = RtpInfo {
                url: String::new(),
                seq: None,
                rtptime: None,
            };
            for p in entry.split(';') {
                let p = p.trim();
                if let Some(u) = p.strip_prefix("url=") {
                    info.url = u.trim_matches('"').to_string();
                } else if let Some(s) = p.strip_prefix("seq=") {
                    info.seq = s.parse().ok();
                } else if let Some(t) = p.strip_prefix("rtptime=") {
                    info.rtptime = t.parse().ok();
                }
            }
            info
        })
        .collect()
}

fn transport_params(t: &str) -> Vec<(String, String)> {
    t.split(';')
        .skip(1)
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim().to_string()),
            None => (p.trim().to_ascii_lowercase(), String::new()),
        })
        .collect()
}

fn parse_pair<T: std::str::FromStr + Copy>(v: &str) -> Option<(T, T)> {
    match v.split_once('-') {
        Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
        None => {
            let a = v.trim().parse().ok()?;
            Some((a, a))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtp_frame(channel: u8, seq: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, 33];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(payload);
        let mut f = vec![b'$', channel];
        f.extend_from_slice(&(p.len() as u16).to_be_bytes());
        f.extend_from_slice(&p);
        f
    }

    const REPLY: &[u8] = b"RTSP/1.0 200 OK\r\nCSeq: 3\r\nSession: abc;timeout=60\r\n\
        Content-Length: 5\r\n\r\nhello";

    fn stream() -> Vec<u8> {
        let mut s = rtp_frame(0, 1, &[0x47; 188]);
        s.extend_from_slice(REPLY);
        s.extend_from_slice(&rtp_frame(0, 2, &[0x47; 10]));
        s.extend_from_slice(&[b'$', 1, 0, 8, 0x81, 203, 0, 1, 0, 0, 0, 1]);
        s.extend_from_slice(&rtp_frame(5, 3, &[1]));
        s
    }

    fn check(d: &Demux) {
        assert_eq!(d.responses.len(), 1);
        let r = &d.responses[0];
        assert_eq!(r.status, 200);
        assert_eq!(r.reason, "OK");
        assert_eq!(r.cseq(), Some(3));
        assert_eq!(r.header("session"), Some("abc;timeout=60"));
        assert_eq!(r.body, b"hello");
        let ev: Vec<_> = d.events.iter().collect();
        assert_eq!(ev.len(), 4);
        assert!(matches!(ev[0], Event::Rtp(p) if p.seq == 1 && p.payload.len() == 188));
        assert!(matches!(ev[1], Event::Rtp(p) if p.seq == 2 && p.payload.len() == 10));
        assert!(matches!(ev[2], Event::Rtcp(r) if r.is_bye()));
        assert!(matches!(ev[3], Event::Garbage { channel: 5, .. }));
        assert!(d.buf.is_empty());
    }

    #[test]
    fn demux_whole_stream() {
        let mut d = Demux::default();
        d.feed(&stream(), Instant::now()).unwrap();
        check(&d);
    }

    #[test]
    fn demux_any_split() {
        let s = stream();
        for cut in 0..=s.len() {
            let mut d = Demux::default();
            d.feed(&s[..cut], Instant::now()).unwrap();
            d.feed(&s[cut..], Instant::now()).unwrap();
            check(&d);
        }
        let mut d = Demux::default();
        for b in &s {
            d.feed(std::slice::from_ref(b), Instant::now()).unwrap();
        }
        check(&d);
    }

    #[test]
    fn demux_rejects_garbage() {
        let mut d = Demux::default();
        assert!(matches!(
            d.feed(b"HTTP/1.1 200 OK\r\n\r\n", Instant::now()),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn demux_skips_server_requests_and_blank_lines() {
        let mut d = Demux::default();
        d.feed(
            b"\r\nGET_PARAMETER rtsp://x/ RTSP/1.0\r\nCSeq: 1\r\n\r\nRTSP/1.0 454 Session Not Found\r\nCSeq: 9\r\n\r\n",
            Instant::now(),
        )
        .unwrap();
        assert_eq!(d.responses.len(), 1);
        assert_eq!(d.responses[0].status, 454);
        assert_eq!(d.responses[0].reason, "Session Not Found");
    }

    #[test]
    fn sdp_and_urls() {
        let sdp = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=clip\r\nt=0 0\r\na=control:*\r\n\
                   a=range:npt=0-10.04\r\nm=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\n\
                   a=control:track1\r\n";
        let d = parse_sdp(sdp, "rtsp://h:1/a/clip.ts/");
        assert_eq!(d.duration, Some(10.04));
        assert_eq!(d.aggregate_url, "rtsp://h:1/a/clip.ts/");
        assert_eq!(d.track_urls, vec!["rtsp://h:1/a/clip.ts/track1"]);
        assert_eq!(resolve("rtsp://h/a/b", "t"), "rtsp://h/a/t");
        assert_eq!(resolve("rtsp://h/a/b", "/t"), "rtsp://h/t");
        assert_eq!(resolve("rtsp://h/a/", "rtsp://x/y"), "rtsp://x/y");
    }

    #[test]
    fn ranges_and_rtp_info() {
        assert_eq!(parse_npt_range("npt=4.96-10.04"), Some((4.96, Some(10.04))));
        assert_eq!(parse_npt_range("npt=5-"), Some((5.0, None)));
        assert_eq!(parse_npt_range("npt=now-"), Some((0.0, None)));
        assert_eq!(parse_npt_range("npt=0:01:02.5-"), Some((62.5, None)));
        assert_eq!(parse_npt_range("smpte=0-"), None);
        let v = parse_rtp_info("url=rtsp://h/c.ts/track1;seq=17;rtptime=900, url=x;seq=1");
        assert_eq!(
            v,
            vec![
                RtpInfo {
                    url: "rtsp://h/c.ts/track1".into(),
                    seq: Some(17),
                    rtptime: Some(900)
                },
                RtpInfo {
                    url: "x".into(),
                    seq: Some(1),
                    rtptime: None
                }
            ]
        );
    }

    #[test]
    fn url_addresses() {
        assert_eq!(
            url_socket_addr("rtsp://127.0.0.1:8554/x.ts").unwrap(),
            "127.0.0.1:8554".parse().unwrap()
        );
        assert_eq!(
            url_socket_addr("rtsp://[::1]/x").unwrap(),
            "[::1]:554".parse().unwrap()
        );
        assert!(url_socket_addr("http://h/x").is_err());
        assert!(url_socket_addr("rtsp://h:99999/x").is_err());
    }

    #[test]
    fn transport_parsing() {
        let p = transport_params(
            "RTP/AVP;unicast;client_port=5000-5001;server_port=6000-6001;ssrc=1A2b",
        );
        assert_eq!(p[0], ("unicast".to_string(), String::new()));
        assert_eq!(parse_pair::<u16>(&p[2].1), Some((6000, 6001)));
        assert_eq!(parse_pair::<u8>("3"), Some((3, 3)));
    }
}

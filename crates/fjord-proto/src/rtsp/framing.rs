//! Splitting a TCP byte stream into RTSP requests and interleaved frames.
//!
//! Hand-written rather than `rtsp_types::Message::parse`: its public, owned
//! result normalizes the request-URI through `url::Url` (rejecting path-only
//! URIs and resolving `..` before we can see it), accepts only RTSP/1.0 and
//! 2.0, and folds headers into a map (losing order and duplicates); its
//! borrowed `MessageRef` is crate-private. The property tests cross-check this
//! parser against rtsp-types on the requests both accept.

use std::fmt;

/// Size limits applied while framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum size of the request line plus headers plus the blank line
    /// (and any CRLFs before the request line).
    pub max_header_bytes: usize,
    /// Maximum `Content-Length`.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16384,
            max_body_bytes: 65536,
        }
    }
}

/// One unit read from an RTSP connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete RTSP request.
    Request(Request),
    /// `$` + channel + u16 length + data: RTP/RTCP interleaved on the TCP
    /// connection (RFC 2326 §10.12), typically RTCP receiver reports.
    Interleaved {
        /// Interleaved channel number.
        channel: u8,
        /// The data, copied out of the buffer.
        payload: Vec<u8>,
    },
}

/// Why the byte stream cannot be framed. Every variant ends the connection:
/// after it the stream position of the next request is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A complete request that does not follow the grammar.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// No end of headers within `Limits::max_header_bytes`.
    #[error("request header too large")]
    HeaderTooLarge,
    /// `Content-Length` above `Limits::max_body_bytes`.
    #[error("request body too large")]
    BodyTooLarge,
}

impl FrameError {
    /// The status to answer with before closing: 400 or 413.
    pub fn status(&self) -> u16 {
        match self {
            FrameError::Malformed(_) | FrameError::HeaderTooLarge => 400,
            FrameError::BodyTooLarge => 413,
        }
    }

    /// Whether the connection must be closed after answering. Always true:
    /// once framing failed, where the next request starts is unknown.
    pub fn closes_connection(&self) -> bool {
        true
    }
}

/// RTSP request method (case-sensitive, RFC 2326 §6.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    Options,
    Describe,
    Setup,
    Play,
    Pause,
    Teardown,
    GetParameter,
    SetParameter,
    Announce,
    Record,
    Redirect,
    /// Any other (syntactically valid) method token.
    Other(String),
}

impl Method {
    /// Parse a method token; unknown tokens become [`Method::Other`].
    pub fn from_token(token: &str) -> Method {
        match token {
            "OPTIONS" => Method::Options,
            "DESCRIBE" => Method::Describe,
            "SETUP" => Method::Setup,
            "PLAY" => Method::Play,
            "PAUSE" => Method::Pause,
            "TEARDOWN" => Method::Teardown,
            "GET_PARAMETER" => Method::GetParameter,
            "SET_PARAMETER" => Method::SetParameter,
            "ANNOUNCE" => Method::Announce,
            "RECORD" => Method::Record,
            "REDIRECT" => Method::Redirect,
            other => Method::Other(other.to_owned()),
        }
    }

    /// The method token as sent on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Options => "OPTIONS",
            Method::Describe => "DESCRIBE",
            Method::Setup => "SETUP",
            Method::Play => "PLAY",
            Method::Pause => "PAUSE",
            Method::Teardown => "TEARDOWN",
            Method::GetParameter => "GET_PARAMETER",
            Method::SetParameter => "SET_PARAMETER",
            Method::Announce => "ANNOUNCE",
            Method::Record => "RECORD",
            Method::Redirect => "REDIRECT",
            Method::Other(s) => s,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Protocol version from the request line. Anything but 1.0 parses, so the
/// server can answer 505 with the right CSeq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    V1_0,
    V2_0,
    Other { major: u16, minor: u16 },
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::V1_0 => f.write_str("RTSP/1.0"),
            Version::V2_0 => f.write_str("RTSP/2.0"),
            Version::Other { major, minor } => write!(f, "RTSP/{major}.{minor}"),
        }
    }
}

/// An owned, parsed RTSP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The request-URI exactly as sent (`*` allowed).
    pub uri: String,
    pub version: Version,
    /// Headers in order of arrival; values trimmed, folded lines joined by a space.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `CSeq` header as a number, if present and valid.
    pub fn cseq(&self) -> Option<u32> {
        self.header("CSeq")?.trim().parse().ok()
    }

    /// The session id from the `Session` header: the value before any `;`.
    pub fn session_id(&self) -> Option<&str> {
        // A split is all RFC 2326 §12.37 needs; rtsp_types' Session would allocate.
        let id = self.header("Session")?.split(';').next()?.trim();
        (!id.is_empty()).then_some(id)
    }

    /// Render on the wire (for clients and tests). Adds `Content-Length`
    /// when the body is non-empty and no such header is present.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.body.len());
        out.extend_from_slice(
            format!("{} {} {}\r\n", self.method, self.uri, self.version).as_bytes(),
        );
        for (n, v) in &self.headers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        if !self.body.is_empty() && self.header("Content-Length").is_none() {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// Try to take one frame off the front of `buf`.
///
/// `Ok(None)`: more bytes are needed (nothing consumed). `Ok(Some((frame,
/// n)))`: drop the first `n` bytes of `buf`. Leading CRLFs (keep-alives
/// between requests) are skipped and counted in `n`.
pub fn next_frame(buf: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, FrameError> {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    let rest = &buf[start..];
    if rest.is_empty() || rest == b"\r" {
        if start > limits.max_header_bytes {
            return Err(FrameError::HeaderTooLarge);
        }
        return Ok(None);
    }
    if rest[0] == b'$' {
        // Interleaved framing is four fixed bytes; no parser needed.
        if rest.len() < 4 {
            return Ok(None);
        }
        let channel = rest[1];
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let payload = rest[4..4 + len].to_vec();
        return Ok(Some((
            Frame::Interleaved { channel, payload },
            start + 4 + len,
        )));
    }

    // Reject a bad request line as soon as it is complete, not after 16 KiB.
    let window = &buf[..buf.len().min(limits.max_header_bytes)];
    let window_rest = window.get(start..).unwrap_or(&[]);
    if let Some(eol) = find(window_rest, b"\r\n") {
        parse_request_line(&window_rest[..eol])?;
    } else if find(rest, b"\n").is_some() {
        return Err(malformed("bare LF in request line"));
    }
    let Some(head_len) = find(window_rest, b"\r\n\r\n").map(|p| p + 4) else {
        if buf.len() >= limits.max_header_bytes {
            return Err(FrameError::HeaderTooLarge);
        }
        return Ok(None);
    };
    let head = &rest[..head_len];
    let (method, uri, version, headers) = parse_head(head)?;

    let mut content_length: Option<usize> = None;
    for (n, v) in &headers {
        if n.eq_ignore_ascii_case("Content-Length") {
            let len = parse_content_length(v)?;
            if content_length.is_some_and(|prev| prev != len) {
                return Err(malformed("conflicting Content-Length headers"));
            }
            content_length = Some(len);
        }
    }
    let body_len = content_length.unwrap_or(0);
    if body_len > limits.max_body_bytes {
        return Err(FrameError::BodyTooLarge);
    }
    let total = head_len + body_len;
    if rest.len() < total {
        return Ok(None);
    }
    let body = rest[head_len..total].to_vec();
    let request = Request {
        method,
        uri,
        version,
        headers,
        body,
    };
    Ok(Some((Frame::Request(request), start + total)))
}

fn malformed(why: &str) -> FrameError {
    FrameError::Malformed(why.to_owned())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_content_length(v: &str) -> Result<usize, FrameError> {
    if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("invalid Content-Length"));
    }
    v.parse::<usize>()
        .map_err(|_| malformed("invalid Content-Length"))
}

fn parse_request_line(line: &[u8]) -> Result<(Method, String, Version), FrameError> {
    let line = std::str::from_utf8(line).map_err(|_| malformed("request line is not UTF-8"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(uri), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("request line is not `METHOD URI VERSION`"));
    };
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return Err(malformed("invalid method token"));
    }
    if uri.is_empty() || !uri.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(malformed("invalid request-URI"));
    }
    let version = parse_version(version).ok_or_else(|| malformed("invalid protocol version"))?;
    Ok((Method::from_token(method), uri.to_owned(), version))
}

fn parse_version(v: &str) -> Option<Version> {
    let (major, minor) = v.strip_prefix("RTSP/")?.split_once('.')?;
    let num = |s: &str| -> Option<u16> {
        if s.is_empty() || s.len() > 4 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some(match (num(major)?, num(minor)?) {
        (1, 0) => Version::V1_0,
        (2, 0) => Version::V2_0,
        (major, minor) => Version::Other { major, minor },
    })
}

type Head = (Method, String, Version, Vec<(String, String)>);

/// `head` ends with the blank line's CRLF CRLF.
fn parse_head(head: &[u8]) -> Result<Head, FrameError> {
    let text = std::str::from_utf8(head).map_err(|_| malformed("header is not UTF-8"))?;
    let text = &text[..text.len() - 4];
    let mut lines = text.split("\r\n");
    let (method, uri, version) = parse_request_line(lines.next().unwrap_or("").as_bytes())?;
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(malformed("stray CR, LF or NUL in header"));
        }
        if line.starts_with([' ', '\t']) {
            // Obsolete line folding: continue the previous value.
            let Some((_, value)) = headers.last_mut() else {
                return Err(malformed("continuation line before any header"));
            };
            let more = line.trim_matches([' ', '\t']);
            if !more.is_empty() {
                if !value.is_empty() {
                    value.push(' ');
                }
                value.push_str(more);
            }
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(malformed("header line without `:`"));
        };
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(malformed("invalid header name"));
        }
        headers.push((name.to_owned(), value.trim_matches([' ', '\t']).to_owned()));
    }
    Ok((method, uri, version, headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits::default()
    }

    fn req(buf: &[u8]) -> (Request, usize) {
        match next_frame(buf, &lim()) {
            Ok(Some((Frame::Request(r), n))) => (r, n),
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn options_request() {
        let buf = b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\nUser-Agent: x\r\n\r\n";
        let (r, n) = req(buf);
        assert_eq!(n, buf.len());
        assert_eq!(r.method, Method::Options);
        assert_eq!(r.uri, "*");
        assert_eq!(r.version, Version::V1_0);
        assert_eq!(r.cseq(), Some(1));
        assert_eq!(r.header("user-agent"), Some("x"));
        assert_eq!(r.header("Missing"), None);
        assert!(r.body.is_empty());
    }

    #[test]
    fn body_and_remainder() {
        let buf =
            b"SET_PARAMETER rtsp://h/a RTSP/1.0\r\nCSeq: 7\r\nContent-Length: 5\r\n\r\nhelloREST";
        let (r, n) = req(buf);
        assert_eq!(n, buf.len() - 4);
        assert_eq!(r.body, b"hello");
        assert_eq!(r.method, Method::SetParameter);
    }

    #[test]
    fn incomplete_head_and_body() {
        assert_eq!(next_frame(b"", &lim()), Ok(None));
        assert_eq!(
            next_frame(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n", &lim()),
            Ok(None)
        );
        assert_eq!(
            next_frame(
                b"PLAY rtsp://h/a RTSP/1.0\r\nContent-Length: 3\r\n\r\nab",
                &lim()
            ),
            Ok(None)
        );
    }

    #[test]
    fn leading_crlfs_skipped() {
        let buf = b"\r\n\r\n\r\nOPTIONS * RTSP/1.0\r\nCSeq: 2\r\n\r\n";
        let (r, n) = req(buf);
        assert_eq!(n, buf.len());
        assert_eq!(r.cseq(), Some(2));
        assert_eq!(next_frame(b"\r\n\r\n", &lim()), Ok(None));
        assert_eq!(next_frame(b"\r\n\r", &lim()), Ok(None));
    }

    #[test]
    fn endless_crlfs_are_bounded() {
        let buf = b"\r\n".repeat(10_000);
        assert_eq!(next_frame(&buf, &lim()), Err(FrameError::HeaderTooLarge));
    }

    #[test]
    fn interleaved() {
        let buf = b"$\x01\x00\x03abcXYZ";
        let (f, n) = next_frame(buf, &lim()).unwrap().unwrap();
        assert_eq!(n, 7);
        assert_eq!(
            f,
            Frame::Interleaved {
                channel: 1,
                payload: b"abc".to_vec()
            }
        );
        assert_eq!(next_frame(b"$\x01\x00", &lim()), Ok(None));
        assert_eq!(next_frame(b"$\x01\x00\x04abc", &lim()), Ok(None));
        let (f, n) = next_frame(b"\r\n$\x00\x00\x00", &lim()).unwrap().unwrap();
        assert_eq!(n, 6);
        assert_eq!(
            f,
            Frame::Interleaved {
                channel: 0,
                payload: vec![]
            }
        );
    }

    #[test]
    fn header_too_large() {
        let mut buf = b"OPTIONS * RTSP/1.0\r\n".to_vec();
        while buf.len() < 20000 {
            buf.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert_eq!(next_frame(&buf, &lim()), Err(FrameError::HeaderTooLarge));
        // Complete but too large is also refused.
        buf.extend_from_slice(b"\r\n");
        assert_eq!(next_frame(&buf, &lim()), Err(FrameError::HeaderTooLarge));
        assert_eq!(FrameError::HeaderTooLarge.status(), 400);
        assert!(FrameError::HeaderTooLarge.closes_connection());
        // Binary garbage without any line end.
        let junk = vec![b'A'; 16384];
        assert_eq!(next_frame(&junk, &lim()), Err(FrameError::HeaderTooLarge));
        assert_eq!(next_frame(&junk[..100], &lim()), Ok(None));
    }

    #[test]
    fn body_too_large_as_soon_as_head_is_complete() {
        let buf = b"ANNOUNCE rtsp://h/a RTSP/1.0\r\nContent-Length: 65537\r\n\r\n";
        assert_eq!(next_frame(buf, &lim()), Err(FrameError::BodyTooLarge));
        assert_eq!(FrameError::BodyTooLarge.status(), 413);
        assert!(FrameError::BodyTooLarge.closes_connection());
    }

    fn assert_malformed(buf: &[u8]) {
        match next_frame(buf, &lim()) {
            Err(e @ FrameError::Malformed(_)) => {
                assert_eq!(e.status(), 400);
                assert!(e.closes_connection());
            }
            other => panic!("expected Malformed for {buf:?}, got {other:?}"),
        }
    }

    #[test]
    fn malformed_requests() {
        assert_malformed(b"OPTIONS *\r\n\r\n");
        assert_malformed(b"OPTIONS  * RTSP/1.0\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0 extra\r\n\r\n");
        assert_malformed(b"OPT(ONS * RTSP/1.0\r\n\r\n");
        assert_malformed(b"OPTIONS * HTTP/1.1\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/x.0\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1\r\n\r\n");
        assert_malformed(b"OPTIONS \x7f RTSP/1.0\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nNoColon\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nBad Name: x\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\n: x\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nA: x\ry\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nA: x\ny\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nA: x\0y\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\n continued\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nContent-Length: abc\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nContent-Length: -1\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nContent-Length: 99999999999999999999\r\n\r\n");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
        assert_malformed(b"OPTIONS * RTSP/1.0\r\nA: \xff\r\n\r\n");
        assert_malformed(b"OPTI\xffNS * RTSP/1.0\r\n\r\n");
        // Request line judged as soon as it is complete.
        assert_malformed(b"GARBAGE\r\n");
        assert_malformed(b"GARBAGE\n");
    }

    #[test]
    fn duplicate_equal_content_length_is_fine() {
        let (r, _) = req(b"A * RTSP/1.0\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx");
        assert_eq!(r.body, b"x");
    }

    #[test]
    fn unknown_method_and_other_versions_parse() {
        let (r, _) = req(b"FROB rtsp://h/a RTSP/1.0\r\nCSeq: 3\r\n\r\n");
        assert_eq!(r.method, Method::Other("FROB".into()));
        let (r, _) = req(b"OPTIONS * RTSP/2.0\r\nCSeq: 3\r\n\r\n");
        assert_eq!(r.version, Version::V2_0);
        let (r, _) = req(b"OPTIONS * RTSP/1.1\r\nCSeq: 3\r\n\r\n");
        assert_eq!(r.version, Version::Other { major: 1, minor: 1 });
        assert_eq!(r.version.to_string(), "RTSP/1.1");
        // Methods are case-sensitive.
        let (r, _) = req(b"options * RTSP/1.0\r\n\r\n");
        assert_eq!(r.method, Method::Other("options".into()));
    }

    #[test]
    fn folded_headers_and_trimming() {
        let (r, _) = req(
            b"OPTIONS * RTSP/1.0\r\nA:  x, \r\n\t y \r\nB:\r\nSession: abc ; timeout=60\r\n\r\n",
        );
        assert_eq!(r.header("A"), Some("x, y"));
        assert_eq!(r.header("B"), Some(""));
        assert_eq!(r.session_id(), Some("abc"));
    }

    #[test]
    fn helpers() {
        let (r, _) = req(b"PLAY rtsp://h/a RTSP/1.0\r\nCSeq: nope\r\nSession: ;x\r\n\r\n");
        assert_eq!(r.cseq(), None);
        assert_eq!(r.session_id(), None);
        let (r, _) = req(b"PLAY rtsp://h/a RTSP/1.0\r\ncseq:  42 \r\nsession: 12345678\r\n\r\n");
        assert_eq!(r.cseq(), Some(42));
        assert_eq!(r.session_id(), Some("12345678"));
        for m in [
            "OPTIONS",
            "DESCRIBE",
            "SETUP",
            "PLAY",
            "PAUSE",
            "TEARDOWN",
            "GET_PARAMETER",
            "SET_PARAMETER",
            "ANNOUNCE",
            "RECORD",
            "REDIRECT",
            "X",
        ] {
            assert_eq!(Method::from_token(m).as_str(), m);
            assert_eq!(Method::from_token(m).to_string(), m);
        }
    }

    #[test]
    fn to_bytes_round_trip() {
        let r = Request {
            method: Method::Describe,
            uri: "rtsp://h/clip.ts".into(),
            version: Version::V1_0,
            headers: vec![("CSeq".into(), "2".into())],
            body: b"xyz".to_vec(),
        };
        let bytes = r.to_bytes();
        let (mut back, n) = req(&bytes);
        assert_eq!(n, bytes.len());
        assert_eq!(back.header("Content-Length"), Some("3"));
        back.headers.retain(|(n, _)| n != "Content-Length");
        assert_eq!(back, r);
    }

    #[test]
    fn path_only_uri_kept_raw() {
        let (r, _) = req(b"DESCRIBE /a/../b%20c RTSP/1.0\r\n\r\n");
        assert_eq!(r.uri, "/a/../b%20c");
    }
}

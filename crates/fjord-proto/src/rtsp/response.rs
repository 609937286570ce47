//! Building RTSP/1.0 responses.
//!
//! Rendered by hand: a status line and `Name: value` lines are a few `format!`s,
//! and rtsp-types' `Response` would force its `Headers` map (no duplicate or
//! ordered headers) and a fallible writer onto every answer.

/// A response to one request. `CSeq` and `Server` are added by [`Response::to_bytes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Value of the `Server` header on every response.
pub const SERVER: &str = "fjord/0.1";

impl Response {
    /// A response with this status, no headers and no body.
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// `200 OK`.
    pub fn ok() -> Self {
        Response::new(200)
    }

    /// Append a header (builder style).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.push_header(name, value);
        self
    }

    /// Append a header in place.
    pub fn push_header(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.headers.push((name.into(), value.into()));
    }

    /// Set the body together with its `Content-Type` (builder style).
    pub fn body(mut self, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        self.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("Content-Type"));
        self.headers
            .push(("Content-Type".to_owned(), content_type.to_owned()));
        self.body = body.into();
        self
    }

    /// The first header with this name (case-insensitive).
    pub fn get_header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Render: `RTSP/1.0 <status> <reason>`, `CSeq` (echoed if known),
    /// `Server`, the headers, `Content-Length` when the body is non-empty.
    /// CR, LF and NUL inside header names or values are replaced by spaces so
    /// a client-derived value can never inject a header.
    pub fn to_bytes(&self, cseq: Option<u32>) -> Vec<u8> {
        let status = if (100..=999).contains(&self.status) {
            self.status
        } else {
            500
        };
        let mut out = Vec::with_capacity(160 + self.body.len());
        out.extend_from_slice(format!("RTSP/1.0 {status} {}\r\n", reason(status)).as_bytes());
        let mut line = |name: &str, value: &str| {
            push_clean(&mut out, name);
            out.extend_from_slice(b": ");
            push_clean(&mut out, value);
            out.extend_from_slice(b"\r\n");
        };
        if let Some(c) = cseq {
            line("CSeq", &c.to_string());
        }
        let user_headers = self.headers.iter().filter(|(n, _)| {
            !n.eq_ignore_ascii_case("CSeq") && !n.eq_ignore_ascii_case("Content-Length")
        });
        if self.get_header("Server").is_none() {
            line("Server", SERVER);
        }
        for (n, v) in user_headers {
            line(n, v);
        }
        if !self.body.is_empty() {
            line("Content-Length", &self.body.len().to_string());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

fn push_clean(out: &mut Vec<u8>, s: &str) {
    out.extend(s.bytes().map(|b| match b {
        b'\r' | b'\n' | 0 => b' ',
        b => b,
    }));
}

/// Reason phrase for a status code (RFC 2326 §7.1.1); a generic phrase by
/// class for codes it does not list.
pub fn reason(status: u16) -> &'static str {
    known_reason(status).unwrap_or(match status / 100 {
        1 => "Informational",
        2 => "Success",
        3 => "Redirection",
        4 => "Client Error",
        5 => "Server Error",
        _ => "Unknown",
    })
}

fn known_reason(status: u16) -> Option<&'static str> {
    Some(match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        250 => "Low on Storage Space",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Moved Temporarily",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Time-out",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        415 => "Unsupported Media Type",
        451 => "Parameter Not Understood",
        452 => "Conference Not Found",
        453 => "Not Enough Bandwidth",
        454 => "Session Not Found",
        455 => "Method Not Valid in This State",
        456 => "Header Field Not Valid for Resource",
        457 => "Invalid Range",
        458 => "Parameter Is Read-Only",
        459 => "Aggregate operation not allowed",
        460 => "Only aggregate operation allowed",
        461 => "Unsupported transport",
        462 => "Destination unreachable",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Time-out",
        505 => "RTSP Version not supported",
        551 => "Option not supported",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_with_cseq_and_body() {
        let r = Response::ok()
            .header("Session", "1234;timeout=60")
            .body("application/sdp", b"v=0\r\n".to_vec());
        let s = String::from_utf8(r.to_bytes(Some(3))).unwrap();
        assert_eq!(
            s,
            "RTSP/1.0 200 OK\r\nCSeq: 3\r\nServer: fjord/0.1\r\nSession: 1234;timeout=60\r\n\
             Content-Type: application/sdp\r\nContent-Length: 5\r\n\r\nv=0\r\n"
        );
        assert_eq!(r.get_header("session"), Some("1234;timeout=60"));
    }

    #[test]
    fn no_cseq_no_body() {
        let s = String::from_utf8(Response::new(400).to_bytes(None)).unwrap();
        assert_eq!(s, "RTSP/1.0 400 Bad Request\r\nServer: fjord/0.1\r\n\r\n");
    }

    #[test]
    fn injection_is_neutralized() {
        let mut r = Response::new(454);
        r.push_header("Session", "a\r\nX-Evil: 1");
        let s = String::from_utf8(r.to_bytes(Some(1))).unwrap();
        assert!(s.contains("Session: a  X-Evil: 1\r\n"));
        assert_eq!(s.matches("\r\n").count(), 5);
    }

    #[test]
    fn own_cseq_and_length_headers_ignored_server_overridable() {
        let r = Response::ok()
            .header("CSeq", "99")
            .header("Content-Length", "7")
            .header("Server", "other");
        let s = String::from_utf8(r.to_bytes(Some(1))).unwrap();
        assert_eq!(s, "RTSP/1.0 200 OK\r\nCSeq: 1\r\nServer: other\r\n\r\n");
    }

    #[test]
    fn body_replaces_content_type() {
        let r = Response::ok().body("a/b", "x").body("c/d", "yz");
        assert_eq!(r.get_header("Content-Type"), Some("c/d"));
        assert_eq!(r.body, b"yz");
    }

    #[test]
    fn reasons() {
        for code in [
            200, 400, 403, 404, 405, 413, 414, 415, 453, 454, 455, 457, 459, 461, 500, 501, 503,
            505,
        ] {
            let r = reason(code);
            assert!(!r.is_empty());
            assert!(!["Success", "Client Error", "Server Error", "Unknown"].contains(&r));
        }
        assert_eq!(reason(455), "Method Not Valid in This State");
        assert_eq!(reason(299), "Success");
        assert_eq!(reason(499), "Client Error");
        assert_eq!(reason(599), "Server Error");
        assert_eq!(reason(199), "Informational");
        assert_eq!(reason(399), "Redirection");
        assert_eq!(reason(0), "Unknown");
    }

    #[test]
    fn out_of_range_status_becomes_500() {
        let s = String::from_utf8(Response::new(7).to_bytes(None)).unwrap();
        assert!(s.starts_with("RTSP/1.0 500 Internal Server Error\r\n"));
    }
}

//! An HTTP/1.1 download, planned without I/O: a request head in, a
//! response out — the bytes of its head and which bytes of the title's
//! file its body is (the server sends them by reference). Never panics on
//! any input; a head is parsed from the bytes given, never buffered here.
//!
//! GET and HEAD; one `Range` → 206 (several → the whole, 200, as RFC 9110
//! §14.2 allows), unsatisfiable → 416; `ETag`/`Last-Modified` validators
//! with `If-None-Match`, `If-Modified-Since` (→ 304) and `If-Range`;
//! CORS (an allowed origin on every response, OPTIONS preflights
//! answered) for web players. The target's path is taken only in its
//! canonical spelling; HTTP/1.1 without exactly one `Host` is a 400.

use std::{ops::Range, time::SystemTime};

/// What fjord reads of a request head.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The target's path in its one canonical form
    /// ([`crate::rtsp::url::canonical_path`]: percent-decoded, without its
    /// leading `/`); `None` when it names no title (empty, `.` or `..`
    /// components, `//`, NUL or control characters, bad encoding).
    pub path: Option<String>,
    /// The target's path as sent (still percent-encoded, no scheme,
    /// authority or query): what a log may show.
    pub target: String,
    /// The target's query as sent, after its `?` (no fragment); empty:
    /// none. A cluster's redirect keeps it, and reads its mark there.
    pub query: String,
    /// The connection stays open after the response.
    pub keep_alive: bool,
    /// The `Authorization` value, checked before any file is looked up.
    pub authorization: Option<String>,
    range: Option<String>,
    if_range: Option<String>,
    if_none_match: Option<String>,
    if_modified_since: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    /// A CORS preflight.
    Options,
    /// A method HTTP defines that a download does not take (405).
    NotAllowed,
    /// A method fjord does not know (501).
    Unknown,
}

/// The outcome of parsing what has arrived of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The head is not complete yet.
    Partial,
    /// A request whose head took this many bytes.
    Request(Request, usize),
    /// Not a request fjord answers: the status and why (the connection
    /// closes after the reply).
    Bad(u16, &'static str),
}

/// Headers a request may carry; more is a 431.
const MAX_HEADERS: usize = 64;

/// Parses the head at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::Bad(431, "too many header fields"),
        Err(_) => return Parsed::Bad(400, "not an HTTP/1.x request"),
    };
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(|v| v.trim().to_owned())
    };
    // fjord takes no request bodies: their bytes would be read as the next
    // request.
    let has_body =
        header("Transfer-Encoding").is_some() || header("Content-Length").is_some_and(|v| v != "0");
    if has_body {
        return Parsed::Bad(400, "request bodies are not accepted");
    }
    let Some(target) = req.path.and_then(raw_path) else {
        return Parsed::Bad(400, "the target is not a path");
    };
    if let Err(why) = host_is_valid(req.version, req.headers) {
        return Parsed::Bad(400, why);
    }
    let connection = header("Connection")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let keep_alive = match req.version {
        Some(1) => !connection.split(',').any(|t| t.trim() == "close"),
        _ => connection.split(',').any(|t| t.trim() == "keep-alive"),
    };
    let method = match req.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        Some("OPTIONS") => Method::Options,
        Some("POST" | "PUT" | "DELETE" | "PATCH" | "TRACE" | "CONNECT") => Method::NotAllowed,
        _ => Method::Unknown,
    };
    Parsed::Request(
        Request {
            method,
            path: crate::rtsp::url::canonical_path(&target[1..]).ok(),
            target: target.to_owned(),
            query: query_of(req.path.unwrap_or_default()).to_owned(),
            keep_alive,
            authorization: header("Authorization"),
            range: header("Range"),
            if_range: header("If-Range"),
            if_none_match: header("If-None-Match"),
            if_modified_since: header("If-Modified-Since"),
        },
        len,
    )
}

/// The path of an origin-form (`/a/b?q`) or absolute-form
/// (`http://host/a/b`) target, as sent, with its leading `/`.
pub fn raw_path(target: &str) -> Option<&str> {
    let target = match target.split_once("://") {
        Some((_, rest)) => &rest[rest.find('/')?..],
        None => target,
    };
    let path = target.split(['?', '#']).next()?;
    path.starts_with('/').then_some(path)
}

/// The query of a request target, as sent: between its `?` and any `#`.
fn query_of(target: &str) -> &str {
    let target = target.split('#').next().unwrap_or_default();
    target.split_once('?').map_or("", |(_, q)| q)
}

/// RFC 9112 §3.2: an HTTP/1.1 request carries exactly one `Host`, and no
/// request carries several or an invalid one (absolute-form targets too:
/// the target's authority wins, but the field must still be there).
fn host_is_valid(version: Option<u8>, headers: &[httparse::Header]) -> Result<(), &'static str> {
    let mut hosts = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("Host"));
    match (hosts.next(), hosts.next()) {
        (_, Some(_)) => Err("several Host header fields"),
        (None, _) if version == Some(1) => Err("an HTTP/1.1 request needs a Host header field"),
        (None, _) => Ok(()),
        (Some(h), None) => {
            // uri-host [":" port]: no whitespace, and none of what would
            // make it a path, userinfo or query.
            let bad =
                |b: &u8| b.is_ascii_whitespace() || b"/\\@?#,".contains(b) || !b.is_ascii_graphic();
            match h.value.iter().any(bad) {
                true => Err("an invalid Host header field"),
                false => Ok(()),
            }
        }
    }
}

/// The file a download sends, as its metadata says.
#[derive(Clone, Debug)]
pub struct Entity {
    pub size: u64,
    pub modified: SystemTime,
    /// A strong validator: the file's inode, size and modification time.
    pub etag: String,
    pub content_type: &'static str,
}

impl Entity {
    pub fn of(meta: &std::fs::Metadata, name: &str) -> Entity {
        use std::os::unix::fs::MetadataExt;
        let mtime_ns = meta.mtime() as i128 * 1_000_000_000 + i128::from(meta.mtime_nsec());
        Entity {
            size: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            etag: format!("\"{:x}-{:x}-{:x}\"", meta.ino(), meta.len(), mtime_ns),
            content_type: content_type(name),
        }
    }
}

/// The media type of a title by its name's extension.
pub fn content_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("ts" | "m2ts" | "mts") => "video/mp2t",
        Some("mp4" | "m4v") => "video/mp4",
        Some("m4a") => "audio/mp4",
        Some("aac") => "audio/aac",
        Some("mp3") => "audio/mpeg",
        Some("mpg" | "mpeg" | "ps" | "vob" | "m2v" | "m1v") => "video/mpeg",
        _ => "application/octet-stream",
    }
}

/// A response: its head, and the bytes of the file its body is.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    headers: Vec<(&'static str, String)>,
    /// File bytes that follow the head (none for HEAD, 304, errors).
    pub body: Option<Range<u64>>,
    /// A short text body (errors).
    text: String,
    /// The answer to a HEAD: the head says what a GET would get, no body
    /// follows.
    head_only: bool,
    pub close: bool,
}

impl Response {
    /// The reply to a request fjord does not serve: the status, why (as
    /// the body), and whether the connection closes after it.
    pub fn error(status: u16, why: &str, close: bool) -> Response {
        // An error is about this moment (a title being replaced, a
        // credential missing): no cache may keep it.
        let mut headers = vec![
            ("Content-Type", "text/plain; charset=utf-8".to_owned()),
            ("Cache-Control", "no-store".to_owned()),
        ];
        if status == 405 {
            headers.push(("Allow", "GET, HEAD".to_owned()));
        }
        Response {
            status,
            headers,
            body: None,
            text: format!("{why}\n"),
            head_only: false,
            close,
        }
    }

    /// A 200 with a body made here (a playlist) for `req`: the body only
    /// for GET.
    pub fn generated(req: &Request, content_type: &str, body: String) -> Response {
        let headers = vec![("Content-Type", content_type.to_owned())];
        let mut r = Response::to(req, 200, headers, body);
        r.head_only = req.method == Method::Head;
        r
    }

    /// A response to `req` that keeps its connection as the request asks.
    fn to(
        req: &Request,
        status: u16,
        mut headers: Vec<(&'static str, String)>,
        text: String,
    ) -> Response {
        if req.keep_alive {
            headers.push(("Connection", "keep-alive".to_owned()));
        }
        Response {
            status,
            headers,
            body: None,
            text,
            head_only: false,
            close: !req.keep_alive,
        }
    }

    /// The answer to an OPTIONS request (a CORS preflight): what a web
    /// player may ask for.
    pub fn preflight(req: &Request) -> Response {
        let headers = vec![
            ("Allow", "GET, HEAD, OPTIONS".to_owned()),
            ("Access-Control-Allow-Methods", "GET, HEAD".to_owned()),
            (
                "Access-Control-Allow-Headers",
                "Range, If-Range, If-None-Match, If-Modified-Since".to_owned(),
            ),
            ("Access-Control-Max-Age", "86400".to_owned()),
        ];
        Response::to(req, 204, headers, String::new())
    }

    /// Adds a header (e.g. a `WWW-Authenticate` challenge; repeatable).
    pub fn with_header(mut self, name: &'static str, value: String) -> Response {
        self.headers.push((name, value));
        self
    }

    /// Says how long caches may keep this response (`Cache-Control`),
    /// unless it is an error (those say `no-store`) or `value` is empty.
    pub fn cached(self, value: &str) -> Response {
        let keeps = matches!(self.status, 200 | 206 | 304);
        match keeps && !value.is_empty() {
            true => self.with_header("Cache-Control", value.to_owned()),
            false => self,
        }
    }

    /// Lets pages of `origin` (`*`: any) read this response, and the
    /// headers a player needs to see. One configured origin for every
    /// request: no `Vary: Origin` needed.
    pub fn allow_origin(mut self, origin: &str) -> Response {
        if !origin.is_empty() {
            self.headers
                .push(("Access-Control-Allow-Origin", origin.to_owned()));
            self.headers.push((
                "Access-Control-Expose-Headers",
                "Content-Length, Content-Range, Accept-Ranges, ETag".to_owned(),
            ));
        }
        self
    }

    /// The bytes of the head (and of a text body), given the time now.
    pub fn head(&self, now: SystemTime) -> Vec<u8> {
        use std::fmt::Write;
        let mut h = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        let _ = write!(
            h,
            "Date: {}\r\nServer: fjord\r\n",
            httpdate::fmt_http_date(now)
        );
        for (name, value) in &self.headers {
            let _ = write!(h, "{name}: {value}\r\n");
        }
        let bodiless = matches!(self.status, 204 | 304);
        if !bodiless && !self.headers.iter().any(|(n, _)| *n == "Content-Length") {
            let _ = write!(h, "Content-Length: {}\r\n", self.text.len());
        }
        if self.close {
            h.push_str("Connection: close\r\n");
        }
        h.push_str("\r\n");
        if !self.head_only {
            h.push_str(&self.text);
        }
        h.into_bytes()
    }

    /// This response as the answer to a HEAD: no body after the head.
    pub fn for_head(mut self) -> Response {
        self.head_only = true;
        self.body = None;
        self
    }

    /// The value of header `name` as planned (not `Date`, `Server`).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// The response to `req` for `file` (found under the roots).
pub fn respond(req: &Request, file: &Entity) -> Response {
    let close = !req.keep_alive;
    match req.method {
        Method::NotAllowed => return Response::error(405, "only GET and HEAD", close),
        Method::Unknown => return Response::error(501, "only GET and HEAD", close),
        Method::Options => return Response::preflight(req),
        Method::Get | Method::Head => {}
    }
    let mut headers = vec![
        ("Accept-Ranges", "bytes".to_owned()),
        ("ETag", file.etag.clone()),
        ("Last-Modified", httpdate::fmt_http_date(file.modified)),
    ];
    let keep = |mut r: Response| {
        if !close && req.keep_alive {
            r.headers.push(("Connection", "keep-alive".to_owned()));
        }
        r
    };
    if not_modified(req, file) {
        return keep(Response {
            status: 304,
            headers,
            body: None,
            text: String::new(),
            head_only: false,
            close,
        });
    }
    headers.push(("Content-Type", file.content_type.to_owned()));
    let (status, bytes) = match requested_range(req, file) {
        Ok(Some(r)) => {
            let last = r.end - 1;
            headers.push((
                "Content-Range",
                format!("bytes {}-{last}/{}", r.start, file.size),
            ));
            (206, r)
        }
        Ok(None) => (200, 0..file.size),
        Err(()) => {
            let mut r = Response::error(416, "the range is outside the file", close);
            r.headers
                .push(("Content-Range", format!("bytes */{}", file.size)));
            return keep(r);
        }
    };
    headers.push(("Content-Length", (bytes.end - bytes.start).to_string()));
    keep(Response {
        status,
        headers,
        body: (req.method == Method::Get && !bytes.is_empty()).then_some(bytes),
        text: String::new(),
        head_only: false,
        close,
    })
}

/// Whether the client's copy is current (RFC 9110 §13.2.2: If-None-Match,
/// else If-Modified-Since).
fn not_modified(req: &Request, file: &Entity) -> bool {
    if let Some(tags) = &req.if_none_match {
        return tags.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == file.etag
        });
    }
    let since = req
        .if_modified_since
        .as_deref()
        .and_then(|d| httpdate::parse_http_date(d).ok());
    since.is_some_and(|since| whole_seconds(file.modified) <= since)
}

fn whole_seconds(t: SystemTime) -> SystemTime {
    let s = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s)
}

/// The one range a GET asks for: `Ok(None)` for the whole file (no Range,
/// one fjord ignores — malformed, several ranges, an `If-Range` that does
/// not match), `Err` when unsatisfiable (416).
fn requested_range(req: &Request, file: &Entity) -> Result<Option<Range<u64>>, ()> {
    let Some(value) = req.range.as_deref().filter(|_| req.method == Method::Get) else {
        return Ok(None);
    };
    if let Some(cond) = &req.if_range {
        let matches = match httpdate::parse_http_date(cond) {
            Ok(date) => date == whole_seconds(file.modified),
            Err(_) => *cond == file.etag,
        };
        if !matches {
            return Ok(None);
        }
    }
    use http_range_header::RangeUnsatisfiableError as E;
    let ranges = match http_range_header::parse_range_header(value) {
        Ok(parsed) => parsed.validate(file.size),
        Err(_) => return Ok(None),
    };
    match ranges {
        Ok(r) if r.len() == 1 => Ok(Some(*r[0].start()..*r[0].end() + 1)),
        Ok(_) => Ok(None),
        Err(E::Unsatisfiable) => Err(()),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests;

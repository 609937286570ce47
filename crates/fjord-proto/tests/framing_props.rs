//! Property tests for `rtsp::framing::next_frame`.

use fjord_proto::rtsp::framing::{Frame, FrameError, Limits, Method, Request, Version, next_frame};
use proptest::prelude::*;

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        prop::sample::select(vec![
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
            "REDIRECT"
        ])
        .prop_map(Method::from_token),
        // A leading `$` is interleaved data by definition (RFC 2326 §10.12).
        "[A-Za-z_!#%&'*+.^`|~-][A-Za-z_!#$%&'*+.^`|~-]{0,11}".prop_map(|s| Method::from_token(&s)),
    ]
}

fn uri() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        "[a-zA-Z0-9._%~/-]{0,40}".prop_map(|p| format!("rtsp://host.example:8554/{p}")),
        "[!-~]{1,60}",
    ]
}

fn version() -> impl Strategy<Value = Version> {
    prop_oneof![
        Just(Version::V1_0),
        Just(Version::V2_0),
        (0u16..100, 0u16..100).prop_map(|(major, minor)| match (major, minor) {
            (1, 0) => Version::V1_0,
            (2, 0) => Version::V2_0,
            (major, minor) => Version::Other { major, minor },
        }),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(
        (
            "[A-Za-z][A-Za-z0-9-]{0,15}",
            prop_oneof![Just(String::new()), "[!-~]([ -~]{0,38}[!-~])?"],
        ),
        0..8,
    )
    .prop_map(|hs| {
        hs.into_iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("Content-Length"))
            .collect()
    })
}

fn request() -> impl Strategy<Value = Request> {
    (
        method(),
        uri(),
        version(),
        headers(),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(method, uri, version, headers, body)| Request {
            method,
            uri,
            version,
            headers,
            body,
        })
}

/// What `next_frame` should return for a rendered request (it adds Content-Length).
fn expected(r: &Request) -> Request {
    let mut e = r.clone();
    if !r.body.is_empty() {
        e.headers
            .push(("Content-Length".into(), r.body.len().to_string()));
    }
    e
}

fn junk() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            &b"OPTIONS"[..],
            b"SETUP",
            b" ",
            b"*",
            b"rtsp://h/a",
            b"RTSP/1.0",
            b"RTSP/2.0",
            b"\r\n",
            b"\r",
            b"\n",
            b":",
            b"Content-Length: ",
            b"Content-Length: 5",
            b"99999999999999999999",
            b"$",
            b"\x00\x05",
            b"\t",
            b"\xff",
        ])
        .prop_map(|s| s.to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

fn check_invariants(buf: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    match next_frame(buf, limits) {
        Ok(Some((frame, n))) => {
            prop_assert!(n > 0 && n <= buf.len());
            if let Frame::Request(r) = frame {
                prop_assert!(r.body.len() <= limits.max_body_bytes);
            }
        }
        Ok(None) => {
            prop_assert!(buf.len() <= limits.max_header_bytes + 4 + 65535 + limits.max_body_bytes)
        }
        Err(e) => {
            prop_assert!(e.status() == 400 || e.status() == 413);
            prop_assert!(e.closes_connection());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_bytes(buf in prop::collection::vec(any::<u8>(), 0..2000)) {
        check_invariants(&buf, &Limits::default())?;
    }

    #[test]
    fn never_panics_on_junk(buf in junk(), h in 0usize..300, b in 0usize..300) {
        check_invariants(&buf, &Limits::default())?;
        check_invariants(&buf, &Limits { max_header_bytes: h, max_body_bytes: b })?;
    }

    #[test]
    fn rendered_request_round_trips(r in request()) {
        let bytes = r.to_bytes();
        let (frame, n) = next_frame(&bytes, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(n, bytes.len());
        prop_assert_eq!(frame, Frame::Request(expected(&r)));
    }

    #[test]
    fn pipelined_requests_split(a in request(), b in request(), ch: u8,
                                data in prop::collection::vec(any::<u8>(), 0..100),
                                crlfs in 0usize..3) {
        let mut buf = a.to_bytes();
        buf.extend_from_slice(&b"\r\n".repeat(crlfs));
        buf.push(b'$');
        buf.push(ch);
        buf.extend_from_slice(&(data.len() as u16).to_be_bytes());
        buf.extend_from_slice(&data);
        buf.extend_from_slice(&b.to_bytes());
        let lim = Limits::default();
        let mut pos = 0;
        let mut frames = Vec::new();
        while let Some((f, n)) = next_frame(&buf[pos..], &lim).unwrap() {
            frames.push(f);
            pos += n;
        }
        prop_assert_eq!(pos, buf.len());
        prop_assert_eq!(frames, vec![
            Frame::Request(expected(&a)),
            Frame::Interleaved { channel: ch, payload: data },
            Frame::Request(expected(&b)),
        ]);
    }

    #[test]
    fn every_prefix_needs_more(r in request()) {
        let bytes = r.to_bytes();
        let lim = Limits::default();
        for k in 0..bytes.len() {
            prop_assert_eq!(next_frame(&bytes[..k], &lim), Ok(None), "prefix {}", k);
        }
    }

    #[test]
    fn agrees_with_rtsp_types(r in request()) {
        // rtsp-types only knows RTSP/1.0|2.0 and absolute URIs; compare there.
        prop_assume!(matches!(r.version, Version::V1_0 | Version::V2_0));
        prop_assume!(r.uri == "*" || r.uri.starts_with("rtsp://"));
        let bytes = r.to_bytes();
        let (theirs, n) = rtsp_types::Message::<Vec<u8>>::parse(&bytes).unwrap();
        prop_assert_eq!(n, bytes.len());
        let rtsp_types::Message::Request(theirs) = theirs else {
            return Err(TestCaseError::fail("rtsp-types saw no request"));
        };
        prop_assert_eq!(theirs.method(), &rtsp_types::Method::from(r.method.as_str()));
        prop_assert_eq!(theirs.body(), &r.body[..]);
        // rtsp-types keys headers by a name order that treats a prefix as
        // equal ("c" == "Content-Length") and mangles empty values; compare
        // only the headers that quirk cannot touch.
        let mut names: Vec<String> = r.headers.iter().map(|(n, _)| n.to_ascii_lowercase()).collect();
        names.push("content-length".into());
        for (name, value) in &r.headers {
            let lower = name.to_ascii_lowercase();
            let clash = names.iter().filter(|o| o.starts_with(&lower) || lower.starts_with(o.as_str())).count() > 1;
            if value.is_empty() || clash {
                continue;
            }
            let hn = rtsp_types::HeaderName::try_from(name.as_str()).unwrap();
            prop_assert_eq!(theirs.header(&hn).map(|v| v.as_str()), Some(value.as_str()));
        }
    }

    #[test]
    fn body_limit_enforced(len in 0usize..2000, max in 0usize..1000) {
        let buf = format!("ANNOUNCE rtsp://h/a RTSP/1.0\r\nContent-Length: {len}\r\n\r\n");
        let lim = Limits { max_header_bytes: 16384, max_body_bytes: max };
        let res = next_frame(buf.as_bytes(), &lim);
        if len > max {
            prop_assert_eq!(res, Err(FrameError::BodyTooLarge));
        } else if len > 0 {
            prop_assert_eq!(res, Ok(None));
        } else {
            prop_assert!(matches!(res, Ok(Some(_))));
        }
    }
}

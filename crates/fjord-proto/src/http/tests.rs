use super::*;
use proptest::prelude::*;

fn request(head: &str) -> Request {
    match parse(head.as_bytes()) {
        Parsed::Request(r, len) => {
            assert_eq!(len, head.len());
            r
        }
        other => panic!("{head:?}: {other:?}"),
    }
}

fn get(extra: &str) -> Request {
    request(&format!("GET /a%20b.ts HTTP/1.1\r\nHost: x\r\n{extra}\r\n"))
}

fn file() -> Entity {
    Entity {
        size: 1000,
        modified: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
        etag: "\"1-3e8-5\"".into(),
        content_type: "video/mp2t",
    }
}

fn text(r: &Response) -> String {
    String::from_utf8(r.head(SystemTime::UNIX_EPOCH)).unwrap()
}

#[test]
fn a_head_is_parsed_once_complete() {
    assert_eq!(parse(b"GET /x HTTP/1.1\r\nHost: x\r\n"), Parsed::Partial);
    let r = get("");
    assert_eq!(r.method, Method::Get);
    assert_eq!(
        r.path.as_deref(),
        Some("a b.ts"),
        "percent-decoded, without the slash"
    );
    assert_eq!(r.target, "/a%20b.ts", "as sent, for logs");
    assert!(r.keep_alive, "HTTP/1.1 keeps the connection by default");
    assert!(!request("GET /x HTTP/1.0\r\n\r\n").keep_alive);
    assert!(request("GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
    assert!(!get("Connection: close\r\n").keep_alive);
    assert_eq!(
        request("GET http://u:pw@h:8080/d/t.ts?x=1 HTTP/1.1\r\nHost: h\r\n\r\n").path,
        Some("d/t.ts".into())
    );
    let absolute = request("GET http://u:pw@h:8080/d/t.ts?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(absolute.target, "/d/t.ts", "no userinfo in what is logged");
    assert_eq!(absolute.query, "x=1");
    let marked = request("GET /t.ts/index.m3u8?a&fjord-placed=n1#f HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(
        marked.path.as_deref(),
        Some("t.ts/index.m3u8"),
        "the title without its query"
    );
    assert_eq!(marked.query, "a&fjord-placed=n1");
    assert_eq!(get("").query, "");
    assert_eq!(
        request("HEAD /t.ts HTTP/1.1\r\nHost: h\r\n\r\n").method,
        Method::Head
    );
    assert_eq!(
        request("POST /t.ts HTTP/1.1\r\nHost: h\r\n\r\n").method,
        Method::NotAllowed
    );
    assert_eq!(
        request("BREW /t.ts HTTP/1.1\r\nHost: h\r\n\r\n").method,
        Method::Unknown
    );
}

#[test]
fn a_target_names_a_title_only_in_its_canonical_spelling() {
    for alias in [
        "/d//t.ts",
        "/d/./t.ts",
        "/d/../t.ts",
        "/d/t.ts/",
        "/d%2Ft.ts",
        "/t%00.ts",
        "/",
    ] {
        let r = request(&format!("GET {alias} HTTP/1.1\r\nHost: h\r\n\r\n"));
        assert_eq!(r.path, None, "{alias}");
        assert_eq!(r.target, alias);
    }
}

/// RFC 9112 §3.2: 400 for an HTTP/1.1 request without Host, and for any
/// with several or an invalid one.
#[test]
fn a_request_names_its_host_once() {
    let bad = |head: &str| match parse(head.as_bytes()) {
        Parsed::Bad(400, why) => why,
        other => panic!("{head:?}: {other:?}"),
    };
    bad("GET /t.ts HTTP/1.1\r\n\r\n");
    bad("GET http://h/t.ts HTTP/1.1\r\n\r\n");
    bad("GET /t.ts HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    bad("GET /t.ts HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n");
    bad("GET /t.ts HTTP/1.1\r\nHost: a/b\r\n\r\n");
    bad("GET /t.ts HTTP/1.1\r\nHost: u@a\r\n\r\n");
    for ok in [
        "GET /t.ts HTTP/1.0\r\n\r\n",
        "GET /t.ts HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
        "GET http://h/t.ts HTTP/1.1\r\nHost: h\r\n\r\n",
    ] {
        request(ok);
    }
}

#[test]
fn web_players_on_other_origins_may_read_and_range() {
    let pre = request("OPTIONS /t.mp4/seg-1.m4s HTTP/1.1\r\nHost: h\r\nOrigin: http://a\r\n\r\n");
    assert_eq!(pre.method, Method::Options);
    let r = Response::preflight(&pre).allow_origin("*");
    let head = String::from_utf8(r.head(SystemTime::UNIX_EPOCH)).unwrap();
    assert!(head.starts_with("HTTP/1.1 204 No Content\r\n"), "{head}");
    assert!(
        head.contains("Access-Control-Allow-Headers: Range,"),
        "{head}"
    );
    assert!(
        head.contains("Access-Control-Allow-Origin: *\r\n"),
        "{head}"
    );
    assert!(!head.contains("\r\nContent-Length:"), "{head}");
    let get = request("GET /t.ts HTTP/1.1\r\nHost: h\r\nRange: bytes=0-9\r\n\r\n");
    let r = respond(&get, &file()).allow_origin("http://a");
    assert_eq!(r.header("Access-Control-Allow-Origin"), Some("http://a"));
    assert!(
        r.header("Access-Control-Expose-Headers")
            .unwrap()
            .contains("Content-Range")
    );
    let r = respond(&get, &file()).allow_origin("");
    assert_eq!(r.header("Access-Control-Allow-Origin"), None);
}

#[test]
fn what_is_not_a_download_request_is_refused() {
    assert!(matches!(
        parse(b"\x16\x03\x01 hello\r\n\r\n"),
        Parsed::Bad(400, _)
    ));
    assert!(matches!(
        parse(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n"),
        Parsed::Bad(400, _)
    ));
    assert!(matches!(
        parse(b"GET /t.ts HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"),
        Parsed::Bad(400, _)
    ));
    let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
    assert!(matches!(
        parse(format!("GET /t HTTP/1.1\r\nHost: h\r\n{many}\r\n").as_bytes()),
        Parsed::Bad(431, _)
    ));
    let r = respond(
        &request("DELETE /t.ts HTTP/1.1\r\nHost: h\r\n\r\n"),
        &file(),
    );
    assert_eq!(r.status, 405);
    assert!(text(&r).contains("Allow: GET, HEAD\r\n"));
    let r = respond(&request("BREW /t.ts HTTP/1.1\r\nHost: h\r\n\r\n"), &file());
    assert_eq!(r.status, 501);
}

#[test]
fn a_get_is_the_whole_file_and_a_head_its_headers() {
    let r = respond(&get(""), &file());
    assert_eq!((r.status, r.body.clone()), (200, Some(0..1000)));
    let t = text(&r);
    for h in [
        "Content-Length: 1000\r\n",
        "Content-Type: video/mp2t\r\n",
        "Accept-Ranges: bytes\r\n",
        "ETag: \"1-3e8-5\"\r\n",
        "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n",
    ] {
        assert!(t.contains(h), "{h} in {t}");
    }
    let head = respond(&request("HEAD /t.ts HTTP/1.1\r\nHost: h\r\n\r\n"), &file());
    assert_eq!((head.status, head.body.clone()), (200, None));
    assert!(text(&head).contains("Content-Length: 1000\r\n"));
}

#[test]
fn one_range_is_a_206_of_those_bytes() {
    let cases = [
        ("bytes=10-19", 10..20),
        ("bytes=990-", 990..1000),
        ("bytes=-5", 995..1000),
        ("bytes=900-5000", 900..1000),
    ];
    for (range, want) in cases {
        let r = respond(&get(&format!("Range: {range}\r\n")), &file());
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(r.body, Some(want.clone()), "{range}");
        let cr = format!("bytes {}-{}/1000", want.start, want.end - 1);
        assert_eq!(r.header("Content-Range"), Some(cr.as_str()));
        assert_eq!(
            r.header("Content-Length"),
            Some((want.end - want.start).to_string().as_str())
        );
    }
}

#[test]
fn unsatisfiable_ranges_are_416_and_others_the_whole_file() {
    let r = respond(&get("Range: bytes=1000-\r\n"), &file());
    assert_eq!((r.status, r.body.clone()), (416, None));
    assert_eq!(r.header("Content-Range"), Some("bytes */1000"));
    for ignored in ["bytes=0-1,5-9", "bytes=abc", "lines=1-2", "bytes=9-1"] {
        let r = respond(&get(&format!("Range: {ignored}\r\n")), &file());
        assert_eq!((r.status, r.body), (200, Some(0..1000)), "{ignored}");
    }
}

#[test]
fn validators_answer_304_and_guard_ranges() {
    for inm in ["\"1-3e8-5\"", "W/\"1-3e8-5\"", "\"x\", \"1-3e8-5\"", "*"] {
        let r = respond(&get(&format!("If-None-Match: {inm}\r\n")), &file());
        assert_eq!((r.status, r.body.clone()), (304, None), "{inm}");
        assert!(!text(&r).contains("Content-Length"), "no length on a 304");
    }
    let r = respond(&get("If-None-Match: \"other\"\r\n"), &file());
    assert_eq!(r.status, 200);
    let later = "If-Modified-Since: Wed, 15 Nov 2023 00:00:00 GMT\r\n";
    assert_eq!(respond(&get(later), &file()).status, 304);
    let earlier = "If-Modified-Since: Mon, 13 Nov 2023 00:00:00 GMT\r\n";
    assert_eq!(respond(&get(earlier), &file()).status, 200);
    let ranged = |cond: &str| {
        respond(
            &get(&format!("Range: bytes=0-9\r\nIf-Range: {cond}\r\n")),
            &file(),
        )
    };
    assert_eq!(ranged("\"1-3e8-5\"").status, 206);
    assert_eq!(ranged("Tue, 14 Nov 2023 22:13:20 GMT").status, 206);
    assert_eq!(
        ranged("\"stale\"").body,
        Some(0..1000),
        "a changed file is sent whole"
    );
}

proptest! {
    #[test]
    fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse(&bytes);
    }

    /// Whatever the Range, the body lies inside the file and is as long as
    /// Content-Length says.
    #[test]
    fn a_body_is_inside_the_file_and_as_long_as_said(
        range in "[ -~]{0,40}",
        a in 0u64..3000,
        b in 0u64..3000,
        size in 0u64..2000,
    ) {
        let entity = Entity { size, ..file() };
        for value in [range, format!("bytes={a}-{b}"), format!("bytes=-{a}"), format!("bytes={a}-")] {
            let head = format!("GET /t.ts HTTP/1.1\r\nHost: h\r\nRange: {value}\r\n\r\n");
            let Parsed::Request(req, _) = parse(head.as_bytes()) else { continue };
            let r = respond(&req, &entity);
            if let Some(body) = &r.body {
                prop_assert!(body.start < body.end && body.end <= size);
                let len = (body.end - body.start).to_string();
                prop_assert_eq!(r.header("Content-Length"), Some(len.as_str()));
            } else {
                prop_assert!(r.status == 416 || size == 0, "{} {value}", r.status);
            }
        }
    }
}

#[test]
fn a_generated_body_follows_its_head_and_a_head_request_gets_none() {
    let r = Response::generated(
        &get(""),
        "application/vnd.apple.mpegurl",
        "#EXTM3U\n".into(),
    );
    let t = text(&r);
    assert!(
        t.contains("Content-Length: 8\r\n") && t.ends_with("\r\n\r\n#EXTM3U\n"),
        "{t}"
    );
    let head = request("HEAD /t.ts/index.m3u8 HTTP/1.1\r\nHost: h\r\n\r\n");
    let t = text(&Response::generated(&head, "x/y", "#EXTM3U\n".into()));
    assert!(
        t.contains("Content-Length: 8\r\n") && t.ends_with("\r\n\r\n"),
        "{t}"
    );
}

#[test]
fn an_error_answering_a_head_has_no_body() {
    let t = text(&Response::error(404, "no such title", false).for_head());
    assert!(
        t.contains("Content-Length: 14\r\n") && t.ends_with("\r\n\r\n"),
        "{t}"
    );
}

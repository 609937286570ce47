//! HTTP download requests on arbitrary bytes: parsing never panics and
//! consumes within bounds; every response's body lies inside the file and
//! is as long as its Content-Length; every head ends its header block; a
//! path that names a title is in canonical form (no empty, `.` or `..`
//! component, no NUL, control character or backslash).
#![no_main]

use std::time::{Duration, SystemTime};

use fjord_proto::http::{Entity, Parsed, parse, respond};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pos = 0;
    while let Parsed::Request(req, n) = parse(&data[pos..]) {
        assert!(n > 0 && n <= data.len() - pos);
        pos += n;
        if let Some(path) = &req.path {
            for c in path.split('/') {
                assert!(!c.is_empty() && c != "." && c != "..", "{path:?}");
                assert!(
                    !c.chars().any(|ch| ch == '\\' || ch.is_control()),
                    "{path:?}"
                );
            }
        }
        for size in [0, 1, 188 * 1000] {
            let entity = Entity {
                size,
                modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
                etag: "\"1-2-3\"".into(),
                content_type: "video/mp2t",
            };
            let r = respond(&req, &entity);
            if let Some(body) = &r.body {
                assert!(body.start < body.end && body.end <= size);
                let len = (body.end - body.start).to_string();
                assert_eq!(r.header("Content-Length"), Some(len.as_str()));
            }
            let head = r.head(SystemTime::UNIX_EPOCH);
            let text = String::from_utf8(head).expect("heads are text");
            assert!(text.contains("\r\n\r\n"));
        }
    }
});

//! `next_frame` on arbitrary bytes: never panics, consumes within bounds,
//! and draining a buffer frame by frame terminates.
#![no_main]

use fjord_proto::rtsp::framing::{Frame, Limits, next_frame};
use fjord_proto::rtsp::{range, rate, transport, url};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let mut pos = 0;
    while pos < data.len() {
        match next_frame(&data[pos..], &limits) {
            Ok(Some((frame, n))) => {
                assert!(n > 0 && n <= data.len() - pos);
                pos += n;
                if let Frame::Request(r) = frame {
                    assert!(r.body.len() <= limits.max_body_bytes);
                    let _ = r.cseq();
                    let _ = r.session_id();
                    if let Ok(t) = url::title_path(&r.uri) {
                        assert!(!t.title.starts_with('/'));
                        assert!(
                            t.title
                                .split('/')
                                .all(|c| !c.is_empty() && c != ".." && c != ".")
                        );
                    }
                    if let Some(h) = r.header("Transport") {
                        let _ = transport::choose(h);
                    }
                    if let Some(h) = r.header("Range") {
                        let _ = range::parse_npt(h);
                    }
                    for name in ["Scale", "Speed"] {
                        if let Some(x) = r.header(name).and_then(|h| rate::parse(h, true)) {
                            assert!(x.is_finite() && x != 0.0);
                        }
                    }
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
});

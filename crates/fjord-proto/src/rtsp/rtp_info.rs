//! The `RTP-Info` header of a PLAY response (RFC 2326 §12.33).
//!
//! Formatted by hand: rtsp-types' `RtpInfo` stores the URL as `url::Url`,
//! which would re-normalize the exact URLs the client used.

use std::fmt::Write;

/// `url=rtsp://h/clip.ts/track1;seq=123;rtptime=456`, comma-joined.
/// Commas, semicolons and control characters in a URL (which would break the
/// list) are percent-encoded.
pub fn format(entries: &[(String, u16, u32)]) -> String {
    let mut out = String::new();
    for (i, (url, seq, rtptime)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("url=");
        for c in url.chars() {
            match c {
                ',' | ';' => {
                    let _ = write!(out, "%{:02X}", c as u32);
                }
                c if c.is_control() => {}
                c => out.push(c),
            }
        }
        let _ = write!(out, ";seq={seq};rtptime={rtptime}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_and_many() {
        assert_eq!(format(&[]), "");
        assert_eq!(
            format(&[("rtsp://h/clip.ts/track1".into(), 123, 456)]),
            "url=rtsp://h/clip.ts/track1;seq=123;rtptime=456"
        );
        assert_eq!(
            format(&[
                ("rtsp://h/a/track1".into(), 1, 2),
                ("rtsp://h/a/track2".into(), 65535, u32::MAX)
            ]),
            "url=rtsp://h/a/track1;seq=1;rtptime=2,url=rtsp://h/a/track2;seq=65535;rtptime=4294967295"
        );
    }

    #[test]
    fn separators_escaped() {
        assert_eq!(
            format(&[("rtsp://h/a,b;c\r\n".into(), 1, 2)]),
            "url=rtsp://h/a%2Cb%3Bc;seq=1;rtptime=2"
        );
    }

    #[test]
    fn rtsp_types_parses_it() {
        use rtsp_types::headers::{RTP_INFO, RtpInfos};
        let value = format(&[
            ("rtsp://h/a/track1".into(), 7, 8),
            ("rtsp://h/a/track2".into(), 9, 10),
        ]);
        let req = rtsp_types::Request::builder(rtsp_types::Method::Play, rtsp_types::Version::V1_0)
            .header(RTP_INFO, value)
            .empty();
        let infos = req.typed_header::<RtpInfos>().unwrap().unwrap();
        let RtpInfos::V1(v) = infos else {
            panic!("expected v1")
        };
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].seq, Some(9));
        assert_eq!(v[1].rtptime, Some(10));
        assert_eq!(v[0].uri.as_str(), "rtsp://h/a/track1");
    }
}

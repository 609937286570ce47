//! Unit tests of the load generator's pure parts: the receiver report's
//! layout, random starts, SDP parsing and one session's accounting.

use super::session::Sess;
use super::title::sdp_clock_rate;
use super::{gro_segments, random_starts, receiver_report, sdp_duration_s};
use crate::rtcp::{RtcpPacket, parse_rtcp_compound};

#[test]
fn receiver_report_layout() {
    let rr = receiver_report(1, 2, 3, 0x0102_0304, 0x0001_0005, 77, 0xaabb_ccdd, 65536);
    assert_eq!(&rr[..4], &[0x81, 201, 0, 7]);
    assert_eq!(&rr[4..12], &[0, 0, 0, 1, 0, 0, 0, 2]);
    assert_eq!(rr[12], 3);
    assert_eq!(&rr[13..16], &[0x02, 0x03, 0x04], "24-bit cumulative loss");
    assert_eq!(&rr[16..20], &[0, 1, 0, 5]);
    assert_eq!(u32::from_be_bytes(rr[20..24].try_into().unwrap()), 77);
    assert_eq!(&rr[24..28], &[0xaa, 0xbb, 0xcc, 0xdd]);
    assert_eq!(u32::from_be_bytes(rr[28..32].try_into().unwrap()), 65536);
    assert_eq!(
        parse_rtcp_compound(&rr),
        Some(vec![RtcpPacket::Other { pt: 201 }])
    );
}

#[test]
fn random_starts_stay_inside_their_titles() {
    let titles = vec![("a".to_string(), 100.0), ("b".to_string(), 30.0)];
    let starts = random_starts(&titles, 200, 20.0, 7);
    assert_eq!(starts.len(), 200);
    assert!(starts.iter().any(|s| s.url == "a") && starts.iter().any(|s| s.url == "b"));
    for s in &starts {
        let limit = if s.url == "a" { 80.0 } else { 10.0 };
        assert!((0.0..=limit).contains(&s.npt_s), "{s:?}");
    }
    assert_eq!(starts, random_starts(&titles, 200, 20.0, 7));
    assert_eq!(
        sdp_duration_s("v=0\r\na=range:npt=0-600.040\r\n"),
        Some(600.04)
    );
    assert_eq!(sdp_duration_s("a=range:npt=0-\r\n"), None);
}

#[test]
fn sdp_clock_rate_from_rtpmap() {
    let sdp = "v=0\r\nm=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\n";
    assert_eq!(sdp_clock_rate(sdp), Some(90_000));
    assert_eq!(sdp_clock_rate("v=0\r\n"), None);
}

#[test]
fn session_counts_a_gro_burst_and_a_replay() {
    let ms = 1_000_000i64;
    let mut s = Sess::new(0, 90_000, 2 * ms);
    let pkt = |seq: u16, ts: u32| {
        let mut p = vec![0x80, 33];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ts.to_be_bytes());
        p.extend_from_slice(&7u32.to_be_bytes());
        p.extend_from_slice(&[0x47; 188]);
        p
    };
    // A GSO burst of 3 packets, 1 ms of media apart, arriving together.
    let mut burst = Vec::new();
    for k in 0..3u16 {
        burst.extend_from_slice(&pkt(65534u16.wrapping_add(k), 90 * u32::from(k)));
    }
    for seg in gro_segments(&burst, 200) {
        s.on_rtp(seg, 0);
    }
    assert_eq!((s.packets, s.seq.lost(), s.timing.late), (3, 0, 0));
    // The title ends; the new PLAY starts elsewhere on the timeline.
    s.new_segment = true;
    s.on_rtp(&pkt(1, 5_000_000), 10_000 * ms);
    s.on_rtp(&pkt(2, 5_000_000 + 900), 10_013 * ms);
    assert_eq!((s.packets, s.seq.lost(), s.timing.late), (5, 0, 1));
    // It ends again and the server numbers packets by position: the
    // replay starts over at the first number, before its PLAY answer.
    s.new_segment = true;
    s.on_rtp(&pkt(65534, 0), 20_000 * ms);
    s.on_rtp(&pkt(65535, 90), 20_001 * ms);
    assert_eq!((s.packets, s.seq.lost(), s.seq.duplicates), (7, 0, 0));
    s.on_rtp(b"not rtp", 0);
    assert_eq!(s.garbage, 1);
}

//! Sender reports relayed to live viewers across a change of publisher
//! (`docs/live.md`, Viewing): a viewer there at the change gets none of
//! the new publisher's (their line differs from the last one's), one that
//! joins after gets them, from the report the new publisher sent before
//! its first packet on.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{Server, view_udp};
use crate::live::{SDP, USERS, publish_by_hand};

/// A new publisher that continues a stream is renumbered to follow the
/// last one; the last one's sender reports map the last one's clock, so
/// a viewer gets none of them once the new publisher's packets flow. Nor
/// does it get the new one's: their line differs from the last by the
/// time the stream was held, and a player would move its timeline at it
/// (ffmpeg dropped a frame). Only its BYE's report comes, on the wall
/// clock. A viewer that joins after the new publisher began gets the new
/// one's reports, the first from the report it sent before its first
/// packet (as ffmpeg does), before any packet.
#[test]
fn a_new_publisher_is_never_reported_on_the_last_ones_line() {
    use fjord_proto::rtcp::NtpTime;
    let server = Server::start(&format!("rtcp_interval_s = 1\nlive_grace_s = 2\n{USERS}"));
    let frame = |channel: u8, payload: &[u8]| {
        let mut f = vec![b'$', channel];
        f.extend((payload.len() as u16).to_be_bytes());
        f.extend(payload);
        f
    };
    // Publisher `k`'s packet i: its own timestamps (repeated in the
    // payload), from `base`; its reports' line: NTP `ntp0` at packet 0.
    let packet = |ssrc: u32, base: u32, i: u32| {
        let ts = base.wrapping_add(3600 * i);
        let mut p = vec![0x80, 96];
        p.extend((i as u16).to_be_bytes());
        p.extend(ts.to_be_bytes());
        p.extend(ssrc.to_be_bytes());
        p.push(if i.is_multiple_of(25) { 0x65 } else { 0x41 });
        p.extend(ts.to_be_bytes());
        p
    };
    let on = |(base, ntp0): (u32, u64), ntp: u64| {
        let ticks = (u128::from(ntp.wrapping_sub(ntp0)) * 90_000) >> 32;
        base.wrapping_add(ticks as u32)
    };
    let report = |ssrc: u32, line: (u32, u64), i: u32| {
        let ntp = line.1 + ((u64::from(i) * 40) << 32) / 1000;
        let mut sr = [0u8; 128];
        let n = fjord_proto::rtcp::sender_report(
            &mut sr,
            ssrc,
            NtpTime(ntp),
            on(line, ntp),
            1,
            1,
            "publisher",
            false,
        );
        sr[..n].to_vec()
    };
    // Two publishers' clocks a minute and 1e9 ticks apart.
    let (a, b) = (
        (1_000u32, 0xe000_0000_0000_0000u64),
        (1_000_001_000u32, 0xe000_003c_0000_0000u64),
    );
    // Sends 60 packets at 25 a second; a report before each packet of
    // `srs`.
    let publish = |s: &mut TcpStream, ssrc: u32, line: (u32, u64), srs: &[u32]| {
        let start = Instant::now();
        for i in 0u32..60 {
            let at = start + Duration::from_millis(40 * u64::from(i));
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if srs.contains(&i) {
                s.write_all(&frame(1, &report(ssrc, line, i))).unwrap();
            }
            s.write_all(&frame(0, &packet(ssrc, line.0, i))).unwrap();
        }
    };
    let mut first = TcpStream::connect(server.addr()).unwrap();
    publish_by_hand(&server, &mut first, "open/handover-sr", SDP);
    let url = server.url("open/handover-sr");
    let viewer = |after: Duration| {
        let url = url.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            view_udp(&url, Duration::from_secs(4), Duration::from_secs(20))
        })
    };
    let first_viewer = viewer(Duration::from_millis(800));
    publish(&mut first, 0xaaaa, a, &[2]);
    drop(first);
    server.wait_for_log("live stream held", Duration::from_secs(5));
    let mut second = TcpStream::connect(server.addr()).unwrap();
    publish_by_hand(&server, &mut second, "open/handover-sr", SDP);
    let second_sr = Instant::now() + Duration::from_millis(40 * 30);
    let late_viewer = viewer(Duration::from_millis(400));
    publish(&mut second, 0xbbbb, b, &[0, 30]);
    drop(second);
    let cap = first_viewer.join().unwrap();
    assert!(cap.saw_bye(), "no BYE: {:?}", cap.end);

    // Each publisher's shift into the viewer's numbering, seen in its
    // packets; the second's first packet.
    let shift = |x: &fjord_client::Received| {
        let ts = u32::from_be_bytes(x.payload[1..5].try_into().unwrap());
        x.rtp_ts.wrapping_sub(ts)
    };
    let p = &cap.packets;
    let is_second = |x: &&fjord_client::Received| {
        let ts = u32::from_be_bytes(x.payload[1..5].try_into().unwrap());
        ts.wrapping_sub(b.0) < 60 * 3600
    };
    let second_at = p
        .iter()
        .position(|x| is_second(&x))
        .expect("no packet of the second");
    let (shift_a, shift_b) = (shift(&p[0]), shift(&p[second_at]));
    assert!(p[..second_at].iter().all(|x| shift(x) == shift_a));
    assert!(p[second_at..].iter().all(|x| shift(x) == shift_b));
    let on_line = |(arrival, ntp, rtp_ts, _, _): (Instant, u64, u32, u32, u32)| {
        let of = |line, shift: u32| {
            (rtp_ts.wrapping_sub(shift).wrapping_sub(on(line, ntp)) as i32).abs() <= 1
        };
        match (of(a, shift_a), of(b, shift_b)) {
            (true, false) => ('a', arrival),
            (false, true) => ('b', arrival),
            _ => ('-', arrival),
        }
    };
    let lines: Vec<_> = crate::common::sender_reports(&cap)
        .into_iter()
        .map(on_line)
        .collect();
    let switch = p[second_at].arrival;
    let before: Vec<_> = lines.iter().filter(|&&(_, t)| t < switch).collect();
    assert!(
        !before.is_empty() && before.iter().all(|&&(l, _)| l == 'a'),
        "{lines:?}"
    );
    // After the switch (and past the second's report): the BYE's alone.
    let after: Vec<_> = lines
        .iter()
        .filter(|&&(_, t)| t > switch + Duration::from_millis(100))
        .collect();
    assert_eq!(after.len(), 1, "{lines:?}");
    assert_eq!(after[0].0, '-', "the BYE's report on a publisher's line");
    assert!(
        second_sr < after[0].1,
        "the BYE came before the second's report"
    );

    // The late viewer: the second's line from its first report on, which
    // goes before any packet and before the second's report at packet 30.
    let late = late_viewer.join().unwrap();
    let srs = crate::common::sender_reports(&late);
    let late_shift = shift(late.packets.first().expect("no packet"));
    let of_b = |&(_, ntp, rtp_ts, _, _): &(Instant, u64, u32, u32, u32)| {
        (rtp_ts.wrapping_sub(late_shift).wrapping_sub(on(b, ntp)) as i32).abs() <= 1
    };
    assert!(srs.len() >= 2, "{} reports", srs.len());
    assert!(srs[..srs.len() - 1].iter().all(of_b), "{srs:?}");
    let (arrival, _, _, packets, _) = srs[0];
    assert_eq!(packets, 0, "the first report goes before any packet");
    assert!(arrival < second_sr, "the first report is the early one's");
}

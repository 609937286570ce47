//! What a broadcast client reads from its channels (`fjord play
//! --broadcast`): any datagrams, source or repair, on any channel, never
//! panic the receiver, and every packet it holds, received or rebuilt by
//! FEC, has the length the schedule's table gives it.
#![no_main]

use std::net::Ipv4Addr;

use fjord_broadcast::schedule::{ChannelGroup, RepairFlow, SCHEDULE_VERSION, Schedule};
use fjord_broadcast::{Config, Packet, Plan, Scheme, Title};
use fjord_client::broadcast::{Margins, Receiver};
use libfuzzer_sys::fuzz_target;

const N: u32 = 40;

/// 40 packets of 20-59 bytes, 10 ms apart, staggered over 2 s starts,
/// with 4:2 repair blocks.
fn receiver() -> Receiver {
    let packets = (0..N)
        .map(|i| Packet {
            pts_ns: u64::from(i) * 10_000_000,
            bytes: 20 + i,
        })
        .collect();
    let title = Title::new(packets, vec![0, 20], u64::from(N) * 10_000_000).unwrap();
    let plan = Plan::new(title, Config::new(Scheme::Staggered, 200_000_000)).unwrap();
    let schedule = Schedule {
        version: SCHEDULE_VERSION,
        title: "fuzz.ts".into(),
        epoch_unix_ns: 0,
        ssrc: 0x0102_0304,
        seq0: 65_530,
        ts0: 7,
        clock_rate: 90_000,
        payload_type: 33,
        ttl: 1,
        channels: (0..plan.channels().len())
            .map(|c| ChannelGroup {
                group: Ipv4Addr::new(239, 255, 0, c as u8),
                port: 5004 + 2 * c as u16,
            })
            .collect(),
        plan: plan.description(),
        repair: Some(RepairFlow {
            ssrc: 0x0506_0708,
            payload_type: 96,
            k: 4,
            m: 2,
            symbol_len: 8 + 64,
        }),
    };
    let plan = schedule.check().unwrap();
    Receiver::new(&schedule, plan, 0, Margins::default())
}

/// An RTP packet of `ssrc`, `pt`, `seq` and `ts` carrying `payload`.
fn rtp(ssrc: u32, pt: u8, seq: u16, ts: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0x80, pt];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// One datagram from `head` (what to make: raw bytes, a source packet, a
/// repair packet with a fuzzed FEC payload ID) and `body`.
fn datagram(head: [u8; 4], body: &[u8]) -> Vec<u8> {
    let [kind, a, b, c] = head;
    let seq = 65_530u16.wrapping_add(u16::from(a));
    match kind % 3 {
        0 => body.to_vec(),
        1 => rtp(0x0102_0304, 33, seq, 7 + 900 * u32::from(b), body),
        _ => {
            let (sbn, k) = (u64::from(a % 12), u16::from(b % 6));
            let header = fjord_fec::RepairHeader::new(sbn, k, k + u16::from(c % 3), seq);
            let mut payload = header.to_bytes().to_vec();
            payload.extend_from_slice(body);
            rtp(
                0x0506_0708,
                96,
                0,
                7 + 900 * 4 * u32::from(a % 12),
                &payload,
            )
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut rx = receiver();
    let channels = rx.plan().channels().len();
    // Datagrams: a channel byte, four head bytes, a length byte, that many
    // bytes.
    let mut rest = data;
    let mut t_ns = 0;
    while let [c, k, a, b, d, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let dgram = datagram([*k, *a, *b, *d], &tail[..n]);
        rx.datagram(usize::from(*c) % channels, &dgram, t_ns);
        rest = &tail[n..];
        t_ns += 1_000_000;
    }
    let table = rx.plan().title().packets().to_vec();
    for i in 0..N {
        if let Some(p) = rx.reassembly.packet(i) {
            assert_eq!(p.payload.len(), table[i as usize].bytes as usize);
        }
    }
    assert!(rx.reassembly.received() <= u64::from(N));
    while rx.reassembly.pop_ready().is_some() {}
});

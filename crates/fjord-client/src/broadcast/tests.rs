//! Unit tests of broadcast reception: the schedule's JSON and checks,
//! identifying datagrams, reassembly, playout, the carousel, and whole
//! clients of every scheme through loss.

use std::ops::Range;

use fjord_broadcast::CHANNEL_LIMIT;
use fjord_broadcast::{Config, Packet, Scheme, Title};
use fjord_fec::SourcePacket;
use proptest::prelude::*;

use super::ranges::contains;
use super::*;

const S: u64 = 1_000_000_000;

/// A constant-rate title: `n` packets of `bytes`, one every `step_ns`,
/// a sync point every `gop` packets.
fn title(n: u32, bytes: u32, step_ns: u64, gop: u32) -> Title {
    let packets = (0..n)
        .map(|i| Packet {
            pts_ns: u64::from(i) * step_ns,
            bytes,
        })
        .collect();
    let sync = (0..n).step_by(gop as usize).collect();
    Title::new(packets, sync, u64::from(n) * step_ns).unwrap()
}

fn schedule(plan: &Plan) -> Schedule {
    Schedule {
        version: SCHEDULE_VERSION,
        title: "news.ts".into(),
        epoch_unix_ns: 1_700_000_000 * S,
        ssrc: 0x1234_5678,
        seq0: 65_000,
        ts0: 4_000_000_000,
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
        repair: None,
    }
}

/// A source packet of `payload`.
fn sp(payload: Vec<u8>) -> SourcePacket {
    SourcePacket {
        payload,
        marker: false,
        timestamp: 0,
    }
}

/// Packet i's payload: its index, then its low byte.
fn payload(i: u32, bytes: u32) -> Vec<u8> {
    let mut p = vec![i as u8; bytes as usize];
    let n = p.len().min(4);
    p[..n].copy_from_slice(&i.to_be_bytes()[..n]);
    p
}

fn rtp(s: &Schedule, i: u32, pts_ns: u64, body: &[u8]) -> Vec<u8> {
    let n = numbering(s);
    let mut p = vec![0x80, s.payload_type];
    p.extend_from_slice(&n.seq_of(i).to_be_bytes());
    p.extend_from_slice(&n.ts_of(pts_ns).to_be_bytes());
    p.extend_from_slice(&s.ssrc.to_be_bytes());
    p.extend_from_slice(body);
    p
}

#[test]
fn schedule_round_trips_as_json_with_the_published_field_names() {
    let plan = Plan::new(
        title(2000, 1316, 10_000_000, 50),
        Config::new(Scheme::Skyscraper { width: 52 }, 2 * S),
    )
    .unwrap();
    let s = schedule(&plan);
    let json = serde_json::to_vec(&s).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    for key in [
        "version",
        "title",
        "epoch_unix_ns",
        "ssrc",
        "seq0",
        "ts0",
        "clock_rate",
        "payload_type",
        "ttl",
        "channels",
        "plan",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
    assert_eq!(v["channels"][1]["group"], "239.255.0.1");
    assert_eq!(v["channels"][1]["port"], 5006);
    let (back, rebuilt) = Schedule::from_json(&json).unwrap();
    assert_eq!(back, s);
    assert_eq!(rebuilt.description(), plan.description());
}

/// The schedule of a staggered plan: a good one.
fn staggered_schedule() -> Schedule {
    let plan = Plan::new(
        title(1000, 188, 10_000_000, 25),
        Config::new(Scheme::Staggered, 3 * S),
    )
    .unwrap();
    schedule(&plan)
}

/// What `Schedule::from_json` says of `good` changed by `f`.
fn refused(good: &Schedule, f: &dyn Fn(&mut Schedule)) -> ScheduleError {
    let mut s = good.clone();
    f(&mut s);
    Schedule::from_json(&serde_json::to_vec(&s).unwrap()).unwrap_err()
}

#[test]
fn refuses_bad_schedules() {
    let good = staggered_schedule();
    let refused = |f: &dyn Fn(&mut Schedule)| refused(&good, f);
    assert!(matches!(
        refused(&|s| s.version = 2),
        ScheduleError::Version(2)
    ));
    assert!(matches!(
        refused(&|s| {
            s.channels.pop();
        }),
        ScheduleError::Invalid(_)
    ));
    assert!(matches!(
        refused(&|s| s.channels[0].group = Ipv4Addr::new(10, 0, 0, 1)),
        ScheduleError::Invalid(_)
    ));
    assert!(matches!(
        refused(&|s| s.channels[1] = s.channels[0]),
        ScheduleError::Invalid(_)
    ));
    assert!(matches!(
        refused(&|s| s.clock_rate = 0),
        ScheduleError::Invalid(_)
    ));
    assert!(matches!(
        refused(&|s| s.plan.config.max_channels = 1),
        ScheduleError::Invalid(_)
    ));
    assert!(matches!(
        refused(&|s| s.plan.packets[3][1] += 1),
        ScheduleError::Plan(_)
    ));
    let too_many = |s: &mut Schedule| {
        let c = s.plan.channels[0].clone();
        s.plan.channels = vec![c; CHANNEL_LIMIT + 1];
        s.channels = (0..=CHANNEL_LIMIT)
            .map(|p| ChannelGroup {
                group: Ipv4Addr::new(239, 1, 1, 1),
                port: 1 + p as u16,
            })
            .collect();
    };
    assert!(matches!(refused(&too_many), ScheduleError::Invalid(_)));
    assert!(matches!(
        Schedule::from_json(b"{"),
        Err(ScheduleError::Json(_))
    ));
    let huge = vec![b' '; MAX_SCHEDULE_BYTES + 1];
    assert!(matches!(
        Schedule::from_json(&huge),
        Err(ScheduleError::TooLarge(_))
    ));
}

#[test]
fn refuses_bad_repair_flows() {
    let flow = RepairFlow {
        ssrc: 1,
        payload_type: 96,
        k: 100,
        m: 10,
        symbol_len: 1324,
    };
    let good = staggered_schedule();
    for bad in [
        RepairFlow { k: 0, ..flow },
        RepairFlow { m: 0, ..flow },
        RepairFlow { k: 250, ..flow },
        RepairFlow {
            symbol_len: 8,
            ..flow
        },
        RepairFlow {
            ssrc: good.ssrc,
            ..flow
        },
    ] {
        let e = refused(&good, &|s| s.repair = Some(bad));
        assert!(matches!(e, ScheduleError::Invalid(_)), "{bad:?}: {e}");
    }
    let with_repair = Schedule {
        repair: Some(flow),
        ..good.clone()
    };
    let json = serde_json::to_vec(&with_repair).unwrap();
    assert_eq!(Schedule::from_json(&json).unwrap().0, with_repair);
}

#[test]
fn identifies_by_sequence_number_then_timestamp() {
    let n = Numbering {
        seq0: 65_530,
        ts0: u32::MAX - 10,
        clock_rate: 90_000,
    };
    let pts = |i: u32| u64::from(i) * 1_000_000; // 90 ticks apart
    let ranges = [10..20, 100..200_000];
    let id = |i: u32| identify(&ranges, pts, n, n.seq_of(i), n.ts_of(pts(i)));
    // Sequence numbers wrap; so do timestamps.
    assert_eq!(id(10), Some(10));
    assert_eq!(id(19), Some(19));
    // 100 + 65536 k: four packets share a sequence number.
    for i in [100, 65_636, 131_172, 196_708] {
        assert_eq!(id(i), Some(i));
    }
    // A timestamp a little off still picks the nearest.
    let near = identify(
        &ranges,
        pts,
        n,
        n.seq_of(65_636),
        n.ts_of(pts(65_636)) + 1000,
    );
    assert_eq!(near, Some(65_636));
    // Sequence numbers of no packet of these segments.
    let first = &ranges[..1];
    assert_eq!(identify(first, pts, n, n.seq_of(9), 0), None);
    assert_eq!(identify(first, pts, n, n.seq_of(20), 0), None);
    assert_eq!(identify(&[], pts, n, 0, 0), None);
}

/// Ascending, disjoint ranges from gaps and lengths.
fn ranges_of(parts: &[(u32, u32)]) -> Vec<Range<u32>> {
    let mut at = 0u32;
    parts
        .iter()
        .map(|&(gap, len)| {
            let r = at + gap..at + gap + len;
            at = r.end;
            r
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn identify_finds_every_packet_and_only_packets_of_the_ranges(
        parts in proptest::collection::vec((0u32..70_000, 1u32..60_000), 1..5),
        step_ns in 10_000u64..1_000_000,
        clock_rate in 1_000u32..200_000,
        seq0 in any::<u16>(),
        ts0 in any::<u32>(),
        picks in proptest::collection::vec(any::<proptest::sample::Index>(), 32),
        seq in any::<u16>(),
        ts in any::<u32>(),
    ) {
        let ranges = ranges_of(&parts);
        let n = Numbering { seq0, ts0, clock_rate };
        let pts = |i: u32| u64::from(i) * step_ns;
        let all: Vec<u32> = ranges.iter().flat_map(Clone::clone).collect();
        for p in &picks {
            let i = all[p.index(all.len())];
            prop_assert_eq!(identify(&ranges, pts, n, n.seq_of(i), n.ts_of(pts(i))), Some(i));
        }
        let got = identify(&ranges, pts, n, seq, ts);
        let exists = all.iter().any(|&i| n.seq_of(i) == seq);
        prop_assert_eq!(got.is_some(), exists);
        if let Some(j) = got {
            prop_assert!(contains(&ranges, j));
            prop_assert_eq!(n.seq_of(j), seq);
        }
    }
}

#[test]
fn reassembly_hands_out_the_contiguous_prefix() {
    let mut r = Reassembly::new(4);
    assert_eq!(r.insert(1, sp(vec![1])), Insert::New);
    assert_eq!(r.pop_ready(), None);
    assert_eq!(r.insert(1, sp(vec![9])), Insert::Duplicate);
    assert_eq!(r.insert(4, sp(vec![4])), Insert::OutOfRange);
    assert_eq!(r.insert(3, sp(vec![3, 3])), Insert::New);
    assert_eq!(r.missing(), vec![0..1, 2..3]);
    assert_eq!(r.held_bytes(), 3);
    assert_eq!(r.insert(0, sp(vec![0])), Insert::New);
    assert_eq!(r.pop_ready(), Some(vec![0]));
    assert_eq!(r.pop_ready(), Some(vec![1]));
    assert_eq!(r.pop_ready(), None);
    assert_eq!((r.taken(), r.held_bytes()), (2, 2));
    assert!(!r.is_complete());
    assert_eq!(r.insert(2, sp(vec![2])), Insert::New);
    assert_eq!(r.insert(0, sp(vec![7])), Insert::Duplicate);
    assert_eq!(r.pop_ready(), Some(vec![2]));
    assert_eq!(r.pop_ready(), Some(vec![3, 3]));
    assert_eq!(r.pop_ready(), None);
    assert!(r.is_complete());
    assert_eq!(r.missing(), vec![]);
    assert_eq!(r.received(), 4);
}

/// With FEC blocks, a packet taken before its block is whole stays for
/// the decoder, and goes once the block is whole.
#[test]
fn reassembly_keeps_taken_packets_until_their_block_is_whole() {
    let mut r = Reassembly::new(5).with_blocks(2);
    assert_eq!(r.insert(3, sp(vec![3])), Insert::New); // block 1 before the prefix
    assert_eq!(r.insert(2, sp(vec![2])), Insert::New);
    assert_eq!(r.insert(0, sp(vec![0])), Insert::New);
    assert_eq!(r.pop_ready(), Some(vec![0]));
    assert_eq!(r.packet(0).map(|p| p.payload.clone()), Some(vec![0]));
    assert_eq!(r.block(0), Some((0..2, 1)));
    assert_eq!(r.insert(1, sp(vec![1])), Insert::New);
    assert_eq!(r.packet(0), None, "block 0 whole: let go");
    assert_eq!(r.block(2), Some((4..5, 0)), "the short last block");
    let taken: Vec<Vec<u8>> = std::iter::from_fn(|| r.pop_ready()).collect();
    assert_eq!(taken, [vec![1], vec![2], vec![3]]);
    assert_eq!((r.packet(2), r.held_bytes()), (None, 0));
}

#[test]
fn playout_counts_late_packets_and_the_peak_held() {
    // Played at 100, 110, 120.
    let mut p = Playout::new(100, vec![(0, 10), (10, 20), (20, 40)]);
    assert!(!p.arrive(2, 50)); // held: 40
    assert!(!p.arrive(0, 60)); // 50
    assert!(p.arrive(1, 111)); // packet 0 played; 1 late
    assert_eq!((p.late(), p.peak_bytes()), (1, 50));
    let mut q = Playout::new(0, vec![(5, 1), (6, 1)]);
    assert!(!q.arrive(0, 5)); // at its play time: on time, never held
    assert!(q.arrive(1, 7));
    assert_eq!((q.late(), q.peak_bytes()), (1, 0));
}

#[test]
fn shows_ranges_for_people() {
    assert_eq!(show_ranges(&[0..5, 9..10, 12..14], 9), "0-4, 9, 12-13");
    assert_eq!(show_ranges(&[0..1, 3..4], 1), "0, (and 1 more ranges)");
}

#[test]
fn carousel_joins_leaves_and_repairs_within_bounds() {
    let plan = Plan::new(
        title(600, 1000, 100_000_000, 10),
        Config::new(Scheme::Harmonic, 10 * S),
    )
    .unwrap();
    let join = plan.join(3 * S);
    let m = Margins {
        ahead_ns: 5,
        grace_ns: 7,
    };
    let shifted = Carousel::new(&plan, &join, m);
    for (t, l) in shifted.tunes.iter().zip(&join.listens) {
        assert_eq!(
            (t.join_ns, t.window_end_ns),
            (l.listen.start - 5, l.listen.end + 7)
        );
    }
    let mut k = Carousel::new(&plan, &join, Margins::default());
    assert_eq!(k.uncovered(600), vec![]);
    let acts = k.step(3 * S);
    assert_eq!(
        acts.len(),
        k.tunes.len(),
        "harmonic hears every channel at once"
    );
    assert!(
        k.tunes
            .iter()
            .all(|t| t.joined && t.state == TuneState::Listening)
    );
    // Everything but packet 0 arrives.
    let mut r = Reassembly::new(600);
    for i in 1..600 {
        r.insert(i, sp(vec![0]));
        k.got(i);
    }
    let acts = k.step(3 * S);
    assert_eq!(acts.len(), k.tunes.len() - 1);
    assert!(
        acts.iter()
            .all(|a| matches!(a, Action::Leave(c) if *c != 0))
    );
    let t0 = k.tunes.iter().position(|t| t.channel == 0).unwrap();
    assert_eq!(k.missing_of(t0, |i| r.has(i)), vec![0..1]);
    // Past its window it stays (repair by the carousel)...
    let end = k.tunes[t0].window_end_ns;
    assert_eq!(k.next_deadline(), Some(end));
    assert!(k.step(end).is_empty());
    assert!(k.tunes[t0].extended && k.listening(0));
    // ...for REPAIR_PERIODS periods, then gives up.
    let give_up = k.tunes[t0].give_up_ns;
    assert_eq!(give_up - end, REPAIR_PERIODS * plan.channels()[0].period_ns);
    assert_eq!(k.next_deadline(), Some(give_up));
    assert_eq!(k.step(give_up), vec![Action::Leave(0)]);
    assert_eq!(k.tunes[t0].state, TuneState::GaveUp);
    assert!(k.is_finished());
    assert_eq!(k.next_deadline(), None);
}

#[test]
fn carousel_skips_a_channel_whose_packets_came_already() {
    let plan = Plan::new(
        title(600, 1000, 100_000_000, 10),
        Config::new(Scheme::Skyscraper { width: 52 }, 10 * S),
    )
    .unwrap();
    let mut k = Carousel::new(&plan, &plan.join(0), Margins::default());
    for i in 0..600 {
        k.got(i);
    }
    assert!(k.step(0).is_empty());
    assert!(k.is_finished());
    assert!(k.tunes.iter().all(|t| !t.joined));
}

/// What a fake network did to a client.
struct Run {
    rx: Receiver,
    out: Vec<u8>,
}

/// A client arriving at `arrival_ns` hears the channels' emissions at
/// their due times while its carousel listens, losing those `lose`
/// says, plus stray datagrams; returns what it did.
fn run(plan: &Plan, arrival_ns: u64, lose: &dyn Fn(u64) -> bool) -> Run {
    let s = schedule(plan);
    let mut rx = Receiver::new(&s, plan.clone(), arrival_ns, Margins::default());
    let packets = plan.title().packets().to_vec();
    let mut cursors: Vec<_> = (0..plan.channels().len())
        .map(|c| plan.emissions_from(c, arrival_ns).peekable())
        .collect();
    let (mut out, mut k) = (Vec::new(), 0u64);
    let longest = plan.channels().iter().map(|c| c.period_ns).max().unwrap();
    let limit = arrival_ns
        + plan.worst_wait_ns()
        + plan.title().duration_ns()
        + (REPAIR_PERIODS + 1) * longest;
    loop {
        let next = (0..cursors.len())
            .filter_map(|c| cursors[c].peek().map(|e| (e.due_ns, c)))
            .min();
        let Some((t, c)) = next.filter(|&(t, _)| t < limit) else {
            break;
        };
        let e = cursors[c].next().unwrap();
        rx.carousel.step(t);
        if rx.carousel.is_finished() {
            break;
        }
        if !rx.carousel.listening(c) {
            continue;
        }
        k += 1;
        if lose(k) {
            continue;
        }
        let p = packets[e.packet as usize];
        let body = payload(e.packet, p.bytes);
        rx.datagram(c, &rtp(&s, e.packet, p.pts_ns, &body), t);
        if k % 1000 == 0 {
            // Strays: another SSRC, garbage, a sequence number of
            // another channel's segment, a wrong length.
            let mut other = rtp(&s, e.packet, p.pts_ns, &body);
            other[8] ^= 1;
            assert_eq!(rx.datagram(c, &other, t), Outcome::Ignored);
            assert_eq!(rx.datagram(c, b"junk", t), Outcome::Ignored);
            let short = rtp(&s, e.packet, p.pts_ns, &body[1..]);
            assert_eq!(rx.datagram(c, &short, t), Outcome::Ignored);
        }
        while let Some(p) = rx.reassembly.pop_ready() {
            out.extend_from_slice(&p);
        }
    }
    rx.carousel.step(limit);
    Run { rx, out }
}

fn whole(plan: &Plan) -> Vec<u8> {
    let packets = plan.title().packets();
    (0..packets.len() as u32)
        .flat_map(|i| payload(i, packets[i as usize].bytes))
        .collect()
}

fn plans() -> Vec<Plan> {
    // 60 s at 1 Mbit/s in 1316-byte packets, a sync point every 0.5 s.
    let t = title(5700, 1316, 60 * S / 5700, 47);
    Scheme::ALL
        .iter()
        .map(|&scheme| Plan::new(t.clone(), Config::new(scheme, 5 * S)).unwrap())
        .collect()
}

#[test]
fn a_client_of_every_scheme_gets_the_title_on_time_with_the_planned_buffer() {
    for plan in plans() {
        for arrival in [0, 7 * S / 3, 31 * S] {
            let r = run(&plan, arrival, &|_| false);
            let name = plan.config().scheme.name();
            assert!(r.rx.reassembly.is_complete(), "{name} at {arrival}");
            assert_eq!(r.out, whole(&plan), "{name} at {arrival}");
            assert_eq!(r.rx.stats.late, 0, "{name} at {arrival}");
            assert_eq!(
                r.rx.playout.peak_bytes(),
                r.rx.join.peak_buffer_bytes,
                "{name} at {arrival}"
            );
            assert!(r.rx.stats.ignored > 0);
            assert!(
                r.rx.carousel
                    .tunes
                    .iter()
                    .all(|t| t.state == TuneState::Done)
            );
            assert!(r.rx.carousel.tunes.iter().all(|t| !t.extended));
        }
    }
}

#[test]
fn the_carousel_repairs_losses() {
    for plan in plans() {
        // About 2 % lost, deterministically.
        let lose = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58 == 0;
        let r = run(&plan, 4 * S, &lose);
        let name = plan.config().scheme.name();
        assert!(r.rx.reassembly.is_complete(), "{name}");
        assert_eq!(r.out, whole(&plan), "{name}");
        assert!(r.rx.carousel.tunes.iter().any(|t| t.extended), "{name}");
        assert!(r.rx.carousel.is_finished());
    }
}

#[test]
fn a_client_gives_up_on_a_channel_that_never_delivers() {
    let plan = &plans()[3]; // harmonic
    let s = schedule(plan);
    let mut rx = Receiver::new(&s, plan.clone(), 0, Margins::default());
    rx.carousel.step(0);
    let packets = plan.title().packets();
    // Every channel but the last delivers everything.
    let last = plan.channels().len() - 1;
    let lost = channel_packets(plan, last);
    for i in 0..packets.len() as u32 {
        if !contains(&lost, i) {
            let body = payload(i, packets[i as usize].bytes);
            let c = (0..last)
                .find(|&c| contains(&channel_packets(plan, c), i))
                .unwrap();
            rx.datagram(c, &rtp(&s, i, packets[i as usize].pts_ns, &body), 0);
        }
    }
    let t = rx
        .carousel
        .tunes
        .iter()
        .position(|t| t.channel == last)
        .unwrap();
    rx.carousel.step(rx.carousel.tunes[t].join_ns);
    assert!(rx.carousel.listening(last));
    assert!(!rx.carousel.listening(0));
    let give_up = rx.carousel.tunes[t].give_up_ns;
    assert_eq!(rx.carousel.step(give_up - 1), vec![]);
    assert_eq!(rx.carousel.step(give_up), vec![Action::Leave(last)]);
    assert_eq!(rx.reassembly.missing(), lost);
    assert_eq!(rx.carousel.missing_of(t, |i| rx.reassembly.has(i)), lost);
}

#[test]
fn identifies_on_a_channel_spanning_more_than_2_16_packets() {
    // 70,000 packets of 100 bytes, 1 ms apart: staggered channels carry
    // all of them, so sequence numbers repeat within a channel.
    let plan = Plan::new(
        title(70_000, 100, 1_000_000, 1000),
        Config::new(Scheme::Staggered, 35 * S),
    )
    .unwrap();
    let r = run(&plan, 10 * S, &|_| false);
    assert!(r.rx.reassembly.is_complete());
    assert_eq!(r.out, whole(&plan));
    assert_eq!(r.rx.stats.late, 0);
}

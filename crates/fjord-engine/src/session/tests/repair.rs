//! The repair stream: each block's repair packets after it, from the
//! sidecar or encoded live.

use fjord_fec::{RepairHeader, symbol::REPAIR_HEADER_LEN};

use super::*;
use crate::command::RepairSpec;

/// A 10-packet title with 4:2 parity (a short last block), its sidecar
/// attached; `live`: sessions encode the repair symbols themselves.
fn protected_title(dir: &std::path::Path, live: bool) -> Title {
    use fjord_fec::{FecChoice, FecParams};

    let media = dir.join("t.ts");
    if !media.exists() {
        let choice = FecChoice::Fixed(FecParams::new(4, 2).unwrap());
        let layouts = fjord_fec::layouts(choice);
        drop(write_constant_rate(&media, 188, 10 * MS, 10, &layouts).unwrap());
        fjord_fec::protect(&media, &mut |_, _| {}).unwrap();
    }
    let index = Index::open(&index::index_path_for(&media)).unwrap();
    let mut title = Title::new(index, &media).unwrap();
    title
        .attach_fec(
            &fjord_fec::sidecar_path_for(&media),
            &index::index_path_for(&media),
            index::Check::Now,
        )
        .unwrap();
    assert!(!live || title.encode_parity_live());
    title
}

/// A repair stream (SSRC 0x5678, PT 100) whose RTCP goes to `rtcp`.
fn repair_spec(seq0: u16, rtcp: &UdpSocket) -> RepairSpec {
    RepairSpec {
        ssrc: 0x5678,
        seq0,
        payload_type: 100,
        output: Output::Udp {
            rtp: udp().into(),
            rtp_peer: "127.0.0.1:9".parse().unwrap(),
            rtcp: udp().into(),
            rtcp_peer: rtcp.local_addr().unwrap(),
        },
    }
}

/// Repair symbols encoded on the fly as the packets leave (the bench's
/// model of a server without stored parity) are the sidecar's bytes,
/// the short last block included.
#[test]
fn live_parity_equals_the_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let repairs = |live: bool| {
        let title = protected_title(dir.path(), live);
        let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = session(Arc::new(title), &rtcp);
        let spec = repair_spec(7, &rtcp);
        assert!(s.attach_repair(spec, "test"));
        s.play(Start::Resume, Until::Previous, 1, Instant::now());
        let t0 = Instant::now();
        s.start(t0, 0);
        (0..7)
            .map(|_| tick(&mut s, t0 + Duration::from_secs(1), usize::MAX).0)
            .collect::<Vec<_>>()
    };
    let (stored, live) = (repairs(false), repairs(true));
    assert_eq!(
        stored.iter().map(Vec::len).collect::<Vec<_>>(),
        [4, 2, 4, 2, 2, 2, 0]
    );
    assert!(
        stored == live,
        "live-encoded repair packets differ from the sidecar's"
    );
}

/// A broadcast channel's segment, packets 2..7 of blocks 0..4 and
/// 4..8: every round sends block 0's repair packets after packet 3 and
/// block 1's after packet 6, the end of the round, though neither
/// block lies whole in the segment (receivers hold the rest from other
/// channels).
#[test]
fn a_loop_sends_the_repair_packets_of_every_block_it_touches() {
    let dir = tempfile::tempdir().unwrap();
    let title = Arc::new(protected_title(dir.path(), false));
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title.clone(), &rtcp);
    assert!(s.attach_repair(repair_spec(30_000, &rtcp), "test"));
    let start = Start::At {
        ns: 20 * MS,
        packet: 2,
    };
    let until = Until::Loop {
        ns: 70 * MS,
        packet: 7,
        period: Duration::ZERO,
    };
    let info = s.play(start, until, 1, Instant::now());
    let seq0 = info.seq.wrapping_sub(2);
    let t0 = Instant::now();
    s.start(t0, 20 * MS);
    // Each packet sent: `S<index>` or `R<block>`.
    let mut sent = Vec::new();
    let mut now = t0;
    while sent.len() < 18 && now < t0 + Duration::from_secs(2) {
        for (seq, _, payload) in tick(&mut s, now, usize::MAX).0 {
            sent.push(match seq.wrapping_sub(30_000) < 100 {
                true => format!("R{}", RepairHeader::parse(&payload).unwrap().0.sbn),
                false => format!("S{}", seq.wrapping_sub(seq0)),
            });
        }
        now += Duration::from_millis(5);
    }
    let round = ["S2", "S3", "R0", "R0", "S4", "S5", "S6", "R1", "R1"];
    assert_eq!(sent, [round, round].concat(), "two rounds");
}

/// With a repair stream, each block's source packets leave in one tick
/// and its M repair packets in the next, before any packet of the next
/// block: RTP header of the repair stream (own SSRC and sequence, the
/// timestamp of the block's first source packet as sent), the FEC
/// payload ID (`seq_base` = that packet's sequence number) and the
/// sidecar's bytes, which rebuild lost source packets.
#[test]
fn repair_packets_follow_their_block() {
    use fjord_fec::{BlockDecoder, SourcePacket};

    let dir = tempfile::tempdir().unwrap();
    let title = Arc::new(protected_title(dir.path(), false));
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title.clone(), &rtcp);
    let repair_output = || repair_spec(65535, &rtcp);
    assert!(s.attach_repair(repair_output(), "test"));
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 0);
    let late = t0 + Duration::from_secs(1);
    let mut ticks = vec![];
    for _ in 0..7 {
        ticks.push(tick(&mut s, late, usize::MAX).0);
    }
    let lens: Vec<usize> = ticks.iter().map(Vec::len).collect();
    assert_eq!(lens, [4, 2, 4, 2, 2, 2, 0], "source, repair, source, ...");
    let fec = title.fec(0).unwrap();
    // The repair stream reports for itself and ends with its own BYE;
    // its final report counts every repair packet and payload octet.
    let repair_octets: u32 = (0..3)
        .map(|b| 2 * (REPAIR_HEADER_LEN as u32 + fec.block(b).unwrap().symbol_len))
        .sum();
    // The BYEs leave BYE_DELAY after the last packet did.
    assert!(tick(&mut s, late + BYE_DELAY, usize::MAX).0.is_empty());
    rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 512];
    let last_repair_report = loop {
        let n = rtcp.recv(&mut buf).expect("the repair stream's BYE");
        let items = parse_compound(&buf[..n]).unwrap();
        let bye = items
            .iter()
            .any(|i| matches!(i, RtcpInfo::Bye { ssrcs } if ssrcs == &[0x5678]));
        if bye {
            break items;
        }
    };
    assert!(
        matches!(
            last_repair_report[0],
            RtcpInfo::SenderReport { ssrc: 0x5678, packets: 6, octets, .. } if octets == repair_octets
        ),
        "{last_repair_report:?}"
    );
    let mut repair_seq = 65535u16;
    for (b, (sources, repairs)) in ticks.chunks(2).take(3).map(|t| (&t[0], &t[1])).enumerate() {
        let blk = fec.block(b as u64).unwrap();
        let ts_base = sources[0].1;
        let mut dec = BlockDecoder::new();
        dec.reset(blk.source_count, blk.repair_count);
        for (j, (seq, ts, payload)) in repairs.iter().enumerate() {
            assert_eq!((*seq, *ts), (repair_seq, ts_base), "block {b} repair {j}");
            repair_seq = repair_seq.wrapping_add(1);
            let (h, symbol) = RepairHeader::parse(payload).unwrap();
            assert_eq!(
                h,
                RepairHeader {
                    sbn: b as u32,
                    esi: blk.source_count as u8 + j as u8,
                    k: blk.source_count,
                    seq_base: sources[0].0,
                }
            );
            let (off, len) = blk.repair_symbol_range(j as u16).unwrap();
            let want = &title.fec(0).unwrap().repair_data(&blk).unwrap()
                [(off - blk.repair_off) as usize..][..len];
            assert_eq!(symbol, want, "block {b} repair {j}: sidecar bytes");
            dec.add_repair(&h, *ts, symbol).unwrap();
        }
        // Lose the block's first two source packets; the repair rebuilds them.
        for (seq, ts, payload) in &sources[2..] {
            let esi = seq.wrapping_sub(sources[0].0);
            let packet = SourcePacket {
                payload: payload.clone(),
                marker: false,
                timestamp: *ts,
            };
            dec.add_source(esi, packet).unwrap();
        }
        let got = dec.recover().unwrap();
        let want: Vec<(u16, SourcePacket)> = sources[..2]
            .iter()
            .enumerate()
            .map(|(i, (_, ts, payload))| {
                (
                    i as u16,
                    SourcePacket {
                        payload: payload.clone(),
                        marker: false,
                        timestamp: *ts,
                    },
                )
            })
            .collect();
        assert_eq!(got, want, "block {b}: rebuilt");
    }

    // A seek into the middle of a block: that block gets no repair
    // packets (part of it was never sent), the next one does.
    let info = s.play(
        Start::at(&title, 0, 50 * MS),
        Until::Previous,
        1,
        Instant::now(),
    );
    assert_eq!(info.packet, 5);
    s.start(late, info.time_ns);
    let a = tick(&mut s, late + Duration::from_secs(1), usize::MAX).0;
    let b = tick(&mut s, late + Duration::from_secs(1), usize::MAX).0;
    let c = tick(&mut s, late + Duration::from_secs(1), usize::MAX).0;
    assert_eq!((a.len(), b.len(), c.len()), (3, 2, 2));
    assert_eq!(b[0].2, vec![8; 188]);
    assert_eq!(RepairHeader::parse(&c[0].2).unwrap().0.seq_base, b[0].0);

    // A title without parity cannot take a repair stream.
    let (plain, _) = prefixed_title(dir.path());
    let mut s = session(plain.clone(), &rtcp);
    assert!(!s.attach_repair(repair_output(), "test"));
}

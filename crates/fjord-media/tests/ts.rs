//! Packetization of synthetic transport streams.

mod synth;

use fjord_media::plan::FLAG_KEY_FRAME_END;
use fjord_media::ts::{
    FLAG_RANDOM_ACCESS, PacketRecord, Packetization, TimingSource, TsError, TsOptions,
    looks_like_ts, packetize,
};
use synth::{MS, PCR_WRAP, Stream};

const MS_NS: u64 = 1_000_000;

fn opts(n: u8) -> TsOptions {
    TsOptions {
        ts_per_rtp: n,
        ..TsOptions::default()
    }
}

fn run(data: &[u8]) -> Packetization {
    packetize(data, &TsOptions::default()).expect("packetize")
}

/// Ordinal of the first TS packet of each record, assuming no garbage.
fn first_ordinal(r: &PacketRecord) -> u64 {
    r.offset / 188
}

/// Records are runs of at most `n` TS packets covering the stream in order,
/// cut short only at the end, where a seek entry point begins or where a
/// key frame ends.
fn assert_grouping(p: &Packetization, n: u32) {
    let entries: Vec<u32> = p.sync.iter().map(|s| s.packet).collect();
    let mut expected_offset = p.packets[0].offset;
    for (i, r) in p.packets.iter().enumerate() {
        assert_eq!(r.offset, expected_offset, "record {i} is contiguous");
        assert!(
            r.len > 0 && r.len <= 188 * n && r.len % 188 == 0,
            "record {i}: {}",
            r.len
        );
        let next_is_entry = entries.contains(&(i as u32 + 1));
        if r.len < 188 * n {
            let key_frame_end = r.flags & FLAG_KEY_FRAME_END != 0;
            assert!(
                i + 1 == p.packets.len() || next_is_entry || key_frame_end,
                "record {i} cut short though no entry point follows"
            );
        }
        expected_offset += u64::from(r.len);
    }
}

fn assert_close(a: u64, b: u64, tol: u64, what: &str) {
    assert!(a.abs_diff(b) <= tol, "{what}: {a} vs {b}");
}

#[test]
fn cbr_pcr_times_are_exact() {
    let data = Stream::default().cbr(1_000_000);
    let p = run(&data);
    assert_eq!(p.report.timing, TimingSource::Pcr);
    assert_eq!(p.report.ts_packets, 1000);
    assert_eq!(p.report.rtp_packets, p.packets.len() as u64);
    assert_grouping(&p, 7);
    assert_eq!(p.report.pcr_count, 100);
    assert_eq!(p.packets[0].send_time_ns, 0);
    for r in &p.packets {
        assert_eq!(r.send_time_ns, first_ordinal(r) * MS_NS);
        assert_eq!(
            r.rtp_ts,
            (first_ordinal(r) * 90) as u32,
            "rtp ts at {}",
            r.offset
        );
    }
    assert_eq!(p.duration_ns, 1000 * MS_NS);
    assert_eq!(p.report.bitrate_bps, 1_504_000);
    assert!(p.report.warnings.is_empty(), "{:?}", p.report.warnings);
}

#[test]
fn vbr_segments_keep_their_rates() {
    // 1 ms per packet for 500 packets, then 2 ms per packet.
    let t = |o: u64| {
        if o < 500 {
            o * MS
        } else {
            500 * MS + (o - 500) * 2 * MS
        }
    };
    let data = Stream::default().packets(|o| (t(o) + 5, false)).concat();
    let p = run(&data);
    // PCRs are at ordinals 2, 12, ...: between 492 and 502 the rate is averaged.
    for r in p
        .packets
        .iter()
        .filter(|r| !(492..502).contains(&first_ordinal(r)))
    {
        let o = first_ordinal(r);
        assert_close(r.send_time_ns, t(o) * 1000 / 27, 1, "send time");
    }
    assert_close(p.duration_ns, t(1000) * 1000 / 27, 1, "duration");
    // Between the PCRs at 492 and 502 the rate changes; interpolation stays monotonic.
    assert!(
        p.packets
            .windows(2)
            .all(|w| w[0].send_time_ns <= w[1].send_time_ns)
    );
}

#[test]
fn pcr_wrap_is_continuous() {
    let base = PCR_WRAP - 300 * MS;
    let data = Stream::default().cbr(base);
    let p = run(&data);
    for r in &p.packets {
        assert_eq!(r.send_time_ns, first_ordinal(r) * MS_NS);
    }
    assert!(p.report.warnings.is_empty(), "{:?}", p.report.warnings);
}

fn discontinuity_case(jump: impl Fn(u64) -> u64, flag: bool) {
    let data = Stream::default()
        .packets(|o| {
            if o < 502 {
                (1_000_000 + o * MS, false)
            } else {
                (jump(o * MS), flag && o == 502)
            }
        })
        .concat();
    let p = run(&data);
    assert_eq!(p.report.timing, TimingSource::Pcr);
    for r in &p.packets {
        assert_close(r.send_time_ns, first_ordinal(r) * MS_NS, 1, "send time");
    }
    assert!(
        p.report.warnings.iter().any(|w| w.contains("discontinuit")),
        "{:?}",
        p.report.warnings
    );
}

#[test]
fn flagged_discontinuity_continues_smoothly() {
    discontinuity_case(|t| t + 77 * MS, true);
}

#[test]
fn backwards_pcr_jump_continues_smoothly() {
    discontinuity_case(|t| t - 400 * MS, false);
}

#[test]
fn forward_pcr_jump_continues_smoothly() {
    discontinuity_case(|t| t + 3600 * 27_000_000, false);
}

#[test]
fn no_pcr_measures_rate_from_pts() {
    let s = Stream {
        pcr_every: None,
        ..Stream::default()
    };
    let p = run(&s.cbr(0));
    assert_eq!(p.report.timing, TimingSource::MeasuredFromPts);
    assert!(
        p.report
            .warnings
            .iter()
            .any(|w| w.contains("no PCR in file; pacing at a rate measured from PTS: 1.50 Mbit/s")),
        "{:?}",
        p.report.warnings
    );
    for r in &p.packets {
        assert_close(r.send_time_ns, first_ordinal(r) * MS_NS, 10, "send time");
    }
}

#[test]
fn no_pcr_no_pts_assumes_bitrate() {
    let s = Stream {
        pcr_every: None,
        pts: false,
        ..Stream::default()
    };
    let o = TsOptions {
        fallback_bitrate: 1_504_000,
        ..TsOptions::default()
    };
    let p = packetize(&s.cbr(0), &o).unwrap();
    assert_eq!(p.report.timing, TimingSource::AssumedBitrate);
    assert!(
        p.report
            .warnings
            .iter()
            .any(|w| w.contains("assumed 1.50 Mbit/s"))
    );
    for r in &p.packets {
        assert_close(r.send_time_ns, first_ordinal(r) * MS_NS, 1, "send time");
    }
}

/// Bytes of every record, concatenated.
fn payload_bytes(data: &[u8], p: &Packetization) -> Vec<u8> {
    let mut out = Vec::new();
    for r in &p.packets {
        let bytes = &data[r.offset as usize..r.offset as usize + r.len as usize];
        assert_eq!(r.len % 188, 0);
        assert!(bytes.chunks(188).all(|c| c[0] == 0x47));
        out.extend_from_slice(bytes);
    }
    out
}

#[test]
fn sync_loss_resyncs_and_never_serves_garbage() {
    let clean = Stream::default().cbr(0);
    let mut garbage: Vec<u8> = (0..333u32).map(|i| (i * 7) as u8).collect();
    garbage[10] = 0x47;
    garbage[198] = 0x47;
    let cut = 188 * 300;
    let mut data = clean[..cut].to_vec();
    data.extend_from_slice(&garbage);
    data.extend_from_slice(&clean[cut..]);
    let p = run(&data);
    assert_eq!(p.report.resyncs, 1);
    assert_eq!(p.report.skipped_bytes, 333);
    assert_eq!(p.report.ts_packets, 1000);
    assert_eq!(payload_bytes(&data, &p), clean);
    // A record ends at the sync loss: none spans the garbage.
    assert!(
        p.packets
            .iter()
            .any(|r| r.offset + u64::from(r.len) == cut as u64)
    );
    assert!(p.packets.iter().any(|r| r.offset == (cut + 333) as u64));
    // Garbage takes no time.
    let after = p
        .packets
        .iter()
        .find(|r| r.offset == (cut + 333) as u64)
        .unwrap();
    assert_eq!(after.send_time_ns, 300 * MS_NS);
    assert!(p.report.warnings.iter().any(|w| w.contains("lost sync")));
}

#[test]
fn leading_junk_is_skipped() {
    let clean = Stream::default().cbr(0);
    let mut data = vec![0u8; 1000];
    data.extend_from_slice(&clean);
    let p = run(&data);
    assert_eq!(p.report.skipped_bytes, 1000);
    assert_eq!(p.report.resyncs, 0);
    assert_eq!(p.packets[0].offset, 1000);
    assert_eq!(payload_bytes(&data, &p), clean);
}

#[test]
fn truncated_tail_is_excluded() {
    let mut data = Stream::default().cbr(0);
    data.extend_from_slice(&[0x47; 100]);
    let p = run(&data);
    assert_eq!(p.report.truncated_tail_bytes, 100);
    assert_eq!(p.report.ts_packets, 1000);
    let last = p.packets.last().unwrap();
    assert_eq!(last.offset + u64::from(last.len), 188_000);
}

#[test]
fn not_ts_and_empty() {
    assert_eq!(packetize(&[], &TsOptions::default()), Err(TsError::Empty));
    let text = b"hello, this is not a transport stream at all. ".repeat(50_000);
    assert_eq!(packetize(&text, &TsOptions::default()), Err(TsError::NotTs));
    // A stray 'G' in a short text file is not a TS.
    assert_eq!(
        packetize(b"xxGxxxxxxxxx", &TsOptions::default()),
        Err(TsError::NotTs)
    );
    assert!(!looks_like_ts(&text));
    assert!(looks_like_ts(&Stream::default().cbr(0)[..4096]));
}

#[test]
fn tiny_files_of_one_or_two_packets() {
    let data = Stream::default().cbr(0);
    for n in 1..=2 {
        let p = run(&data[..188 * n]);
        assert_eq!(p.report.ts_packets, n as u64);
        assert_eq!(p.packets.len(), 1);
        assert_eq!(p.packets[0].len, 188 * n as u32);
    }
}

/// A key frame's last record ends right before the next PES of its stream
/// (the synthetic stream starts one every 50 packets, at 2, 52, ...), so
/// trick play sends no byte of the picture after it.
#[test]
fn a_key_frame_ends_a_record() {
    let p = run(&Stream::default().cbr(0));
    let ends: Vec<u64> = (p.packets.iter())
        .filter(|r| r.flags & FLAG_KEY_FRAME_END != 0)
        .map(|r| r.file_end() / 188)
        .collect();
    assert_eq!(ends, (1..20).map(|k| k * 50 + 2).collect::<Vec<_>>());
}

#[test]
fn ts_per_rtp_groups() {
    let data = Stream::default().cbr(0);
    for n in 1..=7u8 {
        let p = packetize(&data, &opts(n)).unwrap();
        let n = u32::from(n);
        assert_eq!(p.ts_per_rtp as u32, n);
        assert_grouping(&p, n);
        let total: u32 = p.packets.iter().map(|r| r.len).sum();
        assert_eq!(total, 188 * 1000);
    }
    // Out-of-range values are clamped.
    assert_eq!(packetize(&data, &opts(0)).unwrap().packets.len(), 1000);
    assert_grouping(&packetize(&data, &opts(200)).unwrap(), 7);
}

#[test]
fn sync_points_prefer_the_preceding_pat() {
    let p = packetize(&Stream::default().cbr(0), &opts(1)).unwrap();
    // RAPs at 2, 52, 102, ...; PATs at 0, 100, 200 ...
    assert_eq!(p.sync[0].packet, 0);
    assert_eq!(p.sync[0].time_ns, 0);
    let by_time: Vec<(u32, u64)> = p.sync.iter().map(|s| (s.packet, s.time_ns)).collect();
    // RAP 52 -> PAT 0 = packet 0, deduplicated with {0,0}; RAP 102 -> PAT 100.
    assert_eq!(by_time[1], (100, 102 * MS_NS));
    assert_eq!(by_time.len(), 10);
    assert!(
        p.sync
            .windows(2)
            .all(|w| w[0].packet < w[1].packet && w[0].time_ns <= w[1].time_ns)
    );
    for s in &p.sync[1..] {
        assert!(p.packets[s.packet as usize + 2].flags & FLAG_RANDOM_ACCESS != 0);
    }
}

#[test]
fn sync_points_use_the_rap_when_pat_is_far() {
    // PAT only at the start; 1 ms per packet, so RAPs after 1 s have no near PAT.
    let s = Stream {
        n: 3000,
        psi_every: 100_000,
        gop: 500,
        ..Stream::default()
    };
    let p = packetize(&s.cbr(0), &opts(1)).unwrap();
    let got: Vec<(u32, u64)> = p.sync.iter().map(|s| (s.packet, s.time_ns)).collect();
    assert_eq!(
        got,
        vec![
            (0, 0),
            (1002, 1002 * MS_NS),
            (1502, 1502 * MS_NS),
            (2002, 2002 * MS_NS),
            (2502, 2502 * MS_NS)
        ]
    );
}

#[test]
fn without_rai_sync_points_are_pats() {
    let s = Stream {
        rai: false,
        ..Stream::default()
    };
    let p = packetize(&s.cbr(0), &opts(1)).unwrap();
    let got: Vec<u32> = p.sync.iter().map(|s| s.packet).collect();
    assert_eq!(got, (0..10).map(|i| i * 100).collect::<Vec<_>>());
    assert!(
        p.report
            .warnings
            .iter()
            .any(|w| w.contains("PAT positions"))
    );
}

/// The fuzzer's find: a PCR whose 9-bit extension exceeds 299 must not
/// overflow the clock arithmetic (it is ignored as invalid).
#[test]
fn a_pcr_extension_beyond_299_is_ignored_not_a_crash() {
    let data = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pcr-extension-overflow.ts"
    ))
    .unwrap();
    let _ = packetize(&data, &opts(1));
}

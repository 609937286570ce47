//! Property tests: no input panics; valid streams survive the index.

mod synth;

use fjord_media::index::{self, Index, SourceId};
use fjord_media::ts::{TsOptions, packetize};
use proptest::prelude::*;
use synth::{MS, Pkt, Stream};

fn source(size: u64) -> SourceId {
    SourceId {
        size,
        mtime_ns: 0,
        content_hash: [0; 32],
        sample_hash: [0; 32],
    }
}

fn random_packet() -> impl Strategy<Value = Vec<u8>> {
    (
        0u16..0x2000,
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(pid, rai, pusi, pcr)| {
            let mut p = Pkt::new(pid);
            p.rai = rai;
            p.pusi = pusi;
            p.pcr = pcr.map(|v| v % synth::PCR_WRAP);
            p.build().to_vec()
        })
}

/// Runs of valid packets (with random PCR, RAI, PES starts) and garbage
/// between them. Runs are at least 5 packets: sync needs 5 in a row.
fn stream_with_garbage() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let chunk = prop_oneof![
        4 => proptest::collection::vec(random_packet(), 5..12).prop_map(|p| (p.concat(), true)),
        1 => proptest::collection::vec(any::<u8>().prop_filter("no sync", |b| *b != 0x47), 1..400)
            .prop_map(|g| (g, false)),
    ];
    proptest::collection::vec(chunk, 1..60).prop_map(|chunks| {
        let null = Pkt::new(0x1fff).build();
        let mut data = [synth::pat(), null, null, null, null].concat();
        let mut valid = data.clone();
        for (bytes, ok) in chunks {
            data.extend_from_slice(&bytes);
            if ok {
                valid.extend_from_slice(&bytes);
            }
        }
        (data, valid)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..5000), n in 0u8..10) {
        let _ = packetize(&data, &TsOptions { ts_per_rtp: n, fallback_bitrate: 1 });
    }

    #[test]
    fn mostly_ts_garbage_never_panics(data in proptest::collection::vec(
        prop_oneof![3 => Just(0x47u8), 1 => any::<u8>()], 0..3000)) {
        let _ = packetize(&data, &TsOptions::default());
    }

    #[test]
    fn records_cover_valid_packets_once_in_order((data, valid) in stream_with_garbage(), n in 1u8..=7) {
        let p = packetize(&data, &TsOptions { ts_per_rtp: n, ..TsOptions::default() }).unwrap();
        let mut served = Vec::new();
        let mut last_end = 0;
        let mut last_time = 0;
        for r in &p.packets {
            prop_assert!(r.offset >= last_end);
            prop_assert!(r.send_time_ns >= last_time);
            prop_assert!(r.len > 0 && r.len % 188 == 0 && r.len <= 188 * u32::from(n));
            last_end = r.offset + u64::from(r.len);
            last_time = r.send_time_ns;
            served.extend_from_slice(&data[r.offset as usize..last_end as usize]);
        }
        prop_assert_eq!(served, valid);
        prop_assert_eq!(p.packets[0].send_time_ns, 0);
        prop_assert!(p.duration_ns >= last_time);
        prop_assert_eq!(p.sync[0], fjord_media::SyncPoint::default());
    }

    #[test]
    fn valid_streams_round_trip_through_the_index(
        n in 1u64..2000, gop in 3u64..200, pcr_every in proptest::option::of(3u64..50),
        pts in any::<bool>(), rai in any::<bool>(), rate in 1u64..50, k in 1u8..=7,
    ) {
        let s = Stream { n, psi_every: 97, pcr_every, gop, pts, rai };
        let data = s.packets(|o| (o * MS * rate, false)).concat();
        let p = packetize(&data, &TsOptions { ts_per_rtp: k, ..TsOptions::default() }).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.fjidx");
        index::write(&path, &p.clone().into_plan(), &source(data.len() as u64)).unwrap();
        let idx = Index::open(&path).unwrap();
        let t = idx.track(0).unwrap();
        prop_assert_eq!(t.packet_count(), p.packets.len());
        for (i, r) in p.packets.iter().enumerate() {
            prop_assert_eq!(t.packet(i), Some(*r));
        }
        prop_assert_eq!(t.sync_points().collect::<Vec<_>>(), p.sync.clone());
        prop_assert_eq!(idx.report(), p.report.clone());
        prop_assert_eq!(idx.duration_ns(), p.duration_ns);
    }

    #[test]
    fn mutated_index_never_panics(at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let data = Stream { n: 50, ..Stream::default() }.cbr(0);
        let p = packetize(&data, &TsOptions::default()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.fjidx");
        index::write(&path, &p.clone().into_plan(), &source(data.len() as u64)).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let i = at.index(bytes.len() - 32);
        bytes[i] = byte;
        let n = bytes.len() - 32;
        let sum = blake3::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(sum.as_bytes());
        let keep = bytes.len() - cut.index(64).min(bytes.len());
        for b in [&bytes[..], &bytes[..keep]] {
            std::fs::write(&path, b).unwrap();
            if let Ok(idx) = Index::open(&path) {
                let _ = idx.report();
                for t in idx.tracks() {
                    for j in 0..t.packet_count() + 1 {
                        let _ = t.packet(j);
                    }
                    let _ = t.sync_before(12345);
                    let _ = (t.encoding(), t.fmtp());
                }
            }
        }
    }
}

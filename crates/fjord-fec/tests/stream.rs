//! Over the wire: a title's packets go out as a server would send them
//! (source payloads from the index, repair packets by reference from the
//! sidecar, session offsets applied), some are lost, and the receiver's
//! `BlockDecoder` must rebuild every lost source packet bit-exact or report
//! the block unrecoverable — never wrong bytes.

use std::path::Path;

use fjord_fec::encode::payload_parts;
use fjord_fec::{BlockDecoder, DecodeError, FecChoice, FecParams, RepairHeader, SourcePacket};
use fjord_media::index::{self, Index, SourceId, TrackDesc};
use fjord_media::{FLAG_MARKER, IngestReport, MediaPlan, PacketRecord, SyncPoint, TrackPlan};

/// Deterministic xorshift, so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A title whose packets vary in length, payload header and split runs,
/// indexed with the block layout `params`.
fn title(dir: &Path, packets: u64, params: FecParams, rng: &mut Rng) -> std::path::PathBuf {
    let media = dir.join("t.bin");
    let mut data = Vec::new();
    let mut records = Vec::new();
    for i in 0..packets {
        let len = 1 + rng.below(1400) as u32;
        let mut r = PacketRecord::file_run(
            i * 1_000_000,
            (i * 90) as u32 ^ 0xFFFF_FF00,
            data.len() as u64,
            len,
        );
        if rng.below(4) == 0 {
            let prefix: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
            r = r.with_prefix(&prefix);
        }
        if rng.below(8) == 0 {
            r.flags = FLAG_MARKER;
        }
        let mut bytes = len as u64;
        if rng.below(10) == 0 {
            r.skip = 14;
            r.len2 = 1 + rng.below(100) as u32;
            bytes += 14 + u64::from(r.len2);
        }
        data.extend((0..bytes).map(|_| rng.next() as u8));
        records.push(r);
    }
    std::fs::write(&media, &data).unwrap();
    let mut plan = MediaPlan {
        tracks: vec![TrackPlan {
            desc: TrackDesc::mpeg_ts(),
            packets: records,
            sync: vec![SyncPoint::default()],
            fec: None,
        }],
        duration_ns: packets * 1_000_000,
        ts_per_rtp: 0,
        report: IngestReport::new("test", packets, 8_000_000),
    };
    plan.choose_fec(&fjord_fec::layouts(FecChoice::Fixed(params)));
    let src = SourceId::of(&data, &std::fs::metadata(&media).unwrap());
    index::write(&index::index_path_for(&media), &plan, &src).unwrap();
    media
}

/// One block as sent: source packets then repair packets, in send order.
struct SentBlock {
    sources: Vec<SourcePacket>,
    repairs: Vec<(RepairHeader, u32, Vec<u8>)>,
}

fn send(media: &Path) -> Vec<SentBlock> {
    fjord_fec::protect(media, &mut |_, _| {}).unwrap();
    let idx = Index::open(&index::index_path_for(media)).unwrap();
    let sidecar = fjord_fec::sidecar::open(&fjord_fec::sidecar_path_for(media)).unwrap();
    let data = std::fs::read(media).unwrap();
    let (track, fec) = (idx.track(0).unwrap(), sidecar.track(0).unwrap());
    let (ts_off, seq0) = (0x1234_5678u32, 65_500u16);
    (0..fec.block_count())
        .map(|b| {
            let blk = fec.block(b).unwrap();
            let sources: Vec<SourcePacket> = blk
                .packets()
                .map(|i| {
                    let r = track.packet(i as usize).unwrap();
                    SourcePacket {
                        payload: payload_parts(&r, &data).unwrap().concat(),
                        marker: r.marker(),
                        timestamp: r.rtp_ts.wrapping_add(ts_off),
                    }
                })
                .collect();
            let base_ts = sources[0].timestamp;
            let repairs = (0..blk.repair_count)
                .map(|j| {
                    let (off, len) = blk.repair_symbol_range(j).unwrap();
                    let header = RepairHeader::new(
                        b,
                        blk.source_count,
                        j,
                        seq0.wrapping_add(blk.first_packet as u16),
                    );
                    let mut wire = header.to_bytes().to_vec();
                    wire.extend_from_slice(&sidecar.bytes()[off as usize..][..len]);
                    let (h, symbol) = RepairHeader::parse(&wire).unwrap();
                    (h, base_ts, symbol.to_vec())
                })
                .collect();
            SentBlock { sources, repairs }
        })
        .collect()
}

/// Receives `block` minus the packets at positions in `lost` (0..k are
/// sources, k.. repairs); checks the outcome. Returns whether it recovered.
fn receive(dec: &mut BlockDecoder, block: &SentBlock, lost: &[usize]) -> bool {
    let k = block.sources.len();
    let (h0, _, _) = &block.repairs[0];
    dec.reset(h0.k, block.repairs.len() as u16);
    for (i, s) in block.sources.iter().enumerate() {
        if !lost.contains(&i) {
            dec.add_source(i as u16, s.clone()).unwrap();
        }
    }
    for (j, (h, ts, sym)) in block.repairs.iter().enumerate() {
        if !lost.contains(&(k + j)) {
            dec.add_repair(h, *ts, sym).unwrap();
        }
    }
    let mut lost_sources: Vec<u16> = lost.iter().filter(|&&i| i < k).map(|&i| i as u16).collect();
    lost_sources.sort();
    match dec.recover() {
        Ok(rec) => {
            assert_eq!(
                rec.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                lost_sources
            );
            for (i, p) in rec {
                assert_eq!(
                    p,
                    block.sources[usize::from(i)],
                    "packet {i} rebuilt bit-exact"
                );
            }
            true
        }
        Err(DecodeError::Unrecoverable { missing, repairs }) => {
            assert_eq!(missing, lost_sources.len());
            assert!(missing > repairs && lost.len() > block.repairs.len());
            false
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn ten_percent_loss_and_bursts_up_to_m_recover_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let media = title(dir.path(), 3000, FecParams { k: 223, m: 32 }, &mut rng);
    let blocks = send(&media);
    assert_eq!(blocks.len(), 14, "last block short");
    let mut dec = BlockDecoder::new();
    for block in &blocks {
        let n = block.sources.len() + block.repairs.len();
        let m = block.repairs.len();
        // Exactly 10 % lost, at random positions.
        let mut pos: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            pos.swap(i, rng.below(i as u64 + 1) as usize);
        }
        assert!(receive(&mut dec, block, &pos[..n / 10]));
        // A burst of M, and of every length up to it, anywhere in the block.
        for len in [1, m / 2, m] {
            let start = rng.below((n - len + 1) as u64) as usize;
            let burst: Vec<usize> = (start..start + len).collect();
            assert!(receive(&mut dec, block, &burst));
        }
        // All sources of a short block lost: the repairs alone rebuild it.
        if block.sources.len() <= m {
            assert!(receive(
                &mut dec,
                block,
                &(0..block.sources.len()).collect::<Vec<_>>()
            ));
        }
    }
}

#[test]
fn independent_loss_recovers_or_reports_never_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(42);
    let media = title(dir.path(), 4000, FecParams { k: 56, m: 8 }, &mut rng);
    let blocks = send(&media);
    let mut dec = BlockDecoder::new();
    let (mut ok, mut reported) = (0, 0);
    for _ in 0..10 {
        for block in &blocks {
            let n = block.sources.len() + block.repairs.len();
            let lost: Vec<usize> = (0..n).filter(|_| rng.below(10) == 0).collect();
            if receive(&mut dec, block, &lost) {
                ok += 1;
            } else {
                reported += 1;
            }
        }
    }
    assert!(
        ok > 0 && reported > 0,
        "both outcomes exercised: {ok} recovered, {reported} reported"
    );
}

#[test]
fn more_than_m_lost_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    let media = title(dir.path(), 300, FecParams { k: 20, m: 4 }, &mut rng);
    let blocks = send(&media);
    let mut dec = BlockDecoder::new();
    for block in &blocks {
        let burst: Vec<usize> = (0..block.repairs.len() + 1).collect();
        assert!(!receive(&mut dec, block, &burst));
        assert_eq!(dec.missing().count(), block.repairs.len() + 1);
    }
}

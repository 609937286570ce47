//! Over the wire: a title's packets go out as a server would send them
//! (source payloads from the index, repair packets by reference from the
//! sidecar, session offsets applied), some are lost, and the receiver's
//! `BlockDecoder` must rebuild every lost source packet bit-exact or report
//! the block unrecoverable — never wrong bytes.

use std::path::Path;

use fjord_fec::encode::payload_parts;
use fjord_fec::{BlockDecoder, DecodeError, FecParams, RepairHeader, SourcePacket};
use fjord_media::index::{self, Index};

mod common;
use common::{Rng, title};

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

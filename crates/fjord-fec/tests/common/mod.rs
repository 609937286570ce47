//! What the tests of parity share: a seeded generator and a title made of
//! it.

use std::path::Path;

use fjord_fec::{FecChoice, FecParams};
use fjord_media::index::{self, SourceId, TrackDesc};
use fjord_media::{FLAG_MARKER, IngestReport, MediaPlan, PacketRecord, SyncPoint, TrackPlan};

/// Deterministic xorshift, so a failure reproduces.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A title whose packets vary in length (payloads of at most 1,398 bytes,
/// as a planner's), payload header and split runs, indexed with the block
/// layout `params`.
pub fn title(dir: &Path, packets: u64, params: FecParams, rng: &mut Rng) -> std::path::PathBuf {
    let media = dir.join("t.bin");
    let mut data = Vec::new();
    let mut records = Vec::new();
    for i in 0..packets {
        let len = 1 + rng.below(1290) as u32;
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

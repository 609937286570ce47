//! FEC throughput.
//! - `decode/S`: receiver decode per core at the maximum repairable loss
//!   (M of K+M lost, all of them source packets) for symbol sizes of 1, 2,
//!   4 and 8 KB, 223:32 blocks (n = 255, RFC 6865 with m = 8). Throughput
//!   counts the block's source bytes.
//! - `encode/S`: Reed-Solomon encode per core, same layout (Mbps = 8 × MB/s).
//! - `mul_add/S`: the GF(2^8) multiply-accumulate kernel alone.
//! - `ingest_parity`: the whole sidecar write of a cached 256 MB title
//!   (framing, hashing, encoding on every core, file write).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fjord_fec::rs::Codec;
use fjord_fec::symbol::{SymbolMeta, frame, symbol_len};
use fjord_fec::{BlockDecoder, FecChoice, FecParams, RepairHeader, SourcePacket};

const K: u16 = 223;
const M: u16 = 32;

fn block(payload: usize) -> (Vec<SourcePacket>, Vec<Vec<u8>>) {
    let sources: Vec<SourcePacket> = (0..K)
        .map(|i| SourcePacket {
            payload: (0..payload)
                .map(|b| (b as u16 ^ i.wrapping_mul(31)) as u8)
                .collect(),
            marker: i % 7 == 0,
            timestamp: u32::from(i) * 90,
        })
        .collect();
    let e = symbol_len(payload);
    let mut symbols = vec![0u8; usize::from(K) * e];
    for (s, sym) in sources.iter().zip(symbols.chunks_exact_mut(e)) {
        let meta = SymbolMeta {
            marker: s.marker,
            ts_delta: s.timestamp,
        };
        frame(sym, &[&s.payload], meta).unwrap();
    }
    let mut codec = Codec::new();
    codec.set_layout(K.into(), M.into()).unwrap();
    let mut out = vec![0u8; usize::from(M) * e];
    codec.encode(&symbols, &mut out).unwrap();
    (sources, out.chunks_exact(e).map(<[u8]>::to_vec).collect())
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("fec");
    g.sample_size(20);
    for kb in [1usize, 2, 4, 8] {
        // The symbol (payload + 8-byte header) is exactly kb KiB.
        let payload = kb * 1024 - fjord_fec::symbol::SYMBOL_HEADER_LEN;
        let (sources, repairs) = block(payload);
        g.throughput(Throughput::Bytes((usize::from(K) * payload) as u64));
        let mut dec = BlockDecoder::new();
        g.bench_function(format!("decode/{kb}KiB"), |b| {
            b.iter(|| {
                dec.reset(K, M);
                // The first M sources lost: the most a block repairs.
                for (i, s) in sources.iter().enumerate().skip(usize::from(M)) {
                    dec.add_source(i as u16, s.clone()).unwrap();
                }
                for (j, r) in repairs.iter().enumerate() {
                    let h = RepairHeader::new(0, K, j as u16, 0);
                    dec.add_repair(&h, 0, r).unwrap();
                }
                assert_eq!(dec.recover().unwrap().len(), usize::from(M));
            })
        });
        let e = symbol_len(payload);
        let symbols: Vec<u8> = (0..usize::from(K) * e).map(|i| (i / e) as u8).collect();
        let mut codec = Codec::new();
        codec.set_layout(K.into(), M.into()).unwrap();
        let mut out = vec![0u8; usize::from(M) * e];
        g.bench_function(format!("encode/{kb}KiB"), |b| {
            b.iter(|| {
                codec.encode(&symbols, &mut out).unwrap();
                out[0]
            })
        });
        let src = vec![0x5Au8; kb * 1024];
        let mut dst = vec![0u8; kb * 1024];
        g.throughput(Throughput::Bytes((kb * 1024) as u64));
        g.bench_function(format!("mul_add/{kb}KiB"), |b| {
            b.iter(|| {
                fjord_fec::gf::mul_add(0x8E, &src, &mut dst);
                dst[0]
            })
        });
    }
    g.finish();

    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("t.ts");
    let packets = 200_000;
    let layouts = fjord_fec::layouts(FecChoice::Fixed(FecParams { k: K, m: M }));
    fjord_media::synthetic::write_constant_rate(&media, 1316, 1_000_000, packets, &layouts)
        .unwrap();
    let mut g = c.benchmark_group("fec");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(packets * 1316));
    g.bench_function("ingest_parity", |b| {
        b.iter(|| fjord_fec::protect(&media, &mut |_, _| {}).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

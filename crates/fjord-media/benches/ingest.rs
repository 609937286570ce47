//! Packetization throughput on a ~64 MB synthetic TS held in memory.

#[path = "../tests/synth/mod.rs"]
mod synth;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fjord_media::ts::{TsOptions, packetize};

fn bench(c: &mut Criterion) {
    let stream = synth::Stream {
        n: 64 * 1024 * 1024 / 188,
        psi_every: 100,
        pcr_every: Some(20),
        gop: 250,
        pts: true,
        rai: true,
    };
    let data = stream.cbr(0);
    let mut g = c.benchmark_group("ts");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.sample_size(20);
    g.bench_function("packetize_64MB", |b| {
        b.iter(|| packetize(&data, &TsOptions::default()).map(|p| p.packets.len()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

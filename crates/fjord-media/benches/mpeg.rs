//! Planning throughput of an ffmpeg-made MPEG-2 program stream (video and
//! MP2 audio, ~190 MB) held in memory. Needs ffmpeg.

use std::process::Command;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fjord_media::format::plan;
use fjord_media::ts::TsOptions;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.vob");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i"])
        .args([
            "testsrc=size=352x288:rate=25",
            "-f",
            "lavfi",
            "-i",
            "sine=r=48000",
        ])
        .args(["-t", "60", "-c:v", "mpeg2video", "-bf", "2", "-b:v", "25M"])
        .args([
            "-minrate", "25M", "-maxrate", "25M", "-bufsize", "2M", "-c:a", "mp2",
        ])
        .args(["-f", "vob"])
        .arg(&path)
        .status()
        .expect("ffmpeg is required for this bench");
    assert!(status.success());
    let data = std::fs::read(&path).unwrap();
    let mut g = c.benchmark_group("mpeg");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.sample_size(10);
    g.bench_function("plan_program_stream", |b| {
        b.iter(|| plan(&data, &TsOptions::default(), &mut |_, _| {}).map(|p| p.report.rtp_packets))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

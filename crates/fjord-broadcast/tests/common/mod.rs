//! Synthetic titles for the tests.

#![allow(dead_code)]

use fjord_broadcast::{Packet, Title};

pub const S: u64 = 1_000_000_000;
/// 3.5 Mbit/s in bytes/s.
pub const INSTANCE_RATE: f64 = 3.5e6 / 8.0;

/// Constant bit rate: 1316-byte packets at `bytes_per_s` for `seconds`,
/// a sync point at the first packet of every `gop_ns`.
pub fn cbr(seconds: u64, bytes_per_s: f64, gop_ns: u64) -> Title {
    let (packets, sync) = cbr_parts(seconds, bytes_per_s, gop_ns);
    Title::new(packets, sync, seconds * S).unwrap()
}

pub fn cbr_parts(seconds: u64, bytes_per_s: f64, gop_ns: u64) -> (Vec<Packet>, Vec<u32>) {
    let per = 1316.0 * 1e9 / bytes_per_s;
    let n = (seconds as f64 * 1e9 / per).floor() as u64;
    let packets: Vec<Packet> = (0..n)
        .map(|i| Packet {
            pts_ns: (i as f64 * per) as u64,
            bytes: 1316,
        })
        .collect();
    let sync = (0..n as u32)
        .filter(|&i| {
            i == 0 || packets[i as usize].pts_ns / gop_ns != packets[i as usize - 1].pts_ns / gop_ns
        })
        .collect();
    (packets, sync)
}

/// Arrivals spread evenly (with an odd step) over `span_ns`.
pub fn arrivals(count: u64, span_ns: u64) -> impl Iterator<Item = u64> {
    let step = span_ns / count.max(1);
    (0..count).map(move |i| i * step + (i * 7_919_003) % step.max(1))
}

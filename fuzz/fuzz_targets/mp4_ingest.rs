//! Ingest of arbitrary bytes behind an MP4 box header: never panics, and
//! every packet it plans is inside the input, small enough and in time order.
#![no_main]

#[path = "../common/plan.rs"]
mod plan;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // Most inputs should reach the box parser, not the format sniffer.
    let mut data = b"\0\0\0\x10ftypisom\0\0\0\0".to_vec();
    data.extend_from_slice(input);
    plan::check(&data);
    plan::check(input);
});

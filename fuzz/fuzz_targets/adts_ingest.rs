//! Ingest of arbitrary bytes as ADTS AAC: never panics, and every AU it
//! plans is inside the input, small enough and in time order.
#![no_main]

#[path = "../common/plan.rs"]
mod plan;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // Start on a sync word so most inputs reach the frame scanner.
    let mut data = vec![0xff, 0xf1];
    data.extend_from_slice(input);
    plan::check(&data);
});

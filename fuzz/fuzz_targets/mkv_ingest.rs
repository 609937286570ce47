//! Ingest of arbitrary bytes behind a Matroska EBML header and Segment:
//! never panics, and every packet it plans is inside the input, small
//! enough and in time order.
#![no_main]

#[path = "../common/plan.rs"]
mod plan;

use libfuzzer_sys::fuzz_target;

/// EBML header (DocType "webm"), then a Segment of unknown size.
const HEAD: &[u8] = b"\x1a\x45\xdf\xa3\x87\x42\x82\x84webm\x18\x53\x80\x67\x01\xff\xff\xff\xff\xff\xff\xff";

fuzz_target!(|input: &[u8]| {
    // Most inputs should reach the element walker, not the format sniffer.
    let mut data = HEAD.to_vec();
    data.extend_from_slice(input);
    plan::check(&data);
    plan::check(input);
});

//! MP3/MPEG audio files: planning arbitrary bytes never panics, and every
//! packet is a whole frame or a fragment inside the input, within the RTP
//! payload size, in time order.
#![no_main]

#[path = "../common/plan.rs"]
mod plan;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| plan::check(data));

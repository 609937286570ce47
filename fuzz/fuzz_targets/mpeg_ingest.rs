//! MPEG-1/2 video elementary streams and program streams: planning arbitrary
//! bytes never panics, and every packet stays inside the input, within the
//! RTP payload size, in send-time order.
#![no_main]

#[path = "../common/plan.rs"]
mod plan;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&kind, rest)) = input.split_first() else {
        return;
    };
    // Steer into the video ES or the program stream parser.
    let head: &[u8] = if kind & 1 == 0 {
        &[0, 0, 1, 0xb3]
    } else {
        &[0, 0, 1, 0xba]
    };
    plan::check(&[head, rest].concat());
});

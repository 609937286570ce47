//! MP3/MPEG audio files: planning arbitrary bytes never panics, and every
//! packet is a whole frame or a fragment inside the input, within the RTP
//! payload size, in time order.
#![no_main]

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};
use fjord_media::ts::TsOptions;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = plan(data, &TsOptions::default(), &mut |_, _| {}) else {
        return;
    };
    for t in &p.tracks {
        let mut last = 0;
        for r in &t.packets {
            assert!(r.file_end() <= data.len() as u64);
            assert!(r.payload_len() <= MAX_RTP_PAYLOAD);
            assert!(r.send_time_ns >= last);
            last = r.send_time_ns;
        }
    }
});

//! Ingest of arbitrary bytes as ADTS AAC: never panics, and every AU it
//! plans is inside the input, small enough and in time order.
#![no_main]

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // Start on a sync word so most inputs reach the frame scanner.
    let mut data = vec![0xff, 0xf1];
    data.extend_from_slice(input);
    let Ok(p) = plan(&data, &Default::default(), &mut |_, _| {}) else {
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

//! Ingest of arbitrary bytes behind an MP4 box header: never panics, and
//! every packet it plans is inside the input, small enough and in time order.
#![no_main]

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // Most inputs should reach the box parser, not the format sniffer.
    let mut data = b"\0\0\0\x10ftypisom\0\0\0\0".to_vec();
    data.extend_from_slice(input);
    check(&data);
    check(input);
});

fn check(data: &[u8]) {
    let Ok(p) = plan(data, &Default::default(), &mut |_, _| {}) else {
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
        assert!(t.sync.iter().all(|s| (s.packet as usize) < t.packets.len()));
    }
}

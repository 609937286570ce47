//! MPEG-1/2 video elementary streams and program streams: planning arbitrary
//! bytes never panics, and every packet stays inside the input, within the
//! RTP payload size, in send-time order.
#![no_main]

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};
use fjord_media::ts::TsOptions;
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
    let data = [head, rest].concat();
    let Ok(p) = plan(&data, &TsOptions::default(), &mut |_, _| {}) else {
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
});

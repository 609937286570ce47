//! MPEG-TS packetization of arbitrary bytes: never panics, and every RTP
//! payload it plans is whole TS packets inside the input, in time order.
#![no_main]

use fjord_media::ts::{TsOptions, packetize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&n, data)) = input.split_first() else {
        return;
    };
    let opts = TsOptions {
        ts_per_rtp: n % 8,
        ..TsOptions::default()
    };
    let Ok(p) = packetize(data, &opts) else {
        return;
    };
    let mut last_time = 0;
    let mut last_end = 0;
    for r in &p.packets {
        let start = usize::try_from(r.offset).unwrap();
        let end = start + r.len as usize;
        assert!(start >= last_end && end <= data.len());
        assert!(r.len > 0 && r.len % 188 == 0);
        assert!(data[start..end].chunks(188).all(|c| c[0] == 0x47));
        assert!(r.send_time_ns >= last_time);
        last_time = r.send_time_ns;
        last_end = end;
    }
    assert!(p.duration_ns >= last_time);
    assert_eq!(p.sync.first().map(|s| (s.packet, s.time_ns)), Some((0, 0)));
    assert!(p.sync.iter().all(|s| (s.packet as usize) < p.packets.len()));
});

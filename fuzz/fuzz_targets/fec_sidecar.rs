//! Parity sidecar parsing of arbitrary bytes: never panics, and whatever it
//! accepts has every block's repair data inside the file.
#![no_main]

use fjord_fec::Sidecar;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(sidecar) = Sidecar::parse(data) else {
        return;
    };
    for t in 0..sidecar.track_count() {
        let track = sidecar.track(t).unwrap();
        for b in 0..track.block_count() {
            let blk = track.block(b).unwrap();
            assert!(track.repair_data(&blk).is_some());
            assert!(blk.symbol_len == track.symbol_len() && blk.repair_count == track.params().m);
            let p = track.params();
            assert!(usize::from(p.k) + usize::from(p.m) <= fjord_fec::rs::MAX_N);
            assert!(track.symbol_hash(blk.packets().end - 1).is_some());
        }
    }
});

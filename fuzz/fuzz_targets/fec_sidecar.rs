//! Parity sidecar parsing of arbitrary bytes: never panics; what is parsed
//! unverified (as a server loads it) gives only blocks whose repair data
//! lies inside the file, and what also verifies has every block valid.
#![no_main]

use fjord_fec::Sidecar;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(sidecar) = Sidecar::parse_unverified(data) else {
        return;
    };
    let verified = sidecar.verify(&mut |_| Ok(())).is_ok();
    for t in 0..sidecar.track_count() {
        let track = sidecar.track(t).unwrap();
        let _ = track.repair_window_ns();
        for b in 0..track.block_count() {
            let Some(blk) = track.block(b) else {
                assert!(!verified, "a verified sidecar has every block");
                continue;
            };
            assert!(track.repair_data(&blk).is_some());
            assert!(blk.symbol_len == track.symbol_len() && blk.repair_count == track.params().m);
            let p = track.params();
            assert!(usize::from(p.k) + usize::from(p.m) <= fjord_fec::rs::MAX_N);
            assert!(track.symbol_hash(blk.packets().end - 1).is_some());
        }
    }
});

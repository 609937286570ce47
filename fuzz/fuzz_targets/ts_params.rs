//! The codec facts of arbitrary bytes as MPEG-TS (what an HLS playlist
//! names): never panics, and a resolution, when found, fits in 16 bits.
#![no_main]

use fjord_media::ts::params::params;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let p = params(input);
    if let Some(f) = p.frame_rate {
        assert!(f.is_finite() && f > 0.0);
    }
    // Every stream's codec or none.
    if let Some(c) = p.codecs {
        assert!(!c.is_empty() && !c.split(',').any(str::is_empty));
    }
});

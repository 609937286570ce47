//! Arbitrary bytes behind an MP4 box header as fragmented MP4 (HLS, DASH):
//! never panics, and every segment's file ranges lie inside the input and
//! its generated head says the segment's own length.
#![no_main]

use fjord_media::mp4::fragments::{Part, fragment};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let mut data = b"\0\0\0\x10ftypisom\0\0\0\0".to_vec();
    data.extend_from_slice(input);
    for only in [None, Some(0), Some(1)] {
        let Ok(f) = fragment(&data, 2_000_000_000, only) else {
            continue;
        };
        for seg in &f.fragments {
            let mut moof_and_mdat = 0u64;
            for p in &seg.parts {
                match p {
                    Part::File { offset, len } => {
                        assert!(offset + len <= data.len() as u64, "range outside the file")
                    }
                    Part::Made(b) => moof_and_mdat += b.len() as u64,
                }
            }
            assert!(moof_and_mdat > 0 && seg.len() >= moof_and_mdat);
        }
    }
});

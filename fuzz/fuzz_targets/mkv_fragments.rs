//! Arbitrary bytes behind a Matroska EBML header and Segment as fragmented
//! MP4 (HLS, DASH; sample entries made from CodecPrivate): never panics,
//! every segment's file ranges lie inside the input, its generated head
//! comes first, and the init segment's boxes fit one another.
#![no_main]

use fjord_media::mkv::fragments::fragment;
use fjord_media::mp4::fragments::Part;
use libfuzzer_sys::fuzz_target;

/// EBML header (DocType "webm"), then a Segment of unknown size.
const HEAD: &[u8] = b"\x1a\x45\xdf\xa3\x87\x42\x82\x84webm\x18\x53\x80\x67\x01\xff\xff\xff\xff\xff\xff\xff";

/// Whether `b` is a run of boxes each inside it.
fn boxes_fit(b: &[u8]) -> bool {
    let mut at = 0usize;
    while at < b.len() {
        let Some(len) = b.get(at..at + 4) else {
            return false;
        };
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len < 8 || at + len > b.len() {
            return false;
        }
        at += len;
    }
    true
}

fuzz_target!(|input: &[u8]| {
    let mut data = HEAD.to_vec();
    data.extend_from_slice(input);
    for only in [None, Some(0), Some(1)] {
        let Ok(f) = fragment(&data, 2_000_000_000, only) else {
            continue;
        };
        assert!(boxes_fit(&f.init), "init segment");
        for seg in &f.fragments {
            assert!(matches!(seg.parts.first(), Some(Part::Made(_))));
            for p in &seg.parts {
                if let Part::File { offset, len } = p {
                    assert!(offset + len <= data.len() as u64, "range outside the file");
                }
            }
        }
    }
});

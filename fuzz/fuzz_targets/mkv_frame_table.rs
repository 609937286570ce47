//! Matroska frame table parsing (`NAME.fjfrm`, read by an edge from its
//! origin): arbitrary bytes, and arbitrary bodies given a right checksum
//! (which random bytes never have), never panic; a table that parses has
//! every frame inside the media it names and is written back the same.
#![no_main]

use fjord_media::mkv::table::Table;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Table::parse(data);
    let mut body = data.to_vec();
    body.extend_from_slice(blake3::hash(data).as_bytes());
    let Ok(t) = Table::parse(&body) else {
        return;
    };
    for f in t.frames.iter().flatten() {
        assert!(f.offset + u64::from(f.size) <= t.media_len);
    }
    assert!(t.head_len <= t.media_len);
    assert_eq!(Table::parse(&t.to_bytes()).as_ref(), Ok(&t));
});

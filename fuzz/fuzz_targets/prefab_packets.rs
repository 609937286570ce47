//! Packet file parsing of arbitrary bytes against a small index: never
//! panics; unverified (as a server loads it) every packet read is bounded
//! by the file, and whatever verifies gives every packet of the index, at
//! its record's length, inside the file.
#![no_main]

use std::sync::OnceLock;

use fjord_media::{
    Index, no_parity,
    prefab::{Prefab, prefab_path_for, prefabricate},
    synthetic::write_constant_rate,
};
use libfuzzer_sys::fuzz_target;

/// Five 188-byte packets, and their valid packet file.
fn fixture() -> &'static (Index, Vec<u8>) {
    static FIXTURE: OnceLock<(Index, Vec<u8>)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fjord-fuzz-prefab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let media = dir.join("t.ts");
        let index = write_constant_rate(&media, 188, 10_000_000, 5, &no_parity).unwrap();
        prefabricate(&media, &mut |_, _| {}).unwrap();
        let valid = std::fs::read(prefab_path_for(&media)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (index, valid)
    })
}

fuzz_target!(|data: &[u8]| {
    let (index, valid) = fixture();
    // Odd first byte: the input is the file. Even: the valid file with the
    // input's (position, byte) pairs written over it, truncated to the
    // second byte's share of its length when that is not 255.
    let mut bytes = match data.split_first() {
        Some((mode, rest)) if mode & 1 == 0 => {
            let mut b = valid.clone();
            let (keep, patches) = rest.split_first().unwrap_or((&255, &[]));
            for p in patches.chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([p[0], p[1]])) % b.len();
                b[at] = p[2];
            }
            if *keep != 255 {
                b.truncate(b.len() * usize::from(*keep) / 255);
            }
            b
        }
        Some((_, rest)) => rest.to_vec(),
        None => return,
    };
    // Bound to this index, so the fuzzer explores past the binding check.
    if let Some(sum) = bytes.get_mut(16..48) {
        sum.copy_from_slice(&index.checksum());
    }
    // As a server loads it: only the header checked, every packet read
    // bounded; then as `verify` checks it: every packet at its length.
    let Ok(prefab) = Prefab::parse_unverified(&bytes[..], index) else {
        return;
    };
    for (t, track) in index.tracks().enumerate() {
        let p = prefab.track(t).unwrap();
        for i in 0..track.packet_count() {
            if let Some((at, pkt)) = p.packet(i) {
                assert!(pkt.len() <= usize::from(u16::MAX));
                assert!(at as usize + pkt.len() <= bytes.len());
            }
            let _ = p.spans(i..i + 1);
        }
    }
    if prefab.verify(index, &mut |_| Ok(())).is_err() {
        return;
    }
    for (t, track) in index.tracks().enumerate() {
        let p = prefab.track(t).unwrap();
        for i in 0..track.packet_count() {
            let (_, pkt) = p.packet(i).unwrap();
            assert_eq!(pkt.len(), 12 + track.packet(i).unwrap().payload_len());
        }
    }
});

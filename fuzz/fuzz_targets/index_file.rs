//! Index files of arbitrary bytes: opened unverified (as a server loads a
//! title) every accessor answers without panicking, and `verify` accepts
//! exactly what the full `Index::open` accepts.
#![no_main]

use std::sync::OnceLock;

use fjord_media::{Index, no_parity, synthetic::write_constant_rate};
use libfuzzer_sys::fuzz_target;

/// A valid index of five packets, and where inputs are written.
fn fixture() -> &'static (Vec<u8>, std::path::PathBuf) {
    static FIXTURE: OnceLock<(Vec<u8>, std::path::PathBuf)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fjord-fuzz-index-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let media = dir.join("t.ts");
        write_constant_rate(&media, 188, 10_000_000, 5, &no_parity).unwrap();
        let path = fjord_media::index::index_path_for(&media);
        (std::fs::read(&path).unwrap(), dir.join("input.fjidx"))
    })
}

fuzz_target!(|data: &[u8]| {
    let (valid, path) = fixture();
    // Odd first byte: the input is the file. Even: the valid index with the
    // input's (position, byte) pairs written over it.
    let bytes = match data.split_first() {
        Some((mode, rest)) if mode & 1 == 0 => {
            let mut b = valid.clone();
            for p in rest.chunks_exact(3) {
                let at = usize::from(u16::from_le_bytes([p[0], p[1]])) % b.len();
                b[at] = p[2];
            }
            b
        }
        Some((_, rest)) => rest.to_vec(),
        None => return,
    };
    std::fs::write(path, &bytes).unwrap();
    let Ok(index) = Index::open_unverified(path) else {
        assert!(Index::open(path).is_err());
        return;
    };
    let _ = (index.report(), index.format(), index.head_len(), index.source());
    for track in index.tracks() {
        let _ = track.desc();
        for i in 0..track.packet_count() {
            let rec = track.packet(i).unwrap();
            let _ = (rec.prefix(), rec.runs(&[0u8; 1024]));
        }
        let _ = track.sync_before(5_000_000);
        let found = track.first_sent_at_or_after(5_000_000, index.duration_ns(), &mut |_| Ok(()));
        assert!(found as usize <= track.packet_count());
    }
    let verified = index.verify(&mut |_| Ok(())).is_ok();
    assert_eq!(verified, Index::open(path).is_ok());
});

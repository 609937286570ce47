//! A title loads reading only what serving needs first, and its files are
//! verified whole afterwards, in the background: damage found then ends the
//! title's sessions and the next client gets it loaded afresh (here:
//! re-ingested, since the index is what was damaged).

use std::fs;
use std::time::{Duration, Instant};

use fjord_media::index::{Index, index_path_for};

use crate::common::{Server, ingest, media};

/// Flips the top byte of the first packet record's media offset: the
/// index's head stays valid, its checksum does not.
fn damage_first_record(index_path: &std::path::Path) {
    let at = {
        let idx = Index::open(index_path).unwrap();
        let records = idx.track(0).unwrap().records(0..1);
        records.as_ptr() as usize - idx.bytes().as_ptr() as usize
    };
    let mut bytes = fs::read(index_path).unwrap();
    bytes[at + 13] ^= 0x40;
    fs::write(index_path, &bytes).unwrap();
}

#[test]
fn damage_found_after_loading_reloads_the_title() {
    let server = Server::start_with("", |root| {
        let files = [(&media().clip, "clip.ts"), (&media().vbr, "vbr.ts")];
        ingest(root, &[], &files);
        damage_first_record(&index_path_for(&root.join("clip.ts")));
    });
    let index_path = index_path_for(&server.media_root().join("clip.ts"));
    assert!(Index::open(&index_path).is_err(), "the index is damaged");

    // Both load unverified: DESCRIBE answers without reading the index whole.
    for name in ["clip.ts", "vbr.ts"] {
        server.assert_describes(name);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let logged = |log: &str, a: &str, b: &str| log.lines().any(|l| l.contains(a) && l.contains(b));
    loop {
        let log = server.log_text();
        if logged(&log, "clip.ts.fjidx", "the title is loaded afresh")
            && logged(&log, "vbr.ts", "files verified")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no verification within 30 s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The next client gets clip.ts checked whole, found damaged, re-ingested.
    server.assert_describes("clip.ts");
    Index::open(&index_path).expect("re-ingested: the index verifies");
}

//! What etcd (or anyone answering at its address) sends a member: an
//! answer's first JSON document, a range's keys and values, and each value
//! as a member record. Decoding never panics; a record taken is one that
//! writes back to itself.
#![no_main]

use fjord_cluster::{Member, answer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = answer::is_event(data);
    check_record(data);
    let Ok(doc) = answer::first_document(data) else {
        return;
    };
    let listing = answer::listing(&doc);
    assert!(listing.kvs.iter().all(|(_, v)| v.is_some()));
    for (_, value) in &listing.kvs {
        check_record(value.as_deref().unwrap_or_default());
    }
    let _ = answer::id_of(&doc["ID"]);
});

fn check_record(bytes: &[u8]) {
    if let Ok(m) = Member::from_json(bytes) {
        assert_eq!(Member::from_json(&m.to_json()).as_ref(), Ok(&m));
    }
}

//! The counting allocator follows what the program holds.

use fjord_server::heap_count::{Counting, live_bytes};

#[global_allocator]
static HEAP: Counting = Counting;

#[test]
fn counts_what_is_held_through_growth_and_free() {
    let before = live_bytes().expect("installed: something was allocated");
    let mut v: Vec<u8> = Vec::with_capacity(1 << 20);
    let held = live_bytes().unwrap();
    assert!(held >= before + (1 << 20), "{before} -> {held}");
    v.reserve_exact(4 << 20); // empty: a realloc to 4 MiB
    let grown = live_bytes().unwrap();
    assert!(grown >= before + (4 << 20), "{before} -> {grown}");
    let z = vec![0u8; 1 << 20]; // alloc_zeroed
    assert!(live_bytes().unwrap() >= grown + (1 << 20));
    drop((v, z));
    let after = live_bytes().unwrap();
    // Other tests' threads may hold a little; not the 5 MiB.
    assert!(after < before + (1 << 20), "{before} -> {after}");
}

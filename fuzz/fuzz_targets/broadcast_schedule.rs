//! A broadcast schedule from the network (`DESCRIBE NAME?broadcast`):
//! `Plan::from_description` on any JSON never panics, and a plan it accepts
//! gives every arrival a join plan that starts no earlier than the arrival
//! and waits no longer than the plan's published bound.
#![no_main]

use fjord_broadcast::{Plan, describe::Description};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = serde_json::from_slice::<Description>(data) else {
        return;
    };
    let Ok(plan) = Plan::from_description(&d) else {
        return;
    };
    for arrival in [0, 1, plan.worst_wait_ns(), u64::from(u32::MAX)] {
        let j = plan.join(arrival);
        assert!(j.start_ns >= arrival);
        assert!(j.start_ns - arrival <= plan.worst_wait_ns());
    }
});

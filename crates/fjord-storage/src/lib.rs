//! fjord's storage layer: makes sure an engine thread never waits for a disk.
//!
//! (Contract: written as the crate grows.)

pub mod sched;

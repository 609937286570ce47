//! Gives the heap's freed memory back to the kernel once a minute. glibc
//! keeps what is freed in the arena of the thread that allocated it, and a
//! server's many threads (the runtime's, the engine's, the storage
//! workers') each keep some: RssAnon then creeps up with churn while the
//! heap in use does not (`fjord_heap_allocated_bytes` beside it in
//! `/metrics` tells which). `malloc_trim` walks the arenas and releases
//! their free pages, on a thread of its own: it takes each arena's lock in
//! turn (how long it took is logged at debug level), and a blocking-pool
//! thread started for it would come and go.

use std::time::Duration;

const EVERY: Duration = Duration::from_secs(60);

pub(crate) fn every_minute() {
    let started = std::thread::Builder::new()
        .name("fjord-heap-trim".into())
        .spawn(|| {
            loop {
                std::thread::sleep(EVERY);
                trim();
            }
        });
    if let Err(e) = started {
        tracing::warn!("no heap trimming: {e}");
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    let began = std::time::Instant::now();
    // SAFETY: malloc_trim only releases free memory the allocator holds.
    let released = unsafe { libc::malloc_trim(0) } == 1;
    let us = began.elapsed().as_micros() as u64;
    tracing::debug!(us, released, "heap trimmed");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

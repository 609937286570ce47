//! Many sessions of a title in the page cache cost their disk's workers
//! fewer wake-ups than refills: the checks that fall due close together
//! are looked at in one wake-up, and a worker that takes a refill it will
//! finish in microseconds keeps the timer instead of waking another to
//! hold it. Alone in its binary, as `wakeups.rs`: it counts this
//! process's storage threads' wake-ups.

mod common;

use std::time::{Duration, Instant};

use common::*;
use fjord_storage::{LeadConfig, Mode, REAL_TIME, Storage, StorageConfig, Uses};

#[test]
fn sessions_of_a_cached_title_cost_fewer_wake_ups_than_refills() {
    const SESSIONS: u32 = 40;
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    // As `fjord serve`'s defaults (four workers, a lead from the disk's
    // latency), with refills of two seconds of this title's 100 KB/s.
    let s = Storage::new(StorageConfig {
        lead: LeadConfig {
            read_bytes: 200_000,
            ..LeadConfig::default()
        },
        first_read: Duration::from_millis(200),
        budget: 1 << 30,
        ..StorageConfig::default()
    });
    // Sessions started within 100 ms of each other, as a load's are.
    let start = |i: u32| i / 4;
    let sessions: Vec<_> = (0..SESSIONS)
        .map(|i| {
            let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
            r.position(start(i), Mode::Starting, REAL_TIME);
            r
        })
        .collect();
    for (i, r) in (0..).zip(&sessions) {
        eventually("the first read", || r.cursor().ready_from(start(i)) > 0);
        r.position(start(i), Mode::Playing, REAL_TIME);
    }

    // They play (100 packets a second each) for 5 s, each on its own
    // phase, as an engine's sessions take their packets.
    let (runs, reads) = (worker_runs(), s.stats().reads);
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
        let us = began.elapsed().as_micros() as u32;
        for (i, r) in (0..).zip(&sessions) {
            // As the engine does: it publishes its place as it reads.
            let next = start(i) + (us + i * 250) / 10_000;
            assert!(
                r.cursor().ready_from(next) > 0,
                "session {i}: {next} resident"
            );
        }
    }
    let (runs, reads) = (worker_runs() - runs, s.stats().reads - reads);
    assert!(reads >= u64::from(SESSIONS) * 2, "{reads} refills");
    // A wake-up for every check and another to hand the timer over made
    // it 0.7 here (2.7 in `fjord serve` at 100 sessions); now 0.25.
    assert!(
        runs * 2 <= reads,
        "{runs} wake-ups of the disk's workers for {reads} refills"
    );
}

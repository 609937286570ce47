//! A disk's workers wake for work, not on a timer: one playing session
//! costs a look or a refill about once a second, an idle disk nothing.
//! Alone in its binary: it counts the wake-ups of this process's storage
//! threads (`/proc/self/task/*/schedstat`), which another test's service
//! would add to.

mod common;

use std::time::Duration;

use common::*;
use fjord_storage::{Mode, REAL_TIME, Uses};

#[test]
fn workers_wake_for_looks_and_refills_not_on_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    // 2 s of read-ahead: a refill about every second at 1x, and a look at
    // most every second in between.
    let s = storage(1 << 30);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(0, Mode::Starting, REAL_TIME);
    eventually("packet 0 is resident", || r.cursor().ready_from(0) > 0);
    r.position(0, Mode::Playing, REAL_TIME);
    eventually("the read-ahead is full", || r.cursor().ready_from(0) >= 190);

    // The session plays (100 packets a second) for 4 s.
    let before = worker_runs();
    let started = std::time::Instant::now();
    let mut next = 0;
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(10));
        next = (started.elapsed().as_millis() / 10) as u32;
        assert!(r.cursor().ready_from(next) > 0, "packet {next} is resident");
    }
    let playing = worker_runs() - before;
    // On a 200 ms and a 1 s timer, the two workers woke 26 times.
    assert!(playing <= 14, "{playing} wake-ups in 4 s of one session");
    assert!(next >= 390);

    // Paused, then gone: the disk's workers sleep.
    r.position(next, Mode::Paused, REAL_TIME);
    drop(r);
    eventually("the session is removed", || s.stats().sessions == 0);
    // Its last planned look (at most a second ahead) finds it gone.
    std::thread::sleep(Duration::from_millis(1200));
    let before = worker_runs();
    std::thread::sleep(Duration::from_secs(2));
    let idle = worker_runs() - before;
    assert!(idle <= 1, "{idle} wake-ups in 2 s of an idle disk");
}

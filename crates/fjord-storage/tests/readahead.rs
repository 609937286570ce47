//! The storage service against a fake title: one file of fixed-size
//! packets, one every 10 ms. The tests wait for the service's threads by
//! polling with a generous bound; they assert what was read and released,
//! never how fast.

mod common;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use common::*;
use fjord_storage::{Mode, REAL_TIME, ReadAhead, Storage, Uses};

#[test]
fn a_session_gets_its_read_ahead_and_releases_it_behind_and_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(5000, Mode::Starting, REAL_TIME);
    eventually("packet 5000 is resident", || {
        r.cursor().ready_from(5000) > 0
    });
    r.position(5000, Mode::Playing, REAL_TIME);
    // 2 s of read-ahead at 100 packets/s: about 200 packets ahead.
    eventually("the window reaches the read-ahead", || {
        r.cursor().ready_from(5000) >= 150
    });
    let pinned = s.stats().pinned_bytes;
    assert!(pinned >= 150 * PACKET as u64, "{pinned}");
    // The session moves on: what it passed is released, the window follows.
    for i in (5000..5600).step_by(20) {
        eventually("the window follows", || r.cursor().ready_from(i) > 0);
        std::thread::sleep(Duration::from_millis(2));
    }
    eventually("far ahead", || r.cursor().ready_from(5600) >= 100);
    assert!(
        s.stats().pinned_bytes < 2 * pinned + (1 << 20),
        "passed chunks are released: {} pinned",
        s.stats().pinned_bytes
    );
    drop(r);
    eventually("everything is released", || s.stats().pinned_bytes == 0);
    assert_eq!(s.stats().sessions, 0);
}

/// A session that moves through its title twice as fast (fast forward at
/// Scale 2, or RTSP `Speed: 2`) has twice the title read ahead: the same
/// read-ahead in wall time. Read at 1x, its window ran out (fast forward
/// waited for the storage layer at every other key frame in a soak).
#[test]
fn a_faster_session_reads_its_title_further_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(5000, Mode::Starting, 2 * REAL_TIME);
    eventually("packet 5000 is resident", || {
        r.cursor().ready_from(5000) > 0
    });
    r.position(5000, Mode::Playing, 2 * REAL_TIME);
    // 2 s of read-ahead at twice 100 packets/s: about 400 packets ahead
    // (at 1x: 200).
    eventually("the window reaches twice the read-ahead", || {
        r.cursor().ready_from(5000) >= 350
    });
    // Back at 1x, from where it stands, the next refill keeps to 2 s.
    let end = 5000 + r.cursor().ready_from(5000);
    r.position(end - 10, Mode::Playing, REAL_TIME);
    eventually("a 1x refill", || r.cursor().ready_from(end - 10) > 10);
    let ahead = r.cursor().ready_from(end - 10);
    assert!(ahead <= 250, "{ahead} packets read ahead at 1x");
}

/// A session set up but not played reads nothing: its PLAY may seek, and
/// a window read from packet 0 at set-up ended just past a PLAY's place
/// (its first packets then waited for the storage layer, in a soak).
#[test]
fn a_session_is_read_for_once_it_is_positioned() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    eventually("registered", || s.stats().sessions == 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(s.stats().pinned_bytes, 0, "read before its PLAY");
    r.position(180, Mode::Starting, REAL_TIME);
    eventually("the PLAY's place is read", || {
        r.cursor().ready_from(180) > 0
    });
}

#[test]
fn a_seek_moves_the_window_and_is_read_first() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(0, Mode::Starting, REAL_TIME);
    eventually("start resident", || r.cursor().ready_from(0) > 0);
    r.position(15_000, Mode::Starting, REAL_TIME);
    eventually("the new place is resident", || {
        r.cursor().ready_from(15_000) > 0
    });
    assert_eq!(r.cursor().ready_from(10), 0, "the old window is gone");
}

#[test]
fn a_changed_or_truncated_title_fails_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let a = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    a.position(0, Mode::Playing, REAL_TIME);
    eventually("resident", || a.cursor().ready_from(0) > 0);
    fake.changed.store(true, Ordering::Relaxed);
    a.position(0, Mode::Playing, REAL_TIME);
    eventually("the session is failed", || a.cursor().failed());

    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    fake.truncate(dir.path());
    let b = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    b.position(100, Mode::Starting, REAL_TIME);
    eventually("a read of a truncated file fails the session", || {
        b.cursor().failed()
    });
    assert_eq!(b.cursor().ready_from(100), 0);
}

#[test]
fn the_budget_bounds_what_is_pinned_and_sessions_wait_instead() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let budget = 4 << 20;
    let s = storage(budget);
    let sessions: Vec<_> = (0..40)
        .map(|i| {
            let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
            r.position(i * 500, Mode::Starting, REAL_TIME);
            r
        })
        .collect();
    eventually("some sessions wait for the budget", || {
        s.stats().budget_waits > 0
    });
    // A refill may overshoot by what one read covers per worker.
    assert!(
        s.stats().pinned_bytes <= budget + 2 * (1 << 20),
        "{} pinned of {budget}",
        s.stats().pinned_bytes
    );
    let waiting = sessions
        .iter()
        .enumerate()
        .filter(|(i, r)| r.cursor().ready_from(*i as u32 * 500) == 0)
        .count();
    assert!(waiting > 0, "not every session fits the budget");
}

#[test]
fn a_title_head_stays_resident_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let head = s.hold_head(fake.clone()).unwrap();
    // 1 s of packets, rounded up to whole chunks.
    let pinned = s.stats().pinned_bytes;
    assert!(
        (100 * PACKET as u64..=100 * PACKET as u64 + 256 * 1024).contains(&pinned),
        "{pinned}"
    );
    drop(head);
    assert_eq!(s.stats().pinned_bytes, 0);
}

/// Bulk work beside playing sessions still gets its turns (it is not
/// starved), and every session keeps its read-ahead meanwhile.
#[test]
fn bulk_work_progresses_beside_playing_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let sessions: Vec<_> = (0..8)
        .map(|i| {
            let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
            r.position(i * 2000, Mode::Playing, REAL_TIME);
            r
        })
        .collect();
    let bulk = {
        let s = s.clone();
        std::thread::spawn(move || {
            let mut pacer = s.bulk_pacer(1);
            for piece in 1..=50u64 {
                pacer.progress(piece << 20);
            }
        })
    };
    for (i, r) in sessions.iter().enumerate() {
        eventually("every session has its read-ahead", || {
            r.cursor().ready_from(i as u32 * 2000) >= 150
        });
    }
    eventually("the bulk work finished (not starved)", || {
        bulk.is_finished()
    });
    bulk.join().unwrap();
}

/// A session that starts far into a title (or seeks) commits only what its
/// refill reads, so the budget does not hold back the others meanwhile.
#[test]
fn a_seek_far_into_a_title_commits_only_its_refill() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    // Room for a few windows, far less than the title.
    let s = storage(4 << 20);
    let far = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    far.position(19_000, Mode::Starting, REAL_TIME);
    let near = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    near.position(10, Mode::Starting, REAL_TIME);
    eventually("both sessions are resident", || {
        far.cursor().ready_from(19_000) > 0 && near.cursor().ready_from(10) > 0
    });
    assert_eq!(s.stats().budget_waits, 0, "nobody waited for the budget");
}

/// The storage layer reads a title's tables (index records, offset tables)
/// as whole requests before it plans from them or asks which bytes packets
/// touch: past what the PLAY's lookup read, nothing is faulted in through
/// the mapping a page at a time, nor under a disk's lock.
#[test]
fn planning_reads_only_tables_read_before() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let head = s.hold_head(fake.clone()).unwrap();
    // What a PLAY's start lookup reads: the start's record.
    fake.read.lock().unwrap().push(5000..5001);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(5000, Mode::Starting, REAL_TIME);
    eventually("packet 5000 is resident", || {
        r.cursor().ready_from(5000) > 0
    });
    // Play 10 s of packets quickly: many refills, each planned from the
    // tables the one before read.
    for i in 5000..6000 {
        eventually("the window keeps ahead", || r.cursor().ready_from(i) > 0);
        r.position(i, Mode::Playing, REAL_TIME);
        std::thread::sleep(Duration::from_micros(200));
    }
    let strays = fake.strays.lock().unwrap().clone();
    assert!(
        strays.is_empty(),
        "tables of packets {strays:?} read unread"
    );
    drop((r, head));
}

/// A session whose read-ahead lead is exactly the low-water mark (regular
/// packet times make that common: a CBR title) is looked at again later,
/// not at once: planning looked at it again and again at the same instant
/// under the disk's lock, and every engine thread that registered a
/// session waited for that lock for ever (found by `fjord bench soak`).
#[test]
fn a_lead_of_exactly_the_low_water_mark_does_not_stall_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(1000, Mode::Starting, REAL_TIME);
    eventually("packet 1000 is resident", || {
        r.cursor().ready_from(1000) > 0
    });
    r.position(1000, Mode::Playing, REAL_TIME);
    eventually("the read-ahead is full", || {
        r.cursor().ready_from(1000) >= 190
    });
    // 2 s of read-ahead, 1 s low-water mark, a packet every 10 ms: stand
    // exactly 100 packets before the window's end.
    let end = 1000 + r.cursor().ready_from(1000);
    r.position(end - 100, Mode::Playing, REAL_TIME);
    std::thread::sleep(Duration::from_millis(50));
    let (tx, rx) = std::sync::mpsc::channel();
    let fake2 = fake.clone();
    let s2 = s.clone();
    std::thread::spawn(move || {
        // Registering takes the disk's lock, as an engine thread does.
        let other = s2.register(fake2, 0, Uses::MEDIA);
        let _ = tx.send(other.is_ok());
    });
    let answered = rx.recv_timeout(Duration::from_secs(5));
    assert_eq!(answered, Ok(true), "the disk's lock is held for ever");
    drop(r);
}

/// Sessions come and go faster than the workers look (registering never
/// waits for them): each is planned once in place, those dropped before
/// that are removed, and a session registered after them all is read.
#[test]
fn sessions_registered_and_dropped_in_a_burst_are_all_accounted_for() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::new(dir.path());
    let s = storage(1 << 30);
    for round in 0..5u32 {
        let burst: Vec<_> = (0..100u32)
            .map(|i| {
                let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
                r.position(round * 1000 + i * 7, Mode::Starting, REAL_TIME);
                r
            })
            .collect();
        drop(burst);
    }
    let r = s.register(fake.clone(), 0, Uses::MEDIA).unwrap();
    r.position(3000, Mode::Starting, REAL_TIME);
    eventually("the last session is read", || {
        r.cursor().ready_from(3000) > 0
    });
    eventually("the dropped ones are removed", || s.stats().sessions == 1);
    drop(r);
    eventually("everything is released", || {
        let st = s.stats();
        st.sessions == 0 && st.pinned_bytes == 0
    });
}

/// A paused session gives back what it holds beyond half a first read
/// past its place, and PLAY reads it again.
#[test]
fn a_paused_session_gives_back_its_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(1 << 30);
    let (r, playing) = playing_fast_at_5000(&s, Fake::new(dir.path()));
    let fast = 16 * REAL_TIME;
    r.position(5000, Mode::Paused, fast);
    // Half the first read (200 ms) at 16x: 160 packets; the first read's
    // grant (320 packets) is what stays.
    eventually("the window shrinks to the first grant", || {
        (1..=400).contains(&r.cursor().ready_from(5000))
    });
    let paused = s.stats().pinned_bytes;
    assert!(
        paused + (1 << 20) <= playing,
        "{paused} pinned paused, {playing} playing"
    );
    r.position(5000, Mode::Playing, fast);
    eventually("PLAY reads it again", || {
        r.cursor().ready_from(5000) >= 2000
    });
}

/// A playing session whose engine stops taking packets (its client reads
/// nothing) gives back what it holds beyond half a first read after a few
/// seconds, and reads ahead again once the engine moves on.
#[test]
fn a_stalled_session_gives_back_its_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(1 << 30);
    let (r, playing) = playing_fast_at_5000(&s, Fake::new(dir.path()));
    // The engine stays at 5000 (its client stalled): a few seconds on,
    // only the first grant stays.
    eventually("the window shrinks to the first grant", || {
        (1..=400).contains(&r.cursor().ready_from(5000))
    });
    let stalled = s.stats().pinned_bytes;
    assert!(
        stalled + (1 << 20) <= playing,
        "{stalled} pinned stalled, {playing} playing"
    );
    // The client reads again: the engine moves, the lead comes back.
    eventually("moving on reads ahead again", || {
        r.cursor().ready_from(5001) >= 2000
    });
}

/// A session of `fake` playing at 16x from packet 5000 with its read-ahead
/// in place, and the bytes pinned then. At 16x, 1,600 packets (1.6 MB) a
/// second, so the 2 s lead spans chunks.
fn playing_fast_at_5000(s: &Storage, fake: Arc<Fake>) -> (ReadAhead, u64) {
    let r = s.register(fake, 0, Uses::MEDIA).unwrap();
    let fast = 16 * REAL_TIME;
    r.position(5000, Mode::Starting, fast);
    eventually("packet 5000 is resident", || {
        r.cursor().ready_from(5000) > 0
    });
    r.position(5000, Mode::Playing, fast);
    eventually("the window reaches the read-ahead", || {
        r.cursor().ready_from(5000) >= 2000
    });
    (r, s.stats().pinned_bytes)
}

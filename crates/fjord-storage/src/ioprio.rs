//! The kernel's I/O priority classes for the calling thread: stream reads
//! in the real-time class, bulk work idle, so a disk scheduler that honours
//! them (BFQ, mq-deadline) orders our requests as the storage layer does.
//! A throttle above the scheduler (cgroup blkio) does not look at them:
//! that is why bulk work also waits for its turn in [`crate::sched`].

const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const CLASS_SHIFT: u32 = 13;
const CLASS_RT: libc::c_int = 1;
const CLASS_BE: libc::c_int = 2;
const CLASS_IDLE: libc::c_int = 3;

fn set(class: libc::c_int, level: libc::c_int) -> bool {
    let prio = class << CLASS_SHIFT | level;
    // SAFETY: ioprio_set on the calling thread (who = 0) with a valid value.
    unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, prio) == 0 }
}

/// The storage layer's read-ahead threads: real-time class when allowed
/// (CAP_SYS_ADMIN), else the highest best-effort level.
pub fn stream_reads() {
    if !set(CLASS_RT, 4) {
        set(CLASS_BE, 0);
    }
}

/// Background threads (ingest, parity, packet files, verify): idle class.
pub fn bulk() {
    set(CLASS_IDLE, 0);
}

/// The calling thread's class, for tests.
pub fn class() -> i32 {
    // SAFETY: ioprio_get on the calling thread.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
    (prio >> CLASS_SHIFT) as i32
}

#[cfg(test)]
mod tests {
    #[test]
    fn bulk_threads_are_idle_class() {
        std::thread::spawn(|| {
            super::bulk();
            assert_eq!(super::class(), super::CLASS_IDLE);
        })
        .join()
        .unwrap();
    }
}

//! An engine thread's command queue: senders never block, and the thread
//! waits for a command or its next deadline without spinning.
//!
//! Written here because crossbeam's blocking receive spins, then calls
//! `sched_yield` a few times, before it sleeps: right for a thread that
//! expects a message at once, but an engine thread sleeps between ticks
//! hundreds of times a second, and the spinning and yields were about 8 %
//! of its CPU in a profile of 100 sessions. Here the thread parks at once;
//! a sender unparks it only when it is parked (an event count: the thread
//! says it sleeps, then looks at the queue once more before it parks).

use std::{
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering::SeqCst, fence},
    },
    thread::Thread,
    time::Instant,
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

struct Shared {
    /// The receiving thread is parked, or about to be.
    sleeping: AtomicBool,
    thread: OnceLock<Thread>,
}

/// The sending side, held by the control plane; dropping it wakes the
/// thread, which then finds the queue disconnected.
pub(crate) struct Outbox<T> {
    /// Taken only when dropped, so the queue is disconnected before the
    /// thread is woken to find it so.
    tx: Option<Sender<T>>,
    shared: Arc<Shared>,
}

/// The receiving side, owned by one thread.
pub(crate) struct Inbox<T> {
    rx: Receiver<T>,
    shared: Arc<Shared>,
}

pub(crate) fn channel<T>() -> (Outbox<T>, Inbox<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let shared = Arc::new(Shared {
        sleeping: AtomicBool::new(false),
        thread: OnceLock::new(),
    });
    let inbox = Inbox {
        rx,
        shared: shared.clone(),
    };
    let outbox = Outbox {
        tx: Some(tx),
        shared,
    };
    (outbox, inbox)
}

impl<T> Outbox<T> {
    /// Queues `msg`; false when the receiving side is gone.
    pub fn send(&self, msg: T) -> bool {
        if self.tx.as_ref().is_none_or(|tx| tx.send(msg).is_err()) {
            return false;
        }
        self.wake();
        true
    }

    fn wake(&self) {
        // Pairs with the fence in `recv_deadline`: either the thread sees
        // the message before it parks, or this sees it sleeping.
        fence(SeqCst);
        if self.shared.sleeping.load(SeqCst)
            && let Some(t) = self.shared.thread.get()
        {
            t.unpark();
        }
    }
}

impl<T> Drop for Outbox<T> {
    fn drop(&mut self) {
        drop(self.tx.take());
        self.wake();
    }
}

impl<T> Inbox<T> {
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv()
    }

    /// The next message, waiting for it until `deadline` at most.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        let thread = self.shared.thread.get_or_init(std::thread::current);
        debug_assert_eq!(thread.id(), std::thread::current().id());
        loop {
            match self.rx.try_recv() {
                Ok(m) => return Ok(m),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RecvTimeoutError::Timeout);
            }
            self.shared.sleeping.store(true, SeqCst);
            fence(SeqCst);
            let looked = self.rx.try_recv();
            if !matches!(looked, Err(TryRecvError::Empty)) {
                self.shared.sleeping.store(false, SeqCst);
                return looked.map_err(|_| RecvTimeoutError::Disconnected);
            }
            std::thread::park_timeout(deadline - now);
            self.shared.sleeping.store(false, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_parked_thread_wakes_for_a_message_and_times_out_without_one() {
        let (tx, rx) = channel::<u32>();
        let receiver = std::thread::spawn(move || {
            let t = Instant::now();
            let first = rx.recv_deadline(t + Duration::from_secs(10));
            let woke_in = t.elapsed();
            let t = Instant::now();
            let none = rx.recv_deadline(t + Duration::from_millis(50));
            let waited = t.elapsed();
            let gone = rx.recv_deadline(Instant::now() + Duration::from_secs(10));
            (first, woke_in, none, waited, gone)
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(tx.send(7));
        std::thread::sleep(Duration::from_millis(200));
        drop(tx);
        let (first, woke_in, none, waited, gone) = receiver.join().unwrap();
        assert_eq!(first, Ok(7));
        // Woken by the message, long before its 10 s deadline.
        assert!(woke_in < Duration::from_secs(5), "{woke_in:?}");
        assert_eq!(none, Err(RecvTimeoutError::Timeout));
        assert!(waited >= Duration::from_millis(50), "{waited:?}");
        // Dropping the sender woke it: disconnected, not a 10 s wait.
        assert_eq!(gone, Err(RecvTimeoutError::Disconnected));
    }

    #[test]
    fn no_message_is_lost_between_many_senders_and_a_sleeping_thread() {
        let (tx, rx) = channel::<u64>();
        let tx = Arc::new(tx);
        let senders: Vec<_> = (0..4)
            .map(|k| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000u64 {
                        assert!(tx.send(k * 1_000_000 + i));
                        if i % 64 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut got = std::collections::HashSet::new();
        while got.len() < 20_000 {
            // The thread parks whenever the queue is empty; a wake-up lost
            // after the last message would leave it waiting 10 s.
            let m = rx.recv_deadline(Instant::now() + Duration::from_secs(10));
            assert!(got.insert(m.expect("woken for every message")));
        }
        for s in senders {
            s.join().unwrap();
        }
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    }
}

//! Why a late packet was late, told by the engine thread that sent it.
//!
//! A tick sends what is due at its start. A packet leaves late because its
//! tick began late, because the tick was long in reaching it, or because
//! its session held it back (it waited for the storage layer, or for a
//! full socket). A tick begins late because the thread slept through its
//! deadline, the kernel or the hypervisor giving it the CPU back late (the
//! machine's), or because it was still at earlier work, a tick or commands
//! (the server's); time spent in the tick is the server's too. Counting
//! these per packet is what a soak needs to say whose a late packet is: a
//! 10 s sample of the kernel's counters cannot place a 3 ms delay.

use std::time::{Duration, Instant};

/// A packet leaving later than this after its schedule counts as late.
pub const LATE: Duration = Duration::from_millis(2);

/// How a tick began: how long after its deadline, and how much of that
/// the thread spent asleep past it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TickStart {
    pub lag: Duration,
    pub overslept: Duration,
}

impl TickStart {
    /// A tick beginning at `now` that was due at `deadline`; the thread
    /// went to sleep at `slept` and woke (a command came, or its timer
    /// fired) at `woke`.
    pub fn new(deadline: Instant, slept: Instant, woke: Instant, now: Instant) -> TickStart {
        let lag = now.saturating_duration_since(deadline);
        let overslept = match slept >= deadline {
            true => Duration::ZERO,
            false => woke.saturating_duration_since(deadline).min(lag),
        };
        TickStart { lag, overslept }
    }
}

/// Why a session held its packets back: what it waited for since its
/// last packet left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The storage layer: the next packet was not resident yet (the
    /// server's).
    Storage,
    /// A full socket: the kernel or the client took nothing more (a TCP
    /// viewer that stopped reading: the client's).
    Socket,
}

/// What made a packet late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Its tick's delay, mostly the thread's sleep past its deadline.
    WokeLate,
    /// Its tick's delay, mostly the thread's own work.
    Busy,
    /// It would have been late in a tick on time: its session held it, for
    /// the reason it waited for, or none it knew of.
    Held(Option<Hold>),
}

/// The cause of `lateness` (beyond [`LATE`]) of a packet that left
/// `in_tick` into a tick that began as `start` says, from a session that
/// waited for `hold` since its last packet left: the larger share of the
/// lateness. What the tick's delay does not explain is the session's: its
/// wait when it had one; when it had none, only beyond [`LATE`] (below
/// that, the packet could have been on time in the tick).
pub(crate) fn cause(
    lateness: Duration,
    start: TickStart,
    in_tick: Duration,
    hold: Option<Hold>,
) -> Cause {
    let delay = start.lag + in_tick;
    let held = lateness.saturating_sub(delay);
    if held > LATE || hold.is_some() && held >= delay {
        Cause::Held(hold)
    } else if start.overslept >= delay.saturating_sub(start.overslept) {
        Cause::WokeLate
    } else {
        Cause::Busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn start(lag: u64, overslept: u64) -> TickStart {
        TickStart {
            lag: ms(lag),
            overslept: ms(overslept),
        }
    }

    #[test]
    fn a_thread_asleep_at_its_deadline_and_woken_late_overslept() {
        let t = Instant::now();
        let s = TickStart::new(t + ms(10), t, t + ms(15), t + ms(15));
        assert_eq!(s, start(5, 5));
        // Woken 1 ms late, then 4 ms of commands.
        let s = TickStart::new(t + ms(10), t, t + ms(11), t + ms(15));
        assert_eq!(s, start(5, 1));
    }

    #[test]
    fn a_thread_at_work_past_its_deadline_did_not_oversleep() {
        let t = Instant::now();
        // Went to sleep after the deadline had passed.
        let s = TickStart::new(t + ms(10), t + ms(12), t + ms(12), t + ms(13));
        assert_eq!(s, start(3, 0));
        // Woken by a command before the deadline, handling it ran past.
        let s = TickStart::new(t + ms(10), t, t + ms(9), t + ms(14));
        assert_eq!(s, start(4, 0));
        // On time.
        let s = TickStart::new(t + ms(10), t, t + ms(3), t + ms(3));
        assert_eq!(s, start(0, 0));
    }

    #[test]
    fn the_larger_share_of_the_delay_is_the_cause() {
        let storage = Some(Hold::Storage);
        assert_eq!(cause(ms(5), start(4, 4), ms(0), None), Cause::WokeLate);
        assert_eq!(cause(ms(6), start(4, 4), ms(0), storage), Cause::WokeLate);
        // 2.1 ms late, 0.5 ms of it the tick's: the session's wait.
        let (late, lag, in_tick) = (
            Duration::from_micros(2100),
            Duration::from_micros(300),
            Duration::from_micros(200),
        );
        let small = TickStart {
            lag,
            overslept: Duration::ZERO,
        };
        assert_eq!(cause(late, small, in_tick, storage), Cause::Held(storage));
        // No wait of its own: the tick's delay is all there is to blame.
        assert_eq!(cause(late, small, in_tick, None), Cause::Busy);
        assert_eq!(cause(ms(5), start(4, 1), ms(0), None), Cause::Busy);
        // 4 ms asleep, then 5 ms into the tick: the tick's own work.
        assert_eq!(cause(ms(9), start(4, 4), ms(5), None), Cause::Busy);
        assert_eq!(cause(ms(4), start(0, 0), ms(3), storage), Cause::Busy);
    }

    #[test]
    fn lateness_beyond_the_delay_was_held_by_the_session() {
        let socket = Some(Hold::Socket);
        assert_eq!(
            cause(ms(7), start(4, 4), ms(0), socket),
            Cause::Held(socket)
        );
        assert_eq!(
            cause(ms(3), TickStart::default(), ms(0), None),
            Cause::Held(None)
        );
        let storage = Some(Hold::Storage);
        assert_eq!(
            cause(ms(8), start(1, 1), ms(4), storage),
            Cause::Held(storage)
        );
    }
}

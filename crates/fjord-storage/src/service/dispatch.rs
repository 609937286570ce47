//! How a disk's workers find their next refill: the looks that fall due
//! (together, within [`EARLY`]), the one timer a sleeping worker holds
//! for the next look, and the scheduler's pick (earliest deadline first,
//! bulk turns handed over on the way). Workers wake for work: a look
//! falling due (the timer's holder only), a refill queued, a session
//! registered or moved.

use std::{
    cmp::Reverse,
    time::{Duration, Instant},
};

use super::{DiskState, EARLY, Rate, Refill, Tag, Worker, lock, piece_packets};
use crate::sched::Class;

impl Worker {
    pub(super) fn run(self) {
        crate::ioprio::stream_reads();
        loop {
            let refill = self.next_refill();
            let (result, bytes) = self.pin_pieces(&refill);
            self.finish(refill, result, bytes);
        }
    }

    /// Plans what is due and takes the most urgent refill; waits for one.
    fn next_refill(&self) -> Refill {
        loop {
            // Before looking: work made after this wakes the wait below.
            let seen = self.disk.wake.seen();
            let mut st = lock(&self.disk.state);
            if st.timer.is_some_and(|(_, w)| w == self.index) {
                st.timer = None;
            }
            let now = Instant::now();
            // Before the pokes: a poke may be about an entry added since.
            while let Ok((id, entry)) = self.disk.added.1.try_recv() {
                if st.entries.len() <= id {
                    st.entries.resize_with(id + 1, || None);
                }
                st.entries[id] = Some(entry);
                self.plan(&mut st, id, now);
            }
            while let Ok(id) = self.disk.pokes.1.try_recv() {
                self.plan(&mut st, id, now);
            }
            self.plan_due(&mut st, now);
            if let Some(r) = self.take(&mut st, now) {
                if self.hand_off(&st, now) {
                    self.disk.wake.notify_one();
                }
                return r;
            }
            let next = st.checks.peek().map(|Reverse((at, ..))| *at);
            let wait = match (next, st.timer) {
                (Some(at), held) if needs_timer(at, held) => {
                    st.timer = Some((at, self.index));
                    Some(at.saturating_duration_since(now))
                }
                _ => None,
            };
            drop(st);
            self.disk.wake.wait(seen, wait);
        }
    }

    /// Looks at the entries whose checks fall due within [`EARLY`]: each is
    /// that close to its low-water mark, so `schedule` refills it now, as
    /// it would at its check, and one wake-up serves them all. (With a
    /// wake-up per check, and another per refill to hand the timer on, 100
    /// sessions of a cached title woke their disk's workers 165 times a
    /// second for 60 refills: a quarter of the workers' CPU went to it.)
    /// Popped before planning: a check planned again waits for the next
    /// look.
    fn plan_due(&self, st: &mut DiskState, now: Instant) {
        let mut due = std::mem::take(&mut st.due);
        while let Some(&Reverse((at, id, generation))) = st.checks.peek() {
            if at >= now + EARLY {
                break;
            }
            st.checks.pop();
            let current = st.entries.get(id).and_then(Option::as_ref);
            if current.map(|e| e.generation) == Some(generation) {
                due.push(id);
            }
        }
        for &id in &due {
            self.plan(st, id, now);
        }
        due.clear();
        st.due = due;
    }

    /// Whether another worker must wake when this one takes a refill: for
    /// the next refill queued, or for a check no sleeping worker's timer
    /// covers and that falls due before this refill is likely done (the
    /// disk's worst recent latency, twice). Otherwise this worker takes
    /// the timer itself when it is back: a refill from the page cache
    /// takes microseconds, and a wake-up per refill cost more than it.
    fn hand_off(&self, st: &DiskState, now: Instant) -> bool {
        let queued = st.sched.queued_rt() + st.sched.queued_bulk();
        let back_by = now + self.disk.lead.worst() * 2;
        queued > 0
            || st
                .checks
                .peek()
                .is_some_and(|Reverse((at, ..))| *at < back_by && needs_timer(*at, st.timer))
    }

    /// The next refill the scheduler dispatches; bulk turns it meets are
    /// handed to their waiting jobs on the way.
    fn take(&self, st: &mut DiskState, now: Instant) -> Option<Refill> {
        while let Some(d) = st.sched.next(self.disk.now_ns(now)) {
            let (id, generation) = match d.tag {
                Tag::Bulk(turn) => {
                    *lock(&turn.ticket) = Some(d.ticket);
                    turn.given.notify_one();
                    continue;
                }
                Tag::Refill { id, generation } => (id, generation),
            };
            let live = st.entries.get_mut(id).and_then(Option::as_mut);
            let Some(e) = live.filter(|e| e.generation == generation) else {
                st.sched.complete(d.ticket, self.disk.now_ns(now));
                continue;
            };
            let Some((end, committed)) = e.refill else {
                st.sched.complete(d.ticket, self.disk.now_ns(now));
                continue;
            };
            // The running refill carries its commitment from here on.
            e.refill = Some((end, 0));
            let (_, from) = e.cursor.window();
            let deadline = match d.class {
                Class::Rt { deadline_ns } => deadline_ns,
                Class::Bulk => self.disk.now_ns(now),
            };
            return Some(Refill {
                ticket: d.ticket,
                committed,
                id,
                source: e.source.clone(),
                track: e.track,
                uses: e.uses,
                packets: from..end,
                rate: Rate(e.cursor.rate()),
                deadline: self.disk.epoch + Duration::from_nanos(deadline),
                asked: e.asked,
                taken: now,
                high: self.lead(e).high,
                piece: piece_packets(&*e.source, e.track, e.bytes_per_s),
            });
        }
        None
    }
}

/// Whether a check due `at` needs a worker to take the timer: the timer
/// goes to whoever would wake for the next check soonest, since a check
/// planned after its holder fell asleep may be due before it wakes.
fn needs_timer(at: Instant, held: Option<(Instant, usize)>) -> bool {
    held.is_none_or(|(until, _)| at < until)
}

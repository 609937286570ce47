//! A timing wheel of session wake-ups: 100 µs slots, O(1) insert, and a
//! bitmap to find the next occupied slot without scanning. Microsecond
//! pacing of thousands of sessions is ours to write: no crate does it
//! without a runtime.

use std::time::{Duration, Instant};

pub const TICK: Duration = Duration::from_micros(100);
const SLOTS: usize = 4096;
const WORDS: usize = SLOTS / 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: u32,
    pub generation: u32,
    pub due: Instant,
}

pub struct Wheel {
    origin: Instant,
    /// Tick number of the slot not yet expired.
    cursor: u64,
    slots: Vec<Vec<Entry>>,
    occupied: [u64; WORDS],
    len: usize,
}

impl Wheel {
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            cursor: 0,
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; WORDS],
            len: 0,
        }
    }

    fn tick_of(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.origin).as_nanos() / TICK.as_nanos()) as u64
    }

    /// Schedules `key`. Entries further ahead than the wheel spans land in
    /// its last slot and are put back when it comes round.
    pub fn insert(&mut self, e: Entry) {
        let tick = self
            .tick_of(e.due)
            .clamp(self.cursor, self.cursor + SLOTS as u64 - 1);
        let slot = (tick % SLOTS as u64) as usize;
        self.slots[slot].push(e);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
    }

    /// Moves every entry of the slots up to `now` into `out`; callers put
    /// back entries that are not due yet (see [`Wheel::insert`]).
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Entry>) {
        let until = self.tick_of(now);
        while self.cursor <= until && self.len > 0 {
            let Some(next) = self.next_tick() else { break };
            if next > until {
                break;
            }
            let slot = (next % SLOTS as u64) as usize;
            self.len -= self.slots[slot].len();
            out.append(&mut self.slots[slot]);
            self.occupied[slot / 64] &= !(1 << (slot % 64));
            self.cursor = next + 1;
        }
        self.cursor = self.cursor.max(until + 1);
    }

    /// The tick of the first occupied slot at or after the cursor.
    fn next_tick(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let start = (self.cursor % SLOTS as u64) as usize;
        for step in 0..=WORDS {
            let w = (start / 64 + step) % WORDS;
            let mut bits = self.occupied[w];
            if step == 0 {
                bits &= u64::MAX << (start % 64);
            }
            if bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (slot + SLOTS - start) % SLOTS;
                return Some(self.cursor + ahead as u64);
            }
        }
        None
    }

    /// When the earliest scheduled slot begins.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.next_tick()
            .map(|t| self.origin + TICK * u32::try_from(t).unwrap_or(u32::MAX))
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(key: u32, due: Instant) -> Entry {
        Entry {
            key,
            generation: 0,
            due,
        }
    }

    #[test]
    fn entries_come_out_in_slot_order_when_due() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        let ms = Duration::from_millis;
        w.insert(e(1, t0 + ms(5)));
        w.insert(e(2, t0 + ms(1)));
        w.insert(e(3, t0 + ms(5) + Duration::from_micros(30)));
        assert_eq!(w.next_deadline(), Some(t0 + ms(1)));
        let mut out = Vec::new();
        w.expire(t0 + Duration::from_micros(900), &mut out);
        assert!(out.is_empty());
        w.expire(t0 + ms(1), &mut out);
        assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), [2]);
        out.clear();
        w.expire(t0 + ms(6), &mut out);
        let mut keys: Vec<u32> = out.iter().map(|e| e.key).collect();
        keys.sort();
        assert_eq!(keys, [1, 3]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn far_entries_wait_in_the_last_slot_and_keep_their_due_time() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        let far = t0 + Duration::from_secs(5);
        w.insert(e(9, far));
        let mut out = Vec::new();
        w.expire(t0 + TICK * (SLOTS as u32), &mut out);
        assert_eq!(
            out,
            [e(9, far)],
            "surfaces when its clamped slot comes round"
        );
    }

    #[test]
    fn past_entries_expire_at_once_and_the_wheel_wraps() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        let mut out = Vec::new();
        for round in 1..5u32 {
            let now = t0 + TICK * (SLOTS as u32) * round / 2;
            w.insert(e(round, now - Duration::from_millis(1)));
            w.insert(e(100 + round, now + Duration::from_millis(1)));
            w.expire(now, &mut out);
            assert!(out.iter().any(|x| x.key == round));
            assert!(out.iter().all(|x| x.key != 100 + round || x.due <= now));
            out.clear();
        }
    }
}

//! A timing wheel of session wake-ups: 100 µs slots holding intrusive
//! doubly linked lists of session keys, so scheduling, rescheduling and
//! cancelling are O(1) and never allocate; a bitmap of occupied slots finds
//! the next deadline without scanning. Microsecond pacing of thousands of
//! sessions is ours to write: no crate does it without a runtime.

use std::time::{Duration, Instant};

pub const TICK: Duration = Duration::from_micros(100);
const SLOTS: usize = 4096;
const WORDS: usize = SLOTS / 64;
const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    /// The slot the key is in, or `NONE`.
    slot: u32,
    due: Instant,
}

pub struct Wheel {
    origin: Instant,
    /// Tick number of the first slot not yet expired.
    cursor: u64,
    heads: Vec<u32>,
    links: Vec<Link>,
    occupied: [u64; WORDS],
    len: usize,
}

impl Wheel {
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            cursor: 0,
            heads: vec![NONE; SLOTS],
            links: Vec::new(),
            occupied: [0; WORDS],
            len: 0,
        }
    }

    /// Makes room for keys below `n` (allocates only when keys grow).
    pub fn reserve_keys(&mut self, n: usize) {
        if self.links.len() < n {
            let idle = Link {
                prev: NONE,
                next: NONE,
                slot: NONE,
                due: self.origin,
            };
            self.links.resize(n, idle);
        }
    }

    fn tick_of(&self, t: Instant) -> u64 {
        (t.saturating_duration_since(self.origin).as_nanos() / TICK.as_nanos()) as u64
    }

    /// Schedules `key` at `due`, replacing any earlier schedule. A time
    /// further ahead than the wheel spans waits in its last slot and is put
    /// back when that comes round.
    pub fn insert(&mut self, key: u32, due: Instant) {
        self.remove(key);
        let tick = self
            .tick_of(due)
            .clamp(self.cursor, self.cursor + SLOTS as u64 - 1);
        let slot = (tick % SLOTS as u64) as usize;
        let head = self.heads[slot];
        self.links[key as usize] = Link {
            prev: NONE,
            next: head,
            slot: slot as u32,
            due,
        };
        if head != NONE {
            self.links[head as usize].prev = key;
        }
        self.heads[slot] = key;
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.len += 1;
    }

    /// Cancels `key`'s wake-up, if any.
    pub fn remove(&mut self, key: u32) {
        let Some(l) = self.links.get(key as usize).copied() else {
            return;
        };
        if l.slot == NONE {
            return;
        }
        if l.prev != NONE {
            self.links[l.prev as usize].next = l.next;
        } else {
            self.heads[l.slot as usize] = l.next;
            if l.next == NONE {
                self.occupied[l.slot as usize / 64] &= !(1 << (l.slot % 64));
            }
        }
        if l.next != NONE {
            self.links[l.next as usize].prev = l.prev;
        }
        self.links[key as usize].slot = NONE;
        self.len -= 1;
    }

    /// Takes every key due by `now` off the wheel into `out`.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<u32>) {
        let until = self.tick_of(now);
        while let Some(next) = self.next_tick() {
            if next > until {
                break;
            }
            let slot = (next % SLOTS as u64) as usize;
            self.cursor = next;
            let mut key = self.heads[slot];
            while key != NONE {
                let l = self.links[key as usize];
                self.remove(key);
                if self.tick_of(l.due) <= until {
                    out.push(key);
                } else {
                    // A far entry parked in the last slot: back it goes.
                    self.cursor = next + 1;
                    self.insert(key, l.due);
                    self.cursor = next;
                }
                key = l.next;
            }
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

    /// `t` moved back to a multiple of `ticks` ticks: wake-ups on a coarser
    /// grid gather more sessions per tick (fewer sleeps, bigger batches).
    pub fn align_down(&self, t: Instant, ticks: u64) -> Instant {
        let tick = self.tick_of(t) / ticks.max(1) * ticks.max(1);
        self.origin + TICK * u32::try_from(tick).unwrap_or(u32::MAX)
    }

    /// When the earliest scheduled slot begins.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.next_tick()
            .map(|t| self.origin + TICK * u32::try_from(t).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel(t0: Instant) -> Wheel {
        let mut w = Wheel::new(t0);
        w.reserve_keys(16);
        w
    }

    #[test]
    fn keys_come_out_when_due() {
        let t0 = Instant::now();
        let mut w = wheel(t0);
        let ms = Duration::from_millis;
        w.insert(1, t0 + ms(5));
        w.insert(2, t0 + ms(1));
        w.insert(3, t0 + ms(5) + Duration::from_micros(30));
        assert_eq!(w.next_deadline(), Some(t0 + ms(1)));
        let mut out = Vec::new();
        w.expire(t0 + Duration::from_micros(900), &mut out);
        assert!(out.is_empty());
        w.expire(t0 + ms(1), &mut out);
        assert_eq!(out, [2]);
        out.clear();
        w.expire(t0 + ms(6), &mut out);
        out.sort();
        assert_eq!(out, [1, 3]);
        assert_eq!(w.len, 0);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn rescheduling_and_cancelling_leave_one_entry_per_key() {
        let t0 = Instant::now();
        let mut w = wheel(t0);
        let ms = Duration::from_millis;
        w.insert(4, t0 + ms(3));
        w.insert(5, t0 + ms(3));
        w.insert(4, t0 + ms(7));
        w.insert(6, t0 + ms(3));
        w.remove(5);
        w.remove(5);
        let mut out = Vec::new();
        w.expire(t0 + ms(4), &mut out);
        assert_eq!(out, [6]);
        out.clear();
        w.expire(t0 + ms(8), &mut out);
        assert_eq!(out, [4]);
        assert_eq!(w.len, 0);
    }

    #[test]
    fn aligned_times_fall_on_the_grid_and_never_later() {
        let t0 = Instant::now();
        let w = wheel(t0);
        let t = t0 + Duration::from_micros(12_345);
        let a = w.align_down(t, 10);
        assert_eq!(a, t0 + Duration::from_millis(12));
        assert!(a <= t);
    }

    #[test]
    fn far_keys_wait_and_keep_their_time() {
        let t0 = Instant::now();
        let mut w = wheel(t0);
        let far = t0 + Duration::from_secs(2);
        w.insert(9, far);
        let mut out = Vec::new();
        w.expire(t0 + Duration::from_secs(1), &mut out);
        assert!(out.is_empty(), "parked, not due");
        assert_eq!(w.len, 1);
        w.expire(far, &mut out);
        assert_eq!(out, [9]);
    }

    #[test]
    fn past_keys_expire_at_once_across_wraps() {
        let t0 = Instant::now();
        let mut w = wheel(t0);
        let mut out = Vec::new();
        for round in 1..6u32 {
            let now = t0 + TICK * (SLOTS as u32) * round / 2;
            w.insert(round, now - Duration::from_millis(1));
            w.insert(10, now + Duration::from_millis(1));
            w.expire(now, &mut out);
            assert_eq!(out, [round]);
            out.clear();
        }
    }
}

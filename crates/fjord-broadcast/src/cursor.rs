//! What a channel sends, packet by packet, for ever: the server's side of a
//! plan. A cursor can start at any time, so a client (or a server after a
//! restart) finds what is on a channel at any moment from the epoch alone.

use crate::Plan;

/// Packet `packet` of the title is sent on the channel at `due_ns` (ns
/// since the schedule's epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emission {
    pub due_ns: u64,
    pub packet: u32,
}

/// A channel's emissions in send order (ties in cycle order). Ends only
/// where a time would pass `u64::MAX` ns, or at once for a channel the plan
/// does not have.
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    plan: &'a Plan,
    channel: usize,
    cycle_start: u64,
    slot: usize,
    packet: usize,
    done: bool,
}

impl Plan {
    /// Channel `channel`'s emissions from the epoch.
    pub fn emissions(&self, channel: usize) -> Cursor<'_> {
        self.emissions_from(channel, 0)
    }

    /// Channel `channel`'s emissions due at or after `from_ns`.
    pub fn emissions_from(&self, channel: usize, from_ns: u64) -> Cursor<'_> {
        let mut cursor = Cursor {
            plan: self,
            channel,
            cycle_start: 0,
            slot: 0,
            packet: 0,
            done: channel >= self.channels.len(),
        };
        if !cursor.done {
            cursor.seek(from_ns);
        }
        cursor
    }
}

impl Cursor<'_> {
    /// Send time of packet `j` of slot `slot`, from the cycle's start.
    fn offset(&self, slot: usize, j: usize) -> u64 {
        let ch = &self.plan.channels[self.channel];
        let seg = &self.plan.segments[ch.slots[slot].segment as usize];
        let title = &self.plan.title;
        let inside = title.bytes_before(j) - title.bytes_before(seg.first_packet as usize);
        ch.slots[slot].offset_ns + ch.rate.time_of(inside)
    }

    fn first_packet(&self, slot: usize) -> usize {
        let ch = &self.plan.channels[self.channel];
        self.plan.segments[ch.slots[slot].segment as usize].first_packet as usize
    }

    /// Positions on the first emission due at or after `from`.
    fn seek(&mut self, from: u64) {
        let ch = &self.plan.channels[self.channel];
        let (phase, period) = (ch.phase_ns, ch.period_ns);
        let cycles = from.saturating_sub(phase) / period;
        self.cycle_start = phase + cycles * period; // <= from: no overflow
        let within = from - self.cycle_start.min(from);
        self.packet = self.first_packet(0);
        for slot in 0..ch.slots.len() {
            let range = self.plan.segments[ch.slots[slot].segment as usize].packets();
            if self.offset(slot, range.end - 1) >= within {
                self.slot = slot;
                self.packet = self.first_at_or_after(slot, range, within);
                return;
            }
        }
        self.next_cycle();
    }

    /// The first packet of `range` (in slot `slot`) sent at or after `within`.
    fn first_at_or_after(&self, slot: usize, range: std::ops::Range<usize>, within: u64) -> usize {
        let (mut lo, mut hi) = (range.start, range.end);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.offset(slot, mid) < within {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn next_cycle(&mut self) {
        let period = self.plan.channels[self.channel].period_ns;
        match self.cycle_start.checked_add(period) {
            Some(t) => self.cycle_start = t,
            None => self.done = true,
        }
        self.slot = 0;
        self.packet = self.first_packet(0);
    }

    fn advance(&mut self) {
        let ch = &self.plan.channels[self.channel];
        let end = self.plan.segments[ch.slots[self.slot].segment as usize]
            .packets()
            .end;
        self.packet += 1;
        if self.packet < end {
            return;
        }
        if self.slot + 1 < ch.slots.len() {
            self.slot += 1;
            self.packet = self.first_packet(self.slot);
        } else {
            self.next_cycle();
        }
    }
}

impl Iterator for Cursor<'_> {
    type Item = Emission;

    fn next(&mut self) -> Option<Emission> {
        if self.done {
            return None;
        }
        let Some(due_ns) = self
            .cycle_start
            .checked_add(self.offset(self.slot, self.packet))
        else {
            self.done = true;
            return None;
        };
        let packet = self.packet as u32;
        self.advance();
        Some(Emission { due_ns, packet })
    }
}

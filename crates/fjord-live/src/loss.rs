//! Packets a publisher's track lost on the way in, counted from RTP
//! sequence numbers as a receiver report counts them (RFC 3550 §6.4.1,
//! A.3): expected is the extended highest sequence number less the
//! first, plus one; lost is expected less received, never below zero
//! (duplicates count as received).

/// A jump of the sequence number larger than this (forward or back) is
/// taken as the sender restarting its numbering, not as loss (RFC 3550
/// A.1's `MAX_DROPOUT`).
pub(crate) const MAX_DROPOUT: u16 = 3000;

#[derive(Clone, Debug, Default)]
pub struct Loss {
    /// Extended sequence numbers: the first, the highest seen.
    first: u64,
    highest: u64,
    received: u64,
    /// Lost before the numbering restarted.
    lost_before: u64,
    started: bool,
}

impl Loss {
    /// Counts a packet with sequence number `seq`.
    pub fn on(&mut self, seq: u16) {
        if !self.started {
            *self = Loss {
                first: u64::from(seq),
                highest: u64::from(seq),
                received: 1,
                lost_before: self.lost_before,
                started: true,
            };
            return;
        }
        let last = self.highest as u16;
        let ahead = seq.wrapping_sub(last);
        let behind = last.wrapping_sub(seq);
        if ahead != 0 && ahead < MAX_DROPOUT {
            self.highest += u64::from(ahead);
        } else if behind > MAX_DROPOUT && ahead >= MAX_DROPOUT {
            // A restart of the numbering: what was lost so far stays.
            self.lost_before = self.lost();
            self.started = false;
            return self.on(seq);
        }
        self.received += 1;
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    pub fn lost(&self) -> u64 {
        self.lost_before + self.expected().saturating_sub(self.received)
    }

    /// Packets expected since the numbering (re)started: the highest
    /// extended sequence number less the first, plus one.
    pub fn expected(&self) -> u64 {
        match self.started {
            true => self.highest - self.first + 1,
            false => 0,
        }
    }

    /// The highest sequence number seen, extended by its wraps (RFC 3550
    /// §6.4.1: the low 16 bits the number, the high 16 the cycles).
    pub fn highest(&self) -> u64 {
        self.highest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn count(seqs: impl IntoIterator<Item = u16>) -> Loss {
        let mut l = Loss::default();
        seqs.into_iter().for_each(|s| l.on(s));
        l
    }

    #[test]
    fn gaps_are_lost_and_reordering_or_duplicates_are_not() {
        let l = count([10, 11, 13, 14, 17]);
        assert_eq!((l.received(), l.lost()), (5, 3), "12, 15 and 16");
        let l = count([10, 12, 11, 13, 13]);
        assert_eq!((l.received(), l.lost()), (5, 0));
    }

    #[test]
    fn the_numbering_wraps_and_restarts() {
        let l = count([65534, 65535, 1, 2]);
        assert_eq!((l.received(), l.lost()), (4, 1));
        let l = count([100, 102, 40000, 40001]);
        assert_eq!((l.received(), l.lost()), (2, 1), "restarted at 40000");
    }

    proptest! {
        #[test]
        fn a_run_missing_some_packets_loses_exactly_those(
            start in any::<u16>(),
            len in 1u16..2000,
            drop in proptest::collection::btree_set(1u16..2000, 0..50),
        ) {
            let kept: Vec<u16> = (0..len)
                .filter(|i| !drop.contains(i))
                .map(|i| start.wrapping_add(i))
                .collect();
            // The last one always arrives: loss at the end is not seen.
            let last = start.wrapping_add(len - 1);
            let mut seqs = kept.clone();
            if seqs.last() != Some(&last) {
                seqs.push(last);
            }
            let l = count(seqs.iter().copied());
            prop_assert_eq!(l.received() + l.lost(), u64::from(len));
        }
    }
}

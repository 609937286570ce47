//! Channels: one multicast group each, looping over one or more segments
//! at a constant rate, for ever, from the schedule's epoch.
//!
//! A channel's cycle lasts `period_ns` and starts at `phase_ns + m·period`
//! (m = 0, 1, ...). Each slot starts its segment `offset_ns` into the
//! cycle; the segment's packets follow in index order, packet j at
//! `slot start + (bytes of the segment before j) / rate`, so the send
//! times are exact integers any client can recompute. A slot's segment is
//! sent before the next slot (or the cycle's end): a channel may idle.

use serde::{Deserialize, Serialize};

/// How a client takes a channel's segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reception {
    /// One whole instance of each slot's segment, from its first packet to
    /// its last (staggered, pyramid, skyscraper; cautious harmonic's first
    /// two channels). The client chooses the latest instance that still
    /// arrives in time, which keeps its buffer smallest.
    InOrder,
    /// One whole period from any point of the cycle, the tail before the
    /// head (harmonic; cautious harmonic from channel 3): every packet of
    /// the channel is seen exactly once in any window of one period.
    Cycle,
}

/// A rate as an exact fraction: `bytes` every `per_ns` nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub bytes: u64,
    pub per_ns: u64,
}

impl Rate {
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes as f64 * 1e9 / self.per_ns as f64
    }

    /// When the byte at `offset` (from a slot's start) is sent, ns after
    /// the slot's start. Floor: a client computes the same integer.
    pub(crate) fn time_of(&self, offset: u64) -> u64 {
        let t = u128::from(offset) * u128::from(self.per_ns) / u128::from(self.bytes.max(1));
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// The faster of two rates (exact comparison by cross-multiplication).
    pub(crate) fn max(self, other: Rate) -> Rate {
        if self.at_least(other) { self } else { other }
    }

    /// The slower of two rates.
    pub(crate) fn min(self, other: Rate) -> Rate {
        if self.at_least(other) { other } else { self }
    }

    fn at_least(&self, other: Rate) -> bool {
        u128::from(self.bytes) * u128::from(other.per_ns)
            >= u128::from(other.bytes) * u128::from(self.per_ns)
    }
}

/// A segment's place in a channel's cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub segment: u32,
    pub offset_ns: u64,
}

/// One channel of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    pub reception: Reception,
    pub phase_ns: u64,
    pub period_ns: u64,
    pub rate: Rate,
    pub slots: Vec<Slot>,
}

impl Channel {
    /// The rate while the channel sends (bytes/s); its mean over a cycle is
    /// lower when it idles.
    pub fn bytes_per_s(&self) -> f64 {
        self.rate.bytes_per_s()
    }

    /// The first cycle's start of slot `slot` (instances follow every
    /// period).
    pub(crate) fn slot_origin(&self, slot: usize) -> u64 {
        self.phase_ns + self.slots[slot].offset_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_times_are_floors_and_max_is_exact() {
        let r = Rate {
            bytes: 3,
            per_ns: 10,
        };
        assert_eq!(r.time_of(0), 0);
        assert_eq!(r.time_of(1), 3);
        assert_eq!(r.time_of(3), 10);
        let s = Rate {
            bytes: 1,
            per_ns: 4,
        };
        assert_eq!(r.max(s), r);
        assert_eq!(s.max(r), r);
        assert_eq!(r.min(s), s);
        assert!((r.bytes_per_s() - 3e8).abs() < 1e-3);
    }
}

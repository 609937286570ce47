//! The title's packets back in index order ([`Reassembly`]), held until
//! taken, and with FEC blocks until their block is whole.

use std::ops::Range;

use fjord_fec::SourcePacket;

use super::ranges::missing_in;

/// What [`Reassembly::insert`] did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    New,
    Duplicate,
    OutOfRange,
}

/// Packets back in index order: insert them as they come, take the
/// contiguous prefix as it grows. A packet is held until it is taken, and
/// with FEC blocks ([`Reassembly::with_blocks`]) until its block is whole
/// (the decoder needs it): at most the one block the prefix stops in.
#[derive(Debug)]
pub struct Reassembly {
    packets: Vec<Option<SourcePacket>>,
    have: Vec<bool>,
    next: usize,
    held: u64,
    held_bytes: u64,
    /// Packets per FEC block, and each block's count of packets held.
    blocks: Option<(u32, Vec<u32>)>,
}

impl Reassembly {
    pub fn new(packets: usize) -> Reassembly {
        Reassembly {
            packets: vec![None; packets],
            have: vec![false; packets],
            next: 0,
            held: 0,
            held_bytes: 0,
            blocks: None,
        }
    }

    /// Keeps taken packets until their block of `k` is whole.
    pub fn with_blocks(mut self, k: u32) -> Reassembly {
        let k = k.max(1);
        let n = (self.have.len() as u64).div_ceil(u64::from(k));
        self.blocks = Some((k, vec![0; n as usize]));
        self
    }

    pub fn insert(&mut self, i: u32, packet: SourcePacket) -> Insert {
        let at = i as usize;
        match self.have.get(at) {
            None => Insert::OutOfRange,
            Some(true) => Insert::Duplicate,
            Some(false) => {
                self.have[at] = true;
                self.held += 1;
                // Not taken yet: the prefix stops before any packet missing.
                self.held_bytes += packet.payload.len() as u64;
                self.packets[at] = Some(packet);
                self.count_in_block(i);
                Insert::New
            }
        }
    }

    /// Counts packet `i` in its block; a block now whole lets go of its
    /// packets taken already.
    fn count_in_block(&mut self, i: u32) {
        let Some((k, held)) = &mut self.blocks else {
            return;
        };
        let b = (i / *k) as usize;
        held[b] += 1;
        let first = b * *k as usize;
        let end = (first + *k as usize).min(self.have.len());
        if held[b] as usize == end - first {
            for p in &mut self.packets[first..end.min(self.next).max(first)] {
                *p = None;
            }
        }
    }

    pub fn has(&self, i: u32) -> bool {
        self.have.get(i as usize).copied().unwrap_or(false)
    }

    /// Packet `i`, if it is held (received and not let go).
    pub fn packet(&self, i: u32) -> Option<&SourcePacket> {
        self.packets.get(i as usize)?.as_ref()
    }

    /// The packets of block `b` (with [`Reassembly::with_blocks`]), and how
    /// many of them are held.
    pub fn block(&self, b: u32) -> Option<(std::ops::Range<u32>, u32)> {
        let (k, held) = self.blocks.as_ref()?;
        let first = b.checked_mul(*k)?;
        let end = first.checked_add(*k)?.min(self.have.len() as u32);
        Some((first..end, *held.get(b as usize)?))
    }

    /// The next payload of the contiguous prefix, if it has arrived.
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        let i = self.next;
        let whole = match &self.blocks {
            None => true,
            Some((k, held)) => {
                let b = i / *k as usize;
                let len = (*k as usize).min(self.have.len() - b * *k as usize);
                held.get(b).is_some_and(|&h| h as usize == len)
            }
        };
        let slot = self.packets.get_mut(i)?;
        let payload = match whole {
            true => slot.take()?.payload,
            false => slot.as_ref()?.payload.clone(),
        };
        self.next += 1;
        self.held_bytes -= payload.len() as u64;
        Some(payload)
    }

    /// Packets handed out so far (the prefix's length).
    pub fn taken(&self) -> usize {
        self.next
    }

    /// Packets received (each once).
    pub fn received(&self) -> u64 {
        self.held
    }

    /// Payload bytes received and not yet taken.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    pub fn is_complete(&self) -> bool {
        self.held as usize == self.have.len()
    }

    /// The packets not received, as ranges.
    pub fn missing(&self) -> Vec<Range<u32>> {
        missing_in(0..self.have.len() as u32, |i| self.has(i))
    }
}

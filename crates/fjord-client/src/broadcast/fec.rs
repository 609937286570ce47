//! FEC over broadcast channels, sans-IO: a channel sends the repair packets
//! of every block its segments touch ([`RepairFlow`], `docs/broadcast.md`);
//! they are kept while their block misses packets, and once a block holds
//! as many packets and repair symbols as it has packets, the decoder
//! rebuilds the missing ones. A lost packet then comes back within its
//! window instead of a period later (repair by the carousel stays for
//! losses beyond the parity).

use std::collections::HashMap;

use fjord_fec::{BlockDecoder, RepairHeader};

use super::{Numbering, Reassembly, RepairFlow};
use crate::rtp::Received;

/// What became of a repair packet.
#[derive(Debug, PartialEq, Eq)]
pub enum RepairOutcome {
    /// Kept, or not needed (its block is whole).
    Kept,
    /// Its block's missing packets, rebuilt: (index, packet).
    Rebuilt(Vec<(u32, fjord_fec::SourcePacket)>),
    /// Not a repair packet of this title's blocks.
    Refused,
}

/// The repair symbols of the blocks that miss packets.
pub struct Repairs {
    flow: RepairFlow,
    numbering: Numbering,
    packets: u32,
    pending: HashMap<u32, Pending>,
    decoder: BlockDecoder,
}

impl std::fmt::Debug for Repairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repairs")
            .field("flow", &self.flow)
            .field("pending_blocks", &self.pending.len())
            .finish()
    }
}

/// One block's repair symbols, by repair index.
#[derive(Debug)]
struct Pending {
    header: RepairHeader,
    timestamp: u32,
    symbols: Vec<Option<Vec<u8>>>,
}

impl Repairs {
    /// `None` when the flow's blocks cannot number a title of `packets`
    /// (24-bit block numbers).
    pub fn new(flow: RepairFlow, numbering: Numbering, packets: u32) -> Option<Repairs> {
        let blocks = u64::from(packets).div_ceil(u64::from(flow.k.max(1)));
        (flow.k > 0 && blocks <= u64::from(fjord_fec::symbol::SBN_MASK)).then(|| Repairs {
            flow,
            numbering,
            packets,
            pending: HashMap::new(),
            decoder: BlockDecoder::new(),
        })
    }

    pub fn ssrc(&self) -> u32 {
        self.flow.ssrc
    }

    /// Blocks holding repair symbols (their packets not all held).
    pub fn pending_blocks(&self) -> usize {
        self.pending.len()
    }

    /// A repair packet as received.
    pub fn repair(&mut self, rtp: &Received, r: &Reassembly) -> RepairOutcome {
        let Some((b, header, symbol)) = self.check(rtp) else {
            return RepairOutcome::Refused;
        };
        match r.block(b) {
            Some((_, held)) if held < u32::from(header.k) => {}
            Some(_) => return RepairOutcome::Kept,
            None => return RepairOutcome::Refused,
        }
        let m = usize::from(self.flow.m);
        let p = self.pending.entry(b).or_insert_with(|| Pending {
            header,
            timestamp: rtp.rtp_ts,
            symbols: vec![None; m],
        });
        if p.timestamp != rtp.rtp_ts {
            return RepairOutcome::Refused;
        }
        p.symbols[usize::from(header.repair_index())] = Some(symbol.to_vec());
        self.try_block(b, r)
    }

    /// A packet of block `b` arrived: rebuild the block's missing packets
    /// if it holds enough now.
    pub fn source(&mut self, i: u32, r: &Reassembly) -> RepairOutcome {
        match self.flow.k {
            0 => RepairOutcome::Kept,
            k => self.try_block(i / u32::from(k), r),
        }
    }

    /// The block number, header and symbol of a repair packet of this
    /// flow that fits the title's blocks.
    fn check<'a>(&self, rtp: &'a Received) -> Option<(u32, RepairHeader, &'a [u8])> {
        if rtp.ssrc != self.flow.ssrc || rtp.pt != self.flow.payload_type {
            return None;
        }
        let (h, symbol) = RepairHeader::parse(&rtp.payload).ok()?;
        let k = u32::from(self.flow.k);
        let first = h.sbn.checked_mul(k).filter(|&f| f < self.packets)?;
        let len = k.min(self.packets - first);
        let fits = u32::from(h.k) == len
            && h.seq_base == self.numbering.seq_of(first)
            && h.repair_index() < self.flow.m
            && symbol.len() == usize::from(self.flow.symbol_len);
        fits.then_some((h.sbn, h, symbol))
    }

    fn try_block(&mut self, b: u32, r: &Reassembly) -> RepairOutcome {
        let Some((packets, held)) = r.block(b) else {
            return RepairOutcome::Kept;
        };
        let Some(p) = self.pending.get(&b) else {
            return RepairOutcome::Kept;
        };
        let k = packets.len() as u32;
        let symbols = p.symbols.iter().flatten().count() as u32;
        if held >= k {
            self.pending.remove(&b);
            return RepairOutcome::Kept;
        }
        if held + symbols < k {
            return RepairOutcome::Kept;
        }
        let p = self.pending.remove(&b).expect("looked up above");
        match self.decode(&p, packets, r) {
            Some(rebuilt) => RepairOutcome::Rebuilt(rebuilt),
            None => RepairOutcome::Refused,
        }
    }

    /// Rebuilds the missing packets of `packets` from those held and the
    /// repair symbols; `None` when the symbols do not decode (corrupt).
    fn decode(
        &mut self,
        p: &Pending,
        packets: std::ops::Range<u32>,
        r: &Reassembly,
    ) -> Option<Vec<(u32, fjord_fec::SourcePacket)>> {
        let d = &mut self.decoder;
        d.reset(p.header.k, self.flow.m);
        for i in packets.clone() {
            if let Some(s) = r.packet(i) {
                d.add_source((i - packets.start) as u16, s.clone()).ok()?;
            }
        }
        for (j, symbol) in p.symbols.iter().enumerate() {
            if let Some(symbol) = symbol {
                let header = RepairHeader::new(
                    u64::from(p.header.sbn),
                    p.header.k,
                    j as u16,
                    p.header.seq_base,
                );
                d.add_repair(&header, p.timestamp, symbol).ok()?;
            }
        }
        let rebuilt = d.recover().ok()?;
        Some(
            rebuilt
                .into_iter()
                .map(|(esi, s)| (packets.start + u32::from(esi), s))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_fec::SourcePacket;
    use fjord_fec::live::LiveEncoder;
    use fjord_fec::symbol::{SYMBOL_HEADER_LEN, SymbolMeta};

    const N: u32 = 10;
    const FLOW: RepairFlow = RepairFlow {
        ssrc: 0xFEC0_0001,
        payload_type: 96,
        k: 4,
        m: 2,
        symbol_len: (SYMBOL_HEADER_LEN + 40) as u16,
    };
    const NUMBERING: Numbering = Numbering {
        seq0: 65_534,
        ts0: 1000,
        clock_rate: 90_000,
    };

    /// Packet i: 20 + 2i bytes, a marker every third, 900 ticks apart.
    fn source(i: u32) -> SourcePacket {
        SourcePacket {
            payload: (0..20 + 2 * i).map(|b| (b * 7 + i) as u8).collect(),
            marker: i.is_multiple_of(3),
            timestamp: NUMBERING.ts0 + 900 * i,
        }
    }

    /// Block b's repair packets as a channel sends them.
    fn repairs(b: u32) -> Vec<Received> {
        let first = b * u32::from(FLOW.k);
        let k = u32::from(FLOW.k).min(N - first);
        let mut enc = LiveEncoder::new(usize::from(FLOW.m), usize::from(FLOW.symbol_len));
        enc.start_block(k as usize).unwrap();
        for i in 0..k {
            let s = source(first + i);
            let meta = SymbolMeta {
                marker: s.marker,
                ts_delta: s.timestamp - source(first).timestamp,
            };
            enc.add(i as usize, &[&s.payload], meta).unwrap();
        }
        (0..FLOW.m)
            .map(|j| {
                let h = RepairHeader::new(u64::from(b), k as u16, j, NUMBERING.seq_of(first));
                let mut payload = h.to_bytes().to_vec();
                payload.extend_from_slice(enc.repair(usize::from(j)).unwrap());
                Received {
                    arrival: std::time::Instant::now(),
                    seq: j,
                    rtp_ts: source(first).timestamp,
                    marker: false,
                    pt: FLOW.payload_type,
                    ssrc: FLOW.ssrc,
                    payload,
                }
            })
            .collect()
    }

    fn setup() -> (Repairs, Reassembly) {
        let r = Repairs::new(FLOW, NUMBERING, N).unwrap();
        (
            r,
            Reassembly::new(N as usize).with_blocks(u32::from(FLOW.k)),
        )
    }

    /// Puts packets `got` in, as [`super::Receiver`] does.
    fn receive(rx: &mut Repairs, ra: &mut Reassembly, got: impl IntoIterator<Item = u32>) {
        for i in got {
            ra.insert(i, source(i));
            assert!(matches!(rx.source(i, ra), RepairOutcome::Kept));
        }
    }

    #[test]
    fn a_block_missing_as_many_packets_as_it_has_repairs_is_rebuilt_bit_exact() {
        let (mut rx, mut ra) = setup();
        receive(&mut rx, &mut ra, [0, 3]);
        // Taken already: still held for the decoder, its block not whole.
        assert_eq!(ra.pop_ready(), Some(source(0).payload));
        let [r0, r1] = &repairs(0)[..] else { panic!() };
        assert_eq!(rx.repair(r0, &ra), RepairOutcome::Kept);
        assert_eq!(rx.pending_blocks(), 1);
        let RepairOutcome::Rebuilt(got) = rx.repair(r1, &ra) else {
            panic!("not rebuilt")
        };
        assert_eq!(got, vec![(1, source(1)), (2, source(2))]);
        assert_eq!(rx.pending_blocks(), 0);
        for (i, p) in got {
            ra.insert(i, p);
        }
        // Whole now: the packet taken is let go.
        assert_eq!(ra.packet(0), None);
        assert_eq!(ra.pop_ready(), Some(source(1).payload));
    }

    #[test]
    fn repairs_that_come_first_wait_for_the_packets_and_the_short_last_block_works() {
        let (mut rx, mut ra) = setup();
        for r in repairs(2).iter().take(1) {
            assert_eq!(rx.repair(r, &ra), RepairOutcome::Kept);
        }
        ra.insert(9, source(9));
        let RepairOutcome::Rebuilt(got) = rx.source(9, &ra) else {
            panic!("not rebuilt")
        };
        assert_eq!(got, vec![(8, source(8))]);
    }

    #[test]
    fn too_many_lost_is_kept_waiting_and_whole_blocks_need_nothing() {
        let (mut rx, mut ra) = setup();
        receive(&mut rx, &mut ra, [4]);
        for r in &repairs(1) {
            assert_eq!(rx.repair(r, &ra), RepairOutcome::Kept);
        }
        // The carousel brings one more: now 2 + 2 of 4.
        ra.insert(5, source(5));
        let RepairOutcome::Rebuilt(got) = rx.source(5, &ra) else {
            panic!("not rebuilt")
        };
        assert_eq!(got, vec![(6, source(6)), (7, source(7))]);
        receive(&mut rx, &mut ra, 0..4);
        assert_eq!(rx.repair(&repairs(0)[0], &ra), RepairOutcome::Kept);
        assert_eq!(rx.pending_blocks(), 0, "a whole block keeps no repairs");
    }

    #[test]
    fn repair_packets_of_other_blocks_flows_or_layouts_are_refused() {
        let (mut rx, ra) = setup();
        let good = repairs(1).remove(0);
        let refused = |f: &dyn Fn(&mut Received)| {
            let mut p = good.clone();
            f(&mut p);
            Repairs::new(FLOW, NUMBERING, N).unwrap().repair(&p, &ra)
        };
        let header = |sbn: u64, k: u16, j: u16, seq: u16| {
            move |p: &mut Received| {
                p.payload[..8].copy_from_slice(&RepairHeader::new(sbn, k, j, seq).to_bytes())
            }
        };
        let seq_base = NUMBERING.seq_of(4);
        for bad in [
            refused(&|p| p.ssrc += 1),
            refused(&|p| p.pt += 1),
            refused(&|p| p.payload.pop().map(drop).unwrap_or(())),
            refused(&header(3, 4, 0, NUMBERING.seq_of(12))), // past the title
            refused(&header(1, 3, 0, seq_base)),             // k of another layout
            refused(&header(1, 4, 0, seq_base + 1)),         // another numbering
            refused(&header(1, 4, 2, seq_base)),             // m = 2: no third repair
        ] {
            assert_eq!(bad, RepairOutcome::Refused);
        }
        assert_eq!(rx.repair(&good, &ra), RepairOutcome::Kept);
        let mut other_ts = repairs(1).remove(1);
        other_ts.rtp_ts += 1;
        assert_eq!(rx.repair(&other_ts, &ra), RepairOutcome::Refused);
    }
}

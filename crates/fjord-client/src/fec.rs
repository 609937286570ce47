//! Receiving a repair stream (`docs/fec.md`), sans-IO: put the source and
//! repair packets in as they arrive, get the source packets out in sequence
//! order — lost ones rebuilt where the parity allows, the others reported
//! lost, never replaced by wrong bytes — plus a loss model for testing.

use std::collections::BTreeMap;
use std::time::Duration;

use fjord_fec::{BlockDecoder, RepairHeader, SourcePacket};

use crate::Describe;

/// The encoding name of fjord's repair payload format (RFC 6865 repair
/// symbols in fjord's RTP framing; no registered name exists).
pub const REPAIR_ENCODING: &str = fjord_fec::symbol::REPAIR_ENCODING;

/// A source stream of a DESCRIBE and its repair stream, if one is offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FecStream {
    pub source_url: String,
    pub repair: Option<RepairOffer>,
}

/// A repair stream as the SDP offers it (RFC 5956 `a=group:FEC-FR`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairOffer {
    pub url: String,
    /// Source packets per block (at most; a track's last block may be shorter).
    pub k: u16,
    /// Repair packets per block.
    pub m: u16,
    /// E, the symbol length (RFC 6865 FEC Framework Configuration
    /// Information, `fssi=E:…`), when the SDP gives it.
    pub symbol_len: Option<u16>,
}

/// The source streams of `d`, each with its repair stream when the SDP
/// groups one with it.
pub fn fec_streams(d: &Describe) -> Vec<FecStream> {
    struct Section {
        mid: Option<String>,
        encoding: String,
        fmtp: String,
    }
    let mut sections: Vec<Section> = Vec::new();
    let mut groups: Vec<(String, String)> = Vec::new();
    for line in d.sdp.lines().map(str::trim_end) {
        if line.starts_with("m=") {
            sections.push(Section {
                mid: None,
                encoding: String::new(),
                fmtp: String::new(),
            });
        } else if let Some(g) = line.strip_prefix("a=group:FEC-FR ") {
            let mut ids = g.split_whitespace();
            if let (Some(s), Some(r)) = (ids.next(), ids.next()) {
                groups.push((s.to_owned(), r.to_owned()));
            }
        } else if let Some(sec) = sections.last_mut() {
            if let Some(mid) = line.strip_prefix("a=mid:") {
                sec.mid = Some(mid.trim().to_owned());
            } else if let Some(map) = line.strip_prefix("a=rtpmap:") {
                let name = map.split_whitespace().nth(1).unwrap_or_default();
                sec.encoding = name.split('/').next().unwrap_or_default().to_owned();
            } else if let Some(f) = line.strip_prefix("a=fmtp:") {
                sec.fmtp = f.split_once(' ').map_or("", |(_, v)| v).to_owned();
            }
        }
    }
    let is_repair = |s: &Section| s.encoding.eq_ignore_ascii_case(REPAIR_ENCODING);
    let url = |i: usize| d.track_urls.get(i).cloned().unwrap_or_default();
    let offer = |i: usize, s: &Section| {
        let value = |name: &str| {
            s.fmtp
                .split(';')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(n, _)| n.trim() == name)
                .map(|(_, v)| v.trim())
        };
        let param = |name: &str| value(name).and_then(|v| v.parse::<u16>().ok());
        // fssi=E:1324,m:8 (RFC 6364's scheme-specific information).
        let fssi = |name: &str| {
            value("fssi")?
                .split(',')
                .filter_map(|p| p.split_once(':'))
                .find(|(n, _)| n.trim() == name)
                .and_then(|(_, v)| v.trim().parse::<u16>().ok())
        };
        let (k, m) = (param("k")?, param("repair")?);
        // RFC 6865 for m = 8 only (encoding ID 8, GF(2^8)): K + M ≤ 255.
        let ours = value("encoding-id") == Some("8") && fssi("m").is_none_or(|m| m == 8);
        (ours && k > 0 && m > 0 && u32::from(k) + u32::from(m) <= 255).then(|| RepairOffer {
            url: url(i),
            k,
            m,
            symbol_len: fssi("E"),
        })
    };
    sections
        .iter()
        .enumerate()
        .filter(|(_, s)| !is_repair(s))
        .map(|(i, s)| {
            let repair = s.mid.as_ref().and_then(|mid| {
                let (_, r) = groups.iter().find(|(src, _)| src == mid)?;
                let (j, rs) = sections
                    .iter()
                    .enumerate()
                    .find(|(_, x)| x.mid.as_ref() == Some(r) && is_repair(x))?;
                offer(j, rs)
            });
            FecStream {
                source_url: url(i),
                repair,
            }
        })
        .collect()
}

/// What comes out of a [`FecReceiver`], in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A source packet, as received or rebuilt from the repair packets.
    Packet {
        seq: u16,
        packet: SourcePacket,
        recovered: bool,
    },
    /// A source packet that neither arrived nor could be rebuilt.
    Lost { seq: u16 },
}

/// Counts of a [`FecReceiver`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FecStats {
    /// Source packets received (duplicates and late ones not counted).
    pub received: u64,
    pub repair_received: u64,
    /// Repair packets that did not parse or did not fit their block.
    pub repair_rejected: u64,
    /// Missing source packets rebuilt.
    pub recovered: u64,
    /// Missing source packets that could not be rebuilt.
    pub unrecoverable: u64,
    /// CPU time spent decoding (thread CPU time).
    pub decode_cpu: Duration,
}

/// A block's repair packets as received.
struct Block {
    k: u16,
    timestamp: u32,
    repairs: Vec<(RepairHeader, Vec<u8>)>,
}

/// Most blocks whose repair packets wait for their source packets: a bound
/// on memory against a sender that makes up block numbers.
const MAX_OPEN_BLOCKS: usize = 256;

/// One source stream and its repair stream. Sequence numbers are extended
/// to 64 bits (starting at 2^16 + the first one) so blocks compare simply.
pub struct FecReceiver {
    k: u16,
    m: u16,
    /// Packets to wait, after a block's end, for its repair packets.
    window: u64,
    /// The next sequence number to deliver.
    head: Option<u64>,
    highest: Option<u64>,
    sources: BTreeMap<u64, SourcePacket>,
    blocks: BTreeMap<u64, Block>,
    decoder: BlockDecoder,
    stats: FecStats,
}

impl FecReceiver {
    /// A receiver for blocks of at most `k` source and `m` repair packets
    /// (`None`: no repair stream, packets are only put in order).
    /// `first_seq`: the first sequence number the server will send (from
    /// `RTP-Info`), so a loss of the very first packets is counted.
    pub fn new(layout: Option<(u16, u16)>, first_seq: Option<u16>) -> FecReceiver {
        let (k, m) = layout.unwrap_or((0, 0));
        FecReceiver {
            k,
            m,
            // Repair packets follow their block at once; a few blocks of
            // slack absorb reordering between the two streams.
            window: (4 * (u64::from(k) + u64::from(m))).clamp(64, 16_384),
            head: first_seq.map(|s| (1 << 16) + u64::from(s)),
            highest: None,
            sources: BTreeMap::new(),
            blocks: BTreeMap::new(),
            decoder: BlockDecoder::new(),
            stats: FecStats::default(),
        }
    }

    pub fn stats(&self) -> FecStats {
        self.stats
    }

    /// `seq` as an extended sequence number near what was seen so far.
    fn extend(&self, seq: u16) -> u64 {
        match self.highest.or(self.head) {
            None => (1 << 16) + u64::from(seq),
            Some(r) => {
                let d = i64::from(seq.wrapping_sub(r as u16) as i16);
                r.saturating_add_signed(d)
            }
        }
    }

    /// A source packet as received.
    pub fn source(&mut self, seq: u16, packet: SourcePacket, out: &mut dyn FnMut(Delivery)) {
        let ext = self.extend(seq);
        let head = *self.head.get_or_insert(ext);
        if ext < head || self.sources.contains_key(&ext) {
            return;
        }
        self.stats.received += 1;
        self.sources.insert(ext, packet);
        self.highest = Some(self.highest.map_or(ext, |h| h.max(ext)));
        self.drain(false, out);
    }

    /// A repair packet as received: its RTP timestamp and payload.
    pub fn repair(&mut self, timestamp: u32, payload: &[u8]) {
        let Ok((header, symbol)) = RepairHeader::parse(payload) else {
            self.stats.repair_rejected += 1;
            return;
        };
        let base = self.extend(header.seq_base);
        // A block the head is inside of still helps: a receiver that
        // started mid-block rebuilds the rest of it.
        let fits = header.k <= self.k
            && header.repair_index() < self.m
            && self.head.is_none_or(|h| base + u64::from(header.k) > h)
            && (self.blocks.len() < MAX_OPEN_BLOCKS || self.blocks.contains_key(&base));
        let block = self.blocks.entry(base).or_insert_with(|| Block {
            k: header.k,
            timestamp,
            repairs: Vec::new(),
        });
        let same = block.k == header.k
            && block.timestamp == timestamp
            && block
                .repairs
                .iter()
                .all(|(h, s)| h.esi != header.esi && s.len() == symbol.len());
        if !fits || !same {
            if block.repairs.is_empty() {
                self.blocks.remove(&base);
            }
            self.stats.repair_rejected += 1;
            return;
        }
        self.stats.repair_received += 1;
        block.repairs.push((header, symbol.to_vec()));
    }

    /// The stream ended: delivers everything still held.
    pub fn finish(&mut self, out: &mut dyn FnMut(Delivery)) {
        self.drain(true, out);
    }

    /// Delivers from the head on while the head's block (if any) can no
    /// longer get packets: it is `window` packets behind the highest one
    /// received, or the stream ended.
    fn drain(&mut self, all: bool, out: &mut dyn FnMut(Delivery)) {
        let Some(highest) = self.highest else { return };
        let end = match all {
            true => {
                let blocks_end = self.blocks.iter().map(|(b, k)| b + u64::from(k.k)).max();
                (highest + 1).max(blocks_end.unwrap_or(0))
            }
            false => (highest + 1).saturating_sub(self.window),
        };
        while let Some(head) = self.head.filter(|&h| h < end) {
            while self
                .blocks
                .first_key_value()
                .is_some_and(|(b, k)| b + u64::from(k.k) <= head)
            {
                self.blocks.pop_first();
            }
            let block = self.blocks.first_key_value().map(|(b, _)| *b);
            match block {
                Some(base) if base <= head => {
                    let block = self.blocks.pop_first().map(|(_, b)| b);
                    if let Some(block) = block {
                        self.deliver_block(base, head, &block, out);
                        self.head = Some(base + u64::from(block.k));
                    }
                }
                _ => {
                    match self.sources.remove(&head) {
                        Some(packet) => out(Delivery::Packet {
                            seq: head as u16,
                            packet,
                            recovered: false,
                        }),
                        None => {
                            self.stats.unrecoverable += 1;
                            out(Delivery::Lost { seq: head as u16 });
                        }
                    }
                    self.head = Some(head + 1);
                }
            }
        }
    }

    /// Delivers the block at `base` from `from` on, rebuilding what is missing.
    fn deliver_block(
        &mut self,
        base: u64,
        from: u64,
        block: &Block,
        out: &mut dyn FnMut(Delivery),
    ) {
        let range = base..base + u64::from(block.k);
        let missing = range
            .clone()
            .filter(|s| !self.sources.contains_key(s))
            .count();
        let mut rebuilt: BTreeMap<u64, SourcePacket> = BTreeMap::new();
        if missing > 0 && missing <= block.repairs.len() {
            let started = thread_cpu();
            self.decoder.reset(block.k, self.m);
            let mut ok = true;
            for seq in range.clone() {
                if let Some(p) = self.sources.get(&seq) {
                    ok &= self
                        .decoder
                        .add_source((seq - base) as u16, p.clone())
                        .is_ok();
                }
            }
            for (h, symbol) in &block.repairs {
                ok &= self.decoder.add_repair(h, block.timestamp, symbol).is_ok();
            }
            if ok && let Ok(packets) = self.decoder.recover() {
                rebuilt.extend(packets.into_iter().map(|(i, p)| (base + u64::from(i), p)));
            }
            self.stats.decode_cpu += thread_cpu().saturating_sub(started);
        }
        for seq in range.filter(|&s| s >= from) {
            let delivery = match (self.sources.remove(&seq), rebuilt.remove(&seq)) {
                (Some(packet), _) => Delivery::Packet {
                    seq: seq as u16,
                    packet,
                    recovered: false,
                },
                (None, Some(packet)) => {
                    self.stats.recovered += 1;
                    Delivery::Packet {
                        seq: seq as u16,
                        packet,
                        recovered: true,
                    }
                }
                (None, None) => {
                    self.stats.unrecoverable += 1;
                    Delivery::Lost { seq: seq as u16 }
                }
            };
            out(delivery);
        }
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Which received packets to throw away before recovery, for testing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossModel {
    None,
    /// Every packet, source or repair, with probability `p`.
    Random {
        p: f64,
    },
    /// Runs of exactly `n` consecutive source packets, a run starting with
    /// probability `p` but only after at least `spacing` kept source
    /// packets: with `spacing` = K, no block of K packets meets two runs, so
    /// each block loses at most `n`. Repair packets are kept.
    Bursts {
        p: f64,
        n: u32,
        spacing: u32,
    },
}

impl LossModel {
    /// The model of the `--drop P` / `--burst N` options: none when `p` is
    /// 0, else random loss, or bursts of `n` spaced by `spacing` (a
    /// block's K).
    pub fn from_options(p: f64, burst: Option<u32>, spacing: u32) -> LossModel {
        match (p, burst) {
            (0.0, _) => LossModel::None,
            (p, None) => LossModel::Random { p },
            (p, Some(n)) => LossModel::Bursts { p, n, spacing },
        }
    }
}

/// A [`LossModel`] with its state and a seeded generator (splitmix64), so a
/// run is reproducible.
pub struct Loss {
    model: LossModel,
    rng: u64,
    in_run: u32,
    kept: u32,
}

impl Loss {
    pub fn new(model: LossModel, seed: u64) -> Loss {
        Loss {
            model,
            rng: seed,
            in_run: 0,
            kept: u32::MAX,
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Whether to drop the next packet (`repair`: of the repair stream).
    pub fn drop_packet(&mut self, repair: bool) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Random { p } => self.chance(p),
            LossModel::Bursts { .. } if repair => false,
            LossModel::Bursts { p, n, spacing } => {
                if self.in_run > 0 {
                    self.in_run -= 1;
                    return true;
                }
                if self.kept >= spacing && n > 0 && self.chance(p) {
                    self.in_run = n - 1;
                    self.kept = 0;
                    return true;
                }
                self.kept = self.kept.saturating_add(1);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_fec::rs::Codec;
    use fjord_fec::symbol::{SymbolMeta, frame, symbol_len};

    fn packet(i: u16) -> SourcePacket {
        SourcePacket {
            payload: vec![i as u8; 100 + usize::from(i % 7)],
            marker: i.is_multiple_of(5),
            timestamp: 1000u32.wrapping_add(u32::from(i) * 90),
        }
    }

    /// The repair payloads of the block of packets `first..first + k`, as a
    /// server sends them (seq of packet i = seq0 + i).
    fn repairs(first: u16, k: u16, m: u16, seq0: u16) -> Vec<Vec<u8>> {
        let pkts: Vec<SourcePacket> = (first..first + k).map(packet).collect();
        // E: the track's longest packet (packet() is at most 106 bytes).
        let e = symbol_len(106);
        let mut symbols = vec![0; usize::from(k) * e];
        for (p, s) in pkts.iter().zip(symbols.chunks_exact_mut(e)) {
            let meta = SymbolMeta {
                marker: p.marker,
                ts_delta: p.timestamp.wrapping_sub(pkts[0].timestamp),
            };
            frame(s, &[&p.payload], meta).unwrap();
        }
        let mut codec = Codec::new();
        codec.set_layout(usize::from(k), usize::from(m)).unwrap();
        let mut out = vec![0; usize::from(m) * e];
        codec.encode(&symbols, &mut out).unwrap();
        out.chunks_exact(e)
            .enumerate()
            .map(|(j, sym)| {
                let h =
                    RepairHeader::new(u64::from(first / k), k, j as u16, seq0.wrapping_add(first));
                [&h.to_bytes()[..], sym].concat()
            })
            .collect()
    }

    /// Sends 40 packets in blocks of 8 + 3 repair packets (sequence numbers
    /// wrapping), dropping `lost`; returns what came out.
    fn run(lost: &[u16]) -> (Vec<Delivery>, FecStats) {
        let seq0 = 65_530u16;
        let mut rx = FecReceiver::new(Some((8, 3)), Some(seq0));
        let mut out = vec![];
        for b in 0..5u16 {
            for i in b * 8..b * 8 + 8 {
                if !lost.contains(&i) {
                    rx.source(seq0.wrapping_add(i), packet(i), &mut |d| out.push(d));
                }
            }
            for r in repairs(b * 8, 8, 3, seq0) {
                rx.repair(packet(b * 8).timestamp, &r);
            }
        }
        rx.finish(&mut |d| out.push(d));
        (out, rx.stats())
    }

    #[test]
    fn rebuilds_up_to_m_per_block_and_reports_the_rest() {
        let (out, stats) = run(&[0, 1, 2, 9, 20, 21, 22, 23, 39]);
        assert_eq!(out.len(), 40);
        for (i, d) in out.iter().enumerate() {
            let seq = 65_530u16.wrapping_add(i as u16);
            let lost_beyond = (20..24).contains(&i);
            match d {
                Delivery::Packet {
                    seq: s, packet: p, ..
                } => {
                    assert!(!lost_beyond, "packet {i} cannot be rebuilt");
                    assert_eq!((*s, p), (seq, &packet(i as u16)), "packet {i}");
                }
                Delivery::Lost { seq: s } => {
                    assert!(lost_beyond, "packet {i} should be rebuilt");
                    assert_eq!(*s, seq);
                }
            }
        }
        assert_eq!(
            (stats.received, stats.recovered, stats.unrecoverable),
            (31, 5, 4)
        );
    }

    #[test]
    fn a_receiver_started_mid_block_rebuilds_the_rest_of_it() {
        let seq0 = 100u16;
        let mut rx = FecReceiver::new(Some((8, 3)), None);
        let mut out = vec![];
        for i in (2..16u16).filter(|&i| i != 5 && i != 12) {
            rx.source(seq0 + i, packet(i), &mut |d| out.push(d));
            if i % 8 == 7 {
                for r in repairs(i - 7, 8, 3, seq0) {
                    rx.repair(packet(i - 7).timestamp, &r);
                }
            }
        }
        rx.finish(&mut |d| out.push(d));
        let seqs: Vec<u16> = out
            .iter()
            .map(|d| match d {
                Delivery::Packet { seq, .. } | Delivery::Lost { seq } => *seq,
            })
            .collect();
        assert_eq!(seqs, (seq0 + 2..seq0 + 16).collect::<Vec<_>>());
        assert_eq!((rx.stats().recovered, rx.stats().unrecoverable), (2, 0));
    }

    #[test]
    fn bursts_never_hit_a_block_twice() {
        let mut loss = Loss::new(
            LossModel::Bursts {
                p: 0.5,
                n: 3,
                spacing: 8,
            },
            7,
        );
        let dropped: Vec<u32> = (0..10_000).filter(|_| loss.drop_packet(false)).collect();
        assert!(dropped.len() > 1000);
        for w in dropped.windows(2) {
            let gap = w[1] - w[0];
            assert!(gap == 1 || gap > 8, "runs {w:?} closer than a block");
        }
        assert!(!loss.drop_packet(true), "repair packets are kept");
    }
}

//! Receiver side, sans-IO: collect one block's source and repair packets,
//! recover the missing source packets bit-exact or say which are lost.

use crate::rs::Codec;
use crate::symbol::{self, MAX_PAYLOAD, RepairHeader, SymbolMeta};

/// A source packet as received (or recovered): what RTP carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePacket {
    pub payload: Vec<u8>,
    pub marker: bool,
    /// RTP timestamp as received (session offset included).
    pub timestamp: u32,
}

/// Why a packet was not accepted into a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("source index {esi} is outside the block of {k}")]
    SourceIndex { esi: u16, k: u16 },
    #[error("repair packet for a different block layout or symbol size")]
    Layout,
    #[error("source payload longer than {MAX_PAYLOAD} bytes")]
    PayloadTooLong,
    #[error("{missing} source packets missing and only {repairs} repair packets: unrecoverable")]
    Unrecoverable { missing: usize, repairs: usize },
    #[error("a received source packet is longer than the block's repair symbols allow")]
    SourceTooLong,
    #[error("the recovered symbol is malformed (corrupt repair data)")]
    Malformed,
}

/// One block being received. Feed it packets in any order; `recover` when
/// the block is complete (or its time is up).
#[derive(Default)]
pub struct BlockDecoder {
    k: u16,
    m: u16,
    sources: Vec<Option<SourcePacket>>,
    repairs: Vec<Option<Vec<u8>>>,
    /// RTP timestamp of the block's first source packet (from a repair packet).
    ts_base: Option<u32>,
    symbol_len: usize,
    scratch: Vec<u8>,
    codec: Codec,
}

impl BlockDecoder {
    /// An empty decoder; `reset` before use. Keeps its buffers across blocks.
    pub fn new() -> BlockDecoder {
        BlockDecoder::default()
    }

    /// Starts a block of `k` source and `m` repair packets.
    pub fn reset(&mut self, k: u16, m: u16) {
        self.k = k;
        self.m = m;
        self.sources.clear();
        self.sources.resize(usize::from(k), None);
        self.repairs.clear();
        self.repairs.resize(usize::from(m), None);
        self.ts_base = None;
        self.symbol_len = 0;
    }

    /// A source packet; `esi` = its RTP sequence number minus the block's
    /// `seq_base`, wrapping.
    pub fn add_source(&mut self, esi: u16, packet: SourcePacket) -> Result<(), DecodeError> {
        if packet.payload.len() > MAX_PAYLOAD {
            return Err(DecodeError::PayloadTooLong);
        }
        let slot = self
            .sources
            .get_mut(usize::from(esi))
            .ok_or(DecodeError::SourceIndex { esi, k: self.k })?;
        *slot = Some(packet);
        Ok(())
    }

    /// A repair packet: its parsed header, its RTP timestamp and symbol.
    pub fn add_repair(
        &mut self,
        header: &RepairHeader,
        rtp_timestamp: u32,
        symbol: &[u8],
    ) -> Result<(), DecodeError> {
        if header.k != self.k
            || (self.symbol_len != 0 && symbol.len() != self.symbol_len)
            || self.ts_base.is_some_and(|t| t != rtp_timestamp)
        {
            return Err(DecodeError::Layout);
        }
        let slot = self
            .repairs
            .get_mut(usize::from(header.repair_index()))
            .ok_or(DecodeError::Layout)?;
        *slot = Some(symbol.to_vec());
        self.symbol_len = symbol.len();
        self.ts_base = Some(rtp_timestamp);
        Ok(())
    }

    /// Indexes of source packets not received.
    pub fn missing(&self) -> impl Iterator<Item = u16> + '_ {
        self.sources
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_none())
            .map(|(i, _)| i as u16)
    }

    /// Recovers every missing source packet, returned with its index, or
    /// reports the block unrecoverable. Never returns bytes that are not
    /// the original ones when the received packets are intact.
    pub fn recover(&mut self) -> Result<Vec<(u16, SourcePacket)>, DecodeError> {
        let missing = self.missing().count();
        if missing == 0 {
            return Ok(Vec::new());
        }
        let repairs = self.repairs.iter().flatten().count();
        if missing > repairs {
            return Err(DecodeError::Unrecoverable { missing, repairs });
        }
        let (e, ts_base) = (self.symbol_len, self.ts_base.unwrap_or_default());
        let (k, m) = (usize::from(self.k), usize::from(self.m));
        self.codec
            .set_layout(k, m)
            .map_err(|_| DecodeError::Layout)?;
        self.scratch.clear();
        self.scratch.resize(k * e, 0);
        let mut present = vec![false; k];
        for ((s, sym), p) in self
            .sources
            .iter()
            .zip(self.scratch.chunks_exact_mut(e))
            .zip(&mut present)
        {
            if let Some(s) = s {
                let meta = SymbolMeta {
                    marker: s.marker,
                    ts_delta: s.timestamp.wrapping_sub(ts_base),
                };
                symbol::frame(sym, &[&s.payload], meta).map_err(|_| DecodeError::SourceTooLong)?;
                *p = true;
            }
        }
        let repairs: Vec<(usize, &[u8])> = self
            .repairs
            .iter()
            .enumerate()
            .filter_map(|(j, r)| Some((j, r.as_deref()?)))
            .collect();
        let rebuilt = self
            .codec
            .decode(&mut self.scratch, &present, &repairs)
            .map_err(|_| DecodeError::Layout)?;
        let mut out = Vec::with_capacity(missing);
        for i in rebuilt {
            let sym = &self.scratch[i * e..i * e + e];
            let (meta, payload) = symbol::unframe(sym).map_err(|_| DecodeError::Malformed)?;
            out.push((
                i as u16,
                SourcePacket {
                    payload: payload.to_vec(),
                    marker: meta.marker,
                    timestamp: ts_base.wrapping_add(meta.ts_delta),
                },
            ));
        }
        out.sort_by_key(|(i, _)| *i);
        Ok(out)
    }
}

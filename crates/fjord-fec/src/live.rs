//! On-the-fly encoding, the way servers without stored parity protect a
//! stream (GStreamer's ULPFEC encoder works so): each source packet is
//! framed and multiplied into the block's M repair symbols as it leaves.
//! fjord serves parity from the sidecar instead; this exists so
//! `fjord bench capacity --fec-live` can measure what the difference costs
//! inside the engine. Its symbols equal the sidecar's byte for byte.

use crate::gf;
use crate::rs::{CodecError, Generator};
use crate::symbol::{self, FramingError, SymbolMeta};

/// Per-session encoder state, sized once for M repair symbols of E bytes:
/// nothing is allocated per packet, and per block only when the block size
/// changes (a title's last block).
pub struct LiveEncoder {
    m: usize,
    e: usize,
    k: usize,
    /// M × k coefficients: row j is GM's column for repair ESI k + j.
    coeffs: Vec<u8>,
    symbol: Vec<u8>,
    repairs: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error(transparent)]
    Framing(#[from] FramingError),
    #[error("source symbol {0} is outside the block")]
    Index(usize),
}

impl LiveEncoder {
    pub fn new(m: usize, e: usize) -> LiveEncoder {
        LiveEncoder {
            m,
            e,
            k: 0,
            coeffs: Vec::new(),
            symbol: vec![0; e],
            repairs: vec![0; m * e],
        }
    }

    /// Starts a block of `k` source packets.
    pub fn start_block(&mut self, k: usize) -> Result<(), LiveError> {
        if k != self.k {
            let g = Generator::new(k)?;
            self.coeffs.resize(self.m * k, 0);
            for (j, row) in self.coeffs.chunks_exact_mut(k).enumerate() {
                g.column(k + j, row);
            }
            self.k = k;
        }
        self.repairs.fill(0);
        Ok(())
    }

    /// Adds source packet `i` of the block, its payload in `parts`.
    pub fn add(&mut self, i: usize, parts: &[&[u8]], meta: SymbolMeta) -> Result<(), LiveError> {
        if i >= self.k {
            return Err(LiveError::Index(i));
        }
        symbol::frame(&mut self.symbol, parts, meta)?;
        for (j, repair) in self.repairs.chunks_exact_mut(self.e).enumerate() {
            gf::mul_add(self.coeffs[j * self.k + i], &self.symbol, repair);
        }
        Ok(())
    }

    /// Repair symbol `j` of the block, complete once all k were added.
    pub fn repair(&self, j: usize) -> Option<&[u8]> {
        self.repairs.get(j * self.e..(j + 1) * self.e)
    }
}

//! Wire framing: source symbols (RFC 6363 ADU information, what the parity
//! is computed over) and the repair packet's FEC payload ID (RFC 6865's
//! Repair FEC Payload ID for m = 8, then the block's first RTP sequence
//! number). Both are specified in `docs/fec.md`.

/// Bytes before the RTP payload in a source symbol: F (1), L (2), then the
/// ADU's own header, flags (1) and T (4).
pub const SYMBOL_HEADER_LEN: usize = 8;
/// Bytes of the ADU before the RTP payload (flags and T); L counts them.
pub const ADU_HEADER_LEN: usize = 5;
/// Bytes of the FEC payload ID at the start of a repair packet's RTP payload.
pub const REPAIR_HEADER_LEN: usize = 8;
/// Largest symbol: RFC 6865 signals E in 16 bits.
pub const MAX_SYMBOL_LEN: usize = u16::MAX as usize;
/// Largest RTP payload a symbol can carry.
pub const MAX_PAYLOAD: usize = MAX_SYMBOL_LEN - SYMBOL_HEADER_LEN;
/// The flow ID F of every ADUI: one source flow per repair flow.
pub const FLOW_ID: u8 = 0;
/// The SDP encoding name of the repair payload format (`docs/fec.md`):
/// RFC 6865 repair symbols in fjord's RTP framing. No RTP payload format
/// for RFC 6865 is registered, hence an `x-` name.
pub const REPAIR_ENCODING: &str = "x-fjord-rfc6865";
/// RFC 6865's FEC Encoding ID (Reed-Solomon over GF(2^m), here m = 8).
pub const FEC_ENCODING_ID: u8 = 8;
/// Source block numbers are 24 bits on the wire (32 − m, m = 8).
pub const SBN_MASK: u32 = 0x00FF_FFFF;

const FLAG_MARKER: u8 = 0x80;

/// Why bytes are not a valid symbol or repair header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("symbol shorter than its header")]
    Short,
    #[error("symbol length field exceeds the symbol")]
    Length,
    #[error("flow ID, reserved bits or padding not zero")]
    Reserved,
    #[error("payload longer than {MAX_PAYLOAD} bytes")]
    PayloadTooLong,
    #[error("repair header: k must be at least 1, the ESI in k..255 and the symbol non-empty")]
    RepairHeader,
}

/// Symbol length E that holds a packet whose RTP payload is `max_payload`
/// bytes: the ADUI's length, F + L + ADU (no rounding: GF(2^8) works on
/// bytes).
pub fn symbol_len(max_payload: usize) -> usize {
    SYMBOL_HEADER_LEN + max_payload
}

/// The RTP header fields a symbol carries besides the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SymbolMeta {
    /// RTP marker bit.
    pub marker: bool,
    /// RTP timestamp minus the block's base timestamp (that of its first
    /// source packet), wrapping: independent of the session's random offset.
    pub ts_delta: u32,
}

/// The 8-byte ADUI header (F, L, flags, T) for a payload of `len` bytes.
pub fn header(len: usize, meta: SymbolMeta) -> Result<[u8; SYMBOL_HEADER_LEN], FramingError> {
    if len > MAX_PAYLOAD {
        return Err(FramingError::PayloadTooLong);
    }
    let adu_len = (ADU_HEADER_LEN + len) as u16;
    let mut h = [0u8; SYMBOL_HEADER_LEN];
    h[0] = FLOW_ID;
    h[1..3].copy_from_slice(&adu_len.to_be_bytes());
    h[3] = if meta.marker { FLAG_MARKER } else { 0 };
    h[4..].copy_from_slice(&meta.ts_delta.to_be_bytes());
    Ok(h)
}

/// Writes the symbol of a payload given in `parts` (payload header, file
/// runs) into `out`, zero-padding to `out.len()`. Returns the unpadded length.
pub fn frame(out: &mut [u8], parts: &[&[u8]], meta: SymbolMeta) -> Result<usize, FramingError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let h = header(len, meta)?;
    let used = SYMBOL_HEADER_LEN + len;
    if used > out.len() {
        return Err(FramingError::Length);
    }
    out[..SYMBOL_HEADER_LEN].copy_from_slice(&h);
    let mut at = SYMBOL_HEADER_LEN;
    for p in parts {
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    out[used..].fill(0);
    Ok(used)
}

/// Splits a symbol into its header fields and RTP payload. Strict: the
/// flow ID, the reserved flag bits and the padding must be zero, so garbage
/// is refused, not returned.
pub fn unframe(symbol: &[u8]) -> Result<(SymbolMeta, &[u8]), FramingError> {
    let (h, rest) = symbol
        .split_first_chunk::<SYMBOL_HEADER_LEN>()
        .ok_or(FramingError::Short)?;
    let adu_len = usize::from(u16::from_be_bytes([h[1], h[2]]));
    if h[0] != FLOW_ID || h[3] & !FLAG_MARKER != 0 {
        return Err(FramingError::Reserved);
    }
    let len = adu_len
        .checked_sub(ADU_HEADER_LEN)
        .ok_or(FramingError::Length)?;
    let (payload, pad) = rest.split_at_checked(len).ok_or(FramingError::Length)?;
    if pad.iter().any(|&b| b != 0) {
        return Err(FramingError::Reserved);
    }
    let meta = SymbolMeta {
        marker: h[3] & FLAG_MARKER != 0,
        ts_delta: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    };
    Ok((meta, payload))
}

/// The FEC payload ID of a repair packet: RFC 6865's Repair FEC Payload ID
/// for m = 8 (SBN 24 bits, ESI 8 bits, k 16 bits), then `seq_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairHeader {
    /// Source block number within the track, modulo 2^24.
    pub sbn: u32,
    /// Encoding symbol ID of this repair symbol: k + j for the block's
    /// j-th repair symbol (RFC 5510: ESIs 0..k are the source symbols).
    pub esi: u8,
    /// Source packets in this block (the last block of a track may be short).
    pub k: u16,
    /// RTP sequence number of the block's first source packet.
    pub seq_base: u16,
}

impl RepairHeader {
    /// The header of repair symbol `j` of block `sbn` of `k` source packets
    /// (`k + j` < 255, as every block layout guarantees).
    pub fn new(sbn: u64, k: u16, j: u16, seq_base: u16) -> RepairHeader {
        RepairHeader {
            sbn: sbn as u32 & SBN_MASK,
            esi: (k + j).min(254) as u8,
            k,
            seq_base,
        }
    }

    /// Index of this repair symbol within its block, ESI − k.
    pub fn repair_index(&self) -> u16 {
        u16::from(self.esi).saturating_sub(self.k)
    }

    pub fn to_bytes(&self) -> [u8; REPAIR_HEADER_LEN] {
        let mut b = [0u8; REPAIR_HEADER_LEN];
        b[..4].copy_from_slice(&((self.sbn & SBN_MASK) << 8 | u32::from(self.esi)).to_be_bytes());
        b[4..6].copy_from_slice(&self.k.to_be_bytes());
        b[6..8].copy_from_slice(&self.seq_base.to_be_bytes());
        b
    }

    /// Parses a repair packet's RTP payload into its header and repair symbol.
    pub fn parse(payload: &[u8]) -> Result<(RepairHeader, &[u8]), FramingError> {
        let (h, symbol) = payload
            .split_first_chunk::<REPAIR_HEADER_LEN>()
            .ok_or(FramingError::RepairHeader)?;
        let id = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let header = RepairHeader {
            sbn: id >> 8,
            esi: id as u8,
            k: u16::from_be_bytes([h[4], h[5]]),
            seq_base: u16::from_be_bytes([h[6], h[7]]),
        };
        if header.k == 0
            || u16::from(header.esi) < header.k
            || usize::from(header.esi) >= crate::rs::MAX_N
            || symbol.is_empty()
            || symbol.len() > MAX_SYMBOL_LEN
        {
            return Err(FramingError::RepairHeader);
        }
        Ok((header, symbol))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn framing_round_trips(
            a in proptest::collection::vec(any::<u8>(), 0..20),
            b in proptest::collection::vec(any::<u8>(), 0..3000),
            marker: bool,
            ts_delta: u32,
            extra in 0usize..40,
        ) {
            let meta = SymbolMeta { marker, ts_delta };
            let e = symbol_len(a.len() + b.len()) + extra;
            let mut out = vec![0xAA; e];
            let used = frame(&mut out, &[&a, &b], meta).unwrap();
            prop_assert_eq!(used, SYMBOL_HEADER_LEN + a.len() + b.len());
            let (m, payload) = unframe(&out).unwrap();
            prop_assert_eq!(m, meta);
            prop_assert_eq!(payload, [a.as_slice(), b.as_slice()].concat());
        }

        #[test]
        fn unframe_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = unframe(&bytes);
            let _ = RepairHeader::parse(&bytes);
        }
    }

    #[test]
    fn garbage_is_refused() {
        let mut s = vec![0u8; 16];
        frame(&mut s, &[b"abc"], SymbolMeta::default()).unwrap();
        let mut pad = s.clone();
        pad[15] = 1;
        assert_eq!(unframe(&pad), Err(FramingError::Reserved));
        let mut long = s.clone();
        long[2] = 200;
        assert_eq!(unframe(&long), Err(FramingError::Length));
        let mut flow = s.clone();
        flow[0] = 1;
        assert_eq!(unframe(&flow), Err(FramingError::Reserved));
        let mut short_adu = s.clone();
        short_adu[2] = 4;
        assert_eq!(unframe(&short_adu), Err(FramingError::Length));
        assert_eq!(unframe(&s[..4]), Err(FramingError::Short));
        assert_eq!(
            frame(&mut [0u8; 4], &[b"abc"], SymbolMeta::default()),
            Err(FramingError::Length)
        );
    }

    #[test]
    fn repair_header_round_trips() {
        let h = RepairHeader::new(0x0123_4567, 223, 31, 65_530);
        assert_eq!(
            (h.sbn, h.esi, h.k, h.repair_index()),
            (0x23_4567, 254, 223, 31)
        );
        let mut p = h.to_bytes().to_vec();
        // SBN 24 bits | ESI 8 bits, k, seq_base: all big-endian.
        assert_eq!(p, [0x23, 0x45, 0x67, 254, 0, 223, 0xFF, 0xFA]);
        p.extend_from_slice(&[1, 2, 3]);
        assert_eq!(RepairHeader::parse(&p), Ok((h, &[1u8, 2, 3][..])));
        // ESI below k names a source symbol; 255 is outside the code.
        for (esi, k) in [(10u8, 11u16), (255, 200), (5, 0)] {
            let mut bad = p.clone();
            bad[3] = esi;
            bad[4..6].copy_from_slice(&k.to_be_bytes());
            assert_eq!(RepairHeader::parse(&bad), Err(FramingError::RepairHeader));
        }
        assert_eq!(
            RepairHeader::parse(&p[..REPAIR_HEADER_LEN]),
            Err(FramingError::RepairHeader)
        );
    }
}

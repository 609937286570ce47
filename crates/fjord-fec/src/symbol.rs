//! Wire framing: source symbols (what the parity is computed over) and the
//! repair packet's FEC payload ID. Both are specified in `docs/fec.md`.

/// Bytes before the payload in a source symbol.
pub const SYMBOL_HEADER_LEN: usize = 8;
/// Bytes of the repair FEC payload ID at the start of a repair packet's RTP payload.
pub const REPAIR_HEADER_LEN: usize = 12;
/// Largest RTP payload a symbol can carry (the length field is 16 bits).
pub const MAX_PAYLOAD: usize = u16::MAX as usize;
/// Largest symbol: header and the largest payload, rounded up to even.
pub const MAX_SYMBOL_LEN: usize = (SYMBOL_HEADER_LEN + MAX_PAYLOAD).next_multiple_of(2);

const FLAG_MARKER: u8 = 1;

/// Why bytes are not a valid symbol or repair header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("symbol shorter than its header")]
    Short,
    #[error("symbol length field exceeds the symbol")]
    Length,
    #[error("reserved bits or padding not zero")]
    Reserved,
    #[error("payload longer than {MAX_PAYLOAD} bytes")]
    PayloadTooLong,
    #[error("repair header: K and M must be at least 1 and the symbol non-empty and even")]
    RepairHeader,
}

/// Symbol length E for a block whose longest RTP payload is `max_payload`:
/// header plus payload, rounded up to even (reed-solomon-simd works on
/// 16-bit elements).
pub fn symbol_len(max_payload: usize) -> usize {
    (SYMBOL_HEADER_LEN + max_payload).next_multiple_of(2)
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

/// The 8-byte symbol header for a payload of `len` bytes.
pub fn header(len: usize, meta: SymbolMeta) -> Result<[u8; SYMBOL_HEADER_LEN], FramingError> {
    let len = u16::try_from(len).map_err(|_| FramingError::PayloadTooLong)?;
    let mut h = [0u8; SYMBOL_HEADER_LEN];
    h[..2].copy_from_slice(&len.to_be_bytes());
    h[2] = if meta.marker { FLAG_MARKER } else { 0 };
    h[4..].copy_from_slice(&meta.ts_delta.to_be_bytes());
    Ok(h)
}

/// Writes the symbol of a payload given in `parts` (payload header, file
/// runs) into `out`, zero-padding to `out.len()`. Returns the unpadded length.
pub fn frame(out: &mut [u8], parts: &[&[u8]], meta: SymbolMeta) -> Result<usize, FramingError> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let used = SYMBOL_HEADER_LEN + len;
    if used > out.len() {
        return Err(FramingError::Length);
    }
    out[..SYMBOL_HEADER_LEN].copy_from_slice(&header(len, meta)?);
    let mut at = SYMBOL_HEADER_LEN;
    for p in parts {
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    out[used..].fill(0);
    Ok(used)
}

/// Splits a symbol into its header fields and RTP payload. Strict: reserved
/// bits and padding must be zero, so garbage is refused, not returned.
pub fn unframe(symbol: &[u8]) -> Result<(SymbolMeta, &[u8]), FramingError> {
    let (h, rest) = symbol
        .split_first_chunk::<SYMBOL_HEADER_LEN>()
        .ok_or(FramingError::Short)?;
    let len = usize::from(u16::from_be_bytes([h[0], h[1]]));
    if h[2] & !FLAG_MARKER != 0 || h[3] != 0 {
        return Err(FramingError::Reserved);
    }
    let (payload, pad) = rest.split_at_checked(len).ok_or(FramingError::Length)?;
    if pad.iter().any(|&b| b != 0) {
        return Err(FramingError::Reserved);
    }
    let meta = SymbolMeta {
        marker: h[2] & FLAG_MARKER != 0,
        ts_delta: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    };
    Ok((meta, payload))
}

/// The repair FEC payload ID: first 12 bytes of a repair packet's RTP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairHeader {
    /// Source block number within the track (wrapping).
    pub sbn: u32,
    /// RTP sequence number of the block's first source packet.
    pub seq_base: u16,
    /// Source packets in this block (the last block of a track may be short).
    pub k: u16,
    /// Index of this repair symbol, 0..m.
    pub esi: u16,
    /// Repair packets in this block.
    pub m: u16,
}

impl RepairHeader {
    pub fn to_bytes(&self) -> [u8; REPAIR_HEADER_LEN] {
        let mut b = [0u8; REPAIR_HEADER_LEN];
        b[..4].copy_from_slice(&self.sbn.to_be_bytes());
        b[4..6].copy_from_slice(&self.seq_base.to_be_bytes());
        b[6..8].copy_from_slice(&self.k.to_be_bytes());
        b[8..10].copy_from_slice(&self.esi.to_be_bytes());
        b[10..12].copy_from_slice(&self.m.to_be_bytes());
        b
    }

    /// Parses a repair packet's RTP payload into its header and repair symbol.
    pub fn parse(payload: &[u8]) -> Result<(RepairHeader, &[u8]), FramingError> {
        let (h, symbol) = payload
            .split_first_chunk::<REPAIR_HEADER_LEN>()
            .ok_or(FramingError::RepairHeader)?;
        let u16_at = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let header = RepairHeader {
            sbn: u32::from_be_bytes([h[0], h[1], h[2], h[3]]),
            seq_base: u16_at(4),
            k: u16_at(6),
            esi: u16_at(8),
            m: u16_at(10),
        };
        if header.k == 0
            || header.m == 0
            || header.esi >= header.m
            || symbol.is_empty()
            || !symbol.len().is_multiple_of(2)
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
            let e = symbol_len(a.len() + b.len()) + extra * 2;
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
        long[1] = 9;
        assert_eq!(unframe(&long), Err(FramingError::Length));
        assert_eq!(unframe(&s[..4]), Err(FramingError::Short));
        assert_eq!(
            frame(&mut [0u8; 4], &[b"abc"], SymbolMeta::default()),
            Err(FramingError::Length)
        );
    }

    #[test]
    fn repair_header_round_trips() {
        let h = RepairHeader {
            sbn: 7,
            seq_base: 65_530,
            k: 224,
            esi: 3,
            m: 32,
        };
        let mut p = h.to_bytes().to_vec();
        p.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(RepairHeader::parse(&p), Ok((h, &[1u8, 2, 3, 4][..])));
        p.push(5);
        assert_eq!(RepairHeader::parse(&p), Err(FramingError::RepairHeader));
    }
}

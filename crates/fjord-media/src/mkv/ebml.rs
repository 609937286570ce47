//! EBML (RFC 8794), the binary layout under Matroska and WebM: element
//! headers and the few value types Matroska's header elements use.
//!
//! Hand-written because ingest needs each frame's byte range in the file
//! (serving sends it by reference), and the Matroska crates read frames into
//! buffers of their own without saying where they were. Over a slice (the
//! mapped file): reading past it is an error, never a panic.

/// One element: its ID (marker bits kept, as the specification writes
/// them) and where its header and body lie in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element {
    pub id: u32,
    /// Offset of the header's first byte.
    pub start: usize,
    /// Offset of the body's first byte.
    pub body: usize,
    /// One past the body's last byte; for an element of unknown size, the
    /// end of its parent (the caller finds where it truly ends).
    pub end: usize,
    /// The size field said "unknown" (all ones), as live writers emit.
    pub unknown_size: bool,
}

/// Why an element header cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// The data ends inside the header, or the body runs past its parent.
    Truncated,
    /// Not an EBML header: a variable-length integer of more than 8 bytes
    /// (4 for an ID), or a reserved ID.
    Malformed,
}

/// A variable-length integer at `pos`: its value with the length marker
/// removed, its length in bytes, and whether every value bit was 1.
pub fn vint(data: &[u8], pos: usize) -> Result<(u64, usize, bool), HeaderError> {
    let first = *data.get(pos).ok_or(HeaderError::Truncated)?;
    if first == 0 {
        return Err(HeaderError::Malformed);
    }
    let len = first.leading_zeros() as usize + 1;
    let bytes = data.get(pos..pos + len).ok_or(HeaderError::Truncated)?;
    let mut v = u64::from(first) & (0xff >> len);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    let all_ones = v == (1u64 << (7 * len)) - 1;
    Ok((v, len, all_ones))
}

/// ID, body offset and size (`None`: unknown) of the header at `pos`,
/// which must lie in `data[..end]`.
fn parts(data: &[u8], pos: usize, end: usize) -> Result<(u32, usize, Option<u64>), HeaderError> {
    let data = &data[..end.min(data.len())];
    let first = *data.get(pos).ok_or(HeaderError::Truncated)?;
    let id_len = first.leading_zeros() as usize + 1;
    if id_len > 4 {
        return Err(HeaderError::Malformed);
    }
    let id_bytes = data.get(pos..pos + id_len).ok_or(HeaderError::Truncated)?;
    let id = id_bytes.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b));
    let (size, size_len, unknown) = vint(data, pos + id_len)?;
    Ok((id, pos + id_len + size_len, (!unknown).then_some(size)))
}

/// The element whose header starts at `pos`, inside a parent ending at
/// `end` (≤ `data.len()`).
pub fn header(data: &[u8], pos: usize, end: usize) -> Result<Element, HeaderError> {
    match header_cut(data, pos, end)? {
        (_, true) => Err(HeaderError::Truncated),
        (e, false) => Ok(e),
    }
}

/// [`header`], except that a body running past `end` is cut there rather
/// than refused (a truncated file's last element); the flag says whether it
/// was.
pub fn header_cut(data: &[u8], pos: usize, end: usize) -> Result<(Element, bool), HeaderError> {
    let end = end.min(data.len());
    let (id, body, size) = parts(data, pos, end)?;
    let element = |end, unknown_size| Element {
        id,
        start: pos,
        body,
        end,
        unknown_size,
    };
    let Some(size) = size else {
        return Ok((element(end, true), false));
    };
    match usize::try_from(size).ok().and_then(|s| body.checked_add(s)) {
        Some(e) if e <= end => Ok((element(e, false), false)),
        _ => Ok((element(end, false), true)),
    }
}

/// The children of `data[pos..end]`, in order; stops after the first error
/// (which it yields).
pub struct Children<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Children<'a> {
    pub fn new(data: &'a [u8], pos: usize, end: usize) -> Self {
        Children {
            data,
            pos,
            end: end.min(data.len()),
        }
    }

    /// The children of `parent`'s body.
    pub fn of(data: &'a [u8], parent: &Element) -> Self {
        Children::new(data, parent.body, parent.end)
    }
}

impl Iterator for Children<'_> {
    type Item = Result<Element, HeaderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.end {
            return None;
        }
        match header(self.data, self.pos, self.end) {
            Ok(e) => {
                self.pos = e.end.max(e.body);
                Some(Ok(e))
            }
            Err(err) => {
                self.pos = self.end;
                Some(Err(err))
            }
        }
    }
}

/// An unsigned integer element's value (up to 8 bytes, big-endian).
pub fn uint(data: &[u8], e: &Element) -> Option<u64> {
    let b = data.get(e.body..e.end)?;
    (b.len() <= 8).then(|| b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

/// A float element's value (0, 4 or 8 bytes).
pub fn float(data: &[u8], e: &Element) -> Option<f64> {
    let b = data.get(e.body..e.end)?;
    match b.len() {
        0 => Some(0.0),
        4 => Some(f64::from(f32::from_be_bytes(b.try_into().ok()?))),
        8 => Some(f64::from_be_bytes(b.try_into().ok()?)),
        _ => None,
    }
}

/// A string element's value, up to its first NUL (padding).
pub fn string<'a>(data: &'a [u8], e: &Element) -> Option<&'a str> {
    let b = data.get(e.body..e.end)?;
    let b = &b[..memchr::memchr(0, b).unwrap_or(b.len())];
    std::str::from_utf8(b).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The shortest size field for `v` (tests write headers with it).
    fn size_field(v: u64) -> Vec<u8> {
        let len = (1..=8).find(|&l| v < (1u64 << (7 * l)) - 1).unwrap();
        let mut out = v.to_be_bytes()[8 - len..].to_vec();
        out[0] |= 0x80 >> (len - 1);
        out
    }

    #[test]
    fn reads_ids_sizes_and_values() {
        // EBML header ID, size 4, then DocType "webm".
        let data = [
            0x1a, 0x45, 0xdf, 0xa3, 0x87, 0x42, 0x82, 0x84, b'w', b'e', b'b', b'm',
        ];
        let e = header(&data, 0, data.len()).unwrap();
        assert_eq!((e.id, e.body, e.end), (0x1a45dfa3, 5, 12));
        let dt: Vec<_> = Children::of(&data, &e).collect();
        assert_eq!(dt.len(), 1);
        let d = dt[0].unwrap();
        assert_eq!(d.id, 0x4282);
        assert_eq!(string(&data, &d), Some("webm"));
    }

    #[test]
    fn unknown_size_runs_to_the_parent_end() {
        let data = [
            0x1f, 0x43, 0xb6, 0x75, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xe7, 0x81,
            0x05,
        ];
        let e = header(&data, 0, data.len()).unwrap();
        assert!(e.unknown_size);
        assert_eq!((e.body, e.end), (12, 15));
        let ts = Children::of(&data, &e).next().unwrap().unwrap();
        assert_eq!(uint(&data, &ts), Some(5));
    }

    #[test]
    fn bad_headers_are_errors() {
        assert_eq!(header(&[], 0, 0), Err(HeaderError::Truncated));
        assert_eq!(header(&[0x00, 0x81], 0, 2), Err(HeaderError::Malformed));
        assert_eq!(
            header(&[0x08, 0, 0, 0, 0, 0x81], 0, 6),
            Err(HeaderError::Malformed)
        );
        // Body of 5 bytes in a parent of 3.
        assert_eq!(header(&[0xa3, 0x85, 0], 0, 3), Err(HeaderError::Truncated));
        assert_eq!(vint(&[0x40], 0), Err(HeaderError::Truncated));
    }

    proptest! {
        #[test]
        fn size_fields_round_trip(v in 0u64..(1 << 56) - 1) {
            let f = size_field(v);
            prop_assert_eq!(vint(&f, 0), Ok((v, f.len(), false)));
        }

        #[test]
        fn any_bytes_read_without_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            for e in Children::new(&data, 0, data.len()).flatten() {
                prop_assert!(e.body <= e.end && e.end <= data.len());
                let _ = (uint(&data, &e), float(&data, &e), string(&data, &e));
            }
        }

        #[test]
        fn written_elements_read_back(bodies in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..300), 0..6)) {
            let mut data = Vec::new();
            let mut want = Vec::new();
            for b in &bodies {
                let start = data.len();
                data.push(0xa3);
                data.extend(size_field(b.len() as u64));
                want.push((start, data.len(), data.len() + b.len()));
                data.extend(b);
            }
            let got: Vec<_> = Children::new(&data, 0, data.len())
                .map(|e| e.map(|e| (e.start, e.body, e.end)))
                .collect::<Result<_, _>>()
                .unwrap();
            prop_assert_eq!(got, want);
        }
    }
}

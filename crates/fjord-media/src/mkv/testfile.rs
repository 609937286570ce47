//! A small Matroska writer for tests: elements, tracks, blocks with every
//! lacing, clusters of known and unknown size.

/// The bytes of an ID as the specification writes it (marker bits kept).
fn id_bytes(id: u32) -> Vec<u8> {
    let b = id.to_be_bytes();
    let skip = b.iter().take_while(|&&x| x == 0).count().min(3);
    b[skip..].to_vec()
}

/// The shortest size field for `v`.
pub fn size_field(v: u64) -> Vec<u8> {
    let len = (1..=8).find(|&l| v < (1u64 << (7 * l)) - 1).unwrap_or(8);
    let mut out = v.to_be_bytes()[8 - len..].to_vec();
    out[0] |= 0x80 >> (len - 1);
    out
}

pub fn el(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = id_bytes(id);
    out.extend(size_field(body.len() as u64));
    out.extend_from_slice(body);
    out
}

/// An element of unknown size (8-byte all-ones size field).
pub fn unknown(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = id_bytes(id);
    out.extend([0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    out.extend_from_slice(body);
    out
}

pub fn uint(id: u32, v: u64) -> Vec<u8> {
    let b = v.to_be_bytes();
    let skip = b.iter().take_while(|&&x| x == 0).count().min(7);
    el(id, &b[skip..])
}

pub fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

pub fn ebml_header(doc_type: &str) -> Vec<u8> {
    el(
        0x1a45_dfa3,
        &cat(&[uint(0x4286, 1), el(0x4282, doc_type.as_bytes())]),
    )
}

/// A TrackEntry: number, type (1 video, 2 audio), CodecID, CodecPrivate.
pub fn track(number: u64, kind: u64, codec: &str, private: &[u8]) -> Vec<u8> {
    let mut body = cat(&[
        uint(0xd7, number),
        uint(0x83, kind),
        el(0x86, codec.as_bytes()),
    ]);
    if !private.is_empty() {
        body.extend(el(0x63a2, private));
    }
    el(0xae, &body)
}

/// A block body: track, relative time, flags (key: 0x80), lacing (0 none,
/// 1 Xiph, 2 fixed, 3 EBML) and frames.
pub fn block(track: u64, rel: i16, key: bool, lacing: u8, frames: &[&[u8]]) -> Vec<u8> {
    let mut out = size_field(track);
    out.extend(rel.to_be_bytes());
    out.push(u8::from(key) << 7 | lacing << 1);
    if lacing != 0 {
        out.push(frames.len() as u8 - 1);
    }
    let sizes: Vec<usize> = frames.iter().map(|f| f.len()).collect();
    match lacing {
        1 => {
            for &s in &sizes[..sizes.len() - 1] {
                out.extend(std::iter::repeat_n(255, s / 255));
                out.push((s % 255) as u8);
            }
        }
        3 if sizes.len() > 1 => {
            out.extend(size_field(sizes[0] as u64));
            for w in sizes[..sizes.len() - 1].windows(2) {
                // Signed difference in a 2-byte field: bias 2^13 - 1.
                let d = w[1] as i64 - w[0] as i64 + 8191;
                out.extend([0x40 | (d >> 8) as u8, d as u8]);
            }
        }
        _ => {}
    }
    for f in frames {
        out.extend_from_slice(f);
    }
    out
}

pub fn simple_block(track: u64, rel: i16, key: bool, frame: &[u8]) -> Vec<u8> {
    el(0xa3, &block(track, rel, key, 0, &[frame]))
}

pub fn cluster(ts: u64, blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut body = uint(0xe7, ts);
    body.extend(blocks.concat());
    el(0x1f43_b675, &body)
}

/// A whole file: header, Segment of unknown size holding Info (1 ms
/// ticks), the tracks, then `rest` (clusters, cues).
pub fn file(doc_type: &str, tracks: &[Vec<u8>], rest: &[Vec<u8>]) -> Vec<u8> {
    let info = el(0x1549_a966, &uint(0x2a_d7b1, 1_000_000));
    let mut body = info;
    body.extend(el(0x1654_ae6b, &tracks.concat()));
    body.extend(rest.concat());
    cat(&[ebml_header(doc_type), unknown(0x1853_8067, &body)])
}

/// An OpusHead of `channels`, mapping family 0.
pub fn opus_head(channels: u8) -> Vec<u8> {
    let mut h = b"OpusHead\x01".to_vec();
    h.push(channels);
    h.extend([0x38, 0x01, 0x80, 0xbb, 0, 0, 0, 0, 0]);
    h
}

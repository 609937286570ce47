//! A Matroska or WebM file's frame table (`NAME.fjfrm`): every frame as
//! the demuxer reads it from the block headers that run through the whole
//! file (its time, byte range, key flag and first two bytes), made once
//! by `fjord publish`. With it an edge cuts the title into HLS and DASH
//! segments having fetched only the file's head (the EBML header, Info,
//! Tracks: [`Table::head`]) and a VP9 track's first key frame
//! ([`super::fragments::frame_reads`]), and the segments are the bytes
//! cut from the whole file ([`super::fragments::fragment_demuxed`]).
//!
//! Layout, little-endian: the magic `FJFRM\r\n\x1a`, the version (u32),
//! the media's length (u64), its head's length (u64: where its first
//! Cluster starts) and the head's BLAKE3 (32 bytes), the track count
//! (u32); per track its number (u64), its frame count (u64) and its
//! frames, each the change of its time (ns) and of its offset from the
//! track's previous frame's (zigzag varints), its size (varint), a flags
//! byte (1 key, 2 laced) and its two lead bytes; last, the BLAKE3 of all
//! before. A table that does not read whole or is not of the media at
//! hand is refused with the reason, never used in part.

use std::path::{Path, PathBuf};

use super::demux::{self, Demuxed, Frame};
use crate::format::FormatError;

pub const MAGIC: &[u8; 8] = b"FJFRM\r\n\x1a";
pub const VERSION: u32 = 1;
/// The fewest bytes a frame takes (three one-byte varints, flags, lead).
const MIN_FRAME: usize = 6;

/// Where a media file's frame table is kept: beside it, `NAME.fjfrm`.
pub fn path_for(media: &Path) -> PathBuf {
    let mut s = media.as_os_str().to_owned();
    s.push(".fjfrm");
    PathBuf::from(s)
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error("not a frame table")]
    Magic,
    #[error("frame table version {0}; this fjord reads version {VERSION}")]
    Version(u32),
    #[error("the frame table ends early")]
    Short,
    #[error("the frame table's checksum does not match its bytes")]
    Checksum,
    #[error("the frame table is malformed: {0}")]
    Malformed(&'static str),
    #[error("the frame table is not of this media file: {0}")]
    Other(&'static str),
}

/// A file's frames, per track in the order of its Tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub media_len: u64,
    pub head_len: u64,
    head_hash: [u8; 32],
    numbers: Vec<u64>,
    pub frames: Vec<Vec<Frame>>,
}

impl Table {
    /// The table of the file `data` demuxed as `d`; `None` when its head
    /// does not hold its tracks (no Cluster, or Tracks after one).
    pub fn of(data: &[u8], d: &Demuxed) -> Option<Table> {
        let head_len = d.clusters_at?;
        let head = data.get(..head_len as usize)?;
        let in_head = demux::demux(head, &mut |_| {}).ok()?;
        (in_head.tracks == d.tracks).then(|| Table {
            media_len: data.len() as u64,
            head_len,
            head_hash: *blake3::hash(head).as_bytes(),
            numbers: d.tracks.iter().map(|t| t.number).collect(),
            frames: d.frames.clone(),
        })
    }

    /// The media `data` as [`demux::demux`] reads it, its frames from
    /// the table: only its head is read, and must be the one the table
    /// was made of.
    pub fn demuxed(&self, data: &[u8]) -> Result<Demuxed, TableError> {
        if data.len() as u64 != self.media_len {
            return Err(TableError::Other("its length differs"));
        }
        let head = &data[..self.head_len as usize];
        if blake3::hash(head).as_bytes() != &self.head_hash {
            return Err(TableError::Other("its head differs"));
        }
        let mut d = demux::demux(head, &mut |_| {}).map_err(|_| TableError::Other("no head"))?;
        if !d
            .tracks
            .iter()
            .map(|t| t.number)
            .eq(self.numbers.iter().copied())
        {
            return Err(TableError::Other("its tracks differ"));
        }
        d.frames = self.frames.clone();
        d.clusters_at = Some(self.head_len);
        Ok(d)
    }

    /// What [`Table::demuxed`] reads of the media: its head. Fragmenting
    /// reads a few frames' bytes besides
    /// ([`super::fragments::frame_reads`]).
    pub fn head(&self) -> std::ops::Range<u64> {
        0..self.head_len
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(64 + self.frames.iter().map(Vec::len).sum::<usize>() * 10);
        o.extend_from_slice(MAGIC);
        o.extend_from_slice(&VERSION.to_le_bytes());
        o.extend_from_slice(&self.media_len.to_le_bytes());
        o.extend_from_slice(&self.head_len.to_le_bytes());
        o.extend_from_slice(&self.head_hash);
        o.extend_from_slice(&(self.numbers.len() as u32).to_le_bytes());
        for (number, frames) in self.numbers.iter().zip(&self.frames) {
            o.extend_from_slice(&number.to_le_bytes());
            o.extend_from_slice(&(frames.len() as u64).to_le_bytes());
            let (mut time, mut offset) = (0i64, 0u64);
            for f in frames {
                varint(&mut o, zigzag(f.time_ns.wrapping_sub(time)));
                varint(&mut o, zigzag(f.offset.wrapping_sub(offset) as i64));
                varint(&mut o, u64::from(f.size));
                o.push(u8::from(f.key) | (u8::from(f.laced) << 1));
                o.extend_from_slice(&f.lead);
                (time, offset) = (f.time_ns, f.offset);
            }
        }
        let sum = blake3::hash(&o);
        o.extend_from_slice(sum.as_bytes());
        o
    }

    /// Reads a table, checking its checksum and that every frame lies
    /// within the media it names.
    pub fn parse(bytes: &[u8]) -> Result<Table, TableError> {
        if bytes.len() < MAGIC.len() + 4 || &bytes[..MAGIC.len()] != MAGIC {
            return Err(TableError::Magic);
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default());
        if version != VERSION {
            return Err(TableError::Version(version));
        }
        let body_len = bytes.len().checked_sub(32).ok_or(TableError::Short)?;
        let (body, sum) = bytes.split_at(body_len.max(12));
        if sum.len() != 32 || blake3::hash(body).as_bytes() != sum {
            return Err(TableError::Checksum);
        }
        let mut r = Reader {
            bytes: body,
            at: 12,
        };
        let (media_len, head_len) = (r.u64()?, r.u64()?);
        let head_hash: [u8; 32] = r.take(32)?.try_into().map_err(|_| TableError::Short)?;
        if head_len > media_len {
            return Err(TableError::Malformed("a head longer than the media"));
        }
        let tracks = r.u32()? as usize;
        let mut table = Table {
            media_len,
            head_len,
            head_hash,
            numbers: Vec::new(),
            frames: Vec::new(),
        };
        for _ in 0..tracks {
            table.numbers.push(r.u64()?);
            table.frames.push(r.frames(media_len)?);
        }
        if r.at != body.len() {
            return Err(TableError::Malformed("bytes after the last track"));
        }
        Ok(table)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], TableError> {
        let end = self.at.checked_add(n).ok_or(TableError::Short)?;
        let got = self.bytes.get(self.at..end).ok_or(TableError::Short)?;
        self.at = end;
        Ok(got)
    }

    fn u32(&mut self) -> Result<u32, TableError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self) -> Result<u64, TableError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }

    fn varint(&mut self) -> Result<u64, TableError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(TableError::Malformed("a varint of more than 64 bits"))
    }

    /// One track's frames, each within `media_len` bytes.
    fn frames(&mut self, media_len: u64) -> Result<Vec<Frame>, TableError> {
        let n = self.u64()?;
        // Never more than the bytes left could hold.
        if n > ((self.bytes.len() - self.at) / MIN_FRAME) as u64 {
            return Err(TableError::Short);
        }
        let mut frames = Vec::with_capacity(n as usize);
        let (mut time, mut offset) = (0i64, 0u64);
        for _ in 0..n {
            time = time.wrapping_add(unzigzag(self.varint()?));
            offset = offset.wrapping_add(unzigzag(self.varint()?) as u64);
            let size = u32::try_from(self.varint()?)
                .map_err(|_| TableError::Malformed("a frame over 4 GiB"))?;
            let flags = self.take(1)?[0];
            let lead = [self.take(1)?[0], self.take(1)?[0]];
            if offset
                .checked_add(u64::from(size))
                .is_none_or(|end| end > media_len)
                || size == 0
            {
                return Err(TableError::Malformed("a frame outside the media"));
            }
            if flags > 3 {
                return Err(TableError::Malformed("unknown frame flags"));
            }
            frames.push(Frame {
                time_ns: time,
                offset,
                size,
                key: flags & 1 != 0,
                laced: flags & 2 != 0,
                lead,
            });
        }
        Ok(frames)
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint(o: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        o.push((v as u8) | 0x80);
        v >>= 7;
    }
    o.push(v as u8);
}

/// The table of the media file `data`, as bytes; `None` when it is no
/// Matroska or WebM file, or one whose head does not hold its tracks.
pub fn of_media(data: &[u8]) -> Result<Option<Vec<u8>>, FormatError> {
    if !demux::looks_like_matroska(data) {
        return Ok(None);
    }
    let d = demux::demux(data, &mut |_| {})?;
    Ok(Table::of(data, &d).map(|t| t.to_bytes()))
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;

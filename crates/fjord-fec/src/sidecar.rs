//! The parity sidecar `NAME.fjfec`, written once at ingest beside the index.
//!
//! Serving sends a block's repair packets by reference (offset, length into
//! this file) without parsing anything but the tables; `verify` and `repair`
//! use the per-symbol hashes to find damaged packets.
//!
//! # Layout (version 3, little-endian)
//!
//! ```text
//! 0    magic "FJORDFEC"
//! 8    version u32 = 3
//! 12   track_count u32 (equal to the index's)
//! 16   media identity as in the index: size u64, mtime_ns i64,
//!      content_hash [32], sample_hash [32]
//! 96   index checksum [32] (the index file's last 32 bytes: blake3 of its body)
//! 128  meta_len u64: where the meta checksum starts
//! 136  data_off u64, data_len u64: the repair symbols, to the end of the file
//! 152  8 × 0
//! 160  track entries, 48 bytes each:
//!        packet_count u64, k u16, m u16, symbol_len u32 (E), block_count u64,
//!        blocks_off u64, hashes_off u64,
//!        repair_window_ns u64 (the longest time from a block's first source
//!        packet to its last; 0 in files written before it was recorded)
//! ...  per track a block table, 80 bytes per block:
//!        repair_off u64, symbol_len u32 (= the track's E), source_count u16,
//!        repair_count u16,
//!        source_hash [32], repair_hash [32]
//! ...  per track a symbol hash table, 16 bytes per packet
//! meta_len  blake3 of bytes [0, meta_len) [32]
//! data_off  repair symbols: per block repair_count × symbol_len bytes at repair_off
//! ```
//!
//! Block `b` of a track holds packets `b*k ..` (`source_count` of them: k,
//! the last block fewer). E is the track's symbol length (RFC 6865's
//! encoding symbol length, the same for every block). Symbol hash = first 16 bytes of blake3 of the
//! unpadded source symbol; source_hash = blake3 of the block's symbol hashes;
//! repair_hash = blake3 of the block's repair symbols.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use fjord_media::guard::{BeforeRead, Guarded};
use fjord_media::{Index, SourceId};

use crate::params::FecParams;
use crate::symbol::{MAX_SYMBOL_LEN, SYMBOL_HEADER_LEN};

pub const MAGIC: [u8; 8] = *b"FJORDFEC";
pub const VERSION: u32 = 3;
pub const HEADER_LEN: usize = 160;
pub const TRACK_ENTRY_LEN: usize = 48;
pub const BLOCK_ENTRY_LEN: usize = 80;
pub const SYMBOL_HASH_LEN: usize = 16;
pub const CHECKSUM_LEN: usize = 32;
/// Repair data starts on this boundary.
pub const DATA_ALIGN: u64 = 64;
const MAX_TRACKS: usize = 256;
/// How much [`Sidecar::verify`] hashes between calls of its pacer.
const VERIFY_PIECE: usize = 1 << 20;

/// Where the sidecar of `media` lives: next to it, `.fjfec` appended.
pub fn sidecar_path_for(media: &Path) -> PathBuf {
    let mut s = media.as_os_str().to_owned();
    s.push(".fjfec");
    PathBuf::from(s)
}

/// The index file's checksum (its last 32 bytes), which the sidecar records
/// to tie itself to that exact index.
pub fn index_checksum(index_path: &Path) -> std::io::Result<[u8; 32]> {
    use std::os::unix::fs::FileExt;
    let f = File::open(index_path)?;
    let len = f.metadata()?.len();
    let mut sum = [0u8; 32];
    let at = len.checked_sub(32).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "index file too short")
    })?;
    f.read_exact_at(&mut sum, at)?;
    Ok(sum)
}

/// Why a sidecar can't be used.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error("cannot read the parity sidecar: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a fjord parity sidecar (bad magic)")]
    Magic,
    #[error("parity sidecar version {found}, this fjord reads version {VERSION}")]
    Version { found: u32 },
    #[error("parity sidecar is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("parity sidecar does not belong to this media and index: {0}")]
    Mismatch(&'static str),
    /// A recording's parity made while it was written ([`crate::growing`]):
    /// no title's own, made again for the whole file.
    #[error("the parity sidecar is a growing recording's, made again for the whole file")]
    Growing,
}

/// One block's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockFec {
    /// Index of the block's first packet in its track.
    pub first_packet: u64,
    pub source_count: u16,
    pub repair_count: u16,
    /// E: bytes per symbol (source and repair), the track's.
    pub symbol_len: u32,
    /// File offset of the block's first repair symbol; symbol `j` is at
    /// `repair_off + j * symbol_len`.
    pub repair_off: u64,
    pub source_hash: [u8; 32],
    pub repair_hash: [u8; 32],
}

impl BlockFec {
    /// Packets of the track this block covers.
    pub fn packets(&self) -> Range<u64> {
        self.first_packet..self.first_packet + u64::from(self.source_count)
    }

    /// (file offset, length) of repair symbol `j`: what serving sends after
    /// the 8-byte repair header.
    pub fn repair_symbol_range(&self, j: u16) -> Option<(u64, usize)> {
        (j < self.repair_count).then(|| {
            (
                self.repair_off + u64::from(j) * u64::from(self.symbol_len),
                self.symbol_len as usize,
            )
        })
    }

    /// Bytes of all repair symbols of this block.
    pub fn repair_range(&self) -> Range<u64> {
        self.repair_off..self.repair_off + u64::from(self.repair_count) * u64::from(self.symbol_len)
    }
}

#[derive(Debug, Clone)]
struct TrackInfo {
    params: FecParams,
    symbol_len: u32,
    packet_count: u64,
    blocks: Range<usize>,
    hashes: Range<usize>,
    /// As recorded (0: not recorded, by fjord before it did).
    repair_window_ns: u64,
    /// Where the repair data starts: every block's symbols lie after it.
    data_off: u64,
}

/// A validated sidecar over any bytes (a mapped file, or a buffer when fuzzing).
#[derive(Debug)]
pub struct Sidecar<B: AsRef<[u8]>> {
    bytes: B,
    tracks: Vec<TrackInfo>,
}

/// One track's parity.
#[derive(Debug, Clone, Copy)]
pub struct TrackFec<'a> {
    info: &'a TrackInfo,
    bytes: &'a [u8],
}

fn corrupt(what: &'static str) -> SidecarError {
    SidecarError::Corrupt(what)
}

fn get<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], SidecarError> {
    at.checked_add(N)
        .and_then(|end| b.get(at..end))
        .and_then(|s| s.try_into().ok())
        .ok_or(corrupt("field beyond end of file"))
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, SidecarError> {
    get(b, at).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], at: usize) -> Result<u32, SidecarError> {
    get(b, at).map(u32::from_le_bytes)
}
/// Where the meta checksum lies in a sidecar whose first bytes are
/// `header` (at least [`HEADER_LEN`]): what a reader that fetches a sidecar
/// in parts needs besides the header to verify its tables.
pub fn meta_checksum_range(header: &[u8]) -> Result<Range<u64>, SidecarError> {
    let at = u64_at(header, 128)?;
    Ok(at..at.saturating_add(CHECKSUM_LEN as u64))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, SidecarError> {
    get(b, at).map(u64::from_le_bytes)
}

/// A table of `count` entries of `size` bytes at `off`, inside `[HEADER_LEN, limit)`.
fn table(off: u64, count: u64, size: usize, limit: usize) -> Result<Range<usize>, SidecarError> {
    let end = count
        .checked_mul(size as u64)
        .and_then(|n| n.checked_add(off))
        .filter(|&e| off >= HEADER_LEN as u64 && e <= limit as u64)
        .ok_or(corrupt("table out of bounds"))?;
    Ok(off as usize..end as usize)
}

fn block_at(b: &[u8], at: usize, first_packet: u64) -> Result<BlockFec, SidecarError> {
    Ok(BlockFec {
        first_packet,
        repair_off: u64_at(b, at)?,
        symbol_len: u32_at(b, at + 8)?,
        source_count: u16_at(b, at + 12)?,
        repair_count: u16_at(b, at + 14)?,
        source_hash: get(b, at + 16)?,
        repair_hash: get(b, at + 48)?,
    })
}

impl<B: AsRef<[u8]>> Sidecar<B> {
    /// Validates magic, version, the meta checksum and every table and block
    /// bound. Never panics and allocates only per track (at most 256).
    pub fn parse(bytes: B) -> Result<Sidecar<B>, SidecarError> {
        let sidecar = Sidecar::parse_unverified(bytes)?;
        sidecar.verify(&mut |_| Ok(()))?;
        Ok(sidecar)
    }

    /// [`Sidecar::parse`] reading the header and track entries only: the
    /// meta checksum is left to [`Sidecar::verify`], and each block entry
    /// is checked when it is read ([`TrackFec::block`]), so a title loads
    /// without reading its symbol hashes (16 bytes per packet).
    pub fn parse_unverified(bytes: B) -> Result<Sidecar<B>, SidecarError> {
        let b = bytes.as_ref();
        if get::<8>(b, 0)? != MAGIC {
            return Err(SidecarError::Magic);
        }
        let version = u32_at(b, 8)?;
        if version != VERSION {
            return Err(SidecarError::Version { found: version });
        }
        get::<HEADER_LEN>(b, 0)?;
        let meta_len = usize::try_from(u64_at(b, 128)?).map_err(|_| corrupt("meta length"))?;
        get::<CHECKSUM_LEN>(b, meta_len)?;
        let (data_off, data_len) = (u64_at(b, 136)?, u64_at(b, 144)?);
        if data_off < (meta_len + CHECKSUM_LEN) as u64
            || data_off.checked_add(data_len) != Some(b.len() as u64)
        {
            return Err(corrupt("repair data bounds"));
        }
        let track_count = u32_at(b, 12)? as usize;
        if track_count > MAX_TRACKS {
            return Err(corrupt("too many tracks"));
        }
        table(
            HEADER_LEN as u64,
            track_count as u64,
            TRACK_ENTRY_LEN,
            meta_len,
        )?;
        let mut tracks = Vec::with_capacity(track_count);
        for t in 0..track_count {
            let e = HEADER_LEN + t * TRACK_ENTRY_LEN;
            let packet_count = u64_at(b, e)?;
            let params = FecParams::new(u16_at(b, e + 8)?.into(), u16_at(b, e + 10)?.into())
                .map_err(|_| corrupt("invalid K:M"))?;
            let symbol_len = u32_at(b, e + 12)?;
            if !(SYMBOL_HEADER_LEN..=MAX_SYMBOL_LEN).contains(&(symbol_len as usize)) {
                return Err(corrupt("symbol length out of range"));
            }
            let block_count = u64_at(b, e + 16)?;
            if block_count != packet_count.div_ceil(u64::from(params.k)) {
                return Err(corrupt("block count does not match the packet count"));
            }
            tracks.push(TrackInfo {
                params,
                symbol_len,
                packet_count,
                blocks: table(u64_at(b, e + 24)?, block_count, BLOCK_ENTRY_LEN, meta_len)?,
                hashes: table(u64_at(b, e + 32)?, packet_count, SYMBOL_HASH_LEN, meta_len)?,
                repair_window_ns: u64_at(b, e + 40)?,
                data_off,
            });
        }
        Ok(Sidecar { bytes, tracks })
    }

    /// Checks what [`Sidecar::parse_unverified`] left: the meta checksum
    /// (block tables and symbol hashes) and every block entry. `before` is
    /// called with each piece of the meta before it is read.
    pub fn verify(&self, before: BeforeRead<'_>) -> Result<(), SidecarError> {
        if self.is_growing() {
            return Err(SidecarError::Growing);
        }
        let b = self.bytes.as_ref();
        let meta_len = usize::try_from(u64_at(b, 128)?).map_err(|_| corrupt("meta length"))?;
        let sum: [u8; CHECKSUM_LEN] = get(b, meta_len)?;
        let meta = b.get(..meta_len).ok_or(corrupt("meta length"))?;
        let mut hasher = blake3::Hasher::new();
        for piece in meta.chunks(VERIFY_PIECE) {
            before(piece)?;
            hasher.update(piece);
        }
        if hasher.finalize().as_bytes() != &sum {
            return Err(corrupt("checksum mismatch"));
        }
        for t in 0..self.tracks.len() {
            let track = self.track(t).ok_or(corrupt("track"))?;
            if (0..track.block_count()).any(|i| track.block(i).is_none()) {
                return Err(corrupt("block entry out of bounds"));
            }
        }
        Ok(())
    }

    /// Header and track entries.
    pub fn head(&self) -> &[u8] {
        let b = self.bytes.as_ref();
        &b[..(HEADER_LEN + TRACK_ENTRY_LEN * self.tracks.len()).min(b.len())]
    }

    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// What the sidecar is read from (the mapping, when opened from a file).
    pub fn storage(&self) -> &B {
        &self.bytes
    }

    /// Identity of the media file the parity was computed from.
    pub fn source(&self) -> SourceId {
        let b = self.bytes();
        SourceId {
            size: u64_at(b, 16).unwrap_or_default(),
            mtime_ns: u64_at(b, 24).unwrap_or_default() as i64,
            content_hash: get(b, 32).unwrap_or_default(),
            sample_hash: get(b, 64).unwrap_or_default(),
        }
    }

    /// Checksum of the index the parity was computed from.
    pub fn index_checksum(&self) -> [u8; 32] {
        get(self.bytes(), 96).unwrap_or_default()
    }

    pub fn track_count(&self) -> usize {
        self.tracks.len()
    }

    pub fn track(&self, t: usize) -> Option<TrackFec<'_>> {
        Some(TrackFec {
            info: self.tracks.get(t)?,
            bytes: self.bytes(),
        })
    }

    /// Refuses a sidecar made for another media file or another index.
    pub fn check_belongs(
        &self,
        index: &Index,
        index_checksum: &[u8; 32],
    ) -> Result<(), SidecarError> {
        if self.is_growing() {
            return Err(SidecarError::Growing);
        }
        if self.source() != index.source() {
            return Err(SidecarError::Mismatch(
                "it was made from a different media file (size, mtime or content hash differ)",
            ));
        }
        if &self.index_checksum() != index_checksum {
            return Err(SidecarError::Mismatch("it was made from a different index"));
        }
        let same_tracks = self.track_count() == index.track_count()
            && self
                .tracks
                .iter()
                .zip(index.tracks())
                .all(|(s, t)| s.packet_count == t.packet_count() as u64);
        if !same_tracks {
            return Err(SidecarError::Mismatch("its tracks differ from the index's"));
        }
        let same_layouts = self.tracks.iter().zip(index.tracks()).all(|(s, t)| {
            t.fec_layout().is_some_and(|l| {
                FecParams { k: l.k, m: l.m } == s.params && l.symbol_len == s.symbol_len
            })
        });
        if !same_layouts {
            return Err(SidecarError::Mismatch(
                "its block layout is not the one the index records",
            ));
        }
        Ok(())
    }
}

impl<B: AsRef<[u8]>> Sidecar<B> {
    /// Whether this is a growing recording's parity: it names no media
    /// (size 0) and no index (a zero checksum).
    pub fn is_growing(&self) -> bool {
        self.source().size == 0 && self.index_checksum() == [0; 32]
    }

    /// Checks that a growing recording's parity ([`crate::growing`]) fits
    /// its snapshot `index`: the same tracks, none with parity for more
    /// packets than the index has (not bound to one index: the snapshots
    /// share it).
    pub fn check_covers(&self, index: &Index) -> Result<(), SidecarError> {
        let covers = self.track_count() == index.track_count()
            && (self.tracks.iter().zip(index.tracks()))
                .all(|(s, t)| s.packet_count <= t.packet_count() as u64);
        covers
            .then_some(())
            .ok_or(SidecarError::Mismatch("its tracks differ from the index's"))
    }
}

/// Opens a sidecar file reading only its header and track entries (see
/// [`Sidecar::parse_unverified`]), also returning the open file.
pub fn open_unverified(path: &Path) -> Result<(File, Sidecar<Guarded>), SidecarError> {
    let file = File::open(path)?;
    // SAFETY: sidecars are only ever replaced by rename, never written in
    // place, so the mapped bytes do not change under us; one truncated by
    // someone else reads zeros and says so (`storage().damaged()`).
    let map = unsafe { Guarded::map_random(&file)? };
    Ok((file, Sidecar::parse_unverified(map)?))
}

/// Opens and validates a sidecar file (memory-mapped).
pub fn open(path: &Path) -> Result<Sidecar<Guarded>, SidecarError> {
    open_with_file(path).map(|(_, s)| s)
}

/// Like [`open`], also returning the open file: serving hands repair
/// symbols to the data paths that send from a file descriptor.
pub fn open_with_file(path: &Path) -> Result<(File, Sidecar<Guarded>), SidecarError> {
    let (file, sidecar) = open_unverified(path)?;
    sidecar.storage().read_around();
    sidecar.verify(&mut |_| Ok(()))?;
    Ok((file, sidecar))
}

impl<'a> TrackFec<'a> {
    pub fn params(&self) -> FecParams {
        self.info.params
    }

    pub fn packet_count(&self) -> u64 {
        self.info.packet_count
    }

    /// E: the length of every source and repair symbol of the track.
    pub fn symbol_len(&self) -> u32 {
        self.info.symbol_len
    }

    pub fn block_count(&self) -> u64 {
        (self.info.blocks.len() / BLOCK_ENTRY_LEN) as u64
    }

    /// Block `b`, or `None` when its entry is out of bounds or disagrees
    /// with the track's layout (checked here, not at parse: a title loads
    /// without reading every block entry).
    pub fn block(&self, b: u64) -> Option<BlockFec> {
        let at = usize::try_from(b).ok()?.checked_mul(BLOCK_ENTRY_LEN)?;
        let entry = self
            .bytes
            .get(self.info.blocks.clone())?
            .get(at..at + BLOCK_ENTRY_LEN)?;
        let k = self.info.params.k;
        let blk = block_at(entry, 0, b.checked_mul(u64::from(k))?).ok()?;
        let expected_k = self
            .info
            .packet_count
            .checked_sub(blk.first_packet)?
            .min(u64::from(k));
        let valid = u64::from(blk.source_count) == expected_k
            && blk.repair_count == self.info.params.m
            && blk.symbol_len == self.info.symbol_len
            && blk.repair_off >= self.info.data_off
            && blk
                .repair_off
                .checked_add(u64::from(blk.repair_count) * u64::from(blk.symbol_len))
                .is_some_and(|end| end <= self.bytes.len() as u64);
        valid.then_some(blk)
    }

    /// The longest time from a block's first source packet to its last
    /// (SDP `repair-window`), as recorded at encoding; `None` in sidecars
    /// written before fjord recorded it.
    pub fn repair_window_ns(&self) -> Option<u64> {
        (self.info.repair_window_ns > 0).then_some(self.info.repair_window_ns)
    }

    /// The block table's bytes (what serving reads besides the symbols).
    pub fn block_table(&self) -> &'a [u8] {
        self.bytes.get(self.info.blocks.clone()).unwrap_or_default()
    }

    /// The block that holds packet `i`.
    pub fn block_of(&self, packet: u64) -> Option<u64> {
        (packet < self.info.packet_count).then(|| packet / u64::from(self.info.params.k))
    }

    /// Stored hash of packet `i`'s source symbol.
    pub fn symbol_hash(&self, i: u64) -> Option<[u8; SYMBOL_HASH_LEN]> {
        let at = usize::try_from(i).ok()?.checked_mul(SYMBOL_HASH_LEN)?;
        let table = self.bytes.get(self.info.hashes.clone())?;
        table.get(at..at + SYMBOL_HASH_LEN)?.try_into().ok()
    }

    /// Repair symbols of block `blk`, all of them back to back.
    pub fn repair_data(&self, blk: &BlockFec) -> Option<&'a [u8]> {
        let r = blk.repair_range();
        self.bytes
            .get(usize::try_from(r.start).ok()?..usize::try_from(r.end).ok()?)
    }
}

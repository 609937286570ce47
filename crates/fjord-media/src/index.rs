//! The packetization index: everything serving needs, computed once by ingest.
//!
//! Serving mmaps this file and the media file and never parses media. The file
//! is written to a temporary name and renamed into place, so a crash never
//! leaves a half index; it is tied to the media file by size, mtime and hashes,
//! so a changed file is re-ingested, not mis-served (a server checks size and
//! mtime when it loads a title, the checksum, records and a content sample
//! afterwards: [`Index::open_unverified`], [`Index::verify`]).
//!
//! # Layout (version 4, little-endian, all tables 8-byte aligned)
//!
//! ```text
//! 0    magic "FJORDIDX"
//! 8    version u32 = 4 (4: an MPEG-TS key frame ends an RTP packet)
//! 12   track_count u32
//! 16   source size u64, mtime_ns i64, content_hash [32], sample_hash [32]
//! 96   duration_ns u64
//! 104  ts_per_rtp u8 (0: not MPEG-TS), timing u8 (0 PCR, 1 measured from
//!      PTS, 2 assumed, 3 sample timestamps), 6 × 0
//! 112  ts_packets, rtp_packets, resyncs, skipped_bytes, truncated_tail_bytes,
//!      pcr_count, bitrate_bps: 7 × u64
//! 168  warnings_off u64, warnings_len u64 (UTF-8, one warning per line)
//! 184  format_off u64, format_len u64 (UTF-8, e.g. "MP4 (H.264, AAC)")
//! 200  track entries, 64 bytes each:
//!        kind u8 (0 video, 1 audio, 2 data), payload_type u8, channels u8, 0,
//!        clock_rate u32, packets_off u64, packets_count u64,
//!        sync_off u64, sync_count u64, encoding_off u32, encoding_len u32,
//!        fmtp_off u32, fmtp_len u32,
//!        FEC block layout: k u16, m u16, symbol_len u32 (all 0: no parity)
//! ...  strings, packet tables, sync tables (offsets are from the file start)
//! end  blake3 of every preceding byte [32]
//! ```
//!
//! A packet record is 40 bytes: `send_time_ns u64, offset u48, flags u8,
//! prefix_len u8, len u32, rtp_ts u32, prefix [u8; 8], skip u32, len2 u32`
//! (see [`PacketRecord`]). A sync record is 16 bytes: `packet u32, 0 u32,
//! time_ns u64`.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::guard::{BeforeRead, Guarded};

use crate::durable;
use crate::plan::{
    BlockLayout, IngestReport, MAX_PREFIX, MediaPlan, PacketRecord, SyncPoint, TimingSource,
    TrackPlan,
};

pub const MAGIC: [u8; 8] = *b"FJORDIDX";
pub const VERSION: u32 = 4;
/// Bytes per packet record.
pub const PACKET_RECORD_LEN: usize = 40;
/// Bytes per sync record.
pub const SYNC_RECORD_LEN: usize = 16;

const HEADER_LEN: usize = 200;
const TRACK_ENTRY_LEN: usize = 64;
const TRAILER_LEN: usize = 32;
const MAX_TRACKS: usize = 256;
/// Media offsets are stored in 48 bits (256 TiB), the top bytes hold flags.
const OFFSET_MASK: u64 = (1 << 48) - 1;
const SAMPLE_EDGE: usize = 1 << 20;
const SAMPLE_BLOCK: usize = 4096;
const SAMPLE_BLOCKS: usize = 32;
/// How much [`Index::verify`] reads between calls of its pacer.
const VERIFY_PIECE: usize = 1 << 20;

/// When a title's files are checked whole (checksums, every record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// When they are opened: every byte is read before the title is used.
    Now,
    /// Later, by their `verify`: opening reads only what serving reads
    /// first, so a title loads in a few pages (a server verifies it after,
    /// as bulk work).
    Later,
}

/// Identity of the media file an index was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceId {
    pub size: u64,
    pub mtime_ns: i64,
    /// blake3 of the whole file.
    pub content_hash: [u8; 32],
    /// blake3 of the first and last MiB and 32 evenly spaced 4 KiB blocks:
    /// cheap enough to recheck at every open.
    pub sample_hash: [u8; 32],
}

impl SourceId {
    /// Identity of `data`, the contents of a file with this metadata. Hashes
    /// the whole file (multi-threaded).
    pub fn of(data: &[u8], meta: &std::fs::Metadata) -> SourceId {
        let mut hasher = blake3::Hasher::new();
        hasher.update_rayon(data);
        SourceId {
            size: data.len() as u64,
            mtime_ns: mtime_ns(meta),
            content_hash: *hasher.finalize().as_bytes(),
            sample_hash: sample_hash(data),
        }
    }

    /// Identity of an open file, read in chunks rather than mapped, so
    /// hashing a file of many GB keeps a few MiB resident; `progress` gets
    /// the bytes hashed so far.
    pub fn of_file(
        file: &File,
        meta: &std::fs::Metadata,
        progress: &dyn Fn(u64),
    ) -> io::Result<SourceId> {
        use std::os::unix::fs::FileExt;
        const CHUNK: usize = 16 << 20;
        let size = meta.len();
        let mut buf = vec![0u8; CHUNK];
        let mut hasher = blake3::Hasher::new();
        let mut at = 0u64;
        while at < size {
            let n = (size - at).min(CHUNK as u64) as usize;
            file.read_exact_at(&mut buf[..n], at)?;
            hasher.update_rayon(&buf[..n]);
            at += n as u64;
            progress(at);
        }
        let mut sample = blake3::Hasher::new();
        sample.update(&size.to_le_bytes());
        let mut failed = None;
        sample_pieces(size as usize, |range| {
            let piece = &mut buf[..range.len()];
            match file.read_exact_at(piece, range.start as u64) {
                Ok(()) => {
                    sample.update(piece);
                }
                Err(e) => failed = Some(e),
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(SourceId {
            size,
            mtime_ns: mtime_ns(meta),
            content_hash: *hasher.finalize().as_bytes(),
            sample_hash: *sample.finalize().as_bytes(),
        })
    }
}

/// Modification time in nanoseconds since the Unix epoch (0 if unknown).
pub fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    match meta.modified().map(|t| t.duration_since(UNIX_EPOCH)) {
        Ok(Ok(d)) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Ok(Err(e)) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
        Err(_) => 0,
    }
}

/// blake3 over the length, first and last MiB and 32 evenly spaced 4 KiB blocks.
pub fn sample_hash(data: &[u8]) -> [u8; 32] {
    sample_hash_read(data, &mut |_| Ok(())).unwrap_or_default()
}

/// [`sample_hash`], calling `before` with each piece before reading it.
fn sample_hash_read(data: &[u8], before: BeforeRead<'_>) -> io::Result<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    h.update(&(data.len() as u64).to_le_bytes());
    let mut result = Ok(());
    sample_pieces(data.len(), |range| {
        let piece = data.get(range).unwrap_or_default();
        // Nothing is read after a failed piece (its pages may fault).
        if result.is_ok() {
            result = before(piece);
            if result.is_ok() {
                h.update(piece);
            }
        }
    });
    result.map(|()| *h.finalize().as_bytes())
}

/// The byte ranges [`sample_hash`] hashes after the length, in order.
fn sample_pieces(len: usize, mut piece: impl FnMut(std::ops::Range<usize>)) {
    piece(0..SAMPLE_EDGE.min(len));
    piece(len.saturating_sub(SAMPLE_EDGE)..len);
    let last_start = len.saturating_sub(SAMPLE_BLOCK);
    for i in 0..SAMPLE_BLOCKS {
        let start = (last_start as u128 * i as u128 / (SAMPLE_BLOCKS - 1) as u128) as usize;
        piece(start..(start + SAMPLE_BLOCK).min(len));
    }
}

/// Where the index of `media` lives: next to it, `.fjidx` appended.
pub fn index_path_for(media: &Path) -> PathBuf {
    let mut s = media.as_os_str().to_owned();
    s.push(".fjidx");
    PathBuf::from(s)
}

/// Map a media file read-only for serving. Guarded: a file truncated
/// underneath reads zeros past its new end and the mapping says it is
/// [`damaged`](Guarded::damaged) (see [`crate::guard`]).
pub fn map_media(path: &Path) -> io::Result<Guarded> {
    let file = File::open(path)?;
    // SAFETY: the mapping is read-only; fjord never writes media files in
    // place, and a file truncated underneath is survived by the guard.
    unsafe { Guarded::map(&file) }
}

/// What a track carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackKind {
    Video,
    Audio,
    Data,
}

impl TrackKind {
    fn code(self) -> u8 {
        match self {
            TrackKind::Video => 0,
            TrackKind::Audio => 1,
            TrackKind::Data => 2,
        }
    }

    fn from_code(c: u8) -> Option<TrackKind> {
        Some(match c {
            0 => TrackKind::Video,
            1 => TrackKind::Audio,
            2 => TrackKind::Data,
            _ => return None,
        })
    }
}

/// Codec parameters of a track, for SDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackDesc {
    pub kind: TrackKind,
    pub payload_type: u8,
    pub clock_rate: u32,
    pub encoding: String,
    /// Audio channels for the SDP `rtpmap` (0: not given).
    pub channels: u8,
    /// `a=fmtp` parameters, without the payload type.
    pub fmtp: String,
}

impl TrackDesc {
    /// MPEG-TS over RTP (RFC 2250): static payload type 33, 90 kHz.
    pub fn mpeg_ts() -> TrackDesc {
        TrackDesc {
            kind: TrackKind::Video,
            payload_type: 33,
            clock_rate: 90_000,
            encoding: "MP2T".to_owned(),
            channels: 0,
            fmtp: String::new(),
        }
    }
}

/// Why an index can't be used (the caller usually just re-ingests).
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot read index: {0}")]
    Io(#[from] io::Error),
    #[error("not a fjord index (bad magic)")]
    Magic,
    #[error("index version {found}, this fjord reads version {VERSION}")]
    Version { found: u32 },
    #[error("index is corrupt: {0}")]
    Corrupt(&'static str),
}

/// Write the index of a title atomically (temp file, fsync, rename).
pub fn write(path: &Path, plan: &MediaPlan, src: &SourceId) -> io::Result<()> {
    let mut tmp = durable::temp_beside(path, ".fjidx.tmp")?;
    encode(plan, None, src, tmp.as_file_mut())?;
    // As readable as its media.
    durable::persist(tmp, path, 0o644)
}

/// The index of a growing file's snapshot: [`write`] not synced (it is
/// made again from the file, never taken after a restart: its source
/// identity names no version of the file). With `prev`, `plan` is what
/// follows `prev`'s plan (same tracks; sync points numbered from each
/// track's first packet in `prev`; the header's fields the whole's): each
/// track's packets and sync points are `prev`'s, copied as they are,
/// then `plan`'s.
pub fn write_snapshot(
    path: &Path,
    plan: &MediaPlan,
    prev: Option<&Index>,
    src: &SourceId,
) -> io::Result<()> {
    if prev.is_some_and(|p| p.track_count() != plan.tracks.len()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "index: the plan joined has other tracks",
        ));
    }
    let mut tmp = durable::temp_beside(path, ".fjidx.tmp")?;
    encode(plan, prev, src, tmp.as_file_mut())?;
    durable::replace(tmp, path, 0o644)
}

fn too_big(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("index: {what} too large"),
    )
}

/// Streams bytes to a file through a buffer, hashing them on the way, so
/// an index of millions of packets never sits in memory twice.
struct HashedOut<'a> {
    file: &'a mut File,
    buf: Vec<u8>,
    hasher: blake3::Hasher,
    written: usize,
}

impl HashedOut<'_> {
    const FLUSH: usize = 1 << 20;

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() >= Self::FLUSH {
            // A table copied whole (a joined index's): not through the buffer.
            self.flush()?;
            self.hasher.update(bytes);
            self.written += bytes.len();
            return self.file.write_all(bytes);
        }
        self.buf.extend_from_slice(bytes);
        self.written += bytes.len();
        if self.buf.len() >= Self::FLUSH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.hasher.update(&self.buf);
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Flushes and appends the checksum of everything written.
    fn finish(mut self) -> io::Result<()> {
        self.flush()?;
        self.file.write_all(self.hasher.finalize().as_bytes())
    }
}

/// The index of `p`, each track's tables after `prev`'s if given.
fn encode(p: &MediaPlan, prev: Option<&Index>, src: &SourceId, file: &mut File) -> io::Result<()> {
    let r = &p.report;
    if p.tracks.len() > MAX_TRACKS {
        return Err(too_big("track count"));
    }
    let warnings = r.warnings.join("\n");
    let mut head = Vec::with_capacity(HEADER_LEN + TRACK_ENTRY_LEN * p.tracks.len() + 4096);
    head.extend_from_slice(&MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    head.extend_from_slice(&(p.tracks.len() as u32).to_le_bytes());
    head.extend_from_slice(&src.size.to_le_bytes());
    head.extend_from_slice(&src.mtime_ns.to_le_bytes());
    head.extend_from_slice(&src.content_hash);
    head.extend_from_slice(&src.sample_hash);
    head.extend_from_slice(&p.duration_ns.to_le_bytes());
    let timing = match r.timing {
        TimingSource::Pcr => 0u8,
        TimingSource::MeasuredFromPts => 1,
        TimingSource::AssumedBitrate => 2,
        TimingSource::Timestamps => 3,
    };
    head.extend_from_slice(&[p.ts_per_rtp, timing, 0, 0, 0, 0, 0, 0]);
    for v in [
        r.ts_packets,
        r.rtp_packets,
        r.resyncs,
        r.skipped_bytes,
        r.truncated_tail_bytes,
        r.pcr_count,
        r.bitrate_bps,
    ] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    let entries_at = HEADER_LEN;
    let strings_at = entries_at + TRACK_ENTRY_LEN * p.tracks.len();
    let mut strings = Vec::new();
    let mut string = |s: &str| {
        let at = strings_at + strings.len();
        strings.extend_from_slice(s.as_bytes());
        (at, s.len())
    };
    let (warnings_off, warnings_len) = string(&warnings);
    let (format_off, format_len) = string(&r.format);
    let track_strings: Vec<_> = p
        .tracks
        .iter()
        .map(|t| (string(&t.desc.encoding), string(&t.desc.fmtp)))
        .collect();
    for v in [warnings_off, warnings_len, format_off, format_len] {
        head.extend_from_slice(&(v as u64).to_le_bytes());
    }
    debug_assert_eq!(head.len(), HEADER_LEN);
    // Tables follow the strings; record sizes are multiples of 8, so every
    // table stays 8-byte aligned.
    let mut table_at = (strings_at + strings.len()).next_multiple_of(8);
    let u32_of = |v: usize| u32::try_from(v).map_err(|_| too_big("string table"));
    let before = |i: usize| prev.and_then(|x| x.track(i));
    let counts = |i: usize, t: &TrackPlan| {
        let (p0, s0) = before(i).map_or((0, 0), |b| (b.packet_count(), b.sync_count()));
        (p0 + t.packets.len(), s0 + t.sync.len())
    };
    for (i, (track, (encoding, fmtp))) in p.tracks.iter().zip(track_strings).enumerate() {
        let (packets, syncs) = counts(i, track);
        let packets_off = table_at;
        let sync_off = packets_off + packets * PACKET_RECORD_LEN;
        table_at = sync_off + syncs * SYNC_RECORD_LEN;
        let d = &track.desc;
        let entry_start = head.len();
        head.extend_from_slice(&[d.kind.code(), d.payload_type, d.channels, 0]);
        head.extend_from_slice(&d.clock_rate.to_le_bytes());
        head.extend_from_slice(&(packets_off as u64).to_le_bytes());
        head.extend_from_slice(&(packets as u64).to_le_bytes());
        head.extend_from_slice(&(sync_off as u64).to_le_bytes());
        head.extend_from_slice(&(syncs as u64).to_le_bytes());
        for v in [encoding.0, encoding.1, fmtp.0, fmtp.1] {
            head.extend_from_slice(&u32_of(v)?.to_le_bytes());
        }
        let fec = track.fec.unwrap_or(BlockLayout {
            k: 0,
            m: 0,
            symbol_len: 0,
        });
        head.extend_from_slice(&fec.k.to_le_bytes());
        head.extend_from_slice(&fec.m.to_le_bytes());
        head.extend_from_slice(&fec.symbol_len.to_le_bytes());
        debug_assert_eq!(head.len(), entry_start + TRACK_ENTRY_LEN);
    }
    head.extend_from_slice(&strings);
    head.resize(head.len().next_multiple_of(8), 0);

    let mut out = HashedOut {
        file,
        buf: Vec::with_capacity(HashedOut::FLUSH + PACKET_RECORD_LEN),
        hasher: blake3::Hasher::new(),
        written: 0,
    };
    out.put(&head)?;
    for (i, track) in p.tracks.iter().enumerate() {
        let prev = before(i);
        if let Some(b) = &prev {
            out.put(b.records(0..b.packet_count()))?;
        }
        for rec in &track.packets {
            if rec.offset > OFFSET_MASK || rec.file_end() > OFFSET_MASK {
                return Err(too_big("media offset"));
            }
            let mut b = [0u8; PACKET_RECORD_LEN];
            b[..8].copy_from_slice(&rec.send_time_ns.to_le_bytes());
            b[8..16].copy_from_slice(&rec.offset.to_le_bytes());
            b[14] = rec.flags;
            b[15] = rec.prefix_len;
            b[16..20].copy_from_slice(&rec.len.to_le_bytes());
            b[20..24].copy_from_slice(&rec.rtp_ts.to_le_bytes());
            b[24..32].copy_from_slice(&rec.prefix);
            b[32..36].copy_from_slice(&rec.skip.to_le_bytes());
            b[36..40].copy_from_slice(&rec.len2.to_le_bytes());
            out.put(&b)?;
        }
        if let Some(b) = &prev {
            out.put(b.sync_table())?;
        }
        for s in &track.sync {
            let mut b = [0u8; SYNC_RECORD_LEN];
            b[..4].copy_from_slice(&s.packet.to_le_bytes());
            b[8..].copy_from_slice(&s.time_ns.to_le_bytes());
            out.put(&b)?;
        }
    }
    debug_assert_eq!(out.written, table_at);
    out.finish()
}

/// Validated location of one track's tables inside the index.
#[derive(Debug, Clone)]
struct TrackInfo {
    kind: TrackKind,
    payload_type: u8,
    channels: u8,
    clock_rate: u32,
    encoding: String,
    fmtp: String,
    packets: std::ops::Range<usize>,
    sync: std::ops::Range<usize>,
    fec: Option<BlockLayout>,
}

/// An open, validated index (memory-mapped).
#[derive(Debug)]
pub struct Index {
    map: Guarded,
    tracks: Vec<TrackInfo>,
}

/// Little-endian reads that fail instead of panicking.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], IndexError> {
        self.0
            .get(
                at..at
                    .checked_add(N)
                    .ok_or(IndexError::Corrupt("offset overflow"))?,
            )
            .and_then(|s| s.try_into().ok())
            .ok_or(IndexError::Corrupt("field beyond end of file"))
    }
    fn u8(&self, at: usize) -> Result<u8, IndexError> {
        Ok(self.bytes::<1>(at)?[0])
    }
    fn u16(&self, at: usize) -> Result<u16, IndexError> {
        self.bytes(at).map(u16::from_le_bytes)
    }
    fn u32(&self, at: usize) -> Result<u32, IndexError> {
        self.bytes(at).map(u32::from_le_bytes)
    }
    fn u64(&self, at: usize) -> Result<u64, IndexError> {
        self.bytes(at).map(u64::from_le_bytes)
    }
    /// A table of `count` records of `size` bytes at `off`, inside the body and aligned.
    fn table(
        &self,
        off: u64,
        count: u64,
        size: usize,
    ) -> Result<std::ops::Range<usize>, IndexError> {
        let body = self.0.len().saturating_sub(TRAILER_LEN) as u64;
        let end = count
            .checked_mul(size as u64)
            .and_then(|n| n.checked_add(off))
            .filter(|&e| e <= body && off.is_multiple_of(8))
            .ok_or(IndexError::Corrupt("table out of bounds"))?;
        Ok(off as usize..end as usize)
    }
    fn string(&self, off: u64, len: u64) -> Result<String, IndexError> {
        let body = self.0.len().saturating_sub(TRAILER_LEN) as u64;
        let end = off
            .checked_add(len)
            .filter(|&e| e <= body)
            .ok_or(IndexError::Corrupt("string out of bounds"))?;
        let bytes = self.0.get(off as usize..end as usize).unwrap_or_default();
        String::from_utf8(bytes.to_vec()).map_err(|_| IndexError::Corrupt("string not UTF-8"))
    }
}

impl Index {
    /// Open and validate an index: magic, version, checksum, every table bound
    /// and every packet record against the source size. Never panics on a
    /// corrupt file. Reads the whole index: see [`Index::open_unverified`].
    pub fn open(index_path: &Path) -> Result<Index, IndexError> {
        let index = Index::open_unverified(index_path)?;
        index.map.read_around();
        index.verify(&mut |_| Ok(()))?;
        Ok(index)
    }

    /// Open an index reading only what serving needs first: the header,
    /// track entries, strings, every table's bounds and the sync tables.
    /// The checksum and the packet records are left to [`Index::verify`],
    /// which a server runs later as bulk work, so loading a title costs a
    /// few pages, not the whole index (30 MB for a 1 GB title). Until then
    /// records are read as they are (every accessor is bounds-checked: a
    /// bad record sends wrong bytes or ends a session, never faults).
    pub fn open_unverified(index_path: &Path) -> Result<Index, IndexError> {
        let file = File::open(index_path)?;
        if file.metadata()?.len() < (HEADER_LEN + TRAILER_LEN) as u64 {
            return Err(IndexError::Corrupt("file too short"));
        }
        // SAFETY: index files are only ever replaced by rename, never written
        // in place, so the mapped bytes do not change under us; a file
        // truncated by someone else reads zeros and marks the map damaged.
        let map = unsafe { Guarded::map_random(&file)? };
        let tracks = validate_head(&map)?;
        Ok(Index { map, tracks })
    }

    /// Checks what [`Index::open_unverified`] left: the checksum, and every
    /// packet record against the media file's size. `before` is called with
    /// each piece of the file before it is read.
    pub fn verify(&self, before: BeforeRead<'_>) -> Result<(), IndexError> {
        let body_len = self.map.len().saturating_sub(TRAILER_LEN);
        let (body, trailer) = self.map.split_at(body_len);
        let mut hasher = blake3::Hasher::new();
        for piece in body.chunks(VERIFY_PIECE) {
            before(piece)?;
            hasher.update(piece);
        }
        if hasher.finalize().as_bytes() != trailer {
            return Err(IndexError::Corrupt("checksum mismatch"));
        }
        // Read again, piece by piece as before: under memory pressure the
        // first pieces may have left the page cache since.
        let source_size = self.source().size;
        let in_media = |p: PacketRecord| {
            usize::from(p.prefix_len) <= MAX_PREFIX
                && p.offset
                    .checked_add(u64::from(p.len) + u64::from(p.skip) + u64::from(p.len2))
                    .is_some_and(|end| end <= source_size)
        };
        let per_piece = VERIFY_PIECE / PACKET_RECORD_LEN;
        for track in self.tracks() {
            for first in (0..track.packet_count()).step_by(per_piece) {
                let end = (first + per_piece).min(track.packet_count());
                before(track.records(first..end))?;
                if !(first..end).all(|i| track.packet(i).is_some_and(in_media)) {
                    return Err(IndexError::Corrupt("packet record outside the media file"));
                }
            }
        }
        if self.damaged() {
            return Err(IndexError::Corrupt("the file shrank while it was read"));
        }
        Ok(())
    }

    /// Whether the index file shrank under this mapping and a vanished page
    /// was read (as zeros): records read from it must not be trusted.
    pub fn damaged(&self) -> bool {
        self.map.damaged()
    }

    fn reader(&self) -> Reader<'_> {
        Reader(&self.map)
    }

    fn u64_at(&self, at: usize) -> u64 {
        self.reader().u64(at).unwrap_or_default()
    }

    /// Identity of the media file this index describes.
    pub fn source(&self) -> SourceId {
        let r = self.reader();
        SourceId {
            size: self.u64_at(16),
            mtime_ns: self.u64_at(24) as i64,
            content_hash: r.bytes(32).unwrap_or_default(),
            sample_hash: r.bytes(64).unwrap_or_default(),
        }
    }

    /// Whether `media` has the size and mtime of the file this index was
    /// made from (one `stat`; [`Index::matches`] also samples its content).
    pub fn matches_metadata(&self, media: &Path) -> io::Result<bool> {
        let src = self.source();
        let meta = std::fs::metadata(media)?;
        Ok(meta.len() == src.size && mtime_ns(&meta) == src.mtime_ns)
    }

    /// Checks the mapped media against the sample hash this index records
    /// (for a title opened with `Check::Later`, whose file only matched by
    /// size and mtime). `before` is called with each piece before it is
    /// read.
    pub fn verify_media(&self, media: &[u8], before: BeforeRead<'_>) -> Result<(), IndexError> {
        if sample_hash_read(media, before)? != self.source().sample_hash {
            return Err(IndexError::Corrupt(
                "the media file's content differs from what was indexed",
            ));
        }
        Ok(())
    }

    /// Whether `media` is still the file this index was made from: same size,
    /// mtime and sample hash.
    pub fn matches(&self, media: &Path) -> io::Result<bool> {
        if !self.matches_metadata(media)? {
            return Ok(false);
        }
        let src = self.source();
        if src.size == 0 {
            return Ok(src.sample_hash == sample_hash(&[]));
        }
        let map = map_media(media)?;
        let same = map.len() as u64 == src.size && sample_hash(&map) == src.sample_hash;
        Ok(same && !map.damaged() && !self.damaged())
    }

    /// The index file's checksum (its last bytes: blake3 of the rest), which
    /// files derived from it record to prove they belong to it.
    pub fn checksum(&self) -> [u8; 32] {
        let at = self.map.len().saturating_sub(TRAILER_LEN);
        self.reader().bytes(at).unwrap_or_default()
    }

    pub fn duration_ns(&self) -> u64 {
        self.u64_at(96)
    }

    pub fn ts_per_rtp(&self) -> u8 {
        self.reader().u8(104).unwrap_or_default()
    }

    /// The ingest report as recorded in the index.
    pub fn report(&self) -> IngestReport {
        let r = self.reader();
        let warnings_off = self.u64_at(168);
        let warnings_len = self.u64_at(176);
        let warnings = r.string(warnings_off, warnings_len).unwrap_or_default();
        IngestReport {
            format: self.format(),
            ts_packets: self.u64_at(112),
            rtp_packets: self.u64_at(120),
            resyncs: self.u64_at(128),
            skipped_bytes: self.u64_at(136),
            truncated_tail_bytes: self.u64_at(144),
            pcr_count: self.u64_at(152),
            timing: match r.u8(105).unwrap_or_default() {
                0 => TimingSource::Pcr,
                1 => TimingSource::MeasuredFromPts,
                2 => TimingSource::AssumedBitrate,
                _ => TimingSource::Timestamps,
            },
            warnings: warnings
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            bitrate_bps: self.u64_at(160),
        }
    }

    /// Container and codecs, as ingest named them.
    pub fn format(&self) -> String {
        self.reader()
            .string(self.u64_at(184), self.u64_at(192))
            .unwrap_or_default()
    }

    pub fn track_count(&self) -> usize {
        self.tracks.len()
    }

    /// Why RTSP cannot play this title, when a track of it is served over
    /// HTTP only (AV1: [`crate::av1`]).
    pub fn not_over_rtp(&self) -> Option<&'static str> {
        self.tracks()
            .any(|t| t.encoding() == crate::av1::ENCODING)
            .then_some(crate::av1::NOT_OVER_RTP)
    }

    /// The whole index as mapped (the storage layer pins parts of it).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Where the first table starts: header, track entries and strings
    /// lie before it.
    pub fn head_len(&self) -> usize {
        self.tracks
            .iter()
            .map(|t| t.packets.start.min(t.sync.start))
            .min()
            .unwrap_or(self.map.len())
    }

    pub fn track(&self, i: usize) -> Option<Track<'_>> {
        let info = self.tracks.get(i)?;
        Some(Track {
            info,
            packets: self.map.get(info.packets.clone()).unwrap_or_default(),
            sync: self.map.get(info.sync.clone()).unwrap_or_default(),
        })
    }

    pub fn tracks(&self) -> impl Iterator<Item = Track<'_>> {
        (0..self.tracks.len()).filter_map(|i| self.track(i))
    }
}

/// The bytes of an index that [`Index::open_unverified`] reads, found from
/// its first bytes (the header and track entries, which `first` must hold:
/// else an error): for an index that is fetched in pieces (an edge's,
/// from its origin) to fetch those before it is opened. Bounds are not
/// checked here; opening checks them.
pub fn head_ranges(first: &[u8]) -> Result<Vec<std::ops::Range<u64>>, IndexError> {
    let r = Reader(first);
    let track_count = (r.u32(12)? as usize).min(MAX_TRACKS);
    let entries = HEADER_LEN + track_count * TRACK_ENTRY_LEN;
    if first.len() < entries {
        return Err(IndexError::Corrupt("track entries beyond the bytes given"));
    }
    let span = |off: u64, len: u64| off..off.saturating_add(len);
    let mut out = vec![0..entries as u64, span(r.u64(168)?, r.u64(176)?)];
    out.push(span(r.u64(184)?, r.u64(192)?));
    for t in 0..track_count {
        let e = HEADER_LEN + t * TRACK_ENTRY_LEN;
        out.push(span(r.u32(e + 40)?.into(), r.u32(e + 44)?.into()));
        out.push(span(r.u32(e + 48)?.into(), r.u32(e + 52)?.into()));
        let sync_len = r.u64(e + 32)?.saturating_mul(SYNC_RECORD_LEN as u64);
        out.push(span(r.u64(e + 24)?, sync_len));
    }
    Ok(out)
}

/// Everything but the checksum and the packet records (see
/// [`Index::verify`]): the header, track entries, strings, table bounds and
/// the sync tables, which serving reads first and which are small.
fn validate_head(bytes: &[u8]) -> Result<Vec<TrackInfo>, IndexError> {
    let r = Reader(bytes);
    if r.bytes::<8>(0)? != MAGIC {
        return Err(IndexError::Magic);
    }
    let version = r.u32(8)?;
    if version != VERSION {
        return Err(IndexError::Version { found: version });
    }
    bytes
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or(IndexError::Corrupt("file too short"))?;
    let track_count = r.u32(12)? as usize;
    if track_count > MAX_TRACKS {
        return Err(IndexError::Corrupt("too many tracks"));
    }
    r.string(r.u64(168)?, r.u64(176)?)?;
    r.string(r.u64(184)?, r.u64(192)?)?;
    let mut tracks = Vec::with_capacity(track_count);
    for t in 0..track_count {
        let e = HEADER_LEN + t * TRACK_ENTRY_LEN;
        let kind =
            TrackKind::from_code(r.u8(e)?).ok_or(IndexError::Corrupt("unknown track kind"))?;
        let packets = r.table(r.u64(e + 8)?, r.u64(e + 16)?, PACKET_RECORD_LEN)?;
        let sync = r.table(r.u64(e + 24)?, r.u64(e + 32)?, SYNC_RECORD_LEN)?;
        let info = TrackInfo {
            kind,
            payload_type: r.u8(e + 1)?,
            channels: r.u8(e + 2)?,
            clock_rate: r.u32(e + 4)?,
            encoding: r.string(r.u32(e + 40)?.into(), r.u32(e + 44)?.into())?,
            fmtp: r.string(r.u32(e + 48)?.into(), r.u32(e + 52)?.into())?,
            packets,
            sync,
            fec: block_layout(r.u16(e + 56)?, r.u16(e + 58)?, r.u32(e + 60)?)?,
        };
        let track = Track {
            info: &info,
            packets: bytes.get(info.packets.clone()).unwrap_or_default(),
            sync: bytes.get(info.sync.clone()).unwrap_or_default(),
        };
        let count = track.packet_count() as u64;
        if !track
            .sync_points()
            .all(|s| u64::from(s.packet) < count.max(1))
        {
            return Err(IndexError::Corrupt("sync point beyond the packet table"));
        }
        tracks.push(info);
    }
    Ok(tracks)
}

/// The recorded layout: all zero for none, else every field non-zero (the
/// parity code checks the rest against its own limits).
fn block_layout(k: u16, m: u16, symbol_len: u32) -> Result<Option<BlockLayout>, IndexError> {
    match (k, m, symbol_len) {
        (0, 0, 0) => Ok(None),
        _ if k == 0 || m == 0 || symbol_len == 0 => {
            Err(IndexError::Corrupt("partial FEC block layout"))
        }
        _ => Ok(Some(BlockLayout { k, m, symbol_len })),
    }
}

/// One track of an open index: cheap to copy, decodes records on demand.
#[derive(Debug, Clone, Copy)]
pub struct Track<'a> {
    info: &'a TrackInfo,
    packets: &'a [u8],
    sync: &'a [u8],
}

impl<'a> Track<'a> {
    pub fn kind(&self) -> TrackKind {
        self.info.kind
    }
    pub fn payload_type(&self) -> u8 {
        self.info.payload_type
    }
    pub fn clock_rate(&self) -> u32 {
        self.info.clock_rate
    }
    pub fn encoding(&self) -> &'a str {
        &self.info.encoding
    }
    pub fn channels(&self) -> u8 {
        self.info.channels
    }
    /// The track's SDP description.
    pub fn desc(&self) -> TrackDesc {
        TrackDesc {
            kind: self.info.kind,
            payload_type: self.info.payload_type,
            clock_rate: self.info.clock_rate,
            encoding: self.info.encoding.clone(),
            channels: self.info.channels,
            fmtp: self.info.fmtp.clone(),
        }
    }
    pub fn fmtp(&self) -> &'a str {
        &self.info.fmtp
    }
    /// The FEC block layout ingest chose (`None`: no parity).
    pub fn fec_layout(&self) -> Option<BlockLayout> {
        self.info.fec
    }

    pub fn packet_count(&self) -> usize {
        self.packets.len() / PACKET_RECORD_LEN
    }

    /// The bytes of records `range` (clipped to the table).
    pub fn records(&self, range: std::ops::Range<usize>) -> &'a [u8] {
        let end = range.end.min(self.packet_count()) * PACKET_RECORD_LEN;
        let start = (range.start * PACKET_RECORD_LEN).min(end);
        &self.packets[start..end]
    }

    /// The bytes of the sync table.
    pub fn sync_table(&self) -> &'a [u8] {
        self.sync
    }

    /// Packet record `i` (hot path: no allocation).
    #[inline]
    pub fn packet(&self, i: usize) -> Option<PacketRecord> {
        let at = i.checked_mul(PACKET_RECORD_LEN)?;
        let rec = self.packets.get(at..at.checked_add(PACKET_RECORD_LEN)?)?;
        let (time, rest) = rec.split_first_chunk::<8>()?;
        let (offset, rest) = rest.split_first_chunk::<8>()?;
        let (len, rest) = rest.split_first_chunk::<4>()?;
        let (rtp_ts, rest) = rest.split_first_chunk::<4>()?;
        let (prefix, rest) = rest.split_first_chunk::<MAX_PREFIX>()?;
        let (skip, rest) = rest.split_first_chunk::<4>()?;
        let (len2, _) = rest.split_first_chunk::<4>()?;
        Some(PacketRecord {
            send_time_ns: u64::from_le_bytes(*time),
            offset: u64::from_le_bytes(*offset) & OFFSET_MASK,
            flags: offset[6],
            prefix_len: offset[7],
            len: u32::from_le_bytes(*len),
            rtp_ts: u32::from_le_bytes(*rtp_ts),
            prefix: *prefix,
            skip: u32::from_le_bytes(*skip),
            len2: u32::from_le_bytes(*len2),
        })
    }

    pub fn sync_count(&self) -> usize {
        self.sync.len() / SYNC_RECORD_LEN
    }

    pub fn sync_point(&self, i: usize) -> Option<SyncPoint> {
        let at = i.checked_mul(SYNC_RECORD_LEN)?;
        let rec = self.sync.get(at..at.checked_add(SYNC_RECORD_LEN)?)?;
        let (packet, rest) = rec.split_first_chunk::<8>()?;
        let (time, _) = rest.split_first_chunk::<8>()?;
        Some(SyncPoint {
            packet: u32::from_le_bytes([packet[0], packet[1], packet[2], packet[3]]),
            time_ns: u64::from_le_bytes(*time),
        })
    }

    pub fn sync_points(&self) -> impl Iterator<Item = SyncPoint> + 'a {
        let this = *self;
        (0..self.sync_count()).filter_map(move |i| this.sync_point(i))
    }

    /// The last sync point at or before `time_ns`; the first one if `time_ns`
    /// is before all (and `{0, 0}` for a track without any).
    pub fn sync_before(&self, time_ns: u64) -> SyncPoint {
        let after = self.sync_partition_point(|t| t <= time_ns);
        self.sync_point(after.saturating_sub(1)).unwrap_or_default()
    }

    /// The index of the first sync point whose time `before` is false for
    /// (the sync table is sorted by time; the count when none).
    pub fn sync_partition_point(&self, before: impl Fn(u64) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.sync_count());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.sync_point(mid).is_some_and(|s| before(s.time_ns)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first packet sent at or after `time_ns` (the packet count if
    /// none): where a track without sync points joins a seek.
    /// `end` is about when the track ends (the title's duration): it
    /// guides the search, which reads a few records where a bisection reads
    /// many ([`crate::time_search`]). `before` is called with each record
    /// before it is read; a record it fails counts as past the end.
    pub fn first_sent_at_or_after(&self, time_ns: u64, end: u64, before: BeforeRead<'_>) -> u32 {
        crate::time_search::first_at_or_after(self.packet_count(), time_ns, end, |i| {
            before(self.records(i..i + 1)).ok()?;
            self.packet(i).map(|p| p.send_time_ns)
        }) as u32
    }
}

//! Prefabricated packets `NAME.fjpkt`: every RTP packet of a title, header
//! and payload back to back, written once at ingest (the seeds' network
//! level framing). A burst of consecutive packets is then one contiguous run
//! of this file, which a data path hands to the kernel as a single iovec
//! (one UDP GSO send, a few page references for `MSG_ZEROCOPY`) instead of
//! a [header, payload] pair per packet.
//!
//! The headers are fixed per title: each track has one SSRC, sequence
//! number base and timestamp offset, so packet `i` carries sequence number
//! `seq0 + i` for every session (RTP-Info tells a client where a PLAY
//! starts). The media file stays as it is, for downloads and parity; this
//! file costs about as much disk again.
//!
//! # Layout (version 1, little-endian)
//!
//! ```text
//! 0    magic "FJORDPKT"
//! 8    version u32 = 1
//! 12   track_count u32 (equal to the index's)
//! 16   index checksum [32] (the index file's last 32 bytes)
//! 48   file_len u64
//! 56   8 × 0
//! 64   track entries, 32 bytes each:
//!        ssrc u32, ts0 u32, seq0 u16, 2 × 0, packet_count u32,
//!        table_off u64, 8 × 0
//! ...  per track an offset table of packet_count + 1 u64: where packet i
//!      starts in this file; the last entry is where the track's packets end
//! ...  the packets: RTP header, payload-header bytes, file runs
//! ```

use std::{
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use crate::{
    durable,
    guard::{BeforeRead, Guarded},
    index::{Index, Track, index_path_for, map_media},
    plan::PacketRecord,
};
use fjord_proto::rtp::{RTP_HEADER_LEN, write_header};

pub const MAGIC: [u8; 8] = *b"FJORDPKT";
pub const VERSION: u32 = 1;
const HEADER_LEN: usize = 64;
const TRACK_ENTRY_LEN: usize = 32;
/// Offset-table entries [`Prefab::verify`] hands its `before` at a time
/// (a MiB).
const PIECE_ENTRIES: usize = 1 << 17;

/// Where the prefabricated packets of `media` live: next to it, `.fjpkt`
/// appended.
pub fn prefab_path_for(media: &Path) -> PathBuf {
    let mut s = media.as_os_str().to_owned();
    s.push(".fjpkt");
    PathBuf::from(s)
}

/// Why a packet file can't be used.
#[derive(Debug, thiserror::Error)]
pub enum PrefabError {
    #[error("cannot read the packet file: {0}")]
    Io(#[from] io::Error),
    #[error("not a fjord packet file")]
    Magic,
    #[error("packet file version {found}, this fjord reads {VERSION}; run `fjord ingest` again")]
    Version { found: u32 },
    #[error("packet file corrupt: {0}; run `fjord ingest` again")]
    Corrupt(&'static str),
    #[error("the packet file was made for another index of this media; run `fjord ingest` again")]
    OtherIndex,
    #[error(
        "the media file or its index shrank while the packets were written; run `fjord ingest` again"
    )]
    Changed,
}

/// The fixed RTP header fields of a track's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub ssrc: u32,
    pub seq0: u16,
    pub ts0: u32,
}

impl Ids {
    /// Unpredictable to anyone without the index, and the same when the same
    /// index is prefabricated again: derived from its checksum (which covers
    /// the media's content hash).
    fn derive(index_checksum: &[u8; 32], track: usize) -> Ids {
        let mut h = blake3::Hasher::new_derive_key("fjord prefabricated RTP header ids");
        h.update(index_checksum);
        h.update(&(track as u64).to_le_bytes());
        let b = *h.finalize().as_bytes();
        Ids {
            ssrc: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            ts0: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            seq0: u16::from_le_bytes([b[8], b[9]]),
        }
    }
}

/// The RTP header of packet `i` of a track: the bytes every session sends.
pub fn rtp_header(ids: Ids, pt: u8, i: usize, rec: &PacketRecord) -> [u8; RTP_HEADER_LEN] {
    let mut h = [0u8; RTP_HEADER_LEN];
    let seq = ids.seq0.wrapping_add(i as u16);
    let ts = ids.ts0.wrapping_add(rec.rtp_ts);
    write_header(&mut h, pt, rec.marker(), seq, ts, ids.ssrc);
    h
}

fn wire_len(rec: &PacketRecord) -> u64 {
    (RTP_HEADER_LEN + rec.payload_len()) as u64
}

/// Writes `MEDIA.fjpkt` from the index beside `media` (temporary file,
/// fsync, rename); returns its length. `progress` gets (bytes, total).
pub fn prefabricate(media: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, PrefabError> {
    let index_path = index_path_for(media);
    let index = Index::open(&index_path).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", index_path.display()),
        )
    })?;
    let data = map_media(media)?;
    write(&prefab_path_for(media), &index, &data, progress)
}

/// Removes the packet file of `media`, if any (a title ingested without one).
pub fn remove(media: &Path) -> io::Result<()> {
    match std::fs::remove_file(prefab_path_for(media)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes the packet file of `index` and its media bytes `media` to `path`.
pub fn write(
    path: &Path,
    index: &Index,
    media: &Guarded,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, PrefabError> {
    let checksum = index.checksum();
    let tracks: Vec<Track<'_>> = index.tracks().collect();
    let ids: Vec<Ids> = (0..tracks.len())
        .map(|t| Ids::derive(&checksum, t))
        .collect();
    let tables_len: u64 = tracks
        .iter()
        .map(|t| 8 * (t.packet_count() as u64 + 1))
        .sum();
    let mut at = (HEADER_LEN + TRACK_ENTRY_LEN * tracks.len()) as u64 + tables_len;
    let data_start = at;
    let mut meta = Vec::with_capacity(at as usize);
    meta.extend_from_slice(&MAGIC);
    meta.extend_from_slice(&VERSION.to_le_bytes());
    meta.extend_from_slice(&(tracks.len() as u32).to_le_bytes());
    meta.extend_from_slice(&checksum);
    let file_len_at = meta.len();
    meta.extend_from_slice(&[0; 16]);
    let mut table_off = (HEADER_LEN + TRACK_ENTRY_LEN * tracks.len()) as u64;
    for (track, ids) in tracks.iter().zip(&ids) {
        meta.extend_from_slice(&ids.ssrc.to_le_bytes());
        meta.extend_from_slice(&ids.ts0.to_le_bytes());
        meta.extend_from_slice(&ids.seq0.to_le_bytes());
        meta.extend_from_slice(&[0; 2]);
        meta.extend_from_slice(&(track.packet_count() as u32).to_le_bytes());
        meta.extend_from_slice(&table_off.to_le_bytes());
        meta.extend_from_slice(&[0; 8]);
        table_off += 8 * (track.packet_count() as u64 + 1);
    }
    for track in &tracks {
        for i in 0..track.packet_count() {
            meta.extend_from_slice(&at.to_le_bytes());
            at += track.packet(i).map_or(0, |r| wire_len(&r));
        }
        meta.extend_from_slice(&at.to_le_bytes());
    }
    let file_len = at;
    meta[file_len_at..file_len_at + 8].copy_from_slice(&file_len.to_le_bytes());

    let tmp = durable::temp_beside(path, ".fjpkt.tmp")?;
    let mut out = BufWriter::with_capacity(1 << 20, durable::WriteBehind::new(tmp.as_file()));
    out.write_all(&meta)?;
    let total = file_len - data_start;
    let mut done = 0u64;
    let mut reported = 0u64;
    for (track, &ids) in tracks.iter().zip(&ids) {
        let pt = track.payload_type();
        for i in 0..track.packet_count() {
            let Some(rec) = track.packet(i) else { break };
            let (run1, run2) = rec
                .runs(media)
                .ok_or(PrefabError::Corrupt("the index points past the media file"))?;
            out.write_all(&rtp_header(ids, pt, i, &rec))?;
            out.write_all(rec.prefix())?;
            out.write_all(run1)?;
            out.write_all(run2)?;
            done += wire_len(&rec);
            if done - reported >= 64 << 20 {
                reported = done;
                // Pages of the mapping count in this process once read; drop
                // them (they stay in the page cache) to bound memory.
                // SAFETY: read-only file-backed mapping; after DONTNEED its
                // pages read the file again.
                let _ = unsafe {
                    media
                        .mmap()
                        .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
                };
                progress(done, total);
            }
        }
    }
    out.flush()?;
    drop(out);
    // Zeros read from a file truncated meanwhile must not become packets.
    if media.damaged() || index.damaged() {
        return Err(PrefabError::Changed);
    }
    // As readable as the index beside it.
    durable::persist(tmp, path, 0o644)?;
    progress(total, total);
    Ok(file_len)
}

/// An open packet file, checked against its index.
#[derive(Debug)]
pub struct Prefab<B: AsRef<[u8]>> {
    bytes: B,
    tracks: Vec<TrackEntry>,
}

#[derive(Debug, Clone, Copy)]
struct TrackEntry {
    ids: Ids,
    count: usize,
    table: usize,
}

/// The prefabricated packets of one track.
#[derive(Debug, Clone, Copy)]
pub struct PrefabTrack<'a> {
    pub ids: Ids,
    /// `count + 1` little-endian u64 offsets.
    table: &'a [u8],
    bytes: &'a [u8],
}

impl<'a> PrefabTrack<'a> {
    /// Packet `i` (header and payload) and its offset in the file, by
    /// reference (hot path: no allocation).
    #[inline]
    pub fn packet(&self, i: usize) -> Option<(u64, &'a [u8])> {
        let at = i.checked_mul(8)?;
        let (start, rest) = self.table.get(at..)?.split_first_chunk::<8>()?;
        let (end, _) = rest.split_first_chunk::<8>()?;
        let (start, end) = (u64::from_le_bytes(*start), u64::from_le_bytes(*end));
        // An unverified table may say anything: no packet is longer than an
        // interleaved frame (or a UDP datagram) can carry.
        if end.checked_sub(start)? > u64::from(u16::MAX) {
            return None;
        }
        let bytes = self
            .bytes
            .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)?;
        Some((start, bytes))
    }

    /// Where the track's offset table starts in the file (entry `i`, a
    /// little-endian u64, at `table_offset() + 8 * i`): for readers that
    /// read it with `pread` rather than through the mapping.
    pub fn table_offset(&self) -> u64 {
        (self.table.as_ptr() as usize - self.bytes.as_ptr() as usize) as u64
    }

    /// The offset-table entries of packets `range` (clipped to the table),
    /// found without reading them: a reader fetches them before it asks
    /// [`PrefabTrack::spans`], which reads them.
    pub fn entries(&self, range: std::ops::Range<usize>) -> &'a [u8] {
        let end = range
            .end
            .saturating_add(1)
            .saturating_mul(8)
            .min(self.table.len());
        let start = range.start.saturating_mul(8).min(end);
        &self.table[start..end]
    }

    /// The offset-table entries of packets `range` and the packets' own
    /// bytes: what sending them reads.
    pub fn spans(&self, range: std::ops::Range<usize>) -> Option<(&'a [u8], &'a [u8])> {
        let table = self.table.get(range.start * 8..(range.end + 1) * 8)?;
        let (first, _) = self.packet(range.start)?;
        let (last, bytes) = self.packet(range.end.checked_sub(1)?)?;
        let end = usize::try_from(last).ok()? + bytes.len();
        Some((table, self.bytes.get(usize::try_from(first).ok()?..end)?))
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(*b.get(at..)?.first_chunk()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(*b.get(at..)?.first_chunk()?))
}

impl<B: AsRef<[u8]>> Prefab<B> {
    /// Checks `bytes` as the packet file of `index`: magic, version, the
    /// index's checksum, and every packet's length against its record (so a
    /// burst's bytes are exactly its packets). Never panics on corrupt input.
    pub fn parse(bytes: B, index: &Index) -> Result<Prefab<B>, PrefabError> {
        let prefab = Prefab::parse_unverified(bytes, index)?;
        prefab.verify(index, &mut |_| Ok(()))?;
        Ok(prefab)
    }

    /// [`Prefab::parse`] without the walk over every offset and record,
    /// left to [`Prefab::verify`]: reads the header and track entries only.
    /// Until verified, packets are read as the table says (bounds-checked).
    pub fn parse_unverified(bytes: B, index: &Index) -> Result<Prefab<B>, PrefabError> {
        let b = bytes.as_ref();
        let corrupt = PrefabError::Corrupt;
        if b.len() < HEADER_LEN {
            return Err(if b.starts_with(&MAGIC) || b.len() < 8 {
                corrupt("file too short")
            } else {
                PrefabError::Magic
            });
        }
        if b[..8] != MAGIC {
            return Err(PrefabError::Magic);
        }
        let version = u32_at(b, 8).ok_or(corrupt("header"))?;
        if version != VERSION {
            return Err(PrefabError::Version { found: version });
        }
        if b[16..48] != index.checksum() {
            return Err(PrefabError::OtherIndex);
        }
        if u64_at(b, 48) != Some(b.len() as u64) {
            return Err(corrupt("length differs from the header's"));
        }
        let count = u32_at(b, 12).ok_or(corrupt("header"))? as usize;
        if count != index.track_count() {
            return Err(PrefabError::OtherIndex);
        }
        let mut tracks = Vec::with_capacity(count);
        for (t, track) in index.tracks().enumerate() {
            let e = HEADER_LEN + t * TRACK_ENTRY_LEN;
            let field = |at| u32_at(b, e + at).ok_or(corrupt("track entry beyond end of file"));
            let ids = Ids {
                ssrc: field(0)?,
                ts0: field(4)?,
                seq0: field(8)? as u16,
            };
            let packets = field(12)? as usize;
            if packets != track.packet_count() {
                return Err(corrupt("packet count differs from the index's"));
            }
            let table = u64_at(b, e + 16).ok_or(corrupt("track entry beyond end of file"))?;
            (packets as u64 + 1)
                .checked_mul(8)
                .and_then(|n| n.checked_add(table))
                .filter(|&end| end <= b.len() as u64)
                .ok_or(corrupt("offset table out of bounds"))?;
            tracks.push(TrackEntry {
                ids,
                count: packets,
                table: table as usize,
            });
        }
        Ok(Prefab { bytes, tracks })
    }

    /// Checks every packet's length against its record in `index`, and
    /// that the packets lie after the tables and inside the file. `before`
    /// is called with each piece of the offset tables, and with the index
    /// records it is checked against, before they are read.
    pub fn verify(&self, index: &Index, before: BeforeRead<'_>) -> Result<(), PrefabError> {
        let b = self.bytes.as_ref();
        let corrupt = PrefabError::Corrupt;
        for (entry, track) in self.tracks.iter().zip(index.tracks()) {
            let table_end = (entry.table + 8 * (entry.count + 1)) as u64;
            let mut at = u64_at(b, entry.table).ok_or(corrupt("offset table out of bounds"))?;
            if at < table_end {
                return Err(corrupt("packets overlap the tables"));
            }
            for i in 0..entry.count {
                if i % PIECE_ENTRIES == 0 {
                    let end = (i + PIECE_ENTRIES).min(entry.count);
                    let offsets = entry.table + 8 * i..entry.table + 8 * (end + 1);
                    before(b.get(offsets).unwrap_or_default())?;
                    before(track.records(i..end))?;
                }
                let rec = track.packet(i).ok_or(corrupt("index record"))?;
                let next = u64_at(b, entry.table + 8 * (i + 1)).ok_or(corrupt("offset table"))?;
                if next.checked_sub(at) != Some(wire_len(&rec)) {
                    return Err(corrupt("a packet's length differs from its record"));
                }
                at = next;
            }
            if at > b.len() as u64 {
                return Err(corrupt("packets beyond end of file"));
            }
        }
        Ok(())
    }

    /// Packets (track, index) whose bytes differ from what `index` and its
    /// media bytes `media` make: the file was damaged after it was written.
    pub fn damaged(&self, index: &Index, media: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (t, track) in index.tracks().enumerate() {
            let Some(p) = self.track(t) else { continue };
            let pt = track.payload_type();
            for i in 0..track.packet_count() {
                let same = track
                    .packet(i)
                    .zip(p.packet(i))
                    .is_some_and(|(rec, (_, got))| {
                        let (head, rest) = got.split_at(RTP_HEADER_LEN.min(got.len()));
                        let (prefix, rest) = rest.split_at(rec.prefix().len().min(rest.len()));
                        let (got1, got2) = rest.split_at((rec.len as usize).min(rest.len()));
                        head == rtp_header(p.ids, pt, i, &rec)
                            && prefix == rec.prefix()
                            && rec.runs(media) == Some((got1, got2))
                    });
                if !same {
                    out.push((t, i));
                }
            }
        }
        out
    }

    /// The whole file as mapped.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// Header and track entries.
    pub fn head(&self) -> &[u8] {
        let b = self.bytes.as_ref();
        &b[..(HEADER_LEN + TRACK_ENTRY_LEN * self.tracks.len()).min(b.len())]
    }

    /// What the packets are read from (the mapping, when opened from a file).
    pub fn storage(&self) -> &B {
        &self.bytes
    }

    pub fn track(&self, t: usize) -> Option<PrefabTrack<'_>> {
        let e = self.tracks.get(t)?;
        let b = self.bytes.as_ref();
        Some(PrefabTrack {
            ids: e.ids,
            table: b.get(e.table..e.table + 8 * (e.count + 1))?,
            bytes: b,
        })
    }
}

/// Opens and checks the packet file at `path` against `index`; the file
/// stays open for the data paths that read or sendfile.
pub fn open(path: &Path, index: &Index) -> Result<(File, Prefab<Guarded>), PrefabError> {
    let (file, prefab) = open_unverified(path, index)?;
    prefab.storage().read_around();
    prefab.verify(index, &mut |_| Ok(()))?;
    Ok((file, prefab))
}

/// [`open`] reading only the header and track entries (see
/// [`Prefab::parse_unverified`]).
pub fn open_unverified(path: &Path, index: &Index) -> Result<(File, Prefab<Guarded>), PrefabError> {
    let file = File::open(path)?;
    // SAFETY: packet files are only ever replaced by rename, never written
    // in place, so the mapped bytes do not change under us; one truncated by
    // someone else reads zeros and says so (`storage().damaged()`).
    let map = unsafe { Guarded::map_random(&file)? };
    Ok((file, Prefab::parse_unverified(map, index)?))
}

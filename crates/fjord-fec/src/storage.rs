//! Stored-media integrity: `verify` finds damaged packets with the symbol
//! hashes written at ingest, `repair` rebuilds them from the parity.

use std::fmt;
use std::fs::FileTimes;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fjord_media::durable;
use fjord_media::guard::Guarded;
use fjord_media::index::{index_path_for, map_media};
use fjord_media::{Index, Track};
use memmap2::Mmap;

use crate::FecError;
use crate::encode::{meta_of, payload_parts, record, source_hash};
use crate::rs::Codec;
use crate::sidecar::{self, BlockFec, Sidecar, TrackFec};
use crate::symbol::{self, SYMBOL_HEADER_LEN};

/// A block with damaged packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedBlock {
    pub track: usize,
    pub block: u64,
    /// Packets of the track the block covers.
    pub packets: Range<u64>,
    /// Damaged packets (track packet indexes).
    pub damaged: Vec<u64>,
    /// Their bytes in the media file, merged and sorted.
    pub ranges: Vec<Range<u64>>,
    /// Repair symbols available for the block (M).
    pub repair_count: u16,
    /// The block's repair data in the sidecar is intact.
    pub parity_ok: bool,
}

impl DamagedBlock {
    pub fn repairable(&self) -> bool {
        self.parity_ok && self.damaged.len() <= usize::from(self.repair_count)
    }
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub media_size: u64,
    /// Size recorded at ingest; when it differs nothing else is checked.
    pub expected_size: u64,
    pub blocks_checked: u64,
    pub damaged: Vec<DamagedBlock>,
    /// (track, block) whose repair data in the sidecar is damaged.
    pub parity_damaged: Vec<(usize, u64)>,
    /// The file differs from the ingested one outside every packet: bytes
    /// that are never served and that the parity does not cover.
    pub outside_packets: bool,
    pub packet_file: PacketFile,
}

/// The title's prefabricated packets (`NAME.fjpkt`), checked against the
/// media when the media is intact; derived data, so `repair` rewrites them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PacketFile {
    /// None, or not checked (the media is damaged: repair rewrites them).
    #[default]
    Unchecked,
    Intact,
    /// This many packets differ from the media's.
    Damaged(usize),
    /// It does not open against the index (why).
    Unusable(String),
}

impl PacketFile {
    fn is_fine(&self) -> bool {
        matches!(self, PacketFile::Unchecked | PacketFile::Intact)
    }
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.media_size == self.expected_size
            && self.damaged.is_empty()
            && self.parity_damaged.is_empty()
            && !self.outside_packets
            && self.packet_file.is_fine()
    }

    /// Why `repair` cannot restore the file, if it cannot.
    pub fn beyond_repair(&self) -> Option<String> {
        if self.media_size != self.expected_size {
            return Some(format!(
                "the file is {} bytes but was {} at ingest; the parity cannot restore a truncated or extended file: restore it from a backup",
                self.media_size, self.expected_size
            ));
        }
        let hopeless: Vec<String> = self
            .damaged
            .iter()
            .filter(|d| !d.repairable())
            .map(|d| {
                if d.parity_ok {
                    format!(
                        "track {} block {}: {} damaged packets, the parity repairs at most {}",
                        d.track,
                        d.block,
                        d.damaged.len(),
                        d.repair_count
                    )
                } else {
                    format!(
                        "track {} block {}: its parity is damaged too",
                        d.track, d.block
                    )
                }
            })
            .collect();
        if !hopeless.is_empty() {
            return Some(format!(
                "{}; restore the file from a backup",
                hopeless.join("; ")
            ));
        }
        if self.outside_packets {
            return Some(
                "bytes outside every packet differ from the ingested file; they are never served and the parity does not cover them: restore the file from a backup or re-ingest it".into(),
            );
        }
        None
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.media_size != self.expected_size {
            return writeln!(
                f,
                "size changed: {} bytes, {} at ingest",
                self.media_size, self.expected_size
            );
        }
        for d in &self.damaged {
            let ranges: Vec<String> = d
                .ranges
                .iter()
                .map(|r| format!("{}..{}", r.start, r.end))
                .collect();
            writeln!(
                f,
                "damaged: track {} block {} (packets {}..{}): {} of {} packets, bytes {}; {}",
                d.track,
                d.block,
                d.packets.start,
                d.packets.end,
                d.damaged.len(),
                d.packets.end - d.packets.start,
                ranges.join(", "),
                if d.repairable() {
                    "repairable".to_owned()
                } else if d.parity_ok {
                    format!("beyond repair (at most {})", d.repair_count)
                } else {
                    "beyond repair (parity damaged)".to_owned()
                }
            )?;
        }
        for (t, b) in &self.parity_damaged {
            writeln!(f, "damaged parity: track {t} block {b} (in the sidecar)")?;
        }
        match &self.packet_file {
            PacketFile::Damaged(n) => writeln!(
                f,
                "damaged: {n} prefabricated packets (in the packet file; repair rewrites it from the media)"
            )?,
            PacketFile::Unusable(why) => writeln!(f, "unusable packet file: {why}")?,
            PacketFile::Unchecked | PacketFile::Intact => {}
        }
        if self.outside_packets {
            writeln!(
                f,
                "damaged: bytes outside every packet (not covered by the parity)"
            )?;
        }
        Ok(())
    }
}

/// Index, sidecar and media of a title, checked to belong together.
struct Title {
    index: Index,
    sidecar: Sidecar<Guarded>,
    media: Guarded,
}

impl Title {
    /// An error when one of the files shrank while it was read (its pages
    /// past the new end read as zeros): nothing read may be trusted then.
    fn unchanged(&self, media_path: &Path) -> Result<(), FecError> {
        if self.index.damaged() || self.sidecar.storage().damaged() || self.media.damaged() {
            return Err(FecError::Invalid(format!(
                "{}, its index or its parity sidecar shrank while being read; run again once nothing writes them",
                media_path.display()
            )));
        }
        Ok(())
    }
}

fn load(media_path: &Path, sidecar_path: &Path) -> Result<Title, FecError> {
    let index_path = index_path_for(media_path);
    let index = Index::open(&index_path).map_err(|source| FecError::Index {
        path: index_path.clone(),
        source,
    })?;
    let sidecar_path = sidecar_path.to_owned();
    let sidecar = sidecar::open(&sidecar_path).map_err(|source| FecError::Sidecar {
        path: sidecar_path.clone(),
        source,
    })?;
    let checksum = sidecar::index_checksum(&index_path).map_err(|source| FecError::Io {
        what: format!("read {}", index_path.display()),
        source,
    })?;
    sidecar
        .check_belongs(&index, &checksum)
        .map_err(|source| FecError::Sidecar {
            path: sidecar_path,
            source,
        })?;
    let media = map_media(media_path).map_err(|source| FecError::Io {
        what: format!("read {}", media_path.display()),
        source,
    })?;
    Ok(Title {
        index,
        sidecar,
        media,
    })
}

/// Checks `media_path` against its index and parity sidecar.
pub fn verify(media_path: &Path) -> Result<Report, FecError> {
    verify_with(media_path, &sidecar::sidecar_path_for(media_path))
}

/// [`verify`] with the parity at `sidecar_path` (a server with a pool of
/// disks keeps a title's parity on another disk than its media).
pub fn verify_with(media_path: &Path, sidecar_path: &Path) -> Result<Report, FecError> {
    let title = load(media_path, sidecar_path)?;
    let report = verify_title(&title, media_path)?;
    title.unchanged(media_path)?;
    Ok(report)
}

fn verify_title(title: &Title, media_path: &Path) -> Result<Report, FecError> {
    let src = title.index.source();
    let media: &[u8] = &title.media;
    let mut report = Report {
        media_size: media.len() as u64,
        expected_size: src.size,
        ..Report::default()
    };
    if report.media_size != report.expected_size {
        return Ok(report);
    }
    let whole_ok = content_hash(media) == src.content_hash;
    for (t, track) in title.index.tracks().enumerate() {
        let fec = title
            .sidecar
            .track(t)
            .ok_or_else(|| FecError::Invalid("sidecar track missing".into()))?;
        report.blocks_checked += fec.block_count();
        let found = par_blocks(fec.block_count(), |b| {
            check_block(t, &track, &fec, b, media, whole_ok)
        })?;
        for (b, (damaged, parity_ok)) in found.into_iter().enumerate() {
            let b = b as u64;
            if !parity_ok {
                report.parity_damaged.push((t, b));
            }
            if let Some(d) = damaged {
                report.damaged.push(DamagedBlock { parity_ok, ..d });
            }
        }
    }
    report.outside_packets = !whole_ok && report.damaged.is_empty();
    if whole_ok {
        report.packet_file = check_packet_file(title, media_path);
    }
    Ok(report)
}

fn check_packet_file(title: &Title, media_path: &Path) -> PacketFile {
    use fjord_media::prefab::{self, PrefabError};
    match prefab::open(&prefab::prefab_path_for(media_path), &title.index) {
        Ok((_, p)) => match p.damaged(&title.index, &title.media).len() {
            0 => PacketFile::Intact,
            n => PacketFile::Damaged(n),
        },
        Err(PrefabError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            PacketFile::Unchecked
        }
        Err(e) => PacketFile::Unusable(e.to_string()),
    }
}

fn content_hash(data: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update_rayon(data);
    *h.finalize().as_bytes()
}

/// Runs `f` on blocks `0..n` on every core, results in block order.
fn par_blocks<T: Send>(
    n: u64,
    f: impl Fn(u64) -> Result<T, FecError> + Sync,
) -> Result<Vec<T>, FecError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let per = n.div_ceil(threads).max(1);
    let f = &f;
    let parts: Vec<Result<Vec<T>, FecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .step_by(per as usize)
            .map(|start| s.spawn(move || (start..(start + per).min(n)).map(f).collect()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut out = Vec::with_capacity(n as usize);
    for p in parts {
        out.extend(p?);
    }
    Ok(out)
}

/// The block's damaged packets (none when `media_ok`: the file hashed equal
/// to the ingested one) and whether its parity is intact.
fn check_block(
    t: usize,
    track: &Track<'_>,
    fec: &TrackFec<'_>,
    b: u64,
    media: &[u8],
    media_ok: bool,
) -> Result<(Option<DamagedBlock>, bool), FecError> {
    let blk = fec
        .block(b)
        .ok_or_else(|| FecError::Invalid("sidecar block missing".into()))?;
    let parity_ok = fec
        .repair_data(&blk)
        .is_some_and(|d| blake3::hash(d).as_bytes() == &blk.repair_hash);
    if media_ok {
        return Ok((None, parity_ok));
    }
    let base_ts = record(track, blk.first_packet)?.rtp_ts;
    let mut hashes = Vec::with_capacity(usize::from(blk.source_count));
    let mut damaged = Vec::new();
    let mut ranges: Vec<Range<u64>> = Vec::new();
    for i in blk.packets() {
        let rec = record(track, i)?;
        let parts = payload_parts(&rec, media)
            .ok_or_else(|| FecError::Invalid("a packet lies outside the media file".into()))?;
        let header = symbol::header(rec.payload_len(), meta_of(&rec, base_ts))
            .map_err(|e| FecError::Invalid(e.to_string()))?;
        let mut h = blake3::Hasher::new();
        h.update(&header);
        for p in parts {
            h.update(p);
        }
        let mut sum = [0u8; sidecar::SYMBOL_HASH_LEN];
        sum.copy_from_slice(&h.finalize().as_bytes()[..sidecar::SYMBOL_HASH_LEN]);
        hashes.push(sum);
        if fec.symbol_hash(i) != Some(sum) {
            damaged.push(i);
            for r in [
                rec.offset..rec.offset + u64::from(rec.len),
                rec.offset2()..rec.file_end(),
            ] {
                match ranges.last_mut() {
                    _ if r.is_empty() => {}
                    Some(last) if last.end == r.start => last.end = r.end,
                    _ => ranges.push(r),
                }
            }
        }
    }
    if damaged.is_empty() && source_hash(&hashes) != blk.source_hash {
        return Err(FecError::Invalid(format!(
            "sidecar block {b}: symbol hashes disagree with the block hash"
        )));
    }
    ranges.sort_by_key(|r| r.start);
    let d = (!damaged.is_empty()).then(|| DamagedBlock {
        track: t,
        block: b,
        packets: blk.packets(),
        damaged,
        ranges,
        repair_count: blk.repair_count,
        parity_ok,
    });
    Ok((d, parity_ok))
}

/// What `repair` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// Nothing was damaged.
    Clean,
    Repaired {
        blocks: usize,
        packets: usize,
        bytes: u64,
        /// The prefabricated packets were rewritten from the media.
        packet_file: bool,
    },
}

/// Rebuilds the damaged packets of `media_path` from its parity, bit-exact,
/// and replaces the file atomically. Refuses (`FecError::BeyondRepair`,
/// saying why) when the damage exceeds what the parity covers.
pub fn repair(media_path: &Path) -> Result<RepairOutcome, FecError> {
    repair_with(media_path, &sidecar::sidecar_path_for(media_path))
}

/// [`repair`] with the parity at `sidecar_path`.
pub fn repair_with(media_path: &Path, sidecar_path: &Path) -> Result<RepairOutcome, FecError> {
    let title = load(media_path, sidecar_path)?;
    let report = verify_title(&title, media_path)?;
    title.unchanged(media_path)?;
    if report.is_clean() {
        return Ok(RepairOutcome::Clean);
    }
    if let Some(why) = report.beyond_repair() {
        return Err(FecError::BeyondRepair(why));
    }
    if report.damaged.is_empty() && !report.parity_damaged.is_empty() {
        return Err(FecError::BeyondRepair(format!(
            "the media is intact but the parity sidecar is damaged in {} blocks: re-ingest with --fec to rewrite it",
            report.parity_damaged.len()
        )));
    }
    let mut patches: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut codec = Codec::new();
    for d in &report.damaged {
        rebuild_block(&title, d, &mut codec, &mut patches)?;
    }
    let bytes = patches.iter().map(|(_, b)| b.len() as u64).sum();
    title.unchanged(media_path)?;
    if !patches.is_empty() {
        write_repaired(media_path, &title, &patches)?;
    }
    // Made from damaged media, or damaged itself: made again from the
    // (now intact) media.
    let packets_path = fjord_media::prefab::prefab_path_for(media_path);
    let packet_file =
        packets_path.exists() && (!patches.is_empty() || !report.packet_file.is_fine());
    if packet_file {
        fjord_media::prefab::prefabricate(media_path, &mut |_, _| {})
            .map_err(|e| FecError::Invalid(format!("{}: {e}", packets_path.display())))?;
    }
    Ok(RepairOutcome::Repaired {
        blocks: report.damaged.len(),
        packets: report.damaged.iter().map(|d| d.damaged.len()).sum(),
        bytes,
        packet_file,
    })
}

/// Decodes block `d` and appends (file offset, bytes) for each damaged run.
fn rebuild_block(
    title: &Title,
    d: &DamagedBlock,
    codec: &mut Codec,
    patches: &mut Vec<(u64, Vec<u8>)>,
) -> Result<(), FecError> {
    let missing = || FecError::Invalid("track or block missing".into());
    let track = title.index.track(d.track).ok_or_else(missing)?;
    let fec = title.sidecar.track(d.track).ok_or_else(missing)?;
    let blk: BlockFec = fec.block(d.block).ok_or_else(missing)?;
    let parity = fec.repair_data(&blk).ok_or_else(missing)?;
    let mut runs = Vec::with_capacity(usize::from(blk.source_count));
    for i in blk.packets() {
        runs.push(if d.damaged.contains(&i) {
            None
        } else {
            let rec = record(&track, i)?;
            let (run1, run2) = rec
                .runs(&title.media)
                .ok_or_else(|| FecError::Invalid("a packet lies outside the media file".into()))?;
            Some([run1, run2])
        });
    }
    let rebuilt = decode_block(&track, &fec, &blk, parity, &runs, codec).map_err(|e| match e {
        FecError::BeyondRepair(why) => FecError::BeyondRepair(format!(
            "track {}: {why}; restore the file from a backup",
            d.track
        )),
        e => e,
    })?;
    for (i, bytes) in rebuilt {
        let rec = record(&track, i)?;
        let (run1, run2) = bytes.split_at(rec.len as usize);
        patches.push((rec.offset, run1.to_vec()));
        if !run2.is_empty() {
            patches.push((rec.offset2(), run2.to_vec()));
        }
    }
    Ok(())
}

/// Rebuilds the lost source packets of block `blk` of a track from the
/// block's other packets and its repair symbols `parity` (all of them, back
/// to back, as [`TrackFec::repair_data`] gives them). `runs` has one entry
/// per packet of the block: its two file runs, or `None` when it is lost
/// (unreadable or damaged). Returns each lost packet with its file bytes
/// (first run then second run, as the index records them), checked against
/// the symbol hash written at ingest: never bytes that are not the ingested
/// ones. More lost packets than repair symbols, or a result that does not
/// hash right, is [`FecError::BeyondRepair`].
///
/// `fjord repair` passes runs from the mapped media; the server passes
/// runs it read with `pread`, to rebuild pages the disk fails to read.
pub fn decode_block(
    track: &Track<'_>,
    fec: &TrackFec<'_>,
    blk: &BlockFec,
    parity: &[u8],
    runs: &[Option<[&[u8]; 2]>],
    codec: &mut Codec,
) -> Result<Vec<(u64, Vec<u8>)>, FecError> {
    let e = blk.symbol_len as usize;
    let (k, m) = (usize::from(blk.source_count), usize::from(blk.repair_count));
    if runs.len() != k || parity.len() != m * e {
        return Err(FecError::Invalid(
            "block decode: runs or parity do not match the block".into(),
        ));
    }
    let lost = runs.iter().filter(|r| r.is_none()).count();
    if lost == 0 {
        return Ok(Vec::new());
    }
    if lost > m {
        return Err(FecError::BeyondRepair(format!(
            "block {}: {lost} packets lost, the parity repairs at most {m}",
            blk.first_packet / (k.max(1) as u64)
        )));
    }
    let rs_err = |e: crate::rs::CodecError| FecError::Invalid(format!("Reed-Solomon: {e}"));
    codec.set_layout(k, m).map_err(rs_err)?;
    let base_ts = record(track, blk.first_packet)?.rtp_ts;
    let mut symbols = vec![0u8; k * e];
    let mut present = vec![false; k];
    for (((i, sym), p), r) in blk
        .packets()
        .zip(symbols.chunks_exact_mut(e))
        .zip(&mut present)
        .zip(runs)
    {
        if let Some([run1, run2]) = r {
            let rec = record(track, i)?;
            if run1.len() != rec.len as usize || run2.len() != rec.len2 as usize {
                return Err(FecError::Invalid(
                    "block decode: a run's length differs from its record".into(),
                ));
            }
            symbol::frame(sym, &[rec.prefix(), run1, run2], meta_of(&rec, base_ts))
                .map_err(|e| FecError::Invalid(format!("cannot frame a packet: {e}")))?;
            *p = true;
        }
    }
    let repairs: Vec<(usize, &[u8])> = parity.chunks_exact(e).enumerate().collect();
    let rebuilt = codec
        .decode(&mut symbols, &present, &repairs)
        .map_err(rs_err)?;
    let mut out = Vec::with_capacity(rebuilt.len());
    for j in rebuilt {
        let restored = &symbols[j * e..j * e + e];
        let i = blk.first_packet + j as u64;
        let rec = record(track, i)?;
        let (_, payload) =
            symbol::unframe(restored).map_err(|e| FecError::Invalid(e.to_string()))?;
        let unpadded = &restored[..SYMBOL_HEADER_LEN + payload.len()];
        if Some(crate::encode::symbol_hash(unpadded)) != fec.symbol_hash(i)
            || payload.len() != rec.payload_len()
            || !payload.starts_with(rec.prefix())
        {
            return Err(FecError::BeyondRepair(format!(
                "packet {i}: the parity does not reproduce the ingested bytes"
            )));
        }
        out.push((i, payload[rec.prefix().len()..].to_vec()));
    }
    Ok(out)
}

/// Writes the repaired file beside the original (temp file, patches, the
/// ingest-time mtime, fsync), checks it hashes equal to the ingested file,
/// then renames it over the original.
fn write_repaired(
    media_path: &Path,
    title: &Title,
    patches: &[(u64, Vec<u8>)],
) -> Result<(), FecError> {
    let io_err = |what: &str| {
        let what = format!("{what} {}", media_path.display());
        move |source| FecError::Io { what, source }
    };
    let mode = std::fs::metadata(media_path)
        .map_err(io_err("stat"))?
        .mode()
        & 0o7777;
    let mut tmp = durable::temp_beside(media_path, ".fjord-repair.tmp")
        .map_err(io_err("create a temporary file beside"))?;
    std::io::Write::write_all(&mut tmp, &title.media).map_err(io_err("write a copy of"))?;
    let file = tmp.as_file();
    for (at, bytes) in patches {
        file.write_all_at(bytes, *at)
            .map_err(io_err("write a copy of"))?;
    }
    // The index ties itself to the media by size, mtime and content hash.
    // The repaired content is the ingested content again, so the ingest-time
    // mtime is the truthful one, and with it the index and sidecar match
    // again instead of forcing a re-ingest. (Damage written through the
    // filesystem bumped the mtime; bit rot did not.)
    let src = title.index.source();
    file.set_times(FileTimes::new().set_modified(system_time(src.mtime_ns)))
        .map_err(io_err("set the modification time of a copy of"))?;
    file.sync_all().map_err(io_err("sync a copy of"))?;
    // SAFETY: a private temp file only this function writes, done writing.
    let written = unsafe { Mmap::map(file) }.map_err(io_err("read back a copy of"))?;
    if content_hash(&written) != src.content_hash {
        return Err(FecError::BeyondRepair(
            "after rebuilding every damaged packet the file still differs from the ingested one; restore it from a backup".into(),
        ));
    }
    durable::persist(tmp, media_path, mode).map_err(io_err("replace"))
}

fn system_time(ns: i64) -> SystemTime {
    let d = Duration::from_nanos(ns.unsigned_abs());
    if ns >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

//! Parity at ingest: frame every packet of an indexed title as a source
//! symbol, Reed-Solomon encode each block and write the sidecar atomically.

use std::os::unix::fs::FileExt;
use std::path::Path;

use fjord_media::{BlockLayout, Index, PacketRecord, SourceId, Track, durable};

use crate::FecError;
use crate::params::FecParams;
use crate::rs::Codec;
use crate::sidecar::{
    BLOCK_ENTRY_LEN, CHECKSUM_LEN, DATA_ALIGN, HEADER_LEN, MAGIC, SYMBOL_HASH_LEN, TRACK_ENTRY_LEN,
    VERSION,
};
use crate::symbol::{self, MAX_PAYLOAD, MAX_SYMBOL_LEN, SYMBOL_HEADER_LEN, SymbolMeta};

/// Repair data produced per batch: bounds memory whatever the title's size.
const BATCH_BYTES: u64 = 8 << 20;
/// Source packets read per batch. An audio track's packets are spread over
/// the whole file, so this (with the caller dropping the media pages after
/// each batch) is what bounds how much of the file is resident at once.
const BATCH_PACKETS: u64 = 1024;

/// What was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeSummary {
    /// Layout and block count per track.
    pub tracks: Vec<(FecParams, u64)>,
    /// Bytes of repair symbols.
    pub repair_bytes: u64,
    /// RTP payload bytes protected.
    pub source_bytes: u64,
}

/// One block to encode: its track's packets `first..first + count`, its
/// repair symbols at `repair_off` in the sidecar.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockPlan {
    pub(crate) track: usize,
    pub(crate) first: u64,
    pub(crate) count: u16,
    pub(crate) m: u16,
    pub(crate) symbol_len: u32,
    pub(crate) repair_off: u64,
    pub(crate) payload_bytes: u64,
}

impl BlockPlan {
    pub(crate) fn repair_len(&self) -> u64 {
        u64::from(self.m) * u64::from(self.symbol_len)
    }

    /// The block's entry in the sidecar's block table.
    pub(crate) fn entry(&self, r: &BlockResult) -> [u8; BLOCK_ENTRY_LEN] {
        let mut e = [0u8; BLOCK_ENTRY_LEN];
        e[..8].copy_from_slice(&self.repair_off.to_le_bytes());
        e[8..12].copy_from_slice(&self.symbol_len.to_le_bytes());
        e[12..14].copy_from_slice(&self.count.to_le_bytes());
        e[14..16].copy_from_slice(&self.m.to_le_bytes());
        e[16..48].copy_from_slice(&r.source_hash);
        e[48..].copy_from_slice(&r.repair_hash);
        e
    }
}

pub(crate) struct BlockResult {
    source_hash: [u8; 32],
    repair_hash: [u8; 32],
    pub(crate) symbol_hashes: Vec<[u8; SYMBOL_HASH_LEN]>,
}

/// The parts of a packet's RTP payload: payload header, then its file runs.
/// `None` if a run lies outside `media` (an index for another file).
pub fn payload_parts<'m>(rec: &'m PacketRecord, media: &'m [u8]) -> Option<[&'m [u8]; 3]> {
    let (run1, run2) = rec.runs(media)?;
    Some([rec.prefix(), run1, run2])
}

/// Frames packet `rec` into `out` (E bytes) and returns its symbol hash.
pub(crate) fn frame_packet(
    out: &mut [u8],
    rec: &PacketRecord,
    base_ts: u32,
    media: &[u8],
) -> Result<[u8; SYMBOL_HASH_LEN], FecError> {
    let parts = payload_parts(rec, media)
        .ok_or_else(|| FecError::Invalid("a packet lies outside the media file".into()))?;
    let used = symbol::frame(out, &parts, meta_of(rec, base_ts))
        .map_err(|e| FecError::Invalid(format!("cannot frame a packet: {e}")))?;
    Ok(symbol_hash(&out[..used]))
}

pub(crate) fn meta_of(rec: &PacketRecord, base_ts: u32) -> SymbolMeta {
    SymbolMeta {
        marker: rec.marker(),
        ts_delta: rec.rtp_ts.wrapping_sub(base_ts),
    }
}

pub(crate) fn symbol_hash(unpadded: &[u8]) -> [u8; SYMBOL_HASH_LEN] {
    let h = blake3::hash(unpadded);
    let mut out = [0u8; SYMBOL_HASH_LEN];
    out.copy_from_slice(&h.as_bytes()[..SYMBOL_HASH_LEN]);
    out
}

pub(crate) fn source_hash(symbol_hashes: &[[u8; SYMBOL_HASH_LEN]]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for s in symbol_hashes {
        h.update(s);
    }
    *h.finalize().as_bytes()
}

/// Per-thread encoder state, reused across blocks.
#[derive(Default)]
pub(crate) struct Worker {
    scratch: Vec<u8>,
    codec: Codec,
}

impl Worker {
    /// Encodes block `plan` of `track` into `out` (its repair symbols).
    pub(crate) fn encode(
        &mut self,
        track: &Track<'_>,
        media: &[u8],
        plan: &BlockPlan,
        out: &mut [u8],
    ) -> Result<BlockResult, FecError> {
        let e = plan.symbol_len as usize;
        let k = usize::from(plan.count);
        self.scratch.resize(k * e, 0);
        let base_ts = record(track, plan.first)?.rtp_ts;
        let mut symbol_hashes = Vec::with_capacity(k);
        for (i, sym) in self.scratch.chunks_exact_mut(e).enumerate() {
            let rec = record(track, plan.first + i as u64)?;
            symbol_hashes.push(frame_packet(sym, &rec, base_ts, media)?);
        }
        let rs_err = |e: crate::rs::CodecError| FecError::Invalid(format!("Reed-Solomon: {e}"));
        self.codec
            .set_layout(k, usize::from(plan.m))
            .map_err(rs_err)?;
        self.codec.encode(&self.scratch, out).map_err(rs_err)?;
        Ok(BlockResult {
            source_hash: source_hash(&symbol_hashes),
            repair_hash: *blake3::hash(out).as_bytes(),
            symbol_hashes,
        })
    }
}

pub(crate) fn record(track: &Track<'_>, i: u64) -> Result<PacketRecord, FecError> {
    usize::try_from(i)
        .ok()
        .and_then(|i| track.packet(i))
        .ok_or_else(|| FecError::Invalid("packet beyond the index's table".into()))
}

/// The symbol length E of a track whose longest RTP payload is `longest`
/// bytes: that packet's ADUI, so each packet is exactly one source symbol.
/// `None` beyond what one symbol holds.
pub fn symbol_len_for(longest: usize) -> Option<u32> {
    (longest <= MAX_PAYLOAD).then(|| symbol::symbol_len(longest) as u32)
}

/// The code parameters and symbol length of every track, from the layouts
/// the index records, checked against the code's limits and the packets.
fn checked_layouts(
    index: &Index,
    layouts: &[BlockLayout],
) -> Result<(Vec<FecParams>, Vec<u32>), FecError> {
    if layouts.len() != index.track_count() {
        return Err(FecError::Invalid(
            "one FEC layout per track is needed".into(),
        ));
    }
    let mut params = Vec::with_capacity(layouts.len());
    for (t, (track, l)) in index.tracks().zip(layouts).enumerate() {
        let p = FecParams::new(l.k.into(), l.m.into())
            .map_err(|e| FecError::Invalid(format!("track {t}: {e}; re-ingest with --fec")))?;
        if !(SYMBOL_HEADER_LEN..=MAX_SYMBOL_LEN).contains(&(l.symbol_len as usize)) {
            return Err(FecError::Invalid(format!(
                "track {t}: symbol length {} outside {SYMBOL_HEADER_LEN}..={MAX_SYMBOL_LEN}; re-ingest with --fec",
                l.symbol_len
            )));
        }
        for i in 0..track.packet_count() as u64 {
            let len = record(&track, i)?.payload_len();
            if symbol_len_for(len).is_none_or(|e| e > l.symbol_len) {
                return Err(FecError::Invalid(format!(
                    "track {t} packet {i} has a {len}-byte payload, too long for its {}-byte symbols; re-ingest",
                    l.symbol_len
                )));
            }
        }
        params.push(p);
    }
    Ok((params, layouts.iter().map(|l| l.symbol_len).collect()))
}

/// The block plan of every track, repair offsets assigned from `data_off`.
fn plan_blocks(
    index: &Index,
    params: &[FecParams],
    symbol_lens: &[u32],
    data_off: u64,
) -> Result<Vec<BlockPlan>, FecError> {
    let mut plans = Vec::new();
    let mut at = data_off;
    for (t, (track, p)) in index.tracks().zip(params).enumerate() {
        let n = track.packet_count() as u64;
        let mut first = 0;
        while first < n {
            let count = (n - first).min(u64::from(p.k));
            let mut payload_bytes = 0;
            for i in first..first + count {
                payload_bytes += record(&track, i)?.payload_len() as u64;
            }
            let plan = BlockPlan {
                track: t,
                first,
                count: count as u16,
                m: p.m,
                symbol_len: symbol_lens[t],
                repair_off: at,
                payload_bytes,
            };
            at += plan.repair_len();
            plans.push(plan);
            first += count;
        }
    }
    Ok(plans)
}

/// Computes the parity of an indexed title and writes it to `path`
/// atomically (temp file in the same directory, fsync, rename). `media` is
/// the whole media file; `layouts` holds the layout the index records for
/// each track; `progress` gets (payload bytes done, total) after every batch.
pub fn write_sidecar(
    path: &Path,
    index: &Index,
    index_checksum: &[u8; 32],
    media: &[u8],
    layouts: &[BlockLayout],
    progress: &mut dyn FnMut(u64, u64),
) -> Result<EncodeSummary, FecError> {
    let src = index.source();
    if media.len() as u64 != src.size {
        return Err(FecError::Invalid(format!(
            "the media file is {} bytes, its index says {}; re-ingest it",
            media.len(),
            src.size
        )));
    }
    let (params, symbol_lens) = checked_layouts(index, layouts)?;
    let params = params.as_slice();
    let tracks: Vec<Track<'_>> = index.tracks().collect();
    let block_counts: Vec<u64> = tracks
        .iter()
        .zip(params)
        .map(|(t, p)| (t.packet_count() as u64).div_ceil(u64::from(p.k)))
        .collect();
    let blocks_total: u64 = block_counts.iter().sum();
    let packets_total: u64 = tracks.iter().map(|t| t.packet_count() as u64).sum();
    let meta_len = HEADER_LEN as u64
        + (TRACK_ENTRY_LEN * tracks.len()) as u64
        + blocks_total * BLOCK_ENTRY_LEN as u64
        + packets_total * SYMBOL_HASH_LEN as u64;
    let data_off = (meta_len + CHECKSUM_LEN as u64).next_multiple_of(DATA_ALIGN);
    let plans = plan_blocks(index, params, &symbol_lens, data_off)?;
    let data_len: u64 = plans.iter().map(BlockPlan::repair_len).sum();
    let source_bytes: u64 = plans.iter().map(|p| p.payload_bytes).sum();

    let io_err = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| FecError::Io { what, source }
    };
    let tmp =
        durable::temp_beside(path, ".fjfec.tmp").map_err(io_err("create a temporary file for"))?;
    let file = tmp.as_file();
    file.set_len(data_off + data_len).map_err(io_err("size"))?;

    let mut results: Vec<BlockResult> = Vec::with_capacity(plans.len());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut workers: Vec<Worker> = (0..threads).map(|_| Worker::default()).collect();
    let mut buf = Vec::new();
    let mut behind = durable::WriteBehind::new(file);
    let mut done = 0;
    let mut rest = plans.as_slice();
    while !rest.is_empty() {
        let mut take = 0;
        let mut bytes = 0;
        let mut packets = 0;
        while take < rest.len() && (take == 0 || (bytes < BATCH_BYTES && packets < BATCH_PACKETS)) {
            bytes += rest[take].repair_len();
            packets += u64::from(rest[take].count);
            take += 1;
        }
        let (batch, tail) = rest.split_at(take);
        rest = tail;
        buf.resize(bytes as usize, 0);
        encode_batch(&tracks, media, batch, &mut buf, &mut workers, &mut results)?;
        file.write_all_at(&buf, batch[0].repair_off)
            .map_err(io_err("write"))?;
        behind.written_to(batch[0].repair_off + bytes);
        done += batch.iter().map(|p| p.payload_bytes).sum::<u64>();
        progress(done, source_bytes);
    }

    let meta = encode_meta(
        index,
        index_checksum,
        params,
        &symbol_lens,
        &block_counts,
        &plans,
        &results,
        data_off,
        data_len,
    );
    debug_assert_eq!(meta.len() as u64, meta_len);
    file.write_all_at(&meta, 0).map_err(io_err("write"))?;
    file.write_all_at(blake3::hash(&meta).as_bytes(), meta_len)
        .map_err(io_err("write"))?;
    // As readable as the index beside it.
    durable::persist(tmp, path, 0o644).map_err(io_err("write"))?;
    Ok(EncodeSummary {
        tracks: params.iter().copied().zip(block_counts).collect(),
        repair_bytes: data_len,
        source_bytes,
    })
}

/// Encodes `batch` (blocks whose repair data is contiguous in `out`) on
/// all workers, each taking a contiguous share of roughly equal size.
fn encode_batch(
    tracks: &[Track<'_>],
    media: &[u8],
    batch: &[BlockPlan],
    out: &mut [u8],
    workers: &mut [Worker],
    results: &mut Vec<BlockResult>,
) -> Result<(), FecError> {
    let per_worker = (out.len() as u64).div_ceil(workers.len() as u64).max(1);
    let mut shares = Vec::with_capacity(workers.len());
    let (mut plans, mut rest_out) = (batch, out);
    while !plans.is_empty() {
        let mut n = 0;
        let mut bytes = 0;
        while n < plans.len() && (n == 0 || bytes < per_worker) {
            bytes += plans[n].repair_len();
            n += 1;
        }
        let (p, pr) = plans.split_at(n);
        let (o, or) = rest_out.split_at_mut(bytes as usize);
        shares.push((p, o));
        plans = pr;
        rest_out = or;
    }
    let outcome: Vec<Result<Vec<BlockResult>, FecError>> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .into_iter()
            .zip(workers.iter_mut())
            .map(|((plans, out), worker)| {
                s.spawn(move || {
                    let mut at = 0;
                    plans
                        .iter()
                        .map(|p| {
                            let len = p.repair_len() as usize;
                            let r =
                                worker.encode(&tracks[p.track], media, p, &mut out[at..at + len]);
                            at += len;
                            r
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    for r in outcome {
        results.extend(r?);
    }
    Ok(())
}

/// The longest time from a block's first source packet to its last, for
/// `track` cut into blocks of `k` packets: how long after a block's first
/// packet its repair packets may go (SDP `repair-window`).
pub fn repair_window_ns(track: &Track<'_>, k: u16) -> u64 {
    let n = track.packet_count();
    (0..n)
        .step_by(usize::from(k.max(1)))
        .filter_map(|first| {
            let last = (first + usize::from(k.max(1))).min(n) - 1;
            let (a, b) = (track.packet(first)?, track.packet(last)?);
            Some(b.send_time_ns.saturating_sub(a.send_time_ns))
        })
        .max()
        .unwrap_or(0)
}

/// The sidecar's header: the media and index it belongs to, how long its
/// tables are and where its repair data lies.
pub(crate) fn header(
    src: &SourceId,
    index_checksum: &[u8; 32],
    tracks: usize,
    meta_len: u64,
    (data_off, data_len): (u64, u64),
) -> Vec<u8> {
    let mut buf = Vec::with_capacity(HEADER_LEN + TRACK_ENTRY_LEN * tracks);
    buf.extend_from_slice(&MAGIC);
    buf.extend_from_slice(&VERSION.to_le_bytes());
    buf.extend_from_slice(&(tracks as u32).to_le_bytes());
    buf.extend_from_slice(&src.size.to_le_bytes());
    buf.extend_from_slice(&src.mtime_ns.to_le_bytes());
    buf.extend_from_slice(&src.content_hash);
    buf.extend_from_slice(&src.sample_hash);
    buf.extend_from_slice(index_checksum);
    for v in [meta_len, data_off, data_len, 0] {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    buf
}

/// A track's entry in the sidecar.
pub(crate) struct TrackEntry {
    pub(crate) packets: u64,
    pub(crate) params: FecParams,
    pub(crate) symbol_len: u32,
    pub(crate) blocks: u64,
    pub(crate) blocks_off: u64,
    pub(crate) hashes_off: u64,
    pub(crate) window_ns: u64,
}

impl TrackEntry {
    pub(crate) fn bytes(&self) -> [u8; TRACK_ENTRY_LEN] {
        let mut e = [0u8; TRACK_ENTRY_LEN];
        e[..8].copy_from_slice(&self.packets.to_le_bytes());
        e[8..10].copy_from_slice(&self.params.k.to_le_bytes());
        e[10..12].copy_from_slice(&self.params.m.to_le_bytes());
        e[12..16].copy_from_slice(&self.symbol_len.to_le_bytes());
        e[16..24].copy_from_slice(&self.blocks.to_le_bytes());
        e[24..32].copy_from_slice(&self.blocks_off.to_le_bytes());
        e[32..40].copy_from_slice(&self.hashes_off.to_le_bytes());
        e[40..].copy_from_slice(&self.window_ns.to_le_bytes());
        e
    }
}

#[allow(clippy::too_many_arguments)]
fn encode_meta(
    index: &Index,
    index_checksum: &[u8; 32],
    params: &[FecParams],
    symbol_lens: &[u32],
    block_counts: &[u64],
    plans: &[BlockPlan],
    results: &[BlockResult],
    data_off: u64,
    data_len: u64,
) -> Vec<u8> {
    let entries_len = TRACK_ENTRY_LEN * params.len();
    let blocks_len: u64 = block_counts.iter().sum::<u64>() * BLOCK_ENTRY_LEN as u64;
    let hashes_len: u64 = results
        .iter()
        .map(|r| r.symbol_hashes.len() as u64)
        .sum::<u64>()
        * SYMBOL_HASH_LEN as u64;
    let meta_len = (HEADER_LEN + entries_len) as u64 + blocks_len + hashes_len;
    let mut buf = header(
        &index.source(),
        index_checksum,
        params.len(),
        meta_len,
        (data_off, data_len),
    );
    let mut blocks_off = (HEADER_LEN + entries_len) as u64;
    let mut hashes_off = blocks_off + blocks_len;
    for (t, (track, (p, &blocks))) in index
        .tracks()
        .zip(params.iter().zip(block_counts))
        .enumerate()
    {
        let packets = track.packet_count() as u64;
        let entry = TrackEntry {
            packets,
            params: *p,
            symbol_len: symbol_lens[t],
            blocks,
            blocks_off,
            hashes_off,
            window_ns: repair_window_ns(&track, p.k),
        };
        buf.extend_from_slice(&entry.bytes());
        blocks_off += blocks * BLOCK_ENTRY_LEN as u64;
        hashes_off += packets * SYMBOL_HASH_LEN as u64;
    }
    for (p, r) in plans.iter().zip(results) {
        buf.extend_from_slice(&p.entry(r));
    }
    for r in results {
        for h in &r.symbol_hashes {
            buf.extend_from_slice(h);
        }
    }
    buf
}

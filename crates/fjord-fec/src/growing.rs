//! Parity of a growing recording (`docs/live.md`): one sidecar of the
//! [`crate::sidecar`] layout, extended in place as the recording's
//! snapshots add packets, so a snapshot's sessions send repair packets for
//! every whole block it holds while the rest is still being recorded.
//!
//! Its tables have room for [`CAPACITY`] packets a track from the start (a
//! hole in the file until written), so a block's entry, its symbol hashes
//! and its repair symbols are written once and never move: a session that
//! mapped the file before keeps reading what it read. An extension appends
//! the new whole blocks' repair symbols, writes their entries and symbol
//! hashes, then the track entries and the header's data length; a reader
//! parses the file between extensions (the caller's lock). A block is
//! encoded once it has its K packets: the unfinished last one has none
//! until it is whole. Every track's symbol length is the longest payload a
//! planner makes ([`MAX_RTP_PAYLOAD`]): a later packet may be longer than
//! the ones so far. The meta checksum and the media and index identities
//! are left zero, so no title takes such a sidecar for its own parity
//! ([`crate::Sidecar::check_belongs`]): once the recording ends, or after a
//! crash, the whole file's parity is made afresh.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use fjord_media::format::MAX_RTP_PAYLOAD;
use fjord_media::{Index, SourceId, durable};

use crate::encode::{self, BlockPlan, TrackEntry, Worker};
use crate::sidecar::{
    BLOCK_ENTRY_LEN, CHECKSUM_LEN, DATA_ALIGN, HEADER_LEN, SYMBOL_HASH_LEN, TRACK_ENTRY_LEN,
};
use crate::{FecChoice, FecError, FecParams};

/// Packets a track's tables have room for: 77 minutes of a 40 Mbit/s
/// stream, more than a recording file holds (`live_record_max_s`). Beyond
/// it a track's parity stops growing.
pub const CAPACITY: u64 = 1 << 24;

/// Packets of a track read to rate it for [`FecChoice::Auto`].
const RATED_PACKETS: usize = 100_000;
/// How much of a track rates it: a block layout chosen from less would
/// follow a first key frame's burst, not the stream's rate.
pub const RATED_NS: u64 = 2_000_000_000;

/// A growing recording's sidecar, open for extension.
pub struct GrowingParity {
    file: File,
    tracks: Vec<TrackEntry>,
    meta_len: u64,
    data_off: u64,
    data_end: u64,
    worker: Worker,
    buf: Vec<u8>,
}

/// What an extension did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extended {
    /// Blocks encoded by this call.
    pub blocks: u64,
    /// Whether whole blocks of the index are left for the next call.
    pub more: bool,
}

/// The code parameters `choice` gives the tracks of a growing recording's
/// snapshot `index`; `None` for [`FecChoice::Off`], and for `Auto` until
/// every track has [`RATED_NS`] of packets to rate it by.
pub fn params_for(index: &Index, choice: FecChoice) -> Option<Vec<FecParams>> {
    match choice {
        FecChoice::Off => None,
        FecChoice::Fixed(p) => Some(vec![p; index.track_count()]),
        FecChoice::Auto => index.tracks().map(|t| rate(&t)).collect(),
    }
}

/// [`FecParams::for_track`] of a track's first packets, if they span
/// [`RATED_NS`].
fn rate(track: &fjord_media::Track<'_>) -> Option<FecParams> {
    let n = track.packet_count().min(RATED_PACKETS);
    let (first, last) = (track.packet(0)?, track.packet(n.checked_sub(1)?)?);
    let span = last.send_time_ns.saturating_sub(first.send_time_ns);
    if span < RATED_NS {
        return None;
    }
    let bytes: u64 = (0..n)
        .filter_map(|i| track.packet(i))
        .map(|r| r.payload_len() as u64)
        .sum();
    let bitrate = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(span);
    Some(FecParams::for_track(
        u64::try_from(bitrate).unwrap_or(u64::MAX),
        bytes / n as u64,
    ))
}

impl GrowingParity {
    /// Writes an empty growing sidecar for tracks coded with `params` at
    /// `path` (replacing whatever is there by rename: sessions of an
    /// earlier one keep theirs) and opens it for extension.
    pub fn create(path: &Path, params: &[FecParams]) -> Result<Self, FecError> {
        let io_err = |what: &str| {
            let what = format!("{what} {}", path.display());
            move |source| FecError::Io { what, source }
        };
        let symbol_len = encode::symbol_len_for(MAX_RTP_PAYLOAD)
            .ok_or_else(|| FecError::Invalid("no symbol holds a packet".into()))?;
        let mut at = (HEADER_LEN + TRACK_ENTRY_LEN * params.len()) as u64;
        let mut tracks: Vec<TrackEntry> = params
            .iter()
            .map(|&p| {
                let blocks_off = at;
                at += CAPACITY / u64::from(p.k) * BLOCK_ENTRY_LEN as u64;
                TrackEntry {
                    packets: 0,
                    params: p,
                    symbol_len,
                    blocks: 0,
                    blocks_off,
                    hashes_off: 0,
                    window_ns: 0,
                }
            })
            .collect();
        for t in &mut tracks {
            t.hashes_off = at;
            at += CAPACITY * SYMBOL_HASH_LEN as u64;
        }
        let meta_len = at;
        let data_off = (meta_len + CHECKSUM_LEN as u64).next_multiple_of(DATA_ALIGN);
        let tmp = durable::temp_beside(path, ".fjfec.tmp").map_err(io_err("create beside"))?;
        let file = tmp.reopen().map_err(io_err("open"))?;
        let parity = GrowingParity {
            file,
            tracks,
            meta_len,
            data_off,
            data_end: data_off,
            worker: Worker::default(),
            buf: Vec::new(),
        };
        parity.file.set_len(data_off).map_err(io_err("size"))?;
        parity.commit().map_err(io_err("write"))?;
        // Not synced: never taken after a restart (see the module doc).
        durable::replace(tmp, path, 0o644).map_err(io_err("write"))?;
        Ok(parity)
    }

    /// Encodes whole blocks of `index` (a later snapshot of the same
    /// recording, its media `media`) not encoded yet, the earliest sent
    /// first across tracks, until their source payloads reach `budget`
    /// bytes, and makes them readable.
    pub fn extend(
        &mut self,
        index: &Index,
        media: &[u8],
        budget: u64,
    ) -> Result<Extended, FecError> {
        if index.track_count() != self.tracks.len() {
            return Err(FecError::Invalid(
                "the recording's tracks changed under its parity".into(),
            ));
        }
        let tracks: Vec<fjord_media::Track<'_>> = index.tracks().collect();
        let appended = self.data_end;
        let (mut blocks, mut bytes) = (0, 0);
        let more = loop {
            let Some(t) = self.next_track(&tracks) else {
                break false;
            };
            if bytes >= budget {
                break true;
            }
            bytes += self.encode_next(t, &tracks[t], media)?;
            blocks += 1;
        };
        let io_err = |source| FecError::Io {
            what: "write a growing recording's parity".into(),
            source,
        };
        self.commit().map_err(io_err)?;
        durable::start_writeback(&self.file, appended..self.data_end);
        Ok(Extended { blocks, more })
    }

    /// The track whose next whole block, not encoded yet, was sent first.
    fn next_track(&self, tracks: &[fjord_media::Track<'_>]) -> Option<usize> {
        (0..tracks.len())
            .filter_map(|t| {
                let (entry, track) = (&self.tracks[t], &tracks[t]);
                let k = u64::from(entry.params.k);
                let end = entry.packets + k;
                let whole = end <= track.packet_count() as u64 && end <= CAPACITY;
                let first = track.packet(usize::try_from(entry.packets).ok()?)?;
                whole.then_some((first.send_time_ns, t))
            })
            .min()
            .map(|(_, t)| t)
    }

    /// Encodes track `t`'s next block and writes its repair symbols, entry
    /// and symbol hashes; its source payload bytes.
    fn encode_next(
        &mut self,
        t: usize,
        track: &fjord_media::Track<'_>,
        media: &[u8],
    ) -> Result<u64, FecError> {
        let entry = &self.tracks[t];
        let (k, first) = (entry.params.k, entry.packets);
        let mut payload_bytes = 0;
        for i in first..first + u64::from(k) {
            payload_bytes += encode::record(track, i)?.payload_len() as u64;
        }
        let plan = BlockPlan {
            track: t,
            first,
            count: k,
            m: entry.params.m,
            symbol_len: entry.symbol_len,
            repair_off: self.data_end,
            payload_bytes,
        };
        self.buf.resize(plan.repair_len() as usize, 0);
        let result = self.worker.encode(track, media, &plan, &mut self.buf)?;
        let hashes: Vec<u8> = result.symbol_hashes.concat();
        let (entry_at, hashes_at) = (
            entry.blocks_off + entry.blocks * BLOCK_ENTRY_LEN as u64,
            entry.hashes_off + first * SYMBOL_HASH_LEN as u64,
        );
        let written = (self.file.write_all_at(&self.buf, plan.repair_off))
            .and_then(|()| self.file.write_all_at(&plan.entry(&result), entry_at))
            .and_then(|()| self.file.write_all_at(&hashes, hashes_at));
        written.map_err(|source| FecError::Io {
            what: "write a growing recording's parity".into(),
            source,
        })?;
        let last = encode::record(track, first + u64::from(k) - 1)?.send_time_ns;
        let since = encode::record(track, first)?.send_time_ns;
        let entry = &mut self.tracks[t];
        entry.window_ns = entry.window_ns.max(last.saturating_sub(since));
        entry.packets += u64::from(k);
        entry.blocks += 1;
        self.data_end += plan.repair_len();
        Ok(payload_bytes)
    }

    /// Writes the header and track entries: what a reader parses.
    fn commit(&self) -> std::io::Result<()> {
        let none = SourceId {
            size: 0,
            mtime_ns: 0,
            content_hash: [0; 32],
            sample_hash: [0; 32],
        };
        let data = (self.data_off, self.data_end - self.data_off);
        let mut head = encode::header(&none, &[0; 32], self.tracks.len(), self.meta_len, data);
        for t in &self.tracks {
            head.extend_from_slice(&t.bytes());
        }
        self.file.write_all_at(&head, 0)
    }
}

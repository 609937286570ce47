//! fjord-fec: Reed-Solomon parity computed once at ingest: RFC 6865's
//! scheme for m = 8 (the RFC 5510 codec over GF(2^8), [`rs`]).
//!
//! The same parity serves two purposes: sent as an RTP repair stream it lets
//! receivers rebuild lost packets without retransmission ([`decode`]), and
//! kept beside the media it finds and repairs damaged storage ([`storage`]).
//! [`encode`] writes it at ingest into the [`sidecar`]; serving only reads
//! repair symbols by reference. A recording still being written gets its
//! parity block by block as its snapshots grow ([`growing`]), in a sidecar
//! of the same layout that no whole title takes for its own. The wire
//! format is in `docs/fec.md`.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod decode;
pub mod encode;
pub mod gf;
pub mod growing;
pub mod live;
pub mod params;
pub mod rs;
pub mod sidecar;
pub mod storage;
pub mod symbol;

use std::path::{Path, PathBuf};

use fjord_media::index::{IndexError, index_path_for, map_media};
use fjord_media::{BlockLayout, Index, MediaPlan};

pub use decode::{BlockDecoder, DecodeError, SourcePacket};
pub use encode::{EncodeSummary, write_sidecar};
pub use params::{FecChoice, FecParams, ParamsError};
pub use sidecar::{Sidecar, SidecarError, sidecar_path_for};
pub use storage::{RepairOutcome, Report, repair, repair_with, verify, verify_with};
pub use symbol::RepairHeader;

/// Why parity could not be made, checked or used. Messages say what to do.
#[derive(Debug, thiserror::Error)]
pub enum FecError {
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{}: {source}; run `fjord ingest` on the media file", path.display())]
    Index { path: PathBuf, source: IndexError },
    #[error("{}: {source}; run `fjord ingest --fec K:M` on the media file to rewrite it", path.display())]
    Sidecar { path: PathBuf, source: SidecarError },
    #[error("{0}")]
    Invalid(String),
    /// The damage exceeds what the parity covers; says where and why.
    #[error("cannot repair: {0}")]
    BeyondRepair(String),
}

/// The block layouts `choice` gives the tracks of a planned title, for
/// ingest to record in the index (`fjord_media::ingest_file`): none for
/// [`FecChoice::Off`], and none for a title with a packet too long for one
/// symbol (no planner makes one).
pub fn layouts(choice: FecChoice) -> impl Fn(&MediaPlan) -> Vec<Option<BlockLayout>> {
    move |plan| {
        let per_track = |t: &fjord_media::TrackPlan| {
            let longest = t.packets.iter().map(|p| p.payload_len()).max();
            let symbol_len = encode::symbol_len_for(longest.unwrap_or(0))?;
            let p = match choice {
                FecChoice::Off => return None,
                FecChoice::Fixed(p) => p,
                FecChoice::Auto => {
                    let n = t.packets.len() as u64;
                    let bytes: u64 = t.packets.iter().map(|p| p.payload_len() as u64).sum();
                    let bitrate = (u128::from(bytes) * 8 * 1_000_000_000)
                        .checked_div(u128::from(plan.duration_ns))
                        .unwrap_or(0);
                    FecParams::for_track(
                        u64::try_from(bitrate).unwrap_or(u64::MAX),
                        bytes.checked_div(n).unwrap_or(0),
                    )
                }
            };
            Some(BlockLayout {
                k: p.k,
                m: p.m,
                symbol_len,
            })
        };
        let all: Option<Vec<BlockLayout>> = plan.tracks.iter().map(per_track).collect();
        all.map(|v| v.into_iter().map(Some).collect())
            .unwrap_or_default()
    }
}

/// After ingest: writes `MEDIA.fjfec` for the block layouts the freshly
/// written index of `media` records (or removes a stale one when it records
/// none).
pub fn protect(
    media: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<EncodeSummary>, FecError> {
    protect_to(media, &sidecar_path_for(media), progress)
}

/// [`protect`], the sidecar written at `path` (a server with a pool of
/// disks keeps a title's parity on another disk than its media).
pub fn protect_to(
    media: &Path,
    path: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<EncodeSummary>, FecError> {
    let index_path = index_path_for(media);
    let index = Index::open(&index_path).map_err(|source| FecError::Index {
        path: index_path.clone(),
        source,
    })?;
    let recorded: Vec<Option<BlockLayout>> = index.tracks().map(|t| t.fec_layout()).collect();
    if recorded.iter().all(Option::is_none) {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(FecError::Io {
                what: format!("remove {}", path.display()),
                source: e,
            }),
            _ => Ok(None),
        };
    }
    let layouts: Vec<BlockLayout> = recorded.into_iter().collect::<Option<_>>().ok_or_else(|| {
        FecError::Invalid(format!(
            "{} records a FEC layout for some tracks only; run `fjord ingest --fec K:M` on the media file",
            index_path.display()
        ))
    })?;
    let io_err = |what: String| move |source| FecError::Io { what, source };
    let checksum = sidecar::index_checksum(&index_path)
        .map_err(io_err(format!("read {}", index_path.display())))?;
    let data = map_media(media).map_err(io_err(format!("read {}", media.display())))?;
    // Pages of the mapping count in the process's memory once read; drop
    // them after every batch (they stay in the page cache), so parity for a
    // file of many GB is computed in bounded memory.
    let mut progress = |done: u64, total: u64| {
        // SAFETY: the mapping is read-only and file-backed; after
        // MADV_DONTNEED its pages read the file's contents again.
        let _ = unsafe {
            data.mmap()
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
        progress(done, total);
    };
    let summary = write_sidecar(path, &index, &checksum, &data, &layouts, &mut progress)?;
    // Parity of zeros read from a file truncated meanwhile protects nothing.
    if data.damaged() || index.damaged() {
        let _ = std::fs::remove_file(path);
        return Err(FecError::Invalid(format!(
            "{} or its index shrank while the parity was computed; run again once nothing writes them",
            media.display()
        )));
    }
    Ok(Some(summary))
}

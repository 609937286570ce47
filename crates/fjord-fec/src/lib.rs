//! fjord-fec: Reed-Solomon parity computed once at ingest: RFC 6865's
//! scheme for m = 8 (the RFC 5510 codec over GF(2^8), [`rs`]).
//!
//! The same parity serves two purposes: sent as an RTP repair stream it lets
//! receivers rebuild lost packets without retransmission ([`decode`]), and
//! kept beside the media it finds and repairs damaged storage ([`storage`]).
//! [`encode`] writes it at ingest into the [`sidecar`]; serving only reads
//! repair symbols by reference. The wire format is in `docs/fec.md`.

pub mod decode;
pub mod encode;
pub mod gf;
pub mod live;
pub mod params;
pub mod rs;
pub mod sidecar;
pub mod storage;
pub mod symbol;

use std::path::{Path, PathBuf};

use fjord_media::Index;
use fjord_media::index::{IndexError, index_path_for, map_media};

pub use decode::{BlockDecoder, DecodeError, SourcePacket};
pub use encode::{EncodeSummary, write_sidecar};
pub use params::{FecChoice, FecParams, ParamsError};
pub use sidecar::{Sidecar, SidecarError, sidecar_path_for};
pub use storage::{RepairOutcome, Report, repair, verify};
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

/// Per-track layouts for `choice` (`None` for [`FecChoice::Off`]).
pub fn layouts(index: &Index, choice: FecChoice) -> Option<Vec<FecParams>> {
    let duration_ns = index.duration_ns();
    let per_track = |t: fjord_media::Track<'_>| match choice {
        FecChoice::Fixed(p) => p,
        _ => {
            let n = t.packet_count();
            let bytes: u64 = (0..n)
                .filter_map(|i| t.packet(i))
                .map(|p| p.payload_len() as u64)
                .sum();
            let bitrate = (u128::from(bytes) * 8 * 1_000_000_000)
                .checked_div(u128::from(duration_ns))
                .unwrap_or(0);
            FecParams::for_track(
                u64::try_from(bitrate).unwrap_or(u64::MAX),
                bytes.checked_div(n as u64).unwrap_or(0),
            )
        }
    };
    (choice != FecChoice::Off).then(|| index.tracks().map(per_track).collect())
}

/// After ingest: writes `MEDIA.fjfec` for the freshly written index of
/// `media` (or removes a stale one when `choice` is off).
pub fn protect(
    media: &Path,
    choice: FecChoice,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<EncodeSummary>, FecError> {
    let path = sidecar_path_for(media);
    let index_path = index_path_for(media);
    let index = Index::open(&index_path).map_err(|source| FecError::Index {
        path: index_path.clone(),
        source,
    })?;
    let Some(params) = layouts(&index, choice) else {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(FecError::Io {
                what: format!("remove {}", path.display()),
                source: e,
            }),
            _ => Ok(None),
        };
    };
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
        let _ = unsafe { data.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        progress(done, total);
    };
    write_sidecar(&path, &index, &checksum, &data, &params, &mut progress).map(Some)
}

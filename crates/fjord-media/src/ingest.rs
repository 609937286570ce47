//! Ingest glue: file in, index out, with errors an operator can act on.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::format::{self, FormatError, Resume};
use crate::guard::Guarded;
use crate::index::{self, Index, SourceId};
use crate::plan::{ChooseLayouts, IngestReport};
use crate::ts::TsOptions;

/// Why a media file could not be ingested. Every variant names the file and
/// says what to do.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{}: cannot open ({source}); check the path and its permissions", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: is a directory, not a media file; give the path of a media file", path.display())]
    NotAFile { path: PathBuf },
    #[error("{}: the file is empty; nothing to serve", path.display())]
    Empty { path: PathBuf },
    /// Not a format fjord serves, or broken beyond use: `reason` says which.
    #[error("{}: {reason}", path.display())]
    Unsupported { path: PathBuf, reason: String },
    #[error(
        "{}: too large to index (over 256 TiB or 2^32 RTP packets); split the file",
        path.display()
    )]
    TooLarge { path: PathBuf },
    #[error(
        "{}: cannot write the index ({source}); the index is written next to the media file, so its directory must be writable",
        path.display()
    )]
    WriteIndex {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the file shrank while it was ingested; try again once it is complete", path.display())]
    Changed { path: PathBuf },
    #[error("{}: the index just written cannot be read back ({source})", path.display())]
    ReadBack {
        path: PathBuf,
        source: index::IndexError,
    },
}

/// How often ingest reports progress (and drops the mapping's pages).
const PROGRESS_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);
/// Bytes read between two drops of the media mapping's pages.
const DROP_EVERY: u64 = 32 << 20;

/// Keeps the media mapping from filling the process's memory: pages of a
/// mapping count in its RSS once touched, and planners touch most of a file.
/// Dropping them (they stay in the page cache) bounds memory for files of
/// many GB; a page needed again faults back in. Dropped every
/// [`DROP_EVERY`] bytes the planner or the hasher passes, and on each
/// progress tick for planners that do not report where they are.
struct Pager<'a> {
    data: &'a Guarded,
    dropped_at: AtomicU64,
}

impl Pager<'_> {
    fn passed(&self, at: u64) {
        let last = self.dropped_at.load(Ordering::Relaxed);
        if at >= last + DROP_EVERY
            && self
                .dropped_at
                .compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.drop_pages();
        }
    }

    fn drop_pages(&self) {
        // SAFETY: the mapping is read-only and file-backed; after
        // MADV_DONTNEED its pages read the file's contents again.
        let _ = unsafe {
            self.data
                .mmap()
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
    }
}

/// Parse `path`, hash it and write its index next to it, with the block
/// layouts `fec` chooses. `progress` gets (bytes done, bytes total) every
/// [`PROGRESS_PERIOD`] and once at the end.
pub fn ingest_file(
    path: &Path,
    opts: &TsOptions,
    fec: ChooseLayouts<'_>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<IngestReport, IngestError> {
    ingest_paced(path, opts, fec, progress, &|_| {})
}

/// Bulk I/O pacing: called by the threads that read the media with the
/// bytes each has read since its last call, so it may hold them back (a
/// server keeps ingest to what its playing sessions leave of the disk).
pub type Pace<'a> = &'a (dyn Fn(u64) + Sync);

/// [`ingest_file`], its reads paced by `pace`.
pub fn ingest_paced(
    path: &Path,
    opts: &TsOptions,
    fec: ChooseLayouts<'_>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
    pace: Pace<'_>,
) -> Result<IngestReport, IngestError> {
    let open_err = |source| IngestError::Open {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    if meta.is_dir() {
        return Err(IngestError::NotAFile {
            path: path.to_owned(),
        });
    }
    if meta.len() == 0 {
        return Err(IngestError::Empty {
            path: path.to_owned(),
        });
    }
    // SAFETY: read-only mapping of a file fjord never writes; see `index::map_media`.
    let data = unsafe { Guarded::map(&file) }.map_err(open_err)?;
    let _ = data.mmap().advise(memmap2::Advice::Sequential);
    // Refuse what is not media before reading all of it.
    format::Container::sniff(&data).map_err(format_error(path))?;
    let total = meta.len();
    let pager = Pager {
        data: &data,
        dropped_at: AtomicU64::new(0),
    };
    let (planned, hashed, finished) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    // Hash on another core while this one plans: both are a pass over the
    // file. A third thread reports progress.
    let (plan, source) = std::thread::scope(|s| {
        s.spawn(|| {
            while !finished.load(Ordering::Relaxed) {
                std::thread::sleep(PROGRESS_PERIOD);
                pager.drop_pages();
                let done = planned
                    .load(Ordering::Relaxed)
                    .max(hashed.load(Ordering::Relaxed));
                progress(done.min(total), total);
            }
        });
        let hasher = s.spawn(|| {
            SourceId::of_file(&file, &meta, &|n| {
                pace(n.saturating_sub(hashed.swap(n, Ordering::Relaxed)));
                pager.passed(n);
            })
        });
        let p = format::plan(&data, opts, &mut |done, _| {
            pace(done.saturating_sub(planned.swap(done, Ordering::Relaxed)));
            pager.passed(done);
        });
        let source = hasher.join();
        finished.store(true, Ordering::Relaxed);
        (p, source)
    });
    progress(total, total);
    // Truncated while being read: what was planned and hashed past the new
    // end were zeros.
    if data.damaged() {
        return Err(IngestError::Changed {
            path: path.to_owned(),
        });
    }
    let mut plan = plan.map_err(format_error(path))?;
    plan.choose_fec(fec);
    let source = source
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .map_err(open_err)?;
    let index_path = index::index_path_for(path);
    index::write(&index_path, &plan, &source).map_err(|source| IngestError::WriteIndex {
        path: index_path,
        source,
    })?;
    Ok(plan.report)
}

/// A growing file's index ([`snapshot`]).
pub struct Snapshot {
    pub index: Index,
    /// Where a later snapshot of the same file may plan on from (a
    /// fragmented MP4's or an MPEG-TS's, when nothing in it stops that).
    pub resume: Option<Resume>,
    /// Whether only what follows the previous snapshot was planned.
    pub incremental: bool,
}

/// The index of the first `len` bytes of `media`, a file that is still
/// being written (a live recording, `len` what is durable of it): planned
/// from those bytes alone, without parity, written beside it. Its source
/// identity names no version of the file (no hashes, no mtime), so it is
/// never taken for the whole file's index: the next ingest makes that
/// afresh. Reads the prefix (planning), never hashes it.
///
/// An MPEG-TS's plan is cut where it is final (`ts::growing`: up to
/// the last PCR or so). With `prev`, a snapshot of a shorter prefix of
/// the same file and its [`Snapshot::resume`], only the fragments (TS
/// packets) after it are planned and joined to its index
/// (`mp4::growing`, `ts::growing`): the index is the one planning the
/// whole prefix makes; when it cannot be planned on from there, the
/// whole prefix is planned.
pub fn snapshot(
    media: &Path,
    len: u64,
    opts: &TsOptions,
    prev: Option<(&Index, &Resume)>,
) -> Result<Snapshot, IngestError> {
    let open_err = |source| IngestError::Open {
        path: media.to_owned(),
        source,
    };
    let changed = || IngestError::Changed {
        path: media.to_owned(),
    };
    let file = File::open(media).map_err(open_err)?;
    // SAFETY: read-only mapping; the writer only appends, see `index::map_media`.
    let data = unsafe { Guarded::map(&file) }.map_err(open_err)?;
    let prefix = data.get(..len as usize).ok_or_else(changed)?;
    let tail = prev
        .filter(|(idx, r)| follows(idx, r))
        .and_then(|(idx, r)| Some((idx, format::plan_on(prefix, opts, r)?)));
    let incremental = tail.is_some();
    let (joined, plan, resume) = match tail {
        Some((idx, (plan, resume))) => (Some(idx), plan, Some(resume)),
        None => {
            let (plan, resume) = format::plan_growing(prefix, opts).map_err(format_error(media))?;
            (None, plan, resume)
        }
    };
    if data.damaged() || joined.is_some_and(Index::damaged) {
        return Err(changed());
    }
    let source = SourceId {
        size: len,
        mtime_ns: 0,
        content_hash: [0; 32],
        sample_hash: [0; 32],
    };
    let index_path = index::index_path_for(media);
    index::write_snapshot(&index_path, &plan, joined, &source).map_err(|source| {
        IngestError::WriteIndex {
            path: index_path.clone(),
            source,
        }
    })?;
    // Not read whole again (its checksum, every record) as an ingest's
    // is: that would cost what the snapshot does. Serving bounds-checks
    // every record read.
    let index = Index::open_unverified(&index_path).map_err(|source| IngestError::ReadBack {
        path: index_path,
        source,
    })?;
    Ok(Snapshot {
        index,
        resume,
        incremental,
    })
}

/// Whether `resume` is where the plan of the index `idx` stopped.
fn follows(idx: &Index, resume: &Resume) -> bool {
    let packets = resume.packets();
    idx.source().size == resume.bytes() as u64
        && idx.track_count() == packets.len()
        && (idx.tracks().zip(packets)).all(|(t, n)| t.packet_count() as u64 == n)
}

fn format_error(path: &Path) -> impl Fn(FormatError) -> IngestError {
    move |e| {
        let path = path.to_owned();
        match e {
            FormatError::Empty => IngestError::Empty { path },
            FormatError::TooLarge => IngestError::TooLarge { path },
            FormatError::Unsupported(reason) | FormatError::Invalid(reason) => {
                IngestError::Unsupported { path, reason }
            }
        }
    }
}

/// The index of `media`: the existing one if it opens, was made with the same
/// options and still matches the file (whatever block layout it records);
/// else a fresh ingest with the layouts `fec` chooses (whose report is
/// returned too). Missing, stale, corrupt and old-version indexes are replaced.
pub fn open_or_ingest(
    media: &Path,
    opts: &TsOptions,
    fec: ChooseLayouts<'_>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<(Index, Option<IngestReport>), IngestError> {
    open_or_ingest_paced(media, opts, fec, progress, &|_| {}, index::Check::Now)
}

/// [`open_or_ingest`], an ingest's reads paced by `pace`. With
/// `Check::Later` an existing index is opened unverified and taken if the
/// media file has the size and mtime it records (its checksum, records and
/// content sample are left to [`Index::verify`] and [`Index::matches`]).
pub fn open_or_ingest_paced(
    media: &Path,
    opts: &TsOptions,
    fec: ChooseLayouts<'_>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
    pace: Pace<'_>,
    check: index::Check,
) -> Result<(Index, Option<IngestReport>), IngestError> {
    let index_path = index::index_path_for(media);
    let existing = match check {
        index::Check::Now => Index::open(&index_path)
            .ok()
            .filter(|idx| idx.matches(media).unwrap_or(false)),
        index::Check::Later => Index::open_unverified(&index_path)
            .ok()
            .filter(|idx| idx.matches_metadata(media).unwrap_or(false)),
    };
    if let Some(idx) = existing
        && (idx.ts_per_rtp() == 0 || idx.ts_per_rtp() == opts.ts_per_rtp.clamp(1, 7))
    {
        return Ok((idx, None));
    }
    let report = ingest_paced(media, opts, fec, progress, pace)?;
    let idx = Index::open(&index_path).map_err(|source| IngestError::ReadBack {
        path: index_path,
        source,
    })?;
    Ok((idx, Some(report)))
}

//! The parity of a recording while it is written (`docs/live.md`): one
//! sidecar a recording file ([`fjord_fec::growing`]), made where the
//! file's parity goes and extended as its snapshots add whole blocks, so a
//! snapshot's sessions get repair streams too. A snapshot extends it by
//! up to [`INLINE_BATCHES`] of [`BATCH_BYTES`] of source before it is
//! served, and a background task takes the rest, a batch at a time:
//! parity that lags (a recording no one asked for in an hour) holds a
//! request up by that share at most. When the recording ends its title
//! is ingested whole and gets its own parity, as any title.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fjord_engine::Title;
use fjord_fec::FecChoice;
use fjord_fec::growing::GrowingParity;

/// Source bytes encoded per hold of the lock (some 30 ms of encoding on
/// one core here; 13 s of a 5 Mbit/s stream): a snapshot attaches between
/// batches.
const BATCH_BYTES: u64 = 8 << 20;
/// Batches a snapshot encodes before it is served: the first request for
/// a recording no one asked for in a minute finds it protected whole.
const INLINE_BATCHES: usize = 4;

/// A recording file's growing parity.
pub(super) struct RecordingParity {
    path: PathBuf,
    /// `None` once making it failed (logged): snapshots go without until
    /// one plans the whole file again.
    parity: Mutex<Option<GrowingParity>>,
    /// A background task is extending it.
    extending: AtomicBool,
}

impl RecordingParity {
    /// Attaches to a new snapshot `title` its parity so far, extended by
    /// up to [`INLINE_BATCHES`]: `prev`'s (the last snapshot's, when this
    /// one was planned on from it: its packets are that one's and more),
    /// else a new one at `path`. Whether blocks are left for
    /// [`RecordingParity::extend_in_background`]. `None` when `fec` makes
    /// none, or its tracks cannot be rated yet.
    pub(super) fn attach(
        prev: Option<Arc<RecordingParity>>,
        title: &mut Title,
        path: &Path,
        fec: FecChoice,
    ) -> Option<(Arc<RecordingParity>, bool)> {
        let parity = match prev {
            Some(prev) => prev,
            None => Arc::new(Self::new(title, path, fec)?),
        };
        let more = (0..INLINE_BATCHES).all(|_| parity.extend(title));
        let guard = parity.parity.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_some()
            && let Err(e) = title.attach_growing_fec(&parity.path)
        {
            tracing::warn!(parity = %parity.path.display(), "snapshot served without repair streams: {e}");
        }
        drop(guard);
        Some((parity, more))
    }

    /// A new sidecar for `title`'s tracks at `path`.
    fn new(title: &Title, path: &Path, fec: FecChoice) -> Option<RecordingParity> {
        let params = fjord_fec::growing::params_for(title.index(), fec)?;
        let parity = GrowingParity::create(path, &params)
            .inspect_err(|e| tracing::warn!(parity = %path.display(), "no parity while the recording grows: {e}"))
            .ok();
        Some(RecordingParity {
            path: path.to_owned(),
            parity: Mutex::new(parity),
            extending: AtomicBool::new(false),
        })
    }

    /// Extends the parity to every whole block of `title`, a batch at a
    /// time, on a blocking thread; nothing if a task is at it already (it
    /// stops at its own snapshot's end; the next snapshot goes on).
    pub(super) fn extend_in_background(self: Arc<Self>, title: Arc<Title>) {
        if self.extending.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::task::spawn_blocking(move || {
            while self.extend(&title) {}
            self.extending.store(false, Ordering::Release);
        });
    }

    /// One batch; whether blocks are left. A failure is logged and ends
    /// the parity.
    fn extend(&self, title: &Title) -> bool {
        let mut guard = self.parity.lock().unwrap_or_else(|e| e.into_inner());
        let Some(parity) = guard.as_mut() else {
            return false;
        };
        match parity.extend(title.index(), title.media(), BATCH_BYTES) {
            Ok(done) => done.more,
            Err(e) => {
                tracing::warn!(parity = %self.path.display(), "the growing recording's parity stops here: {e}");
                *guard = None;
                false
            }
        }
    }
}

//! The titles under the media root: path resolution that cannot escape the
//! root, and on-demand ingest with one ingest per title however many clients
//! ask at once (the others wait; clients of other titles are not blocked).
//! Parity for a title without a valid sidecar, and its prefabricated
//! packets, are made afterwards, in the background, so the first client
//! does not wait for them; clients that open the title once they are
//! written are offered the repair streams and sent the prefabricated
//! packets. A live recording still being written is a title too
//! ([`growing`]): a snapshot of what of it is durable.

pub mod growing;
mod growing_parity;

use std::{
    io,
    path::{Component, Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::{Instant, SystemTime},
};

use fjord_engine::{Title, VerifyError};
use fjord_fec::FecChoice;
use fjord_media::{index::Check, ts::TsOptions};
use fjord_storage::{HeadPin, Storage};

use crate::{
    config::PrefabMode,
    pool::Pool,
    prefab_budget::{self, PrefabBudget},
    title_slots::TitleSlots,
};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("no such title")]
    NotFound,
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Failed(String),
    /// An origin title that cannot be had now (the origin is down or
    /// slow, or in the middle of a publish): ask again.
    #[error("{0}")]
    Unavailable(String),
}

impl From<crate::edge::EdgeError> for CatalogError {
    fn from(e: crate::edge::EdgeError) -> Self {
        use crate::edge::EdgeError as E;
        match e {
            E::NotFound => CatalogError::NotFound,
            E::Unavailable(why) => CatalogError::Unavailable(why),
            E::Failed(why) => failed(&why),
        }
    }
}

impl CatalogError {
    pub fn status(&self) -> u16 {
        match self {
            CatalogError::NotFound => 404,
            CatalogError::Unsupported(_) => 415,
            CatalogError::Failed(_) => 500,
            CatalogError::Unavailable(_) => 503,
        }
    }
}

pub struct Catalog {
    pool: Arc<Pool>,
    options: TsOptions,
    /// The block layouts of titles this catalog ingests.
    fec: FecChoice,
    /// Whether titles get prefabricated packets.
    prefab: PrefabMode,
    /// With `prefab = "auto"`: who gets them, and the share of the disk
    /// (percent) they may take.
    prefab_budget: PrefabBudget,
    prefab_share_percent: u64,
    slots: Mutex<TitleSlots<Slot>>,
    /// Titles waiting for verification, parity or packets, worked on one
    /// at a time by one low-priority thread (its reads are bulk I/O, its
    /// encoding CPU-bound; the engine's deadlines come first).
    derived: mpsc::SyncSender<DeriveJob>,
    /// Jobs queued or being worked on.
    pending: Arc<AtomicUsize>,
    /// Keeps each loaded title's head resident; `None`: no storage layer.
    storage: Option<Storage>,
    /// Where titles not under the roots are looked for (an edge's origin).
    edge: Option<crate::edge::Edge>,
    /// Live recordings being written.
    growing: growing::Growing,
}

type Slot = tokio::sync::Mutex<Option<Loaded>>;

/// Loaded titles kept when no `max_loaded_titles` is given.
const DEFAULT_MAX_LOADED: usize = 512;

/// Whether a slot's title may be unloaded: no one is loading it, and only
/// the catalog holds the title (its entry and head pin; no session, no
/// background job).
fn unused(slot: &Slot) -> bool {
    slot.try_lock().is_ok_and(|l| {
        l.as_ref().is_none_or(|l| {
            let ours = 1 + usize::from(l.head.is_some());
            Arc::strong_count(&l.title) <= ours
        })
    })
}

/// Titles that may wait at once; beyond it a title is served without
/// repair streams or prefabricated packets until its file changes or the
/// server restarts.
const DERIVE_QUEUE: usize = 256;

/// Background work on a title: checking its files, making its parity
/// and/or packet file.
struct DeriveJob {
    name: String,
    path: PathBuf,
    slot: Arc<Slot>,
    size: u64,
    mtime: SystemTime,
    work: Work,
}

#[derive(Default)]
struct Work {
    /// The title as loaded, its files opened unverified (`Check::Later`).
    verify: Option<Arc<Title>>,
    parity: bool,
    packets: bool,
}

struct Loaded {
    title: Arc<Title>,
    size: u64,
    mtime: SystemTime,
    /// The title's tables and first seconds, resident while it is loaded.
    head: Option<HeadPin>,
    /// An origin title's version (`None`: a title under the roots).
    origin: Option<crate::edge::Version>,
    /// A snapshot of a growing recording, `size` its durable bytes.
    growing: Option<growing::Made>,
    /// Where the next snapshot may plan on from.
    resume: Option<fjord_media::format::Resume>,
    /// A growing recording's parity, which the next snapshot extends.
    parity: Option<Arc<growing_parity::RecordingParity>>,
}

impl Catalog {
    /// `fec`: the parity layout for titles that have no valid sidecar
    /// (`Off`: serve them without repair streams); `prefab`: whether to
    /// make prefabricated packets for titles without valid ones.
    /// `roots`: the media roots of the pool (a disk each, typically),
    /// searched in order.
    pub fn new(
        roots: &[PathBuf],
        options: TsOptions,
        fec: FecChoice,
        prefab: PrefabMode,
        prefab_share_percent: u64,
        storage: Option<Storage>,
    ) -> io::Result<Self> {
        let pool = Arc::new(Pool::new(roots)?);
        let pending = Arc::new(AtomicUsize::new(0));
        let derived = derive_worker(storage.clone(), pool.clone(), pending.clone())?;
        Ok(Self {
            pool,
            options,
            fec,
            prefab,
            prefab_budget: PrefabBudget::default(),
            prefab_share_percent,
            slots: Mutex::new(TitleSlots::new(DEFAULT_MAX_LOADED)),
            derived,
            pending,
            storage,
            edge: None,
            growing: Default::default(),
        })
    }

    /// Serves titles not under the roots from `edge`'s origin (needs the
    /// storage layer, which fills their slices).
    pub fn with_edge(mut self, edge: crate::edge::Edge) -> Self {
        self.edge = Some(edge);
        self
    }

    pub fn edge(&self) -> Option<&crate::edge::Edge> {
        self.edge.as_ref()
    }

    /// Keeps at most `max` titles loaded that nothing holds
    /// (`max_loaded_titles`).
    pub fn bounded(self, max: usize) -> Self {
        *self.slots.lock().unwrap_or_else(|e| e.into_inner()) = TitleSlots::new(max);
        self
    }

    /// The live recordings being written (told by their threads).
    pub fn growing(&self) -> &growing::Growing {
        &self.growing
    }

    pub fn roots(&self) -> Vec<PathBuf> {
        self.pool.roots().map(Path::to_owned).collect()
    }

    /// The file of a title in the first root that has it, or `NotFound`
    /// for anything outside the roots:
    /// `..`, absolute paths and symlinks leading out are refused before any
    /// file is opened (canonicalize only stats and reads links). fjord's own
    /// files (indexes, parity, temporaries) and hidden files are not titles;
    /// any other file is, and its content decides whether it can be served.
    /// `PATH/latest.mp4` (`.ts`) is the file of the newest recording of
    /// that format at `PATH` ([`Catalog::latest`]).
    pub fn resolve(&self, title: &str) -> Result<PathBuf, CatalogError> {
        // `PATH/latest.EXT`: the stream's newest recording.
        let latest = self.latest(title);
        let title = latest.as_deref().unwrap_or(title);
        let rel = Path::new(title);
        let plain = below(rel);
        let ours = rel
            .extension()
            .is_some_and(|e| OWN_EXTENSIONS.iter().any(|o| e.eq_ignore_ascii_case(o)));
        if title.is_empty() || !plain || ours {
            return Err(CatalogError::NotFound);
        }
        self.pool.find(rel).ok_or(CatalogError::NotFound)
    }

    /// The name `title` is held under: itself, or the recording a
    /// `PATH/latest.EXT` stands for.
    pub fn name_of(&self, title: &str) -> String {
        self.latest(title).unwrap_or_else(|| title.to_owned())
    }

    /// The recording `PATH/latest.EXT` stands for: the newest begun since
    /// the start ([`growing::Growing::latest`]), else the newest file named
    /// as a recording in `PATH` of the first root, where recordings are
    /// written (one recorded before a restart).
    fn latest(&self, title: &str) -> Option<String> {
        if let Some(t) = self.growing.latest(title) {
            return Some(t);
        }
        let (dir, ext) = growing::alias(title)?;
        if !below(Path::new(dir)) {
            return None;
        }
        let names = std::fs::read_dir(self.pool.roots().next()?.join(dir)).ok()?;
        let names = names.filter_map(|e| e.ok()?.file_name().into_string().ok());
        Some(format!("{dir}/{}", growing::newest(names, ext)?))
    }

    /// The title with its name, ingesting it first when it is new or its
    /// file changed. Sessions keep the name the catalog holds.
    pub async fn open(&self, title: &str) -> Result<(Arc<str>, Arc<Title>), CatalogError> {
        // `PATH/latest.EXT`: the stream's newest recording, by its own name.
        let latest = self.latest(title);
        let title = latest.as_deref().unwrap_or(title);
        let path = match (self.resolve(title), &self.edge, &self.storage) {
            (Ok(path), ..) => path,
            (Err(CatalogError::NotFound), Some(edge), Some(storage)) if plain(title) => {
                return self.open_origin(edge, storage, title).await;
            }
            (Err(e), ..) => return Err(e),
        };
        if let Some(durable) = self.growing.durable(title) {
            return self.open_growing(title, path, durable).await;
        }
        let (key, slot) = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.open(title, unused)
        };
        let mut loaded = slot.lock().await;
        let meta = std::fs::metadata(&path).map_err(|_| CatalogError::NotFound)?;
        let mtime = meta
            .modified()
            .map_err(|e| CatalogError::Failed(e.to_string()))?;
        if let Some(l) = loaded.as_ref()
            && l.size == meta.len()
            && l.mtime == mtime
            && l.growing.is_none()
            && !l.title.files_changed()
            && !l.title.damaged()
        {
            if self.auto_packets(&path, &l.title, meta.len()) {
                let work = Work {
                    packets: true,
                    ..Work::default()
                };
                self.derive(&key, &path, &slot, &meta, work);
            }
            return Ok((key, l.title.clone()));
        }
        // A title whose file shrank under its mapping or failed verification
        // (`Title::damaged`) is opened afresh: its files are checked whole
        // now, re-ingested or re-derived. A first load reads only what
        // serving needs first (a few pages, not the whole index: the first
        // PLAYs of other titles wait for no such read) and verifies the rest
        // in the background, as bulk work.
        let check = match *loaded {
            Some(_) => Check::Now,
            None => Check::Later,
        };
        let (options, fec) = (self.options, self.fec);
        let name = title.to_owned();
        let media = path.clone();
        let storage = self.storage.clone();
        let parity_path = self.pool.parity_path(&path);
        let (title, parity, head) = tokio::task::spawn_blocking(move || {
            let (title, parity) =
                load(&media, &parity_path, &options, fec, storage.as_ref(), check)?;
            let title = Arc::new(title);
            let head = storage.and_then(|s| match s.hold_head(title.clone()) {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::warn!(file = %media.display(), "title head not kept resident: {e}");
                    None
                }
            });
            Ok::<_, CatalogError>((title, parity, head))
        })
        .await
        .map_err(|e| CatalogError::Failed(e.to_string()))??;
        tracing::info!(title = %name, "title ready");
        let packets = match self.prefab {
            PrefabMode::On => !title.has_prefab(),
            PrefabMode::Off => false,
            PrefabMode::Auto => self.auto_packets(&path, &title, meta.len()),
        };
        let work = Work {
            verify: (check == Check::Later).then(|| title.clone()),
            parity: parity == Parity::Missing,
            packets,
        };
        self.derive(&name, &path, &slot, &meta, work);
        *loaded = Some(Loaded {
            title: title.clone(),
            size: meta.len(),
            mtime,
            head,
            origin: None,
            growing: None,
            resume: None,
            parity: None,
        });
        Ok((key, title))
    }

    /// A recording being written, `durable` bytes of its file at `path`
    /// whole fragments: the snapshot loaded if it holds them all, else one
    /// made now, with its parity so far (no packets or verification: they
    /// are made when the recording ends and it is ingested whole).
    async fn open_growing(
        &self,
        title: &str,
        path: PathBuf,
        durable: u64,
    ) -> Result<(Arc<str>, Arc<Title>), CatalogError> {
        let (key, slot) = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.open(title, unused)
        };
        let mut loaded = slot.lock().await;
        let snapshot = loaded.as_ref().filter(|l| l.growing.is_some());
        let made = snapshot.and_then(|l| Some((l.size, l.growing?)));
        let len = match growing::open(durable, made, Instant::now()) {
            growing::Open::NotYet => {
                let why = "the recording has no whole fragment yet; ask again in a second";
                return Err(CatalogError::Unavailable(why.to_owned()));
            }
            growing::Open::Loaded => {
                let t = snapshot.map(|l| l.title.clone());
                return t.map(|t| (key, t)).ok_or(CatalogError::NotFound);
            }
            growing::Open::Snapshot(len) => len,
        };
        let (options, fec) = (self.options, self.fec);
        // Planned on from the snapshot loaded when it can be.
        let prev = snapshot.and_then(|l| Some((l.title.clone(), l.resume.clone()?)));
        let prev_parity = snapshot.and_then(|l| l.parity.clone());
        let parity_path = self.pool.parity_target(&path);
        let at = Instant::now();
        let (t, resume, incremental, parity) = tokio::task::spawn_blocking(move || {
            let prev = prev.as_ref().map(|(t, r)| (t.index(), r));
            let s = fjord_media::ingest::snapshot(&path, len, &options, prev).map_err(classify)?;
            let mut t = Title::new(s.index, &path)
                .map_err(|e| failed(&format_args!("{}: {e}", path.display())))?;
            t.grows();
            let parity = growing_parity::RecordingParity::attach(
                prev_parity.filter(|_| s.incremental),
                &mut t,
                &parity_path,
                fec,
            );
            Ok::<_, CatalogError>((Arc::new(t), s.resume, s.incremental, parity))
        })
        .await
        .map_err(|e| CatalogError::Failed(e.to_string()))??;
        let took = at.elapsed();
        if let Some((p, true)) = &parity {
            p.clone().extend_in_background(t.clone());
        }
        self.growing.made(incremental);
        tracing::debug!(
            title,
            len,
            incremental,
            took_us = took.as_micros() as u64,
            "snapshot made"
        );
        *loaded = Some(Loaded {
            title: t.clone(),
            size: len,
            mtime: SystemTime::UNIX_EPOCH,
            head: None,
            origin: None,
            growing: Some(growing::Made {
                at,
                took,
                planned_on: !incremental && resume.is_some(),
            }),
            resume,
            parity: parity.map(|(p, _)| p),
        });
        Ok((key, t))
    }

    /// A title of the edge's origin, at its version there now: the one
    /// loaded if it is that version, else loaded afresh (sessions of the
    /// old version keep theirs).
    async fn open_origin(
        &self,
        edge: &crate::edge::Edge,
        storage: &Storage,
        title: &str,
    ) -> Result<(Arc<str>, Arc<Title>), CatalogError> {
        let version = edge.version(title).await?;
        let (key, slot) = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            slots.open(title, unused)
        };
        let mut loaded = slot.lock().await;
        if let Some(l) = loaded.as_ref()
            && l.origin.as_ref() == Some(&version)
            && !l.title.files_changed()
        {
            return Ok((key, l.title.clone()));
        }
        let (t, head) = edge.load(title, &version, storage).await?;
        *loaded = Some(Loaded {
            title: t.clone(),
            size: version.media_size(),
            mtime: SystemTime::UNIX_EPOCH,
            head: Some(head),
            origin: Some(version),
            growing: None,
            resume: None,
            parity: None,
        });
        Ok((key, t))
    }
}

/// Whether `title` is a name an origin may hold: the name `fjord publish`
/// gives a file (no directories, not hidden, not one of fjord's own).
/// Whether `rel` names something below a root: no `..`, no absolute
/// path, nothing hidden.
fn below(rel: &Path) -> bool {
    rel.components().all(|c| match c {
        Component::Normal(name) => !name.as_encoded_bytes().starts_with(b"."),
        _ => false,
    })
}

fn plain(title: &str) -> bool {
    let ours = Path::new(title)
        .extension()
        .is_some_and(|e| OWN_EXTENSIONS.iter().any(|o| e.eq_ignore_ascii_case(o)));
    !title.is_empty() && !title.contains('/') && !title.starts_with('.') && !ours
}

impl Catalog {
    /// With `prefab = "auto"`: counts a play of the title at `path`; whether
    /// its packet file should be made now.
    fn auto_packets(&self, path: &Path, title: &Title, size: u64) -> bool {
        if self.prefab != PrefabMode::Auto {
            return false;
        }
        let share = prefab_budget::share_of_disk(path, self.prefab_share_percent);
        self.prefab_budget
            .played(path, size, title.has_prefab(), share)
    }

    /// Queues the background job that verifies the title's files and/or
    /// makes its parity and packet file.
    fn derive(
        &self,
        name: &str,
        path: &Path,
        slot: &Arc<Slot>,
        meta: &std::fs::Metadata,
        work: Work,
    ) {
        if work.verify.is_none() && !work.parity && !work.packets {
            return;
        }
        let packets = work.packets;
        let job = DeriveJob {
            name: name.to_owned(),
            path: path.to_owned(),
            slot: slot.clone(),
            size: meta.len(),
            mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            work,
        };
        self.pending.fetch_add(1, Ordering::Relaxed);
        if self.derived.try_send(job).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(title = %name, "{DERIVE_QUEUE} titles wait already; served unverified, without repair streams or prefabricated packets");
            if packets {
                self.prefab_budget.failed(path);
            }
        }
    }

    /// Background jobs (verification, parity, packet files) queued or
    /// being worked on.
    pub fn pending_jobs(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// The titles loaded now (opened by a client since they last changed),
    /// by name. Titles busy loading are skipped.
    pub fn loaded(&self) -> Vec<(Arc<str>, Arc<Title>)> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut titles: Vec<_> = (slots.iter())
            .filter_map(|(name, slot)| {
                let l = slot.try_lock().ok()?;
                Some((name.clone(), l.as_ref()?.title.clone()))
            })
            .collect();
        titles.sort_by(|a, b| a.0.cmp(&b.0));
        titles
    }

    /// Loaded titles a file of which failed to read while playing (their
    /// bytes were rebuilt from parity, or their sessions ended): they need
    /// `fjord repair`. Titles busy loading are skipped.
    pub fn needing_repair(&self) -> Vec<String> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = slots
            .iter()
            .filter(|(_, slot)| {
                slot.try_lock()
                    .is_ok_and(|l| l.as_ref().is_some_and(|l| l.title.needs_repair()))
            })
            .map(|(name, _)| name.to_string())
            .collect();
        names.sort();
        names
    }
}

/// Counts a background job done when dropped, however its work ends.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The thread that verifies loaded titles and writes sidecars and packet
/// files for queued titles, then drops each loaded title if it is still
/// that file's, so the next client gets it with them (sessions playing
/// keep theirs).
fn derive_worker(
    storage: Option<Storage>,
    pool: Arc<Pool>,
    pending: Arc<AtomicUsize>,
) -> io::Result<mpsc::SyncSender<DeriveJob>> {
    let (tx, rx) = mpsc::sync_channel::<DeriveJob>(DERIVE_QUEUE);
    std::thread::Builder::new()
        .name("fjord-derive".to_owned())
        .spawn(move || {
            // SAFETY: a plain syscall; on Linux a thread id names just this
            // thread, so only this thread is reniced.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
            fjord_storage::ioprio::bulk();
            for job in rx {
                let _done = Done(&pending);
                let mut pacer = bulk_pacer(storage.as_ref(), &job.path);
                if let Some(title) = &job.work.verify {
                    verify(
                        &job.name,
                        title,
                        &mut background_pacer(storage.as_ref(), &job.path),
                    );
                }
                let started = Instant::now();
                let mut made = false;
                let mut outcome = |r: Result<(), String>, done: &str, without: &str| match r {
                    Ok(()) => {
                        made = true;
                        let seconds = started.elapsed().as_secs_f32();
                        tracing::info!(title = %job.name, seconds, "{done}");
                    }
                    Err(e) => tracing::warn!(title = %job.name, "{without}: {e}"),
                };
                if job.work.parity {
                    let target = pool.parity_target(&job.path);
                    outcome(
                        make_parity(&job.path, &target, &mut deltas(&mut pacer)),
                        "parity written; repair streams offered to new sessions",
                        "no parity, served without repair streams",
                    );
                }
                if job.work.packets {
                    outcome(
                        fjord_media::prefab::prefabricate(&job.path, &mut deltas(&mut pacer))
                            .map(drop)
                            .map_err(|e| e.to_string()),
                        "packets prefabricated; new sessions are sent them",
                        "no prefabricated packets, headers built per packet",
                    );
                }
                let mut loaded = job.slot.blocking_lock();
                if made
                    && loaded
                        .as_ref()
                        .is_some_and(|l| l.size == job.size && l.mtime == job.mtime)
                {
                    *loaded = None;
                }
            }
        })?;
    Ok(tx)
}

/// Checks a title's files whole (`Title::verify`); one that fails is
/// damaged: its sessions end and the next client loads it afresh.
fn verify(name: &str, title: &Title, pacer: &mut dyn FnMut(u64)) {
    let started = Instant::now();
    match title.verify(pacer) {
        Ok(()) => {
            let seconds = started.elapsed().as_secs_f32();
            tracing::info!(title = %name, seconds, "files verified");
        }
        Err(VerifyError::Damaged(e)) => tracing::error!(
            title = %name,
            "{e}; its sessions end and the title is loaded afresh (run `fjord verify` on it)"
        ),
        Err(VerifyError::Unreadable(e)) => tracing::error!(
            title = %name,
            "{e} while verifying; served on (what sessions read is rebuilt), run `fjord repair` on it"
        ),
    }
}

/// Writes the parity of `media` at `target` (on another disk of the pool,
/// or beside it).
fn make_parity(
    media: &Path,
    target: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), String> {
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    fjord_fec::protect_to(media, target, progress)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Whether a title has the parity its index asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parity {
    /// The index records no block layout (ingested with `--fec off`).
    None,
    /// A valid sidecar is attached.
    Attached,
    /// The index records a layout, but the sidecar is missing or unusable.
    Missing,
}

/// A progress callback (bytes done so far, of a total) that hands `read`
/// the bytes done since its last call.
fn deltas(read: &mut impl FnMut(u64)) -> impl FnMut(u64, u64) + '_ {
    let mut last = 0;
    move |done, _| {
        read(done.saturating_sub(last));
        last = done;
    }
}

/// Bulk work on the file at `path` waits for its turns on the file's disk
/// (the storage layer's scheduler: playing sessions first); without a
/// storage layer it runs freely. It is called with the bytes read since
/// the last call.
fn bulk_pacer(storage: Option<&Storage>, path: &Path) -> impl FnMut(u64) + Send + use<> {
    pacer(storage.map(|s| s.bulk_pacer(device_of(path))))
}

/// [`bulk_pacer`] for work nobody waits for (verification): at the floor
/// bulk keeps, a tenth of the disk.
fn background_pacer(storage: Option<&Storage>, path: &Path) -> impl FnMut(u64) + Send + use<> {
    pacer(storage.map(|s| s.background_pacer(device_of(path))))
}

fn pacer(mut pacer: Option<fjord_storage::BulkPacer>) -> impl FnMut(u64) + Send {
    move |bytes| {
        if let Some(p) = &mut pacer {
            p.read(bytes);
        }
    }
}

fn device_of(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.dev())
}

/// The title (ingested with the layouts `fec` chooses if its index is
/// missing or stale, as bulk work), and where its parity stands.
fn load(
    path: &Path,
    parity_path: &Path,
    options: &TsOptions,
    fec: FecChoice,
    storage: Option<&Storage>,
    check: Check,
) -> Result<(Title, Parity), CatalogError> {
    // Two threads read the media at once (hash and plan): one pacer for both.
    let pacer = std::sync::Mutex::new(bulk_pacer(storage, path));
    let (index, report) = fjord_media::ingest::open_or_ingest_paced(
        path,
        options,
        &fjord_fec::layouts(fec),
        &mut |_, _| {},
        &|bytes| pacer.lock().unwrap_or_else(|e| e.into_inner())(bytes),
        check,
    )
    .map_err(classify)?;
    let layout = index.tracks().any(|t| t.fec_layout().is_some());
    if let Some(r) = report {
        for w in &r.warnings {
            tracing::warn!(file = %path.display(), "{w}");
        }
    }
    let mut title =
        Title::new(index, path).map_err(|e| failed(&format_args!("{}: {e}", path.display())))?;
    let packets = fjord_media::prefab::prefab_path_for(path);
    match title.attach_prefab(&packets, check) {
        Ok(()) => tracing::info!(file = %path.display(), "prefabricated packets found"),
        Err(fjord_media::prefab::PrefabError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(file = %path.display(), "{}: {e}", packets.display()),
    }
    let sidecar = parity_path;
    if !layout {
        return Ok((title, Parity::None));
    }
    let index_path = fjord_media::index::index_path_for(path);
    let parity = match title.attach_fec(sidecar, &index_path, check) {
        Ok(()) => {
            tracing::info!(file = %path.display(), parity = %sidecar.display(), "parity sidecar found; repair streams offered");
            Parity::Attached
        }
        Err(fjord_fec::SidecarError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
            tracing::info!(file = %path.display(), "no parity sidecar yet");
            Parity::Missing
        }
        Err(e @ fjord_fec::SidecarError::Growing) => {
            tracing::info!(file = %path.display(), "{e}");
            Parity::Missing
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), "{}: {e}", sidecar.display());
            Parity::Missing
        }
    };
    Ok((title, parity))
}

/// Extensions of files fjord writes beside the media.
const OWN_EXTENSIONS: &[&str] = &["fjidx", "fjfec", "fjpkt", "fjfrm"];

/// What a client is told when a title cannot be served: why, never where
/// (the operator's log has the file's path).
fn classify(e: fjord_media::ingest::IngestError) -> CatalogError {
    use fjord_media::ingest::IngestError as E;
    match e {
        E::Open { .. } | E::NotAFile { .. } => CatalogError::NotFound,
        E::Unsupported { reason, .. } => CatalogError::Unsupported(reason),
        E::Empty { .. } => CatalogError::Unsupported("the file is empty; nothing to serve".into()),
        E::TooLarge { .. } => {
            CatalogError::Unsupported(fjord_media::format::FormatError::TooLarge.to_string())
        }
        E::WriteIndex { .. } | E::ReadBack { .. } | E::Changed { .. } => failed(&e),
    }
}

/// A failure the client is told of without detail; the log has it whole.
fn failed(e: &dyn std::fmt::Display) -> CatalogError {
    tracing::warn!("{e}");
    CatalogError::Failed("the title could not be prepared; the server's log says why".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of two roots: a title is found in the first root that has
    /// it, and no name leads out of the roots.
    #[test]
    fn a_pool_finds_titles_in_every_root_in_order() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("both.ts"), b"a").unwrap();
        std::fs::write(b.path().join("both.ts"), b"b").unwrap();
        std::fs::create_dir(b.path().join("films")).unwrap();
        std::fs::write(b.path().join("films/only-b.ts"), b"b").unwrap();
        let roots = [a.path().to_owned(), b.path().to_owned()];
        let c = Catalog::new(
            &roots,
            TsOptions::default(),
            FecChoice::Off,
            PrefabMode::Off,
            25,
            None,
        )
        .unwrap();
        let b_root = b.path().canonicalize().unwrap();
        let a_root = a.path().canonicalize().unwrap();
        assert_eq!(c.resolve("both.ts").unwrap(), a_root.join("both.ts"));
        assert_eq!(
            c.resolve("films/only-b.ts").unwrap(),
            b_root.join("films/only-b.ts")
        );
        assert!(matches!(c.resolve("none.ts"), Err(CatalogError::NotFound)));
        let up = format!(
            "../{}/both.ts",
            b_root.file_name().unwrap().to_str().unwrap()
        );
        assert!(matches!(c.resolve(&up), Err(CatalogError::NotFound)));
    }
}

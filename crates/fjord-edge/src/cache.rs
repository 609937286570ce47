//! The slice cache: objects of the origin read through local files of
//! 2 MiB slices ([`crate::slice`]).
//!
//! A slice is one ranged GET carrying `If-Match` with the ETag the object
//! was opened at, so bytes of two versions never mix: a changed object
//! answers 412 and the reader reopens it ([`CacheError::Changed`]). One GET
//! per slice however many readers want it: the first starts the fetch,
//! the others await the same cell and are woken when it lands (tokio's
//! `OnceCell`; no polling); if the first reader goes away, a waiter takes
//! the fetch over. A slice is written at its offset in the object's
//! sparse file ([`crate::files`]) and then noted in the persisted map
//! ([`crate::map`]) with its BLAKE3; every read from disk checks it, and a
//! slice that fails is dropped and fetched again. `capacity` bounds the bytes kept; what to evict is the
//! policy's choice ([`crate::policy`], S4LRU).

use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use tokio::sync::OnceCell;

use crate::files;
use crate::map::{Journal, SliceId, Stored, Version, Versions};
use crate::policy::SegmentedLru;
use crate::slice;

/// Why a read through the cache failed. Cloned to every reader of a
/// slice whose fetch failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    #[error("{key}: changed at the origin since it was opened (ETag {etag}); open it again")]
    Changed { key: String, etag: String },
    #[error("{key}: not at the origin")]
    NotFound { key: String },
    #[error("{key}: the origin has no ETag for it; a cache needs one to tell versions apart")]
    NoEtag { key: String },
    #[error("{key}: bytes {range:?} are past its end ({size} bytes)")]
    OutOfRange {
        key: String,
        range: Range<u64>,
        size: u64,
    },
    #[error("{key}: {len} bytes asked at once; at most {MAX_READ} are read into memory")]
    TooLarge { key: String, len: u64 },
    #[error("{key}: origin: {message}")]
    Origin { key: String, message: String },
    #[error("cache directory {path}: {message}")]
    Disk { path: PathBuf, message: String },
}

/// The most [`SliceCache::read`] gathers into memory in one call.
pub const MAX_READ: u64 = 64 << 20;

/// One version of an object at the origin, as opened: the slices read
/// through it are of this version only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: ObjectPath,
    pub etag: String,
    pub size: u64,
}

/// What an object is to its title, told by its name: fjord publishes a
/// title's index as `NAME.fjidx`, its packets as `NAME.fjpkt`, its parity
/// as `NAME.fjfec` and a Matroska file's frame table as `NAME.fjfrm` beside
/// the media `NAME`. Origin bytes are counted per part, so an operator
/// sees what a cache's misses cost in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Media,
    Index,
    Packets,
    Frames,
    Parity,
}

impl Part {
    pub const ALL: [Part; 5] = [
        Part::Media,
        Part::Index,
        Part::Packets,
        Part::Frames,
        Part::Parity,
    ];

    pub fn of(key: &str) -> Part {
        match key.rsplit_once('.').map(|(_, ext)| ext) {
            Some("fjidx") => Part::Index,
            Some("fjpkt") => Part::Packets,
            Some("fjfrm") => Part::Frames,
            Some("fjfec") => Part::Parity,
            _ => Part::Media,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Part::Media => "media",
            Part::Index => "index",
            Part::Packets => "packets",
            Part::Frames => "frames",
            Part::Parity => "parity",
        }
    }
}

/// What the cache has done since it started (bytes and requests).
#[derive(Debug, Default)]
pub struct Stats {
    /// HEADs: objects opened.
    pub origin_heads: AtomicU64,
    /// Ranged GETs: slices fetched.
    pub origin_requests: AtomicU64,
    pub origin_bytes: AtomicU64,
    /// `origin_bytes` by the [`Part`] of a title fetched, in its order.
    pub origin_part_bytes: [AtomicU64; 5],
    /// Time spent in ranged GETs, in microseconds (over `origin_requests`:
    /// their mean latency).
    pub origin_micros: AtomicU64,
    pub origin_errors: AtomicU64,
    /// Bytes of slices read from local disk.
    pub hit_bytes: AtomicU64,
    /// Bytes of slices a reader had to wait for from the origin (a reader
    /// that joined a fetch in flight counts too).
    pub miss_bytes: AtomicU64,
    /// Reads that joined a fetch already in flight.
    pub joined: AtomicU64,
    pub evictions: AtomicU64,
    /// Slices whose bytes on disk failed their checksum.
    pub corrupt: AtomicU64,
    /// Objects opened at their last known version because the origin did
    /// not answer.
    pub stale_opens: AtomicU64,
}

type Flight = Arc<OnceCell<Result<Bytes, CacheError>>>;

struct State {
    policy: SegmentedLru<SliceId>,
    stored: HashMap<SliceId, Stored>,
    /// Stored slices checked against their hash since this process
    /// started (fetched by it, or read back whole): a hold on one reads
    /// nothing.
    checked: HashSet<SliceId>,
    inflight: HashMap<SliceId, Flight>,
    /// Slices stored per object file: a file with none is removed, unless
    /// it is mapped.
    per_file: HashMap<String, usize>,
    /// Holds on slices ([`SliceCache::hold`]): a held slice is never
    /// punched out, since a server may have its pages locked and be sending
    /// them.
    held: HashMap<SliceId, u32>,
    /// Held slices the policy evicted: evicted when let go.
    deferred: HashSet<SliceId>,
    /// Deferred slices let go since the last store: evicted at the next.
    released: Vec<SliceId>,
    /// Object files a server maps ([`SliceCache::map`]): punched, never
    /// removed, so the mapping keeps seeing the slices that land.
    mapped: HashMap<String, usize>,
    journal: Journal,
    versions: Versions,
}

/// Objects of one origin, cached in slices under one directory.
pub struct SliceCache {
    store: Arc<dyn ObjectStore>,
    objects: PathBuf,
    state: Mutex<State>,
    pub stats: Stats,
}

enum Step {
    Disk(Stored),
    Fetch(Flight),
}

impl SliceCache {
    /// Opens the cache in `dir` (made if missing) holding at most
    /// `capacity` bytes of slices, with what an earlier run left there:
    /// slices the map names and the disk holds are kept, anything else in
    /// the directory's `objects/` is removed.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        dir: &Path,
        capacity: u64,
    ) -> Result<SliceCache, CacheError> {
        let disk = |e: io::Error| CacheError::Disk {
            path: dir.to_owned(),
            message: e.to_string(),
        };
        let objects = dir.join("objects");
        std::fs::create_dir_all(&objects).map_err(disk)?;
        let (mut journal, live) = Journal::open(dir).map_err(disk)?;
        let mut policy = SegmentedLru::s4lru(capacity);
        let mut stored = HashMap::new();
        let mut dropped = Vec::new();
        for (id, s) in live {
            let on_disk = std::fs::metadata(objects.join(id.file()));
            let end = id.index * slice::SLICE_BYTES + s.len;
            if !on_disk.is_ok_and(|m| m.len() >= end) {
                dropped.push(id);
                continue;
            }
            stored.insert(id.clone(), s);
            for gone in policy.insert(id, s.len) {
                stored.remove(&gone);
                dropped.push(gone);
            }
        }
        let mut live: HashMap<String, HashSet<u64>> = HashMap::new();
        for id in stored.keys() {
            live.entry(id.file()).or_default().insert(id.index);
        }
        files::tidy(&objects, &live).map_err(disk)?;
        let per_file = live.into_iter().map(|(f, s)| (f, s.len())).collect();
        for id in &dropped {
            journal.drop_slice(id).map_err(disk)?;
        }
        Ok(SliceCache {
            store,
            objects,
            state: Mutex::new(State {
                policy,
                stored,
                checked: HashSet::new(),
                inflight: HashMap::new(),
                per_file,
                held: HashMap::new(),
                deferred: HashSet::new(),
                released: Vec::new(),
                mapped: HashMap::new(),
                journal,
                versions: Versions::open(dir),
            }),
            stats: Stats::default(),
        })
    }

    /// The object's current version at the origin (a HEAD request). If
    /// the origin does not answer (down, failing; not a 404), the version
    /// it was last opened at, whose cached slices then still read.
    pub async fn open_object(&self, key: &ObjectPath) -> Result<Object, CacheError> {
        self.stats.origin_heads.fetch_add(1, Ordering::Relaxed);
        let head = self.store.head(key).await.map_err(|e| {
            self.stats.origin_errors.fetch_add(1, Ordering::Relaxed);
            origin_error(key, "", e)
        });
        let meta = match head {
            Ok(meta) => meta,
            Err(e @ CacheError::Origin { .. }) => return self.last_known(key).ok_or(e),
            Err(e) => return Err(e),
        };
        let etag = meta.e_tag.ok_or_else(|| CacheError::NoEtag {
            key: key.to_string(),
        })?;
        let version = Version {
            etag: etag.clone(),
            size: meta.size,
        };
        let noted = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.versions.note(key.as_ref(), version)
        };
        if let Err(e) = noted {
            tracing::warn!(object = %key, "cache versions not saved: {e}");
        }
        Ok(Object {
            key: key.clone(),
            etag,
            size: meta.size,
        })
    }

    /// The version `key` was last opened at (kept across restarts), to
    /// open it at when the origin does not answer.
    pub fn last_known(&self, key: &ObjectPath) -> Option<Object> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let v = st.versions.get(key.as_ref())?;
        self.stats.stale_opens.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(object = %key, etag = %v.etag, "origin not answering: opened at the last version seen");
        Some(Object {
            key: key.clone(),
            etag: v.etag.clone(),
            size: v.size,
        })
    }

    /// Bytes `range` of `object` (at most [`MAX_READ`]), from its slices.
    pub async fn read(&self, object: &Object, range: Range<u64>) -> Result<Bytes, CacheError> {
        if range.start > range.end || range.end > object.size {
            return Err(CacheError::OutOfRange {
                key: object.key.to_string(),
                range,
                size: object.size,
            });
        }
        if range.end - range.start > MAX_READ {
            return Err(CacheError::TooLarge {
                key: object.key.to_string(),
                len: range.end - range.start,
            });
        }
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        for i in slice::covering(&range, object.size) {
            let b = self.slice(object, i).await?;
            let at = slice::bounds(i, object.size).start;
            let from = range.start.max(at) - at;
            let to = range.end.min(at + b.len() as u64) - at;
            out.extend_from_slice(&b[from as usize..to as usize]);
        }
        Ok(out.freeze())
    }

    /// Slice `i` of `object`: from disk if it is there and intact, else
    /// from the origin, once however many ask at the same time.
    pub async fn slice(&self, object: &Object, i: u64) -> Result<Bytes, CacheError> {
        let bounds = slice::bounds(i, object.size);
        if bounds.is_empty() {
            return Err(CacheError::OutOfRange {
                key: object.key.to_string(),
                range: bounds,
                size: object.size,
            });
        }
        let id = SliceId {
            object: object.key.to_string(),
            etag: object.etag.clone(),
            index: i,
        };
        let flight = match self.step(&id) {
            Step::Disk(stored) => match self.read_stored(&id, stored).await {
                Some(b) => {
                    self.stats
                        .hit_bytes
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    return Ok(b);
                }
                None => self.forget(&id),
            },
            Step::Fetch(flight) => flight,
        };
        let got = flight
            .get_or_init(|| self.fetch(object, &id, bounds.clone()))
            .await
            .clone();
        if let Ok(b) = &got {
            self.stats
                .miss_bytes
                .fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        got
    }

    /// Under the lock: the slice on disk, else the fetch in flight for it,
    /// else a new one.
    fn step(&self, id: &SliceId) -> Step {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = st.stored.get(id).copied() {
            st.policy.hit(id);
            return Step::Disk(s);
        }
        Step::Fetch(self.flight(&mut st, id))
    }

    /// The fetch in flight for `id`, or a new one.
    fn flight(&self, st: &mut State, id: &SliceId) -> Flight {
        let flight = st.inflight.entry(id.clone()).or_default();
        if Arc::strong_count(flight) > 1 {
            self.stats.joined.fetch_add(1, Ordering::Relaxed);
        }
        flight.clone()
    }

    /// The slice's bytes from its file if they match their checksum.
    async fn read_stored(&self, id: &SliceId, stored: Stored) -> Option<Bytes> {
        let path = self.objects.join(id.file());
        let at = id.index * slice::SLICE_BYTES;
        let read = tokio::task::spawn_blocking(move || files::read_slice(&path, at, stored.len));
        let read = read.await;
        let bytes = read.ok()?.ok()?;
        if bytes.len() as u64 == stored.len && *blake3::hash(&bytes).as_bytes() == stored.hash {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.checked.insert(id.clone());
            return Some(Bytes::from(bytes));
        }
        self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(object = %id.object, slice = id.index, "cached slice failed its checksum; fetching it again");
        None
    }

    /// One ranged GET with If-Match, the slice stored, the flight ended.
    async fn fetch(
        &self,
        object: &Object,
        id: &SliceId,
        bounds: Range<u64>,
    ) -> Result<Bytes, CacheError> {
        let got = self.get(object, bounds.clone()).await;
        let got = match got {
            Ok(b) => self.store_slice(id, object.size, b).await,
            Err(e) => Err(e),
        };
        if got.is_err() {
            self.stats.origin_errors.fetch_add(1, Ordering::Relaxed);
        }
        // Readers that come after this find the slice stored, or start a
        // new flight after an error.
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.inflight.remove(id);
        got
    }

    async fn get(&self, object: &Object, bounds: Range<u64>) -> Result<Bytes, CacheError> {
        self.stats.origin_requests.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let got = self.get_bytes(object, bounds).await;
        let took = started.elapsed().as_micros() as u64;
        self.stats.origin_micros.fetch_add(took, Ordering::Relaxed);
        got
    }

    async fn get_bytes(&self, object: &Object, bounds: Range<u64>) -> Result<Bytes, CacheError> {
        let opts = GetOptions {
            if_match: Some(object.etag.clone()),
            range: Some(GetRange::Bounded(bounds.clone())),
            ..Default::default()
        };
        let key = &object.key;
        let res = (self.store.get_opts(key, opts).await)
            .map_err(|e| origin_error(key, &object.etag, e))?;
        let bytes = (res.bytes().await).map_err(|e| origin_error(key, &object.etag, e))?;
        let n = bytes.len() as u64;
        self.stats.origin_bytes.fetch_add(n, Ordering::Relaxed);
        let part = Part::of(key.as_ref()) as usize;
        self.stats.origin_part_bytes[part].fetch_add(n, Ordering::Relaxed);
        let want = bounds.end - bounds.start;
        if bytes.len() as u64 != want {
            return Err(CacheError::Origin {
                key: key.to_string(),
                message: format!(
                    "asked {want} bytes at {}, got {}",
                    bounds.start,
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    /// Writes the slice into its object's file, notes it in the map and the
    /// policy, and gives back the room of what the policy evicts for it.
    async fn store_slice(
        &self,
        id: &SliceId,
        size: u64,
        bytes: Bytes,
    ) -> Result<Bytes, CacheError> {
        let stored = Stored {
            len: bytes.len() as u64,
            hash: *blake3::hash(&bytes).as_bytes(),
        };
        let path = self.objects.join(id.file());
        let at = id.index * slice::SLICE_BYTES;
        let (b, p) = (bytes.clone(), path.clone());
        let written = tokio::task::spawn_blocking(move || files::write_slice(&p, size, at, &b));
        let disk = |message: String| CacheError::Disk {
            path: path.clone(),
            message,
        };
        written
            .await
            .map_err(|e| disk(e.to_string()))?
            .map_err(|e| disk(e.to_string()))?;
        let (evicted, journaled) = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let st = &mut *st;
            if st.stored.insert(id.clone(), stored).is_none() {
                *st.per_file.entry(id.file()).or_default() += 1;
            }
            st.checked.insert(id.clone());
            let journaled = st.journal.put(id, stored);
            let mut gone = st.policy.insert(id.clone(), stored.len);
            gone.extend(std::mem::take(&mut st.released));
            let evicted: Vec<_> = gone.into_iter().filter_map(|g| evict(st, g)).collect();
            let _ = st.journal.compact_if_large(st.stored.iter());
            (evicted, journaled)
        };
        self.stats
            .evictions
            .fetch_add(evicted.len() as u64, Ordering::Relaxed);
        for (gone, len, last) in evicted {
            // A reader of the slice meanwhile reads a hole, which fails its
            // checksum: it fetches the slice again.
            let file = self.objects.join(gone.file());
            let at = gone.index * slice::SLICE_BYTES;
            let _ = match last {
                true => std::fs::remove_file(file),
                false => files::punch(&file, at..at + len),
            };
        }
        journaled.map_err(|e| disk(e.to_string()))?;
        Ok(bytes)
    }

    /// Drops a slice that failed its check; the fetch that replaces it.
    fn forget(&self, id: &SliceId) -> Flight {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.stored.remove(id).is_some() {
            st.checked.remove(id);
            st.policy.remove(id);
            if let Some(n) = st.per_file.get_mut(&id.file()) {
                // The refetch rewrites the slice in place: the file stays.
                *n = n.saturating_sub(1);
            }
            let _ = st.journal.drop_slice(id);
        }
        self.flight(&mut st, id)
    }

    /// Holds the slices of `object` covering `range` once they are on
    /// local disk (fetched, or found there and checked once since this
    /// process started), so their bytes can be read and sent from the
    /// object's file ([`SliceCache::map`]): while the hold lives, none of
    /// them is punched out.
    pub async fn hold(
        self: &Arc<Self>,
        object: &Object,
        range: Range<u64>,
    ) -> Result<SliceHold, CacheError> {
        let slices = slice::covering(&range, object.size);
        let hold = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<SliceId> = slices.clone().map(|i| id_of(object, i)).collect();
            for id in &ids {
                *st.held.entry(id.clone()).or_default() += 1;
            }
            SliceHold {
                cache: self.clone(),
                ids,
            }
        };
        let wanted = |i| {
            let b = slice::bounds(i, object.size);
            range
                .end
                .min(b.end)
                .saturating_sub(range.start.max(b.start))
        };
        let present = slices.map(|i| self.present(object, i, wanted(i)));
        futures::future::try_join_all(present).await?;
        Ok(hold)
    }

    /// Slice `i` on disk and checked: nothing read when it is known so
    /// (then the `wanted` bytes of it count as hit).
    async fn present(&self, object: &Object, i: u64, wanted: u64) -> Result<(), CacheError> {
        let id = id_of(object, i);
        let known = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let known = st.checked.contains(&id) && st.stored.contains_key(&id);
            if known && !st.policy.hit(&id) {
                rescue(&mut st, &id);
            }
            known
        };
        match known {
            true => {
                self.stats.hit_bytes.fetch_add(wanted, Ordering::Relaxed);
                Ok(())
            }
            false => self.slice(object, i).await.map(|_| ()),
        }
    }

    /// The file `object`'s slices are kept in, made (sparse, as long as
    /// the object) if it is not there, and kept while the returned handle
    /// lives, so a mapping of it sees every slice that lands.
    pub fn map(self: &Arc<Self>, object: &Object) -> Result<MappedObject, CacheError> {
        let path = self.object_path(object);
        files::make(&path, object.size).map_err(|e| CacheError::Disk {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let file = id_of(object, 0).file();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *st.mapped.entry(file.clone()).or_default() += 1;
        Ok(MappedObject {
            cache: self.clone(),
            file,
            path,
        })
    }

    /// Whether every slice of `object` is stored: reading it fetches
    /// nothing (unless a slice fails its check).
    pub fn complete(&self, object: &Object) -> bool {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (0..slice::count(object.size)).all(|i| st.stored.contains_key(&id_of(object, i)))
    }

    /// Bytes of slices held.
    pub fn used(&self) -> u64 {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.policy.used()
    }

    /// The file `object`'s slices are kept in, each at its offset (whether
    /// or not any is there yet).
    pub fn object_path(&self, object: &Object) -> PathBuf {
        self.objects.join(id_of(object, 0).file())
    }
}

fn id_of(object: &Object, index: u64) -> SliceId {
    SliceId {
        object: object.key.to_string(),
        etag: object.etag.clone(),
        index,
    }
}

/// Takes `gone`, which the policy evicted or whose deferral ended, out of
/// the map, unless it is held (then its eviction waits for the last
/// hold). What to do on disk: punch it, or remove its file when it was the
/// file's last slice and no one maps the file.
fn evict(st: &mut State, gone: SliceId) -> Option<(SliceId, u64, bool)> {
    if st.held.contains_key(&gone) {
        st.deferred.insert(gone);
        return None;
    }
    st.deferred.remove(&gone);
    st.policy.remove(&gone);
    let s = st.stored.remove(&gone)?;
    st.checked.remove(&gone);
    let _ = st.journal.drop_slice(&gone);
    let file = gone.file();
    let last = st.per_file.get_mut(&file).is_some_and(|n| {
        *n -= 1;
        *n == 0
    });
    if last {
        st.per_file.remove(&file);
    }
    let remove = last && !st.mapped.contains_key(&file);
    Some((gone, s.len, remove))
}

/// A read of a slice the policy evicted while it was held: it is used
/// again, so it goes back into the policy rather than being punched when
/// let go (a follower of a session would fetch it again). What the policy
/// evicts for it goes at the next store, as deferred slices do.
fn rescue(st: &mut State, id: &SliceId) {
    let Some(len) = st.stored.get(id).map(|s| s.len) else {
        return;
    };
    st.deferred.remove(id);
    st.released.retain(|r| r != id);
    let gone = st.policy.insert(id.clone(), len);
    st.released.extend(gone);
}

/// Slices kept on disk while this lives ([`SliceCache::hold`]).
pub struct SliceHold {
    cache: Arc<SliceCache>,
    ids: Vec<SliceId>,
}

impl Drop for SliceHold {
    fn drop(&mut self) {
        // No disk work here (this may run under a caller's lock): a
        // deferred eviction is left to the next store.
        let mut st = self.cache.state.lock().unwrap_or_else(|p| p.into_inner());
        for id in self.ids.drain(..) {
            let Some(n) = st.held.get_mut(&id) else {
                continue;
            };
            *n -= 1;
            if *n == 0 {
                st.held.remove(&id);
                if st.deferred.contains(&id) {
                    st.released.push(id);
                }
            }
        }
    }
}

/// An object's file, kept while this lives ([`SliceCache::map`]).
pub struct MappedObject {
    cache: Arc<SliceCache>,
    file: String,
    path: PathBuf,
}

impl MappedObject {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn cache(&self) -> &Arc<SliceCache> {
        &self.cache
    }
}

impl Drop for MappedObject {
    fn drop(&mut self) {
        let mut st = self.cache.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = st.mapped.get_mut(&self.file) {
            *n -= 1;
            if *n == 0 {
                st.mapped.remove(&self.file);
            }
        }
    }
}

fn origin_error(key: &ObjectPath, etag: &str, e: object_store::Error) -> CacheError {
    let key = key.to_string();
    match e {
        object_store::Error::Precondition { .. } => CacheError::Changed {
            key,
            etag: etag.to_owned(),
        },
        object_store::Error::NotFound { .. } => CacheError::NotFound { key },
        e => CacheError::Origin {
            key,
            message: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};
    use std::os::unix::fs::MetadataExt;

    const S: u64 = slice::SLICE_BYTES;

    #[test]
    fn an_objects_name_tells_its_part_of_a_title() {
        let parts = [
            "films/a.ts",
            "a.ts.fjidx",
            "dir.v2/a.mkv.fjpkt",
            "a.webm.fjfrm",
            "a.ts.fjfec",
            "noext",
            "a.fjidx.ts",
        ]
        .map(Part::of);
        use Part::*;
        assert_eq!(parts, [Media, Index, Packets, Frames, Parity, Media, Media]);
    }

    fn data(len: u64, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    async fn store_with(key: &str, bytes: &[u8]) -> Arc<dyn ObjectStore> {
        let store = InMemory::new();
        store
            .put(&ObjectPath::from(key), PutPayload::from(bytes.to_vec()))
            .await
            .unwrap();
        Arc::new(store)
    }

    fn gets(c: &SliceCache) -> u64 {
        c.stats.origin_requests.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn reads_equal_the_object_and_hit_the_disk_after() {
        let bytes = data(2 * S + 1000, 1);
        let store = store_with("t/a.ts", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let c = SliceCache::open(store, dir.path(), 100 * S).unwrap();
        let o = c.open_object(&ObjectPath::from("t/a.ts")).await.unwrap();
        assert_eq!(o.size, bytes.len() as u64);
        let r = S - 10..2 * S + 5;
        assert!(!c.complete(&o));
        let got = c.read(&o, r.clone()).await.unwrap();
        assert_eq!(&got[..], &bytes[r.start as usize..r.end as usize]);
        assert_eq!(gets(&c), 3);
        assert!(c.complete(&o), "the three slices");
        let all = c.read(&o, 0..o.size).await.unwrap();
        assert_eq!(&all[..], &bytes[..]);
        assert_eq!(gets(&c), 3, "every slice came from disk");
        assert_eq!(c.stats.hit_bytes.load(Ordering::Relaxed), o.size);
        let past = c.read(&o, 0..o.size + 1).await.unwrap_err();
        assert!(matches!(past, CacheError::OutOfRange { .. }), "{past}");
        let huge = Object {
            size: 2 * MAX_READ,
            ..o.clone()
        };
        let e = c.read(&huge, 0..MAX_READ + 1).await.unwrap_err();
        assert!(matches!(e, CacheError::TooLarge { .. }), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_readers_of_a_slice_make_one_request() {
        let bytes = data(S, 2);
        let store = store_with("a", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(SliceCache::open(store, dir.path(), 10 * S).unwrap());
        let o = c.open_object(&ObjectPath::from("a")).await.unwrap();
        let readers: Vec<_> = (0..50)
            .map(|_| {
                let (c, o) = (c.clone(), o.clone());
                tokio::spawn(async move { c.slice(&o, 0).await })
            })
            .collect();
        for r in readers {
            assert_eq!(&r.await.unwrap().unwrap()[..], &bytes[..]);
        }
        assert_eq!(gets(&c), 1);
    }

    #[tokio::test]
    async fn a_changed_object_is_never_mixed() {
        let store = store_with("a", &data(2 * S, 3)).await;
        let dir = tempfile::tempdir().unwrap();
        let c = SliceCache::open(store.clone(), dir.path(), 10 * S).unwrap();
        let old = c.open_object(&ObjectPath::from("a")).await.unwrap();
        c.slice(&old, 0).await.unwrap();
        let new_bytes = data(2 * S, 4);
        store
            .put(&ObjectPath::from("a"), PutPayload::from(new_bytes.clone()))
            .await
            .unwrap();
        // The old version's uncached slice: 412, not the new bytes.
        let e = c.slice(&old, 1).await.unwrap_err();
        assert!(matches!(e, CacheError::Changed { .. }), "{e}");
        let new = c.open_object(&ObjectPath::from("a")).await.unwrap();
        assert_ne!(new.etag, old.etag);
        assert_eq!(
            &c.read(&new, 0..new.size).await.unwrap()[..],
            &new_bytes[..]
        );
    }

    #[tokio::test]
    async fn a_corrupt_slice_is_fetched_again() {
        let bytes = data(S + 7, 5);
        let store = store_with("a", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let c = SliceCache::open(store, dir.path(), 10 * S).unwrap();
        let o = c.open_object(&ObjectPath::from("a")).await.unwrap();
        c.read(&o, 0..o.size).await.unwrap();
        let path = c.object_path(&o);
        let mut on_disk = std::fs::read(&path).unwrap();
        on_disk[1234] ^= 0x01;
        std::fs::write(&path, on_disk).unwrap();
        assert_eq!(&c.read(&o, 0..o.size).await.unwrap()[..], &bytes[..]);
        assert_eq!(gets(&c), 3);
        assert_eq!(c.stats.corrupt.load(Ordering::Relaxed), 1);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "the file is the object"
        );
    }

    #[tokio::test]
    async fn a_restart_fetches_nothing_again() {
        let bytes = data(3 * S, 6);
        let store = store_with("a", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let o = {
            let c = SliceCache::open(store.clone(), dir.path(), 10 * S).unwrap();
            let o = c.open_object(&ObjectPath::from("a")).await.unwrap();
            c.read(&o, 0..o.size).await.unwrap();
            o
        };
        // A stray file of a run that stopped mid-write goes at start.
        std::fs::write(dir.path().join("objects/stray"), b"x").unwrap();
        let c = SliceCache::open(store, dir.path(), 10 * S).unwrap();
        assert_eq!(&c.read(&o, 0..o.size).await.unwrap()[..], &bytes[..]);
        assert_eq!(gets(&c), 0);
        assert_eq!(c.used(), 3 * S);
        assert!(!dir.path().join("objects/stray").exists());
    }

    #[tokio::test]
    async fn the_capacity_bounds_what_is_kept() {
        let bytes = data(5 * S, 7);
        let store = store_with("a", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let c = SliceCache::open(store.clone(), dir.path(), 3 * S).unwrap();
        let o = c.open_object(&ObjectPath::from("a")).await.unwrap();
        assert_eq!(&c.read(&o, 0..o.size).await.unwrap()[..], &bytes[..]);
        assert_eq!(c.used(), 3 * S);
        assert_eq!(c.stats.evictions.load(Ordering::Relaxed), 2);
        // The evicted slices' blocks are given back.
        let path = c.object_path(&o);
        let held = || std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(held() <= 3 * S + 64 * 1024, "{}", held());
        assert_eq!(
            files::read_slice(&path, 0, 4).unwrap(),
            [0; 4],
            "slice 0 went first"
        );
        // A smaller capacity at a restart evicts down to it.
        let c = SliceCache::open(store, dir.path(), S).unwrap();
        assert_eq!(c.used(), S);
        assert!(held() <= S + 64 * 1024, "{}", held());
    }

    /// A held slice the policy evicts stays on disk until the hold is let
    /// go, and goes at the next store; a mapped file is never removed,
    /// only punched; a hold on a slice checked once reads nothing.
    #[tokio::test]
    async fn held_slices_stay_until_let_go_and_mapped_files_stay() {
        let bytes = data(3 * S, 6);
        let store = store_with("a", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(SliceCache::open(store, dir.path(), S).unwrap());
        let o = c.open_object(&ObjectPath::from("a")).await.unwrap();
        let mapped = c.map(&o).unwrap();
        assert_eq!(std::fs::metadata(mapped.path()).unwrap().len(), o.size);
        let first = c.hold(&o, 10..20).await.unwrap();
        let again = c.hold(&o, 0..S).await.unwrap();
        assert_eq!(gets(&c), 1, "a checked slice is held without a read");
        let read_at = |at: u64| files::read_slice(mapped.path(), at, 4).unwrap();
        // Room for one slice: slice 1 evicts slice 0, which is held.
        let second = c.hold(&o, S..S + 1).await.unwrap();
        assert_eq!(read_at(0), bytes[..4], "held: not punched");
        drop((first, again));
        assert_eq!(read_at(0), bytes[..4], "evicted at the next store only");
        drop(second);
        c.slice(&o, 2).await.unwrap();
        assert_eq!(read_at(0), [0; 4], "punched once let go");
        assert_eq!(read_at(S), [0; 4], "slice 1, let go, evicted by slice 2");
        assert_eq!(read_at(2 * S), bytes[2 * S as usize..][..4]);
        assert!(mapped.path().exists());
        assert!(c.used() <= S);
    }

    /// A slice the policy evicted while held, then read again (a session
    /// behind the one holding it), is kept: what is evicted instead is
    /// the slice no one read since.
    #[tokio::test]
    async fn a_held_slice_read_again_is_kept_past_its_hold() {
        let bytes = data(4 * S, 7);
        let store = store_with("a", &bytes).await;
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(SliceCache::open(store, dir.path(), 2 * S).unwrap());
        let o = c.open_object(&ObjectPath::from("a")).await.unwrap();
        let mapped = c.map(&o).unwrap();
        let read_at = |at: u64| files::read_slice(mapped.path(), at, 4).unwrap();
        let leader = c.hold(&o, 0..S).await.unwrap();
        c.slice(&o, 1).await.unwrap();
        c.slice(&o, 2).await.unwrap();
        // Slice 0, held, was evicted by slice 2; a follower reads it now.
        let follower = c.hold(&o, 0..S).await.unwrap();
        drop((leader, follower));
        c.slice(&o, 3).await.unwrap();
        assert_eq!(gets(&c), 4, "nothing fetched twice");
        assert_eq!(read_at(0), bytes[..4], "read again: kept");
        assert_eq!(read_at(S), [0; 4], "evicted in its place");
        assert_eq!(read_at(2 * S), [0; 4]);
        assert_eq!(read_at(3 * S), bytes[3 * S as usize..][..4]);
        assert!(c.used() <= 2 * S);
    }
}

//! An edge's titles (`origin = "s3://BUCKET/PREFIX"`): a title not under the
//! roots whose index is at the origin (`fjord publish` puts `NAME` and
//! `NAME.fjidx` there) is served from the edge's slice cache
//! ([`fjord_edge::SliceCache`]) by the same storage layer and engine as a
//! local title.
//!
//! The title's index and media, and its packet file and parity when it was
//! published with them (`NAME.fjpkt`, `NAME.fjfec`), are the cache's
//! sparse files of their objects, mapped as a local title's files are
//! ([`Title::filled`]). Before the storage layer reads bytes of any of
//! them ahead, its fill holds the slices that cover them: fetched from the
//! origin if they are not on disk, and kept there while they are pinned.
//! So a session starts once its first slices are in, never after the
//! whole title, and nothing is sent from a hole. Only the heads of the
//! index (header, strings, sync tables:
//! [`fjord_media::index::head_ranges`]), packet file and parity are
//! fetched before the title opens; packet records and repair symbols come
//! as sessions reach them (repair symbols for sessions with repair
//! streams only). A Matroska title's frame table (`NAME.fjfrm`) is
//! fetched at its first HLS or DASH request ([`Edge::frame_table`]).
//!
//! The version served is the ETags the origin gives at each open (one HEAD
//! each, at once): a changed object is a new title; sessions on
//! the old one play what is cached of it and end when they need a slice the
//! origin no longer has (412). With the origin not answering within
//! [`ASK_WITHIN`], a title opens at the version last seen (its cached
//! slices play), and one never seen is refused with 503.

use std::{
    collections::HashMap,
    ops::Range,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use fjord_edge::{CacheError, MappedObject, Object, Origin, OriginUrl, SliceCache, SliceHold};
use fjord_engine::Title;
use fjord_storage::{Filled, HeadPin, Hold, Storage};
use object_store::path::Path as ObjectPath;

/// Why an origin title cannot be opened.
#[derive(Clone, Debug)]
pub enum EdgeError {
    /// Not at the origin.
    NotFound,
    /// Not now (the origin down, slow, or mid-publish): ask again.
    Unavailable(String),
    Failed(String),
}

/// How long an open waits for the origin's HEADs before it takes the
/// version last seen, or refuses: a client is answered within a second.
pub const ASK_WITHIN: Duration = Duration::from_millis(800);

/// How long a fill waits for its slices: a session whose next slices do
/// not come by then ends (its storage read fails), the others play on.
const FILL_WITHIN: Duration = Duration::from_secs(5);

/// The origin and the cache of its objects.
pub struct Edge {
    url: OriginUrl,
    cache: Arc<SliceCache>,
    /// For fills, which run on storage threads and wait for the cache.
    runtime: tokio::runtime::Handle,
    /// The titles whose versions are being asked now: an open that comes
    /// meanwhile takes that answer rather than asking again, so viewers
    /// arriving together at a title cost one round of HEADs.
    asking: Mutex<HashMap<String, Arc<Asking>>>,
}

type Asking = tokio::sync::OnceCell<Result<Version, EdgeError>>;

/// A title's version at the origin: its objects as opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    index: Object,
    media: Object,
    /// The prefabricated packets, when published with them.
    packets: Option<Object>,
    /// The parity sidecar, when published with one.
    parity: Option<Object>,
}

/// The keys of a title's objects.
struct Keys {
    index: ObjectPath,
    media: ObjectPath,
    packets: ObjectPath,
    parity: ObjectPath,
}

impl Version {
    pub fn media_size(&self) -> u64 {
        self.media.size
    }
}

impl Edge {
    /// The edge of `origin`, caching at most `capacity` bytes in `dir`.
    /// Call it on the runtime that fills are to run on.
    pub fn open(origin: Origin, dir: &std::path::Path, capacity: u64) -> Result<Edge, String> {
        let cache =
            SliceCache::open(origin.store.clone(), dir, capacity).map_err(|e| e.to_string())?;
        Ok(Edge {
            url: origin.url,
            cache: Arc::new(cache),
            runtime: tokio::runtime::Handle::current(),
            asking: Mutex::default(),
        })
    }

    pub fn cache(&self) -> &Arc<SliceCache> {
        &self.cache
    }

    /// The title `name`'s version at the origin now (asked after this
    /// call began, or while it waited), or the one last seen when the
    /// origin does not answer in time; 404 when it is not there.
    pub async fn version(&self, name: &str) -> Result<Version, EdgeError> {
        let asking = {
            let mut asking = self.asking.lock().unwrap_or_else(|p| p.into_inner());
            asking.entry(name.to_owned()).or_default().clone()
        };
        let answer = asking.get_or_init(|| self.ask(name)).await.clone();
        // Opens that come after the answer ask again.
        let mut asking_now = self.asking.lock().unwrap_or_else(|p| p.into_inner());
        if asking_now
            .get(name)
            .is_some_and(|a| Arc::ptr_eq(a, &asking))
        {
            asking_now.remove(name);
        }
        answer
    }

    async fn ask(&self, name: &str) -> Result<Version, EdgeError> {
        let keys = Keys {
            index: self.url.key(&format!("{name}.fjidx")),
            media: self.url.key(name),
            packets: self.url.key(&format!("{name}.fjpkt")),
            parity: self.url.key(&format!("{name}.fjfec")),
        };
        let heads = async {
            tokio::try_join!(
                self.cache.open_object(&keys.index),
                self.cache.open_object(&keys.media),
                self.open_optional(&keys.packets),
                self.open_optional(&keys.parity),
            )
        };
        match tokio::time::timeout(ASK_WITHIN, heads).await {
            Ok(Ok((index, media, packets, parity))) => Ok(Version {
                index,
                media,
                packets,
                parity,
            }),
            Ok(Err(CacheError::NotFound { .. })) => Err(EdgeError::NotFound),
            Ok(Err(e)) => Err(unavailable(&e)),
            Err(_) => self.last_seen(&keys),
        }
    }

    /// An object a title may be published without.
    async fn open_optional(&self, key: &ObjectPath) -> Result<Option<Object>, CacheError> {
        match self.cache.open_object(key).await {
            Ok(object) => Ok(Some(object)),
            Err(CacheError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn last_seen(&self, keys: &Keys) -> Result<Version, EdgeError> {
        let known = |key| self.cache.last_known(key);
        match (known(&keys.index), known(&keys.media)) {
            (Some(index), Some(media)) => Ok(Version {
                index,
                media,
                packets: known(&keys.packets),
                parity: known(&keys.parity),
            }),
            _ => Err(EdgeError::Unavailable(format!(
                "the origin did not answer within {} ms and this title is not cached; try again later",
                ASK_WITHIN.as_millis()
            ))),
        }
    }

    /// The title at `version`: its index's head and its packet file's
    /// first slice fetched (the rest and the media come as they are read),
    /// then opened over the cache's files, and its head pinned, which
    /// fetches the first slices it plays from.
    pub async fn load(
        &self,
        name: &str,
        v: &Version,
        storage: &Storage,
    ) -> Result<(Arc<Title>, HeadPin), EdgeError> {
        let started = Instant::now();
        let disk = |e: CacheError| EdgeError::Failed(e.to_string());
        let index_file = self.cache.map(&v.index).map_err(disk)?;
        let media_file = self.cache.map(&v.media).map_err(disk)?;
        let (head, packets, parity) = tokio::try_join!(
            self.index_head(&v.index, &index_file),
            self.packets(v.packets.as_ref()),
            self.parity(v.parity.as_ref()),
        )?;
        let index = self.slices(&v.index, index_file, head);
        let media = self.slices(&v.media, media_file, Vec::new());
        let (storage, size) = (storage.clone(), v.media.size);
        let loaded = tokio::task::spawn_blocking(move || {
            let opened = fjord_media::index::Index::open_unverified(index.file.path());
            let opened = opened.map_err(|e| EdgeError::Failed(format!("its index: {e}")))?;
            if opened.source().size != size {
                return Err(EdgeError::Unavailable(
                    "the origin's index and media differ in size (a publish under way?); try again later".into(),
                ));
            }
            let (index_path, media_path) =
                (index.file.path().to_owned(), media.file.path().to_owned());
            let title = Title::filled(opened, (&media_path, media), (&index_path, index));
            let mut title = title.map_err(|e| EdgeError::Failed(e.to_string()))?;
            if let Some(packets) = packets {
                let path = packets.file.path().to_owned();
                if let Err(e) = title.attach_filled_prefab(&path, packets) {
                    // Headers are built from the index instead.
                    tracing::warn!(file = %path.display(), "the origin's packet file is not used: {e}");
                }
            }
            if let Some(parity) = parity {
                let path = parity.file.path().to_owned();
                if let Err(e) = title.attach_filled_fec(&path, &index_path, parity) {
                    // Served without repair streams.
                    tracing::warn!(file = %path.display(), "the origin's parity is not used: {e}");
                }
            }
            let title = Arc::new(title);
            // Its head is what a PLAY reads first: fetched now or refused.
            let head = storage.hold_head(title.clone());
            let head = head.map_err(|e| EdgeError::Unavailable(format!("{e}; try again later")))?;
            Ok((title, head))
        });
        let loaded = loaded
            .await
            .map_err(|e| EdgeError::Failed(e.to_string()))??;
        let ms = started.elapsed().as_millis() as u64;
        tracing::info!(title = %name, ms, etag = %v.media.etag, "origin title ready");
        Ok(loaded)
    }

    /// Holds on the index bytes an unverified open reads: its first slice,
    /// then what the header says the strings and sync tables are.
    async fn index_head(
        &self,
        index: &Object,
        file: &MappedObject,
    ) -> Result<Vec<SliceHold>, EdgeError> {
        let first = 0..index.size.min(fjord_edge::slice::SLICE_BYTES);
        let mut holds = vec![self.hold(index, first.clone()).await?];
        let path = file.path().to_owned();
        let bytes =
            tokio::task::spawn_blocking(move || fjord_edge::files::read_slice(&path, 0, first.end));
        let bytes = bytes.await.map_err(|e| EdgeError::Failed(e.to_string()))?;
        let bytes = bytes.map_err(|e| EdgeError::Failed(e.to_string()))?;
        let ranges = fjord_media::index::head_ranges(&bytes)
            .map_err(|e| EdgeError::Failed(format!("its index: {e}")))?;
        let within = |r: Range<u64>| r.start.min(index.size)..r.end.min(index.size);
        // And its checksum at the end, which names the version to HTTP.
        let trailer = index.size.saturating_sub(32)..index.size;
        let ranges = ranges.into_iter().chain([trailer]);
        let more = ranges.map(|r| self.hold(index, within(r)));
        holds.extend(futures::future::try_join_all(more).await?);
        Ok(holds)
    }

    /// The packet file's slices, its first (header and track entries,
    /// which its open reads) fetched.
    async fn packets(&self, object: Option<&Object>) -> Result<Option<Arc<Slices>>, EdgeError> {
        let Some(object) = object else {
            return Ok(None);
        };
        let file = (self.cache.map(object)).map_err(|e| EdgeError::Failed(e.to_string()))?;
        let first = self
            .hold(object, 0..object.size.min(fjord_edge::slice::SLICE_BYTES))
            .await?;
        Ok(Some(self.slices(object, file, vec![first])))
    }

    /// The frame table published beside the Matroska or WebM title `name`
    /// (`NAME.fjfrm`, `fjord_media::mkv::table`), fetched whole (with the
    /// origin not answering, the version last seen, if cached); `None`
    /// when there is none. Which version of the media it is of, the table
    /// says itself. Blocks: call it off the runtime's threads, as fills.
    pub fn frame_table(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let key = self.url.key(&format!("{name}.fjfrm"));
        let fetch = async {
            let object = match self.open_optional(&key).await {
                Ok(object) => object,
                Err(e) => Some(self.cache.last_known(&key).ok_or(e.to_string())?),
            };
            let Some(object) = object else {
                return Ok(None);
            };
            let file = self.cache.map(&object).map_err(|e| e.to_string())?;
            let _held =
                (self.cache.hold(&object, 0..object.size).await).map_err(|e| e.to_string())?;
            let bytes = fjord_edge::files::read_slice(file.path(), 0, object.size);
            bytes.map(Some).map_err(|e| e.to_string())
        };
        let within = async { tokio::time::timeout(FILL_WITHIN, fetch).await };
        self.runtime.block_on(within).unwrap_or_else(|_| {
            Err(format!(
                "{key}: it did not come from the origin within {} s",
                FILL_WITHIN.as_secs()
            ))
        })
    }

    /// The parity sidecar's slices, what its open reads fetched: its
    /// first slice (header, track entries) and its meta checksum, where the
    /// header says. Its block tables come with the title's head, its repair
    /// symbols only for sessions that asked for repair.
    async fn parity(&self, object: Option<&Object>) -> Result<Option<Arc<Slices>>, EdgeError> {
        let Some(object) = object else {
            return Ok(None);
        };
        let file = (self.cache.map(object)).map_err(|e| EdgeError::Failed(e.to_string()))?;
        let first = 0..object.size.min(fjord_edge::slice::SLICE_BYTES);
        let mut holds = vec![self.hold(object, first.clone()).await?];
        let path = file.path().to_owned();
        let head =
            tokio::task::spawn_blocking(move || fjord_edge::files::read_slice(&path, 0, first.end));
        let head = head.await.map_err(|e| EdgeError::Failed(e.to_string()))?;
        let head = head.map_err(|e| EdgeError::Failed(e.to_string()))?;
        if let Ok(sum) = fjord_fec::sidecar::meta_checksum_range(&head) {
            let sum = sum.start.min(object.size)..sum.end.min(object.size);
            holds.push(self.hold(object, sum).await?);
        }
        Ok(Some(self.slices(object, file, holds)))
    }

    async fn hold(&self, object: &Object, range: Range<u64>) -> Result<SliceHold, EdgeError> {
        self.cache
            .hold(object, range)
            .await
            .map_err(|e| unavailable(&e))
    }

    fn slices(&self, object: &Object, file: MappedObject, head: Vec<SliceHold>) -> Arc<Slices> {
        Arc::new(Slices {
            object: object.clone(),
            file,
            runtime: self.runtime.clone(),
            _head: head,
        })
    }
}

/// An origin failure as a refusal to retry.
fn unavailable(e: &CacheError) -> EdgeError {
    match e {
        CacheError::NotFound { .. } => EdgeError::NotFound,
        CacheError::Disk { .. } => EdgeError::Failed(e.to_string()),
        _ => EdgeError::Unavailable(format!("{e}; try again later")),
    }
}

/// An object's file as a title's: bytes filled from its slices.
struct Slices {
    object: Object,
    file: MappedObject,
    runtime: tokio::runtime::Handle,
    /// Bytes the title reads outside the storage layer's pins (its index's
    /// head), held as long as it is open.
    _head: Vec<SliceHold>,
}

impl Filled for Slices {
    /// Waits on the runtime for the slices (never call it on a runtime
    /// thread: storage workers and blocking tasks do).
    fn fill(&self, range: Range<u64>) -> Result<Hold, String> {
        let range = range.start.min(self.object.size)..range.end.min(self.object.size);
        let hold = self.file.cache().hold(&self.object, range);
        // The timer is made inside, where the runtime is entered.
        let within = async { tokio::time::timeout(FILL_WITHIN, hold).await };
        match self.runtime.block_on(within) {
            Ok(Ok(hold)) => Ok(Box::new(hold)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!(
                "{}: its slices did not come from the origin within {} s",
                self.object.key,
                FILL_WITHIN.as_secs()
            )),
        }
    }

    fn complete(&self) -> bool {
        self.file.cache().complete(&self.object)
    }
}

//! fjord's origin and edge: a library kept once in an S3-compatible object
//! store, and nodes near viewers that keep what is watched there.
//!
//! In: an origin named `s3://BUCKET/PREFIX` with its endpoint, region and
//! credentials ([`origin`]); a title's files to publish ([`publish`]); on an
//! edge, reads of an object's bytes ([`cache::SliceCache`]). Out: objects at
//! the origin equal to the files (size and BLAKE3 read back; every request
//! body checked by the store against its SHA-256), and on the edge bytes
//! equal to one version of the object, from local slice files.
//!
//! The contract of the cache: an object is opened at the ETag the origin
//! gives it and read only at that version (every origin GET carries
//! `If-Match`; a changed object is an error, never a mix); each 2 MiB slice
//! is fetched from the origin once however many readers want it at once,
//! and readers waiting for it are woken when it lands; a slice is checked
//! against its BLAKE3 on every read from disk and fetched again if it fails;
//! the slices kept never exceed the capacity (evicted by S4LRU,
//! [`policy`]); what is cached survives a restart ([`map`]). An object's
//! slices are kept in one sparse file as long as the object, each at its
//! offset ([`files`]), so what is cached can be mapped like a local file
//! ([`SliceCache::map`]: a mapped file is never removed, only punched).
//! A server reads and sends a mapped object's bytes under a
//! [`SliceHold`] ([`SliceCache::hold`]): held slices are on disk, checked
//! once since the process started, and never punched out while held (an
//! eviction of one waits for its last hold, so the bytes on disk may
//! exceed the capacity by what is held). The origin is only ever read by
//! the cache; no media is parsed here (an object's name tells which
//! [`Part`] of a title it is, for the counts of bytes fetched).

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cache;
pub mod files;
pub mod map;
pub mod origin;
pub mod policy;
pub mod publish;
pub mod slice;

pub use cache::{CacheError, MappedObject, Object, Part, SliceCache, SliceHold};
pub use origin::{Origin, OriginConfig, OriginError, OriginUrl};

//! The cache's persisted map: which slices are on disk, their lengths and
//! checksums, as a journal of JSON lines (`map.jsonl` in the cache
//! directory) replayed at start, so a restarted edge fetches nothing it
//! already holds.
//!
//! A record is appended once its slice file is in place (a crash before
//! leaves an orphan file, deleted at start) and a drop before the file is
//! removed. A torn last line (a crash mid-append) is ignored. The journal
//! is rewritten from the live map at start and when it grows to several
//! times the map. Nothing is fsynced: a slice lost or garbled by a crash
//! fails its checksum on read and is fetched again.
//!
//! Beside it, `versions.json`: the version (ETag and size) each object was
//! last opened at, so an edge whose origin is down opens what it has
//! cached at the version it has it at ([`Versions`]).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A slice of one version of an object: its key, the ETag the origin gave
/// that version, and its number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SliceId {
    pub object: String,
    pub etag: String,
    pub index: u64,
}

impl SliceId {
    /// The name of the file the object's version is kept in (one sparse
    /// file, each slice at its offset): object and ETag hashed, since keys
    /// may hold any character.
    pub fn file(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(self.object.as_bytes());
        h.update(&[0]);
        h.update(self.etag.as_bytes());
        h.finalize().to_hex()[..32].to_owned()
    }
}

/// A version of an object: its ETag and size at the origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub etag: String,
    pub size: u64,
}

/// The version each object was last opened at, kept in `versions.json`
/// (rewritten whole, to a temporary file renamed over it, when a version
/// changes: once per object and version, not per read).
pub struct Versions {
    path: PathBuf,
    known: HashMap<String, Version>,
}

impl Versions {
    /// What `dir/versions.json` holds; nothing if it is missing or unreadable
    /// (it only serves an origin that is down).
    pub fn open(dir: &Path) -> Versions {
        let path = dir.join("versions.json");
        let known = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Versions { path, known }
    }

    pub fn get(&self, object: &str) -> Option<&Version> {
        self.known.get(object)
    }

    /// Notes `object` at `version`; writes the file if that is new.
    pub fn note(&mut self, object: &str, version: Version) -> io::Result<()> {
        if self.known.get(object) == Some(&version) {
            return Ok(());
        }
        self.known.insert(object.to_owned(), version);
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&self.known)?)?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// What the map knows of a stored slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub len: u64,
    /// BLAKE3 of the slice's bytes, checked on every read.
    pub hash: [u8; 32],
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Record {
    Put {
        #[serde(flatten)]
        id: SliceId,
        len: u64,
        blake3: String,
    },
    Drop {
        #[serde(flatten)]
        id: SliceId,
    },
}

/// The journal, open for appending.
pub struct Journal {
    path: PathBuf,
    out: BufWriter<File>,
    /// Records in the file, to know when to rewrite it.
    records: usize,
}

impl Journal {
    /// Replays `dir/map.jsonl` (none yet: an empty map), rewrites it from
    /// what is live, and opens it for appending. Returns the slices in
    /// the order they were stored.
    pub fn open(dir: &Path) -> io::Result<(Journal, Vec<(SliceId, Stored)>)> {
        let path = dir.join("map.jsonl");
        let mut live: Vec<(SliceId, Stored)> = Vec::new();
        match File::open(&path) {
            Ok(f) => live = replay(BufReader::new(f))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let journal = Journal::rewrite(&path, &live)?;
        Ok((journal, live))
    }

    /// Notes a slice stored.
    pub fn put(&mut self, id: &SliceId, stored: Stored) -> io::Result<()> {
        self.append(&Record::Put {
            id: id.clone(),
            len: stored.len,
            blake3: blake3::Hash::from(stored.hash).to_hex().to_string(),
        })
    }

    /// Notes a slice dropped.
    pub fn drop_slice(&mut self, id: &SliceId) -> io::Result<()> {
        self.append(&Record::Drop { id: id.clone() })
    }

    /// Rewrites the journal from `live` when it has grown past four times
    /// that (and past a floor, so a small map is not rewritten often).
    pub fn compact_if_large<'a>(
        &mut self,
        live: impl ExactSizeIterator<Item = (&'a SliceId, &'a Stored)>,
    ) -> io::Result<()> {
        if self.records <= 1024.max(4 * live.len()) {
            return Ok(());
        }
        let live: Vec<(SliceId, Stored)> = live.map(|(i, s)| (i.clone(), *s)).collect();
        *self = Journal::rewrite(&self.path, &live)?;
        Ok(())
    }

    fn append(&mut self, r: &Record) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, r)?;
        self.out.write_all(b"\n")?;
        // Whole lines reach the file at once: a crash tears at most one.
        self.out.flush()?;
        self.records += 1;
        Ok(())
    }

    /// Writes `live` to a temporary file renamed over `path`.
    fn rewrite(path: &Path, live: &[(SliceId, Stored)]) -> io::Result<Journal> {
        let tmp = path.with_extension("jsonl.tmp");
        let mut j = Journal {
            path: path.to_owned(),
            out: BufWriter::new(File::create(&tmp)?),
            records: 0,
        };
        for (id, s) in live {
            j.put(id, *s)?;
        }
        std::fs::rename(&tmp, path)?;
        let out = OpenOptions::new().append(true).open(path)?;
        j.out = BufWriter::new(out);
        Ok(j)
    }
}

/// The live slices a journal describes, in the order they were stored.
fn replay(r: impl BufRead) -> io::Result<Vec<(SliceId, Stored)>> {
    let mut order: Vec<SliceId> = Vec::new();
    let mut map: HashMap<SliceId, Stored> = HashMap::new();
    for line in r.lines() {
        // A torn or foreign line says nothing about any slice.
        let Ok(record) = serde_json::from_str::<Record>(&line?) else {
            continue;
        };
        match record {
            Record::Put { id, len, blake3 } => {
                let Ok(hash) = blake3::Hash::from_hex(&blake3) else {
                    continue;
                };
                let stored = Stored {
                    len,
                    hash: *hash.as_bytes(),
                };
                if map.insert(id.clone(), stored).is_none() {
                    order.push(id);
                }
            }
            Record::Drop { id } => {
                map.remove(&id);
            }
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|id| map.remove(&id).map(|s| (id, s)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u64) -> SliceId {
        SliceId {
            object: "films/a b.ts".into(),
            etag: "\"abc\"".into(),
            index: i,
        }
    }

    fn stored(n: u8) -> Stored {
        Stored {
            len: n as u64,
            hash: [n; 32],
        }
    }

    #[test]
    fn survives_a_reopen_and_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut j, live) = Journal::open(dir.path()).unwrap();
            assert!(live.is_empty());
            for i in 0..4 {
                j.put(&id(i), stored(i as u8)).unwrap();
            }
            j.drop_slice(&id(1)).unwrap();
        }
        let path = dir.path().join("map.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"op\":\"put\",\"obj").unwrap();
        let (_, live) = Journal::open(dir.path()).unwrap();
        let want: Vec<_> = [0, 2, 3]
            .iter()
            .map(|&i| (id(i), stored(i as u8)))
            .collect();
        assert_eq!(live, want);
        // Rewritten on open: only the live records remain.
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn compacts_when_large() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = Journal::open(dir.path()).unwrap();
        for n in 0..1100 {
            j.put(&id(n % 3), stored(1)).unwrap();
        }
        let live: HashMap<SliceId, Stored> = (0..3).map(|i| (id(i), stored(1))).collect();
        j.compact_if_large(live.iter()).unwrap();
        assert_eq!(j.records, 3);
        let (_, back) = Journal::open(dir.path()).unwrap();
        assert_eq!(back.len(), 3);
    }

    #[test]
    fn versions_persist() {
        let dir = tempfile::tempdir().unwrap();
        let v = |e: &str| Version {
            etag: e.into(),
            size: 5,
        };
        let mut vs = Versions::open(dir.path());
        assert!(vs.get("a").is_none());
        vs.note("a", v("1")).unwrap();
        vs.note("a", v("2")).unwrap();
        vs.note("b", v("1")).unwrap();
        let back = Versions::open(dir.path());
        assert_eq!(back.get("a"), Some(&v("2")));
        assert_eq!(back.get("b"), Some(&v("1")));
    }

    #[test]
    fn files_differ_by_etag_not_by_slice() {
        let mut other = id(0);
        other.etag = "\"abd\"".into();
        assert_ne!(id(0).file(), other.file());
        assert_eq!(id(0).file(), id(1).file());
        assert_eq!(id(7).file().len(), 32);
    }
}

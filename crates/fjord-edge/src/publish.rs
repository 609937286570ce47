//! Publishing: a title's files (the media and its sidecars, ingested
//! locally) uploaded to the origin, verified, resumable.
//!
//! Each object carries the BLAKE3 of its bytes as user metadata
//! (`x-amz-meta-fjord-blake3`). An object already at the origin with the
//! same size and hash is skipped, so a publish run that stopped is run
//! again and sends only what is missing. Files up to [`PART_BYTES`] go in
//! one PUT, larger ones as a multipart upload of parts of that size (a few
//! in flight; an upload that fails is aborted, so no parts are left
//! behind). Every PUT and part carries its SHA-256, which the store
//! checks before keeping the bytes; afterwards the object's size and hash
//! are read back from the origin and compared.

use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, GetOptions, MultipartUpload, PutMultipartOptions, PutOptions, PutPayload,
};

use crate::origin::Origin;

/// Bytes per multipart part (S3 allows 5 MiB to 5 GiB, at most 10,000
/// parts; larger files get larger parts).
pub const PART_BYTES: u64 = 16 << 20;
/// Parts uploading at once: bounds memory to this many parts.
const PARTS_IN_FLIGHT: usize = 4;
/// The metadata key of an object's BLAKE3 (hex).
pub const HASH_KEY: &str = "fjord-blake3";

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    // Not a `source`: object_store's message already holds its causes.
    #[error("{key}: origin: {error}")]
    Origin {
        key: String,
        error: object_store::Error,
    },
    #[error(
        "{key}: the origin holds {size} bytes with hash {hash:?} after the upload, not {want_size} with {want_hash}"
    )]
    Mismatch {
        key: String,
        size: u64,
        hash: Option<String>,
        want_size: u64,
        want_hash: String,
    },
}

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Sent in `parts` requests (1: a single PUT).
    Uploaded { parts: usize },
    /// Already at the origin, the same size and hash.
    Skipped,
}

#[derive(Debug, Clone)]
pub struct Published {
    pub key: ObjectPath,
    pub size: u64,
    pub blake3: String,
    pub outcome: Outcome,
}

/// Uploads `file` as `name` under the origin's prefix, unless it is there
/// already. `progress` is told the bytes sent (or skipped) as they go.
pub async fn publish_file(
    origin: &Origin,
    file: &Path,
    name: &str,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Published, PublishError> {
    let key = origin.url.key(name);
    let (size, blake3) = hash_file(file).await?;
    let mut published = Published {
        key: key.clone(),
        size,
        blake3: blake3.clone(),
        outcome: Outcome::Skipped,
    };
    if let Some((s, h)) = at_origin(origin, &key).await?
        && s == size
        && h.as_deref() == Some(blake3.as_str())
    {
        progress(size);
        return Ok(published);
    }
    let mut attributes = Attributes::new();
    attributes.insert(Attribute::Metadata(HASH_KEY.into()), blake3.clone().into());
    let parts = if size <= PART_BYTES {
        let bytes = read_range(file, 0, size).await?;
        let opts = PutOptions {
            attributes,
            ..Default::default()
        };
        (origin
            .store
            .put_opts(&key, PutPayload::from(bytes), opts)
            .await)
            .map_err(|source| origin_err(&key, source))?;
        progress(size);
        1
    } else {
        upload_parts(origin, file, &key, size, attributes, progress).await?
    };
    match at_origin(origin, &key).await? {
        Some((s, Some(h))) if s == size && h == blake3 => {}
        other => {
            let (s, h) = other.unwrap_or((0, None));
            return Err(PublishError::Mismatch {
                key: key.to_string(),
                size: s,
                hash: h,
                want_size: size,
                want_hash: blake3,
            });
        }
    }
    published.outcome = Outcome::Uploaded { parts };
    Ok(published)
}

/// A multipart upload of `file`, a few parts in flight; aborted on error.
async fn upload_parts(
    origin: &Origin,
    file: &Path,
    key: &ObjectPath,
    size: u64,
    attributes: Attributes,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<usize, PublishError> {
    let part = PART_BYTES.max(size.div_ceil(9_000).next_multiple_of(1 << 20));
    let opts = PutMultipartOptions {
        attributes,
        ..Default::default()
    };
    let mut upload = (origin.store.put_multipart_opts(key, opts).await)
        .map_err(|source| origin_err(key, source))?;
    let sent = send_parts(upload.as_mut(), file, key, size, part, progress).await;
    let done = match sent {
        Ok(n) => upload
            .complete()
            .await
            .map(|_| n)
            .map_err(|source| origin_err(key, source)),
        Err(e) => Err(e),
    };
    if done.is_err() {
        let _ = upload.abort().await;
    }
    done
}

async fn send_parts(
    upload: &mut dyn MultipartUpload,
    file: &Path,
    key: &ObjectPath,
    size: u64,
    part: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<usize, PublishError> {
    let mut in_flight = FuturesUnordered::new();
    let mut parts = 0;
    let mut at = 0;
    while at < size || !in_flight.is_empty() {
        if at < size && in_flight.len() < PARTS_IN_FLIGHT {
            let len = part.min(size - at);
            let bytes = read_range(file, at, len).await?;
            // Parts are numbered in the order put_part is called.
            let sending = upload.put_part(PutPayload::from(bytes));
            in_flight.push(async move { sending.await.map(|()| len) });
            at += len;
            parts += 1;
            continue;
        }
        if let Some(done) = in_flight.next().await {
            progress(done.map_err(|source| origin_err(key, source))?);
        }
    }
    Ok(parts)
}

/// The object's size and published hash at the origin, if it is there.
async fn at_origin(
    origin: &Origin,
    key: &ObjectPath,
) -> Result<Option<(u64, Option<String>)>, PublishError> {
    let opts = GetOptions {
        head: true,
        ..Default::default()
    };
    match origin.store.get_opts(key, opts).await {
        Ok(r) => {
            let hash = r.attributes.get(&Attribute::Metadata(HASH_KEY.into()));
            Ok(Some((r.meta.size, hash.map(|h| h.to_string()))))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(source) => Err(origin_err(key, source)),
    }
}

fn origin_err(key: &ObjectPath, error: object_store::Error) -> PublishError {
    PublishError::Origin {
        key: key.to_string(),
        error,
    }
}

/// The file's size and BLAKE3 (hex), read on a blocking thread.
async fn hash_file(file: &Path) -> Result<(u64, String), PublishError> {
    let path = file.to_owned();
    let hashed = tokio::task::spawn_blocking(move || -> std::io::Result<(u64, String)> {
        let mut f = std::fs::File::open(&path)?;
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok((size, h.finalize().to_hex().to_string()));
            }
            h.update(&buf[..n]);
            size += n as u64;
        }
    })
    .await;
    let read_err = |source| PublishError::Read {
        path: file.to_owned(),
        source,
    };
    hashed
        .map_err(|e| read_err(std::io::Error::other(e)))?
        .map_err(read_err)
}

/// `len` bytes of `file` at `at`, read on a blocking thread.
async fn read_range(file: &Path, at: u64, len: u64) -> Result<Bytes, PublishError> {
    let path = file.to_owned();
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<Bytes> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(&path)?;
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, at)?;
        Ok(Bytes::from(buf))
    })
    .await;
    let read_err = |source| PublishError::Read {
        path: file.to_owned(),
        source,
    };
    read.map_err(|e| read_err(std::io::Error::other(e)))?
        .map_err(read_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origin::OriginUrl;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn origin() -> Origin {
        Origin {
            url: OriginUrl::parse("s3://films/lib").unwrap(),
            store: Arc::new(InMemory::new()),
        }
    }

    #[tokio::test]
    async fn uploads_in_parts_then_skips() {
        let o = origin();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.ts");
        let data: Vec<u8> = (0..PART_BYTES * 2 + 12345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let seen = AtomicU64::new(0);
        let count = |n| {
            seen.fetch_add(n, Ordering::Relaxed);
        };
        let p = publish_file(&o, &path, "big.ts", &count).await.unwrap();
        assert_eq!(p.outcome, Outcome::Uploaded { parts: 3 });
        assert_eq!(seen.load(Ordering::Relaxed), data.len() as u64);
        let back = o.store.get(&o.url.key("big.ts")).await.unwrap();
        assert_eq!(back.bytes().await.unwrap(), data);
        let again = publish_file(&o, &path, "big.ts", &|_| {}).await.unwrap();
        assert_eq!(again.outcome, Outcome::Skipped);
        // A changed file is sent again.
        std::fs::write(&path, b"short").unwrap();
        let changed = publish_file(&o, &path, "big.ts", &|_| {}).await.unwrap();
        assert_eq!(changed.outcome, Outcome::Uploaded { parts: 1 });
    }

    #[tokio::test]
    async fn a_missing_file_names_itself() {
        let e = publish_file(&origin(), Path::new("/nonexistent/x.ts"), "x.ts", &|_| {})
            .await
            .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.ts"), "{e}");
    }
}

//! The origin and the edge against a real S3 server (versitygw): objects
//! published and read through the slice cache, compared by hash, origin
//! requests counted in the server's own access log.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fjord_edge::publish::{Outcome, PART_BYTES, publish_file};
use fjord_edge::slice::SLICE_BYTES;
use fjord_edge::{CacheError, Origin, OriginUrl, SliceCache};
use object_store::{ObjectStoreExt, PutPayload};

use crate::common::s3::{S3_KEY_ID, S3_SECRET};
use crate::common::{S3Server, media, run_bounded};

#[tokio::test]
async fn the_origin_client_writes_and_reads_a_real_s3_server() {
    let s3 = S3Server::start("films");
    let url = OriginUrl::parse("s3://films/lib").unwrap();
    let origin = Origin::connect(url, &s3.origin_config()).unwrap();
    let key = origin.url.key("a b.ts");
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    origin
        .store
        .put(&key, PutPayload::from(bytes.clone()))
        .await
        .unwrap();
    let meta = origin.store.head(&key).await.unwrap();
    assert_eq!(meta.size, bytes.len() as u64);
    assert!(meta.e_tag.is_some(), "an S3 server gives ETags");
    let back = origin.store.get_range(&key, 10..20_010).await.unwrap();
    assert_eq!(blake3::hash(&back), blake3::hash(&bytes[10..20_010]));
    assert_eq!(s3.requests("PutObject").len(), 1, "the server's own log");
    // Stored where the posix backend keeps the bucket's objects.
    let file = s3.dir.path().join("root/films/lib/a b.ts");
    assert_eq!(
        blake3::hash(&std::fs::read(file).unwrap()),
        blake3::hash(&bytes)
    );
}

/// `fjord publish FILES s3://films/lib` against `s3`, bounded in time.
pub(crate) fn publish(s3: &S3Server, files: &[&Path]) -> crate::common::Output {
    publish_with(s3, files, &[])
}

/// [`publish`] with more `fjord publish` arguments (`--fec K:M`).
pub(crate) fn publish_with(s3: &S3Server, files: &[&Path], more: &[&str]) -> crate::common::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["publish", "--endpoint", &s3.endpoint])
        .args(more)
        .args(files)
        .arg("s3://films/lib")
        .env("AWS_ACCESS_KEY_ID", S3_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", S3_SECRET);
    run_bounded(cmd, Duration::from_secs(60))
}

#[test]
fn publish_uploads_a_title_and_its_sidecars_and_resumes() {
    let s3 = S3Server::start("films");
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.ts");
    std::fs::copy(&media().clip, &clip).unwrap();
    let out = publish(&s3, &[&clip]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", out.stderr);
    let stored = s3.dir.path().join("root/films/lib");
    for name in ["clip.ts", "clip.ts.fjidx", "clip.ts.fjfec", "clip.ts.fjpkt"] {
        let local = std::fs::read(dir.path().join(name)).unwrap();
        let remote = std::fs::read(stored.join(name)).unwrap();
        assert_eq!(blake3::hash(&remote), blake3::hash(&local), "{name}");
        assert!(
            stdout.contains(&format!("to s3://films/lib/{name} in one PUT")),
            "{stdout}"
        );
    }
    // The index went last: a title whose index is there is whole.
    let puts = s3.requests("PutObject");
    assert_eq!(puts.len(), 4);
    assert!(puts[3].contains("clip.ts.fjidx"), "{puts:?}");
    // Run again: everything is there already; nothing is sent.
    let again = publish(&s3, &[&clip]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{}", again.stderr);
    assert_eq!(stdout.matches("skipped").count(), 4, "{stdout}");
    assert_eq!(s3.requests("PutObject").len(), 4);
}

#[test]
fn publish_refuses_a_bad_origin_and_an_unreachable_one_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let clip = dir.path().join("clip.ts");
    std::fs::copy(&media().clip, &clip).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("publish").arg(&clip).arg("films/lib");
    let out = run_bounded(cmd, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("s3://BUCKET"), "{}", out.stderr);
    // Nothing listens there: an error naming the object, in seconds.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    let closed = format!("http://127.0.0.1:{}", crate::common::free_port());
    cmd.args(["publish", "--endpoint", &closed])
        .arg(&clip)
        .arg("s3://films/lib")
        .env("AWS_ACCESS_KEY_ID", S3_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", S3_SECRET);
    let started = std::time::Instant::now();
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(
        !out.timed_out && out.status.code() == Some(1),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("lib/clip.ts"), "{}", out.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn large_files_go_in_parts_checked_by_the_store() {
    let s3 = S3Server::start("films");
    let url = OriginUrl::parse("s3://films/lib").unwrap();
    let origin = Origin::connect(url, &s3.origin_config()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    let size = 2 * PART_BYTES + 4321;
    let bytes: Vec<u8> = (0..size).map(|i| (i * 131 % 251) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    let p = publish_file(&origin, &path, "big.bin", &|_| {})
        .await
        .unwrap();
    assert_eq!(p.outcome, Outcome::Uploaded { parts: 3 });
    assert_eq!(s3.requests("UploadPart").len(), 3);
    let remote = std::fs::read(s3.dir.path().join("root/films/lib/big.bin")).unwrap();
    assert_eq!(blake3::hash(&remote), blake3::hash(&bytes));
    let again = publish_file(&origin, &path, "big.bin", &|_| {})
        .await
        .unwrap();
    assert_eq!(again.outcome, Outcome::Skipped);
    assert_eq!(s3.requests("UploadPart").len(), 3);
}

/// An origin on `s3` holding `name` = `bytes`, and a slice cache of it in
/// `dir`.
async fn cached_origin(
    s3: &S3Server,
    name: &str,
    bytes: &[u8],
    dir: &Path,
) -> (Origin, Arc<SliceCache>) {
    let url = OriginUrl::parse("s3://films/lib").unwrap();
    let origin = Origin::connect(url, &s3.origin_config()).unwrap();
    let key = origin.url.key(name);
    origin
        .store
        .put(&key, PutPayload::from(bytes.to_vec()))
        .await
        .unwrap();
    let cache = SliceCache::open(origin.store.clone(), dir, 64 * SLICE_BYTES).unwrap();
    (origin, Arc::new(cache))
}

fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_readers_of_an_uncached_slice_make_one_origin_get() {
    let s3 = S3Server::start("films");
    let dir = tempfile::tempdir().unwrap();
    let bytes = pattern(3 * SLICE_BYTES + 99, 1);
    let (origin, cache) = cached_origin(&s3, "a.ts", &bytes, dir.path()).await;
    let object = cache.open_object(&origin.url.key("a.ts")).await.unwrap();
    let start = tokio::sync::Barrier::new(50);
    let start = Arc::new(start);
    let readers: Vec<_> = (0..50)
        .map(|_| {
            let (cache, object, start) = (cache.clone(), object.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                cache.slice(&object, 1).await
            })
        })
        .collect();
    let want = blake3::hash(&bytes[SLICE_BYTES as usize..2 * SLICE_BYTES as usize]);
    for r in readers {
        assert_eq!(blake3::hash(&r.await.unwrap().unwrap()), want);
    }
    // Counted by the origin itself, and by the cache.
    assert_eq!(
        s3.requests("GetObject").len(),
        1,
        "{:?}",
        s3.requests("GetObject")
    );
    assert_eq!(cache.stats.origin_requests.load(Ordering::Relaxed), 1);
    // Each of the other 49 waited on that GET or, once it had landed,
    // read the slice from disk.
    let joined = cache.stats.joined.load(Ordering::Relaxed);
    let hits = cache.stats.hit_bytes.load(Ordering::Relaxed) / SLICE_BYTES;
    assert_eq!(joined + hits, 49, "joined {joined}, from disk {hits}");
    let whole = cache.read(&object, 0..object.size).await.unwrap();
    assert_eq!(blake3::hash(&whole), blake3::hash(&bytes));
    assert_eq!(s3.requests("GetObject").len(), 4, "one per slice");
}

#[tokio::test]
async fn a_changed_object_is_seen_by_its_new_etag_never_mixed() {
    let s3 = S3Server::start("films");
    let dir = tempfile::tempdir().unwrap();
    let old_bytes = pattern(2 * SLICE_BYTES, 2);
    let (origin, cache) = cached_origin(&s3, "a.ts", &old_bytes, dir.path()).await;
    let key = origin.url.key("a.ts");
    let old = cache.open_object(&key).await.unwrap();
    cache.slice(&old, 0).await.unwrap();
    let new_bytes = pattern(2 * SLICE_BYTES + 5, 3);
    origin
        .store
        .put(&key, PutPayload::from(new_bytes.clone()))
        .await
        .unwrap();
    // The old version's next slice: the origin refuses it (If-Match).
    let e = cache.slice(&old, 1).await.unwrap_err();
    assert!(matches!(e, CacheError::Changed { .. }), "{e}");
    let new = cache.open_object(&key).await.unwrap();
    assert_ne!(new.etag, old.etag);
    let got = cache.read(&new, 0..new.size).await.unwrap();
    assert_eq!(blake3::hash(&got), blake3::hash(&new_bytes));
}

#[tokio::test]
async fn a_flipped_byte_in_a_cached_slice_is_fetched_again_and_a_restart_fetches_nothing() {
    let s3 = S3Server::start("films");
    let dir = tempfile::tempdir().unwrap();
    let bytes = pattern(2 * SLICE_BYTES + 1000, 4);
    let (origin, cache) = cached_origin(&s3, "a.ts", &bytes, dir.path()).await;
    let object = cache.open_object(&origin.url.key("a.ts")).await.unwrap();
    cache.read(&object, 0..object.size).await.unwrap();
    assert_eq!(s3.requests("GetObject").len(), 3);
    let path = cache.object_path(&object);
    let mut stored = std::fs::read(&path).unwrap();
    stored[SLICE_BYTES as usize + 777] ^= 0x20;
    std::fs::write(&path, stored).unwrap();
    let got = cache.read(&object, 0..object.size).await.unwrap();
    assert_eq!(blake3::hash(&got), blake3::hash(&bytes));
    assert_eq!(
        s3.requests("GetObject").len(),
        4,
        "only the flipped slice again"
    );
    assert_eq!(cache.stats.corrupt.load(Ordering::Relaxed), 1);
    let file = std::fs::read(&path).unwrap();
    assert_eq!(
        blake3::hash(&file),
        blake3::hash(&bytes),
        "the cached file is the object"
    );
    drop(cache);
    let cache = SliceCache::open(origin.store.clone(), dir.path(), 64 * SLICE_BYTES).unwrap();
    let got = cache.read(&object, 0..object.size).await.unwrap();
    assert_eq!(blake3::hash(&got), blake3::hash(&bytes));
    assert_eq!(
        s3.requests("GetObject").len(),
        4,
        "nothing fetched after a restart"
    );
}

#[tokio::test]
async fn with_the_origin_down_what_is_cached_still_reads_and_the_rest_fails_in_time() {
    let s3 = S3Server::start("films");
    let dir = tempfile::tempdir().unwrap();
    let bytes = pattern(SLICE_BYTES + 10, 5);
    let (origin, cache) = cached_origin(&s3, "a.ts", &bytes, dir.path()).await;
    let other = origin.url.key("b.ts");
    (origin.store)
        .put(&other, PutPayload::from(bytes.clone()))
        .await
        .unwrap();
    let object = cache.open_object(&origin.url.key("a.ts")).await.unwrap();
    cache.read(&object, 0..object.size).await.unwrap();
    drop(cache);
    drop(s3);
    // A restarted edge, its origin gone.
    let cache = SliceCache::open(origin.store.clone(), dir.path(), 64 * SLICE_BYTES).unwrap();
    let started = std::time::Instant::now();
    let again = cache.open_object(&origin.url.key("a.ts")).await.unwrap();
    assert_eq!(again, object);
    let got = cache.read(&again, 0..again.size).await.unwrap();
    assert_eq!(blake3::hash(&got), blake3::hash(&bytes));
    assert_eq!(cache.stats.stale_opens.load(Ordering::Relaxed), 1);
    let e = cache.open_object(&other).await.unwrap_err();
    assert!(matches!(e, CacheError::Origin { .. }), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

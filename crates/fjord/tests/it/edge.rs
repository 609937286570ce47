//! The origin and the edge against a real S3 server (versitygw): objects
//! written and read by fjord's origin client, compared by hash.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fjord_edge::publish::{Outcome, PART_BYTES, publish_file};
use fjord_edge::{Origin, OriginUrl};
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
fn publish(s3: &S3Server, files: &[&Path]) -> crate::common::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["publish", "--endpoint", &s3.endpoint])
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
            stdout.contains(&format!("to s3://films/lib/{name} in 1 request")),
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

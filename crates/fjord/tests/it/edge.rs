//! The origin and the edge against a real S3 server (versitygw): objects
//! written and read by fjord's origin client, compared by hash.

use fjord_edge::{Origin, OriginUrl};
use object_store::{ObjectStoreExt, PutPayload};

use crate::common::S3Server;

#[tokio::test]
async fn the_origin_client_writes_and_reads_a_real_s3_server() {
    let s3 = S3Server::start("films");
    let url = OriginUrl::parse("s3://films/lib").unwrap();
    let origin = Origin::connect(url, &s3.origin_config()).unwrap();
    let key = origin.url.key("a b.ts");
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    origin.store.put(&key, PutPayload::from(bytes.clone())).await.unwrap();
    let meta = origin.store.head(&key).await.unwrap();
    assert_eq!(meta.size, bytes.len() as u64);
    assert!(meta.e_tag.is_some(), "an S3 server gives ETags");
    let back = origin.store.get_range(&key, 10..20_010).await.unwrap();
    assert_eq!(blake3::hash(&back), blake3::hash(&bytes[10..20_010]));
    assert_eq!(s3.requests("PutObject").len(), 1, "the server's own log");
    // Stored where the posix backend keeps the bucket's objects.
    let file = s3.dir.path().join("root/films/lib/a b.ts");
    assert_eq!(blake3::hash(&std::fs::read(file).unwrap()), blake3::hash(&bytes));
}

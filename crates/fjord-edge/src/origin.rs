//! The origin: an S3-compatible object store holding every title once,
//! named `s3://BUCKET/PREFIX`, reached through `object_store`'s S3 client
//! (signing, retries with backoff, ranged and conditional GETs, multipart
//! uploads).

use std::sync::Arc;

use std::time::Duration;

use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

/// Why an origin could not be named or reached.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("{0:?}: an origin is named s3://BUCKET or s3://BUCKET/PREFIX")]
    BadUrl(String),
    #[error("origin {url}: {source}")]
    Client {
        url: String,
        source: object_store::Error,
    },
}

/// `s3://BUCKET/PREFIX`, parsed: the bucket and the key prefix every
/// title's objects are under (no leading or trailing `/`, may be empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginUrl {
    pub bucket: String,
    pub prefix: String,
}

impl OriginUrl {
    /// Parses `s3://BUCKET[/PREFIX]`. Bucket names follow S3's rules
    /// (3-63 of lowercase letters, digits, `.` and `-`), so a typo is
    /// refused here rather than as a signature error from the store.
    pub fn parse(url: &str) -> Result<OriginUrl, OriginError> {
        let bad = || OriginError::BadUrl(url.to_owned());
        let rest = url.strip_prefix("s3://").ok_or_else(bad)?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
        let prefix = prefix.trim_matches('/');
        // object_store's paths refuse empty, `.` and `..` segments.
        let prefix_ok = prefix.is_empty() || ObjectPath::parse(prefix).is_ok();
        if !bucket_ok || !prefix_ok || prefix.split('/').any(|s| s == "." || s == "..") {
            return Err(bad());
        }
        Ok(OriginUrl {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// The object key of `name` (a title's file name or a sidecar's).
    pub fn key(&self, name: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.prefix))
        }
    }
}

impl std::fmt::Display for OriginUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.prefix.as_str() {
            "" => write!(f, "s3://{}", self.bucket),
            p => write!(f, "s3://{}/{p}", self.bucket),
        }
    }
}

/// How to reach the origin: the config's `origin`, `origin_endpoint` and
/// `origin_region`; credentials from `AWS_ACCESS_KEY_ID` /
/// `AWS_SECRET_ACCESS_KEY` (and the other `AWS_*` variables the S3 client
/// reads) unless given here.
#[derive(Debug, Clone, Default)]
pub struct OriginConfig {
    /// Any S3-compatible store's address (`http://127.0.0.1:7070`); none
    /// means AWS S3 itself.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

/// An origin, connected: its store and where titles are in it.
#[derive(Debug, Clone)]
pub struct Origin {
    pub url: OriginUrl,
    pub store: Arc<dyn ObjectStore>,
}

impl Origin {
    /// The S3 client for `url`. Nothing is sent yet.
    pub fn connect(url: OriginUrl, config: &OriginConfig) -> Result<Origin, OriginError> {
        // reqwest's TLS takes the process's rustls provider: ring, as
        // fjord's own TLS. Installed once; a second call finds it set.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&url.bucket)
            // Every PUT and part carries its SHA-256, which the store checks
            // before it keeps the bytes.
            .with_checksum_algorithm(Checksum::SHA256)
            // A store that is down is said so in seconds (five tries, about
            // 1.5 s of backoff), not after the client's default 3 minutes.
            .with_retry(RetryConfig {
                max_retries: 4,
                retry_timeout: Duration::from_secs(30),
                ..Default::default()
            })
            .with_client_options(ClientOptions::new().with_connect_timeout(Duration::from_secs(2)));
        if let Some(e) = &config.endpoint {
            // S3-compatible stores are addressed by path, and a store on
            // loopback or in a private network often speaks plain HTTP.
            b = b
                .with_endpoint(e)
                .with_virtual_hosted_style_request(false)
                .with_allow_http(e.starts_with("http://"));
        }
        // Else AWS_REGION, else us-east-1 (the client's own default).
        if let Some(r) = &config.region {
            b = b.with_region(r);
        }
        if let Some(k) = &config.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &config.secret_access_key {
            b = b.with_secret_access_key(s);
        }
        let store = b.build().map_err(|source| OriginError::Client {
            url: url.to_string(),
            source,
        })?;
        Ok(Origin {
            url,
            store: Arc::new(store),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = OriginUrl::parse("s3://films/library/2026/").unwrap();
        assert_eq!(u.bucket, "films");
        assert_eq!(u.prefix, "library/2026");
        assert_eq!(u.key("a.ts").as_ref(), "library/2026/a.ts");
        assert_eq!(u.to_string(), "s3://films/library/2026");
        let bare = OriginUrl::parse("s3://films").unwrap();
        assert_eq!(bare.prefix, "");
        assert_eq!(bare.key("a.ts").as_ref(), "a.ts");
        for bad in [
            "films/a",
            "http://films/a",
            "s3://",
            "s3://ab",
            "s3://Films",
            "s3://films/a//b",
            "s3://films/../b",
            "s3://fi_lms",
        ] {
            assert!(OriginUrl::parse(bad).is_err(), "{bad}");
        }
    }
}

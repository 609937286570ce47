//! An etcd v3 client over etcd's JSON gateway (`/v3/kv/…`, `/v3/lease/…`,
//! `/v3/watch`; served by every etcd ≥ 3.4 on its client port), with the
//! HTTP client already in the tree (reqwest, object_store's). Why not
//! `etcd-client`: its build runs `protoc`, which a fresh machine that has
//! only the Rust toolchain lacks (`make run` must build there); the five
//! calls a member makes are small JSON documents.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use serde_json::{Value, json};

pub use crate::answer::{Kv, Listing};
use crate::answer::{first_document, id_of, is_event, listing, range_end};

/// The members' keys: `PREFIX` + node name.
pub const PREFIX: &str = "/fjord/members/";

/// The most bytes read of one answer: 1,024 members of a few KiB each
/// (a name, two URLs, 32 titles) are far less. A list over it is read
/// again one key at a time ([`Etcd::list`]); the watch's notifications
/// are only counted, never kept.
pub const MAX_ANSWER: usize = 16 << 20;

/// Why a call failed.
enum Failed {
    /// etcd answered more than [`MAX_ANSWER`] bytes (another endpoint
    /// would say the same).
    TooLarge,
    Other(String),
}

impl From<Failed> for String {
    fn from(f: Failed) -> String {
        match f {
            Failed::TooLarge => format!("an answer over {} MiB", MAX_ANSWER >> 20),
            Failed::Other(why) => why,
        }
    }
}

/// A client of the etcd cluster at `endpoints`: each call goes to the
/// endpoint that answered last, then the others in turn.
pub struct Etcd {
    http: reqwest::Client,
    endpoints: Vec<String>,
    good: AtomicUsize,
    timeout: Duration,
}

impl Etcd {
    /// A client of `endpoints` (`http://HOST:2379`), each call bounded by
    /// `timeout`.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Etcd, String> {
        if endpoints.is_empty() {
            return Err("no etcd endpoint".into());
        }
        // reqwest is built without a default crypto provider; ring is the
        // one of this tree (idempotent).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Etcd {
            http,
            endpoints: endpoints
                .iter()
                .map(|e| e.trim_end_matches('/').to_owned())
                .collect(),
            good: AtomicUsize::new(0),
            timeout,
        })
    }

    /// POSTs `body` to `path` at each endpoint in turn until one answers;
    /// its first JSON document.
    async fn call(&self, path: &str, body: &Value) -> Result<Value, Failed> {
        let first = self.good.load(Ordering::Relaxed);
        let mut why = String::new();
        for i in 0..self.endpoints.len() {
            let at = (first + i) % self.endpoints.len();
            match self.call_at(at, path, body).await {
                Ok(v) => {
                    self.good.store(at, Ordering::Relaxed);
                    return Ok(v);
                }
                Err(Failed::TooLarge) => return Err(Failed::TooLarge),
                Err(Failed::Other(e)) => why = format!("{}: {e}", self.endpoints[at]),
            }
        }
        Err(Failed::Other(why))
    }

    async fn call_at(&self, at: usize, path: &str, body: &Value) -> Result<Value, Failed> {
        let other = |e: reqwest::Error| Failed::Other(e.to_string());
        let url = format!("{}{path}", self.endpoints[at]);
        let mut r = (self.http.post(url))
            .timeout(self.timeout)
            .body(body.to_string())
            .send()
            .await
            .map_err(other)?;
        let status = r.status();
        let mut bytes = Vec::new();
        while let Some(c) = r.chunk().await.map_err(other)? {
            if bytes.len() + c.len() > MAX_ANSWER {
                return Err(Failed::TooLarge);
            }
            bytes.extend_from_slice(&c);
        }
        let doc = first_document(&bytes).map_err(Failed::Other)?;
        if !status.is_success() {
            let why = doc["message"].as_str().unwrap_or("");
            return Err(Failed::Other(format!("{status}: {why}")));
        }
        Ok(doc)
    }

    /// A new lease of `ttl_s` seconds: its id.
    pub async fn grant(&self, ttl_s: u64) -> Result<String, String> {
        let v = self
            .call("/v3/lease/grant", &json!({ "TTL": ttl_s }))
            .await
            .map_err(String::from)?;
        id_of(&v["ID"]).ok_or_else(|| format!("no lease granted: {v}"))
    }

    /// Renews `lease`: whether it was still alive.
    pub async fn keep_alive(&self, lease: &str) -> Result<bool, String> {
        let v = self
            .call("/v3/lease/keepalive", &json!({ "ID": lease }))
            .await
            .map_err(String::from)?;
        // An expired lease comes back with no TTL (zero, left out).
        Ok(id_of(&v["result"]["TTL"]).is_some_and(|t| t != "0"))
    }

    /// Puts `value` at `key`, bound to `lease`.
    pub async fn put(&self, key: &str, value: &[u8], lease: &str) -> Result<(), String> {
        let body = json!({ "key": B64.encode(key), "value": B64.encode(value), "lease": lease });
        self.call("/v3/kv/put", &body).await?;
        Ok(())
    }

    /// The first `limit` keys under `prefix` by age (oldest first: keys
    /// written later cannot push out those already there), with their
    /// values. A list over [`MAX_ANSWER`] is read again as its keys, then
    /// each value by itself: a value too large alone is `None`, and the
    /// others are still read.
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, String> {
        let mut range = json!({
            "key": B64.encode(prefix), "range_end": B64.encode(range_end(prefix)),
            "limit": limit, "sort_order": "ASCEND", "sort_target": "CREATE",
        });
        match self.call("/v3/kv/range", &range).await {
            Ok(v) => return Ok(listing(&v)),
            Err(Failed::Other(why)) => return Err(why),
            Err(Failed::TooLarge) => {}
        }
        range["keys_only"] = true.into();
        let keys = (self.call("/v3/kv/range", &range).await)
            .map_err(|e| format!("the keys alone: {}", String::from(e)))?;
        let mut all = listing(&keys);
        let mut kvs = Vec::with_capacity(all.kvs.len());
        for (key, _) in all.kvs {
            let one = json!({ "key": B64.encode(&key) });
            match self.call("/v3/kv/range", &one).await {
                // A key deleted meanwhile is left out.
                Ok(v) => kvs.extend(listing(&v).kvs.into_iter().take(1)),
                Err(Failed::TooLarge) => kvs.push((key, None)),
                Err(Failed::Other(why)) => return Err(why),
            }
        }
        all.kvs = kvs;
        all.piecemeal = true;
        Ok(all)
    }

    /// Watches the keys under `prefix`, calling `changed` whenever etcd
    /// says something of them, until the stream ends or is silent for
    /// `quiet` (etcd is asked for progress notes, so a live watch is not).
    pub async fn watch(&self, prefix: &str, quiet: Duration, mut changed: impl FnMut()) -> String {
        let at = self.good.load(Ordering::Relaxed) % self.endpoints.len();
        let url = format!("{}/v3/watch", self.endpoints[at]);
        let body = json!({ "create_request": {
            "key": B64.encode(prefix), "range_end": B64.encode(range_end(prefix)),
            "progress_notify": true,
        }});
        let sent = self.http.post(url).body(body.to_string()).send();
        let mut r = match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(r)) if r.status().is_success() => r,
            Ok(Ok(r)) => return format!("watch: {}", r.status()),
            Ok(Err(e)) => return format!("watch: {e}"),
            Err(_) => return "watch: no answer".into(),
        };
        loop {
            match tokio::time::timeout(quiet, r.chunk()).await {
                Ok(Ok(Some(c))) if is_event(&c) => changed(),
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => return "watch: etcd ended it".into(),
                Ok(Err(e)) => return format!("watch: {e}"),
                Err(_) => return "watch: silent".into(),
            }
        }
    }
}

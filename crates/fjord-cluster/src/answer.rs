//! etcd's JSON gateway answers, decoded: pure code (bytes in, keys and
//! values out), so the parsing of what the network sends is fuzzed
//! (`fuzz/fuzz_targets/cluster_records.rs`) without the HTTP client.

use base64::{Engine as _, engine::general_purpose::STANDARD as B64};
use serde_json::Value;

/// A key under a prefix, with its value; `None`: the value alone made an
/// answer too large (`etcd::MAX_ANSWER`).
pub type Kv = (String, Option<Vec<u8>>);

/// The keys under a prefix, oldest first, and how many more there are.
pub struct Listing {
    pub kvs: Vec<Kv>,
    /// Keys under the prefix past the limit, not read.
    pub unread: u64,
    /// The list was over the most bytes one answer may have, and read one
    /// key at a time.
    pub piecemeal: bool,
}

/// The first JSON document of an answer (the gateway streams more after
/// it on a watch), or why there is none.
pub fn first_document(bytes: &[u8]) -> Result<Value, String> {
    serde_json::Deserializer::from_slice(bytes)
        .into_iter::<Value>()
        .next()
        .ok_or_else(|| "an empty answer".to_owned())?
        .map_err(|e| e.to_string())
}

/// A range's answer: its keys (UTF-8 ones) with their values.
pub fn listing(v: &Value) -> Listing {
    let kvs = v["kvs"].as_array().map(Vec::as_slice).unwrap_or_default();
    let decode = |v: &Value| B64.decode(v.as_str().unwrap_or_default()).ok();
    let kvs: Vec<Kv> = (kvs.iter())
        .filter_map(|kv| {
            let key = String::from_utf8(decode(&kv["key"])?).ok()?;
            Some((key, Some(decode(&kv["value"]).unwrap_or_default())))
        })
        .collect();
    // `count` is every key in the range; `more` says the limit cut it.
    let count = id_of(&v["count"])
        .and_then(|c| c.parse().ok())
        .unwrap_or(0u64);
    let unread = match v["more"].as_bool() {
        Some(true) => count.saturating_sub(kvs.len() as u64),
        _ => 0,
    };
    Listing {
        kvs,
        unread,
        piecemeal: false,
    }
}

/// Whether a piece of the watch stream tells of a change (not the
/// creation or a progress note). A piece cut mid-event counts: a list
/// too many is harmless.
pub fn is_event(chunk: &[u8]) -> bool {
    chunk.windows(9).any(|w| w == b"\"events\":")
}

/// An int64 of the gateway (a JSON string, or a number).
pub fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The end of a prefix's range: the prefix with its last byte one
/// higher (etcd's `--prefix`).
pub fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_prefix_range_ends_past_every_key_under_it() {
        assert_eq!(range_end("/fjord/members/"), b"/fjord/members0");
        assert_eq!(range_end("a\u{7f}"), [b'a', 0x80]);
        assert_eq!(range_end(""), vec![0]);
    }

    #[test]
    fn ids_are_strings_or_numbers() {
        assert_eq!(id_of(&json!("123")), Some("123".into()));
        assert_eq!(id_of(&json!(5)), Some("5".into()));
        assert_eq!(id_of(&Value::Null), None);
    }

    #[test]
    fn a_range_answer_says_how_many_keys_its_limit_left_unread() {
        let kv = |k: &str, v: &str| json!({ "key": B64.encode(k), "value": B64.encode(v) });
        let cut = json!({ "kvs": [kv("/p/a", "1"), kv("/p/b", "")], "more": true, "count": "5" });
        let l = listing(&cut);
        let want = [("/p/a", &b"1"[..]), ("/p/b", b"")].map(|(k, v)| (k.into(), Some(v.to_vec())));
        assert_eq!((l.kvs, l.unread, l.piecemeal), (want.to_vec(), 3, false));
        // All read: `more` left out; no keys at all: `kvs` left out too.
        assert_eq!(
            listing(&json!({ "kvs": [kv("/p/a", "1")], "count": 1 })).unread,
            0
        );
        assert!(listing(&json!({ "header": {} })).kvs.is_empty());
        let not_utf8 = json!({ "kvs": [{ "key": B64.encode([0xff]), "value": "" }] });
        assert!(listing(&not_utf8).kvs.is_empty());
    }

    #[test]
    fn only_events_are_changes() {
        assert!(is_event(
            br#"{"result":{"header":{},"events":[{"kv":{}}]}}"#
        ));
        assert!(!is_event(br#"{"result":{"header":{},"created":true}}"#));
    }
}

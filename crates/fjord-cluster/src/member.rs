//! A member's record: what a node says of itself under its etcd key (or
//! a `[[peer]]` table says of it), as JSON.

use serde::{Deserialize, Serialize};

/// A node of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Unique in the cluster: its key, and what titles hash with.
    pub name: String,
    /// Where its RTSP listener is reached, `rtsp://HOST:PORT`.
    pub rtsp: String,
    /// Where its HTTP listener is reached, `http://HOST:PORT`; empty: none.
    #[serde(default)]
    pub http: String,
    /// Where it takes RTSP over TLS, `rtsps://HOST:PORT`; empty: none (a
    /// request that came over TLS is then never sent there).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rtsps: String,
    /// Where it takes HTTPS, `https://HOST:PORT`; empty: none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub https: String,
    /// The most sessions it takes; 0: unknown.
    #[serde(default)]
    pub capacity: u64,
    /// Sessions it serves now.
    #[serde(default)]
    pub load: u64,
    /// The titles it was asked for most, with their rate (requests a
    /// second, decayed), for the cluster's sum.
    #[serde(default)]
    pub hot: Vec<(String, f64)>,
    /// The titles with the most sessions here, with their sessions, for
    /// the cluster's sum (what a title costs: its home set grows with it).
    #[serde(default)]
    pub busy: Vec<(String, u64)>,
}

/// The largest record taken from etcd: a record is a name, two URLs and
/// [`crate::popularity::PUBLISHED`] titles.
pub const MAX_RECORD: usize = 64 * 1024;

impl Member {
    /// The record as stored.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a member serializes")
    }

    /// A stored record, or why it is not one.
    pub fn from_json(bytes: &[u8]) -> Result<Member, String> {
        if bytes.len() > MAX_RECORD {
            return Err(format!("a member record of {} bytes", bytes.len()));
        }
        let m: Member = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if m.name.is_empty() || !m.rtsp.starts_with("rtsp://") {
            return Err("a member record needs a name and an rtsp:// URL".into());
        }
        if !(m.http.is_empty() || m.http.starts_with("http://") || m.http.starts_with("https://")) {
            return Err("a member's http URL must be http:// or https://".into());
        }
        let tls = |url: &str, scheme: &str| url.is_empty() || url.starts_with(scheme);
        if !tls(&m.rtsps, "rtsps://") || !tls(&m.https, "https://") {
            return Err("a member's rtsps and https URLs must be rtsps:// and https://".into());
        }
        Ok(m)
    }

    /// This member's rate for `title`, as it published it.
    pub fn rate_of(&self, title: &str) -> f64 {
        (self.hot.iter())
            .find(|(t, _)| t == title)
            .map_or(0.0, |(_, r)| r.max(0.0))
    }

    /// This member's sessions of `title`, as it published them.
    pub fn sessions_of(&self, title: &str) -> u64 {
        (self.busy.iter())
            .find(|(t, _)| t == title)
            .map_or(0, |(_, n)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_bad_ones_are_refused() {
        let m = Member {
            name: "a".into(),
            rtsp: "rtsp://10.0.0.1:8554".into(),
            http: "http://10.0.0.1:8080".into(),
            rtsps: "rtsps://10.0.0.1:322".into(),
            https: String::new(),
            capacity: 100,
            load: 3,
            hot: vec![("t.ts".into(), 2.5)],
            busy: vec![("t.ts".into(), 7)],
        };
        assert_eq!(Member::from_json(&m.to_json()).unwrap(), m);
        assert_eq!(m.rate_of("t.ts"), 2.5);
        assert_eq!(m.rate_of("u.ts"), 0.0);
        assert_eq!((m.sessions_of("t.ts"), m.sessions_of("u.ts")), (7, 0));
        // A record of a node that publishes no sessions (an older one).
        let old = br#"{"name":"a","rtsp":"rtsp://x","hot":[["t.ts",1.0]]}"#;
        assert_eq!(Member::from_json(old).unwrap().sessions_of("t.ts"), 0);
        for bad in [
            &b"{}"[..],
            b"not json",
            br#"{"name":"","rtsp":"rtsp://x"}"#,
            br#"{"name":"a","rtsp":"http://x"}"#,
            br#"{"name":"a","rtsp":"rtsp://x","http":"ftp://x"}"#,
            br#"{"name":"a","rtsp":"rtsp://x","rtsps":"rtsp://x"}"#,
            br#"{"name":"a","rtsp":"rtsp://x","https":"http://x"}"#,
        ] {
            assert!(Member::from_json(bad).is_err());
        }
        let huge = vec![b' '; MAX_RECORD + 1];
        assert!(Member::from_json(&huge).is_err());
    }
}

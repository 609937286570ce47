//! Static peers' liveness: without etcd no lease tells of a dead peer, so
//! each node opens a TCP connection to every `[[peer]]`'s RTSP listener
//! every [`EVERY`] (each bounded by [`TIMEOUT`], all at once) and keeps in
//! its [`View`] only the peers that answered lately. A peer is out after
//! [`DOWN_AFTER`] misses in a row (one lost SYN does not move its
//! titles) and back at its first answer. A connect is all a probe costs
//! the peer: it is closed at once, before any request.

use std::sync::Arc;
use std::time::Duration;

use crate::{Member, View};

/// Time between two rounds of probes.
pub const EVERY: Duration = Duration::from_secs(1);
/// The most a probe waits for its connection.
pub const TIMEOUT: Duration = Duration::from_millis(500);
/// Misses in a row that put a peer out.
pub const DOWN_AFTER: u32 = 2;

/// Each peer's misses in a row: pure, fed the probes' results.
#[derive(Debug, Clone)]
pub struct Liveness {
    misses: Vec<u32>,
}

impl Liveness {
    /// `n` peers, all alive.
    pub fn new(n: usize) -> Liveness {
        Liveness { misses: vec![0; n] }
    }

    /// Peer `i` answered (`ok`) or not; whether it went out or came back.
    pub fn record(&mut self, i: usize, ok: bool) -> bool {
        let was = self.alive(i);
        self.misses[i] = if ok {
            0
        } else {
            self.misses[i].saturating_add(1)
        };
        was != self.alive(i)
    }

    pub fn alive(&self, i: usize) -> bool {
        self.misses[i] < DOWN_AFTER
    }
}

/// `host:port` of an `rtsp://HOST[:PORT][/…]` URL (port 554 by default).
pub fn authority(url: &str) -> Option<String> {
    let rest = url.strip_prefix("rtsp://")?;
    let host = rest.split('/').next().filter(|h| !h.is_empty())?;
    let has_port = match host.rfind(']') {
        Some(end) => host[end..].contains(':'),
        None => host.contains(':'),
    };
    Some(if has_port {
        host.to_owned()
    } else {
        format!("{host}:554")
    })
}

/// Probes `peers` (this node left out) for good, keeping `view`'s members
/// to those alive.
pub async fn keep(view: Arc<View>, peers: Vec<Member>) {
    let peers: Vec<Member> = peers.into_iter().filter(|p| p.name != view.me()).collect();
    let mut live = Liveness::new(peers.len());
    loop {
        tokio::time::sleep(EVERY).await;
        let probes: Vec<_> = (peers.iter())
            .map(|p| {
                let url = p.rtsp.clone();
                tokio::spawn(async move { answers(&url).await })
            })
            .collect();
        let mut results = Vec::with_capacity(probes.len());
        for probe in probes {
            results.push(probe.await.unwrap_or(false));
        }
        let mut changed = false;
        for (i, ok) in results.into_iter().enumerate() {
            if live.record(i, ok) {
                changed = true;
                let (name, state) = (&peers[i].name, if ok { "back" } else { "out" });
                tracing::warn!(peer = %name, "cluster: static peer {state}");
            }
        }
        if changed {
            let alive = (peers.iter().enumerate())
                .filter(|(i, _)| live.alive(*i))
                .map(|(_, p)| p.clone());
            view.replace(alive.collect());
        }
    }
}

/// Whether `rtsp`'s listener takes a connection within [`TIMEOUT`].
async fn answers(rtsp: &str) -> bool {
    let Some(addr) = authority(rtsp) else {
        return false;
    };
    matches!(
        tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_goes_out_after_two_misses_and_back_at_one_answer() {
        let mut l = Liveness::new(2);
        assert!(!l.record(0, false), "one miss is not enough");
        assert!(l.alive(0));
        assert!(l.record(0, false));
        assert!(!l.alive(0) && l.alive(1));
        assert!(!l.record(0, false));
        assert!(l.record(0, true));
        assert!(l.alive(0));
    }

    #[test]
    fn authorities_of_rtsp_urls() {
        assert_eq!(
            authority("rtsp://10.0.0.1:8554").as_deref(),
            Some("10.0.0.1:8554")
        );
        assert_eq!(authority("rtsp://h/x").as_deref(), Some("h:554"));
        assert_eq!(authority("rtsp://[::1]:9/").as_deref(), Some("[::1]:9"));
        assert_eq!(authority("rtsp://[::1]").as_deref(), Some("[::1]:554"));
        assert_eq!(authority("http://h:1"), None);
        assert_eq!(authority("rtsp:///x"), None);
    }
}

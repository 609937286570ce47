//! The members a node knows of, and how it came to know them: kept by
//! [`crate::membership`] from etcd, or fixed from `[[peer]]` tables.

use std::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicBool, AtomicU64, Ordering},
};
use std::time::SystemTime;

use crate::{etcd::MAX_ANSWER, member::Member, membership::MAX_MEMBERS};

/// The other members (never this node: it adds itself with its load now)
/// and the health of the membership.
#[derive(Debug)]
pub struct View {
    me: String,
    others: RwLock<Arc<Vec<Member>>>,
    /// Members come from etcd (not a static list).
    etcd: bool,
    /// The last call to etcd succeeded.
    reachable: AtomicBool,
    /// Calls to etcd that failed.
    errors: AtomicU64,
    /// Leases granted: the first, and one after each lease lost.
    leases: AtomicU64,
    last_error: Mutex<Option<(SystemTime, String)>>,
    /// What the last list of etcd's keys left out, told once.
    left_out: Mutex<LeftOut>,
}

/// Keys under the members' prefix the last list did not take.
#[derive(Debug, Default)]
struct LeftOut {
    /// Keys whose value is not a record of the node the key names.
    refused: Vec<String>,
    /// Keys past [`MAX_MEMBERS`], not read.
    unread: u64,
    /// The list was over [`MAX_ANSWER`], read one key at a time.
    piecemeal: bool,
}

/// New refused keys logged one by one in a list; the rest are counted.
const TOLD_KEYS: usize = 8;

/// What the admin API shows of the membership.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Health {
    /// `etcd` or `static`.
    pub source: &'static str,
    pub reachable: bool,
    pub errors: u64,
    pub leases: u64,
    /// The last failure, seconds since the epoch and why.
    pub last_error: Option<(u64, String)>,
    /// Keys under the members' prefix whose value is not a member record
    /// (too large, not JSON, another node's), in the last list.
    pub refused: usize,
    /// Keys past the most read ([`MAX_MEMBERS`]), in the last list.
    pub unread: u64,
}

impl View {
    /// The view of node `me`: of a static list (`etcd` false: `others` for
    /// good), or of etcd, empty until its first answer.
    pub fn new(me: &str, others: Vec<Member>, etcd: bool) -> View {
        View {
            me: me.to_owned(),
            others: RwLock::new(Arc::new(
                others.into_iter().filter(|m| m.name != me).collect(),
            )),
            etcd,
            reachable: AtomicBool::new(!etcd),
            errors: AtomicU64::new(0),
            leases: AtomicU64::new(0),
            last_error: Mutex::new(None),
            left_out: Mutex::default(),
        }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// The other members now.
    pub fn others(&self) -> Arc<Vec<Member>> {
        self.others
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// etcd's members now (this node's own record left out).
    pub(crate) fn replace(&self, members: Vec<Member>) {
        let others: Vec<Member> = members.into_iter().filter(|m| m.name != self.me).collect();
        let old = self.others();
        let names = |v: &[Member]| v.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
        if names(&old) != names(&others) {
            tracing::info!(members = ?names(&others), "cluster: the other members changed");
        }
        *self.others.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(others);
    }

    /// A call to etcd succeeded.
    pub(crate) fn reached(&self) {
        if !self.reachable.swap(true, Ordering::Relaxed) && self.errors() > 0 {
            tracing::info!("cluster: etcd answers again");
        }
    }

    /// A call to etcd failed: the members stay as they were.
    pub(crate) fn failed(&self, why: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if self.reachable.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                "cluster: etcd does not answer ({why}); serving with the members last known"
            );
        }
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((SystemTime::now(), why.to_owned()));
    }

    /// What a list of etcd's keys left out: `refused` keys with why,
    /// `unread` keys past the cap, and whether it was read `piecemeal`.
    /// Logged when it changes, not at every list.
    pub(crate) fn listed(&self, refused: Vec<(String, String)>, unread: u64, piecemeal: bool) {
        let mut was = self.left_out.lock().unwrap_or_else(|e| e.into_inner());
        let new: Vec<&(String, String)> = (refused.iter())
            .filter(|(key, _)| !was.refused.contains(key))
            .collect();
        for (key, why) in new.iter().take(TOLD_KEYS) {
            tracing::warn!(%key, "cluster: not a member record ({why}); left out");
        }
        if new.len() > TOLD_KEYS {
            let more = new.len() - TOLD_KEYS;
            tracing::warn!("cluster: {more} more keys that are not member records left out");
        }
        if unread > 0 && was.unread == 0 {
            tracing::warn!(
                "cluster: more than {MAX_MEMBERS} keys under the members' prefix; \
                 the oldest {MAX_MEMBERS} read, {unread} newer ones left out"
            );
        } else if unread == 0 && was.unread > 0 {
            tracing::info!("cluster: every key under the members' prefix is read again");
        }
        if piecemeal && !was.piecemeal {
            tracing::warn!(
                "cluster: the members' list is over {} MiB; read one key at a time",
                MAX_ANSWER >> 20
            );
        }
        *was = LeftOut {
            refused: refused.into_iter().map(|(key, _)| key).collect(),
            unread,
            piecemeal,
        };
    }

    pub(crate) fn leased(&self) {
        self.leases.fetch_add(1, Ordering::Relaxed);
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    pub fn health(&self) -> Health {
        let last = self
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let left_out = self.left_out.lock().unwrap_or_else(|e| e.into_inner());
        Health {
            source: if self.etcd { "etcd" } else { "static" },
            refused: left_out.refused.len(),
            unread: left_out.unread,
            reachable: self.reachable(),
            errors: self.errors(),
            leases: self.leases.load(Ordering::Relaxed),
            last_error: last.map(|(t, why)| {
                let s = t
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                (s, why)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_list_left_out_is_shown_until_a_list_takes_it() {
        let view = View::new("me", Vec::new(), true);
        let refused = |keys: &[&str]| keys.iter().map(|k| (k.to_string(), "bad".into())).collect();
        view.listed(refused(&["/a", "/b"]), 7, true);
        assert_eq!((view.health().refused, view.health().unread), (2, 7));
        // The same keys again: nothing new to tell, the counts stay.
        view.listed(refused(&["/a", "/b"]), 7, true);
        assert_eq!((view.health().refused, view.health().unread), (2, 7));
        view.listed(Vec::new(), 0, false);
        assert_eq!((view.health().refused, view.health().unread), (0, 0));
    }
}

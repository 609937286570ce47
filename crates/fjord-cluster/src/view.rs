//! The members a node knows of, and how it came to know them: kept by
//! [`crate::membership`] from etcd, or fixed from `[[peer]]` tables.

use std::sync::{
    Arc, Mutex, RwLock,
    atomic::{AtomicBool, AtomicU64, Ordering},
};
use std::time::SystemTime;

use crate::member::Member;

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
}

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
        Health {
            source: if self.etcd { "etcd" } else { "static" },
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

//! Keeping this node a member in etcd: a lease of `ttl` renewed every
//! third of it, the node's record (with its load now) put under the lease
//! each time, and the others listed then and whenever the watch of their
//! keys tells of a change (in a task of its own, so a slow list never
//! delays a renewal). A node that dies stops renewing: etcd deletes
//! its key within the TTL and the watch tells the others. etcd not
//! answering: the members last known stay, the failure is logged once and
//! counted; a lease found expired when etcd answers again is replaced.

use std::{sync::Arc, time::Duration};

use tokio::sync::Notify;

use crate::{
    etcd::{Etcd, MAX_ANSWER, PREFIX},
    member::Member,
    view::View,
};

/// This node's record now (its load changes); none: the node is going.
pub type Record = Arc<dyn Fn() -> Option<Member> + Send + Sync>;

/// Keeps `view` (of node `me()`) a member through `etcd`, for ever.
pub async fn keep(etcd: Arc<Etcd>, ttl: Duration, me: Record, view: Arc<View>) {
    let changed = Arc::new(Notify::new());
    tokio::spawn(watch(etcd.clone(), changed.clone(), view.clone()));
    tokio::spawn(lister(etcd.clone(), changed.clone(), view.clone()));
    let every = (ttl / 3).max(Duration::from_millis(200));
    let mut lease = None;
    loop {
        let next = tokio::time::Instant::now() + every;
        match renew(&etcd, ttl, &mut lease, &me, &view).await {
            Ok(()) => {
                view.reached();
                changed.notify_one();
            }
            Err(e) => view.failed(&e),
        }
        tokio::time::sleep_until(next).await;
    }
}

/// Lists the members each time it is woken (by a renewal or the watch),
/// apart from the renewals: a slow list (a large one, read key by key)
/// never delays the lease. Wakings during a list make one more list.
async fn lister(etcd: Arc<Etcd>, changed: Arc<Notify>, view: Arc<View>) {
    loop {
        changed.notified().await;
        match list(&etcd, &view).await {
            Ok(()) => view.reached(),
            Err(e) => view.failed(&e),
        }
    }
}

/// One round: the lease renewed (or a new one), the record put.
async fn renew(
    etcd: &Etcd,
    ttl: Duration,
    lease: &mut Option<String>,
    me: &Record,
    view: &View,
) -> Result<(), String> {
    let alive = match lease {
        Some(id) => etcd.keep_alive(id).await?,
        None => false,
    };
    let id = match (alive, lease.as_ref()) {
        (true, Some(id)) => id.clone(),
        _ => {
            if lease.is_some() {
                tracing::warn!("cluster: this node's lease expired; joining again");
            }
            let id = etcd.grant(ttl.as_secs().max(1)).await?;
            view.leased();
            tracing::info!(lease = %id, "cluster: joined");
            lease.insert(id).clone()
        }
    };
    let Some(record) = me() else {
        return Ok(());
    };
    let key = format!("{PREFIX}{}", record.name);
    etcd.put(&key, &record.to_json(), &id).await
}

/// The members etcd holds now, into `view`: the oldest [`MAX_MEMBERS`]
/// keys, each a member when its value is a record of the node its key
/// names; what is not is left out and told of once ([`View::listed`]).
async fn list(etcd: &Etcd, view: &View) -> Result<(), String> {
    let listing = etcd.list(PREFIX, MAX_MEMBERS).await?;
    let mut refused = Vec::new();
    let members = (listing.kvs.into_iter())
        .filter_map(|(key, value)| match member_of(&key, value.as_deref()) {
            Ok(m) => Some(m),
            Err(why) => {
                refused.push((key, why));
                None
            }
        })
        .collect();
    view.replace(members);
    view.listed(refused, listing.unread, listing.piecemeal);
    Ok(())
}

/// The member a key under [`PREFIX`] holds, or why it holds none.
fn member_of(key: &str, value: Option<&[u8]>) -> Result<Member, String> {
    let value = value.ok_or_else(|| format!("its value is over {} MiB", MAX_ANSWER >> 20))?;
    let m = Member::from_json(value)?;
    match key.strip_prefix(PREFIX) == Some(m.name.as_str()) {
        true => Ok(m),
        false => Err(format!("its record names another node, {:?}", m.name)),
    }
}

/// The most keys read under [`PREFIX`] (so the most members taken).
pub const MAX_MEMBERS: usize = 1024;

/// Watches the members' keys, waking the list on each change; reopened a
/// second after it fails.
async fn watch(etcd: Arc<Etcd>, changed: Arc<Notify>, view: Arc<View>) {
    loop {
        let why = etcd
            .watch(PREFIX, Duration::from_secs(900), || changed.notify_one())
            .await;
        tracing::debug!("cluster: {why}; watching again");
        if view.reachable() {
            // A watch ends when etcd does: list now, not at the next round.
            changed.notify_one();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_a_member_only_when_its_record_names_its_node() {
        let record = br#"{"name":"a","rtsp":"rtsp://10.0.0.1:8554"}"#;
        let m = member_of("/fjord/members/a", Some(record)).unwrap();
        assert_eq!(
            (m.name.as_str(), m.rtsp.as_str()),
            ("a", "rtsp://10.0.0.1:8554")
        );
        let other = member_of("/fjord/members/b", Some(record)).unwrap_err();
        assert!(other.contains("another node"), "{other}");
        let too_large = member_of("/fjord/members/a", None).unwrap_err();
        assert!(too_large.contains("over 16 MiB"), "{too_large}");
        let huge = vec![b' '; crate::member::MAX_RECORD + 1];
        assert!(member_of("/fjord/members/a", Some(&huge)).is_err());
    }
}

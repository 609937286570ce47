//! The cluster on the admin listener: `GET /api/v1/cluster` (this node,
//! the other members with their load and most asked-for titles, etcd's
//! health) and its figures on `/metrics`.

use std::sync::Arc;

use axum::{Json, extract::State};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::scrape::{Labels, counter, gauge};
use crate::Server;

/// `null` when the node is in no cluster (not 404: the status page asks
/// every node, and a browser logs a 404 as an error).
pub(crate) async fn status(State(server): State<Arc<Server>>) -> Json<Value> {
    let Some(st) = server.cluster.status(&server) else {
        return Json(Value::Null);
    };
    let holds: Vec<String> = (server.catalog.loaded().into_iter())
        .map(|(name, _)| name.to_string())
        .collect();
    Json(json!({
        "me": st.me,
        "holds": holds,
        "others": st.others,
        "etcd": st.health,
        "redirects": st.redirects,
    }))
}

pub(super) fn metrics(reg: &mut Registry, server: &Server) {
    let Some(st) = server.cluster.status(server) else {
        return;
    };
    let one = |v: i64| [(Labels::new(), v)];
    gauge(
        reg,
        "fjord_cluster_members",
        "Members this node knows of, itself included",
        one(st.others.len() as i64 + 1),
    );
    gauge(
        reg,
        "fjord_cluster_etcd_reachable",
        "1 when etcd answered this node's last call (static lists: 1)",
        one(st.health.reachable as i64),
    );
    gauge(
        reg,
        "fjord_cluster_etcd_refused_keys",
        "Keys under the members' prefix holding no member record, in the last list",
        one(st.health.refused as i64),
    );
    gauge(
        reg,
        "fjord_cluster_etcd_unread_keys",
        "Keys under the members' prefix past the 1,024 read, in the last list",
        one(st.health.unread as i64),
    );
    let count = |v: u64| [(Labels::new(), v)];
    counter(
        reg,
        "fjord_cluster_etcd_errors",
        "Calls to etcd that failed (the members last known were kept)",
        count(st.health.errors),
    );
    counter(
        reg,
        "fjord_cluster_leases",
        "etcd leases granted to this node (one more after each lease lost)",
        count(st.health.leases),
    );
    counter(
        reg,
        "fjord_cluster_redirects",
        "Requests sent on to another member (302)",
        count(st.redirects),
    );
}

//! This node in a cluster of edges (docs/cluster.md): where a request for
//! a title is served. The members come from etcd or `[[peer]]` tables
//! ([`fjord_cluster`]); a title's home nodes are the first of its
//! rendezvous order, more of them the more it is asked for and the more
//! of the cluster's sessions it holds (each member publishes its titles'
//! rates and sessions). DESCRIBE and the HTTP requests that start a viewing
//! (a download, a multivariant playlist, a manifest) ask
//! [`Cluster::redirect`]: a title whose home set does not hold this node
//! (or holds a less loaded one, or this node full, or past its bound of
//! load) is answered 302 to the least loaded home node with room, or the
//! next node in order, the `Location` marked as sent on by placement
//! (served where it lands, never sent back). Media playlists and segments
//! are served where asked: a viewer
//! keeps the node its playlist came from, so a node that comes back takes
//! titles only for new viewers; a multivariant playlist also names the
//! title's next nodes ([`Cluster::elsewhere`]), which an HLS player fails
//! over to.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, OnceLock, Weak},
    time::{Duration, Instant},
};

use fjord_cluster::{
    Etcd, Member, View, mark, membership,
    placement::{self, Choice, Node, Rule},
    popularity::{PUBLISHED, Rates, busiest},
    probe,
};

use crate::{Config, Server};

/// The most other nodes a playlist names as its backups: one survives
/// any single failure; two, a second one while the first is detected.
const BACKUPS: usize = 2;

/// How long a title's request rate is averaged over.
const RATE_WINDOW_S: f64 = 30.0;

/// This node's part in the cluster; not started: no cluster.
#[derive(Default)]
pub(crate) struct Cluster {
    node: OnceLock<Joined>,
}

/// This node: its view of the others, its own record (load apart) and
/// the request rates of its titles.
struct Joined {
    view: Arc<View>,
    me: Member,
    rates: Mutex<Rates>,
    epoch: Instant,
    redirects: std::sync::atomic::AtomicU64,
}

/// Which of a member's URLs a request is sent to: a request that came
/// over TLS goes to a TLS URL only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    Rtsp,
    Http,
    Rtsps,
    Https,
}

impl Scheme {
    /// RTSP's, over TLS or not.
    pub(crate) fn rtsp(tls: bool) -> Scheme {
        if tls { Scheme::Rtsps } else { Scheme::Rtsp }
    }

    /// HTTP's, over TLS or not.
    pub(crate) fn http(tls: bool) -> Scheme {
        if tls { Scheme::Https } else { Scheme::Http }
    }

    /// `member`'s URL of this scheme; none: the request is served here.
    fn base(self, member: &Member) -> Option<&str> {
        let url = match self {
            Scheme::Rtsp => &member.rtsp,
            Scheme::Http => &member.http,
            Scheme::Rtsps => &member.rtsps,
            Scheme::Https => &member.https,
        };
        Some(url.as_str()).filter(|u| !u.is_empty())
    }
}

/// The addresses this node listens at, its URLs' defaults.
pub(crate) struct Listeners {
    pub rtsp: SocketAddr,
    pub http: Option<SocketAddr>,
    /// RTSP over TLS; HTTPS is on the HTTP listener when this is set.
    pub rtsps: Option<SocketAddr>,
}

impl Cluster {
    /// Joins the cluster of `server`'s config, if it names one: this
    /// node's URLs default to its listeners.
    pub(crate) fn start(server: &Arc<Server>, listeners: Listeners) {
        let config = server.config();
        if !config.clustered() {
            return;
        }
        let me = record_of(&config, listeners);
        let url = |u: &str| u.trim_end_matches('/').to_owned();
        let peers: Vec<Member> = (config.peers.iter())
            .map(|p| Member {
                name: p.name.clone(),
                rtsp: url(&p.rtsp),
                http: url(&p.http),
                rtsps: url(&p.rtsps),
                https: url(&p.https),
                capacity: 0,
                load: 0,
                hot: Vec::new(),
                busy: Vec::new(),
            })
            .collect();
        let etcd = !config.cluster_etcd.is_empty();
        let view = Arc::new(View::new(&me.name, peers.clone(), etcd));
        tracing::info!(node = %me.name, rtsp = %me.rtsp, http = %me.http,
            source = if etcd { "etcd" } else { "[[peer]]" }, "cluster: this node");
        let node = Joined {
            view: view.clone(),
            me,
            rates: Mutex::new(Rates::new(RATE_WINDOW_S)),
            epoch: Instant::now(),
            redirects: Default::default(),
        };
        if server.cluster.node.set(node).is_err() {
            return;
        }
        if !etcd {
            tokio::spawn(probe::keep(view, peers));
            return;
        }
        let ttl = Duration::from_secs(config.cluster_ttl_s);
        let timeout = (ttl / 3).clamp(Duration::from_millis(300), Duration::from_secs(2));
        match Etcd::new(&config.cluster_etcd, timeout) {
            Ok(client) => {
                let weak = Arc::downgrade(server);
                let me: membership::Record = Arc::new(move || record_now(&weak));
                tokio::spawn(membership::keep(Arc::new(client), ttl, me, view));
            }
            Err(e) => tracing::error!("cluster: no etcd client: {e}"),
        }
    }

    /// The answer's `Location` for a request of `title` (path and query
    /// `path`) that is to be served elsewhere, marked as sent on from
    /// here (and from where its own mark says it was sent from:
    /// [`mark`]); a request served here counts toward the title's rate.
    pub(crate) fn redirect(
        &self,
        server: &Server,
        title: &str,
        scheme: Scheme,
        path: &str,
    ) -> Option<String> {
        let node = self.node.get()?;
        let now = node.epoch.elapsed().as_nanos() as u64;
        let rates = || node.rates.lock().unwrap_or_else(|e| e.into_inner());
        let others = node.view.others();
        let mut nodes = candidates(&others, scheme);
        let (load, capacity) = load(server);
        let me = node.me.name.as_str();
        nodes.push(Node {
            name: me,
            load,
            capacity,
        });
        let rate = rates().rate(title, now) + others.iter().map(|m| m.rate_of(title)).sum::<f64>();
        let rule = rule_for(server, title, rate, &others, &nodes, scheme);
        let marked = mark::read(path.split_once('?').map_or("", |(_, q)| q));
        let mut via: Vec<&str> = marked.iter().map(String::as_str).collect();
        let to = match placement::choose(title, me, &nodes, rule, &via) {
            Choice::Here => {
                rates().hit(title, now);
                return None;
            }
            Choice::To(to) => to,
        };
        let member = others.iter().find(|m| m.name == to)?;
        let base = scheme.base(member)?;
        node.redirects
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        via.push(me);
        Some(format!("{base}{}", mark::put(path, &via)))
    }

    /// Where `path` (a title's media playlist) is also served should this
    /// node fail: at the title's next nodes in its rendezvous order, which
    /// take its viewers when this one is gone, at most [`BACKUPS`]; none
    /// outside a cluster. Players fail over to them (HLS redundant
    /// variants) without asking this node again.
    pub(crate) fn elsewhere(&self, title: &str, scheme: Scheme, path: &str) -> Vec<String> {
        let Some(node) = self.node.get() else {
            return Vec::new();
        };
        let others = node.view.others();
        let nodes = candidates(&others, scheme);
        (placement::rank(title, &nodes).into_iter())
            .filter_map(|n| others.iter().find(|m| m.name == n.name))
            .filter_map(|m| scheme.base(m))
            .take(BACKUPS)
            .map(|base| format!("{base}{path}"))
            .collect()
    }

    /// The view, for the admin API and metrics; `None`: no cluster.
    pub(crate) fn status(&self, server: &Server) -> Option<Status> {
        let node = self.node.get()?;
        let mut me = record(server, &node.me);
        let now = node.epoch.elapsed().as_nanos() as u64;
        me.hot = node
            .rates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .top(PUBLISHED, now);
        me.busy = {
            let core = server.core.lock();
            busiest(core.sessions.all().map(|s| &*s.title_name), PUBLISHED)
        };
        Some(Status {
            me,
            others: node.view.others().to_vec(),
            health: node.view.health(),
            redirects: node.redirects.load(std::sync::atomic::Ordering::Relaxed),
        })
    }
}

/// How `title`, asked for `rate` times a second across the cluster, is
/// placed among `nodes` (the `others` with a URL of `scheme`, and this
/// node): its homes by that rate and by its sessions across them, and the
/// bound on their loads.
fn rule_for(
    server: &Server,
    title: &str,
    rate: f64,
    others: &[Member],
    nodes: &[Node],
    scheme: Scheme,
) -> Rule {
    let config = server.config();
    let sessions = sessions_of(server, title)
        + (others.iter())
            .filter(|m| scheme.base(m).is_some())
            .map(|m| m.sessions_of(title))
            .sum::<u64>();
    let load = nodes.iter().map(|n| n.load).sum();
    let (n, least) = (nodes.len(), config.cluster_copies);
    let by_rate = placement::copies(rate, config.cluster_hot_rps, least, n);
    let by_sessions =
        placement::copies_for_sessions(sessions, load, n, config.cluster_copy_share_pct);
    Rule {
        copies: by_rate.max(by_sessions),
        balance_pct: config.cluster_balance_pct,
    }
}

/// What the admin API says of the cluster.
#[derive(serde::Serialize)]
pub(crate) struct Status {
    pub me: Member,
    pub others: Vec<Member>,
    pub health: fjord_cluster::Health,
    /// Requests sent on to other members since the start.
    pub redirects: u64,
}

/// The other members a request of `scheme` may be sent to: those with a
/// URL of it (a request over TLS goes to a TLS URL or is served here), so
/// its home set is ranked among them.
fn candidates(others: &[Member], scheme: Scheme) -> Vec<Node<'_>> {
    (others.iter())
        .filter(|m| scheme.base(m).is_some())
        .map(as_node)
        .collect()
}

fn as_node(m: &Member) -> Node<'_> {
    Node {
        name: &m.name,
        load: m.load,
        capacity: m.capacity,
    }
}

/// This node's sessions now, and the most it takes.
fn load(server: &Server) -> (u64, u64) {
    let sessions = server.core.lock().sessions.all().count() as u64;
    (sessions, server.config().max_sessions as u64)
}

/// This node's sessions of `title` now.
fn sessions_of(server: &Server, title: &str) -> u64 {
    let core = server.core.lock();
    core.sessions
        .all()
        .filter(|s| *s.title_name == *title)
        .count() as u64
}

/// `me` with its load now.
fn record(server: &Server, me: &Member) -> Member {
    let (load, capacity) = load(server);
    Member {
        load,
        capacity,
        ..me.clone()
    }
}

/// The record this node puts in etcd now (none once the server is gone).
fn record_now(server: &Weak<Server>) -> Option<Member> {
    let server = server.upgrade()?;
    Some(server.cluster.status(&server)?.me)
}

/// The path (and query) of a request's URI, absolute (`rtsp://HOST/P`)
/// or not (`/P`).
pub(crate) fn path_of(uri: &str) -> &str {
    match uri.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None if uri.starts_with('/') => uri,
        None => "/",
    }
}

/// This node's record without its load: its name and URLs.
fn record_of(config: &Config, at: Listeners) -> Member {
    let name = match config.node_name.as_str() {
        "" => host_name(),
        n => n.to_owned(),
    };
    let url = |set: &str, scheme: &str, at: Option<SocketAddr>| match set {
        "" => at.map_or_else(String::new, |at| {
            let host = match at.ip().is_unspecified() {
                true => name.clone(),
                false => at.to_string(),
            };
            format!("{scheme}://{host}")
        }),
        s => s.trim_end_matches('/').to_owned(),
    };
    // HTTPS shares the HTTP listener, on when TLS is.
    let https = at.http.filter(|_| at.rtsps.is_some());
    Member {
        rtsp: url(&config.advertise_rtsp, "rtsp", Some(at.rtsp)),
        http: url(&config.advertise_http, "http", at.http),
        rtsps: url(&config.advertise_rtsps, "rtsps", at.rtsps),
        https: url(&config.advertise_https, "https", https),
        name,
        capacity: config.max_sessions as u64,
        load: 0,
        hot: Vec::new(),
        busy: Vec::new(),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "fjord".to_owned())
}

#[cfg(test)]
mod tests {
    use super::{Member, Scheme, candidates, path_of};

    #[test]
    fn a_request_over_tls_goes_to_a_tls_url_or_nowhere() {
        let plain = Member {
            name: "a".into(),
            rtsp: "rtsp://a:554".into(),
            http: "http://a:80".into(),
            rtsps: String::new(),
            https: String::new(),
            capacity: 0,
            load: 0,
            hot: Vec::new(),
            busy: Vec::new(),
        };
        assert_eq!(Scheme::rtsp(false).base(&plain), Some("rtsp://a:554"));
        assert_eq!(Scheme::http(false).base(&plain), Some("http://a:80"));
        assert_eq!(Scheme::rtsp(true).base(&plain), None);
        assert_eq!(Scheme::http(true).base(&plain), None);
        let tls = Member {
            rtsps: "rtsps://a:322".into(),
            https: "https://a:80".into(),
            ..plain.clone()
        };
        assert_eq!(Scheme::rtsp(true).base(&tls), Some("rtsps://a:322"));
        assert_eq!(Scheme::http(true).base(&tls), Some("https://a:80"));
        // A home set over TLS is ranked among the members with TLS URLs.
        let others = [
            plain.clone(),
            Member {
                name: "b".into(),
                ..tls
            },
        ];
        let names = |s: Scheme| -> Vec<String> {
            (candidates(&others, s).iter())
                .map(|n| n.name.to_owned())
                .collect()
        };
        assert_eq!(names(Scheme::rtsp(false)), ["a", "b"]);
        assert_eq!(names(Scheme::rtsp(true)), ["b"]);
        assert_eq!(names(Scheme::http(true)), ["b"]);
    }

    #[test]
    fn a_redirect_keeps_the_path_and_query_of_any_request_uri() {
        assert_eq!(
            path_of("rtsp://10.0.0.1:8554/a%20b.ts?x=1"),
            "/a%20b.ts?x=1"
        );
        assert_eq!(path_of("rtsp://host"), "/");
        assert_eq!(
            path_of("/films/t.mp4/index.m3u8"),
            "/films/t.mp4/index.m3u8"
        );
        assert_eq!(path_of("*"), "/");
    }
}

//! The control plane of `fjord serve`: everything but the playing.
//!
//! In: a [`Config`] (and a [`ConfigSource`] to re-read on SIGHUP), the
//! media roots it names, and clients on three listeners — RTSP (and
//! RTSPS), HTTP, the admin API. Out: RTSP replies and sessions; engine
//! [`fjord_engine::Command`]s that add, position, start, pause and remove
//! streams (the engine threads send every packet); HTTP downloads, HLS
//! and DASH of the same titles, whose bytes go by `sendfile`, never
//! through user space; metrics, a status page, an access log.
//!
//! Its shape: one task per connection reads requests under the limits
//! (`conn` for RTSP, `http`, `admin`); each RTSP request goes to its
//! method's module in `control`, which reaches the connection only through
//! the `control::Client` trait, so every method is unit-tested without a
//! socket. Their state is one type, the control core (`core`): sessions
//! (`session`), admission by packet rate (`admission`), multicast groups
//! (`multicast`) and periodic broadcasts' schedules (`broadcast`), with no
//! lock, atomics or clock inside; the `Server` keeps it under one lock,
//! taken per decision and never across an `await`. A decision's engine
//! commands are its output (`outbox`), sent once the lock is let go. A
//! decision awaits nothing (the catalog, the engine, the blocking pool, a
//! bind, a timer): it asks (`control::Step::Ask`) and the connection's
//! task (`drive`) finds the answer and feeds it back as an event
//! (`control::on_answer`), which gives 454 if the session ended meanwhile.
//! Beside the core the `Server` holds its I/O handles: port pairs
//! (`ports`, `shared`), the engine, the catalog of titles (`catalog`: a path opens as a
//! title or not at all; on an edge, a title not under the roots opens from
//! the origin, its files filled in slices as they are read: `edge`), the
//! storage layer, TLS. Connections of all
//! listeners share one set of limits (`slots`); one client can exhaust none
//! of them.
//!
//! It never touches a payload byte after ingest, never blocks a runtime
//! thread on the disk (index lookups go to blocking tasks, reads to the
//! storage layer), and never trusts a client for a path, a destination or
//! a size: each has a bound, a default and a test. The binary installs
//! [`heap_count::Counting`] as its allocator, so `/metrics` can tell the
//! heap the server holds from what the allocator keeps.

#![deny(clippy::undocumented_unsafe_blocks)]

mod accept;
mod access;
mod admin;
mod admission;
mod broadcast;
mod catalog;
mod cluster;
pub mod config;
mod conn;
mod control;
mod core;
mod drive;
mod edge;
mod guard;
pub mod heap_count;
mod heap_trim;
mod http;
mod kernel_tls;
mod lifecycle;
mod metrics;
mod multicast;
mod outbox;
mod pool;
mod ports;
mod prefab_budget;
mod rtsps;
mod scale;
mod session;
mod shared;
mod slots;
mod stats_file;
mod title_slots;
mod title_streams;
mod tls;

use std::{
    net::SocketAddr,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use fjord_engine::{Engine, EngineConfig};
use fjord_proto::rtsp::framing::Limits;
use tokio::net::TcpListener;

use crate::core::{Core, CoreLock};
use admission::Admission;
pub use catalog::{Catalog, CatalogError};
pub use config::{Config, ConfigError};
pub use lifecycle::ConfigSource;
use ports::PortPool;
use shared::SharedPorts;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub(crate) struct Server {
    /// Replaced whole on SIGHUP ([`Server::config`]).
    config: RwLock<Arc<Config>>,
    catalog: Catalog,
    engine: Engine,
    /// The control core (sessions, admission, multicast groups,
    /// broadcasts) under its one lock; shared with the RTCP readers, which
    /// record receiver reports.
    core: Arc<CoreLock>,
    ports: PortPool,
    /// The one port pair of all UDP sessions (`udp_sockets = "shared"`),
    /// or none: a pair per session.
    shared: Option<SharedPorts>,
    storage: Option<fjord_storage::Storage>,
    ids: AtomicU64,
    metrics: metrics::Metrics,
    /// RTSP and HTTP connections, counted together.
    slots: Arc<slots::Slots>,
    history: admin::History,
    guard: guard::Guard,
    /// `None`: no certificate configured.
    tls: Option<tls::Tls>,
    /// This node's cluster, once joined (none configured: none).
    cluster: cluster::Cluster,
    /// Live streams and their viewers.
    live: control::live::Live,
}

impl Server {
    /// The server's state around its I/O handles: `engine` to play,
    /// `catalog` over the media roots, `tls` when a certificate is set.
    fn new(
        config: Config,
        catalog: Catalog,
        engine: Engine,
        storage: Option<fjord_storage::Storage>,
        tls: Option<tls::Tls>,
    ) -> Result<Self, ConfigError> {
        let admission = Admission::new(config.threads(), config.capacity_pps_per_core());
        let core = Arc::new(CoreLock::new(Core::new(admission)));
        Ok(Server {
            ports: PortPool::new(config.rtp_port_min, config.rtp_port_max),
            shared: (config.udp_sockets == "shared"
                && fjord_engine::datapath::addresses_each_message(engine.datapath()))
            .then(|| {
                SharedPorts::new(
                    config.threads(),
                    config
                        .max_sessions
                        .saturating_mul(shared::ROUTES_PER_SESSION),
                    config.udp_connected_streams,
                    core.clone(),
                )
            }),
            storage,
            catalog,
            engine,
            core,
            ids: AtomicU64::new(1),
            metrics: metrics::Metrics::default(),
            slots: slots::Slots::new(config.max_connections, config.max_connections_per_address),
            history: admin::History::default(),
            guard: guard::Guard::new(&config)?,
            tls,
            cluster: cluster::Cluster::default(),
            live: control::live::Live::default(),
            config: RwLock::new(Arc::new(config)),
        })
    }

    /// The settings now: a request reads them once and keeps that copy,
    /// so a reload never changes them under it.
    fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn limits(&self) -> Limits {
        let c = self.config();
        Limits {
            max_header_bytes: c.max_header_bytes,
            max_body_bytes: c.max_body_bytes,
        }
    }

    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Ends a session as its end of stream would: RTCP BYE on each stream
    /// (engine commands run in order, so the BYE leaves before the stream
    /// is removed), then it goes from the table and its connection closes.
    fn end_session(&self, id: session::SessionId) {
        let mut core = self.core.lock();
        let Some(s) = core.sessions.get_mut(id) else {
            return;
        };
        let mut out = outbox::Outbox::default();
        // A multicast group's BYE is its own: it leaves with its last session.
        for st in (s.streams.iter()).filter(|st| !st.repair && st.group.is_none()) {
            out.push(st.shard, fjord_engine::Command::Bye { id: st.engine_id });
        }
        core.remove(id, &mut out);
        drop(core);
        out.send_to(&self.engine);
    }
}

/// Checks a config whole: its own rules, then those of the modules that
/// own a setting's meaning (users, multicast pool, broadcast schemes).
pub(crate) fn validate(config: &Config) -> Result<(), ConfigError> {
    config.validate()?;
    multicast::check_pool(config.multicast_pool).map_err(ConfigError::Invalid)?;
    guard::check_users(config)?;
    for b in &config.broadcasts {
        broadcast::scheme(&b.scheme).map_err(ConfigError::Invalid)?;
    }
    Ok(())
}

/// Runs the server until SIGINT or SIGTERM, re-reading its config from
/// `source` on SIGHUP. Prints the listening address on stdout once the
/// socket is bound (tests and scripts read it from there).
pub async fn serve(config: Config, source: ConfigSource) -> Result<(), ServeError> {
    validate(&config)?;
    let storage = config.storage().map(fjord_storage::Storage::new);
    // A title's file truncated while it plays ends its sessions, not the
    // server (idempotent; `fjord serve` installed it already).
    fjord_media::guard::install();
    let catalog = catalog(&config, storage.clone())?;
    let rtsp = SocketAddr::new(config.bind, config.port);
    let listener = bind(rtsp, "", "is another server using the port? try --port").await?;
    let local = listener.local_addr()?;
    let http = match config.http_port {
        0 => None,
        port => {
            let at = SocketAddr::new(config.bind, port);
            Some(bind(at, " for HTTP", "set http_port, or 0 for no HTTP downloads").await?)
        }
    };
    let admin = match config.admin_bind()? {
        None => None,
        Some(at) => Some(bind(at, " for the admin API", "set admin_bind, or \"\" for none").await?),
    };
    let engine = start_engine(&config, local, storage.clone())?;
    let tls = tls::Tls::new(&config)?;
    let server = Arc::new(Server::new(config, catalog, engine, storage, tls)?);
    control::live::start(&server);
    // Before the RTSP line, which scripts and tests wait for.
    if let Some(listener) = admin {
        start_admin(&server, listener)?;
    }
    let mut rtsps = None;
    if server.tls.is_some() {
        let at = SocketAddr::new(server.config().bind, server.config().rtsps_port);
        let listener = bind(at, " for RTSPS", "set rtsps_port").await?;
        rtsps = Some(listener.local_addr()?);
        println!("fjord: listening on rtsps://{}/", listener.local_addr()?);
        tokio::spawn(listen_rtsps(server.clone(), listener));
    }
    tokio::spawn(broadcast::start_all(server.clone()));
    // Before the RTSP line, which scripts wait for to send a signal: an
    // uncaught SIGHUP would end the server.
    use tokio::signal::unix::{SignalKind, signal};
    let signals = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::hangup())?,
    );
    let http_at = http.as_ref().and_then(|l| l.local_addr().ok());
    let listeners = cluster::Listeners {
        rtsp: local,
        http: http_at,
        rtsps,
    };
    cluster::Cluster::start(&server, listeners);
    println!("fjord: listening on rtsp://{local}/");
    if let Some(listener) = http {
        println!("fjord: downloads on http://{}/", listener.local_addr()?);
        tokio::spawn(http::listen(server.clone(), listener, server.slots.clone()));
    }
    tracing::info!(
        roots = ?server.catalog.roots(),
        datapath = server.engine.datapath(),
        udp_sockets = if server.shared.is_some() { "shared" } else { "per-session" },
        threads = server.config().threads(),
        capacity_pps_per_core = ?server.core.lock().sessions.admission.capacity(),
        "serving"
    );
    tokio::spawn(reap_idle_sessions(server.clone()));
    heap_trim::every_minute();
    if !server.config().stats_file.as_os_str().is_empty() {
        let path = server.config().stats_file.clone();
        tokio::spawn(stats_file::write_every_second(server.clone(), path));
    }
    listen_rtsp(&server, listener, source, signals).await;
    lifecycle::drain(&server).await;
    Ok(())
}

/// The catalog of the config's roots, holding at most `max_loaded_titles`
/// loaded titles nothing plays.
fn catalog(config: &Config, storage: Option<fjord_storage::Storage>) -> std::io::Result<Catalog> {
    let ts = fjord_media::ts::TsOptions {
        ts_per_rtp: config.ts_per_rtp,
        ..Default::default()
    };
    let (fec, prefab, share) = (config.fec(), config.prefab, config.prefab_share_percent);
    let catalog = Catalog::new(&config.roots(), ts, fec, prefab, share, storage)?;
    let catalog = catalog.bounded(config.max_loaded_titles);
    match edge(config)? {
        Some(edge) => Ok(catalog.with_edge(edge)),
        None => Ok(catalog),
    }
}

/// The edge of the config's `origin`, when it names one.
fn edge(config: &Config) -> std::io::Result<Option<edge::Edge>> {
    if config.origin.is_empty() {
        return Ok(None);
    }
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let origin_config = fjord_edge::OriginConfig {
        endpoint: non_empty(&config.origin_endpoint),
        region: non_empty(&config.origin_region),
        ..Default::default()
    };
    let failed = |e: String| std::io::Error::other(format!("origin {}: {e}", config.origin));
    let url = fjord_edge::OriginUrl::parse(&config.origin).map_err(|e| failed(e.to_string()))?;
    let origin =
        fjord_edge::Origin::connect(url, &origin_config).map_err(|e| failed(e.to_string()))?;
    let capacity = (config.cache_gb * 1e9) as u64;
    let edge = edge::Edge::open(origin, &config.cache_dir, capacity).map_err(failed)?;
    tracing::info!(origin = %config.origin, cache_dir = %config.cache_dir.display(), cache_gb = config.cache_gb, "an edge: titles not under the roots come from the origin");
    Ok(Some(edge))
}

/// A listener on `at`, or an error that says which (`what`) and what to do.
async fn bind(at: SocketAddr, what: &str, hint: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(at).await.map_err(|e| {
        let message = format!("cannot listen{what} on {at}: {e} ({hint})");
        std::io::Error::new(e.kind(), message)
    })
}

fn start_engine(
    config: &Config,
    local: SocketAddr,
    storage: Option<fjord_storage::Storage>,
) -> std::io::Result<Engine> {
    if let Some(s) = &storage {
        let c = s.config();
        tracing::info!(
            readahead_min_ms = c.lead.floor.as_millis() as u64,
            readahead_ms = c.lead.ceiling.as_millis() as u64,
            budget_mb = c.budget >> 20,
            head_s = c.head.as_secs(),
            "storage layer: reading ahead of every session"
        );
    }
    Engine::start(EngineConfig {
        threads: config.threads(),
        burst: Duration::from_millis(config.burst_ms),
        rtcp_interval: Duration::from_secs(config.rtcp_interval_s),
        cname: format!("fjord@{local}"),
        datapath: config.datapath.clone(),
        cpus: vec![],
        realtime: config.realtime,
        stall_timeout: Duration::from_secs(config.stall_timeout_s),
        storage,
    })
}

/// Serves the status page and API on `listener`, warning when anyone who
/// reaches it could end sessions.
fn start_admin(server: &Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    let at = listener.local_addr()?;
    if !at.ip().is_loopback() && server.config().users.is_empty() {
        tracing::warn!(
            "the admin listener on {at} is reachable beyond this machine and, without \
             [[user]] tables, lets anyone who reaches it list and end sessions: \
             add a user with admin = true, or set admin_bind to a loopback address"
        );
    }
    println!("fjord: status page on http://{at}/");
    tokio::spawn(admin::listen(server.clone(), listener));
    admin::sample_every_second(Arc::downgrade(server));
    Ok(())
}

/// Accepts RTSP connections until SIGINT or SIGTERM, re-reading the
/// config from `source` on SIGHUP.
async fn listen_rtsp(
    server: &Arc<Server>,
    listener: TcpListener,
    source: ConfigSource,
    (mut term, mut hup): (tokio::signal::unix::Signal, tokio::signal::unix::Signal),
) {
    let source = Arc::new(source);
    lifecycle::ready(server);
    let mut acceptor = accept::Acceptor::new(&listener, "RTSP");
    loop {
        tokio::select! {
            (stream, peer) = acceptor.next() => {
                // Over the limit the connection is closed at once: no reply
                // can be sent before a request arrives.
                let Some(slot) = slots::take_or_log(&server.slots, peer, "RTSP") else {
                    continue;
                };
                tokio::spawn(conn::serve_connection(server.clone(), stream, peer, slot, None));
            }
            _ = hup.recv() => lifecycle::reload(server, &source).await,
            _ = tokio::signal::ctrl_c() => return,
            _ = term.recv() => return,
        }
    }
}

/// Accepts RTSPS connections: each is served as an RTSP connection once
/// its TLS handshake is done ([`tls`]).
async fn listen_rtsps(server: Arc<Server>, listener: TcpListener) {
    let mut acceptor = accept::Acceptor::new(&listener, "RTSPS");
    loop {
        let (stream, peer) = acceptor.next().await;
        let Some(slot) = slots::take_or_log(&server.slots, peer, "RTSPS") else {
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            let Some(tls) = &server.tls else { return };
            match tls.accept_rtsps(stream, &server.config()).await {
                Ok((stream, encryption, first)) => {
                    server.metrics.rtsps(encryption.name());
                    let tls = Some((encryption, first));
                    conn::serve_connection(server.clone(), stream, peer, slot, tls).await
                }
                Err(e) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
            }
        });
    }
}

/// Tears down sessions that sent no RTSP request and no RTCP for the
/// session timeout ([`control::expire_idle`]), waking when the
/// longest-idle one would time out, at most [`REAP_AT_LEAST_EVERY`].
async fn reap_idle_sessions(server: Arc<Server>) {
    loop {
        let now = Instant::now();
        let next = control::expire_idle(&server, now);
        tokio::time::sleep_until(next.min(now + REAP_AT_LEAST_EVERY).into()).await;
    }
}

/// The longest the reaper sleeps: a reload may shorten the timeout.
const REAP_AT_LEAST_EVERY: Duration = Duration::from_secs(5);

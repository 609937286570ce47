//! The server's life as its service manager sees it (systemd
//! `Type=notify` or `notify-reload`, contrib/fjord.service): READY once it listens;
//! SIGHUP re-reads the config (RELOADING, then READY) without dropping a
//! viewer; SIGTERM or SIGINT ends every session with RTCP BYE and exits
//! within [`DRAIN`] (STOPPING).

use std::{sync::Arc, time::Duration};

use sd_notify::NotifyState;

use crate::{Config, ConfigError, Server};

/// Where a reload reads the config from: the file and the command line's
/// flags on top, as at start.
pub type ConfigSource = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// The longest a shutdown waits for the engine threads to send every
/// session's BYE.
const DRAIN: Duration = Duration::from_secs(2);

/// Tells the service manager (when there is one: `NOTIFY_SOCKET`).
pub(crate) fn notify(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

pub(crate) fn ready(server: &Server) {
    let status = format!("serving on port {}", server.config().port);
    notify(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// Re-reads the config: what the control plane reads per request takes
/// effect for new requests and connections (sessions play on); settings
/// fixed at start keep their values, with a warning; an invalid file is
/// logged and changes nothing.
pub(crate) async fn reload(server: &Arc<Server>, source: &Arc<ConfigSource>) {
    let mut reloading = vec![NotifyState::Reloading];
    reloading.extend(NotifyState::monotonic_usec_now().ok());
    notify(&reloading);
    let read = source.clone();
    let loaded =
        tokio::task::spawn_blocking(move || read().and_then(|c| crate::validate(&c).map(|()| c)))
            .await;
    match loaded {
        Ok(Ok(new)) => {
            let (now, kept) = server.config().reloaded(new);
            if !kept.is_empty() {
                tracing::warn!(
                    ?kept,
                    "config reloaded; these settings change only at a restart"
                );
            }
            let tls = (server.tls.as_ref()).map_or(Ok(()), |t| t.reload(&now));
            if let Err(e) = tls.and_then(|()| server.guard.reload(&now)) {
                tracing::error!("config not reloaded, the running one stays: {e}");
                return ready(server);
            }
            (server.slots).set_per_address(now.max_connections_per_address);
            *server.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(now);
            tracing::info!("config reloaded");
        }
        Ok(Err(e)) => tracing::error!("config not reloaded, the running one stays: {e}"),
        Err(e) => tracing::error!("config not reloaded: {e}"),
    }
    ready(server);
}

/// Ends every session with RTCP BYE and waits (at most [`DRAIN`]) until
/// every engine thread has sent them.
pub(crate) async fn drain(server: &Arc<Server>) {
    notify(&[NotifyState::Stopping]);
    let ids: Vec<_> = server.core.lock().sessions.all().map(|s| s.id).collect();
    tracing::info!(
        sessions = ids.len(),
        "shutting down: ending every session with RTCP BYE"
    );
    for id in ids {
        server.end_session(id);
    }
    // Engine commands run in order: once each thread answers a Stats
    // request sent after the BYEs, it has sent them.
    let s = server.clone();
    let flushed = tokio::task::spawn_blocking(move || s.engine.stats());
    if tokio::time::timeout(DRAIN, flushed).await.is_err() {
        tracing::warn!("engine threads did not answer within {DRAIN:?}; exiting anyway");
    }
}

//! Counters the control plane keeps as things happen, for the admin
//! listener's `/metrics`: RTSP requests by method and status, admission
//! refusals by reason. What the engine threads, sessions, connections and
//! the storage layer have done is not copied here: `/metrics` asks them
//! when it is scraped.

use fjord_proto::rtsp::framing::Method;
use prometheus_client::{
    metrics::{counter::Counter, family::Family},
    registry::Registry,
};

type Requests = Family<[(&'static str, String); 2], Counter>;
/// A counter by one label whose values are fixed names.
type ByName = Family<[(&'static str, &'static str); 1], Counter>;

#[derive(Default)]
pub(crate) struct Metrics {
    requests: Requests,
    refusals: ByName,
    https: ByName,
    rtsps: ByName,
    recordings: ByName,
}

/// How a live recording ended.
#[derive(Clone, Copy)]
pub(crate) enum Recording {
    /// Closed with its stream, and made a title.
    Done,
    /// Stopped: the disk did not keep up with the stream.
    Stopped,
    /// A file could not be made or written.
    Failed,
}

/// Why a SETUP or PLAY got 453.
#[derive(Clone, Copy)]
pub(crate) enum Refusal {
    /// `max_sessions` sessions exist.
    Sessions,
    /// The connection holds `max_sessions_per_connection` sessions.
    ConnectionSessions,
    /// The client's address holds `max_sessions_per_address` sessions.
    AddressSessions,
    /// No engine thread has room for the stream's packet rate.
    Engine,
    /// The title's disk has no room for the stream's bit rate (`disk`),
    /// or the read-ahead memory none for its lead (`memory`).
    Storage(&'static str),
    /// No room on the engine thread for a faster delivery (`Speed`).
    Speed,
}

impl Metrics {
    /// Methods RTSP does not define count as `other`, so a client
    /// inventing methods cannot grow the metric without bound.
    pub(crate) fn request(&self, method: &Method, status: u16) {
        let name = match method {
            Method::Other(_) => "other",
            m => m.as_str(),
        };
        let labels = [("method", name.to_owned()), ("status", status.to_string())];
        self.requests.get_or_create(&labels).inc();
    }

    pub(crate) fn refused(&self, why: Refusal) {
        let reason = match why {
            Refusal::Sessions => "sessions",
            Refusal::ConnectionSessions => "sessions_per_connection",
            Refusal::AddressSessions => "sessions_per_address",
            Refusal::Engine => "engine",
            Refusal::Storage("disk") => "storage_disk",
            Refusal::Storage(_) => "storage_memory",
            Refusal::Speed => "speed",
        };
        self.refusals.get_or_create(&[("reason", reason)]).inc();
    }

    /// An HTTPS connection past its handshake, by who encrypts it:
    /// `kernel` (kTLS), `user` (rustls in the connection's task), or
    /// `kernel_failed` (the kernel refused its keys; it was closed).
    pub(crate) fn https(&self, encryption: &'static str) {
        self.https
            .get_or_create(&[("encryption", encryption)])
            .inc();
    }

    /// An RTSPS connection past its handshake, by who encrypts it:
    /// `kernel` (kTLS) or `user` (rustls, with the engine).
    pub(crate) fn rtsps(&self, encryption: &'static str) {
        self.rtsps
            .get_or_create(&[("encryption", encryption)])
            .inc();
    }

    pub(crate) fn recording(&self, how: Recording) {
        let outcome = match how {
            Recording::Done => "done",
            Recording::Stopped => "stopped",
            Recording::Failed => "failed",
        };
        self.recordings.get_or_create(&[("outcome", outcome)]).inc();
    }

    /// Adds the counters to a scrape's registry (they are shared, not
    /// copied).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "fjord_rtsp_requests",
            "RTSP requests answered, by method and status",
            self.requests.clone(),
        );
        registry.register(
            "fjord_admission_refusals",
            "SETUPs and PLAYs refused with 453, by what had no room",
            self.refusals.clone(),
        );
        registry.register(
            "fjord_https_connections",
            "HTTPS connections past their handshake, by who encrypts them (kernel: kTLS)",
            self.https.clone(),
        );
        registry.register(
            "fjord_rtsps_connections",
            "RTSPS connections past their handshake, by who encrypts them (kernel: kTLS)",
            self.rtsps.clone(),
        );
        registry.register(
            "fjord_live_recordings",
            "Live recordings ended, by outcome: done, stopped (the disk fell behind), failed",
            self.recordings.clone(),
        );
    }
}

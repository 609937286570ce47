//! The control core: the state every decision of the control plane reads
//! and changes — the sessions and the admission counts (`session`), the
//! multicast groups (`multicast`), the periodic broadcasts' schedules
//! (`broadcast`) — in one type with no lock, no atomics and no clock
//! inside (time is passed in). The server keeps it under one lock
//! ([`CoreLock`]), taken per decision and never across an `await`; what
//! a decision needs done outside (engine commands, sockets to bind, an
//! engine answer to wait for) is its output, carried out by the drivers.

use std::{
    net::SocketAddr,
    sync::{Mutex, MutexGuard},
    time::Instant,
};

use fjord_engine::Command;
use fjord_proto::rtcp::RtcpInfo;

use crate::{
    admission::Admission,
    broadcast::Broadcasts,
    multicast::Groups,
    outbox::Outbox,
    session::{SessionId, Sessions, Stream, StreamRtcp},
    shared::RtcpSink,
};

/// Sessions, admission, multicast groups and broadcasts.
#[derive(Default)]
pub(crate) struct Core {
    /// The sessions, and the engine threads' admission counts that they,
    /// the groups and the broadcasts hold.
    pub sessions: Sessions,
    pub groups: Groups,
    pub broadcasts: Broadcasts,
}

impl Core {
    /// An empty core counting admission by `admission`.
    pub(crate) fn new(admission: Admission) -> Self {
        Core {
            sessions: Sessions::new(admission),
            ..Core::default()
        }
    }

    /// Ends a session: its engine streams stop (the commands in `out`), it
    /// leaves its multicast group, its sockets close, its ports return to
    /// the pool.
    pub(crate) fn remove(&mut self, id: SessionId, out: &mut Outbox) -> bool {
        let Some(mut s) = self.sessions.take(id) else {
            return false;
        };
        for st in std::mem::take(&mut s.streams).into_vec() {
            self.end_stream(id, st, out, "session ended");
        }
        s.ended();
        true
    }

    /// Ends the streams of session `id` that `which` picks (RFC 2326
    /// §10.7: a TEARDOWN of one stream's URL); the session stays with the
    /// others.
    pub(crate) fn remove_streams(
        &mut self,
        id: SessionId,
        which: impl Fn(&Stream) -> bool,
        out: &mut Outbox,
    ) {
        let Some(s) = self.sessions.get_mut(id) else {
            return;
        };
        for st in s.take_streams(which) {
            self.end_stream(id, st, out, "stream torn down");
        }
    }

    /// Gives back what a stream held: its engine stream (or its place in a
    /// multicast group), its admission reservation, its RTCP intake.
    /// `why` ends the log line ("session ended": scripts and tests read it).
    fn end_stream(&mut self, session: SessionId, st: Stream, out: &mut Outbox, why: &str) {
        let r = st.reports;
        tracing::info!(
            session = %session,
            track = st.track,
            receiver_reports = r.reports,
            lost = r.lost(),
            jitter = r.jitter,
            "{why}"
        );
        let admission = &mut self.sessions.admission;
        admission.release(&st.reservation);
        match st.group {
            Some(g) => self.groups.leave(g, out, admission),
            None => out.push(st.shard, Command::Remove { id: st.engine_id }),
        }
        match st.rtcp {
            StreamRtcp::Reader(t) => t.abort(),
            StreamRtcp::Route(pair, client) => pair.unroute(client, session.number()),
            StreamRtcp::None => {}
        }
    }
}

/// The server's core under the one lock the control plane takes for each
/// decision, and never across an `await` (its guard cannot be held there:
/// the connection tasks must be `Send`).
#[derive(Default)]
pub(crate) struct CoreLock(Mutex<Core>);

impl CoreLock {
    pub(crate) fn new(core: Core) -> Self {
        Self(Mutex::new(core))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// RTCP that a shared pair routed by the client's address: about the
/// streams of the route's session set up with that address.
impl RtcpSink for CoreLock {
    fn rtcp_from(&self, owner: u64, client: SocketAddr, infos: &[RtcpInfo], now: Instant) {
        let mut core = self.lock();
        let Some(s) = core.sessions.get_mut(SessionId::from_number(owner)) else {
            return;
        };
        let routed_here = |st: &Stream| matches!(&st.rtcp, StreamRtcp::Route(_, a) if crate::shared::same_client(*a, client));
        s.on_rtcp(routed_here, infos, now);
    }
}

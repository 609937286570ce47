//! RTSP sessions as the control plane keeps them: protocol state, liveness,
//! receiver reports, and the engine streams (one per set-up track).

use std::{
    collections::HashMap,
    fmt,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    task::Waker,
    time::Instant,
};

use fjord_engine::Title;

use crate::{
    admission::{Admission, Reservation},
    shared::SharedPair,
};
use fjord_proto::{
    rtcp::{ReportBlock, RtcpInfo},
    rtsp::session::State,
};

/// A session's id: on the wire (`Session` headers), 16 uppercase hex
/// digits. Kept as a number: a string would cost two allocations per
/// session, in the session and in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(u64);

impl SessionId {
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The id as a number (a shared pair's route owner).
    pub fn number(self) -> u64 {
        self.0
    }

    /// The id a shared pair's route owner names.
    pub fn from_number(n: u64) -> Self {
        Self(n)
    }

    /// The id a `Session` header names; none unless it has the form this
    /// server gives ids, so no other spelling finds a session.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F'));
        hex.then(|| u64::from_str_radix(s, 16).ok().map(Self))
            .flatten()
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016X}", self.0)
    }
}

/// A session's state. It has no lock of its own: every session lives in
/// [`Sessions`], part of the control core the server keeps under one lock.
pub struct Session {
    pub id: SessionId,
    /// The RTSP connection that created the session; when it closes, the
    /// session ends (players keep their connection open while they play).
    pub conn: u64,
    /// The client, as the connection that created the session sees it.
    pub peer: SocketAddr,
    /// Shared with the catalog: a copy would cost an allocation.
    pub title_name: Arc<str>,
    pub title: Arc<Title>,
    pub state: State,
    /// Moved by requests and RTCP only once the session has played: one
    /// never played times out `session_timeout_s` after its SETUP, however
    /// many keep-alives it gets, so admission holds nothing for long for a
    /// session that never plays.
    pub last_activity: Instant,
    /// A PLAY was accepted (the session stays played when paused).
    played: bool,
    /// A boxed slice, not a `Vec`: the capacity would take the session a
    /// size class up.
    pub streams: Box<[Stream]>,
    /// The latest PLAY's `Scale` (1 before any).
    pub scale: i32,
    /// The latest PLAY's `Speed`, in millionths (its streams' admission
    /// reservations are sized for it).
    pub speed: u32,
    /// The connection's task, waiting for the session to end.
    on_end: Option<Waker>,
}

/// Kept small: one per set-up track of every session, in its own
/// allocation.
pub struct Stream {
    pub track: u32,
    /// The track's repair stream, sent by the track's engine session (so
    /// it is not played, paused or removed on its own).
    pub repair: bool,
    /// Session id inside the engine, and the shard it lives on.
    pub engine_id: u64,
    pub shard: u64,
    /// The URL the client set the track up with; RTP-Info names it.
    pub url: Box<str>,
    pub interleaved: Option<(u8, u8)>,
    pub rtcp: StreamRtcp,
    pub reports: ReceiverStats,
    /// Its share of the engine thread's capacity.
    pub reservation: Reservation,
    /// Its share of its disk and of the read-ahead memory (storage layer),
    /// given back when the stream is dropped.
    pub _storage: Option<Box<fjord_storage::StorageReservation>>,
    /// Its place among its shared port's connected RTP sockets
    /// ([`crate::shared::ConnectedPlace`]), given back when dropped.
    pub _connected: Option<crate::shared::ConnectedPlace>,
    /// The multicast group whose engine stream this is: shared, so the
    /// session only leaves it ([`crate::multicast`]).
    pub group: Option<crate::multicast::GroupId>,
}

/// How a stream's RTCP from the client comes in, undone when it ends.
pub enum StreamRtcp {
    /// A task reads the stream's own RTCP socket.
    Reader(tokio::task::AbortHandle),
    /// The stream's route on the shared port pair (its client's RTCP
    /// address).
    Route(Arc<SharedPair>, SocketAddr),
    /// Nothing of the stream's own: interleaved RTCP arrives on the
    /// connection, or the reader could not start.
    None,
}

/// The latest RTCP receiver report about a stream (RFC 3550 §6.4.2).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReceiverStats {
    pub reports: u64,
    pub fraction_lost: u8,
    pub cumulative_lost: u32,
    pub highest_seq: u32,
    pub jitter: u32,
}

#[cfg(test)]
impl Stream {
    /// A UDP stream with no engine behind it.
    pub fn test_stream(engine_id: u64) -> Self {
        Stream {
            track: 0,
            repair: false,
            engine_id,
            shard: 0,
            url: "".into(),
            interleaved: None,
            rtcp: StreamRtcp::None,
            reports: ReceiverStats::default(),
            reservation: Admission::new(1, None).reserve(None, 0).expect("no limit"),
            _storage: None,
            _connected: None,
            group: None,
        }
    }
}

impl ReceiverStats {
    /// The cumulative loss, a signed 24-bit figure on the wire (duplicates
    /// make it negative).
    pub fn lost(&self) -> i32 {
        ((self.cumulative_lost << 8) as i32) >> 8
    }

    pub fn record(&mut self, b: &ReportBlock) {
        self.reports += 1;
        self.fraction_lost = b.fraction_lost;
        self.cumulative_lost = b.cumulative_lost;
        self.highest_seq = b.highest_seq;
        self.jitter = b.jitter;
    }
}

impl Session {
    pub fn new(
        id: SessionId,
        (conn, peer): (u64, SocketAddr),
        title_name: Arc<str>,
        title: Arc<Title>,
        now: Instant,
    ) -> Self {
        Self {
            id,
            conn,
            peer,
            title_name,
            title,
            state: State::Init,
            last_activity: now,
            played: false,
            streams: Box::default(),
            scale: 1,
            speed: fjord_engine::REAL_TIME,
            on_end: None,
        }
    }

    pub fn add_stream(&mut self, st: Stream) {
        let mut streams = std::mem::take(&mut self.streams).into_vec();
        // Exactly one more: `push` alone would make room for four.
        streams.reserve_exact(1);
        streams.push(st);
        self.streams = streams.into_boxed_slice();
    }

    /// A PLAY is accepted: from now on activity keeps the session.
    pub fn played(&mut self, now: Instant) {
        self.played = true;
        self.last_activity = now;
    }

    /// Activity (a request naming the session, RTCP from its client)
    /// keeps a session that has played.
    pub fn touch(&mut self, now: Instant) {
        if self.played {
            self.last_activity = now;
        }
    }

    /// Takes out the streams `which` picks (the session goes on with the
    /// others).
    pub fn take_streams(&mut self, which: impl Fn(&Stream) -> bool) -> Vec<Stream> {
        let (ended, kept): (Vec<Stream>, Vec<Stream>) = std::mem::take(&mut self.streams)
            .into_vec()
            .into_iter()
            .partition(|st| which(st));
        self.streams = kept.into_boxed_slice();
        ended
    }

    /// The session has ended: the connection's task waiting for that wakes.
    pub fn ended(&mut self) {
        if let Some(w) = self.on_end.take() {
            w.wake();
        }
    }

    /// Has `waker` woken when the session ends.
    pub fn wake_on_end(&mut self, waker: &Waker) {
        if !self.on_end.as_ref().is_some_and(|w| w.will_wake(waker)) {
            self.on_end = Some(waker.clone());
        }
    }

    /// Records RTCP from the client about the streams `about` picks: the
    /// client is alive, and how it receives.
    pub fn on_rtcp(&mut self, about: impl Fn(&Stream) -> bool, infos: &[RtcpInfo], now: Instant) {
        self.touch(now);
        for info in infos {
            let RtcpInfo::ReceiverReport { blocks, .. } = info else {
                continue;
            };
            for b in blocks {
                for s in self.streams.iter_mut() {
                    if about(s) {
                        s.reports.record(b);
                    }
                }
            }
        }
    }
}

/// The most sessions the server, one connection and one client address
/// may hold (`max_sessions`, `max_sessions_per_connection`,
/// `max_sessions_per_address`); 0 for the last two: no cap.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub total: usize,
    pub per_connection: usize,
    pub per_address: usize,
}

/// Which cap a new session would exceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Full {
    Server,
    Connection,
    Address,
}

impl Caps {
    /// Whether one more session fits beside `total` sessions, `conn` of
    /// them on its connection and `addr` from its client's address.
    pub fn room(&self, (total, conn, addr): (usize, usize, usize)) -> Result<(), Full> {
        let over = |n: usize, cap: usize| cap > 0 && n >= cap;
        if total >= self.total {
            Err(Full::Server)
        } else if over(conn, self.per_connection) {
            Err(Full::Connection)
        } else if over(addr, self.per_address) {
            Err(Full::Address)
        } else {
            Ok(())
        }
    }
}

/// Every live session, by id, with how many each connection and each
/// client address holds, and the engine threads' admission counts their
/// streams (and the multicast groups and broadcasts) hold. No lock
/// inside: it is part of the control core (`crate::core::Core`), which
/// ends sessions and their streams.
#[derive(Default)]
pub struct Sessions {
    /// Boxed: a session is large, and the table holds capacity to spare.
    set: HashMap<SessionId, Box<Session>>,
    per_connection: HashMap<u64, usize>,
    per_address: HashMap<IpAddr, usize>,
    pub admission: Admission,
}

/// The address a session counts against: an IPv4 client is one address
/// however its connections spell it.
fn address(s: &Session) -> IpAddr {
    s.peer.ip().to_canonical()
}

impl Sessions {
    /// An empty table counting admission by `admission`.
    pub fn new(admission: Admission) -> Self {
        Self {
            admission,
            ..Self::default()
        }
    }

    /// Session `id` and the admission counts, to change both.
    pub fn with_admission(&mut self, id: SessionId) -> Option<(&mut Session, &mut Admission)> {
        let s = self.set.get_mut(&id)?;
        Some((&mut **s, &mut self.admission))
    }

    fn counts(&self, s: &Session) -> (usize, usize, usize) {
        let conn = self.per_connection.get(&s.conn).copied().unwrap_or(0);
        let addr = self.per_address.get(&address(s)).copied().unwrap_or(0);
        (self.set.len(), conn, addr)
    }

    /// Takes session `id` out of the table, its streams still in it (for
    /// the core to end: `crate::core::Core::remove`).
    pub fn take(&mut self, id: SessionId) -> Option<Box<Session>> {
        let s = self.set.remove(&id)?;
        let down = |n: &mut usize| {
            *n = n.saturating_sub(1);
            *n > 0
        };
        if self
            .per_connection
            .get_mut(&s.conn)
            .is_some_and(|n| !down(n))
        {
            self.per_connection.remove(&s.conn);
        }
        let addr = address(&s);
        if self.per_address.get_mut(&addr).is_some_and(|n| !down(n)) {
            self.per_address.remove(&addr);
        }
        Some(s)
    }

    /// The session a `Session` header names.
    pub fn get(&mut self, id: &str) -> Option<&mut Session> {
        self.get_mut(SessionId::parse(id)?)
    }

    pub fn get_mut(&mut self, id: SessionId) -> Option<&mut Session> {
        self.set.get_mut(&id).map(|s| &mut **s)
    }

    pub fn contains(&self, id: SessionId) -> bool {
        self.set.contains_key(&id)
    }

    /// Adds `s` unless that would exceed one of `caps`.
    pub fn insert_within(&mut self, s: Session, caps: Caps) -> Result<(), Full> {
        if self.set.contains_key(&s.id) {
            return Ok(());
        }
        caps.room(self.counts(&s))?;
        *self.per_connection.entry(s.conn).or_insert(0) += 1;
        *self.per_address.entry(address(&s)).or_insert(0) += 1;
        self.set.insert(s.id, Box::new(s));
        Ok(())
    }

    pub fn all(&self) -> impl Iterator<Item = &Session> {
        self.set.values().map(|s| &**s)
    }

    /// The sessions last active before `deadline`, and the earliest last
    /// activity of the others (none when there are none).
    pub fn idle_since(&self, deadline: Instant) -> (Vec<SessionId>, Option<Instant>) {
        let (mut idle, mut oldest) = (Vec::new(), None::<Instant>);
        for s in self.all() {
            let at = s.last_activity;
            if at < deadline {
                idle.push(s.id);
            } else {
                oldest = Some(oldest.map_or(at, |o| o.min(at)));
            }
        }
        (idle, oldest)
    }
}

#[cfg(test)]
mod tests;

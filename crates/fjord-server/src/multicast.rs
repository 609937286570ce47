//! RTSP multicast (RFC 2326 §12.39): one engine stream per title and
//! track, sent to a group from `multicast_pool`, shared by every session of
//! the title set up within `multicast_batch_ms` of its first PLAY.
//!
//! A group gathers sessions until it starts (its first PLAY plus the batching
//! window); a SETUP after that gets the next group, which starts later
//! (staggered starts), so N viewers who arrive together cost one stream. The
//! group's engine streams, their admission and their address belong to the
//! group, which ends (RTCP BYE, streams removed, address free) when its last
//! session does. Sender reports and BYE go to the group; receiver reports
//! sent to a title's group are not read (a live stream's group reads them,
//! [`hear`]).
//!
//! The groups are plain state in the control core ([`Groups`], no lock):
//! a group's new stream asks the driver for its sockets as a UDP SETUP
//! does, and its start is a change of its `Phase` made by its first PLAY
//! and finished by the engine's answer positioning its streams
//! (`control/multicast.rs`).
//!
//! A live stream's multicast viewers take their group's address from the
//! same pool ([`Groups::reserve`], [`Groups::release`];
//! `control/live/multicast.rs` holds the rest of such a group).
//!
//! The server picks every group and port (RFC 2326 §12.39 lets it): a
//! client's `destination=` and `port=` are ignored, else any client could
//! aim a title's RTP at any group of the LAN (SSDP's, mDNS's). Groups other
//! protocols listen on are never picked ([`well_known`]).

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use fjord_engine::Command;
use ipnet::IpNet;

use crate::{
    admission::{Admission, Reservation},
    config::Config,
    outbox::Outbox,
};

/// What of a SETUP's multicast transport the server takes: a `ttl=`
/// below `multicast_ttl` (group and ports are the server's to pick).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wish {
    pub ttl: Option<u8>,
}

/// IPv4 groups other protocols listen on: the local network control block
/// (224.0.0.0/24: routing protocols, mDNS 224.0.0.251, ...) and the
/// internetwork control block (224.0.1.0/24: NTP, ...), which no pool may
/// overlap; and SSDP's (UPnP) and SLP's groups, which lie in the
/// administratively scoped 239.255.0.0/16 pools use, so they are skipped.
const RESERVED_BLOCKS_V4: (Ipv4Addr, u8) = (Ipv4Addr::new(224, 0, 0, 0), 23);
const SKIPPED_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(239, 255, 255, 250),
    Ipv4Addr::new(239, 255, 255, 253),
];

/// Whether `addr` is a group other protocols listen on: never handed out.
/// IPv6: the permanently assigned ("well-known", RFC 4291 §2.7: flag T
/// clear) groups.
pub(crate) fn well_known(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => {
            let (net, len) = RESERVED_BLOCKS_V4;
            let block = ipnet::Ipv4Net::new(net, len).is_ok_and(|b| b.contains(&a));
            block || SKIPPED_V4.contains(&a)
        }
        IpAddr::V6(a) => a.segments()[0] & 0x0010 == 0,
    }
}

/// Why `pool` cannot be `multicast_pool`: it overlaps the IPv4 control
/// blocks, holds IPv6 well-known groups, or has nothing else. Checked at
/// load, so picking a group skips at most [`SKIPPED_V4`].
pub(crate) fn check_pool(pool: IpNet) -> Result<(), String> {
    match pool {
        IpNet::V4(p) => {
            let (net, len) = RESERVED_BLOCKS_V4;
            let control = ipnet::Ipv4Net::new(net, len).map_err(|e| e.to_string())?;
            if p.contains(&control) || control.contains(&p) {
                return Err(format!(
                    "multicast_pool {pool} overlaps 224.0.0.0/24 or 224.0.1.0/24, groups other protocols use"
                ));
            }
        }
        // T set in the pool's prefix: every address in it is transient.
        IpNet::V6(p) if p.prefix_len() >= 12 && !well_known(pool.addr()) => {}
        IpNet::V6(_) => {
            return Err(format!(
                "multicast_pool {pool} holds well-known IPv6 groups; use transient ones (ff1X::/16)"
            ));
        }
    }
    match free_address(pool, &HashSet::new()) {
        Some(_) => Ok(()),
        None => Err(format!(
            "multicast_pool {pool} holds no group but well-known ones"
        )),
    }
}

/// Why a group cannot be had; each maps to an RTSP status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GroupError {
    #[error("every multicast group of the pool is in use")]
    PoolFull,
    #[error("a started multicast group cannot take another track")]
    Started,
    #[error("SETUP the source track before its repair stream")]
    NoSource,
    #[error("the server is at its capacity; try again later")]
    Capacity,
    #[error("{0}")]
    Storage(fjord_storage::Refusal),
    #[error("cannot open the group's sockets: {0}")]
    Io(#[from] std::io::Error),
}

impl GroupError {
    pub(crate) fn status(&self) -> u16 {
        match self {
            GroupError::Started => 461,
            GroupError::NoSource => 455,
            GroupError::PoolFull | GroupError::Capacity | GroupError::Storage(_) => 453,
            GroupError::Io(_) => 500,
        }
    }
}

/// A group's name in [`Groups`]: a session's stream holds it, not the
/// group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GroupId(u64);

/// The groups in use, the one of each title still gathering sessions, and
/// the addresses taken for good (broadcast channels). No lock inside: it
/// lives in the control core (`crate::core`).
#[derive(Default)]
pub(crate) struct Groups {
    in_use: HashSet<IpAddr>,
    gathering: HashMap<Arc<str>, GroupId>,
    groups: HashMap<GroupId, Group>,
    next: u64,
}

impl Groups {
    /// The group a new multicast session of `title` joins at `now`: the
    /// title's group if it is still gathering and suits `wish`, else a new
    /// one from the pool.
    pub(crate) fn group_for(
        &mut self,
        title: &Arc<str>,
        wish: Wish,
        config: &Config,
        now: Instant,
    ) -> Result<GroupId, GroupError> {
        if let Some(&id) = self.gathering.get(title)
            && self
                .groups
                .get(&id)
                .is_some_and(|g| g.gathering(now) && g.suits(wish))
        {
            return Ok(id);
        }
        let addr = free_address(config.multicast_pool, &self.in_use).ok_or(GroupError::PoolFull)?;
        self.in_use.insert(addr);
        self.next += 1;
        let id = GroupId(self.next);
        let group = Group {
            addr,
            port: config.multicast_port,
            ttl: wish
                .ttl
                .map_or(config.multicast_ttl, |t| t.min(config.multicast_ttl)),
            batch: Duration::from_millis(config.multicast_batch_ms),
            title: title.clone(),
            members: 0,
            tracks: Vec::new(),
            phase: Phase::Gathering,
        };
        self.groups.insert(id, group);
        self.gathering.insert(title.clone(), id);
        Ok(id)
    }

    /// A group of the pool until [`Groups::release`] (a broadcast
    /// channel's, for good; a live stream's).
    pub(crate) fn reserve(&mut self, config: &Config) -> Result<IpAddr, GroupError> {
        let addr = free_address(config.multicast_pool, &self.in_use).ok_or(GroupError::PoolFull)?;
        self.in_use.insert(addr);
        Ok(addr)
    }

    /// Gives back an address [`Groups::reserve`] took (a live stream's
    /// group ended).
    pub(crate) fn release(&mut self, addr: IpAddr) {
        self.in_use.remove(&addr);
    }

    pub(crate) fn get(&self, id: GroupId) -> Option<&Group> {
        self.groups.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: GroupId) -> Option<&mut Group> {
        self.groups.get_mut(&id)
    }

    /// A session (or a SETUP waiting for the group's sockets) leaves; the
    /// last one ends the group: RTCP BYE to the group, its streams
    /// removed, its admission given back, its address back in the pool.
    pub(crate) fn leave(&mut self, id: GroupId, out: &mut Outbox, admission: &mut Admission) {
        let Some(g) = self.groups.get_mut(&id) else {
            return;
        };
        g.members = g.members.saturating_sub(1);
        if g.members > 0 {
            return;
        }
        let Some(g) = self.groups.remove(&id) else {
            return;
        };
        for t in g.tracks {
            out.push(t.shard, Command::Bye { id: t.engine_id });
            out.push(t.shard, Command::Remove { id: t.engine_id });
            admission.release(&t.reservation);
        }
        self.in_use.remove(&g.addr);
        if self.gathering.get(&g.title) == Some(&id) {
            self.gathering.remove(&g.title);
        }
        tracing::info!(group = %g.addr, title = %g.title, "multicast group ended");
    }
}

/// The RTP and RTCP ports of a group's stream `n`, the first's RTP port
/// `base`: stream `i` at `base + 2i`.
pub(crate) fn ports(base: u16, n: usize) -> (u16, u16) {
    let rtp = base.saturating_add((n as u16).saturating_mul(2));
    (rtp, rtp.saturating_add(1))
}

/// Where stream `n` of group `addr` sends its RTP and RTCP ([`ports`]).
pub(crate) fn destination(addr: IpAddr, base: u16, n: usize) -> (SocketAddr, SocketAddr) {
    let (rtp, rtcp) = ports(base, n);
    (SocketAddr::new(addr, rtp), SocketAddr::new(addr, rtcp))
}

/// A socket hearing what members send to group address `to` (a port of
/// it: RFC 3550 §6, receivers send their reports to the group): bound to
/// it with `SO_REUSEADDR` (players on this host bind the port too), so it
/// gets that group's datagrams only, the group joined on the interface of
/// `local` (IPv4; IPv6: the one the routing table picks). Closing it
/// leaves the group.
pub(crate) fn hear(to: SocketAddr, local: IpAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(to), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.bind(&to.into())?;
    match (to.ip(), local.to_canonical()) {
        (IpAddr::V4(group), IpAddr::V4(on)) => s.join_multicast_v4(&group, &on)?,
        (IpAddr::V4(group), _) => s.join_multicast_v4(&group, &Ipv4Addr::UNSPECIFIED)?,
        (IpAddr::V6(group), _) => s.join_multicast_v6(&group, 0)?,
    }
    Ok(s.into())
}

/// The first address of `pool` neither in use nor well-known.
fn free_address(pool: IpNet, in_use: &HashSet<IpAddr>) -> Option<IpAddr> {
    pool.hosts()
        .find(|a| !well_known(*a) && !in_use.contains(a))
}

pub(crate) struct Group {
    pub addr: IpAddr,
    /// RTP port of track 0; track `i` at `port + 2i`.
    port: u16,
    pub ttl: u8,
    batch: Duration,
    title: Arc<str>,
    /// Its sessions, and the SETUPs waiting for its sockets.
    members: usize,
    tracks: Vec<GroupTrack>,
    phase: Phase,
}

/// Where a group stands: its first PLAY starts it (the engine positions
/// its streams), which takes its tracks as they are.
enum Phase {
    Gathering,
    /// Positioning its streams, to start at `at`.
    Starting {
        at: Instant,
    },
    Started(Started),
}

/// One track of a group: an engine stream to `addr:port+2·track`, with
/// its repair stream's SSRC once a session set that up.
pub(crate) struct GroupTrack {
    pub track: u32,
    pub engine_id: u64,
    pub shard: u64,
    pub ssrc: u32,
    pub repair: Option<u32>,
    pub reservation: Reservation,
    pub _storage: Option<Box<fjord_storage::StorageReservation>>,
}

/// The group's start: when its packets are due from, and each track's
/// RTP-Info (track, seq, rtptime).
#[derive(Clone, Debug)]
pub(crate) struct Started {
    pub at: Instant,
    pub tracks: Vec<(u32, u16, u32)>,
}

/// What a PLAY of a member finds ([`Group::start`]).
pub(crate) enum Starting {
    /// The first PLAY: position these streams (shard, engine id, track),
    /// then [`Group::started`] at `at`.
    Position {
        at: Instant,
        streams: Vec<(u64, u64, u32)>,
    },
    /// Started, or being started, at this time.
    At(Instant),
}

impl Group {
    /// Whether a new session may still join: not started, or starting
    /// after `now`.
    fn gathering(&self, now: Instant) -> bool {
        match &self.phase {
            Phase::Gathering => true,
            Phase::Starting { at } | Phase::Started(Started { at, .. }) => *at > now,
        }
    }

    fn suits(&self, wish: Wish) -> bool {
        wish.ttl.is_none_or(|t| t >= self.ttl)
    }

    /// The RTP and RTCP ports of stream `n`: track `i` is stream `i`, its
    /// repair stream `tracks + i`.
    pub(crate) fn ports(&self, n: usize) -> (u16, u16) {
        ports(self.port, n)
    }

    /// Where stream `n`'s RTP and RTCP go.
    pub(crate) fn destination(&self, n: usize) -> (SocketAddr, SocketAddr) {
        destination(self.addr, self.port, n)
    }

    /// A session, or a SETUP waiting for the group's sockets, joins;
    /// undone by [`Groups::leave`].
    pub(crate) fn join(&mut self) {
        self.members += 1;
    }

    /// The group's stream of `track` (engine id, shard, SSRC), if made;
    /// a group that has started takes no new one.
    pub(crate) fn track(&self, track: u32) -> Result<Option<(u64, u64, u32)>, GroupError> {
        match self.tracks.iter().find(|t| t.track == track) {
            Some(t) => Ok(Some((t.engine_id, t.shard, t.ssrc))),
            None if self.taking() => Ok(None),
            None => Err(GroupError::Started),
        }
    }

    /// The repair stream of the group's `track` (set up before it), if
    /// attached: its source's engine id and shard, and its SSRC.
    pub(crate) fn repair(&self, track: u32) -> Result<Option<(u64, u64, u32)>, GroupError> {
        let t = (self.tracks.iter().find(|t| t.track == track)).ok_or(GroupError::NoSource)?;
        match t.repair {
            Some(ssrc) => Ok(Some((t.engine_id, t.shard, ssrc))),
            None if self.taking() => Ok(None),
            None => Err(GroupError::Started),
        }
    }

    /// Whether streams may still be added: not started nor starting.
    fn taking(&self) -> bool {
        matches!(self.phase, Phase::Gathering)
    }

    /// Adds the stream of a track (its engine stream added by the caller).
    pub(crate) fn add_track(&mut self, t: GroupTrack) {
        self.tracks.push(t);
    }

    /// Records the repair stream attached to `track`'s engine stream.
    pub(crate) fn add_repair(&mut self, track: u32, ssrc: u32) {
        if let Some(t) = self.tracks.iter_mut().find(|t| t.track == track) {
            t.repair = Some(ssrc);
        }
    }

    /// A member's PLAY at `now`: the first starts the group `batch` from
    /// now (its streams to position), later ones get the same start.
    pub(crate) fn start(&mut self, now: Instant) -> Starting {
        match &self.phase {
            Phase::Starting { at } | Phase::Started(Started { at, .. }) => Starting::At(*at),
            Phase::Gathering => {
                let at = now + self.batch;
                self.phase = Phase::Starting { at };
                let streams = (self.tracks.iter())
                    .map(|t| (t.shard, t.engine_id, t.track))
                    .collect();
                Starting::Position { at, streams }
            }
        }
    }

    /// The engine positioned the streams (`infos`, in the order of
    /// [`Starting::Position`]'s): they start at `at` (the commands in
    /// `out`), all on the first one's clock.
    pub(crate) fn started(
        &mut self,
        at: Instant,
        streams: &[(u64, u64, u32)],
        infos: &[fjord_engine::PlayInfo],
        out: &mut Outbox,
    ) {
        let origin_ns = infos.first().map_or(0, |i| i.time_ns);
        for &(shard, id, _) in streams {
            out.push(shard, Command::Start { id, at, origin_ns });
        }
        let tracks = (streams.iter().zip(infos))
            .map(|(&(.., track), i)| (track, i.seq, i.rtptime))
            .collect();
        self.phase = Phase::Started(Started { at, tracks });
        tracing::info!(group = %self.addr, title = %self.title, "multicast group starts");
    }

    /// The engine could not position the streams: the next PLAY tries again.
    pub(crate) fn start_failed(&mut self) {
        if matches!(self.phase, Phase::Starting { .. }) {
            self.phase = Phase::Gathering;
        }
    }

    /// The start, once the engine positioned the streams; `None` while it
    /// does, `Err` if it could not (the group gathers again).
    pub(crate) fn start_of(&self) -> Result<Option<&Started>, ()> {
        match &self.phase {
            Phase::Started(s) => Ok(Some(s)),
            Phase::Starting { .. } => Ok(None),
            Phase::Gathering => Err(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wish() -> Wish {
        Wish { ttl: None }
    }

    fn group_for(groups: &mut Groups, title: &str, config: &Config, now: Instant) -> GroupId {
        groups
            .group_for(&Arc::from(title), wish(), config, now)
            .unwrap()
    }

    /// Adds track 0 to group `id`, as a SETUP's bind answer would.
    fn add_track(groups: &mut Groups, id: GroupId, admission: &mut Admission, engine_id: u64) {
        let g = groups.get_mut(id).unwrap();
        assert!(matches!(g.track(0), Ok(None)), "not made yet");
        g.add_track(GroupTrack {
            track: 0,
            engine_id,
            shard: 0,
            ssrc: 7,
            repair: None,
            reservation: admission.reserve(None, 100).unwrap(),
            _storage: None,
        });
    }

    #[test]
    fn sessions_of_a_title_share_its_gathering_group_and_others_get_their_own() {
        let mut m = Groups::default();
        let config = Config::default();
        let now = Instant::now();
        let g1 = group_for(&mut m, "a.ts", &config, now);
        let g2 = group_for(&mut m, "a.ts", &config, now);
        let g3 = group_for(&mut m, "b.ts", &config, now);
        assert_eq!(g1, g2);
        let (g1, g3) = (m.get(g1).unwrap(), m.get(g3).unwrap());
        assert_ne!(g1.addr, g3.addr);
        assert!(config.multicast_pool.contains(&g1.addr));
        assert_eq!(g1.ports(0), (5004, 5005));
        assert_eq!(g1.ports(1), (5006, 5007));
        assert_eq!(
            g1.ports(3),
            (5010, 5011),
            "a repair stream after the tracks"
        );
    }

    /// A group gathers SETUPs until its start (first PLAY plus the
    /// batching window); a SETUP after that gets a new group, started
    /// later; a started group takes no new track.
    #[test]
    fn a_group_gathers_within_its_batch_window_and_later_setups_get_the_next() {
        let mut m = Groups::default();
        let mut admission = Admission::new(1, None);
        let config = Config {
            multicast_batch_ms: 1000,
            ..Config::default()
        };
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let first = group_for(&mut m, "a.ts", &config, t0);
        m.get_mut(first).unwrap().join();
        add_track(&mut m, first, &mut admission, 1);
        let g = m.get_mut(first).unwrap();
        let Starting::Position { at, streams } = g.start(ms(100)) else {
            panic!("the first PLAY positions the streams");
        };
        assert_eq!((at, streams), (ms(1100), vec![(0, 1, 0)]));
        assert!(
            matches!(g.start(ms(200)), Starting::At(a) if a == ms(1100)),
            "a later PLAY gets the same start"
        );
        assert!(matches!(g.track(1), Err(GroupError::Started)));
        assert_eq!(g.start_of().map(|s| s.is_some()), Ok(false), "positioning");
        assert_eq!(
            group_for(&mut m, "a.ts", &config, ms(1099)),
            first,
            "within the window"
        );
        let info = fjord_engine::PlayInfo {
            packet: 0,
            seq: 9,
            rtptime: 99,
            time_ns: 5,
            end_ns: 10,
            queued: false,
        };
        let mut out = Outbox::default();
        let g = m.get_mut(first).unwrap();
        g.started(ms(1100), &[(0, 1, 0)], &[info], &mut out);
        assert!(matches!(
            out.commands(),
            [(0, Command::Start { id: 1, at, origin_ns: 5 })] if *at == ms(1100)
        ));
        assert_eq!(g.start_of().unwrap().unwrap().tracks, [(0, 9, 99)]);
        let next = group_for(&mut m, "a.ts", &config, ms(1100));
        assert_ne!(next, first, "after the start: the next group");
        assert_ne!(m.get(next).unwrap().addr, m.get(first).unwrap().addr);
        assert_eq!(group_for(&mut m, "a.ts", &config, ms(1200)), next);
    }

    #[test]
    fn a_group_whose_streams_could_not_be_positioned_gathers_again() {
        let mut m = Groups::default();
        let now = Instant::now();
        let id = group_for(&mut m, "a.ts", &Config::default(), now);
        let g = m.get_mut(id).unwrap();
        assert!(matches!(g.start(now), Starting::Position { .. }));
        g.start_failed();
        assert!(g.start_of().is_err(), "not starting");
        assert!(
            matches!(g.start(now), Starting::Position { .. }),
            "tried again"
        );
    }

    /// The last member's leaving ends the group: BYE and removal of its
    /// streams, its admission given back, its address free for the next.
    #[test]
    fn the_last_member_leaving_ends_the_group_and_frees_its_address() {
        let mut m = Groups::default();
        let mut admission = Admission::new(1, None);
        let config = Config::default();
        let now = Instant::now();
        let id = group_for(&mut m, "a.ts", &config, now);
        let addr = m.get(id).unwrap().addr;
        m.get_mut(id).unwrap().join();
        m.get_mut(id).unwrap().join();
        add_track(&mut m, id, &mut admission, 4);
        assert_eq!(admission.loads(), [100]);
        let mut out = Outbox::default();
        m.leave(id, &mut out, &mut admission);
        assert!(out.commands().is_empty() && m.get(id).is_some(), "one left");
        m.leave(id, &mut out, &mut admission);
        let sent: Vec<_> = (out.commands().iter())
            .map(|(_, c)| matches!(c, Command::Bye { id: 4 } | Command::Remove { id: 4 }))
            .collect();
        assert_eq!(sent, [true, true], "BYE, then removed");
        assert!(matches!(out.commands()[0].1, Command::Bye { .. }));
        assert!(m.get(id).is_none());
        assert_eq!(admission.loads(), [0]);
        let again = group_for(&mut m, "b.ts", &config, now);
        assert_eq!(m.get(again).unwrap().addr, addr, "its address is reused");
        m.leave(id, &mut out, &mut admission);
        assert_eq!(out.commands().len(), 2, "an ended group ends once");
    }

    #[test]
    fn well_known_groups_are_never_picked() {
        let mut m = Groups::default();
        let config = Config {
            multicast_pool: "239.255.255.248/29".parse().unwrap(),
            ..Config::default()
        };
        let now = Instant::now();
        let picked: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|t| {
                let g = group_for(&mut m, t, &config, now);
                m.get(g).unwrap().addr.to_string()
            })
            .collect();
        assert_eq!(
            picked,
            [
                "239.255.255.249",
                "239.255.255.251",
                "239.255.255.252",
                "239.255.255.254"
            ],
            "SSDP's and SLP's groups skipped"
        );
        let e = m
            .group_for(&Arc::from("e"), wish(), &config, now)
            .err()
            .unwrap();
        assert_eq!(e.status(), 453);
        for a in [
            "224.0.0.251",
            "224.0.1.1",
            "239.255.255.250",
            "ff02::fb",
            "ff05::c",
        ] {
            assert!(well_known(a.parse().unwrap()), "{a}");
        }
        for a in ["239.255.0.1", "232.1.2.3", "ff15::1"] {
            assert!(!well_known(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn pools_with_only_or_overlapping_well_known_groups_are_refused() {
        let check = |p: &str| check_pool(p.parse().unwrap());
        for ok in [
            "239.255.0.0/16",
            "239.255.255.250/30",
            "232.0.0.0/8",
            "ff15::/16",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "224.0.0.0/4",
            "224.0.0.0/24",
            "224.0.0.251/32",
            "224.0.1.0/28",
            "239.255.255.250/32",
            "ff02::/16",
            "ff00::/8",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }

    /// An address taken with `reserve` (a live stream's group) is no one
    /// else's until released, then the next to be picked.
    #[test]
    fn a_reserved_address_is_taken_until_released() {
        let mut m = Groups::default();
        let config = Config::default();
        let first = m.reserve(&config).unwrap();
        let g = group_for(&mut m, "a.ts", &config, Instant::now());
        assert_ne!(m.get(g).unwrap().addr, first);
        m.release(first);
        assert_eq!(m.reserve(&config).unwrap(), first);
    }

    /// A full pool refuses with 453, a broadcast channel's address as
    /// well as a session's group.
    #[test]
    fn a_full_pool_refuses_with_453() {
        let mut m = Groups::default();
        let config = Config {
            multicast_pool: "239.255.9.0/30".parse().unwrap(),
            ..Config::default()
        };
        let now = Instant::now();
        group_for(&mut m, "a", &config, now);
        m.reserve(&config).unwrap();
        let e = m
            .group_for(&Arc::from("c"), wish(), &config, now)
            .err()
            .unwrap();
        assert_eq!(e.status(), 453);
        assert_eq!(m.reserve(&config).err().unwrap().status(), 453);
    }
}

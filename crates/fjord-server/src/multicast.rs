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
//! sent to the group are not read.
//!
//! The server picks every group and port (RFC 2326 §12.39 lets it): a
//! client's `destination=` and `port=` are ignored, else any client could
//! aim a title's RTP at any group of the LAN (SSDP's, mDNS's). Groups other
//! protocols listen on are never picked ([`well_known`]).

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::{Duration, Instant},
};

use fjord_engine::{Command, Output, RepairSpec, SessionSpec, Start, Title, Until};
use ipnet::IpNet;
use tokio::sync::OnceCell;

use crate::{
    Server,
    admission::{Admission, Reservation},
    config::Config,
    outbox::Outbox,
    scale::Rate,
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

/// The groups in use, and the one of each title still gathering sessions.
#[derive(Default)]
pub(crate) struct Multicast {
    registry: Arc<Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    in_use: HashSet<IpAddr>,
    gathering: HashMap<Arc<str>, Arc<Group>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Multicast {
    /// The group a new multicast session of `title` joins: the title's
    /// gathering group if it suits `wish`, else a new one from the pool.
    pub(crate) fn group_for(
        &self,
        title: &Arc<str>,
        wish: Wish,
        config: &Config,
    ) -> Result<Arc<Group>, GroupError> {
        let mut reg = lock(&self.registry);
        if let Some(g) = reg.gathering.get(title)
            && g.gathering()
            && g.suits(wish)
        {
            return Ok(g.clone());
        }
        let addr = free_address(config.multicast_pool, &reg.in_use).ok_or(GroupError::PoolFull)?;
        reg.in_use.insert(addr);
        let group = Arc::new(Group {
            addr,
            port: config.multicast_port,
            ttl: wish
                .ttl
                .map_or(config.multicast_ttl, |t| t.min(config.multicast_ttl)),
            batch: Duration::from_millis(config.multicast_batch_ms),
            registry: Arc::downgrade(&self.registry),
            title: title.clone(),
            state: Mutex::default(),
            started: OnceCell::new(),
        });
        reg.gathering.insert(title.clone(), group.clone());
        Ok(group)
    }
}

impl Multicast {
    /// A group of the pool for good (a broadcast channel's).
    pub(crate) fn reserve(&self, config: &Config) -> Result<IpAddr, GroupError> {
        let mut reg = lock(&self.registry);
        let addr = free_address(config.multicast_pool, &reg.in_use).ok_or(GroupError::PoolFull)?;
        reg.in_use.insert(addr);
        Ok(addr)
    }
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
    registry: Weak<Mutex<Registry>>,
    title: Arc<str>,
    state: Mutex<GroupState>,
    /// Set once, by the first PLAY: when the streams start and where.
    started: OnceCell<Started>,
}

#[derive(Default)]
struct GroupState {
    members: usize,
    tracks: Vec<GroupTrack>,
    /// Set when the group has ended (its last session left).
    ended: bool,
}

/// One track of a group: an engine stream to `addr:port+2·track`, with
/// its repair stream's SSRC once a session set that up.
pub(crate) struct GroupTrack {
    pub track: u32,
    pub engine_id: u64,
    pub shard: u64,
    pub ssrc: u32,
    repair: Option<u32>,
    reservation: Reservation,
    _storage: Option<Box<fjord_storage::StorageReservation>>,
}

/// The group's start: when its packets are due from, and each track's
/// RTP-Info (track, seq, rtptime).
#[derive(Clone)]
pub(crate) struct Started {
    pub at: Instant,
    pub tracks: Vec<(u32, u16, u32)>,
}

impl Group {
    fn gathering(&self) -> bool {
        !lock(&self.state).ended && self.started.get().is_none_or(|s| s.at > Instant::now())
    }

    fn suits(&self, wish: Wish) -> bool {
        wish.ttl.is_none_or(|t| t >= self.ttl)
    }

    /// The RTP and RTCP ports of stream `n`: track `i` is stream `i`, its
    /// repair stream `tracks + i`.
    pub(crate) fn ports(&self, n: usize) -> (u16, u16) {
        let rtp = self.port.saturating_add((n as u16).saturating_mul(2));
        (rtp, rtp.saturating_add(1))
    }

    /// A session joins; undone by [`Group::leave`].
    pub(crate) fn join(&self) {
        lock(&self.state).members += 1;
    }

    /// The group's stream of `track`, made on first use (an engine stream
    /// sending to the group), with its SSRC.
    pub(crate) fn track(
        &self,
        (server, admission): (&Server, &mut Admission),
        title: &Arc<Title>,
        track: u32,
        local: IpAddr,
    ) -> Result<(u64, u64, u32), GroupError> {
        let mut state = lock(&self.state);
        if let Some(t) = state.tracks.iter().find(|t| t.track == track) {
            return Ok((t.engine_id, t.shard, t.ssrc));
        }
        if self.started.initialized() {
            return Err(GroupError::Started);
        }
        let t = self.open_track((server, admission), title, track, local)?;
        let found = (t.engine_id, t.shard, t.ssrc);
        state.tracks.push(t);
        Ok(found)
    }

    /// The repair stream of the group's `track` (set up before it),
    /// attached on first use; its SSRC.
    pub(crate) fn repair(
        &self,
        server: &Server,
        (track, tracks): (u32, usize),
        local: IpAddr,
        payload_type: u8,
    ) -> Result<(u64, u64, u32), GroupError> {
        let mut state = lock(&self.state);
        let started = self.started.initialized();
        let Some(t) = state.tracks.iter_mut().find(|t| t.track == track) else {
            return Err(GroupError::NoSource);
        };
        if let Some(ssrc) = t.repair {
            return Ok((t.engine_id, t.shard, ssrc));
        }
        if started {
            return Err(GroupError::Started);
        }
        let output = self.output(server, local, tracks + track as usize)?;
        let ssrc = rand::random();
        let repair = Box::new(RepairSpec {
            ssrc,
            seq0: rand::random(),
            payload_type,
            output,
        });
        let id = t.engine_id;
        (server.engine).send(t.shard, Command::AttachRepair { id, repair });
        t.repair = Some(ssrc);
        Ok((t.engine_id, t.shard, ssrc))
    }

    fn open_track(
        &self,
        (server, admission): (&Server, &mut Admission),
        title: &Arc<Title>,
        track: u32,
        local: IpAddr,
    ) -> Result<GroupTrack, GroupError> {
        let pps = crate::title_streams::track_pps(title, track as usize);
        let reservation = admission.reserve(None, pps).ok_or(GroupError::Capacity)?;
        let mut release = |e| {
            admission.release(&reservation);
            e
        };
        let storage = match &server.storage {
            None => None,
            Some(s) => Some(Box::new(
                s.reserve(
                    &**title,
                    pps * crate::title_streams::average_packet_bytes(title),
                )
                .map_err(|e| release(GroupError::Storage(e)))?,
            )),
        };
        let output = self
            .output(server, local, track as usize)
            .map_err(|e| release(e.into()))?;
        let ids = title
            .prefab_ids(track as usize)
            .unwrap_or_else(|| fjord_media::prefab::Ids {
                ssrc: rand::random(),
                seq0: rand::random(),
                ts0: rand::random(),
            });
        let engine_id = server.next_id();
        let shard = reservation.thread as u64;
        server.engine.send(
            shard,
            Command::Add(Box::new(SessionSpec {
                id: engine_id,
                title: title.clone(),
                track: track as usize,
                ssrc: ids.ssrc,
                seq0: ids.seq0,
                ts0: ids.ts0,
                output,
            })),
        );
        Ok(GroupTrack {
            track,
            engine_id,
            shard,
            ssrc: ids.ssrc,
            repair: None,
            reservation,
            _storage: storage,
        })
    }

    /// Sockets of the server's port range on `local`, sending to the group
    /// with the group's TTL.
    fn output(&self, server: &Server, local: IpAddr, stream: usize) -> std::io::Result<Output> {
        let pair = server.ports.bind(local)?;
        let (rtp_port, rtcp_port) = self.ports(stream);
        let rtp_peer = SocketAddr::new(self.addr, rtp_port);
        for s in [&pair.rtp, &pair.rtcp] {
            match self.addr {
                IpAddr::V4(_) => s.set_multicast_ttl_v4(u32::from(self.ttl))?,
                IpAddr::V6(_) => s.set_multicast_hops_v6(u32::from(self.ttl))?,
            }
        }
        pair.rtp.connect(&rtp_peer.into())?;
        pair.rtp.set_nonblocking(true)?;
        Ok(Output::Udp {
            rtp: pair.rtp.into(),
            rtp_peer,
            rtcp: pair.rtcp.into(),
            rtcp_peer: SocketAddr::new(self.addr, rtcp_port),
        })
    }

    /// Starts the group at its first PLAY, `batch` from now, from the
    /// title's start; later PLAYs get the same start.
    pub(crate) async fn start(&self, server: &Server, title: &Arc<Title>) -> Option<Started> {
        let started = self
            .started
            .get_or_try_init(|| async {
                let at = Instant::now() + self.batch;
                let tracks: Vec<(u32, u64, u64)> = lock(&self.state)
                    .tracks
                    .iter()
                    .map(|t| (t.track, t.shard, t.engine_id))
                    .collect();
                let mut infos = Vec::with_capacity(tracks.len());
                for (track, shard, id) in tracks {
                    let start = Start::at(title, track as usize, 0);
                    let info = crate::title_streams::play(
                        &server.engine,
                        shard,
                        id,
                        start,
                        Until::End,
                        Rate::NORMAL,
                        false,
                    )
                    .await
                    .ok_or(())?;
                    infos.push((track, shard, id, info));
                }
                let origin_ns = infos.first().map_or(0, |(.., i)| i.time_ns);
                for &(_, shard, id, _) in &infos {
                    server
                        .engine
                        .send(shard, Command::Start { id, at, origin_ns });
                }
                tracing::info!(group = %self.addr, title = %self.title, "multicast group starts");
                Ok::<_, ()>(Started {
                    at,
                    tracks: infos
                        .iter()
                        .map(|(t, .., i)| (*t, i.seq, i.rtptime))
                        .collect(),
                })
            })
            .await;
        started.ok().cloned()
    }

    /// A session leaves; the last one ends the group: RTCP BYE to the
    /// group, its streams removed, its address back in the pool.
    pub(crate) fn leave(&self, out: &mut Outbox, admission: &mut Admission) {
        let tracks = {
            let mut state = lock(&self.state);
            state.members = state.members.saturating_sub(1);
            if state.members > 0 || state.ended {
                return;
            }
            state.ended = true;
            std::mem::take(&mut state.tracks)
        };
        for t in tracks {
            out.push(t.shard, Command::Bye { id: t.engine_id });
            out.push(t.shard, Command::Remove { id: t.engine_id });
            admission.release(&t.reservation);
        }
        if let Some(registry) = self.registry.upgrade() {
            let mut reg = lock(&registry);
            reg.in_use.remove(&self.addr);
            if reg
                .gathering
                .get(&self.title)
                .is_some_and(|g| std::ptr::eq(&**g, self))
            {
                reg.gathering.remove(&self.title);
            }
        }
        tracing::info!(group = %self.addr, title = %self.title, "multicast group ended");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wish() -> Wish {
        Wish { ttl: None }
    }

    #[test]
    fn sessions_of_a_title_share_its_gathering_group_and_others_get_their_own() {
        let m = Multicast::default();
        let config = Config::default();
        let a: Arc<str> = "a.ts".into();
        let b: Arc<str> = "b.ts".into();
        let g1 = m.group_for(&a, wish(), &config).unwrap();
        let g2 = m.group_for(&a, wish(), &config).unwrap();
        let g3 = m.group_for(&b, wish(), &config).unwrap();
        assert!(Arc::ptr_eq(&g1, &g2));
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

    #[test]
    fn well_known_groups_are_never_picked() {
        let m = Multicast::default();
        let config = Config {
            multicast_pool: "239.255.255.248/29".parse().unwrap(),
            ..Config::default()
        };
        let picked: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|t| m.group_for(&Arc::from(*t), wish(), &config).unwrap())
            .map(|g| g.addr.to_string())
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
        let e = m.group_for(&Arc::from("e"), wish(), &config).err().unwrap();
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

    #[test]
    fn a_full_pool_refuses_with_453() {
        let m = Multicast::default();
        let config = Config {
            multicast_pool: "239.255.9.0/30".parse().unwrap(),
            ..Config::default()
        };
        for name in ["a", "b"] {
            m.group_for(&Arc::from(name), wish(), &config).unwrap();
        }
        let e = m.group_for(&Arc::from("c"), wish(), &config).err().unwrap();
        assert_eq!(e.status(), 453);
    }
}

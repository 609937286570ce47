//! Periodic broadcasting of the titles named in `[[broadcast]]` tables:
//! `fjord_broadcast` plans the channels from the title's index; each slot of
//! a channel is one engine stream that sends its segment's packets, as
//! stored, to the channel's multicast group at the plan's byte rate
//! ([`Command::Pace`]) and again every period ([`Until::Loop`]), from the
//! server's start for as long as it runs, with the repair packets of every
//! block it touches when the title has parity. A broadcast starts once the
//! title's background work (parity, packet file) is done, since its
//! streams keep the title they start with. The schedule is published as JSON
//! on `DESCRIBE rtsp://HOST/NAME?broadcast` (`docs/broadcast.md`); clients
//! (`fjord play --broadcast`) join the channels they need.

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use fjord_broadcast::{
    Config as PlanConfig, Packet, Plan, Scheme, Title as PlanTitle,
    schedule::{ChannelGroup, RepairFlow, SCHEDULE_VERSION, Schedule},
};
use fjord_engine::{Command, Output, RepairSpec, SessionSpec, Start, Title, Until};

use fjord_media::prefab::Ids;

use crate::{Server, admission::Reservation, config::BroadcastConfig};

/// The scheme a `[[broadcast]]` table names (`cautious-harmonic`), with
/// its default parameters.
pub(crate) fn scheme(name: &str) -> Result<Scheme, String> {
    let config_name = |s: &Scheme| s.name().replace(' ', "-");
    (Scheme::ALL.into_iter())
        .find(|s| config_name(s) == name)
        .ok_or_else(|| {
            let names: Vec<String> = Scheme::ALL.iter().map(config_name).collect();
            format!("broadcast scheme `{name}`: not one of {}", names.join(", "))
        })
}

/// Time from planning to the schedule's epoch: every channel's first
/// round is set up before it is due.
const LEAD: Duration = Duration::from_millis(500);

/// The published schedule of every title being broadcast, by title name,
/// and what its streams hold for as long as the server runs. No lock
/// inside: it lives in the control core (`crate::core`); the task that
/// starts the broadcasts records each outcome there.
#[derive(Default)]
pub(crate) struct Broadcasts {
    published: HashMap<String, Arc<String>>,
    /// Titles whose broadcast could not start.
    failed: HashSet<String>,
    held: Vec<Held>,
}

/// A slot stream's share of its engine thread and of its disk.
pub(crate) struct Held {
    _thread: Reservation,
    _disk: Option<fjord_storage::StorageReservation>,
}

impl Broadcasts {
    /// The JSON schedule of `title`, if it is broadcast.
    pub(crate) fn schedule(&self, title: &str) -> Option<Arc<String>> {
        self.published.get(title).cloned()
    }

    /// Whether `config` names `title` in a `[[broadcast]]` table that has
    /// not failed: its schedule is published once it starts.
    pub(crate) fn configured(&self, config: &crate::Config, title: &str) -> bool {
        config.broadcasts.iter().any(|b| b.title == title) && !self.failed.contains(title)
    }

    /// `title`'s broadcast started: its schedule is published, and what its
    /// streams hold is kept.
    pub(crate) fn started(&mut self, title: &str, schedule: String, held: Vec<Held>) {
        self.held.extend(held);
        self.published.insert(title.to_owned(), Arc::new(schedule));
    }

    /// `title`'s broadcast could not start: DESCRIBE of its schedule is
    /// 404 from now on, not 503.
    pub(crate) fn failed(&mut self, title: &str) {
        self.failed.insert(title.to_owned());
    }
}

/// Starts every `[[broadcast]]` of the config; one that cannot start is
/// logged and the others go on.
pub(crate) async fn start_all(server: Arc<Server>) {
    for b in server.config().broadcasts.clone() {
        let started = start(&server, &b).await;
        let mut core = server.core.lock();
        match started {
            Ok((schedule, held)) => core.broadcasts.started(&b.title, schedule, held),
            Err(e) => {
                tracing::error!(title = %b.title, "broadcast not started: {e}");
                core.broadcasts.failed(&b.title);
            }
        }
    }
}

/// Plans `b`'s title, starts its channels and returns the schedule.
async fn start(server: &Server, b: &BroadcastConfig) -> Result<(String, Vec<Held>), String> {
    if !server.config().multicast_pool.addr().is_ipv4() {
        return Err("broadcast channels need an IPv4 multicast_pool".into());
    }
    let (name, title) = settled(server, &b.title).await?;
    let max_wait_ns = (b.max_start_s * 1e9) as u64;
    let config = PlanConfig::new(scheme(&b.scheme)?, max_wait_ns);
    let t = title.clone();
    let plan = tokio::task::spawn_blocking(move || plan(&t, config))
        .await
        .map_err(|e| e.to_string())??;
    // The headers of the packet file when there is one (sent as stored),
    // else headers the streams build with these fields.
    let ids = title.prefab_ids(0).unwrap_or_else(|| Ids {
        ssrc: rand::random(),
        seq0: rand::random(),
        ts0: rand::random(),
    });
    let repair = repair_flow(&title, ids.ssrc);
    let epoch = Instant::now() + LEAD;
    let epoch_unix = SystemTime::now() + LEAD;
    let (mut groups, mut held) = (Vec::new(), Vec::new());
    for c in 0..plan.channels().len() {
        let (group, h) = channel(server, (&title, ids, repair), &plan, c, epoch).await?;
        groups.push(group);
        held.extend(h);
    }
    let c = plan.channels().len();
    tracing::info!(title = %name, scheme = b.scheme, channels = c, "broadcasting");
    let published = schedule(
        server,
        (&name, &title, ids),
        &plan,
        (epoch_unix, &groups),
        repair,
    );
    Ok((published, held))
}

/// The longest a broadcast waits for the catalog's background work (a
/// busy catalog may always have some); it then starts with what the title
/// has.
const SETTLE_WAIT: Duration = Duration::from_secs(600);

/// The title `name` once the catalog's background work is done (opened
/// again then: the catalog reloads a title whose parity or packet file it
/// made), or after [`SETTLE_WAIT`].
async fn settled(server: &Server, name: &str) -> Result<(Arc<str>, Arc<Title>), String> {
    server.catalog.open(name).await.map_err(|e| e.to_string())?;
    if server.catalog.pending_jobs() > 0 {
        tracing::info!(
            title = name,
            "broadcast waits for the title's parity and packet file"
        );
        let since = Instant::now();
        while server.catalog.pending_jobs() > 0 && since.elapsed() < SETTLE_WAIT {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (name, title) = server.catalog.open(name).await.map_err(|e| e.to_string())?;
    match title.index().not_over_rtp() {
        Some(why) => Err(why.to_owned()),
        None => Ok((name, title)),
    }
}

/// The repair flow of the title's parity, under an SSRC of its own.
fn repair_flow(title: &Title, source_ssrc: u32) -> Option<RepairFlow> {
    let fec = title.fec(0)?;
    let ssrc = std::iter::repeat_with(rand::random::<u32>).find(|s| *s != source_ssrc)?;
    Some(RepairFlow {
        ssrc,
        payload_type: crate::title_streams::repair_payload_type(title),
        k: fec.params().k,
        m: fec.params().m,
        symbol_len: u16::try_from(fec.symbol_len()).ok()?,
    })
}

/// The plan of a one-track title: its packets by send time, cut at its
/// sync points.
fn plan(title: &Title, config: PlanConfig) -> Result<Plan, String> {
    let index = title.index();
    let track = match (index.track_count(), index.track(0)) {
        (1, Some(t)) => t,
        (n, _) => {
            return Err(format!(
                "periodic broadcasting sends titles of one track (MPEG-TS, PS, ES); this one has {n}"
            ));
        }
    };
    let packets = (0..track.packet_count())
        .filter_map(|i| track.packet(i))
        .map(|r| Packet {
            pts_ns: r.send_time_ns,
            bytes: r.payload_len() as u32,
        })
        .collect();
    let sync = track.sync_points().map(|s| s.packet).collect();
    let t = PlanTitle::new(packets, sync, index.duration_ns()).map_err(|e| e.to_string())?;
    Plan::new(t, config).map_err(|e| e.to_string())
}

/// Starts channel `c`: a looping engine stream per slot, to a group of
/// its own from the pool. Returns the group.
async fn channel(
    server: &Server,
    title: (&Arc<Title>, Ids, Option<RepairFlow>),
    plan: &Plan,
    c: usize,
    epoch: Instant,
) -> Result<(SocketAddr, Vec<Held>), String> {
    let config = server.config();
    let group = (server.core.lock().groups.reserve(&config)).map_err(|e| e.to_string())?;
    // A port of its own too: a socket bound to a port receives every group
    // joined on the host that sends to it.
    let port = u16::try_from(c * 2)
        .ok()
        .and_then(|p| config.multicast_port.checked_add(p));
    let to = SocketAddr::new(
        group,
        port.ok_or("too many channels for the ports above multicast_port")?,
    );
    let ch = &plan.channels()[c];
    let first_round = first_round(plan, c);
    let mut held = Vec::with_capacity(ch.slots.len());
    for (slot, offsets) in ch.slots.iter().zip(first_round) {
        let seg = &plan.segments()[slot.segment as usize];
        let start = ch.phase_ns + slot.offset_ns;
        let offsets: Box<[u64]> = offsets.iter().map(|due| due - start).collect();
        let round = Round {
            first: seg.first_packet,
            end: seg.first_packet + seg.packet_count,
            offsets,
            period: Duration::from_nanos(ch.period_ns),
            at: epoch + Duration::from_nanos(start),
        };
        held.push(slot_stream(server, title, to, round, ch.rate.bytes_per_s()).await?);
    }
    Ok((to, held))
}

/// The due times of each slot's packets in channel `c`'s first cycle.
fn first_round(plan: &Plan, c: usize) -> Vec<Vec<u64>> {
    let ch = &plan.channels()[c];
    let mut rounds: Vec<Vec<u64>> = vec![Vec::new(); ch.slots.len()];
    let cycle_end = ch.phase_ns + ch.period_ns;
    for e in plan.emissions(c).take_while(|e| e.due_ns < cycle_end) {
        let slot = ch.slots.iter().position(|s| {
            let seg = &plan.segments()[s.segment as usize];
            (seg.first_packet..seg.first_packet + seg.packet_count).contains(&e.packet)
        });
        if let Some(s) = slot {
            rounds[s].push(e.due_ns);
        }
    }
    rounds
}

/// One slot's stream: packets `first..end`, `offsets` after each round's
/// start, the first round at `at`, one every `period`.
struct Round {
    first: u32,
    end: u32,
    offsets: Box<[u64]>,
    period: Duration,
    at: Instant,
}

async fn slot_stream(
    server: &Server,
    (title, ids, repair): (&Arc<Title>, Ids, Option<RepairFlow>),
    to: SocketAddr,
    round: Round,
    bytes_per_s: f64,
) -> Result<Held, String> {
    let track = title.index().track(0).ok_or("no track")?;
    let ns_of = |i: u32| track.packet(i as usize).map_or(0, |r| r.send_time_ns);
    let packet_bytes = (title.index().source().size / (track.packet_count() as u64).max(1)).max(1);
    // Repair packets add M to every K packets sent.
    let bytes_per_s = repair.map_or(bytes_per_s, |r| {
        bytes_per_s * f64::from(u32::from(r.k) + u32::from(r.m)) / f64::from(r.k)
    });
    let pps = (bytes_per_s as u64).div_ceil(packet_bytes);
    let reservation = (server.core.lock().sessions.admission.reserve(None, pps))
        .ok_or("no engine thread has room")?;
    let shard = reservation.thread as u64;
    let disk = match &server.storage {
        None => None,
        Some(s) => Some(
            s.reserve(&**title, bytes_per_s as u64)
                .map_err(|e| e.to_string())?,
        ),
    };
    let held = Held {
        _thread: reservation,
        _disk: disk,
    };
    let id = server.next_id();
    let output = group_output(server, to).map_err(|e| format!("group {to}: {e}"))?;
    let (first_ns, last) = (
        ns_of(round.first),
        round.offsets.last().copied().unwrap_or(0),
    );
    let send = |cmd| server.engine.send(shard, cmd);
    send(Command::Add(Box::new(SessionSpec {
        id,
        title: title.clone(),
        track: 0,
        ssrc: ids.ssrc,
        seq0: ids.seq0,
        ts0: ids.ts0,
        output,
    })));
    if let Some(r) = repair {
        // To the channel's group and port too: receivers tell the flows
        // apart by SSRC.
        let output = group_output(server, to).map_err(|e| format!("group {to}: {e}"))?;
        send(Command::AttachRepair {
            id,
            repair: Box::new(RepairSpec {
                ssrc: r.ssrc,
                seq0: rand::random(),
                payload_type: r.payload_type,
                output,
            }),
        });
    }
    send(Command::Pace {
        id,
        first: round.first,
        offsets: round.offsets,
    });
    let start = Start::At {
        ns: first_ns,
        packet: round.first,
    };
    let until = Until::Loop {
        ns: first_ns + last + 1,
        packet: round.end,
        period: round.period,
    };
    let normal = crate::scale::Rate::NORMAL;
    (crate::title_streams::play(&server.engine, shard, id, start, until, normal, false).await)
        .ok_or("the engine did not position the stream")?;
    send(Command::Start {
        id,
        at: round.at,
        origin_ns: first_ns,
    });
    Ok(held)
}

/// A socket pair of the server's port range sending to group `to` with the
/// configured TTL.
fn group_output(server: &Server, to: SocketAddr) -> std::io::Result<Output> {
    let config = server.config();
    let rtcp = SocketAddr::new(to.ip(), to.port() + 1);
    (server.ports).bind_to_group(config.bind, (to, rtcp), config.multicast_ttl)
}

/// The published schedule (`docs/broadcast.md`).
fn schedule(
    server: &Server,
    (name, title, ids): (&str, &Title, Ids),
    plan: &Plan,
    (epoch, groups): (SystemTime, &[SocketAddr]),
    repair: Option<RepairFlow>,
) -> String {
    let track = title.index().track(0);
    let channels = (groups.iter())
        .filter_map(|g| match g.ip() {
            IpAddr::V4(group) => Some(ChannelGroup {
                group,
                port: g.port(),
            }),
            IpAddr::V6(_) => None,
        })
        .collect();
    let schedule = Schedule {
        version: SCHEDULE_VERSION,
        title: name.to_owned(),
        epoch_unix_ns: epoch
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        ssrc: ids.ssrc,
        seq0: ids.seq0,
        ts0: ids.ts0,
        clock_rate: track.map_or(90_000, |t| t.clock_rate()),
        payload_type: track.map_or(33, |t| t.payload_type()),
        ttl: server.config().multicast_ttl,
        channels,
        plan: plan.description(),
        repair,
    };
    serde_json::to_string(&schedule).unwrap_or_default()
}

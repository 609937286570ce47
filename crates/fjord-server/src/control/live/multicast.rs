//! Multicast viewers of a live stream (`multicast = true`): one group per
//! stream, its address from the pool VOD groups take theirs from
//! ([`crate::multicast::Groups`]), every track of the stream at
//! `multicast_port + 2i`. The group is one engine live viewer per track
//! whose output is the group's sockets, so each publisher packet leaves
//! once for all its members. The first member's PLAY starts it from the
//! last key frame, as a unicast viewer's PLAY does; later members join
//! what already flows. It ends (RTCP BYE to the group, its address back
//! in the pool) with its last member (TEARDOWN, timeout, connection
//! closed) or with the stream.
//!
//! Members' RTCP sent to the group (RFC 3550 §6: receivers send their
//! reports to it, at each track's RTCP port) is heard on a socket per
//! track that joined the group, and keeps the members at the address it
//! comes from alive (`alive.rs`): a member that sends receiver reports
//! but no RTSP keep-alive outlives `session_timeout_s`.
//!
//! The server picks the group, its ports and TTL (`multicast_ttl`): a
//! client's `destination=`, `port=` and `ttl=` are ignored, as for VOD
//! groups, and the reply's Transport says what it gets.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
};

use fjord_engine::{Backlog, Command, LiveViewer, Output};
use fjord_proto::rtsp::{response::Response, transport};

use super::super::{Client, Reply};
use super::{
    State, Stream,
    alive::{self, Heard},
    refuse, session_header, session_id,
    view::{self, Viewing, backlog, header_of},
};
use crate::{Server, multicast};

/// A live stream's group.
pub(super) struct Group {
    addr: IpAddr,
    /// RTP port of track 0.
    port: u16,
    ttl: u8,
    /// One per track of the stream, in its order.
    senders: Vec<Sender>,
    /// Added to the publisher's sequence numbers and timestamps.
    seq_delta: u16,
    ts_delta: u32,
    /// Sessions that set up a track of it, and the address of each one's
    /// RTSP connection (where its RTCP comes from).
    members: HashMap<String, IpAddr>,
    /// Its viewers are the engine's (its first member played).
    started: bool,
    /// The tasks hearing members' RTCP, ended with it.
    readers: Vec<tokio::task::AbortHandle>,
}

/// The engine viewer sending one track to the group.
struct Sender {
    id: u64,
    ssrc: u32,
    /// Until the group starts.
    output: Option<Output>,
}

impl Group {
    /// A group at `addr` sending each track `i` from `outputs[i]`, the
    /// engine viewer `ids[i]`.
    fn new((addr, port, ttl): (IpAddr, u16, u8), senders: Vec<(u64, Output)>) -> Group {
        let senders = (senders.into_iter())
            .map(|(id, output)| Sender {
                id,
                ssrc: rand::random(),
                output: Some(output),
            })
            .collect();
        Group {
            addr,
            port,
            ttl,
            senders,
            seq_delta: rand::random(),
            ts_delta: rand::random(),
            members: HashMap::new(),
            started: false,
            readers: Vec::new(),
        }
    }

    /// Names the engine thread of its viewers (a shard for
    /// [`fjord_engine::Engine::send`]).
    fn key(&self) -> u64 {
        self.senders.first().map_or(0, |s| s.id)
    }

    /// The Transport of a SETUP of `track`: the group, the track's ports,
    /// its SSRC.
    fn transport(&self, track: usize) -> Option<String> {
        let ssrc = self.senders.get(track)?.ssrc;
        let (rtp, rtcp) = multicast::ports(self.port, track);
        Some(transport::reply_multicast(
            self.addr, rtp, rtcp, self.ttl, ssrc,
        ))
    }

    /// A publisher's (sequence number, timestamp) as the group numbers it.
    fn numbered(&self, (seq, ts): (u16, u32)) -> (u16, u32) {
        (
            seq.wrapping_add(self.seq_delta),
            ts.wrapping_add(self.ts_delta),
        )
    }

    /// The first PLAY: the engine viewer of each track (its feed and clock
    /// rate in `feeds`), its output taken, with `backlog(i)`, the packets
    /// track `i` starts with. None once started.
    fn start(
        &mut self,
        feeds: &[(u64, u32)],
        mut backlog: impl FnMut(usize) -> Backlog,
    ) -> Vec<LiveViewer> {
        if std::mem::replace(&mut self.started, true) {
            return Vec::new();
        }
        let (seq_delta, ts_delta) = (self.seq_delta, self.ts_delta);
        (self.senders.iter_mut().zip(feeds).enumerate())
            .filter_map(|(i, (s, &(feed, clock_rate)))| {
                Some(LiveViewer {
                    id: s.id,
                    feed,
                    ssrc: s.ssrc,
                    seq_delta,
                    ts_delta,
                    output: s.output.take()?,
                    backlog: backlog(i),
                    started: false,
                    clock_rate,
                    sent: (0, 0),
                    // Set by the caller, which knows the stream's reports.
                    relay: false,
                })
            })
            .collect()
    }

    /// Session `id` leaves; true when it was the last.
    fn leave(&mut self, id: &str) -> bool {
        self.members.remove(id);
        self.members.is_empty()
    }

    /// Its members whose RTSP connection comes from one of `from`.
    pub(super) fn members_at<'a>(&'a self, from: &'a [IpAddr]) -> impl Iterator<Item = &'a str> {
        (self.members.iter())
            .filter(|(_, at)| from.contains(at))
            .map(|(id, _)| id.as_str())
    }

    /// Ends the group: RTCP BYE from its engine viewers (when `bye`; the
    /// stream's end says it to every viewer itself), its address back in
    /// the pool.
    fn end(self, server: &Server, bye: bool) {
        self.readers
            .iter()
            .for_each(tokio::task::AbortHandle::abort);
        if self.started && bye {
            let key = self.key();
            for s in &self.senders {
                server.engine.send(key, Command::Bye { id: s.id });
            }
        }
        server.core.lock().groups.release(self.addr);
        tracing::info!(group = %self.addr, "live multicast group ended");
    }
}

/// SETUP of `track` of stream `stream` over multicast: the session (new,
/// or `session`) becomes a member of the stream's group, made for its
/// first member.
pub(super) fn setup(
    server: &Server,
    conn: &dyn Client,
    (stream, session): (u64, Option<&str>),
    track: usize,
) -> Reply {
    // Refused before a group is made for it.
    let may = session.and_then(|id| server.live.lock().viewers.get(id).map(|v| v.may_add(true)));
    if let Some(Err(r)) = may {
        return r;
    }
    let has_group = server.live.lock().groups.contains_key(&stream);
    let made = match has_group {
        true => None,
        false => match open(server, conn, stream) {
            Ok(g) => Some(g),
            Err(r) => return r,
        },
    };
    let id = session.map_or_else(session_id, str::to_owned);
    let mut state = server.live.lock();
    let made = match made {
        Some(g) if !state.groups.contains_key(&stream) && state.streams.contains_key(&stream) => {
            // Logged once kept: a group made by a SETUP that lost the
            // race with another is ended unused.
            tracing::info!(group = %g.addr, "live multicast group made");
            state.groups.insert(stream, g);
            None
        }
        // Another SETUP made one meanwhile, or the stream ended.
        other => other,
    };
    let reply = join(&mut state, conn, (stream, &id), track);
    let unused = match state.groups.get(&stream) {
        Some(g) if g.members.is_empty() => state.groups.remove(&stream),
        _ => None,
    };
    drop(state);
    for g in made.into_iter().chain(unused) {
        g.end(server, false);
    }
    match reply {
        Ok(transport) => Response::new(200)
            .header("Transport", transport)
            .header("Session", session_header(server, &id))
            .into(),
        Err(r) => r,
    }
}

/// Session `id` of connection `conn` takes `track` of the stream's group:
/// the reply's Transport.
fn join(
    state: &mut State,
    conn: &dyn Client,
    (stream, id): (u64, &str),
    track: usize,
) -> Result<String, Reply> {
    let peer = conn.peer().map_err(|e| refuse(500, &e.to_string()))?.ip();
    let State {
        viewers, groups, ..
    } = state;
    let Some(group) = groups.get_mut(&stream) else {
        return Err(refuse(404, "the stream ended"));
    };
    let transport = (group.transport(track)).ok_or_else(|| refuse(404, "no such track"))?;
    let viewing = (viewers.entry(id.to_owned())).or_insert_with(|| Viewing::new(conn.id(), stream));
    if viewing.watch_group(track)? {
        group.members.insert(id.to_owned(), peer.to_canonical());
    }
    Ok(transport)
}

/// A group for stream `stream`: an address of the pool, and per track a
/// pair of sockets sending to it from the connection's local address and
/// a task hearing its RTCP port.
fn open(server: &Server, conn: &dyn Client, stream: u64) -> Result<Group, Reply> {
    let local = conn.local().map_err(|e| refuse(500, &e.to_string()))?.ip();
    let tracks = (server.live.lock().streams.get(&stream)).map(|s| s.tracks.len());
    let tracks = tracks.ok_or_else(|| refuse(404, "the stream ended"))?;
    let config = server.config();
    let addr = (server.core.lock().groups.reserve(&config))
        .map_err(|e| refuse(e.status(), &e.to_string()))?;
    let (port, ttl) = (config.multicast_port, config.multicast_ttl);
    let mut senders = Vec::with_capacity(tracks);
    for i in 0..tracks {
        let to = multicast::destination(addr, port, i);
        match server.ports.bind_to_group(local, to, ttl) {
            Ok(output) => senders.push((server.next_id(), output)),
            Err(e) => {
                server.core.lock().groups.release(addr);
                return Err(refuse(
                    453,
                    &format!("cannot open the group's sockets: {e}"),
                ));
            }
        }
    }
    let readers = (senders.iter().enumerate())
        .filter_map(|(i, (_, out))| {
            let to = multicast::destination(addr, port, i).1;
            hear_members(server, stream, (to, local), out)
        })
        .collect();
    let mut group = Group::new((addr, port, ttl), senders);
    group.readers = readers;
    Ok(group)
}

/// Starts hearing what members send to `to`, a track's RTCP port of the
/// group, joined on the interface of `local`; the group's own reports,
/// sent from `output`, are not theirs. `None`: it cannot be heard, and
/// its members live on their requests alone.
fn hear_members(
    server: &Server,
    stream: u64,
    (to, local): (SocketAddr, IpAddr),
    output: &Output,
) -> Option<tokio::task::AbortHandle> {
    let Output::Udp { rtcp, .. } = output else {
        return None;
    };
    let own = rtcp.socket().local_addr().ok()?.as_socket()?;
    let socket = multicast::hear(to, local)
        .inspect_err(|e| tracing::warn!(group = %to, "members' RTCP not heard: {e}"))
        .ok()?;
    alive::read(server, Heard::Group { stream, own }, socket)
}

/// PLAY of member `id`: the group's first PLAY starts it, from the
/// packets since the last key frame, once the reply is written; a later
/// one (another member's, or this one's again) joins what flows. RTP-Info: the group's numbering of the next packet of each
/// track the session set up.
pub(super) fn play(server: &Server, id: &str) -> Reply {
    let mut state = server.live.lock();
    if let Some(stream) = state.viewers.get(id).map(|v| v.stream) {
        super::intake::hand_out_pending(server, &mut state, stream);
    }
    let State {
        streams,
        viewers,
        groups,
        ..
    } = &mut *state;
    let Some(viewing) = viewers.get_mut(id) else {
        return refuse(454, "no such session");
    };
    let (Some(stream), Some(group)) = (
        streams.get_mut(&viewing.stream),
        groups.get_mut(&viewing.stream),
    ) else {
        return refuse(404, "the stream ended");
    };
    let next: Vec<_> = (0..stream.tracks.len())
        .map(|t| next_packet(stream, t, group.started))
        .collect();
    let feeds: Vec<_> = (stream.tracks.iter())
        .map(|t| (t.feed, t.clock_rate))
        .collect();
    let viewers = group.start(&feeds, |t| backlog(stream, t));
    let key = group.key();
    let mut starts = Vec::new();
    let relay = super::rtcp::all_synced(stream, 0..stream.tracks.len());
    for mut v in viewers {
        v.relay = relay;
        starts.push((key, v.id));
        let feed = v.feed;
        server.engine.send(key, Command::LiveAdd(Box::new(v)));
        if let Some(t) = stream.tracks.iter().find(|t| t.feed == feed) {
            super::rtcp::share_sync(server, key, t);
        }
    }
    stream.threads.insert(key % server.engine.threads() as u64);
    let infos: Vec<String> = (viewing.group_tracks().iter())
        .filter_map(|&t| {
            let (seq, ts) = group.numbered(next[t]?);
            Some(format!("url=trackID={t};seq={seq};rtptime={ts}"))
        })
        .collect();
    viewing.playing = true;
    view::play_reply(server, id, &infos, starts)
}

/// The publisher's numbering of the next packet of `track` the group
/// sends: before it `started`, the backlog's first; else (or with no
/// backlog) the one after the last received.
fn next_packet(stream: &mut Stream, track: usize, started: bool) -> Option<(u16, u32)> {
    let first = (!started).then(|| stream.ring.backlog(track));
    let first = first.and_then(|b| b.iter().next().map(|p| header_of(p)));
    let after = || (stream.tracks[track].renumber.last()).map(|(s, ts)| (s.wrapping_add(1), ts));
    first.or_else(after)
}

/// Member session `id` of `stream` gone: the last one ends the group.
pub(super) fn leave(server: &Server, (stream, id): (u64, &str)) {
    let mut state = server.live.lock();
    let last = (state.groups.get_mut(&stream)).is_some_and(|g| g.leave(id));
    let ended = last.then(|| state.groups.remove(&stream)).flatten();
    drop(state);
    if let Some(g) = ended {
        g.end(server, true);
    }
}

/// Stream `stream` ended (its viewers, the group's too, got RTCP BYE
/// from the engine): its group's address goes back to the pool.
pub(super) fn stream_ended(server: &Server, group: Group) {
    group.end(server, false);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> Output {
        let s = || socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None);
        let to = "239.255.0.1:5004".parse().unwrap();
        Output::Udp {
            rtp: s().unwrap().into(),
            rtp_peer: to,
            rtcp: s().unwrap().into(),
            rtcp_peer: to,
        }
    }

    /// A group of two tracks (engine viewers 10 and 11) at 239.255.0.1.
    fn group() -> Group {
        let at = ("239.255.0.1".parse().unwrap(), 5004, 3);
        Group::new(at, vec![(10, output()), (11, output())])
    }

    /// Every member is told the same group, ports by track, SSRC by
    /// track; no track beyond the stream's.
    #[test]
    fn a_setup_names_the_group_and_the_tracks_ports() {
        let g = group();
        let ssrc = |i: usize| format!("ssrc={:08X}", g.senders[i].ssrc);
        let t0 = g.transport(0).unwrap();
        assert_eq!(
            t0,
            format!(
                "RTP/AVP;multicast;destination=239.255.0.1;port=5004-5005;ttl=3;{}",
                ssrc(0)
            )
        );
        assert_eq!(g.transport(0).unwrap(), t0, "the same for every member");
        assert!(g.transport(1).unwrap().contains("port=5006-5007;"));
        assert!(g.transport(1).unwrap().ends_with(&ssrc(1)));
        assert!(g.transport(2).is_none());
        assert_eq!(g.key(), 10, "its viewers on the first one's thread");
    }

    /// The first PLAY hands the engine one viewer per track (its feed,
    /// its backlog, the group's numbering); later ones hand it none.
    #[test]
    fn the_group_starts_once_with_a_backlog_per_track() {
        let mut g = group();
        let packet = |n: u8| -> fjord_engine::LivePacket {
            vec![0x80, 96, 0, n, 0, 0, 0, 0, 0, 0, 0, 0].into()
        };
        let viewers = g.start(&[(7, 90_000), (8, 48_000)], |t| Backlog {
            chunks: vec![vec![packet(t as u8)].into()],
            skip: 0,
        });
        let got: Vec<_> = (viewers.iter())
            .map(|v| {
                (
                    v.id,
                    v.feed,
                    v.clock_rate,
                    v.backlog.iter().next().unwrap()[3],
                    v.started,
                )
            })
            .collect();
        assert_eq!(got, [(10, 7, 90_000, 0, false), (11, 8, 48_000, 1, false)]);
        assert!(
            viewers
                .iter()
                .all(|v| (v.seq_delta, v.ts_delta) == (g.seq_delta, g.ts_delta))
        );
        assert_eq!(
            g.numbered((1, 2)),
            (
                1u16.wrapping_add(g.seq_delta),
                2u32.wrapping_add(g.ts_delta)
            )
        );
        let none = g.start(&[(7, 90_000), (8, 48_000)], |_| Backlog::default());
        assert!(none.is_empty(), "started once");
    }

    #[test]
    fn the_last_member_leaving_ends_the_group() {
        let mut g = group();
        let at = "10.0.0.2".parse().unwrap();
        g.members = HashMap::from([("a".into(), at), ("b".into(), at)]);
        assert!(!g.leave("a"));
        assert!(!g.leave("a"), "once");
        assert!(g.leave("b"));
        assert!(g.leave("b"), "an empty group stays ended");
    }

    /// RTCP from an address is a sign of life of every member there, and
    /// of no other.
    #[test]
    fn rtcp_from_an_address_is_heard_from_its_members() {
        let mut g = group();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        g.members = HashMap::from([
            ("a".into(), ip("10.0.0.2")),
            ("b".into(), ip("10.0.0.2")),
            ("c".into(), ip("10.0.0.3")),
        ]);
        let heard = |from: &[IpAddr]| {
            let mut ids: Vec<String> = g.members_at(from).map(str::to_owned).collect();
            ids.sort();
            ids
        };
        assert_eq!(
            heard(&[ip("10.0.0.2")]),
            ["a", "b"],
            "both behind one address"
        );
        assert_eq!(heard(&[ip("10.0.0.3"), ip("10.0.0.9")]), ["c"]);
        assert!(heard(&[ip("10.0.0.9")]).is_empty(), "no member there");
        assert!(heard(&[]).is_empty());
    }
}

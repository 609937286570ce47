//! Viewers' RTCP over UDP, read as signs of life: a viewer that sends
//! neither a request nor RTCP for `session_timeout_s` is ended, so a task
//! per socket marks the viewers its RTCP comes from. A unicast viewer's
//! arrives on its server RTCP port, from its address; a multicast group's
//! on a socket that joined the group at each track's RTCP port (members
//! send their receiver reports to the group, RFC 3550 §6;
//! [`crate::multicast::hear`]), and marks every member of the group whose
//! RTSP connection comes from the address it was sent from (two members
//! behind one address, both).
//!
//! A datagram counts when it is a valid RTCP compound packet
//! ([`fjord_proto::rtcp::parse_compound`]); anything else, or from no
//! viewer, is let go. At most [`BATCH`] datagrams are read per wake, into
//! a buffer on the stack between waits (the task, which lives as long as
//! its viewer or group, keeps none), then one lock marks their senders.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Weak,
    time::Instant,
};

use super::State;
use crate::Server;

/// Whose RTCP a socket carries.
pub(super) enum Heard {
    /// Viewer session `id`, at `from`.
    Viewer { id: String, from: IpAddr },
    /// The members of stream `stream`'s group; `own`: the group's own
    /// RTCP socket, whose sender reports come back on multicast loopback.
    Group { stream: u64, own: SocketAddr },
}

/// Datagrams read per wake, at most.
const BATCH: usize = 32;

/// A datagram's bytes read, at most: RTCP past it is cut, so not valid.
const MAX_DATAGRAM: usize = 1500;

/// Starts reading `socket` for `heard`; `None` when there is no runtime
/// or the socket cannot be made non-blocking (the viewers then live on
/// their requests alone). Aborting the handle closes the socket.
pub(super) fn read(
    server: &Server,
    heard: Heard,
    socket: std::net::UdpSocket,
) -> Option<tokio::task::AbortHandle> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    socket.set_nonblocking(true).ok()?;
    let socket = tokio::net::UdpSocket::from_std(socket).ok()?;
    let weak = (server.live.server.get().cloned()).unwrap_or_default();
    Some(runtime.spawn(reader(weak, heard, socket)).abort_handle())
}

/// Reads `socket` while what it is for lives.
async fn reader(server: Weak<Server>, heard: Heard, socket: tokio::net::UdpSocket) {
    loop {
        if socket.readable().await.is_err() {
            return;
        }
        match batch(&server, &heard, &socket) {
            None => return,
            // More may wait: other tasks run first.
            Some(true) => tokio::task::yield_now().await,
            Some(false) => {}
        }
    }
}

/// Reads what `socket` holds, [`BATCH`] datagrams at most, and marks
/// their senders: whether it read that many; `None` once the task ends.
/// Not async, so that its buffers are on the stack, not in the task.
fn batch(server: &Weak<Server>, heard: &Heard, socket: &tokio::net::UdpSocket) -> Option<bool> {
    let mut from = [IpAddr::V4(Ipv4Addr::UNSPECIFIED); BATCH];
    let (mut n, mut read) = (0, 0);
    let mut buf = [0u8; MAX_DATAGRAM];
    while read < BATCH {
        match socket.try_recv_from(&mut buf) {
            Ok((len, src)) => {
                read += 1;
                match heard.sign(&buf[..len], src) {
                    Some(ip) if !from[..n].contains(&ip) => {
                        from[n] = ip;
                        n += 1;
                    }
                    _ => {}
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => return None,
        }
    }
    if n > 0 {
        let server = server.upgrade()?;
        let alive = heard.mark(&mut server.live.lock(), &from[..n], Instant::now());
        alive.then_some(())?;
    }
    Some(read == BATCH)
}

impl Heard {
    /// The address datagram `data` from `src` is a sign of life of: a
    /// compound RTCP packet, not the group's own.
    fn sign(&self, data: &[u8], src: SocketAddr) -> Option<IpAddr> {
        let ip = src.ip().to_canonical();
        let own = matches!(self, Heard::Group { own, .. }
            if (own.ip().to_canonical(), own.port()) == (ip, src.port()));
        let rtcp = fjord_proto::rtcp::starts_compound(data)
            && fjord_proto::rtcp::parse_compound(data).is_ok();
        (!own && rtcp).then_some(ip)
    }

    /// Marks the viewers at `from` alive at `now`; false once what this
    /// reads for is gone (the task ends).
    fn mark(&self, state: &mut State, from: &[IpAddr], now: Instant) -> bool {
        match self {
            Heard::Viewer { id, from: at } => {
                let Some(v) = state.viewers.get_mut(id) else {
                    return false;
                };
                if from.contains(at) {
                    v.last = now;
                }
                true
            }
            Heard::Group { stream, .. } => {
                let State {
                    viewers,
                    groups,
                    streams,
                    ..
                } = state;
                let members = groups.get(stream).into_iter();
                for id in members.flat_map(|g| g.members_at(from)) {
                    if let Some(v) = viewers.get_mut(id) {
                        v.last = now;
                    }
                }
                // The group's end aborts its task; the stream's covers a
                // group made but never kept.
                streams.contains_key(stream)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver report of no source (RFC 3550 §6.4.2), alone.
    const RR: [u8; 8] = [0x80, 201, 0, 1, 1, 2, 3, 4];

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// RTCP from anyone but the group's own socket is a sign of life of
    /// its address; anything else (RTP, a bad version, cut short) is not.
    #[test]
    fn rtcp_is_a_sign_of_life_but_the_groups_own() {
        let group = Heard::Group {
            stream: 1,
            own: addr("127.0.0.1:40001"),
        };
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(group.sign(&RR, addr("127.0.0.1:5005")), ip("127.0.0.1"));
        assert_eq!(group.sign(&RR, addr("127.0.0.1:40001")), None, "its own");
        assert_eq!(
            group.sign(&RR, addr("[::ffff:127.0.0.1]:40001")),
            None,
            "its own, v4-mapped"
        );
        assert_eq!(
            group.sign(&RR, addr("[::ffff:10.0.0.2]:5005")),
            ip("10.0.0.2"),
            "one address however it is written"
        );
        let from = addr("10.0.0.2:5005");
        let sign = |data: &[u8]| group.sign(data, from);
        assert_eq!(sign(&[0x80, 96, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4]), None, "RTP");
        assert_eq!(sign(&[0x40, 201, 0, 1, 1, 2, 3, 4]), None, "version 1");
        let sdes = [0x81, 202, 0, 2, 1, 2, 3, 4, 1, 1, b'a', 0];
        assert_eq!(sign(&sdes), None, "SDES first");
        assert_eq!(sign(&[0x81, 201, 0, 7, 1, 2, 3, 4]), None, "cut short");
        assert_eq!(
            sign(&[&RR[..], &[0xff; 3]].concat()),
            None,
            "trailing bytes"
        );
        assert_eq!(sign(&RR[..4]), None, "a header alone");
        assert_eq!(sign(&[]), None, "empty");
        let compound = [&RR[..], &sdes].concat();
        assert_eq!(sign(&compound), ip("10.0.0.2"), "RR and SDES");
        let viewer = Heard::Viewer {
            id: "live1".into(),
            from: "10.0.0.2".parse().unwrap(),
        };
        assert_eq!(
            viewer.sign(&RR, addr("127.0.0.1:40001")),
            ip("127.0.0.1"),
            "a unicast socket has no own to skip"
        );
    }

    /// A viewer's RTCP from its address marks it alive, from another not;
    /// once the viewer or the stream ended, the task ends.
    #[test]
    fn rtcp_marks_its_viewer_until_it_ends() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut state = State::default();
        let viewing = super::super::view::Viewing::new(1, 7);
        let later = viewing.last + std::time::Duration::from_secs(5);
        state.viewers.insert("live1".into(), viewing);
        let viewer = Heard::Viewer {
            id: "live1".into(),
            from: ip("10.0.0.2"),
        };
        assert!(viewer.mark(&mut state, &[ip("10.0.0.3")], later));
        assert!(state.viewers["live1"].last < later, "another address");
        assert!(viewer.mark(&mut state, &[ip("10.0.0.3"), ip("10.0.0.2")], later));
        assert_eq!(state.viewers["live1"].last, later);
        state.viewers.clear();
        assert!(
            !viewer.mark(&mut state, &[ip("10.0.0.2")], later),
            "it ended"
        );
        let group = Heard::Group {
            stream: 7,
            own: addr("127.0.0.1:40001"),
        };
        assert!(
            !group.mark(&mut state, &[ip("10.0.0.2")], later),
            "no stream 7"
        );
    }
}

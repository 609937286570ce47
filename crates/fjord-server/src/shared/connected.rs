//! Connected RTP sockets on the shared port. An unconnected socket names
//! its destination in every message, and the kernel looks the route up
//! for each `sendmsg` (`ip_route_output_flow`); a connected socket keeps
//! its route. So the first streams of a pair (`udp_connected_streams`)
//! each get a socket of their own, bound to the pair's RTP port
//! (`SO_REUSEPORT`: clients still see one `server_port=`) and connected to
//! the client's RTP port; later ones share their engine thread's socket.
//! The bound keeps the port's socket list short: the kernel scans it for
//! every datagram arriving there that no connected socket's client sent
//! (and for every bind to the port), and each socket is a descriptor.

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use socket2::Socket;

use crate::ports::bind_rtp_again;

/// A stream's place among its pair's connected sockets, given back when
/// the stream is dropped.
pub struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A place among `taken` (of at most `limit`), or none when all are taken.
fn take_place(taken: &Arc<AtomicUsize>, limit: usize) -> Option<Place> {
    taken
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < limit).then_some(n + 1)
        })
        .ok()
        .map(|_| Place(taken.clone()))
}

/// A socket on `local` (the pair's RTP address) connected to `peer`, with
/// its place among the pair's `taken` (of at most `limit`); `None` when
/// the places are taken.
pub fn connect(
    local: SocketAddr,
    peer: SocketAddr,
    taken: &Arc<AtomicUsize>,
    limit: usize,
) -> Option<io::Result<(Socket, Place)>> {
    let place = take_place(taken, limit)?;
    Some((|| {
        let s = bind_rtp_again(local)?;
        // Nobody reads the RTP port (as the shared sockets).
        let _ = s.set_recv_buffer_size(0);
        s.set_nonblocking(true)?;
        s.connect(&peer.into())?;
        Ok((s, place))
    })())
}

#[cfg(test)]
mod tests {
    use std::{net::UdpSocket, time::Duration};

    use super::*;

    /// Connected sockets share the port with an unconnected one; each
    /// stream's packets leave from the one port; its client's datagrams
    /// to the port reach its socket, a stranger's the unconnected one;
    /// places are bounded and come back when dropped.
    #[test]
    fn connected_sockets_share_the_port_and_are_bounded() {
        let shared = bind_rtp_again("127.0.0.1:0".parse().unwrap()).unwrap();
        let local = shared.local_addr().unwrap().as_socket().unwrap();
        let taken = Arc::new(AtomicUsize::new(0));
        let clients: Vec<UdpSocket> = (0..3)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let peer = |i: usize| clients[i].local_addr().unwrap();
        let (a, place_a) = connect(local, peer(0), &taken, 2).unwrap().unwrap();
        let (b, _place_b) = connect(local, peer(1), &taken, 2).unwrap().unwrap();
        assert!(connect(local, peer(2), &taken, 2).is_none(), "bounded");
        for (s, i) in [(&a, 0), (&b, 1)] {
            s.send(&[i as u8; 12]).unwrap();
            let mut buf = [0u8; 64];
            clients[i]
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let (n, from) = clients[i].recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (&[i as u8; 12][..], local));
        }
        // The kernel delivers by the sender: the client's own datagram to
        // its stream's socket, a stranger's to the unconnected one.
        let _ = a.set_recv_buffer_size(4096);
        let _ = shared.set_recv_buffer_size(4096);
        shared.set_nonblocking(true).unwrap();
        clients[0].send_to(b"mine", local).unwrap();
        clients[2].send_to(b"stranger", local).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut buf = [std::mem::MaybeUninit::new(0u8); 64];
        assert_eq!(a.recv(&mut buf).unwrap(), 4);
        assert_eq!(shared.recv(&mut buf).unwrap(), 8);
        drop((a, place_a));
        assert_eq!(taken.load(Ordering::Relaxed), 1);
        assert!(connect(local, peer(2), &taken, 2).is_some(), "given back");
    }
}

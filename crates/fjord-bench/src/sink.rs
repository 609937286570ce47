//! Where the benchmark's packets go.
//!
//! The sink models a NIC with segmentation offload that costs nothing: a
//! veth pair whose far end lives in a network namespace of its own, and
//! whose near end has `tc qdisc replace dev VETH root pfifo limit 0` and a
//! permanent neighbour entry for the far address. Every packet crosses the
//! whole UDP/IP stack of the sending host (socket, route, neighbour,
//! segmentation where the path asks for it) and is dropped when the qdisc
//! would queue it. The veth keeps MTU 1500: a 1456-byte payload + 12 bytes
//! of RTP + 28 of UDP/IPv4 is 1496 bytes, so nothing is fragmented.
//!
//! Making it needs root and iproute2 (`ip`, `tc`). Names carry the process
//! id and a counter, so concurrent benches do not collide; the namespace
//! (and with it the pair) is removed when the [`Sink`] drops, and on
//! Ctrl-C / SIGTERM by a handler installed on first use. When the sink
//! cannot be made the bench falls back to loopback, where a thread receives
//! and discards, and says so.

use std::{
    io,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket},
    process::Command,
    sync::{
        Arc, Mutex, Once,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use socket2::{Domain, Socket, Type};

/// (namespace, near-end veth) pairs this process made and has not removed
/// yet (for the signal handler).
static LIVE: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Which sink to try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkChoice {
    /// The veth + `pfifo limit 0` namespace, loopback when it cannot be made.
    Auto,
    /// Loopback with a discarding receiver.
    Loopback,
}

pub enum SinkKind {
    Veth(VethPair),
    Loopback {
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<u64>>,
    },
}

pub struct Sink {
    pub kind: SinkKind,
    dest_ip: Ipv4Addr,
    /// Loopback: the receiver's port (every session sends there).
    dest_port: Option<u16>,
    /// Why the namespace sink was not used, when it was not.
    pub fallback_reason: Option<String>,
}

impl Sink {
    /// Makes the sink asked for, falling back to loopback.
    pub fn create(choice: SinkChoice) -> io::Result<Self> {
        let reason = match choice {
            SinkChoice::Loopback => Some("loopback asked for".to_string()),
            SinkChoice::Auto => match make_veth() {
                Ok(sink) => return Ok(sink),
                Err(e) => Some(e),
            },
        };
        let mut sink = loopback()?;
        sink.fallback_reason = reason;
        Ok(sink)
    }

    pub fn is_veth(&self) -> bool {
        matches!(self.kind, SinkKind::Veth { .. })
    }

    /// One line saying which sink this is.
    pub fn describe(&self) -> String {
        match &self.kind {
            SinkKind::Veth(pair) => format!(
                "veth {} -> netns {} ({}), root qdisc pfifo limit 0, MTU 1500: \
                 packets cross the UDP/IP stack and are dropped at the qdisc",
                pair.veth, pair.netns, self.dest_ip
            ),
            SinkKind::Loopback { .. } => format!(
                "LOOPBACK (fallback: {}): a thread receives and discards; receive-side \
                 softirq work lands on the sender, so numbers are higher than into the veth sink",
                self.fallback_reason.as_deref().unwrap_or("asked for")
            ),
        }
    }

    pub fn short_name(&self) -> &'static str {
        match self.kind {
            SinkKind::Veth { .. } => "veth-pfifo0",
            SinkKind::Loopback { .. } => "loopback",
        }
    }

    /// Where session `i` sends.
    pub fn dest(&self, i: usize) -> SocketAddr {
        let port = self.dest_port.unwrap_or(5004 + 2 * (i as u16 % 2000));
        SocketAddr::V4(SocketAddrV4::new(self.dest_ip, port))
    }

    /// `n` UDP sockets, socket `i` connected to [`Sink::dest`]`(i)`.
    pub fn session_sockets(&self, n: usize) -> io::Result<Vec<Socket>> {
        (0..n)
            .map(|i| {
                let s = self.unconnected_socket()?;
                s.connect(&self.dest(i).into())?;
                Ok(s)
            })
            .collect()
    }

    /// An unbound-destination UDP socket (for `sendmsg` with an address).
    pub fn unconnected_socket(&self) -> io::Result<Socket> {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
        s.set_send_buffer_size(4 << 20)?;
        Ok(s)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // The veth pair removes itself.
        if let SinkKind::Loopback { stop, thread } = &mut self.kind {
            stop.store(true, Ordering::Relaxed);
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// A veth pair, MTU 1500, addressed as a /30: `veth` (address `local`) in
/// this namespace, `peer` (address `remote`, up) in the network namespace
/// `netns` made for it. Both are removed on drop, and on Ctrl-C / SIGTERM.
pub struct VethPair {
    pub netns: String,
    pub veth: String,
    pub peer: String,
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
}

/// The sink's addresses are /30s of this /16, inside RFC 2544's
/// benchmarking range 198.18.0.0/15.
pub const SINK_NET: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);

impl VethPair {
    /// Needs root and iproute2.
    pub fn create() -> Result<Self, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: the veth/netns sink needs CAP_NET_ADMIN".into());
        }
        install_handler();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // A /30 of 198.18.0.0/16 per (process, pair): the benchmarking
        // range of RFC 2544 (198.18.0.0/15), which no real network uses,
        // so the sink's routes never shadow one.
        let idx = (pid.wrapping_mul(7).wrapping_add(n)) % 16384;
        let base = u32::from(SINK_NET) + idx * 4;
        let pair = Self {
            netns: format!("fjbench{pid}x{n}"),
            veth: format!("fb{pid}x{n}a"),
            peer: format!("fb{pid}x{n}b"),
            local: Ipv4Addr::from(base + 1),
            remote: Ipv4Addr::from(base + 2),
        };
        ip(&["netns", "add", &pair.netns])?;
        LIVE.lock()
            .unwrap()
            .push((pair.netns.clone(), pair.veth.clone()));
        // From here on a failure removes what was made (the drop).
        let (netns, veth, peer) = (&pair.netns, &pair.veth, &pair.peer);
        let local_cidr = format!("{}/30", pair.local);
        let remote_cidr = format!("{}/30", pair.remote);
        ip(&[
            "link", "add", veth, "type", "veth", "peer", "name", peer, "netns", netns,
        ])?;
        ip(&["link", "set", veth, "mtu", "1500"])?;
        ip(&["addr", "add", &local_cidr, "dev", veth])?;
        ip(&["link", "set", veth, "up"])?;
        ip(&["-n", netns, "link", "set", peer, "up"])?;
        ip(&["-n", netns, "addr", "add", &remote_cidr, "dev", peer])?;
        Ok(pair)
    }

    /// `tc ARGS…` (e.g. a qdisc on `veth`).
    pub fn tc(&self, args: &[&str]) -> Result<(), String> {
        run("tc", args)
    }

    /// `tc -s qdisc show dev VETH`.
    pub fn qdisc_stats(&self) -> Result<String, String> {
        let out = Command::new("tc")
            .args(["-s", "qdisc", "show", "dev", &self.veth])
            .output()
            .map_err(|e| format!("tc: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `sh -c SCRIPT` inside the namespace (`ip netns exec` also
    /// mounts the namespace's own /sys).
    pub fn sh_in_netns(&self, script: &str) -> Result<(), String> {
        run("ip", &["netns", "exec", &self.netns, "sh", "-c", script])
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        remove_veth(&self.netns, &self.veth);
        LIVE.lock().unwrap().retain(|(n, _)| *n != self.netns);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn remove_veth(netns: &str, veth: &str) {
    // Deleting the namespace deletes the far end, and with it the pair.
    let _ = ip(&["netns", "del", netns]);
    let _ = ip(&["link", "del", veth]);
}

fn install_handler() {
    HANDLER.call_once(|| {
        // Another handler may already be installed (then that one owns
        // Ctrl-C, and the guards still clean up on a normal exit).
        let _ = ctrlc::set_handler(|| {
            let live = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
            // The link too: a thread still inside the namespace (a
            // receiver) keeps it, and the pair, alive until exit.
            for (netns, veth) in live {
                remove_veth(&netns, &veth);
            }
            eprintln!("fjord bench: interrupted; sink namespace removed");
            std::process::exit(130);
        });
    });
}

fn make_veth() -> Result<Sink, String> {
    let pair = VethPair::create()?;
    let (local, remote) = (pair.local, pair.remote);
    let veth = pair.veth.clone();
    // From here on a failure removes the pair (the sink's drop).
    let sink = Sink {
        kind: SinkKind::Veth(pair),
        dest_ip: remote,
        dest_port: None,
        fallback_reason: None,
    };
    let remote_s = remote.to_string();
    run(
        "tc",
        &[
            "qdisc", "replace", "dev", &veth, "root", "pfifo", "limit", "0",
        ],
    )?;
    ip(&[
        "neigh",
        "replace",
        &remote_s,
        "lladdr",
        "02:00:5e:77:00:02",
        "dev",
        &veth,
        "nud",
        "permanent",
    ])?;
    // The route appears with the address; check a datagram leaves.
    let probe = UdpSocket::bind((local, 0)).map_err(|e| format!("bind {local}: {e}"))?;
    probe
        .send_to(&[0u8; 16], (remote, 9))
        .map_err(|e| format!("probe send into the sink: {e}"))?;
    Ok(sink)
}

fn loopback() -> io::Result<Sink> {
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    socket2::SockRef::from(&rx).set_recv_buffer_size(8 << 20)?;
    rx.set_read_timeout(Some(Duration::from_millis(50)))?;
    let port = rx.local_addr()?.port();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("bench-sink".into())
        .spawn(move || {
            let mut buf = vec![0u8; 65536];
            let mut got = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                if rx.recv(&mut buf).is_ok() {
                    got += 1;
                }
            }
            got
        })?;
    Ok(Sink {
        kind: SinkKind::Loopback {
            stop,
            thread: Some(thread),
        },
        dest_ip: Ipv4Addr::LOCALHOST,
        dest_port: Some(port),
        fallback_reason: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_sink_accepts_datagrams() {
        let sink = Sink::create(SinkChoice::Loopback).unwrap();
        assert!(!sink.is_veth());
        assert!(sink.describe().contains("LOOPBACK"));
        let socks = sink.session_sockets(3).unwrap();
        for s in &socks {
            s.send(b"hello").unwrap();
        }
    }

    /// As root: the namespace sink is made, swallows datagrams, and leaves
    /// nothing behind.
    #[test]
    fn veth_sink_is_made_and_removed() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: not root");
            return;
        }
        let sink = Sink::create(SinkChoice::Auto).unwrap();
        let SinkKind::Veth(pair) = &sink.kind else {
            eprintln!("skipped: {}", sink.describe());
            return;
        };
        let (netns, veth) = (pair.netns.clone(), pair.veth.clone());
        // RFC 2544's benchmarking range, 198.18.0.0/15.
        for a in [pair.local, pair.remote] {
            assert_eq!(
                u32::from(a) >> 17,
                u32::from(Ipv4Addr::new(198, 18, 0, 0)) >> 17,
                "{a}"
            );
        }
        let socks = sink.session_sockets(2).unwrap();
        for _ in 0..100 {
            socks[0].send(&[0u8; 1468]).unwrap();
        }
        drop(socks);
        drop(sink);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&netns));
        let link = Command::new("ip")
            .args(["link", "show", &veth])
            .output()
            .unwrap();
        assert!(!link.status.success(), "{veth} still there");
    }
}

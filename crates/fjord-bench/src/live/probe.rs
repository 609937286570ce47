//! What `bench live` measures beside the load: the publisher's tap and the
//! probe viewers (latency), and the server's resident memory.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    net::UdpSocket,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::Context;
use fjord_client::{
    RtspClient, bind_pair,
    recv::{RecvBatch, receive_options},
};

/// Receive buffer of the tap and the probes: seconds of the stream.
const RCVBUF: usize = 16 << 20;

/// A packet socket on the loopback interface that sees the publisher's
/// RTP on its way to the server: UDP from ports `ports` (the publisher's
/// client ports, `-min_port`/`-max_port`), IPv4, filtered in the kernel.
/// Its kernel timestamps are when each packet entered the server's host.
pub struct Tap {
    fd: OwnedFd,
    pub ports: (u16, u16),
}

impl Tap {
    /// Needs CAP_NET_RAW.
    pub fn open(ports: (u16, u16)) -> anyhow::Result<Tap> {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: a plain socket call; the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(proto)) };
        anyhow::ensure!(
            raw >= 0,
            "packet socket (needs CAP_NET_RAW): {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `raw` is a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        attach_filter(fd.as_raw_fd(), ports)?;
        // SAFETY: a zeroed sockaddr_ll is valid; bound to `lo` by index.
        let bound = unsafe {
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = libc::if_nametoindex(c"lo".as_ptr()) as i32;
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        anyhow::ensure!(
            bound == 0,
            "binding to lo: {}",
            std::io::Error::last_os_error()
        );
        let o = receive_options(fd.as_raw_fd(), RCVBUF, false);
        anyhow::ensure!(o.timestamps, "no kernel timestamps (SO_TIMESTAMPNS)");
        Ok(Tap { fd, ports })
    }
}

/// A classic BPF program passing IPv4 UDP from source ports `lo..=hi`
/// (unfragmented); hand-written, as no crate here compiles pcap filters
/// without libpcap.
fn attach_filter(fd: i32, (lo, hi): (u16, u16)) -> anyhow::Result<()> {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    use libc::{
        BPF_ABS, BPF_B, BPF_H, BPF_IND, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K,
        BPF_LD, BPF_LDX, BPF_MSH, BPF_RET,
    };
    let prog = [
        op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 9),        // 0: IP protocol
        op(BPF_JMP | BPF_JEQ | BPF_K, 0, 6, 17),      // 1: UDP, else drop
        op(BPF_LD | BPF_H | BPF_ABS, 0, 0, 6),        // 2: flags, fragment
        op(BPF_JMP | BPF_JSET | BPF_K, 4, 0, 0x1fff), // 3: a fragment: drop
        op(BPF_LDX | BPF_B | BPF_MSH, 0, 0, 0),       // 4: x = IP header length
        op(BPF_LD | BPF_H | BPF_IND, 0, 0, 0),        // 5: UDP source port
        op(BPF_JMP | BPF_JGE | BPF_K, 0, 1, u32::from(lo)), // 6: below: drop
        op(BPF_JMP | BPF_JGT | BPF_K, 0, 1, u32::from(hi)), // 7: above: drop, else 9
        op(BPF_RET | BPF_K, 0, 0, 0),                 // 8: drop
        op(BPF_RET | BPF_K, 0, 0, 65_535),            // 9: accept
    ];
    // Jumps count from the next instruction.
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: a valid program and its length; the kernel copies it and
    // never writes through the pointer.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    anyhow::ensure!(
        r == 0,
        "attaching the filter: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// A probe's datagram is the RTP packet.
fn whole(rtp: &[u8]) -> Option<&[u8]> {
    Some(rtp)
}

/// The RTP packet inside the IPv4 UDP datagram `ip`.
fn rtp_of(ip: &[u8]) -> Option<&[u8]> {
    let ihl = 4 * usize::from(ip.first()? & 0x0f);
    ip.get(ihl + 8..)
}

/// The RTP payload of `packet` (after CSRCs and the extension), hashed.
pub(super) fn payload_hash(packet: &[u8]) -> Option<u64> {
    let first = *packet.first()?;
    let mut at = 12 + 4 * usize::from(first & 0x0f);
    if first & 0x10 != 0 {
        let words = packet.get(at + 2..at + 4)?;
        at += 4 + 4 * usize::from(u16::from_be_bytes([words[0], words[1]]));
    }
    let payload = packet.get(at..).filter(|p| !p.is_empty())?;
    let mut h = DefaultHasher::new();
    payload.hash(&mut h);
    Some(h.finish())
}

/// A viewer of the video track of `url` whose RTP arrives on `rtp`.
fn probe_viewer(url: &str) -> anyhow::Result<(RtspClient, UdpSocket)> {
    let mut c = RtspClient::connect(url)?;
    c.set_timeout(Duration::from_secs(10));
    let d = c.describe()?;
    let medias = d.sdp.lines().filter(|l| l.starts_with("m="));
    let video = medias.take_while(|l| !l.starts_with("m=video")).count();
    let track = d.track_urls.get(video).context("no video track")?.clone();
    let (rtp, _rtcp) = bind_pair("127.0.0.1".parse()?)?;
    probe_socket(&rtp);
    let p = rtp.local_addr()?.port();
    let transport = format!("RTP/AVP;unicast;client_port={p}-{}", p + 1);
    let r = c.request("SETUP", &track, &[("Transport", &transport)], &[])?;
    anyhow::ensure!(r.is_success(), "SETUP: {}", r.status);
    let session = r.header("Session").context("no Session")?;
    let session = session.split(';').next().unwrap_or_default().to_string();
    let r = c.request("PLAY", &d.aggregate_url, &[("Session", &session)], &[])?;
    anyhow::ensure!(r.is_success(), "PLAY: {}", r.status);
    Ok((c, rtp))
}

/// A packet seen: its payload's hash, its RTP payload type, its kernel
/// arrival time.
type Seen = (u64, u8, i64);

/// Every packet `fd` holds now (`inner` finds the RTP in it).
fn drain(fd: i32, inner: fn(&[u8]) -> Option<&[u8]>, batch: &mut RecvBatch, out: &mut Vec<Seen>) {
    while let Ok(n) = batch.recv(fd) {
        if n == 0 {
            return;
        }
        for i in 0..n {
            let m = batch.message(i);
            let Some(rtp) = inner(m.data) else { continue };
            if let (Some(h), Some(t)) = (payload_hash(rtp), m.timestamp) {
                out.push((h, rtp[1] & 0x7f, t));
            }
        }
    }
}

/// After `delay`, [`super::PROBES`] viewers of `url` for `run`: how much
/// later each got a video packet than the tap saw it go to the server.
/// Packets the publisher sent before the probes played (the backlog a
/// joining viewer gets at once) do not count. Returns p50, p99 and max in
/// ms, and how many packets were matched.
pub fn latency(
    tap: Tap,
    url: &str,
    delay: Duration,
    run: Duration,
) -> anyhow::Result<(f64, f64, f64, usize)> {
    let viewers = || {
        let probes = (0..super::PROBES).map(|_| probe_viewer(url));
        probes.collect::<anyhow::Result<Vec<_>>>()
    };
    latency_at(tap, viewers, delay, run)
}

/// [`latency`] of the probe sockets `probes` makes after `delay` (with
/// what must live while they receive: their RTSP sessions).
pub fn latency_at<T>(
    tap: Tap,
    probes: impl FnOnce() -> anyhow::Result<Vec<(T, UdpSocket)>>,
    delay: Duration,
    run: Duration,
) -> anyhow::Result<(f64, f64, f64, usize)> {
    let (mut batch, mut sent, mut got) = (RecvBatch::new(), vec![], vec![]);
    let (tap, ip) = (tap.fd.as_raw_fd(), rtp_of as fn(&[u8]) -> Option<&[u8]>);
    let wait = Instant::now() + delay;
    while Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(5));
        drain(tap, ip, &mut batch, &mut sent);
    }
    let played = realtime_ns();
    let probes = probes()?;
    let end = Instant::now() + run;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
        drain(tap, ip, &mut batch, &mut sent);
        for (_, rtp) in &probes {
            drain(rtp.as_raw_fd(), whole, &mut batch, &mut got);
        }
    }
    drain(tap, ip, &mut batch, &mut sent);
    let mut ns = matched(&sent, &got, played);
    anyhow::ensure!(
        !ns.is_empty(),
        "no probe packet matched the publisher's ({} arrived)",
        got.len()
    );
    ns.sort_unstable();
    let q = |f: f64| ns[((ns.len() - 1) as f64 * f).round() as usize] as f64 / 1e6;
    Ok((q(0.5), q(0.99), q(1.0), ns.len()))
}

/// A probe socket as [`latency_at`] reads it: its receive buffer seconds
/// of the stream, kernel timestamps on.
pub fn probe_socket(rtp: &UdpSocket) {
    receive_options(rtp.as_raw_fd(), RCVBUF, false);
}

/// Each probe packet's arrival less the tap's last sighting of the same
/// payload before it (a payload may recur: a tone's AAC frames, a still
/// region's slices), of the probes' payload type, since `since`.
fn matched(sent: &[Seen], got: &[Seen], since: i64) -> Vec<i64> {
    let pt = got.first().map(|g| g.1);
    let mut at: HashMap<u64, Vec<i64>> = HashMap::new();
    for &(h, _, t) in sent.iter().filter(|s| s.2 >= since && Some(s.1) == pt) {
        at.entry(h).or_default().push(t);
    }
    (got.iter())
        .filter_map(|&(h, _, t)| {
            let times = at.get(&h)?;
            let before = times.partition_point(|&s| s <= t);
            Some(t - times[before.checked_sub(1)?])
        })
        .collect()
}

fn realtime_ns() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_nanos() as i64)
}

/// Anonymous resident memory of process `pid` (its heap and stacks, not
/// the pages of files it maps, which VOD titles are), KiB; 0 if unreadable.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The highest anonymous resident memory of a process, read every 100 ms.
pub struct RssPeak {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl RssPeak {
    pub fn start(pid: u32) -> RssPeak {
        let (stop, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let thread = std::thread::spawn({
            let (stop, peak) = (stop.clone(), peak.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        RssPeak { stop, peak, thread }
    }

    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe packet is matched to the tap's last sighting before it, of
    /// its payload type, since the probes played.
    #[test]
    fn a_probe_packet_matches_the_last_sighting_before_it() {
        let sent = [
            (1, 96, 50),
            (1, 96, 100),
            (1, 96, 300),
            (2, 97, 290),
            (3, 96, 400),
        ];
        let got = [
            (1, 96, 310),
            (2, 96, 320),
            (1, 96, 150),
            (3, 96, 390),
            (4, 96, 500),
        ];
        assert_eq!(matched(&sent, &got, 60), [10, 50]);
        assert_eq!(matched(&sent, &got, 0), [10, 50]);
        assert_eq!(matched(&sent, &got, 200), [10]);
        assert!(matched(&sent, &[], 0).is_empty());
    }

    /// The payload is what is hashed: headers, CSRCs and extensions apart.
    #[test]
    fn the_payload_is_hashed_whatever_the_header() {
        let plain = [0x80, 96, 0, 1, 0, 0, 0, 9, 1, 2, 3, 4, 0x65, 7];
        let mut other = plain;
        other[2..12].copy_from_slice(&[9, 9, 1, 1, 1, 1, 5, 5, 5, 5]);
        let with_csrc = [
            &[0x81, 96, 0, 1, 0, 0, 0, 9, 1, 2, 3, 4, 0, 0, 0, 7][..],
            &[0x65, 7],
        ]
        .concat();
        let with_ext = [
            &[
                0x90, 96, 0, 1, 0, 0, 0, 9, 1, 2, 3, 4, 0xbe, 0xde, 0, 1, 1, 2, 3, 4,
            ][..],
            &[0x65, 7],
        ]
        .concat();
        let h = payload_hash(&plain).unwrap();
        assert_eq!(payload_hash(&other), Some(h));
        assert_eq!(payload_hash(&with_csrc), Some(h));
        assert_eq!(payload_hash(&with_ext), Some(h));
        assert_ne!(
            payload_hash(&[0x80, 96, 0, 1, 0, 0, 0, 9, 1, 2, 3, 4, 0x65, 8]),
            Some(h)
        );
        assert_eq!(payload_hash(&plain[..12]), None);
        assert_eq!(payload_hash(&with_ext[..14]), None);
        assert_eq!(payload_hash(&[]), None);
    }
}

//! What `bench live` measures beside the load: the publisher's tap and the
//! probe viewers (latency), and the server's resident memory.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    net::UdpSocket,
    os::fd::AsRawFd,
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

/// The socket ffmpeg's `tee` writes each video packet to.
pub struct Tap(UdpSocket);

impl Tap {
    pub fn bind() -> anyhow::Result<Tap> {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        let o = receive_options(s.as_raw_fd(), RCVBUF, false);
        anyhow::ensure!(o.timestamps, "no kernel timestamps (SO_TIMESTAMPNS)");
        Ok(Tap(s))
    }

    pub fn port(&self) -> u16 {
        self.0.local_addr().map_or(0, |a| a.port())
    }
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
    receive_options(rtp.as_raw_fd(), RCVBUF, false);
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

/// Every packet `socket` holds now: its payload's hash and kernel time.
fn drain(socket: &UdpSocket, batch: &mut RecvBatch, out: &mut Vec<(u64, i64)>) {
    while let Ok(n) = batch.recv(socket.as_raw_fd()) {
        if n == 0 {
            return;
        }
        for i in 0..n {
            let m = batch.message(i);
            if let (Some(h), Some(t)) = (payload_hash(m.data), m.timestamp) {
                out.push((h, t));
            }
        }
    }
}

/// After `delay`, [`super::PROBES`] viewers of `url` for `run`: how much
/// later each got a video packet than the tap. Returns p50, p99 and max
/// in ms, and how many packets were matched.
pub fn latency(
    tap: Tap,
    url: &str,
    delay: Duration,
    run: Duration,
) -> anyhow::Result<(f64, f64, f64, usize)> {
    std::thread::sleep(delay);
    let probes = (0..super::PROBES)
        .map(|_| probe_viewer(url))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (mut batch, mut sent, mut got) = (RecvBatch::new(), vec![], vec![]);
    let end = Instant::now() + run;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
        drain(&tap.0, &mut batch, &mut sent);
        for (_, rtp) in &probes {
            drain(rtp, &mut batch, &mut got);
        }
    }
    drain(&tap.0, &mut batch, &mut sent);
    let at: HashMap<u64, i64> = sent.into_iter().collect();
    let mut ns: Vec<i64> = (got.iter())
        .filter_map(|(h, t)| Some(t - at.get(h)?))
        .collect();
    anyhow::ensure!(
        !ns.is_empty(),
        "no probe packet matched the publisher's ({} arrived)",
        got.len()
    );
    ns.sort_unstable();
    let q = |f: f64| ns[((ns.len() - 1) as f64 * f).round() as usize] as f64 / 1e6;
    Ok((q(0.5), q(0.99), q(1.0), ns.len()))
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

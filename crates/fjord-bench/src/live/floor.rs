//! The kernel's floor of a live fan-out, beside fjord's live row: a relay
//! with no server in it. ffmpeg publishes the source's video as plain RTP
//! (`-f rtp`, from a port the tap watches) to a socket here. One thread,
//! pinned (and under SCHED_FIFO) as the servers are, waits [`GATHER`]
//! after a packet arrives, as fjord's engine does, reads what came, and
//! sends it unchanged to each of N + [`PROBES`] connected sockets, one
//! `sendmsg` with `UDP_SEGMENT` per run of equal-sized packets. Plain UDP
//! receivers on the load CPU read them; the probes, sent to last, give the
//! latency as fjord's row measures it.
//!
//! So the floor is what one thread of this kernel spends to hand each
//! frame to N loopback receivers (on loopback the sender pays each
//! delivery): fjord's latency and CPU above it are fjord's own. Its
//! packets are the video's only (the probes match video in every row).

use std::{
    net::UdpSocket,
    os::fd::{AsRawFd, RawFd},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::Context;
use fjord_client::recv::{BATCH, RecvBatch};
use fjord_engine::datapath::cmsg::{MAX_SEGMENTED_BYTES, MAX_SEGMENTS, send_segmented};

use super::{LiveConfig, PROBES, Row, probe};
use crate::{
    capacity::pin_current_thread,
    cpu::ThreadCpu,
    peers::{
        ServerChild,
        floor::{make_realtime, receive, sockets, transient},
    },
};

/// How long the relay waits after a packet for those right behind it:
/// fjord's engine's live gather (`fjord-engine` `live::GATHER`).
const GATHER: Duration = Duration::from_micros(500);
/// From the publisher's start to the measured window.
const WARM_UP: Duration = Duration::from_secs(2);

/// The floor's row at `n` viewers: the relay on `cfg.cpu`, the publisher
/// and the receivers on `load_cpu`.
pub fn row(source: &Path, n: usize, cfg: &LiveConfig, load_cpu: usize) -> anyhow::Result<Row> {
    let input = UdpSocket::bind("127.0.0.1:0").context("binding the relay's input")?;
    let tap = probe::Tap::open(super::publisher_ports()?)?;
    let (mut rx, tx) = sockets(n + PROBES, false)?;
    let probes = rx.split_off(n);
    probes.iter().for_each(probe::probe_socket);
    let publisher = rtp_publisher(source, input.local_addr()?.port(), tap.ports.0);
    let (_push, _) = ServerChild::launch(publisher, load_cpu, false)?;
    let seconds = Duration::from_secs_f64(cfg.seconds);
    let warm = Instant::now() + WARM_UP;
    let stop = warm + seconds;
    let (cpu, realtime) = (cfg.cpu, cfg.realtime);
    let relay = std::thread::spawn(move || relay(&input, &tx, (cpu, realtime), (warm, stop)));
    let receivers = std::thread::spawn(move || {
        pin_current_thread(load_cpu);
        receive(&rx, false, warm, stop)
    });
    let viewers = move || Ok(probes.into_iter().map(|p| ((), p)).collect());
    let latency = probe::latency_at(tap, viewers, WARM_UP, seconds);
    let (cpu, sent) = relay
        .join()
        .map_err(|_| anyhow::anyhow!("relay panicked"))??;
    let (got, _) = (receivers.join()).map_err(|_| anyhow::anyhow!("receivers panicked"))??;
    let sent = sent * n as u64 / (n + PROBES) as u64;
    let cpu_s = cpu.as_secs_f64();
    Ok(Row {
        playing: n,
        packets: got,
        loss_percent: 100.0 * sent.saturating_sub(got) as f64 / sent.max(1) as f64,
        cpu_s,
        window_s: seconds.as_secs_f64(),
        us_per_packet: cpu_s * 1e6 / got.max(1) as f64,
        latency: Some(latency?),
        ..Row::default()
    })
}

/// ffmpeg publishing `source`'s video in real time, looped, as RTP to
/// `port` from local port `from`.
fn rtp_publisher(source: &Path, port: u16, from: u16) -> Command {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-nostdin", "-loglevel", "warning"])
        .args(["-re", "-stream_loop", "-1", "-i"])
        .arg(source)
        .args(["-map", "0:v", "-c", "copy", "-f", "rtp"])
        .arg(format!("rtp://127.0.0.1:{port}?localrtpport={from}"));
    cmd
}

/// The relay until `stop`: its CPU from `warm` on, and the packets it
/// sent since.
fn relay(
    input: &UdpSocket,
    viewers: &[UdpSocket],
    (cpu, realtime): (usize, bool),
    (warm, stop): (Instant, Instant),
) -> anyhow::Result<(Duration, u64)> {
    pin_current_thread(cpu);
    if realtime {
        make_realtime()?;
    }
    let (mut batch, mut buf, mut sizes) = (RecvBatch::new(), Vec::new(), Vec::new());
    let (mut sent, mut mark) = (0u64, None);
    while Instant::now() < stop {
        if !readable(input.as_raw_fd(), 20)? {
            continue;
        }
        std::thread::sleep(GATHER);
        buf.clear();
        sizes.clear();
        loop {
            let n = batch.recv(input.as_raw_fd())?;
            for i in 0..n {
                let data = batch.message(i).data;
                buf.extend_from_slice(data);
                sizes.push(data.len());
            }
            if n < BATCH {
                break;
            }
        }
        if mark.is_none() && Instant::now() >= warm {
            mark = Some((ThreadCpu::now(), sent));
        }
        for v in viewers {
            send_runs(v.as_raw_fd(), &buf, &sizes)?;
        }
        sent += (sizes.len() * viewers.len()) as u64;
    }
    let (cpu0, sent0) = mark.context("no packet came from the publisher")?;
    Ok((ThreadCpu::now().since(cpu0).total(), sent - sent0))
}

/// Whether `fd` has a datagram within `ms`.
fn readable(fd: RawFd, ms: i32) -> anyhow::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    match unsafe { libc::poll(&mut p, 1, ms) } {
        r if r < 0 => {
            let e = std::io::Error::last_os_error();
            anyhow::ensure!(e.kind() == std::io::ErrorKind::Interrupted, "poll: {e}");
            Ok(false)
        }
        r => Ok(r > 0),
    }
}

/// `buf`'s packets (of `sizes`) to `fd`: a `UDP_SEGMENT` send per run of
/// equal sizes, a shorter one allowed last, as the engine groups them.
fn send_runs(fd: RawFd, buf: &[u8], sizes: &[usize]) -> anyhow::Result<()> {
    let (mut i, mut at) = (0, 0);
    while i < sizes.len() {
        let seg = sizes[i];
        let (mut j, mut len) = (i + 1, seg);
        while j < sizes.len()
            && j - i < MAX_SEGMENTS
            && sizes[j] <= seg
            && len + sizes[j] <= MAX_SEGMENTED_BYTES
        {
            len += sizes[j];
            j += 1;
            if sizes[j - 1] < seg {
                break;
            }
        }
        let iov = libc::iovec {
            iov_base: buf[at..].as_ptr().cast_mut().cast(),
            iov_len: len,
        };
        if let Err(e) = send_segmented(fd, &[iov], seg as u16, 0) {
            transient(e)?;
        }
        (i, at) = (j, at + len);
    }
    Ok(())
}

//! The report of `fjord bench peers`: the markdown table of medians with
//! how it was measured, fjord against the kernel floor at its measured
//! burst, and the CSV of every run.

use super::{Peer, PeerResult, PeersReport, REALTIME_PRIORITY, burst, curve, floor};

/// The CSV of every run.
pub fn csv(r: &PeersReport) -> String {
    let mut s = String::from(
        "server,version,transport,rep,sessions,playing,packets,bytes,cpu_s,wait_s,window_s,us_per_packet,lost,loss_percent,late,late_percent,max_late_ms,mbps_per_session,setup_s,packets_per_send,error\n",
    );
    let transport = if r.config.tcp { "tcp" } else { "udp" };
    for p in &r.results {
        for x in &p.runs {
            s.push_str(&format!(
                "{},{},{},{},{},{},{},{},{:.4},{:.4},{:.3},{:.4},{},{:.5},{},{:.5},{:.3},{:.4},{:.3},{},{}\n",
                p.peer.name(),
                p.version.replace(',', ";"),
                transport,
                x.rep + 1,
                x.sessions,
                x.playing,
                x.packets,
                x.bytes,
                x.cpu_s,
                x.wait_s,
                x.window_s,
                x.us_per_packet,
                x.lost,
                x.loss_percent,
                x.late,
                x.late_percent,
                x.max_late_ms,
                x.mbps_per_session,
                x.setup_s,
                x.burst.map_or(String::new(), |b| format!("{b:.3}")),
                x.error.as_deref().unwrap_or("").replace([',', '\n'], ";")
            ));
        }
    }
    s
}

/// The machine, for the report: CPU model, CPUs, kernel.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    // Online CPUs, not this thread's affinity (the bench pins itself).
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    format!("{model}, {cpus} CPUs, Linux {kernel}")
}

/// fjord against the kernel floor at its measured burst.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FjordFloor {
    /// fjord's packets per send, median over its runs.
    pub burst: f64,
    /// The measured floor burst nearest it, and fjord's ratio to that row.
    pub nearest: usize,
    pub x_nearest: f64,
    /// The floor interpolated at fjord's burst, and the ratio to it.
    pub at: floor::FloorAt,
    pub x_at: f64,
}

impl FjordFloor {
    /// The "× kernel floor" cell of fjord's row.
    pub fn describe(&self) -> String {
        let (b, at) = (self.burst, self.at);
        let from = if at.lo != at.hi {
            format!("interpolated from B={} and B={}", at.lo, at.hi)
        } else if (b - at.lo as f64).abs() < 0.05 {
            format!("measured at B={}", at.lo)
        } else {
            format!("taken as B={}'s, the nearest measured", at.lo)
        };
        format!(
            "{:.1}× (measured {b:.1} packets/send; floor at {b:.1} {from}); {:.1}× the nearest row, B={}",
            self.x_at, self.x_nearest, self.nearest
        )
    }
}

/// The median CPU per packet of `peer`'s good runs.
fn median_us(r: &PeersReport, peer: Peer) -> Option<f64> {
    r.results
        .iter()
        .find(|p| p.peer == peer)
        .and_then(PeerResult::us_per_packet)
        .map(|s| s.median)
}

/// fjord's burst, if measured.
pub fn fjord_burst(r: &PeersReport) -> Option<f64> {
    r.results
        .iter()
        .find(|p| p.peer == Peer::Fjord)
        .and_then(PeerResult::burst)
}

/// fjord's CPU per packet over the floor's at its measured burst; none
/// when the burst, fjord's runs or every floor row are missing. A floor
/// row that lost packets fell behind the load (its sender could not keep
/// up): it is no floor, and not compared with.
pub fn fjord_floor(r: &PeersReport) -> Option<FjordFloor> {
    let kept = |p: &PeerResult| {
        p.loss_percent()
            .is_some_and(|l| l <= curve::MAX_LOSS_PERCENT)
    };
    let rows: Vec<(usize, f64)> = r
        .results
        .iter()
        .filter(|p| kept(p))
        .filter_map(|p| match p.peer {
            Peer::Floor(b) => Some((b, median_us(r, p.peer)?)),
            _ => None,
        })
        .collect();
    let burst = fjord_burst(r)?;
    let fjord = median_us(r, Peer::Fjord)?;
    let bursts: Vec<usize> = rows.iter().map(|&(b, _)| b).collect();
    let nearest = floor::nearest_burst(&bursts, burst)?;
    let near_us = rows.iter().find(|&&(b, _)| b == nearest)?.1;
    let at = floor::floor_at(&rows, burst)?;
    Some(FjordFloor {
        burst,
        nearest,
        x_nearest: floor::times_floor(fjord, near_us)?,
        at,
        x_at: floor::times_floor(fjord, at.us)?,
    })
}

/// How the floor was measured and which of its rows fjord is held to.
fn floor_note(r: &PeersReport) -> Option<String> {
    let bursts: Vec<String> = r
        .results
        .iter()
        .filter_map(|p| match p.peer {
            Peer::Floor(b) => Some(b.to_string()),
            _ => None,
        })
        .collect();
    if bursts.is_empty() {
        return None;
    }
    let pps = floor::session_pps();
    let grid_ms = floor::GRID_NS as f64 / 1e6;
    let fjord = match fjord_burst(r) {
        Some(b) => format!("{b:.2} packets per send (median over its runs)"),
        None => "not read (see above)".into(),
    };
    Some(format!(
        "Kernel floor: no server; a thread pinned to CPU {} sends prebuilt RTP packets (12-byte \
         header + 1316 bytes of the title, from a ring of them) on a connected UDP socket per \
         session to {} UDP receivers on CPU {} (epoll at most every 1 ms, recvmmsg of 32, kernel \
         timestamps, 4 MiB buffers: as `fjord load`), {pps:.1} packets/s per session, sessions \
         phased evenly and each a millisecond of the title behind the one before (as the \
         receivers start the servers' sessions a millisecond apart), in bursts of B per session per send (one `sendmsg` with UDP_SEGMENT per \
         burst; a `send` per packet for B = 1), waking on a {grid_ms} ms grid as fjord's \
         engine does at its default burst limit (the bursts due within a step leave together). CPU is that thread's (CLOCK_THREAD_CPUTIME_ID) over {:.1} s after \
         0.5 s of warm-up, per packet the receivers counted. Bursts measured: {}. fjord's burst \
         is measured: its UDP data path's packets over its send system calls \
         (`{}` / `{}` from its `/metrics`, summed over engine threads, read at the end of each \
         run): {fjord}. Its × kernel floor is against the floor interpolated at that burst \
         (linear in log B between the measured bursts around it; outside them, the nearest) and \
         against the measured row nearest it.",
        r.config.cpu,
        r.config.sessions,
        r.load_cpu,
        r.config.seconds,
        bursts.join(", "),
        burst::PACKETS,
        burst::SEND_CALLS,
    ))
}

/// The markdown report: the table of medians, then how it was measured.
pub fn markdown(r: &PeersReport, command: &str, machine_note: &str) -> String {
    let c = &r.config;
    let fjord = r
        .results
        .iter()
        .find(|p| p.peer == Peer::Fjord)
        .and_then(PeerResult::us_per_packet)
        .map(|s| s.median);
    let mut md = String::new();
    md.push_str("# fjord bench peers: server CPU per packet, fjord and its open-source peers\n\n");
    md.push_str(&format!("Command: `{command}`\n\n"));
    md.push_str(&format!("Machine: {machine_note}\n\n"));
    md.push_str(&format!(
        "{} sessions over {} to 127.0.0.1 for {} s per run, {} runs per server (interleaved), medians; \
         µs CPU/packet with the 95 % bootstrap interval of its median.\n\n",
        c.sessions,
        match (c.tcp, c.gro) {
            (true, _) => "TCP (interleaved)",
            (false, false) => "UDP to plain receivers (no UDP GRO: a datagram per packet, as players)",
            (false, true) => "UDP to receivers with UDP GRO (`--gro`: cheaper for the server than players)",
        },
        c.seconds,
        c.reps
    ));
    let x_floor = fjord_floor(r);
    md.push_str("| server | sessions | packets | bytes/packet | CPU s | % of a core | waited for CPU s | µs CPU/packet | ratio to fjord | Mbit/s per session | loss | late >2 ms | × kernel floor |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for p in &r.results {
        if p.skipped.is_some() {
            continue;
        }
        let good = p.good().count();
        let Some(us) = p.us_per_packet() else {
            md.push_str(&format!(
                "| {} | {} | no run counted | | | | | | | | | | |\n",
                p.version, c.sessions
            ));
            continue;
        };
        let ratio = match fjord {
            Some(f) if f > 0.0 => format!("{:.1}×", us.median / f),
            _ => "–".into(),
        };
        md.push_str(&format!(
            "| {}{} | {} | {:.0} | {:.0} | {:.3} | {:.0} % | {:.3} | {:.2} [{:.2}, {:.2}] | {} | {:.2} | {:.3} % | {:.3} % | {} |\n",
            p.version,
            if good < p.runs.len() {
                format!(" ({good} of {} runs counted)", p.runs.len())
            } else {
                String::new()
            },
            c.sessions,
            p.med(|x| x.packets as f64),
            p.med(|x| x.bytes as f64 / x.packets.max(1) as f64),
            p.med(|x| x.cpu_s),
            p.med(|x| 100.0 * x.cpu_s / x.window_s),
            p.med(|x| x.wait_s),
            us.median,
            us.ci_low,
            us.ci_high,
            ratio,
            p.med(|x| x.mbps_per_session),
            p.med(|x| x.loss_percent),
            p.med(|x| x.late_percent),
            match (p.peer, &x_floor) {
                (Peer::Fjord, Some(f)) => f.describe(),
                _ => "–".into(),
            },
        ));
    }
    md.push('\n');
    for p in &r.results {
        if let Some(why) = &p.skipped {
            md.push_str(&format!("- {why}\n"));
        }
        for x in &p.runs {
            if let Some(e) = &x.error {
                md.push_str(&format!(
                    "- {} run {} does not count: {e}\n",
                    p.peer.name(),
                    x.rep + 1
                ));
            }
            if let Some(why) = &x.burst_note {
                md.push_str(&format!(
                    "- {} run {}: packets per send not read: {why}\n",
                    p.peer.name(),
                    x.rep + 1
                ));
            }
        }
    }
    for n in &r.notes {
        md.push_str(&format!("- {n}\n"));
    }
    if let Some(note) = floor_note(r) {
        md.push_str(&format!("- {note}\n"));
    }
    md.push_str(&format!(
        "\nTitle: {}. Every session reads it from the start, from the page cache.\n\n",
        r.title
    ));
    md.push_str(&format!(
        "How: each server is a child process started afresh for each run and pinned, all its \
         threads, to CPU {} (`sched_setaffinity`){}; fjord as `fjord serve` with one engine thread \
         and its default data path, its admin listener on loopback (read once per run, after \
         the window, for its send counters), and over RTSPS (`fjord-tls`, with `--tcp`) the same \
         with a certificate from `fjord cert`, the receivers speaking TLS (rustls with ring) \
         on its RTSPS port; live555MediaServer serving its working directory; \
         GStreamer's rtsp-server from `bench/peers/gst_rtsp_vod.py` with one pipeline per client \
         (`filesrc ! tsparse set-timestamps=true ! rtpmp2tpay`, not shared); MediaMTX, which \
         has no video on demand, as a live relay: RTSP alone on loopback, the title's H.264 \
         video pushed to it once per run by ffmpeg (`-re -stream_loop -1 -map 0:v -c copy -f \
         rtsp`, over TCP, pinned to the receivers' CPU, its CPU not counted) and read by every \
         receiver, so its packets are H.264 RTP packets of the video alone (the TS's are 7 TS \
         packets of video and audio) and it reads no disk. The receivers are \
         `fjord load` (one thread, epoll + recvmmsg) in the bench process, pinned to CPU {}. \
         CPU is the server's threads' time on a CPU (`/proc/PID/task/*/schedstat`, in ns; \
         `/proc/PID/stat` counts 10 ms clock ticks), sampled every 20 ms and interpolated to the receive window: from the first PLAY reply \
         to the end of receiving. Packets are the RTP packets the receivers got in that window; \
         bytes/packet is their mean size with the 12-byte RTP header (7 TS packets make \
         1328). Waited for CPU is the \
         time the server's threads were ready to run while the CPU ran something else \
         (`/proc/PID/task/*/schedstat`, summed over its threads, so threads of one server \
         waiting for each other on its one CPU count too): on a shared machine, a server that \
         falls behind because it was not given the CPU shows it here. Mbit/s per session is what each \
         session received over its own time; the title has 4.5 Mbit/s of TS (4.54 with RTP \
         headers), so less means the server fell behind; live555 stamps its RTP packets with the \
         wall-clock time it read them from the file, so its lateness cannot show that. Loss is from RTP \
         sequence numbers; late is packets more than 2 ms after their schedule (the session's \
         first arrival plus the RTP timestamp offset, so a server that sends its first packets \
         ahead of the rest shows the rest as late). CSV of every run: peers.csv.\n",
        c.cpu,
        if c.realtime {
            format!(
                " and run under SCHED_FIFO priority {REALTIME_PRIORITY} (`--realtime`, the same \
                 for every server: other work on the machine cannot take their CPU)"
            )
        } else {
            String::new()
        },
        r.load_cpu
    ));
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::{MEDIAMTX_SKIP, PeersConfig, Run};

    fn report() -> PeersReport {
        let run = |rep, us: f64| Run {
            rep,
            sessions: 20,
            playing: 20,
            packets: 85_000,
            bytes: 85_000 * 1328,
            cpu_s: us * 85_000.0 / 1e6,
            window_s: 10.0,
            us_per_packet: us,
            mbps_per_session: 4.6,
            ..Run::default()
        };
        PeersReport {
            config: PeersConfig {
                sessions: 20,
                seconds: 10.0,
                tcp: false,
                reps: 3,
                cpu: 0,
                realtime: false,
                gro: false,
                fjord_exe: "fjord".into(),
                media_dir: "m".into(),
                floor_bursts: vec![1, 16],
                servers: Peer::ALL.to_vec(),
                udp_sockets: "shared".into(),
            },
            load_cpu: 1,
            title: "t.ts".into(),
            results: vec![
                PeerResult {
                    peer: Peer::Fjord,
                    version: "fjord 0.1.0".into(),
                    runs: vec![
                        Run {
                            burst: Some(13.0),
                            ..run(0, 1.0)
                        },
                        Run {
                            burst: Some(12.0),
                            ..run(1, 1.2)
                        },
                        Run {
                            burst: Some(14.0),
                            ..run(2, 0.9)
                        },
                    ],
                    skipped: None,
                },
                PeerResult {
                    peer: Peer::Live555,
                    version: "LIVE555 2026.10.24".into(),
                    runs: vec![
                        run(0, 12.0),
                        Run {
                            error: Some("no packets arrived".into()),
                            ..run(1, 0.0)
                        },
                        run(2, 14.0),
                    ],
                    skipped: None,
                },
                PeerResult {
                    peer: Peer::Gst,
                    version: String::new(),
                    runs: vec![],
                    skipped: Some("GStreamer rtsp-server: skipped, not installed".into()),
                },
                PeerResult {
                    peer: Peer::MediaMtx,
                    version: String::new(),
                    runs: vec![],
                    skipped: Some(MEDIAMTX_SKIP.into()),
                },
                PeerResult {
                    peer: Peer::Floor(1),
                    version: floor::label(1, 20, false),
                    runs: vec![run(0, 4.0)],
                    skipped: None,
                },
                PeerResult {
                    peer: Peer::Floor(16),
                    version: floor::label(16, 20, false),
                    runs: vec![run(0, 0.5)],
                    skipped: None,
                },
            ],
            notes: vec![],
        }
    }

    #[test]
    fn markdown_has_medians_ratios_and_skips() {
        let md = markdown(&report(), "fjord bench peers", "a 2 vCPU shared VM");
        assert!(md.contains("Command: `fjord bench peers`"), "{md}");
        assert!(
            md.contains("| fjord 0.1.0 | 20 | 85000 | 1328 | 0.085 | 1 % | 0.000 | 1.00 "),
            "{md}"
        );
        // live555: the failed run is left out, median of 12 and 14.
        assert!(md.contains("(2 of 3 runs counted)"), "{md}");
        assert!(md.contains("| 13.00 ["), "{md}");
        assert!(md.contains("| 13.0× |"), "{md}");
        assert!(
            md.contains("live555MediaServer run 2 does not count"),
            "{md}"
        );
        assert!(md.contains("GStreamer rtsp-server: skipped"), "{md}");
        assert!(md.contains("MediaMTX: skipped"), "{md}");
        // fjord's 13 packets per send: the floor there is 0.762 µs, log-
        // linear between B=1 (4.0) and B=16 (0.5); 16 is the nearest row.
        assert!(
            md.contains(
                "| 1.3× (measured 13.0 packets/send; floor at 13.0 interpolated from B=1 and \
                 B=16); 2.0× the nearest row, B=16 |"
            ),
            "{md}"
        );
        assert!(md.contains("13.00 packets per send (median"), "{md}");
        assert!(
            md.contains(
                "| kernel floor: prebuilt packets, GSO bursts of 16, 20 plain receivers | 20 |"
            ),
            "{md}"
        );
        assert!(md.contains("| 0.50 ["), "{md}");
        assert!(md.contains("Bursts measured: 1, 16."), "{md}");
    }

    #[test]
    fn fjord_against_the_floor_at_its_measured_burst() {
        let mut r = report();
        let f = fjord_floor(&r).unwrap();
        assert_eq!((f.burst, f.nearest, f.at.lo, f.at.hi), (13.0, 16, 1, 16));
        assert!((f.x_nearest - 2.0).abs() < 1e-9, "{f:?}");
        let floor13 = 4.0 - 3.5 * 13f64.ln() / 16f64.ln();
        assert!((f.x_at - 1.0 / floor13).abs() < 1e-9, "{f:?}");
        // Past the largest floor burst: that row, both ways.
        for x in &mut r.results[0].runs {
            x.burst = Some(20.0);
        }
        let f = fjord_floor(&r).unwrap();
        assert_eq!((f.at.lo, f.at.hi, f.x_at), (16, 16, f.x_nearest));
        assert!(
            f.describe()
                .contains("floor at 20.0 taken as B=16's, the nearest measured")
        );
        // Not read: no comparison, and the report says why.
        for x in &mut r.results[0].runs {
            x.burst = None;
            x.burst_note = Some("GET /metrics: refused".into());
        }
        assert_eq!(fjord_floor(&r), None);
        let md = markdown(&r, "c", "m");
        assert!(
            md.contains("- fjord run 2: packets per send not read: GET /metrics: refused"),
            "{md}"
        );
        assert!(md.contains("not read (see above)"), "{md}");
    }

    #[test]
    fn a_floor_row_that_fell_behind_is_not_compared_with() {
        let mut r = report();
        let b1 = (r.results.iter_mut())
            .find(|p| p.peer == Peer::Floor(1))
            .unwrap();
        for x in &mut b1.runs {
            x.loss_percent = 25.0;
        }
        // Only B=16 is left: fjord's 13 is compared with it.
        let f = fjord_floor(&r).unwrap();
        assert_eq!((f.at.lo, f.at.hi, f.x_at), (16, 16, f.x_nearest));
    }

    #[test]
    fn csv_has_a_row_per_run() {
        let csv = csv(&report());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 3 + 3 + 2);
        let cols = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == cols), "{csv}");
        assert!(lines[5].ends_with("no packets arrived"), "{csv}");
        assert!(lines[0].ends_with(",packets_per_send,error"), "{csv}");
        assert!(lines[1].ends_with(",13.000,"), "{csv}");
        assert!(lines[4].ends_with(",,"), "{csv}");
        assert!(
            lines[8].starts_with("kernel floor,kernel floor: prebuilt packets; GSO bursts of 16;"),
            "{csv}"
        );
    }
}

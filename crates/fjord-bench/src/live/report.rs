//! `bench live`'s report: a line per row as it runs, and the Markdown.

use std::fmt::Write;

use super::{LiveReport, PROBES, Row};

/// A row, for the terminal.
pub fn line(r: &Row) -> String {
    let latency = r.latency.map_or("-".into(), |(p50, p99, max, n)| {
        format!("latency p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms ({n} packets)")
    });
    format!(
        "{} × {}: {} packets, CPU {:.3} s over {:.2} s, {:.2} µs/packet, loss {:.3} %, {:.1} KiB/viewer, {latency}{}",
        r.server,
        r.viewers,
        r.packets,
        r.cpu_s,
        r.window_s,
        r.us_per_packet,
        r.loss_percent,
        r.kib_per_viewer,
        r.error
            .as_deref()
            .map(|e| format!("; {e}"))
            .unwrap_or_default()
    )
}

/// CPU per packet of `r` over fjord VOD's at the same viewer count.
fn ratio(report: &LiveReport, r: &Row) -> String {
    let vod =
        (report.rows.iter()).find(|v| v.viewers == r.viewers && v.server.starts_with("fjord VOD"));
    match vod {
        Some(v) if v.us_per_packet.is_finite() && v.error.is_none() => {
            format!("{:.2}×", r.us_per_packet / v.us_per_packet)
        }
        _ => "-".into(),
    }
}

pub fn markdown(report: &LiveReport, command: &str) -> String {
    let c = &report.config;
    let mut md = format!(
        "# fjord bench live: one publisher, N viewers\n\nCommand: `{command}`\n\nMachine: {}\n\nSource: {}\n\n",
        crate::peers::machine(),
        report.source
    );
    md.push_str(
        "| server | viewers | playing | packets | loss | CPU s | µs CPU/packet | ratio to fjord VOD | KiB/viewer | latency p50 ms | p99 ms | max ms | matched |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in &report.rows {
        let (p50, p99, max, n) = r.latency.map_or(
            ("-".into(), "-".into(), "-".into(), "-".into()),
            |(a, b, m, n)| {
                (
                    format!("{a:.2}"),
                    format!("{b:.2}"),
                    format!("{m:.2}"),
                    n.to_string(),
                )
            },
        );
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.3} % | {:.3} | {:.2} | {} | {:.1} | {p50} | {p99} | {max} | {n} |",
            r.server,
            r.viewers,
            r.playing,
            r.packets,
            r.loss_percent,
            r.cpu_s,
            r.us_per_packet,
            ratio(report, r),
            r.kib_per_viewer,
        );
    }
    for r in report.rows.iter().filter(|r| r.error.is_some()) {
        let _ = writeln!(
            md,
            "\n- {} × {}: {}",
            r.server,
            r.viewers,
            r.error.as_deref().unwrap_or_default()
        );
    }
    for n in &report.notes {
        let _ = writeln!(md, "\n- {n}");
    }
    let _ = write!(
        md,
        "\nHow: each server runs as a child process pinned, all its threads, to CPU {} ({}); fjord as `fjord serve` with one engine thread and its default data path. \
         The publisher is ffmpeg (`-re -stream_loop -1 -c copy`, RTSP, RTP over UDP, pinned to the receivers' CPU, its CPU not counted). \
         The viewers are `fjord load` (plain UDP receivers, no GRO) on CPU {}, {} s per row; the VOD row plays the same file from the same server after the live row. \
         CPU is the server's threads' time on a CPU (`/proc/PID/task/*/schedstat`) over the receive window, per packet the viewers received. \
         KiB/viewer is the server's highest anonymous resident memory (`RssAnon`: heap, not the mapped title) while the viewers play, less before they came, over N. \
         Latency: a packet socket on `lo` (a kernel filter on the publisher's UDP source ports) timestamps each publisher packet as it goes to the server; {PROBES} more viewers, set up a quarter into the row (after the N, so the last the server sends to), receive the video with kernel timestamps (SO_TIMESTAMPNS); a packet's latency is its arrival at a probe less the tap's last sighting of the same payload (hashed; the header differs per viewer), counting only packets published after the probes played (not the backlog a joining viewer gets at once). On loopback the server's send includes the delivery to each receiver, so the last of N viewers waits for the deliveries to the N before it. \
         The kernel floor row is a relay thread of the bench, pinned and scheduled as the servers: ffmpeg publishes the video alone to it as plain RTP (`-f rtp`); it waits 500 µs after a packet, as fjord's engine does, and sends what came, unchanged, to each of N + {PROBES} connected sockets (one `sendmsg` with `UDP_SEGMENT` per run of equal sizes), read by plain receivers on the viewers' CPU; its CPU is the relay thread's, per video packet received (the server rows count audio packets too). It is what this kernel spends to hand each frame to N loopback receivers, with no server logic.\n",
        c.cpu,
        if c.realtime {
            "SCHED_FIFO"
        } else {
            "normal priority"
        },
        report.load_cpu,
        c.seconds
    );
    md
}

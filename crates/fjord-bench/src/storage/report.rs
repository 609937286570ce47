//! `fjord bench storage` output: `storage.md`, `storage.json` and
//! `storage.svg` (lateness per second of each run).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::{RunResult, StorageReport};
use crate::chart;

/// Every section of the markdown, in order (the test checks them).
pub const SECTIONS: [&str; 7] = [
    "## Setting",
    "## Results",
    "## Engine threads",
    "## Disk",
    "## Server storage",
    "## Bulk ingest",
    "## How it is measured",
];

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.digits$}"))
}

fn opt_mb(v: Option<u64>) -> String {
    v.map_or("n/a".into(), |x| format!("{:.1} MB", x as f64 / 1e6))
}

/// The report as markdown.
pub fn markdown(r: &StorageReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# fjord bench storage\n");
    let _ = writeln!(s, "Command: `{}`\n", r.command);
    let _ = writeln!(s, "{}\n", SECTIONS[0]);
    let _ = writeln!(s, "- machine: {}", r.machine);
    let _ = writeln!(
        s,
        "- library: {} ({} titles, {:.2} GB of media, {:.2} GB with index, parity and packet files) at `{}`",
        r.library,
        r.titles,
        r.library_media_bytes as f64 / 1e9,
        r.library_total_bytes as f64 / 1e9,
        r.library_root
    );
    let _ = writeln!(s, "- device: {}", r.device);
    let _ = writeln!(s, "- {}", r.cgroup);
    let _ = writeln!(
        s,
        "- load: {} sessions, each {} from a uniformly random position in [0, duration − {:.0} s] (seed {}), received for {:.0} s by `fjord load` on one thread with plain UDP sockets (no UDP_GRO, as players)",
        r.sessions,
        if r.zipf > 0.0 {
            format!(
                "a title of Zipf({}) popularity, the first title the most asked for,",
                r.zipf
            )
        } else {
            "a uniformly random title".to_string()
        },
        r.seconds,
        r.seed,
        r.seconds
    );
    if r.roots > 1 {
        let _ = writeln!(
            s,
            "- pool: {} disks, each a loop device (direct I/O) over an ext4 image beside the library, throttled on its own; title k on disk k mod {}",
            r.roots, r.roots
        );
    }
    for run in &r.runs {
        let _ = writeln!(s, "- run `{}`: {}", run.name, run.setting);
    }
    let _ = writeln!(s, "\n{}\n", SECTIONS[1]);
    let _ = writeln!(
        s,
        "| run | playing | packets | lost | > 2 ms late | > 50 ms late | > 200 ms late | max lateness | worst stall | first packet p50 / p99 / max |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for run in &r.runs {
        let _ = writeln!(
            s,
            "| {} | {}/{} | {} | {} ({:.3} %) | {} ({:.3} %) | {} ({:.3} %) | {} ({:.3} %) | {:.1} ms | {:.1} ms | {:.1} / {:.1} / {:.1} ms |",
            run.name,
            run.sessions_playing,
            run.sessions_requested,
            run.packets,
            run.lost,
            run.loss_percent,
            run.late.over_2ms,
            run.late.over_2ms_percent,
            run.late.over_50ms,
            run.late.over_50ms_percent,
            run.late.over_200ms,
            run.late.over_200ms_percent,
            run.max_lateness_ms,
            run.max_stall_ms,
            run.first_packet_ms.p50,
            run.first_packet_ms.p99,
            run.first_packet_ms.max,
        );
    }
    for run in &r.runs {
        if run.setup_failures + run.sessions_dropped > 0 || !run.errors.is_empty() {
            let _ = writeln!(
                s,
                "\n`{}`: {} sessions failed to set up, {} dropped; {}",
                run.name,
                run.setup_failures,
                run.sessions_dropped,
                run.errors.join("; ")
            );
        }
    }
    let _ = writeln!(s, "\n![lateness and disk reads per second](storage.svg)");
    let _ = writeln!(s, "\n{}\n", SECTIONS[2]);
    let _ = writeln!(
        s,
        "Over the receive window, from `/proc/PID/task/TID/stat`: major faults (field 12) and time blocked on block I/O (field 42, delay accounting, `kernel.task_delayacct=1`).\n"
    );
    let _ = writeln!(
        s,
        "| run | thread | major faults | blocked on I/O (delay accounting) | impossible increments left out | in D state (sampled) |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for run in &r.runs {
        for t in &run.engine_threads {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} ms | {} | {} ms |",
                run.name,
                t.name,
                t.major_faults,
                t.io_blocked_ms,
                t.io_blocked_artefacts,
                opt(t.d_state_ms, 0)
            );
        }
        let _ = writeln!(
            s,
            "| {} | whole server (faults: all threads, gone ones too; blocked: threads alive at the end) | {} | {:.0} ms | {} | n/a |",
            run.name,
            run.process.major_faults,
            run.process.io_blocked_ms,
            run.process.io_blocked_artefacts
        );
    }
    let artefacts: u64 = r.runs.iter().map(|x| x.blkio_artefacts).sum();
    let _ = writeln!(
        s,
        "\nBlocked time (delay accounting) is read every 250 ms; an increment larger than the time between two reads is impossible and left out ({artefacts} here): the kernel ends I/O waits it never saw start (the first after `task_delayacct` was turned on, and wake-ups that race the sleep) and then adds the time since an old start, the first time its whole uptime. The figure is therefore approximate (waits are lost with each left-out increment, and smaller stale increments stay in). It includes any sleep the kernel counts as I/O wait, e.g. an io_uring wait with requests in flight. The D-state column is independent of it: the engine threads' state read from `/proc/PID/task/TID/stat` every {:.1} ms on average, time in uninterruptible sleep (a page being read in, mostly) estimated as the share of samples in `D` times the window.",
        r.runs.first().map_or(0.0, |x| x.d_sample_ms)
    );
    let _ = writeln!(s, "\n{}\n", SECTIONS[3]);
    let _ = writeln!(
        s,
        "| run | device | read by the server's cgroup | cgroup MB/s | cgroup IOPS | whole device MB/s | whole device IOPS | cgroup memory peak |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for run in &r.runs {
        let pool = run.disks.iter().map(|d| (d, "each disk".to_string()));
        let rows = std::iter::once((&run.disk, opt_mb(run.memory_peak_bytes))).chain(pool);
        for (d, memory) in rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} MB | {} | {} | {} | {} | {} |",
                run.name,
                d.device,
                opt(d.cgroup_read_mb, 1),
                opt(d.cgroup_read_mbps, 1),
                opt(d.cgroup_read_iops, 0),
                opt(d.device_read_mbps, 1),
                opt(d.device_read_iops, 0),
                memory,
            );
        }
    }
    let _ = writeln!(
        s,
        "\nThe cgroup's figures are the server's reads (and the bulk ingest's, if any); the whole device's include every other process on the machine."
    );
    let _ = writeln!(s, "\n{}\n", SECTIONS[4]);
    let _ = writeln!(
        s,
        "From `fjord serve --stats-file` at the end of the run (the pinned read-ahead memory: its peak over 250 ms samples).\n"
    );
    let _ = writeln!(
        s,
        "| run | not ready (deferrals) | server packets | server late | pinned read-ahead peak | per playing session | budget | reads | read | read errors | bulk | slowest first read |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for run in &r.runs {
        match &run.server {
            Some(v) => {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    run.name,
                    v.not_ready,
                    v.packets,
                    v.late,
                    opt_mb(v.pinned_bytes_peak),
                    opt_mb(
                        v.pinned_bytes_peak
                            .map(|p| p / run.sessions_playing.max(1) as u64)
                    ),
                    opt_mb(v.budget_bytes),
                    v.reads.map_or("n/a".into(), |x| x.to_string()),
                    opt_mb(v.read_bytes),
                    v.read_errors.map_or("n/a".into(), |x| x.to_string()),
                    opt_mb(v.bulk_bytes),
                    v.first_read_max_ms
                        .map_or("n/a".into(), |ms| format!("{ms:.1} ms")),
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "| {} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |",
                    run.name
                );
            }
        }
    }
    for run in &r.runs {
        if !run.server_note.is_empty() {
            let _ = writeln!(s, "\n`{}`: {}", run.name, run.server_note);
        }
        if !run.server_warnings.is_empty() {
            let _ = writeln!(s, "\n`{}`: the server warned\n\n```", run.name);
            for w in &run.server_warnings {
                let _ = writeln!(s, "{w}");
            }
            let _ = writeln!(s, "```");
        }
    }
    let _ = writeln!(s, "\n{}\n", SECTIONS[5]);
    let any = r.runs.iter().any(|x| x.ingest.is_some());
    if !any {
        let _ = writeln!(
            s,
            "none (`--ingest-mb N` writes a title of N MB before the run and has the server ingest it during the run: index on its first DESCRIBE, then parity and packet file in the background, as bulk work)"
        );
    } else {
        let _ = writeln!(
            s,
            "| run | MB | started at | written before the run (ffmpeg -c copy) | server ingest (index, on DESCRIBE) | then parity and packets | error |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for run in &r.runs {
            if let Some(i) = &run.ingest {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.0} s | {} s | {} s | {} s | {} |",
                    run.name,
                    i.mb,
                    i.started_at_s,
                    opt(i.copy_s, 1),
                    opt(i.ingest_s, 1),
                    opt(i.derive_s, 1),
                    i.error.as_deref().unwrap_or("")
                );
            }
        }
    }
    let _ = writeln!(s, "\n{}\n", SECTIONS[6]);
    let _ = writeln!(
        s,
        "- **Lateness** of a packet: its arrival (the kernel's receive timestamp, SO_TIMESTAMPNS) minus its due time, the due time being the arrival of the session's first packet plus the RTP timestamp difference (90 kHz) to that packet. Lateness is thus relative to the first packet of the session: a slow start shows in the time to first packet, not in lateness. The server sends up to 40 ms ahead of schedule, so on-time packets have lateness ≤ 0.\n\
         - **Stall**: the longest gap between two consecutive packets of a session beyond the media time between them (the growth of lateness from one packet to the next).\n\
         - **First packet**: from the session's PLAY request sent to its first RTP packet.\n\
         - **Loss**: packets missing from the RTP sequence at the end.\n\
         - Disk figures are deltas over the receive window of the cgroup's `blkio.throttle.io_service_bytes`/`io_serviced` (v1) or `io.stat` (v2), and of `/sys/block/DEV/stat`."
    );
    s
}

/// Writes `storage.md`, `storage.json` and `storage.svg` into `dir`;
/// returns the markdown.
pub fn write(r: &StorageReport, dir: &Path) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let md = markdown(r);
    std::fs::write(dir.join("storage.md"), &md)?;
    std::fs::write(dir.join("storage.json"), r.to_json())?;
    svg(&r.runs, &dir.join("storage.svg"))
        .map_err(|e| anyhow::anyhow!("drawing storage.svg: {e}"))?;
    Ok(md)
}

type Series = Vec<(f64, f64)>;

/// Three panels over the seconds of the run, a line per run: the share of
/// packets more than 50 ms late, the largest lateness, and the disk reads
/// of the server's cgroup.
pub fn svg(runs: &[RunResult], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(340);
    let (middle, bottom) = rest.split_vertically(340);
    let xmax = runs
        .iter()
        .map(|r| r.timeline.len().max(r.disk_timeline.len()))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let share = |r: &RunResult| -> Series {
        r.timeline
            .iter()
            .filter(|t| t.packets > 0)
            .map(|t| {
                (
                    t.t_s as f64 + 0.5,
                    100.0 * t.late.over_50ms as f64 / t.packets as f64,
                )
            })
            .collect()
    };
    let worst = |r: &RunResult| -> Series {
        r.timeline
            .iter()
            .filter(|t| t.packets > 0)
            .map(|t| (t.t_s as f64 + 0.5, t.max_lateness_ms.max(0.0)))
            .collect()
    };
    let disk = |r: &RunResult| -> Series {
        r.disk_timeline
            .iter()
            .map(|d| (d.t_s, d.read_mbps))
            .collect()
    };
    let series: [Vec<Series>; 3] = [
        runs.iter().map(share).collect(),
        runs.iter().map(worst).collect(),
        runs.iter().map(disk).collect(),
    ];
    let panels = [
        (
            &top,
            "packets more than 50 ms late, per second",
            "% of the second's packets",
            "seconds since the first session connected",
            1.0,
        ),
        (
            &middle,
            "largest lateness, per second",
            "ms",
            "seconds since the first session connected",
            10.0,
        ),
        (
            &bottom,
            "read from the disk by the server's cgroup, per second",
            "MB/s",
            "seconds since the receivers started",
            1.0,
        ),
    ];
    for ((area, caption, ydesc, xdesc, floor), lines) in panels.into_iter().zip(series) {
        let ymax = lines
            .iter()
            .flat_map(|l| l.iter().map(|p| p.1))
            .fold(floor, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        chart.configure_mesh().x_desc(xdesc).y_desc(ydesc).draw()?;
        for (i, (r, pts)) in runs.iter().zip(lines).enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart::line(&mut chart, pts, color, Some(r.name.as_str()))?;
        }
        chart::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present()?;
    Ok(())
}

//! Output: a markdown table for the terminal and the note, CSV for other
//! tools, and an SVG plot like the seeds' Fig. 5 (CPU per packet relative to
//! `read-writev` against payload size, one line per path).

use std::{fmt::Write as _, fs, path::Path};

use anyhow::Context;
use plotters::prelude::*;

use crate::{REFERENCE, Results, Row, chart};

fn opt(x: Option<f64>, prec: usize) -> String {
    x.filter(|v| v.is_finite())
        .map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

/// The streaming table, markdown.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(
        "| path | payload B | CPU ns/pkt median [95% CI] | MAD | user / sys ns | syscalls/pkt | copies/pkt | × read-writev | floor | × floor |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    for r in rows {
        let cpu = match (&r.cpu, &r.error) {
            (Some(c), _) => format!("{:.0} [{:.0}, {:.0}]", c.median, c.ci_low, c.ci_high),
            (None, Some(e)) => format!("failed: {}", e.replace('|', "/")),
            (None, None) => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} / {:.0} | {} | {} | {} | {} | {} |",
            r.name,
            r.size,
            cpu,
            opt(r.cpu.map(|c| c.mad), 0),
            r.user,
            r.sys,
            opt(Some(r.syscalls), 3),
            opt(r.copies, 2),
            opt(r.vs_reference, 3),
            r.floor.as_deref().unwrap_or(""),
            opt(r.vs_floor, 2),
        );
    }
    s
}

/// The download table, markdown (per MB = 10^6 bytes).
pub fn markdown_download(rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str("| method | op size B | CPU µs/MB median [95% CI] | MAD | user / sys µs/MB | syscalls/MB | copies | × read-write |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let size = if r.name == "sendfile-whole" {
            "file".to_string()
        } else {
            r.size.to_string()
        };
        let cpu = match (&r.cpu, &r.error) {
            (Some(c), _) => format!(
                "{:.1} [{:.1}, {:.1}]",
                c.median / 1e3,
                c.ci_low / 1e3,
                c.ci_high / 1e3
            ),
            (None, Some(e)) => format!("failed: {}", e.replace('|', "/")),
            (None, None) => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} / {:.1} | {:.1} | {} | {} |",
            r.name,
            size,
            cpu,
            opt(r.cpu.map(|c| c.mad / 1e3), 1),
            r.user / 1e3,
            r.sys / 1e3,
            r.syscalls,
            opt(r.copies, 0),
            opt(r.vs_reference, 3),
        );
    }
    s
}

pub const CSV_HEADER: &str = "sink,name,size,reps,packets,cpu_ns_median,cpu_ns_mad,cpu_ns_ci_low,cpu_ns_ci_high,user_ns,sys_ns,syscalls_per_packet,copies_per_packet,x_reference,floor,x_floor,error";

/// Rows as CSV (no quoting needed: names and sinks have no commas; errors
/// have theirs replaced).
pub fn csv(sink: &str, rows: &[Row]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    let f = |x: Option<f64>| {
        x.filter(|v| v.is_finite())
            .map_or(String::new(), |v| format!("{v}"))
    };
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            sink,
            r.name,
            r.size,
            r.reps,
            r.packets,
            f(r.cpu.map(|c| c.median)),
            f(r.cpu.map(|c| c.mad)),
            f(r.cpu.map(|c| c.ci_low)),
            f(r.cpu.map(|c| c.ci_high)),
            f(Some(r.user)),
            f(Some(r.sys)),
            f(Some(r.syscalls)),
            f(r.copies),
            f(r.vs_reference),
            r.floor.as_deref().unwrap_or(""),
            f(r.vs_floor),
            r.error.as_deref().unwrap_or("").replace([',', '\n'], ";"),
        );
    }
    s
}

/// The Fig. 5 plot: for every path (not the floors), CPU per packet
/// relative to read-writev at each payload size.
pub fn svg(rows: &[Row], sink: &str, path: &Path) -> anyhow::Result<()> {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if r.floor.is_some() && !names.contains(&r.name.as_str()) {
            names.push(&r.name);
        }
    }
    let series: Vec<(&str, Vec<(f64, f64)>)> = names
        .iter()
        .map(|n| {
            let pts = rows
                .iter()
                .filter(|r| r.name == *n)
                .filter_map(|r| r.vs_reference.map(|v| (r.size as f64, v)))
                .collect();
            (*n, pts)
        })
        .filter(|(_, p): &(&str, Vec<(f64, f64)>)| !p.is_empty())
        .collect();
    let xmin = rows.iter().map(|r| r.size).min().unwrap_or(256) as f64;
    let xmax = rows.iter().map(|r| r.size).max().unwrap_or(1456) as f64;
    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = if xmax > xmin {
        (xmin - 40.0, xmax + 40.0)
    } else {
        (xmin - 100.0, xmin + 100.0)
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("CPU per packet relative to {REFERENCE} (sink: {sink})"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("RTP payload size (bytes)")
        .y_desc(format!("CPU per packet / {REFERENCE}"))
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart::line(&mut chart, pts.iter().copied(), color, Some(*name))?;
        chart::dots(&mut chart, pts.iter().copied(), color)?;
    }
    chart::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

/// Writes `datapath.csv`, `datapath.svg`, `datapath.md` (and
/// `download.csv`, `download.md` when there are download rows) into `dir`.
/// Returns the markdown printed to stdout.
pub fn write(
    results: &Results,
    rows: &[Row],
    download: &[Row],
    dir: &Path,
) -> anyhow::Result<String> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let c = &results.config;
    let mut md = String::new();
    let _ = writeln!(md, "sink: {}\n", results.sink);
    let _ = writeln!(
        md,
        "file {} bytes per cell, {} repetitions, {} sessions × burst {}, elapsed {:.0} s; \
         CPU = CPU time of the sending thread (CLOCK_THREAD_CPUTIME_ID; user/sys split by getrusage RUSAGE_THREAD) / packets; × floor = CPU / CPU of the same kernel call on prebuilt packets\n",
        c.bytes,
        c.reps,
        c.sessions,
        c.burst,
        results.elapsed.as_secs_f64()
    );
    if !rows.is_empty() {
        md.push_str(&markdown(rows));
        fs::write(dir.join("datapath.csv"), csv(results.sink_short, rows))?;
        svg(rows, results.sink_short, &dir.join("datapath.svg")).context("datapath.svg")?;
    }
    if !download.is_empty() {
        md.push_str("\ndownload: TCP over loopback to a thread that reads and discards\n\n");
        md.push_str(&markdown_download(download));
        fs::write(dir.join("download.csv"), csv("loopback-tcp", download))?;
    }
    fs::write(dir.join("datapath.md"), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;

    fn row(name: &str, size: usize, median: f64, floor: Option<&str>) -> Row {
        Row {
            name: name.into(),
            size,
            reps: 3,
            packets: 1000,
            cpu: Summary::of(&[median, median * 1.1, median * 0.9]),
            user: median * 0.2,
            sys: median * 0.8,
            syscalls: 1.0,
            copies: Some(1.0),
            vs_reference: Some(median / 2000.0),
            floor: floor.map(str::to_string),
            vs_floor: floor.map(|_| 1.5),
            error: None,
        }
    }

    fn rows() -> Vec<Row> {
        let mut v = vec![];
        for size in [256, 1316] {
            v.push(row("read-writev", size, 2000.0, Some("floor:send")));
            v.push(row("gso", size, 200.0, Some("floor:gso")));
            v.push(row("floor:gso", size, 150.0, None));
        }
        let mut bad = row("uring", 256, 0.0, Some("floor:gso"));
        bad.cpu = None;
        bad.vs_reference = None;
        bad.error = Some("uring failed: Operation not permitted, errno 1".into());
        v.push(bad);
        v
    }

    #[test]
    fn csv_parses_back() {
        let rows = rows();
        let text = csv("loopback", &rows);
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header.len(), 17);
        let parsed: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(parsed.len(), rows.len());
        for (p, r) in parsed.iter().zip(&rows) {
            assert_eq!(p.len(), header.len(), "{p:?}");
            assert_eq!(p[0], "loopback");
            assert_eq!(p[1], r.name);
            assert_eq!(p[2].parse::<usize>().unwrap(), r.size);
            match r.cpu {
                Some(c) => {
                    assert_eq!(p[5].parse::<f64>().unwrap(), c.median);
                    assert_eq!(p[7].parse::<f64>().unwrap(), c.ci_low);
                }
                None => assert_eq!(p[5], ""),
            }
            assert_eq!(p[13].parse::<f64>().ok(), r.vs_reference);
        }
        assert!(parsed.last().unwrap()[16].contains("Operation not permitted; errno 1"));
    }

    #[test]
    fn markdown_has_a_line_per_row_and_shows_failures() {
        let rows = rows();
        let md = markdown(&rows);
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), rows.len() + 2);
        let cols = lines[0].matches('|').count();
        for l in &lines {
            assert_eq!(l.matches('|').count(), cols, "{l}");
        }
        assert!(md.contains("| gso | 1316 | 200 ["), "{md}");
        assert!(md.contains("failed: uring failed"), "{md}");
    }

    #[test]
    fn svg_has_a_line_per_path_and_text() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.svg");
        svg(&rows(), "loopback", &p).unwrap();
        let s = fs::read_to_string(&p).unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..100.min(s.len())]);
        let texts: Vec<&str> = s.lines().map(str::trim).collect();
        for t in ["read-writev", "gso", "RTP payload size (bytes)"] {
            assert!(texts.contains(&t), "text {t:?} missing: {s}");
        }
        assert!(s.contains("<polyline"), "no lines");
    }
}

//! `fjord bench datapath --quick` end to end, on loopback (and into the
//! namespace sink when root), for two paths.

use std::process::Command;

use fjord_bench::{
    DatapathConfig, report, run_datapath, sink::SinkChoice, summarise, summarise_download,
    workload::packet_count,
};

fn check(cfg: &DatapathConfig) -> String {
    let results = run_datapath(cfg).unwrap();
    for cell in results.cells.iter().chain(&results.download) {
        assert!(
            cell.error.is_none(),
            "{} {}: {:?}",
            cell.name,
            cell.size,
            cell.error
        );
        assert_eq!(cell.samples.len(), cfg.reps, "{} {}", cell.name, cell.size);
        for s in &cell.samples {
            let want = if results.download.iter().any(|d| std::ptr::eq(d, cell)) {
                cfg.bytes
            } else {
                packet_count(cfg.bytes as usize, cell.size)
            };
            assert_eq!(s.packets, want, "{} {}", cell.name, cell.size);
            assert!(s.syscalls > 0, "{} {}", cell.name, cell.size);
        }
    }
    // Every path and its floor, at every size.
    let floors = results.cells.iter().filter(|c| c.floor.is_some()).count();
    assert_eq!(
        results.cells.len() - floors,
        cfg.paths.len() * cfg.sizes.len()
    );
    assert!(floors >= cfg.sizes.len());
    let rows = summarise(&results);
    let dl = summarise_download(&results);
    let reference = rows
        .iter()
        .find(|r| r.name == "read-writev" || r.name == cfg.paths[0])
        .unwrap();
    assert!(reference.cpu.is_some());
    let md = report::write(&results, &rows, &dl, &cfg.out).unwrap();
    for f in ["datapath.csv", "datapath.svg", "datapath.md"] {
        assert!(cfg.out.join(f).exists(), "{f} not written");
    }
    let csv = std::fs::read_to_string(cfg.out.join("datapath.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    if cfg.download {
        let csv = std::fs::read_to_string(cfg.out.join("download.csv")).unwrap();
        assert_eq!(csv.lines().count(), dl.len() + 1);
    }
    md
}

#[test]
fn quick_run_on_loopback_adds_up_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = DatapathConfig {
        paths: vec!["mmap-writev".into(), "gso".into()],
        sink: SinkChoice::Loopback,
        out: dir.path().join("out"),
        progress: false,
        download: true,
        sizes: vec![256, 1316],
        reps: 2,
        bytes: 1 << 20,
        ..DatapathConfig::quick()
    };
    let md = check(&cfg);
    assert!(md.contains("LOOPBACK"), "{md}");
    assert!(md.contains("| gso | 1316 |"), "{md}");
}

#[test]
fn quick_run_into_the_namespace_sink_when_root() {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = DatapathConfig {
        paths: vec!["mmap-writev".into(), "gso".into()],
        out: dir.path().join("out"),
        progress: false,
        sizes: vec![1316],
        reps: 1,
        bytes: 1 << 20,
        ..DatapathConfig::quick()
    };
    let md = check(&cfg);
    let pid = std::process::id();
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(&format!("fjbench{pid}x")),
        "namespace left behind"
    );
    eprintln!("{md}");
}

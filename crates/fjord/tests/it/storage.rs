//! `fjord bench storage` at a small scale: 2 titles of about 60 MB (about
//! 260 MB with their index, parity and packet files) served from a 96 MiB
//! memory cgroup with a throttled disk to 4 sessions at random positions
//! for 8 s: the engine threads never take a major fault and every stream
//! arrives complete. Needs root and writable cgroups (v1 memory + blkio,
//! or v2); where they are not, it says so and passes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fjord_bench::storage::{StorageReport, cgroup, report::SECTIONS};

use crate::common::run_bounded;

#[test]
#[ignore = "timing: `make test` runs it alone after the parallel suite (it drops the page cache and plays in real time)"]
fn bench_storage_reports_every_section() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    // Kept between runs: making the titles is the slow part.
    let cache = tmp.join("storage-library");
    std::fs::create_dir_all(&cache).unwrap();
    if let Err(why) = cgroup::available(&cache) {
        eprintln!("skipped: fjord bench storage cannot run here: {why}");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["bench", "storage", "--titles", "2", "--title-mb", "60"])
        // 96 MiB: the server's read-ahead budget (half of it) holds four
        // 4.5 Mbit/s sessions; less, and admission refuses some (453).
        .args(["--cache-mb", "96", "--sessions", "4", "--seconds", "8"])
        .arg("--library-cache")
        .arg(&cache)
        .arg("--out")
        .arg(out.path());
    let r = run_bounded(cmd, Duration::from_secs(150));
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success() && !r.timed_out,
        "fjord bench storage failed ({:?}): {}\n{stdout}",
        r.status,
        r.stderr
    );
    let md = std::fs::read_to_string(out.path().join("storage.md")).unwrap();
    for section in SECTIONS {
        assert!(md.contains(section), "no {section:?} in\n{md}");
    }
    assert!(md.contains("| constrained |"), "{md}");
    let json = std::fs::read_to_string(out.path().join("storage.json")).unwrap();
    let report = StorageReport::from_json(&json).unwrap();
    assert_eq!(report.runs.len(), 1);
    let run = &report.runs[0];
    assert_eq!(run.name, "constrained");
    assert_eq!(run.memory_limit_bytes, Some(96 << 20));
    assert_eq!(run.sessions_playing, 4, "{:?}", run.errors);
    assert!(run.packets > 1000, "{} packets", run.packets);
    assert_eq!(run.first_packet_ms.n, 4);
    assert!(!run.engine_threads.is_empty());
    assert!(
        run.engine_threads
            .iter()
            .all(|t| t.name.starts_with("fjord-engine-"))
    );
    assert!(!run.timeline.is_empty());
    // What the storage layer is for: no engine thread waits for the disk,
    // and the streams are whole.
    for t in &run.engine_threads {
        assert_eq!(t.major_faults, 0, "{}: major faults", t.name);
    }
    assert_eq!(run.lost, 0, "packets lost");
    // 4 sessions × 8 s of a 4.5 Mbit/s TS (~430 packets/s), most of it.
    assert!(run.packets > 4 * 8 * 350, "{} packets", run.packets);
    assert_eq!(report.starts.len(), 4);
    let svg = std::fs::read_to_string(out.path().join("storage.svg")).unwrap();
    assert!(svg.contains("<svg"));
    // The cgroups are gone.
    assert!(
        !Path::new("/sys/fs/cgroup/memory")
            .join(cgroup::NAME)
            .exists()
    );
    assert!(
        !Path::new("/sys/fs/cgroup/blkio")
            .join(cgroup::NAME)
            .exists()
    );
}

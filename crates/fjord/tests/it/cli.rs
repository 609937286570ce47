//! `fjord ingest` and `fjord bench` from the command line.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{TS, clip_bytes, run_bounded};

/// `fjord bench ARGS` runs the `fjord-bench` beside `fjord` (a workspace
/// build, `cargo build --release` or `cargo test --workspace`, makes both),
/// and without one says how to build it.
#[test]
fn bench_runs_the_program_beside_fjord_or_says_how_to_build_it() {
    let fjord = Path::new(env!("CARGO_BIN_EXE_fjord"));
    let help = |exe: &Path| {
        let mut cmd = Command::new(exe);
        cmd.args(["bench", "--help"]);
        let out = run_bounded(cmd, Duration::from_secs(30));
        assert!(!out.timed_out, "fjord bench --help hung");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.stderr,
        )
    };
    if fjord.with_file_name("fjord-bench").is_file() {
        let (ok, stdout, stderr) = help(fjord);
        assert!(ok, "{stderr}");
        assert!(stdout.contains("Usage: fjord bench <COMMAND>"), "{stdout}");
        for b in ["datapath", "capacity", "disk", "peers", "storage", "soak"] {
            assert!(stdout.contains(b), "no {b} in {stdout}");
        }
    } else {
        eprintln!(
            "no fjord-bench beside {}: only its absence checked",
            fjord.display()
        );
    }
    // A fjord alone in a directory (linked, so current_exe names it there).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let alone = dir.path().join("fjord");
    fs::hard_link(fjord, &alone)
        .or_else(|_| fs::copy(fjord, &alone).map(drop))
        .unwrap();
    let (ok, _, stderr) = help(&alone);
    assert!(!ok);
    assert!(
        stderr.contains("build it with `cargo build --release -p fjord-bench`"),
        "{stderr}"
    );
}

fn ingest(path: &Path) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("ingest").arg(path);
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(!out.timed_out, "fjord ingest hung");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), out.stderr);
    (out.status.success(), text)
}

fn index_of(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".fjidx");
    p.into()
}

fn assert_fails_naming(path: &Path) {
    let (ok, text) = ingest(path);
    assert!(!ok, "ingest of {} succeeded: {text}", path.display());
    let name = path.file_name().unwrap().to_string_lossy();
    assert!(
        text.contains(&*name),
        "message does not name {name}: {text}"
    );
    assert!(!index_of(path).exists(), "an index was written for {name}");
}

#[test]
fn ingest_rejects_non_ts() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.ts");
    fs::write(&p, "this is not a transport stream\n".repeat(500)).unwrap();
    assert_fails_naming(&p);
}

#[test]
fn ingest_rejects_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.ts");
    fs::write(&p, b"").unwrap();
    assert_fails_naming(&p);
}

#[test]
fn ingest_rejects_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    assert_fails_naming(&dir.path().join("missing.ts"));
}

#[test]
fn ingest_writes_index_beside_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("clip.ts");
    fs::write(&p, clip_bytes()).unwrap();
    let (ok, text) = ingest(&p);
    assert!(ok, "{text}");
    assert!(
        index_of(&p).exists(),
        "no {} after ingest",
        index_of(&p).display()
    );
}

#[test]
fn ingest_resyncs_over_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("damaged.ts");
    let src = clip_bytes();
    let cut = TS * (src.len() / TS / 2) + 17;
    let mut data = src[..cut].to_vec();
    // Deterministic junk without sync bytes in a 188 rhythm.
    let mut x = 0x1234_5678u32;
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        data.push((x >> 24) as u8);
    }
    data.extend_from_slice(&src[cut..]);
    fs::write(&p, &data).unwrap();
    let (ok, text) = ingest(&p);
    assert!(ok, "ingest of a damaged file failed: {text}");
    assert!(index_of(&p).exists());
    let lower = text.to_lowercase();
    assert!(
        lower.contains("resync") || lower.contains("lost sync") || lower.contains("skipped"),
        "ingest does not report the resync: {text}"
    );
}

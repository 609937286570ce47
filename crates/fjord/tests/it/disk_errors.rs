//! Disk errors end to end: titles served from a FUSE filesystem that fails
//! chosen byte ranges with EIO (`faultfs.py`, python3-fusepy), as a disk
//! with bad sectors does. A read error on the packet file or the media
//! during play is rebuilt (from the media's copy or the parity) before the
//! packets are due: the client receives the stored file byte for byte, and
//! the server's stats count the error and the repair. Beyond what the
//! parity repairs, that session ends and another title's plays on.
//!
//! Each title is ingested in a plain directory (index, parity, packets),
//! then served from the FUSE view of it; a DESCRIBE loads the title before
//! the range starts failing and the range is then dropped from the page
//! cache, so the next read of it goes to the "disk". (The server's
//! background verification may meet the failing range too: it flags the
//! title for repair and serves on.) Needs /dev/fuse and root (`make test` installs fuse3 and
//! python3-fusepy); without them the tests say why and pass.

use std::fs;
use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Server, TsClip, ingest, run_bounded};

/// 8 s of H.264 + AAC, about 900 kB: the failing ranges lie past the
/// chunks the server keeps resident from load (the first 2 s).
fn source() -> PathBuf {
    let clip = TsClip {
        size: "320x240",
        tone: 330,
        seconds: 8,
        rates: ("800k", "64k"),
        extra: &[],
    };
    clip.make("disk-errors.ts")
}

/// A FUSE view of `source` at `mount`, failing what `control` says.
pub(crate) struct FaultFs {
    child: Child,
    mount: PathBuf,
    control: PathBuf,
    log: PathBuf,
}

impl FaultFs {
    /// Mounts `source` at `dir/mnt`; `None` (with the reason printed) when
    /// FUSE cannot work here.
    pub(crate) fn mount(source: &Path, dir: &Path) -> Option<FaultFs> {
        if !Path::new("/dev/fuse").exists() {
            eprintln!("disk_errors: skipped: no /dev/fuse");
            return None;
        }
        let python = ["/usr/bin/python3", "python3"].into_iter().find(|p| {
            Command::new(p)
                .args([
                    "-c",
                    "import sys\ntry: import fusepy\nexcept ImportError: import fuse",
                ])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        let Some(python) = python else {
            eprintln!(
                "disk_errors: skipped: no python3 with fusepy (apt-get install python3-fusepy)"
            );
            return None;
        };
        let mount = dir.join("mnt");
        let control = dir.join("faults.json");
        let log = dir.join("faultfs.log");
        fs::create_dir_all(&mount).unwrap();
        fs::write(&control, "{}").unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/faultfs.py");
        let mut child = Command::new(python)
            .arg(&script)
            .arg(source)
            .arg(&mount)
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn faultfs.py");
        let deadline = Instant::now() + Duration::from_secs(15);
        let mounted = |m: &Path| {
            let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let m = m.to_string_lossy().into_owned();
            mounts
                .lines()
                .any(|l| l.split(' ').nth(1) == Some(m.as_str()) && l.contains("fuse"))
        };
        while !mounted(&mount) {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!(
                    "disk_errors: skipped: faultfs.py could not mount ({status}): {}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
                return None;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("disk_errors: skipped: faultfs.py did not mount within 15 s");
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(FaultFs {
            child,
            mount,
            control,
            log,
        })
    }

    /// From now on reads of `name` overlapping `ranges` fail (EIO); those
    /// pages are dropped from the page cache so the next read goes to the
    /// filesystem.
    fn fail(&self, faults: &[(&str, Range<u64>)]) {
        let mut map = serde_json::Map::new();
        for (name, r) in faults {
            let spans = map
                .entry(name.to_string())
                .or_insert_with(|| serde_json::Value::Array(vec![]));
            if let serde_json::Value::Array(a) = spans {
                a.push(serde_json::json!([r.start, r.end]));
            }
        }
        let tmp = self.control.with_extension("tmp");
        fs::write(&tmp, serde_json::Value::Object(map).to_string()).unwrap();
        fs::rename(&tmp, &self.control).unwrap();
        for (name, _) in faults {
            let f = fs::File::open(self.mount.join(name)).unwrap();
            // SAFETY: a plain syscall on a descriptor we own.
            let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(r, 0, "posix_fadvise");
        }
    }

    /// From now on every read takes `delay_ms` longer (a slow disk); with
    /// `drop`, the clean page cache nobody maps is dropped (the whole
    /// machine's: opening a FUSE file to drop its own would invalidate its
    /// mapped, locked pages too), so what was read before is read again.
    pub(crate) fn slow(&self, delay_ms: u64, drop: bool) {
        let tmp = self.control.with_extension("tmp");
        fs::write(
            &tmp,
            serde_json::json!({ "delay_ms": delay_ms }).to_string(),
        )
        .unwrap();
        fs::rename(&tmp, &self.control).unwrap();
        if drop {
            fs::write("/proc/sys/vm/drop_caches", "1").expect("drop_caches (root)");
        }
    }

    pub(crate) fn mount_point(&self) -> &Path {
        &self.mount
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg("-l")
            .arg(&self.mount)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            for tool in ["fusermount3", "fusermount"] {
                let _ = Command::new(tool)
                    .args(["-u", "-z"])
                    .arg(&self.mount)
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- faultfs log ----\n{}", self.log_text());
        }
    }
}

/// Copies the test clip into `dir` as each of `names` and ingests them
/// (index, 12:8 parity, prefabricated packets).
fn ingest_source(dir: &Path, names: &[&str]) {
    fs::create_dir_all(dir).unwrap();
    let source = source();
    let files: Vec<_> = names.iter().map(|&name| (&source, name)).collect();
    ingest(dir, &["--fec", "12:8"], &files);
}

/// `fjord play URL -o FILE`: (output bytes, stdout and stderr, whether it
/// succeeded).
pub(crate) fn play(url: &str, out: &Path) -> (Vec<u8>, String, bool) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("play").arg(url).arg("-o").arg(out);
    let r = run_bounded(cmd, Duration::from_secs(60));
    let text = format!("{}\n{}", String::from_utf8_lossy(&r.stdout), r.stderr);
    (fs::read(out).unwrap_or_default(), text, r.status.success())
}

/// The storage counters of the server's stats file, once `done` holds for
/// them (it is rewritten every second), or the last seen after 10 s.
fn storage_stats(path: &Path, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let doc: serde_json::Value = fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let storage = doc["storage"].clone();
        if done(&storage) || Instant::now() > deadline {
            return storage;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn count(storage: &serde_json::Value, name: &str) -> u64 {
    storage[name].as_u64().unwrap_or(0)
}

/// Waits until the server has verified `titles` after loading them.
pub(crate) fn wait_verified(server: &Server, titles: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = |t: &str| {
        log_lines(server, "files verified")
            .iter()
            .any(|l| l.contains(&format!("title={t}")))
    };
    while !titles.iter().all(|t| done(t)) {
        assert!(Instant::now() < deadline, "titles not verified within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The page holding byte `at`, past the chunks kept resident from load.
fn page_at(at: u64) -> Range<u64> {
    at / 4096 * 4096..at / 4096 * 4096 + 4096
}

fn log_lines(server: &Server, needle: &str) -> Vec<String> {
    BufReader::new(fs::File::open(server.root.path().join("server.log")).unwrap())
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains(needle))
        .collect()
}

/// The packet file fails a page while a session plays from it (the
/// batching data path sends prefabricated packets): the page is rebuilt
/// and the client gets the stored file.
#[test]
fn a_packet_file_read_error_is_rebuilt_and_the_client_gets_the_stored_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    ingest_source(&plain, &["a.ts"]);
    let Some(fuse) = FaultFs::mount(&plain, dir.path()) else {
        return;
    };
    let stats = dir.path().join("stats.json");
    let server = Server::start_on(
        &fuse.mount,
        &format!("stats_file = {:?}\n", stats.display().to_string()),
    );
    server.assert_describes("a.ts");
    let packets_len = fs::metadata(plain.join("a.ts.fjpkt")).unwrap().len();
    let bad = page_at(packets_len * 3 / 4);
    fuse.fail(&[("a.ts.fjpkt", bad.clone())]);

    let (got, text, ok) = play(&server.url("a.ts"), &dir.path().join("a.out"));
    let want = fs::read(plain.join("a.ts")).unwrap();
    let st = storage_stats(&stats, |s| count(s, "repaired_chunks") > 0);
    assert!(
        fuse.log_text().contains("EIO /a.ts.fjpkt"),
        "the filesystem failed no read of the packet file ({bad:?}); stats {st}"
    );
    assert!(ok, "fjord play failed: {text}");
    assert!(
        got == want,
        "the client got {} bytes, not the stored {} (first difference at {:?}); stats {st}\n{text}",
        got.len(),
        want.len(),
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    assert!(count(&st, "read_errors") > 0, "{st}");
    assert!(count(&st, "repaired_chunks") > 0, "{st}");
    assert_eq!(st["needs_repair"], serde_json::json!(["a.ts"]), "{st}");
    let logged = log_lines(&server, "run `fjord repair");
    eprintln!("disk_errors: server said:\n{}", logged.join("\n"));
    assert!(
        logged
            .iter()
            .any(|l| l.contains("a.ts.fjpkt") && l.contains("rebuilt")),
        "{logged:?}"
    );
}

/// The media fails while sessions build their headers from it
/// (`mmap-writev` sends the media's runs, not the packet file): one page is
/// rebuilt from the parity and that client gets the stored file; a title
/// that fails more than its parity repairs ends its session, and a session
/// of another title on the same server plays on to the end.
#[test]
fn a_media_read_error_is_repaired_from_parity_and_beyond_it_only_that_session_ends() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    ingest_source(&plain, &["good.ts", "bad.ts"]);
    let Some(fuse) = FaultFs::mount(&plain, dir.path()) else {
        return;
    };
    let stats = dir.path().join("stats.json");
    let server = Server::start_on(
        &fuse.mount,
        &format!(
            "datapath = \"mmap-writev\"\nstats_file = {:?}\n",
            stats.display().to_string()
        ),
    );
    server.assert_describes("good.ts");
    server.assert_describes("bad.ts");
    // Failing reads while the server still verifies the titles (it hashes
    // samples of the media) would test that race, not the play's repair.
    wait_verified(&server, &["good.ts", "bad.ts"]);
    let want = fs::read(plain.join("good.ts")).unwrap();
    let len = want.len() as u64;
    let bad = page_at(len * 3 / 4);
    // 40 kB: about 30 packets in a row, a block of 12 loses all of them
    // and its 8 repair packets cannot make them again.
    let hopeless = len * 3 / 4..len * 3 / 4 + 40_000;
    fuse.fail(&[("good.ts", bad.clone()), ("bad.ts", hopeless)]);

    let bad_play = {
        let (server_url, out) = (server.url("bad.ts"), dir.path().join("bad.out"));
        std::thread::spawn(move || play(&server_url, &out))
    };
    let (got, text, ok) = play(&server.url("good.ts"), &dir.path().join("good.out"));
    let (bad_got, bad_text, _) = bad_play.join().unwrap();
    let st = storage_stats(&stats, |s| count(s, "read_errors") >= 2);

    assert!(ok, "fjord play good.ts failed: {text}");
    assert!(
        got == want,
        "the client of good.ts got {} bytes, not the stored {} (first difference at {:?}); stats {st}\n{text}",
        got.len(),
        want.len(),
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    assert!(
        bad_got.len() < want.len(),
        "the session of bad.ts played {} of {} bytes though its media failed beyond the parity\n{bad_text}",
        bad_got.len(),
        want.len()
    );
    assert!(count(&st, "read_errors") >= 2, "{st}");
    assert!(count(&st, "repaired_chunks") > 0, "{st}");
    let logged = log_lines(&server, "run `fjord repair");
    eprintln!("disk_errors: server said:\n{}", logged.join("\n"));
    assert!(
        logged.iter().any(|l| l.contains("good.ts")
            && l.contains("from the parity")
            && !l.contains("(0 from")),
        "{logged:?}"
    );
    assert!(
        logged
            .iter()
            .any(|l| l.contains("bad.ts") && l.contains("cannot be rebuilt")),
        "{logged:?}"
    );
    assert_eq!(
        st["needs_repair"],
        serde_json::json!(["bad.ts", "good.ts"]),
        "{st}"
    );
}

/// A pool of two disks: the failing FUSE view holds the title, a plain
/// directory (another device) is the second root. The server makes the
/// title's parity on the other disk, and a media page that fails to read
/// is rebuilt from it: the client gets the stored file.
#[test]
fn parity_kept_on_another_disk_of_the_pool_rebuilds_a_media_read_error() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    ingest_source(&plain, &["p.ts"]);
    // The index records the layout; the server makes the parity again.
    fs::remove_file(plain.join("p.ts.fjfec")).unwrap();
    let Some(fuse) = FaultFs::mount(&plain, dir.path()) else {
        return;
    };
    let other = dir.path().join("other");
    fs::create_dir(&other).unwrap();
    let stats = dir.path().join("stats.json");
    let config = format!(
        "roots = [{:?}, {:?}]\ndatapath = \"mmap-writev\"\nstats_file = {:?}\n",
        fuse.mount.display().to_string(),
        other.display().to_string(),
        stats.display().to_string()
    );
    let server = Server::start_on(&fuse.mount, &config);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = fjord_client::RtspClient::connect(&server.url("p.ts")).unwrap();
        if c.describe_fec().expect("DESCRIBE").sdp.contains("FEC-FR") {
            break;
        }
        assert!(Instant::now() < deadline, "no parity made within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!plain.join("p.ts.fjfec").exists(), "not beside the media");
    let made = log_lines(&server, "parity sidecar found");
    let parity = made
        .iter()
        .find_map(|l| l.split("parity=").nth(1)?.split_whitespace().next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{made:?}"));
    assert!(
        parity.starts_with(other.canonicalize().unwrap()) && parity.exists(),
        "{parity:?}"
    );

    // The title loaded with its parity is verified again in the
    // background; a page failing under that check would flag the title
    // before any session read it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while log_lines(&server, "files verified").len() < 2 {
        assert!(Instant::now() < deadline, "not verified again within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let want = fs::read(plain.join("p.ts")).unwrap();
    fuse.fail(&[("p.ts", page_at(want.len() as u64 * 3 / 4))]);
    let (got, text, ok) = play(&server.url("p.ts"), &dir.path().join("p.out"));
    let st = storage_stats(&stats, |s| count(s, "repaired_chunks") > 0);
    assert!(ok, "fjord play failed: {text}");
    assert!(
        got == want,
        "the client got {} bytes, not the stored {}; stats {st}\n{text}",
        got.len(),
        want.len()
    );
    assert!(count(&st, "repaired_chunks") > 0, "{st}");
    let logged = log_lines(&server, "run `fjord repair --parity");
    assert!(
        logged
            .iter()
            .any(|l| l.contains("from the parity") && !l.contains("(0 from")),
        "{logged:?}"
    );
    // The command it names reads that parity (the stored file is intact:
    // only the FUSE view failed).
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.args(["verify", "--parity"])
        .arg(&parity)
        .arg(plain.join("p.ts"));
    let out = run_bounded(cmd, Duration::from_secs(60));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("intact"),
        "{said} {}",
        out.stderr
    );
}

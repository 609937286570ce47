//! Repair streams end to end: a title ingested with `--fec 12:8`, played by
//! `fjord play` with packets dropped before recovery, must come out bit-exact
//! while each block loses at most M; beyond that the lost packets are
//! reported and left out, never replaced by wrong bytes. `fjord load --fec`
//! counts the same in many sessions. Players that do not know the repair
//! scheme play the title as before.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fjord_client::load::LoadReport;

use crate::common::{Server, TsClip, ingest, run_bounded};

const K: u64 = 12;
const M: u64 = 8;
const TS: usize = 188;

fn source() -> PathBuf {
    let clip = TsClip {
        size: "320x240",
        tone: 440,
        seconds: 4,
        rates: ("800k", "64k"),
        extra: &[],
    };
    clip.make("fec.ts")
}

/// A server whose root holds `fec.ts`, ingested with `--fec 12:8`.
fn server() -> Server {
    Server::start_with("", |root| {
        ingest(
            root,
            &["--fec", &format!("{K}:{M}")],
            &[(&source(), "fec.ts")],
        );
    })
}

/// The numbers of a `fjord play` report line (its source-packet part).
pub(crate) struct Report {
    fields: BTreeMap<String, u64>,
    pub(crate) text: String,
}

impl Report {
    pub(crate) fn get(&self, name: &str) -> u64 {
        *self
            .fields
            .get(name)
            .unwrap_or_else(|| panic!("no {name:?} in the report:\n{}", self.text))
    }
}

/// Runs `fjord play URL -o out ARGS` of `fec.ts`; returns the report and
/// the output.
fn play(server: &Server, dir: &Path, name: &str, args: &[&str]) -> (Report, Vec<u8>) {
    play_url(&server.url("fec.ts"), dir, name, args)
}

/// [`play`] of the title at `url`.
pub(crate) fn play_url(url: &str, dir: &Path, name: &str, args: &[&str]) -> (Report, Vec<u8>) {
    let out = dir.join(name);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("play").arg(url).arg("-o").arg(&out).args(args);
    let r = run_bounded(cmd, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    assert!(
        r.status.success(),
        "fjord play {args:?}: {}\n{text}\n{}",
        r.status,
        r.stderr
    );
    let line = text
        .lines()
        .find(|l| l.contains("source packets:"))
        .unwrap_or_else(|| panic!("no report in {text}"));
    let source_part = line.split(';').next().unwrap_or_default();
    let words: Vec<&str> = source_part.split_whitespace().collect();
    let fields = words
        .windows(2)
        .filter_map(|w| Some((w[0].to_owned(), w[1].parse().ok()?)))
        .collect();
    (Report { fields, text }, fs::read(&out).unwrap())
}

/// Asserts `got` is `want` with the TS packets of `missing` RTP packets (1
/// to 7 each) left out: greedy matching of TS packets finds a subsequence
/// if there is one.
pub(crate) fn assert_source_minus_packets(want: &[u8], got: &[u8], missing: u64, what: &str) {
    let mut at = 0;
    let mut skipped = 0;
    for piece in want.chunks(TS) {
        if got[at..].starts_with(piece) {
            at += piece.len();
        } else {
            skipped += 1;
        }
    }
    assert_eq!(at, got.len(), "{what}: bytes at {at} are not the source's");
    assert!(
        (missing..=7 * missing).contains(&skipped),
        "{what}: {skipped} TS packets left out for {missing} RTP packets"
    );
}

#[test]
fn random_loss_is_repaired_bit_exact_over_udp_and_tcp() {
    let server = server();
    let want = fs::read(server.media_root().join("fec.ts")).unwrap();
    let mut c = fjord_client::RtspClient::connect(&server.url("fec.ts")).unwrap();
    let plain = c.describe().unwrap().sdp;
    assert!(
        !plain.contains("FEC-FR") && !plain.contains("-fec"),
        "repair streams offered to a client that did not ask: {plain}"
    );
    let sdp = c.describe_fec().unwrap().sdp;
    assert!(sdp.contains("a=group:FEC-FR S1 R1\r\n"), "{sdp}");
    assert!(
        sdp.contains(
            "a=rtpmap:96 x-fjord-rfc6865/90000\r\n\
             a=fmtp:96 encoding-id=8; fssi=E:1324,m:8; k=12; repair=8; repair-window="
        ),
        "{sdp}"
    );
    assert!(
        sdp.contains("a=control:track1-fec\r\na=mid:R1\r\n"),
        "{sdp}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for transport in [&[][..], &["--tcp"][..]] {
            let (server, dir, want) = (&server, dir.path(), &want);
            s.spawn(move || {
                let args = [&["--drop", "0.10", "--seed", "3"][..], transport].concat();
                let name = format!("random{}.ts", transport.len());
                let (report, got) = play(server, dir, &name, &args);
                let what = format!("--drop 0.10 {transport:?}");
                assert!(
                    got == *want,
                    "{what}: output differs from the source\n{}",
                    report.text
                );
                assert!(report.get("dropped") > 10, "{what}: {}", report.text);
                assert_eq!(report.get("recovered"), report.get("lost"), "{what}");
                assert!(report.get("recovered") >= report.get("dropped"), "{what}");
                assert_eq!(report.get("unrecoverable"), 0, "{what}");
            });
        }
    });
}

#[test]
fn bursts_of_m_are_repaired_and_longer_ones_reported() {
    let server = server();
    let want = fs::read(server.media_root().join("fec.ts")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        let (server, dir, want) = (&server, dir.path(), &want);
        s.spawn(move || {
            let m = M.to_string();
            let (report, got) = play(server, dir, "m.ts", &["--drop", "0.5", "--burst", &m]);
            assert!(got == *want, "bursts of M: output differs\n{}", report.text);
            assert!(report.get("dropped") >= 3 * M, "{}", report.text);
            assert_eq!(report.get("unrecoverable"), 0, "{}", report.text);
        });
        s.spawn(move || {
            let n = (M + 1).to_string();
            let (report, got) = play(server, dir, "m1.ts", &["--drop", "0.5", "--burst", &n]);
            let lost = report.get("unrecoverable");
            assert!(lost > 0, "bursts of M + 1 within a block: {}", report.text);
            assert!(
                report.text.contains("left out of the output file"),
                "{}",
                report.text
            );
            assert_source_minus_packets(want, &got, lost, "bursts of M + 1");
        });
    });
}

/// Runs `fjord load URL --fec --json ARGS` (bounded) and parses its report.
fn load(server: &Server, args: &[&str]) -> LoadReport {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("load")
        .arg(server.url("fec.ts"))
        .args(["--fec", "--json"])
        .args(args);
    let out = run_bounded(cmd, Duration::from_secs(40));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.timed_out, "fjord load {args:?} hung: {}", out.stderr);
    assert!(
        out.status.success(),
        "fjord load {args:?}: {}\n{stdout}\n{}",
        out.status,
        out.stderr
    );
    LoadReport::from_json(&stdout).unwrap_or_else(|e| panic!("not a report ({e}): {stdout}"))
}

#[test]
fn load_recovers_every_dropped_packet_over_udp_and_tcp_and_reports_bursts_beyond_m() {
    let server = server();
    std::thread::scope(|s| {
        for transport in [&[][..], &["--tcp"][..]] {
            let server = &server;
            s.spawn(move || {
                let args = [&["--drop", "0.1", "-n", "5", "-t", "4"][..], transport].concat();
                let r = load(server, &args);
                let json = r.to_json();
                let fec = r.totals.fec.as_ref().expect("FEC counts");
                let setup = r.fec.as_ref().expect("FEC setup");
                assert_eq!((setup.k, setup.m), (K as u16, M as u16), "{json}");
                assert_eq!(r.sessions_playing, 5, "{json}");
                assert!(fec.dropped > 0, "{json}");
                assert!(fec.repair_packets > 0, "{json}");
                assert_eq!(fec.recovered, fec.dropped, "{json}");
                assert_eq!(fec.unrecoverable, 0, "{json}");
                assert_eq!(r.totals.lost, 0, "{json}");
                assert_eq!(r.totals.reordered, 0, "rebuilt is not reordered: {json}");
                for session in &r.sessions {
                    let f = session.fec.as_ref().expect("FEC counts per session");
                    assert_eq!(f.recovered, f.dropped, "{json}");
                }
                assert!(r.to_string().contains("recovered"), "{r}");
            });
        }
        let server = &server;
        s.spawn(move || {
            let n = (M + 1).to_string();
            let r = load(
                server,
                &["--drop", "0.5", "--burst", &n, "-n", "2", "-t", "3"],
            );
            let json = r.to_json();
            let fec = r.totals.fec.as_ref().expect("FEC counts");
            assert!(fec.unrecoverable > 0, "bursts of M + 1: {json}");
            assert!(fec.recovered < fec.dropped, "{json}");
            assert!(r.totals.lost > 0, "unrecoverable packets are lost: {json}");
        });
    });
}

/// ffmpeg does not ask for repair streams, so it is offered none: it
/// receives exactly the file's streams (every one mapped) and frames.
#[test]
fn ffmpeg_plays_a_protected_title_unchanged() {
    let server = server();
    let frames = |input: &[&str]| {
        let mut cmd = Command::new("ffmpeg");
        cmd.args(["-nostdin", "-v", "error"])
            .args(input)
            .args(["-map", "0", "-c", "copy", "-f", "framemd5", "-"]);
        let out = run_bounded(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "ffmpeg {input:?}: {}", out.stderr);
        // (stream, size, md5) per frame: timestamps shift with the session.
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let f: Vec<&str> = l.split(',').map(str::trim).collect();
                (f[0].to_owned(), f[4].to_owned(), f[5].to_owned())
            })
            .collect::<Vec<_>>()
    };
    let want = frames(&["-i", &server.media_root().join("fec.ts").to_string_lossy()]);
    for transport in ["udp", "tcp"] {
        let url = server.url("fec.ts");
        let got = frames(&[
            "-rtsp_transport",
            transport,
            "-timeout",
            "10000000",
            "-i",
            &url,
        ]);
        let streams = |frames: &[(String, String, String)]| {
            frames
                .iter()
                .map(|f| f.0.clone())
                .collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(streams(&got), streams(&want), "ffmpeg {transport}: streams");
        for stream in ["0", "1"] {
            let g: Vec<_> = got.iter().filter(|f| f.0 == stream).collect();
            let w: Vec<_> = want.iter().filter(|f| f.0 == stream).collect();
            assert!(
                g.len() == w.len() || g.len() + 1 == w.len(),
                "ffmpeg {transport}: stream {stream}: {} frames, {} in the file",
                g.len(),
                w.len()
            );
            assert!(
                g.iter().zip(&w).all(|(a, b)| a == b),
                "ffmpeg {transport}: stream {stream} frames differ"
            );
        }
    }
}

fn sdp_of(server: &Server, title: &str) -> String {
    let mut c = fjord_client::RtspClient::connect(&server.url(title)).unwrap();
    c.describe_fec().expect("DESCRIBE").sdp
}

/// A title first met by `serve` is served at once without parity, which is
/// then made in the background; later clients are offered the repair
/// stream, and it repairs. `fec = "off"` makes none.
#[test]
fn serve_makes_parity_for_new_titles_in_the_background() {
    let populate = |root: &Path| {
        fs::copy(source(), root.join("fec.ts")).unwrap();
    };
    let server = Server::start_with("fec = \"12:8\"\n", populate);
    let media = server.root.path().join("media");
    let first = sdp_of(&server, "fec.ts");
    assert!(media.join("fec.ts.fjidx").exists(), "ingested on demand");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut sdp = first;
    while !sdp.contains("a=group:FEC-FR") {
        assert!(
            std::time::Instant::now() < deadline,
            "no repair stream offered 30 s after the first DESCRIBE:\n{sdp}"
        );
        std::thread::sleep(Duration::from_millis(100));
        sdp = sdp_of(&server, "fec.ts");
    }
    assert!(media.join("fec.ts.fjfec").exists());
    // Its packets were prefabricated by the same background job, and the
    // title reloaded with them: the play below recovers from them.
    assert!(media.join("fec.ts.fjpkt").exists());
    assert!(server.log_text().contains("packets prefabricated"));
    let dir = tempfile::tempdir().unwrap();
    let (report, got) = play(&server, dir.path(), "fec.ts", &["--drop", "0.1"]);
    assert!(report.get("recovered") > 0, "{}", report.text);
    assert_eq!(report.get("unrecoverable"), 0, "{}", report.text);
    assert!(
        got == fs::read(source()).unwrap(),
        "recovered stream differs"
    );

    assert!(
        sdp.contains("k=12; repair=8"),
        "the configured layout:\n{sdp}"
    );

    let off = Server::start_with("fec = \"off\"\nprefab = false\n", populate);
    let sdp = sdp_of(&off, "fec.ts");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!sdp.contains("FEC-FR"));
    assert!(!off.root.path().join("media/fec.ts.fjfec").exists());
    assert!(!off.root.path().join("media/fec.ts.fjpkt").exists());

    // A title ingested with `--fec off` keeps its index's choice: a server
    // making parity for what it ingests leaves it alone.
    let kept = Server::start_with("fec = \"12:8\"\n", |root| {
        ingest(root, &["--fec", "off"], &[(&source(), "fec.ts")]);
    });
    let sdp = sdp_of(&kept, "fec.ts");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!sdp_of(&kept, "fec.ts").contains("FEC-FR"), "{sdp}");
    assert!(!kept.root.path().join("media/fec.ts.fjfec").exists());
}

/// `prefab = "auto"`: a title played once is served with built headers and
/// gets no packet file; played again, it gets one in the background; with
/// no share of the disk for packet files, never.
#[test]
fn auto_prefab_makes_packets_for_titles_played_again() {
    let populate = |root: &Path| {
        fs::copy(source(), root.join("fec.ts")).unwrap();
    };
    let server = Server::start_with("fec = \"off\"\nprefab = \"auto\"\n", populate);
    let packets = server.root.path().join("media/fec.ts.fjpkt");
    sdp_of(&server, "fec.ts");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!packets.exists(), "one play makes no packet file");
    sdp_of(&server, "fec.ts");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !packets.exists() || !server.log_text().contains("packets prefabricated") {
        assert!(
            std::time::Instant::now() < deadline,
            "no packet file 30 s after the second play"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, got) = play(&server, dir.path(), "fec.ts", &[]);
    assert!(got == fs::read(source()).unwrap(), "played with packets");

    let none = Server::start_with(
        "fec = \"off\"\nprefab = \"auto\"\nprefab_share_percent = 0\n",
        populate,
    );
    for _ in 0..3 {
        sdp_of(&none, "fec.ts");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!none.root.path().join("media/fec.ts.fjpkt").exists());
}

//! One client cannot exhaust, steer or impersonate (issue 40, the findings
//! on paths, descriptors, TLS, the admin listener and what errors say):
//! aliases of a title are 404 and cost nothing; loaded titles are bounded;
//! a server out of descriptors does not spin; a silent TLS client holds
//! nothing past its timeouts; the admin listener refuses rebinding `Host`s
//! and framing; a glob is checked against the name of what is served; a
//! config typo's password stays out of the log.

use std::{
    fs,
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::common::{ALICE, Server, certificate, media, raw_exchange};

/// The status line of `GET target` (raw) on a connection of its own.
fn get(port: u16, target: &str, extra: &str) -> String {
    let head =
        format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n");
    let addr = format!("127.0.0.1:{port}");
    let (text, _) = raw_exchange(&addr, head.as_bytes(), Duration::from_secs(10));
    text.lines().next().unwrap_or("").to_owned()
}

#[test]
fn aliases_of_a_title_are_404_and_open_nothing() {
    let (mut s, port) = Server::start_http_with("", |root| {
        fs::create_dir(root.join("films")).unwrap();
        fs::copy(&media().clip, root.join("films/movie.ts")).unwrap();
        fs::copy(&media().clip, root.join("clip.ts")).unwrap();
    });
    assert!(get(port, "/films/movie.ts", "").contains(" 200 "));
    let before = s.open_files();
    for i in 0..1000 {
        let alias = match i % 4 {
            0 => format!("/films/{}movie.ts", "/".repeat(1 + i / 4 % 8)),
            1 => format!("/films/{}movie.ts/index.m3u8", "./".repeat(1 + i / 4 % 8)),
            2 => format!("/{}films/movie.ts", "%2e/".repeat(1 + i / 4 % 8)),
            _ => format!("/films/x/..{}/movie.ts", "/.".repeat(i / 4 % 8)),
        };
        let status = get(port, &alias, "");
        assert!(status.contains(" 404 "), "{alias}: {status}");
    }
    let after = s.open_files();
    assert!(
        after <= before + 4,
        "open files went from {before} to {after}"
    );
    s.assert_healthy();
}

#[test]
fn titles_nothing_holds_are_unloaded_past_max_loaded_titles() {
    let names: Vec<String> = (0..24).map(|i| format!("t{i}.ts")).collect();
    let (mut s, port) = Server::start_http_with(
        "max_loaded_titles = 4\nfec = \"off\"\nprefab = false\n",
        |root| {
            fs::copy(&media().clip, root.join("clip.ts")).unwrap();
            for n in &names {
                fs::hard_link(root.join("clip.ts"), root.join(n)).unwrap();
            }
        },
    );
    assert!(get(port, "/clip.ts", "").contains(" 200 "));
    let one = s.open_files();
    for n in &names {
        assert!(
            get(port, &format!("/{n}"), "Range: bytes=0-187\r\n").contains(" 206 "),
            "{n}"
        );
    }
    // Titles still being verified in the background are held: unloaded at
    // the next open once their check is done.
    std::thread::sleep(Duration::from_secs(2));
    assert!(get(port, "/clip.ts", "Range: bytes=0-187\r\n").contains(" 206 "));
    let all = s.open_files();
    // A loaded title holds a few descriptors; 24 of them would hold ~50.
    assert!(
        all <= one + 16,
        "open files went from {one} to {all} over 24 titles"
    );
    s.assert_healthy();
}

/// CPU seconds a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Out of descriptors, the accept loops rest instead of spinning, and
/// serve again once some are free.
#[test]
fn a_server_out_of_descriptors_does_not_spin_and_recovers() {
    let (mut s, port) = Server::start_http("");
    s.assert_healthy();
    let limit = s.open_files() + 8;
    let set = Command::new("prlimit")
        .arg(format!("--pid={}", s.pid()))
        .arg(format!("--nofile={limit}:"))
        .status()
        .unwrap();
    assert!(set.success());
    let held: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let cpu = cpu_seconds(s.pid());
    std::thread::sleep(Duration::from_secs(3));
    let spent = cpu_seconds(s.pid()) - cpu;
    assert!(
        spent < 0.5,
        "the server used {spent:.2} s of CPU in 3 s while starved"
    );
    assert!(
        s.log_text().contains("cannot accept connections"),
        "{}",
        s.log_text()
    );
    drop(held);
    let raise = Command::new("prlimit")
        .arg(format!("--pid={}", s.pid()))
        .arg("--nofile=4096:")
        .status()
        .unwrap();
    assert!(raise.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get(port, "/clip.ts", "Range: bytes=0-187\r\n").contains(" 206 ") {
        assert!(Instant::now() < deadline, "not serving again");
        std::thread::sleep(Duration::from_millis(200));
    }
    s.assert_healthy();
}

/// Clients that finish a TLS handshake and then say nothing hold no
/// descriptor past the HTTP connection's idle timeout.
#[test]
fn a_silent_tls_client_holds_nothing_past_its_timeout() {
    let keys = tempfile::tempdir().unwrap();
    let config = format!(
        "{}rtsps_port = 0\nidle_timeout_s = 2\nrequest_timeout_s = 2\n",
        certificate(keys.path())
    );
    let (mut s, port) = Server::start_http(&config);
    let before = s.open_files();
    let script = format!(
        "import socket, ssl, sys, time\n\
         ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n\
         ctx.check_hostname = False\n\
         ctx.verify_mode = ssl.CERT_NONE\n\
         held = [ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port}))) for _ in range(20)]\n\
         print('ready', flush=True)\n\
         time.sleep(12)\n"
    );
    let mut silent = Command::new("python3")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(silent.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    let during = s.open_files();
    std::thread::sleep(Duration::from_secs(6));
    let after = s.open_files();
    let _ = silent.kill();
    let _ = silent.wait();
    assert!(
        during >= before + 20,
        "the handshakes held descriptors: {before} → {during}"
    );
    assert!(
        after <= before + 2,
        "descriptors {before} → {during} → {after} (still silent)"
    );
    s.assert_healthy();
}

/// The raw answer of the admin listener to `GET /api/v1/sessions` with
/// this `Host`.
fn admin_with_host(s: &Server, host: &str) -> String {
    let addr = s.admin().trim_start_matches("http://").to_owned();
    let head =
        format!("GET /api/v1/sessions HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    raw_exchange(&addr, head.as_bytes(), Duration::from_secs(10)).0
}

#[test]
fn the_admin_listener_answers_only_hosts_that_name_it() {
    let mut s =
        Server::start("admin_bind = \"127.0.0.1:0\"\nadmin_hosts = [\"fjord-admin.test\"]\n");
    let addr = s.admin().trim_start_matches("http://").to_owned();
    for ok in [addr.as_str(), "localhost:9090", "fjord-admin.test:9090"] {
        let r = admin_with_host(&s, ok);
        assert!(r.starts_with("HTTP/1.1 200 "), "{ok}: {r}");
        let lower = r.to_ascii_lowercase();
        assert!(lower.contains("x-frame-options: deny"), "{r}");
        assert!(lower.contains("frame-ancestors 'none'"), "{r}");
    }
    for rebinding in ["attacker.example:9090", "127.0.0.1.attacker.example"] {
        let r = admin_with_host(&s, rebinding);
        assert!(r.starts_with("HTTP/1.1 403 "), "{rebinding}: {r}");
    }
    s.assert_healthy();
}

/// Globs are matched against the canonical name of what is served: not
/// against an alias, and a title named like a playlist or segment is
/// checked under its own name, not its directory's.
#[test]
fn a_glob_is_checked_against_the_name_of_what_is_served() {
    let users = format!("[[user]]\npaths = [\"shows/*/trailer.ts\", \"films\"]\n{ALICE}");
    let (mut s, port) = Server::start_http_with(&users, |root| {
        fs::create_dir_all(root.join("shows/a")).unwrap();
        fs::copy(&media().clip, root.join("shows/a/trailer.ts")).unwrap();
        fs::copy(&media().clip, root.join("shows/a/episode.ts")).unwrap();
        fs::create_dir(root.join("films")).unwrap();
        fs::copy(&media().clip, root.join("films/init.mp4")).unwrap();
        fs::copy(&media().clip, root.join("clip.ts")).unwrap();
    });
    assert!(get(port, "/shows/a/trailer.ts", "").contains(" 200 "));
    for (target, not) in [
        ("/shows//trailer.ts", " 200 "),
        ("/shows/a/episode.ts", " 200 "),
        ("/films/init.mp4", " 200 "),
    ] {
        let status = get(port, target, "");
        assert!(!status.contains(not), "{target}: {status}");
    }
    let _ = &mut s;
}

/// A typo in a config file read on SIGHUP is logged by line and column,
/// never with the line (which may hold a password).
#[test]
fn a_config_typo_does_not_log_its_password() {
    let mut s = Server::start("");
    let cfg = s.config_path();
    fs::write(
        &cfg,
        "[[user]]\nname = \"alice\"\npasword = \"hunter2-in-the-log\"\n",
    )
    .unwrap();
    s.signal("HUP");
    s.wait_for_log("line 3", Duration::from_secs(10));
    assert!(!s.log_text().contains("hunter2"), "{}", s.log_text());
    s.assert_healthy();
}

//! Child processes that cannot hang a test: run to completion with a time
//! limit, their output collected.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub timed_out: bool,
}

/// Runs `program` with `args` to completion within `limit` and asserts
/// that it succeeded; its standard output.
pub fn stdout_of(program: &str, args: &[&str], limit: Duration) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let out = run_bounded(cmd, limit);
    assert!(
        !out.timed_out && out.status.success(),
        "{program} {args:?}: {}",
        out.stderr
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd` to completion, killing it after `limit`.
pub fn run_bounded(cmd: Command, limit: Duration) -> Output {
    run_bounded_with(cmd, limit, None)
}

/// Like [`run_bounded`], but at `interrupt_after` sends SIGINT first (for
/// programs that flush on it), then kills at `limit`.
pub fn run_bounded_with(
    mut cmd: Command,
    limit: Duration,
    interrupt_after: Option<Duration>,
) -> Output {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    });
    let mut timed_out = false;
    let mut interrupted = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        let elapsed = start.elapsed();
        if let Some(t) = interrupt_after
            && !interrupted
            && elapsed >= t
        {
            interrupted = true;
            timed_out = true;
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        if elapsed >= limit {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
        timed_out,
    }
}

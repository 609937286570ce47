//! The peer servers as child processes: fjord, live555MediaServer and
//! GStreamer's rtsp-server found on this machine (or the package to
//! install), each started pinned to one CPU in a process group of its own
//! and killed with it.

use std::{
    io::{BufRead, BufReader, Read},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::capacity::pin_current_thread;

pub(super) const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The SCHED_FIFO priority of `--realtime` (fjord's own `realtime = true`
/// uses a low one too).
pub const REALTIME_PRIORITY: i32 = 10;

/// The port of the URL live555MediaServer prints, e.g.
/// `rtsp://192.0.2.2:8554/<filename>` (554 when it names none).
pub fn live555_port(banner: &str) -> Option<u16> {
    let rest = &banner[banner.find("rtsp://")? + 7..];
    let host = &rest[..rest.find('/')?];
    let port = match host.rsplit_once(']') {
        Some((_, p)) => p.strip_prefix(':'),
        None => host.split_once(':').map(|(_, p)| p),
    };
    match port {
        Some(p) => p.parse().ok(),
        None => Some(554),
    }
}

/// The library version live555MediaServer prints.
pub fn live555_version(banner: &str) -> Option<String> {
    let at = banner.find("library version ")? + 16;
    let v: String = banner[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v = v.trim_end_matches('.');
    (!v.is_empty()).then(|| v.to_string())
}

/// `live555MediaServer` on the PATH, or why not.
pub fn find_live555() -> Result<PathBuf, String> {
    find_on_path("live555MediaServer").ok_or_else(|| {
        "live555MediaServer: skipped, not installed (apt-get install livemedia-utils; Debian \
         bookworm and trixie have none: `make peers` takes sid's)"
            .to_string()
    })
}

pub(super) fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A Python with GStreamer's rtsp-server bindings and the elements the
/// pipeline needs, and the GStreamer version; or why not.
pub fn find_gst_python() -> Result<(PathBuf, String), String> {
    const CHECK: &str = "import gi; gi.require_version('Gst','1.0'); \
        gi.require_version('GstRtspServer','1.0'); \
        from gi.repository import Gst, GstRtspServer; Gst.init(None); \
        missing=[e for e in ('filesrc','tsparse','rtpmp2tpay') if not Gst.ElementFactory.find(e)]; \
        print('missing:' + ','.join(missing) if missing else Gst.version_string())";
    let mut why = String::new();
    // The system Python first: python3-gi installs for it, not for others
    // (pyenv, venvs) that may come first on the PATH.
    for py in ["/usr/bin/python3", "python3"] {
        let out = match Command::new(py).args(["-c", CHECK]).output() {
            Ok(o) => o,
            Err(_) => continue,
        };
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !text.starts_with("missing:") {
            return Ok((PathBuf::from(py), text));
        }
        if let Some(m) = text.strip_prefix("missing:") {
            why = format!(
                "GStreamer elements {m} missing (apt-get install gstreamer1.0-plugins-base \
                 gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)"
            );
        }
    }
    if why.is_empty() {
        why = "not installed (apt-get install python3-gi gir1.2-gst-rtsp-server-1.0 \
               gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)"
            .into();
    }
    Err(format!("GStreamer rtsp-server: skipped, {why}"))
}

/// A server child process: pinned to one CPU, in its own process group,
/// killed (the whole group) when dropped and when this process dies.
pub struct ServerChild {
    child: Child,
    /// What it printed (stdout and stderr), for error messages.
    log: Arc<Mutex<Vec<String>>>,
    /// `host:port` of its admin listener (fjord's), if it printed one.
    pub admin: Option<String>,
    /// Processes that live and die with it (MediaMTX's publisher).
    pub helpers: Vec<ServerChild>,
}

impl ServerChild {
    /// Spawns `cmd` and waits up to `timeout` for a line from which
    /// `ready` makes the URL; `ready` sees every line until then, so it
    /// can keep what earlier ones said.
    pub fn spawn(
        cmd: Command,
        cpu: usize,
        realtime: bool,
        timeout: Duration,
        mut ready: impl FnMut(&str) -> Option<String>,
    ) -> anyhow::Result<(Self, String)> {
        let program = cmd.get_program().to_string_lossy().into_owned();
        let (mut server, rx) = Self::launch(cmd, cpu, realtime)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(url) = ready(&line) {
                        return Ok((server, url));
                    }
                }
                Err(e) => {
                    let status = server.child.try_wait().ok().flatten();
                    bail!(
                        "{program} did not start ({}{}): {}",
                        match e {
                            mpsc::RecvTimeoutError::Timeout => "no URL in time",
                            mpsc::RecvTimeoutError::Disconnected => "output closed",
                        },
                        status.map(|s| format!(", {s}")).unwrap_or_default(),
                        server.log_text()
                    );
                }
            }
        }
    }

    /// Spawns `cmd` pinned to `cpu` in a process group of its own; the
    /// lines it prints arrive on the receiver (and are kept for the log).
    pub fn launch(
        mut cmd: Command,
        cpu: usize,
        realtime: bool,
    ) -> anyhow::Result<(Self, mpsc::Receiver<String>)> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: only async-signal-safe system calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                pin_current_thread(cpu);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if realtime {
                    // Threads it makes inherit the policy.
                    let param = libc::sched_param {
                        sched_priority: REALTIME_PRIORITY,
                    };
                    if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let mut child = cmd.spawn().with_context(|| format!("starting {program}"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let out = child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>);
        let err = child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>);
        for pipe in [out, err].into_iter().flatten() {
            let (tx, log) = (tx.clone(), log.clone());
            // Drains the pipe until the child exits, so it never blocks.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Ok(mut l) = log.lock()
                        && l.len() < 200
                    {
                        l.push(line.clone());
                    }
                    let _ = tx.send(line);
                }
            });
        }
        let server = ServerChild {
            child,
            log,
            admin: None,
            helpers: Vec::new(),
        };
        Ok((server, rx))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed, one line after another.
    pub fn log_text(&self) -> String {
        self.log.lock().map(|l| l.join(" | ")).unwrap_or_default()
    }

    /// Whole banner printed so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        // The group: whatever it started dies with it.
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerChild {
    pub fn child_alive(&self) -> bool {
        // SAFETY: signal 0 only checks the process exists.
        unsafe { libc::kill(self.child.id() as i32, 0) == 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live555_banner() {
        let b = "Play streams from this server using the URL\n\trtsp://192.0.2.2/<filename>\n";
        assert_eq!(live555_port(b), Some(554));
        assert_eq!(
            live555_port("\trtsp://10.0.0.1:8554/<filename>"),
            Some(8554)
        );
        assert_eq!(
            live555_port("\trtsp://[fd00::2]:8554/<filename>"),
            Some(8554)
        );
        assert_eq!(live555_port("\trtsp://[fd00::2]/<filename>"), Some(554));
        assert_eq!(live555_port("LIVE555 Media Server"), None);
        let v = "\tversion 1.16 (LIVE555 Streaming Media library version 2026.10.24).";
        assert_eq!(live555_version(v).as_deref(), Some("2026.10.24"));
        assert_eq!(live555_version("nothing"), None);
    }
}

//! MediaMTX as a peer: a live relay, not video on demand. It serves no
//! stored file, so its row is a fan-out: ffmpeg pushes the title once
//! (`-re`, the title's own pace, stream copy) and every receiver reads the
//! one live path. What MediaMTX spends is relaying, with no disk and no
//! per-session reading; the publisher's CPU is ffmpeg's, not counted.
//!
//! The binary is not installable here (no registry serves it): it is taken
//! from `$FJORD_MEDIAMTX`, the PATH, or `shared/peers/mediamtx` beside the
//! repository, and the row is skipped with [`MEDIAMTX_SKIP`] otherwise.

use std::{
    net::{TcpListener, UdpSocket},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::bail;

use super::server::{START_TIMEOUT, ServerChild, find_on_path};

/// Why MediaMTX is not measured when its binary is absent.
pub const MEDIAMTX_SKIP: &str = "MediaMTX: skipped, no binary (no package registry here serves it; \
     put one on the PATH, in $FJORD_MEDIAMTX or at shared/peers/mediamtx beside the repository)";

/// The path the title is published on.
const PATH: &str = "peers";

/// The MediaMTX binary, or why not.
pub fn find() -> Result<PathBuf, String> {
    let beside_repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers/mediamtx");
    let env = std::env::var_os("FJORD_MEDIAMTX").map(PathBuf::from);
    first_file(
        env.into_iter()
            .chain(find_on_path("mediamtx"))
            .chain([beside_repo]),
    )
}

fn first_file(mut candidates: impl Iterator<Item = PathBuf>) -> Result<PathBuf, String> {
    candidates
        .find(|p| p.is_file())
        .ok_or_else(|| MEDIAMTX_SKIP.to_string())
}

/// `MediaMTX v…`, as the binary says.
pub fn version(exe: &Path) -> String {
    let out = Command::new(exe).arg("--version").output();
    let v = out
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("MediaMTX {v}").trim().to_string()
}

/// A free TCP port and a free even UDP port whose successor is free too
/// (MediaMTX's RTP/RTCP pair), on loopback. Bound and let go: a race with
/// another program is possible and fails the run with MediaMTX's message.
fn free_ports() -> anyhow::Result<(u16, u16)> {
    let rtsp = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    for _ in 0..100 {
        let p = UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port() & !1;
        if p < 1024 {
            continue;
        }
        if let (Ok(_), Ok(_)) = (
            UdpSocket::bind(("127.0.0.1", p)),
            UdpSocket::bind(("127.0.0.1", p + 1)),
        ) {
            return Ok((rtsp, p));
        }
    }
    bail!("no free UDP port pair on 127.0.0.1")
}

/// The configuration: RTSP only (over UDP and TCP) on loopback, every other
/// server off, so its CPU is the RTSP relay's.
pub fn config(rtsp: u16, rtp: u16) -> String {
    format!(
        "logLevel: info\n\
         rtsp: true\nrtspTransports: [udp, tcp]\n\
         rtspAddress: 127.0.0.1:{rtsp}\nrtpAddress: 127.0.0.1:{rtp}\nrtcpAddress: 127.0.0.1:{}\n\
         rtmp: false\nhls: false\nwebrtc: false\nsrt: false\nmoq: false\n\
         api: false\nmetrics: false\npprof: false\nplayback: false\n\
         paths:\n  all_others:\n",
        rtp + 1
    )
}

/// The publisher's command: the title's video, copied, at its own pace,
/// looped. Video only: ffmpeg 5 cannot copy the TS's ADTS AAC into RTSP,
/// and the receivers set up the first track alone anyway.
pub fn publisher(title: &Path, url: &str) -> Command {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-nostdin", "-loglevel", "warning"])
        .args(["-re", "-stream_loop", "-1", "-i"])
        .arg(title)
        .args([
            "-map",
            "0:v",
            "-c",
            "copy",
            "-f",
            "rtsp",
            "-rtsp_transport",
            "tcp",
        ])
        .arg(url);
    cmd
}

/// Starts MediaMTX (pinned to `cpu`) in `dir` with its own ports, then the
/// ffmpeg publisher (pinned to `publisher_cpu`), and waits until the title
/// is online. The publisher dies with the returned server.
pub fn start(
    exe: &Path,
    dir: &Path,
    title: &Path,
    cpu: usize,
    publisher_cpu: usize,
    realtime: bool,
) -> anyhow::Result<(ServerChild, String)> {
    let (rtsp, rtp) = free_ports()?;
    let yml = dir.join("mediamtx.yml");
    std::fs::write(&yml, config(rtsp, rtp))?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(dir).arg(&yml);
    let (mut server, _) = ServerChild::spawn(cmd, cpu, realtime, START_TIMEOUT, |l| {
        l.contains("[RTSP] started").then(String::new)
    })?;
    let url = format!("rtsp://127.0.0.1:{rtsp}/{PATH}");
    let (push, _) = ServerChild::launch(publisher(title, &url), publisher_cpu, false)?;
    server.helpers.push(push);
    let deadline = Instant::now() + START_TIMEOUT;
    let publishing = |s: &ServerChild| {
        s.log_lines()
            .iter()
            .any(|l| l.contains(&format!("is publishing to path '{PATH}'")))
    };
    while !publishing(&server) {
        if Instant::now() > deadline || !server.helpers[0].child_alive() {
            bail!(
                "MediaMTX: the ffmpeg publisher did not come online: {} | ffmpeg: {}",
                server.log_text(),
                server.helpers[0].log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((server, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_rtsp_on_loopback_alone() {
        let c = config(18554, 18000);
        assert!(c.contains("rtspAddress: 127.0.0.1:18554\n"), "{c}");
        assert!(c.contains("rtpAddress: 127.0.0.1:18000\nrtcpAddress: 127.0.0.1:18001\n"));
        for off in ["rtmp", "hls", "webrtc", "srt", "moq", "api", "metrics"] {
            assert!(c.contains(&format!("\n{off}: false\n")), "{off}: {c}");
        }
    }

    #[test]
    fn skipped_with_the_message_without_a_binary() {
        let none = ["/nonexistent/mediamtx", "/"].map(PathBuf::from);
        assert_eq!(first_file(none.into_iter()), Err(MEDIAMTX_SKIP.to_string()));
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let found = first_file([PathBuf::from("/"), tmp.path().into()].into_iter());
        assert_eq!(found.as_deref(), Ok(tmp.path()));
    }

    #[test]
    fn free_ports_are_an_even_pair() {
        let (rtsp, rtp) = free_ports().unwrap();
        assert!(rtsp > 0 && rtp % 2 == 0 && rtp >= 1024);
    }
}

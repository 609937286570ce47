//! The test title the benchmarks encode: 1280x720 25 fps H.264 at a
//! constant bit rate + AAC 128 kbit/s, in MPEG-TS at a fixed mux rate.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::bail;

/// Encodes `seconds` of the test title into `out` with ffmpeg: video at
/// `video_kbps` (CBR, HRD-conformant), the TS muxed at `mux_bps`.
pub fn encode(out: &Path, seconds: u64, video_kbps: u64, mux_bps: u64) -> anyhow::Result<()> {
    let rate = format!("{video_kbps}k");
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-y"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
        .args(["-t", &seconds.to_string()])
        .args(["-c:v", "libx264", "-preset", "veryfast", "-g", "50"])
        .args(["-b:v", &rate, "-minrate", &rate, "-maxrate", &rate])
        .args(["-bufsize", &format!("{}k", video_kbps / 2)])
        .args(["-x264-params", "nal-hrd=cbr"])
        .args(["-c:a", "aac", "-b:a", "128k"])
        .args(["-f", "mpegts", "-muxrate", &mux_bps.to_string()])
        .arg(out)
        .stdin(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => bail!("ffmpeg failed ({s}) making {}", out.display()),
        Err(e) => bail!("ffmpeg is needed to make test titles (apt-get install ffmpeg): {e}"),
    }
}

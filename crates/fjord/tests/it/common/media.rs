//! Test media: the two clips every server gets (made by ffmpeg once per
//! target dir), and other media made the same way.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use super::{Output, run_bounded};

/// The test clips, generated on first use.
pub struct Media {
    /// H.264 + AAC, 10 s, GOP 1 s, ~1.6 Mbit/s.
    pub clip: PathBuf,
    /// H.264 (CRF) + AAC, 10 s, 30 kB/s static then ~550 kB/s noise (4-7 s).
    pub vbr: PathBuf,
}

/// Bumped whenever a recipe changes, so stale cached media is not reused.
const MEDIA_VERSION: &str = "v1";

pub fn media() -> &'static Media {
    static MEDIA: OnceLock<Media> = OnceLock::new();
    MEDIA.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-media");
        fs::create_dir_all(&dir).expect("create test-media dir");
        let clip = TsClip {
            size: "640x360",
            tone: 440,
            seconds: 10,
            rates: ("1.5M", "128k"),
            extra: &[],
        };
        let clip = generate(&dir, &format!("clip-{MEDIA_VERSION}.ts"), &clip.args());
        let vbr = generate(
            &dir,
            &format!("vbr-{MEDIA_VERSION}.ts"),
            &[
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=320x180:rate=25",
                "-f",
                "lavfi",
                "-i",
                "sine=frequency=660:sample_rate=48000",
                "-t",
                "10",
                "-vf",
                "noise=alls=80:allf=t+u:enable='between(t,4,7)'",
                "-c:v",
                "libx264",
                "-preset",
                "veryfast",
                "-g",
                "25",
                "-crf",
                "23",
                "-c:a",
                "aac",
                "-b:a",
                "96k",
                "-f",
                "mpegts",
            ],
        );
        Media { clip, vbr }
    })
}

pub fn clip_bytes() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| fs::read(&media().clip).unwrap())
}

pub fn vbr_bytes() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| fs::read(&media().vbr).unwrap())
}

/// An H.264 + AAC MPEG-TS test clip: testsrc2 at `size` (25 frames a
/// second) and a `tone` Hz sine, a keyframe a second.
pub struct TsClip<'a> {
    pub size: &'a str,
    pub tone: u32,
    pub seconds: u32,
    /// The video and audio bit rates (`-b:v`, `-b:a`).
    pub rates: (&'a str, &'a str),
    /// More output options (a mux rate).
    pub extra: &'a [&'a str],
}

/// Three seconds muxed at 10 Mbit/s, 1.25 MB/s whatever the codecs
/// make of them: a title whose stream rate admission tests know.
pub fn muxed_10mbit() -> PathBuf {
    TsClip::muxed_10mbit().make("readahead-10m.ts")
}

impl TsClip<'_> {
    /// [`muxed_10mbit`]'s clip, to vary.
    pub fn muxed_10mbit() -> TsClip<'static> {
        TsClip {
            size: "320x240",
            tone: 660,
            seconds: 3,
            rates: ("700k", "64k"),
            extra: &["-muxrate", "10000000"],
        }
    }

    /// The clip, made as `name` once per target dir.
    pub fn make(&self, name: &str) -> PathBuf {
        generate_media(name, &self.args())
    }

    fn args(&self) -> Vec<String> {
        let (video, audio) = self.rates;
        let mut args: Vec<String> = [
            "-f",
            "lavfi",
            "-i",
            &format!("testsrc2=size={}:rate=25", self.size),
            "-f",
            "lavfi",
            "-i",
            &format!("sine=frequency={}:sample_rate=48000", self.tone),
            "-t",
            &self.seconds.to_string(),
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-g",
            "25",
            "-b:v",
            video,
            "-c:a",
            "aac",
            "-b:a",
            audio,
        ]
        .map(str::to_owned)
        .into();
        args.extend(self.extra.iter().map(|&a| a.to_owned()));
        args.extend(["-f", "mpegts"].map(str::to_owned));
        args
    }
}

/// Copies each `(source, name)` into `dir` and ingests them there with
/// `fjord ingest ARGS`, which must succeed.
pub fn ingest<P: AsRef<Path>>(dir: &Path, args: &[&str], files: &[(P, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fjord"));
    cmd.arg("ingest").args(args);
    for (source, name) in files {
        fs::copy(source, dir.join(name)).unwrap();
        cmd.arg(dir.join(name));
    }
    let out = run_bounded(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "ingest: {}", out.stderr);
    out
}

/// Test media `name` made by ffmpeg with `args` (once per target dir).
pub fn generate_media(name: &str, args: &[impl AsRef<OsStr>]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-media");
    fs::create_dir_all(&dir).expect("create test-media dir");
    generate(&dir, &format!("{MEDIA_VERSION}-{name}"), args)
}

/// Makes `dir/name` with ffmpeg unless it exists. A lock file keeps
/// parallel test processes from generating it twice; the output is written
/// to a temporary name and renamed, so a reader never sees half a file.
fn generate(dir: &Path, name: &str, args: &[impl AsRef<OsStr>]) -> PathBuf {
    let out = dir.join(name);
    let lock = dir.join(format!("{name}.lock"));
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if out.exists() {
            return out;
        }
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => break,
            Err(_) => {
                // Another process is generating; a lock older than 2 min is stale.
                let stale = fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .map(|t| SystemTime::now().duration_since(t).unwrap_or_default())
                    .is_ok_and(|age| age > Duration::from_secs(120));
                if stale {
                    let _ = fs::remove_file(&lock);
                }
                assert!(Instant::now() < deadline, "timed out waiting for {lock:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let tmp = dir.join(format!("{name}.tmp{}", std::process::id()));
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-loglevel", "error", "-y"])
        .args(args)
        .arg(&tmp);
    let result = run_bounded(cmd, Duration::from_secs(120));
    if result.status.success() {
        fs::rename(&tmp, &out).expect("rename generated media");
    }
    let _ = fs::remove_file(&lock);
    assert!(
        result.status.success(),
        "ffmpeg failed making {name} (is ffmpeg installed? `make test` installs it): {}",
        result.stderr
    );
    out
}

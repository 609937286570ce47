//! The titles of `fjord bench storage`: an existing library, or one made
//! here (one clip encoded by ffmpeg, each title that clip looped by
//! `ffmpeg -stream_loop -c copy` to a size of its own) and ingested with
//! `fjord ingest`. Made libraries are kept and reused.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

/// The mux rate of made titles, bits per second.
pub const MUX_RATE: u64 = 4_500_000;
/// Seconds of the encoded clip (titles loop it).
pub const CLIP_SECONDS: u64 = 60;

/// One title of the library.
#[derive(Clone, Debug)]
pub struct Title {
    /// The media file.
    pub path: PathBuf,
    /// Its name under the library root (its URL path).
    pub name: String,
    pub bytes: u64,
}

/// A library ready to serve.
#[derive(Clone, Debug)]
pub struct Library {
    pub root: PathBuf,
    pub titles: Vec<Title>,
    /// How it came to be, for the report.
    pub origin: String,
}

impl Library {
    /// Bytes of the media files.
    pub fn media_bytes(&self) -> u64 {
        self.titles.iter().map(|t| t.bytes).sum()
    }

    /// Bytes of the media files and everything beside them that a server
    /// reads (index, parity, packets).
    pub fn total_bytes(&self) -> u64 {
        self.titles
            .iter()
            .flat_map(|t| sidecars(&t.path).into_iter().chain([t.path.clone()]))
            .filter_map(|p| fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// The files `fjord ingest` writes beside `media`.
pub fn sidecars(media: &Path) -> Vec<PathBuf> {
    ["fjidx", "fjfec", "fjpkt"]
        .iter()
        .map(|ext| {
            let mut s = media.as_os_str().to_owned();
            s.push(".");
            s.push(ext);
            PathBuf::from(s)
        })
        .collect()
}

fn is_ingested(media: &Path) -> bool {
    sidecars(media)[0].exists()
}

/// `$XDG_CACHE_HOME/fjord/storage-library` (or `~/.cache/…`).
pub fn default_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("bench"))
        .join("fjord")
        .join("storage-library")
}

fn bar(len: u64, what: &str, show: bool) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len).with_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b.set_message(what.to_string());
    b.enable_steady_tick(Duration::from_millis(200));
    b
}

/// The titles under `root` (every file that is not hidden and not a
/// sidecar), ingesting those without an index.
pub fn existing(root: &Path, fjord: &Path, progress: bool) -> anyhow::Result<Library> {
    let mut titles = Vec::new();
    walk(root, root, &mut titles)?;
    titles.sort_by(|a, b| a.name.cmp(&b.name));
    if titles.is_empty() {
        bail!("no titles under {}", root.display());
    }
    let todo: Vec<&Title> = titles.iter().filter(|t| !is_ingested(&t.path)).collect();
    let b = bar(
        todo.len() as u64,
        "fjord ingest",
        progress && !todo.is_empty(),
    );
    for t in todo {
        b.set_message(format!("fjord ingest {}", t.name));
        ingest(fjord, &t.path)?;
        b.inc(1);
    }
    b.finish_and_clear();
    Ok(Library {
        root: root.to_path_buf(),
        titles,
        origin: format!("existing titles under {}", root.display()),
    })
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Title>) -> anyhow::Result<()> {
    for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if name.starts_with('.') {
            continue;
        }
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(root, &path, out)?;
        } else if ft.is_file()
            && !name.ends_with(".fjidx")
            && !name.ends_with(".fjfec")
            && !name.ends_with(".fjpkt")
        {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(Title {
                name: rel.to_string_lossy().into_owned(),
                bytes: e.metadata()?.len(),
                path,
            });
        }
    }
    Ok(())
}

/// `fjord ingest PATH` (index, parity, packets), output kept for errors.
pub fn ingest(fjord: &Path, media: &Path) -> anyhow::Result<()> {
    let out = Command::new(fjord)
        .arg("ingest")
        .arg(media)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} ingest", fjord.display()))?;
    if !out.status.success() {
        bail!(
            "fjord ingest {} failed ({}): {}",
            media.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Encodes the clip all titles loop: `seconds` of 1280x720 25 fps H.264
/// (CBR 4.3 Mbit/s) + AAC 128 kbit/s, MPEG-TS at the mux rate.
pub fn make_clip(path: &Path, seconds: u64) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let tmp = path.with_extension("tmp.ts");
    crate::clip::encode(&tmp, seconds, 4300, MUX_RATE)?;
    fs::rename(&tmp, path)?;
    Ok(())
}

/// The clip a made library's titles loop, when it is still there.
pub fn clip_of(lib: &Library) -> Option<PathBuf> {
    let cache = lib.root.parent()?;
    fs::read_dir(cache)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".clip-") && n.ends_with(".ts"))
        })
}

/// The command that writes a title of `bytes` looping `clip` (stream
/// copy: no encoding) to `out`.
pub fn loop_command(clip: &Path, bytes: u64, out: &Path) -> Command {
    let mut c = Command::new("ffmpeg");
    c.args(["-nostdin", "-loglevel", "error", "-y"])
        .args(["-stream_loop", "-1", "-i"])
        .arg(clip)
        .args(["-c", "copy", "-f", "mpegts", "-fs", &bytes.to_string()])
        .arg(out)
        .stdin(Stdio::null());
    c
}

/// Seconds of a made title of `mb` MB at the mux rate.
pub fn seconds_of(mb: u64) -> f64 {
    mb as f64 * 1e6 * 8.0 / MUX_RATE as f64
}

/// N distinct titles of about `mb` MB each under `cache/tN-MMB/`, made
/// and ingested unless already there. Title i is `mb` MB + i × 188 KB
/// (every title a different length, so no two files are alike).
pub fn made(
    cache: &Path,
    n: usize,
    mb: u64,
    fjord: &Path,
    progress: bool,
) -> anyhow::Result<Library> {
    if n == 0 || mb == 0 {
        bail!("--titles and --title-mb must be at least 1");
    }
    let root = cache.join(format!("t{n}-{mb}mb"));
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    // The clip: 60 s, or shorter for small titles so making them stays quick.
    let clip_s = (seconds_of(mb) as u64).clamp(10, CLIP_SECONDS);
    let clip = cache.join(format!(".clip-{clip_s}s.ts"));
    let mut titles = Vec::new();
    let todo = (0..n)
        .filter(|i| !is_ingested(&root.join(format!("title-{i:02}.ts"))))
        .count();
    let b = bar(todo as u64, "making titles", progress && todo > 0);
    if todo > 0 && !clip.exists() {
        b.set_message(format!(
            "encoding the clip: {clip_s} s of 720p25 H.264 + AAC at 4.5 Mbit/s (ffmpeg)"
        ));
        make_clip(&clip, clip_s)?;
    }
    for i in 0..n {
        let name = format!("title-{i:02}.ts");
        let path = root.join(&name);
        if !is_ingested(&path) {
            let bytes = mb * 1_000_000 + i as u64 * 188_000;
            b.set_message(format!(
                "{name}: looping the clip to {mb} MB (ffmpeg -c copy)"
            ));
            let tmp = root.join(format!(".{name}.tmp"));
            let status = loop_command(&clip, bytes, &tmp)
                .status()
                .context("running ffmpeg")?;
            if !status.success() {
                bail!("ffmpeg failed ({status}) making {}", path.display());
            }
            fs::rename(&tmp, &path)?;
            b.set_message(format!("{name}: fjord ingest (index, parity, packets)"));
            ingest(fjord, &path)?;
            b.inc(1);
        }
        titles.push(Title {
            bytes: fs::metadata(&path)?.len(),
            name,
            path,
        });
    }
    b.finish_and_clear();
    Ok(Library {
        origin: format!(
            "{n} titles of about {mb} MB ({:.0} s each), a {clip_s} s clip (1280x720 25 fps H.264 CBR 4.3 Mbit/s + AAC 128 kbit/s, MPEG-TS mux rate 4.5 Mbit/s, ffmpeg) looped with -stream_loop -c copy; kept in {}",
            seconds_of(mb),
            root.display()
        ),
        root,
        titles,
    })
}

/// Reads every file of the library once (media and sidecars) so the page
/// cache holds it, for the baseline.
pub fn warm(lib: &Library, progress: bool) -> anyhow::Result<()> {
    use std::io::Read;
    let files: Vec<PathBuf> = lib
        .titles
        .iter()
        .flat_map(|t| sidecars(&t.path).into_iter().chain([t.path.clone()]))
        .filter(|p| p.exists())
        .collect();
    let total: u64 = files
        .iter()
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let b = bar(total >> 20, "warming the page cache (MiB)", progress);
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    for f in files {
        let mut file = fs::File::open(&f)?;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            done += n as u64;
            b.set_position(done >> 20);
        }
    }
    b.finish_and_clear();
    Ok(())
}

//! The cluster's library: many small titles (`bench storage`'s library
//! grows each title by 188 KB, too much for hundreds), each the clip looped
//! to `mb` MB + i × 1,880 bytes (every file different), ingested, kept
//! under the bench cache for the next run.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::storage::library::{self, Library, Title};

/// `n` titles of about `mb` MB under `cache/cluster-library/tN-MMB/`, made
/// and ingested unless already there.
pub fn made(cache: &Path, n: usize, mb: u64, fjord: &Path) -> anyhow::Result<Library> {
    if n == 0 || mb == 0 {
        bail!("--titles and --title-mb must be at least 1");
    }
    let root = cache.join(format!("t{n}-{mb}mb"));
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let clip = cache.join(".clip-10s.ts");
    let mut titles = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("title-{i:03}.ts");
        let path = root.join(&name);
        if !library::sidecars(&path)[0].exists() {
            if !clip.exists() {
                eprintln!("encoding a 10 s clip (ffmpeg)");
                library::make_clip(&clip, 10)?;
            }
            let tmp = root.join(format!(".{name}.tmp"));
            let bytes = mb * 1_000_000 + i as u64 * 1_880;
            let status = library::loop_command(&clip, bytes, &tmp)
                .status()
                .context("running ffmpeg")?;
            if !status.success() {
                bail!("ffmpeg failed ({status}) making {}", path.display());
            }
            fs::rename(&tmp, &path)?;
            library::ingest(fjord, &path)?;
        }
        titles.push(Title {
            bytes: fs::metadata(&path)?.len(),
            name,
            path,
        });
    }
    Ok(Library {
        origin: format!(
            "{n} titles of about {mb} MB ({:.1} s each): a 10 s clip (720p25 H.264 + AAC, MPEG-TS at 4.5 Mbit/s, ffmpeg) looped with -c copy; kept in {}",
            library::seconds_of(mb),
            root.display()
        ),
        root,
        titles,
    })
}

/// Bytes an edge fetches to send a title over RTP once: its index and
/// packet files (the media file and the FEC parity are not read for
/// viewers without FEC).
pub fn played_bytes(t: &Title) -> u64 {
    (library::sidecars(&t.path).into_iter())
        .filter(|p| p.extension().is_some_and(|e| e == "fjidx" || e == "fjpkt"))
        .filter_map(|p| fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Bytes of a title's files as published (media and sidecars).
pub fn published_bytes(t: &Title) -> u64 {
    (library::sidecars(&t.path)
        .into_iter()
        .chain([t.path.clone()]))
    .filter_map(|p| fs::metadata(p).ok())
    .map(|m| m.len())
    .sum()
}

/// `$XDG_CACHE_HOME/fjord/cluster-library` (or `~/.cache/…`).
pub fn default_cache() -> PathBuf {
    library::default_cache().with_file_name("cluster-library")
}

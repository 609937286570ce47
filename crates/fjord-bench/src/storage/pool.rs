//! A storage pool of disks for `fjord bench storage --roots N`: N loop
//! devices over image files beside the library, each an ext4 filesystem
//! holding every Nth title by name (title k on disk k mod N, so under Zipf
//! popularity the most asked-for title and the third share a disk), mounted
//! for the run and detached after. The loop devices read their images with
//! direct I/O, so the page cache holds no byte twice, and the cgroup
//! throttles each device on its own: N disks of the same speed.
//!
//! The images are made once (a copy of the library: about its size again
//! on the library's disk) and kept for later runs.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail};

use super::library::{Library, Title, sidecars};

/// Written into a root once every title is copied in.
const COMPLETE: &str = ".fjord-bench-pool-complete";

/// The pool's roots, mounted; unmounted and detached on drop.
pub struct Pool {
    pub roots: Vec<PathBuf>,
    loops: Vec<String>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (root, dev) in self.roots.iter().zip(&self.loops) {
            let _ = Command::new("umount").arg(root).status();
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

/// Where the images of an `n`-disk pool of `lib` are kept.
fn images_dir(lib: &Library, n: usize) -> PathBuf {
    let name = lib
        .root
        .file_name()
        .map_or("library".into(), |s| s.to_string_lossy().into_owned());
    lib.root.with_file_name(format!("{name}.pool{n}"))
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Mounts the `n` disks of `lib`'s pool under `mounts`, making them first
/// when they are not complete.
pub fn mount(lib: &Library, n: usize, mounts: &Path, progress: bool) -> anyhow::Result<Pool> {
    let images = images_dir(lib, n);
    fs::create_dir_all(&images)?;
    let mut pool = Pool {
        roots: Vec::new(),
        loops: Vec::new(),
    };
    for disk in 0..n {
        let image = images.join(format!("disk{disk}.img"));
        let titles: Vec<&Title> = lib.titles.iter().skip(disk).step_by(n).collect();
        detach_stale(&image);
        let fresh = !image.exists();
        if fresh {
            let bytes: u64 = titles
                .iter()
                .flat_map(|t| std::iter::once(t.path.clone()).chain(sidecars(&t.path)))
                .filter_map(|p| fs::metadata(p).ok().map(|m| m.len()))
                .sum();
            // Room for the filesystem's own blocks and a title's parity made
            // by the server, sparse until written.
            let file = fs::File::create(&image)?;
            file.set_len(bytes + bytes / 8 + (2 << 30))?;
            run(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-m", "0"])
                .arg(&image))?;
        }
        let dev = run(Command::new("losetup")
            .args(["--direct-io=on", "--find", "--show"])
            .arg(&image))?;
        let root = mounts.join(format!("disk{disk}"));
        fs::create_dir_all(&root)?;
        if let Err(e) = run(Command::new("mount")
            .args(["-o", "noatime", &dev])
            .arg(&root))
        {
            let _ = Command::new("losetup").args(["-d", &dev]).status();
            return Err(e);
        }
        pool.roots.push(root.clone());
        pool.loops.push(dev);
        if !root.join(COMPLETE).exists() {
            fill(&root, &titles, progress)?;
        }
    }
    Ok(pool)
}

/// Loop devices left on `image` by an interrupted run.
fn detach_stale(image: &Path) {
    let Ok(out) = Command::new("losetup").arg("-j").arg(image).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((dev, _)) = line.split_once(':') {
            let _ = Command::new("umount").arg(dev).status();
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

/// Copies `titles` and their sidecars into `root` under their names,
/// keeping modification times (an index is tied to its media by size and
/// mtime).
fn fill(root: &Path, titles: &[&Title], progress: bool) -> anyhow::Result<()> {
    for t in titles {
        let dir = match Path::new(&t.name).parent() {
            Some(p) => root.join(p),
            None => root.to_path_buf(),
        };
        fs::create_dir_all(&dir)?;
        if progress {
            eprintln!(
                "fjord bench storage: copying {} to {}",
                t.name,
                dir.display()
            );
        }
        for f in std::iter::once(t.path.clone()).chain(sidecars(&t.path)) {
            if f.exists() {
                run(Command::new("cp").arg("-p").arg(&f).arg(&dir))?;
            }
        }
    }
    fs::write(root.join(COMPLETE), "")?;
    Ok(())
}

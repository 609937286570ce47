//! The media roots of a storage pool, each normally a disk of its own:
//! which root holds a title, and where the title's parity is kept. With
//! more than one disk, a title's parity goes to another disk of the pool
//! than its media (INSTANCE: the parity repairs a failed disk), so a disk
//! that fails to read a block is not also the one asked for the parity
//! that rebuilds it.
//!
//! Parity the server writes for a title of root A lives on the next root
//! of the pool on another device, B, at
//! `B/.fjord-parity/NAME-HASH/PATH.fjfec`: NAME is A's last component,
//! HASH names A's full path (so two roots never share a place), PATH the
//! title's path under A. Hidden, so never taken for a title. A sidecar
//! beside the media (`fjord ingest` writes one there) is used as long as
//! the pool has none of its own for the title.

use std::{
    io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// Where the pool keeps parity under a root.
const PARITY_DIR: &str = ".fjord-parity";

pub struct Pool {
    roots: Vec<Root>,
}

struct Root {
    /// Canonical.
    path: PathBuf,
    device: u64,
}

impl Pool {
    /// The pool of `roots`, searched in this order; each must exist.
    pub fn new(roots: &[PathBuf]) -> io::Result<Pool> {
        let roots = roots
            .iter()
            .map(|root| {
                let path = root.canonicalize().map_err(|e| {
                    io::Error::new(e.kind(), format!("media root {}: {e}", root.display()))
                })?;
                let device = std::fs::metadata(&path)?.dev();
                Ok(Root { path, device })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Pool { roots })
    }

    pub fn roots(&self) -> impl Iterator<Item = &Path> {
        self.roots.iter().map(|r| r.path.as_path())
    }

    /// The file `rel` in the first root that has it, inside that root
    /// (after symlinks); `rel` must already be a plain relative path.
    pub fn find(&self, rel: &Path) -> Option<PathBuf> {
        self.roots.iter().find_map(|root| {
            let path = root.path.join(rel).canonicalize().ok()?;
            (path.starts_with(&root.path) && path.is_file()).then_some(path)
        })
    }

    /// Where the parity of `media` (a file found by [`Pool::find`]) is
    /// read from: the pool's place on another disk when a sidecar is there
    /// or none is beside the media; else beside the media.
    pub fn parity_path(&self, media: &Path) -> PathBuf {
        let beside = fjord_fec::sidecar_path_for(media);
        match self.parity_home(media) {
            Some(home) if home.exists() || !beside.exists() => home,
            _ => beside,
        }
    }

    /// Where the server writes the parity of `media`: on another disk of
    /// the pool when it has one, else beside the media.
    pub fn parity_target(&self, media: &Path) -> PathBuf {
        self.parity_home(media)
            .unwrap_or_else(|| fjord_fec::sidecar_path_for(media))
    }

    /// The pool's place for the parity of `media` on the next root on
    /// another device, if any.
    fn parity_home(&self, media: &Path) -> Option<PathBuf> {
        let at = self.roots.iter().position(|r| media.starts_with(&r.path))?;
        let origin = &self.roots[at];
        let n = self.roots.len();
        let other = (1..n)
            .map(|i| &self.roots[(at + i) % n])
            .find(|r| r.device != origin.device)?;
        let rel = media.strip_prefix(&origin.path).ok()?;
        let hash = blake3::hash(origin.path.as_os_str().as_encoded_bytes());
        let name = origin
            .path
            .file_name()
            .map_or("root".into(), |n| n.to_string_lossy());
        let tag = format!("{name}-{}", &hash.to_hex()[..12]);
        Some(fjord_fec::sidecar_path_for(
            &other.path.join(PARITY_DIR).join(tag).join(rel),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two roots on one device: parity stays beside the media (another
    /// directory of the same disk protects nothing).
    #[test]
    fn one_device_keeps_parity_beside_the_media() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(a.path().join("t.ts"), b"x").unwrap();
        let pool = Pool::new(&[a.path().to_owned(), b.path().to_owned()]).unwrap();
        let media = pool.find(Path::new("t.ts")).unwrap();
        let beside = fjord_fec::sidecar_path_for(&media);
        assert_eq!(pool.parity_target(&media), beside);
        assert_eq!(pool.parity_path(&media), beside);
    }

    /// A root on another device (/dev/shm, a tmpfs, when the temporary
    /// directory is not one) takes the parity of the other's titles, in a
    /// place of their own per root; a sidecar beside the media is used
    /// until the pool has one.
    #[test]
    fn another_device_takes_the_parity() {
        let a = tempfile::tempdir().unwrap();
        let Ok(b) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm");
            return;
        };
        let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
        if dev(a.path()) == dev(b.path()) {
            eprintln!("skipped: /dev/shm is on the temporary directory's device");
            return;
        }
        std::fs::create_dir(a.path().join("films")).unwrap();
        std::fs::write(a.path().join("films/t.ts"), b"x").unwrap();
        let pool = Pool::new(&[a.path().to_owned(), b.path().to_owned()]).unwrap();
        let media = pool.find(Path::new("films/t.ts")).unwrap();
        let target = pool.parity_target(&media);
        let b_root = b.path().canonicalize().unwrap();
        assert!(target.starts_with(b_root.join(PARITY_DIR)), "{target:?}");
        assert!(target.ends_with("films/t.ts.fjfec"), "{target:?}");
        assert_eq!(
            pool.parity_path(&media),
            target,
            "none anywhere: the pool's"
        );

        let beside = fjord_fec::sidecar_path_for(&media);
        std::fs::write(&beside, b"old").unwrap();
        assert_eq!(pool.parity_path(&media), beside, "only beside: that one");
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, b"new").unwrap();
        assert_eq!(pool.parity_path(&media), target, "the pool's first");
        assert!(pool.find(Path::new("t.ts")).is_none());
    }
}

//! Files fjord writes beside the media (index, parity, packets, a repaired
//! copy) appear whole or not at all: written to a temporary file in the
//! same directory, synced, then renamed over the name.

use std::{fs::File, io, path::Path};

use tempfile::NamedTempFile;

/// The directory `path` is in (`.` for a bare name).
fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// A temporary file named `prefix…` in the directory of `path`, so the
/// rename in [`persist`] stays on one filesystem.
pub fn temp_beside(path: &Path, prefix: &str) -> io::Result<NamedTempFile> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempfile_in(dir_of(path))
}

/// Gives `tmp` the permissions `mode` (temporary files are created 0600),
/// syncs it and renames it to `path`, durably.
pub fn persist(tmp: NamedTempFile, path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // Make the rename itself durable; not all filesystems allow syncing a
    // directory.
    if let Ok(d) = File::open(dir_of(path)) {
        let _ = d.sync_all();
    }
    Ok(())
}

//! The read-ahead memory budget's default: what this machine, or the
//! memory cgroup the server runs in, can lock without starving the page
//! cache everyone else uses. It is a limit, not an allotment: sessions
//! lock what their lead needs (see [`crate::lead`]).

use std::path::Path;

/// Half the memory available to this process: the smaller of RAM and the
/// cgroup's limit (v2 `memory.max`, v1 `memory.limit_in_bytes`). Half, not
/// a quarter, because a storage node's memory is there for its streams;
/// the other half holds the server's heap, the titles' heads and tables,
/// and the page cache that bulk work (ingest, verification) and downloads
/// read through, and locked pages are page cache the streams would
/// otherwise fault in.
pub fn default_budget() -> u64 {
    let ram = ram_bytes().unwrap_or(1 << 30);
    let limit = cgroup_limit().unwrap_or(u64::MAX);
    ram.min(limit) / 2
}

fn ram_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The memory limit of this process's cgroup, if it has one.
fn cgroup_limit() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    groups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        let file = match controllers {
            "" => Path::new("/sys/fs/cgroup").join(path).join("memory.max"),
            c if c.split(',').any(|c| c == "memory") => Path::new("/sys/fs/cgroup/memory")
                .join(path)
                .join("memory.limit_in_bytes"),
            _ => return None,
        };
        let v: u64 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
        // v1 reports "no limit" as a huge page-aligned number.
        (v < 1 << 60).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_is_a_share_of_real_memory() {
        let b = super::default_budget();
        let ram = super::ram_bytes().unwrap();
        assert!(b > 0 && b <= ram / 2, "{b} of {ram}");
    }
}

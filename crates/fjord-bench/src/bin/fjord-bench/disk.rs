//! `fjord bench disk`: what the disk under a media root sustains, saved
//! in `$XDG_STATE_HOME/fjord/disks.toml` for the server's admission
//! control (`fjord_server::config` reads it).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct DiskArgs {
    /// A directory on the disk to measure (a media root)
    #[arg(long)]
    pub root: PathBuf,
    /// Scratch file size in MiB: larger than the disk's own cache
    #[arg(long, default_value_t = 1024)]
    pub size_mb: u64,
    /// Seconds per read pattern
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Buffered reads (each range dropped from the page cache) instead of
    /// O_DIRECT
    #[arg(long)]
    pub buffered: bool,
    /// Directory for disk.md and disk.json
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not save the figures for admission control
    #[arg(long)]
    pub no_save: bool,
}

pub fn run(a: DiskArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::disk::DiskConfig {
        root: a.root.clone(),
        size: a.size_mb << 20,
        seconds: a.seconds,
        direct: !a.buffered,
        progress: true,
    };
    let r = fjord_bench::disk::run(&cfg)?;
    let command = crate::command_line();
    let md = r.markdown(&command);
    println!("{md}");
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)?;
        for (name, text) in [("disk.md", md), ("disk.json", r.json())] {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            println!("written: {}", path.display());
        }
    }
    if !a.no_save {
        let path = fjord_server::config::capacity_state_file()
            .context("no HOME or XDG_STATE_HOME to save the result in")?
            .with_file_name("disks.toml");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let text = save_disk(&old, &r).with_context(|| format!("updating {}", path.display()))?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!(
            "saved the figures of device {} ({}) to {} for admission control",
            r.device_id(),
            r.root.display(),
            path.display()
        );
    }
    Ok(())
}

/// `disks.toml` with `r` in it: one `[[disk]]` per (device, root), a new
/// measurement replacing the old one of the same pair, others kept.
fn save_disk(old: &str, r: &fjord_bench::disk::DiskReport) -> anyhow::Result<String> {
    use fjord_bench::disk::Access::{RandRead, SeqRead, SeqWrite};
    use toml::Value;
    let mut doc: toml::Table = old.parse().context("not TOML")?;
    let root = r.root.to_string_lossy().into_owned();
    let mut entry = toml::Table::new();
    entry.insert("device".into(), Value::from(r.device_id()));
    entry.insert("root".into(), Value::from(root.clone()));
    entry.insert("o_direct".into(), Value::from(r.direct));
    let figures = [
        ("seq_write_mb_s", SeqWrite, 1 << 20, 1, false),
        ("seq_read_mb_s", SeqRead, 1 << 20, 1, false),
        ("rand_1m_qd1_mb_s", RandRead, 1 << 20, 1, false),
        ("rand_1m_qd4_mb_s", RandRead, 1 << 20, 4, false),
        ("rand_4k_qd1_iops", RandRead, 4096, 1, true),
        ("rand_4k_qd4_iops", RandRead, 4096, 4, true),
    ];
    for (key, access, block, depth, iops) in figures {
        if let Some(p) = r.phase(access, block, depth) {
            let v = if iops { p.iops() } else { p.mb_per_s() };
            entry.insert(key.into(), Value::from((v * 10.0).round() / 10.0));
        }
    }
    if let Some(p99) = r.phase(RandRead, 1 << 20, 1).and_then(|p| p.p99) {
        let ms = (p99.as_secs_f64() * 1e4).round() / 10.0;
        entry.insert("rand_1m_qd1_p99_ms".into(), Value::from(ms));
    }
    let same = |d: &Value| {
        d.get("device").and_then(Value::as_str) == Some(&r.device_id())
            && d.get("root").and_then(Value::as_str) == Some(&root)
    };
    let disks = doc
        .entry("disk")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .context("`disk` is not an array of tables")?;
    disks.retain(|d| !same(d));
    disks.push(Value::Table(entry));
    Ok(toml::to_string(&doc)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(root: &str, seq_mb: u64) -> fjord_bench::disk::DiskReport {
        use fjord_bench::disk::{Access, Phase};
        let phase = |access, block, depth| Phase {
            access,
            block,
            depth,
            ops: seq_mb,
            bytes: seq_mb * block as u64,
            elapsed: std::time::Duration::from_secs(1),
            p50: None,
            p99: Some(std::time::Duration::from_micros(12_345)),
        };
        fjord_bench::disk::DiskReport {
            root: root.into(),
            device: (253, 0),
            device_name: Some("vda".into()),
            filesystem: "ext4".into(),
            size: 1 << 30,
            seconds: 5.0,
            direct: true,
            note: None,
            phases: vec![
                phase(Access::SeqRead, 1 << 20, 1),
                phase(Access::RandRead, 1 << 20, 1),
                phase(Access::RandRead, 4096, 4),
            ],
        }
    }

    #[test]
    fn disk_figures_replace_their_own_entry_and_keep_others() {
        let first = save_disk("", &report("/a", 100)).unwrap();
        let both = save_disk(&first, &report("/b", 200)).unwrap();
        let again = save_disk(&both, &report("/a", 300)).unwrap();
        let doc: toml::Table = again.parse().unwrap();
        let disks = doc["disk"].as_array().unwrap();
        let by_root = |root: &str| {
            disks
                .iter()
                .find(|d| d["root"].as_str() == Some(root))
                .unwrap()
        };
        assert_eq!(disks.len(), 2);
        assert_eq!(by_root("/a")["device"].as_str(), Some("253:0"));
        assert_eq!(by_root("/a")["seq_read_mb_s"].as_float(), Some(314.6)); // 300 MiB in 1 s
        assert_eq!(by_root("/b")["seq_read_mb_s"].as_float(), Some(209.7));
        assert_eq!(by_root("/a")["rand_4k_qd4_iops"].as_float(), Some(300.0));
        assert_eq!(by_root("/a")["rand_1m_qd1_p99_ms"].as_float(), Some(12.3));
        assert!(save_disk("disk = 3", &report("/a", 1)).is_err());
    }
}

//! `fjord publish`: titles ingested here, then uploaded with their sidecars
//! to the origin, where every edge reads them (`fjord_edge::publish`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use fjord_edge::publish::{Outcome, publish_file};
use fjord_edge::{Origin, OriginConfig, OriginUrl};
use fjord_server::Config;
use indicatif::{ProgressBar, ProgressStyle};

/// Ingest media files (index, parity, packets, as `fjord ingest`) and upload
/// each with its sidecars to an S3-compatible origin.
///
/// Objects are named by the file's name under the origin's prefix:
/// `fjord publish films/a.ts s3://lib/v1` writes `v1/a.ts`,
/// `v1/a.ts.fjfec`, `v1/a.ts.fjpkt` and, last, `v1/a.ts.fjidx` (so a title
/// whose index is at the origin is whole there); of a Matroska or WebM
/// file also its frame table, `NAME.fjfrm` (an edge cuts its HLS and DASH
/// segments from it without fetching the whole file). Files over 16 MiB go as
/// multipart uploads. An object already there with the same size and
/// BLAKE3 is skipped, so a publish that stopped is resumed by running it
/// again; every upload is checked by the store (SHA-256 of each request)
/// and read back (size and hash). Credentials: AWS_ACCESS_KEY_ID and
/// AWS_SECRET_ACCESS_KEY.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example: AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… \
    fjord publish --endpoint http://10.0.0.5:7070 media/*.ts s3://films/library")]
pub struct PublishArgs {
    /// Media files to publish
    #[arg(required = true, num_args = 1.., value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Where: s3://BUCKET/PREFIX
    #[arg(required = true, value_name = "s3://BUCKET/PREFIX")]
    origin: String,
    /// The origin's address (any S3-compatible store) [default: the
    /// config's origin_endpoint, else AWS S3]
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// The origin's region [default: the config's origin_region, else
    /// AWS_REGION, else us-east-1]
    #[arg(long)]
    region: Option<String>,
    /// Read origin_endpoint and origin_region from this config file
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Parity: K:M, auto or off, as `fjord ingest --fec`
    #[arg(long, default_value = "auto", value_name = "K:M|auto|off")]
    fec: fjord_fec::FecChoice,
    /// Prefabricated packets, as `fjord ingest --prefab`
    #[arg(long, default_value = "on", value_name = "on|off", value_parser = crate::on_off, action = clap::ArgAction::Set)]
    prefab: bool,
}

pub fn run(args: PublishArgs) -> anyhow::Result<()> {
    let url = OriginUrl::parse(&args.origin)?;
    let files = &args.files;
    let objects = objects_of(files)?;
    let origin = Origin::connect(url, &origin_config(&args)?)?;
    crate::ingest_all(files, 7, args.fec, args.prefab)?;
    for media in files {
        frame_table(media).with_context(|| format!("{}: its frame table", media.display()))?;
    }
    let objects: Vec<(PathBuf, String)> = objects.into_iter().filter(|(p, _)| p.exists()).collect();
    let total: u64 = objects
        .iter()
        .map(|(p, _)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(upload(&origin, &objects, total))
}

/// The settings: the config file's, the flags on top; credentials from the
/// environment.
fn origin_config(args: &PublishArgs) -> anyhow::Result<OriginConfig> {
    let cfg = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let non_empty = |s: String| Some(s).filter(|s| !s.is_empty());
    Ok(OriginConfig {
        endpoint: args.endpoint.clone().or(non_empty(cfg.origin_endpoint)),
        region: args.region.clone().or(non_empty(cfg.origin_region)),
        access_key_id: None,
        secret_access_key: None,
    })
}

/// Writes the frame table of `media` beside it when it is a Matroska or
/// WebM file (`fjord_media::mkv::table`).
fn frame_table(media: &std::path::Path) -> anyhow::Result<()> {
    let data = fjord_media::index::map_media(media)?;
    if let Some(table) = fjord_media::mkv::table::of_media(&data)? {
        std::fs::write(fjord_media::mkv::table::path_for(media), table)?;
    }
    Ok(())
}

/// Each title's files and their object names, the index last.
fn objects_of(files: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, String)>> {
    let mut names = std::collections::HashSet::new();
    let mut objects = Vec::new();
    for media in files {
        let name = (media.file_name().and_then(|n| n.to_str()))
            .with_context(|| format!("{}: not a file name the origin can hold", media.display()))?;
        ensure!(
            names.insert(name.to_owned()),
            "two files are named {name}: their objects would overwrite each other"
        );
        let sidecars = [
            fjord_fec::sidecar_path_for(media),
            fjord_media::prefab::prefab_path_for(media),
            fjord_media::mkv::table::path_for(media),
            fjord_media::index::index_path_for(media),
        ];
        objects.push((media.clone(), name.to_owned()));
        for s in sidecars {
            let ext = s.extension().and_then(|e| e.to_str()).unwrap_or_default();
            objects.push((s.clone(), format!("{name}.{ext}")));
        }
    }
    Ok(objects)
}

async fn upload(origin: &Origin, objects: &[(PathBuf, String)], total: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let done = AtomicU64::new(0);
    let bar = ProgressBar::hidden().with_style(
        ProgressStyle::with_template(
            "uploading [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_length(total);
    let progress = |n: u64| {
        let at = done.fetch_add(n, Ordering::Relaxed) + n;
        // A bar only when the upload takes more than a moment.
        if bar.is_hidden() && started.elapsed() > Duration::from_millis(300) {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
        bar.set_position(at);
    };
    for (path, name) in objects {
        let p = publish_file(origin, path, name, &progress).await;
        let p = p.with_context(|| format!("publishing {}", path.display()))?;
        let whither = format!("{}/{name}", origin.url);
        let line = match p.outcome {
            Outcome::Skipped => format!(
                "{}: already at {whither} (same size and BLAKE3), skipped",
                path.display()
            ),
            Outcome::Uploaded { parts } => format!(
                "{}: {:.1} MB to {whither} in {}, verified",
                path.display(),
                p.size as f64 / 1e6,
                match parts {
                    1 => "one PUT".to_owned(),
                    n => format!("{n} parts"),
                },
            ),
        };
        // Above the bar while it is drawn; stdout either way.
        bar.suspend(|| println!("{line}"));
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "published {} objects, {:.1} MB, to {} in {secs:.1} s",
        objects.len(),
        total as f64 / 1e6,
        origin.url
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_named_by_file_index_last() {
        let o = objects_of(&[PathBuf::from("dir/a.ts")]).unwrap();
        let names: Vec<&str> = o.iter().map(|(_, n)| n.as_str()).collect();
        let want = [
            "a.ts",
            "a.ts.fjfec",
            "a.ts.fjpkt",
            "a.ts.fjfrm",
            "a.ts.fjidx",
        ];
        assert_eq!(names, want);
        assert_eq!(o[4].0, std::path::Path::new("dir/a.ts.fjidx"));
        let twice = objects_of(&[PathBuf::from("x/a.ts"), PathBuf::from("y/a.ts")]);
        assert!(twice.is_err());
    }
}

//! Time `ingest_file` on a real file: `cargo run --release --example ingest -- FILE.ts`.

use std::time::Instant;

use fjord_media::ingest::ingest_file;
use fjord_media::ts::TsOptions;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os().nth(1).ok_or("usage: ingest FILE.ts")?;
    let path = std::path::Path::new(&path);
    let start = Instant::now();
    let report = ingest_file(path, &TsOptions::default(), &mut |_, _| {})?;
    let secs = start.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(path)?.len() as f64;
    println!("{report:#?}");
    println!(
        "ingested {:.0} MB in {secs:.3} s: {:.0} MB/s",
        bytes / 1e6,
        bytes / 1e6 / secs
    );
    Ok(())
}

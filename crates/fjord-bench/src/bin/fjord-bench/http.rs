//! `fjord bench http`: HTTP downloads, fjord beside nginx.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct HttpArgs {
    #[arg(long, default_value_t = 256)]
    pub mb: u64,
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// HTTPS, the clients offering this cipher suite alone
    #[arg(long, value_enum)]
    pub tls: Option<fjord_bench::https::Cipher>,
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
}

pub fn run(a: HttpArgs) -> anyhow::Result<()> {
    let cfg = fjord_bench::http::HttpConfig {
        fjord_exe: crate::fjord_exe()?,
        mb: a.mb,
        clients: a.clients,
        seconds: a.seconds,
        rounds: a.rounds,
        tls: a.tls,
    };
    let report = fjord_bench::http::run(&cfg)?;
    let command = crate::command_line();
    let md = fjord_bench::http::markdown(&cfg, &command, &report);
    std::fs::create_dir_all(&a.out)?;
    let path = a.out.join(if a.tls.is_some() {
        "https.md"
    } else {
        "http.md"
    });
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    println!("{md}\nwritten: {}", path.display());
    Ok(())
}

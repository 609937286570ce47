//! `fjord cluster status`: a node's view of its cluster, read from its
//! admin API (`GET /api/v1/cluster`).

use anyhow::{Context, bail};
use serde_json::Value;

#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The members a node knows of: their URLs, sessions and capacity,
    /// the titles asked for most, and whether etcd answers.
    Status {
        /// The node's admin listener
        #[arg(long, default_value = "http://127.0.0.1:9090")]
        admin: String,
    },
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let What::Status { admin } = args.what;
    let url = format!("{}/api/v1/cluster", admin.trim_end_matches('/'));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (status, text) = rt
        .block_on(async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let r = reqwest::Client::new().get(&url).send().await?;
            Ok::<_, reqwest::Error>((r.status(), r.text().await?))
        })
        .with_context(|| format!("asking {url}"))?;
    if !status.is_success() {
        bail!("{url}: {status}");
    }
    let c: Value = serde_json::from_str(&text).context("the node's answer")?;
    if c.is_null() {
        bail!("the node at {admin} is in no cluster");
    }
    print!("{}", render(&c));
    Ok(())
}

/// The table `status` prints.
fn render(c: &Value) -> String {
    let e = &c["etcd"];
    let mut out = format!(
        "this node: {}; members from {}{}; {} etcd errors; {} requests sent on\n",
        c["me"]["name"].as_str().unwrap_or("?"),
        e["source"].as_str().unwrap_or("?"),
        match (e["source"].as_str(), e["reachable"].as_bool()) {
            (Some("etcd"), Some(true)) => " (reachable)",
            (Some("etcd"), _) => " (NOT reachable: the last members are kept)",
            _ => "",
        },
        e["errors"],
        c["redirects"]
    );
    out += &format!(
        "{:<16} {:>8} {:>8}  {:<28} {:<28} most asked for\n",
        "member", "sessions", "capacity", "rtsp", "http"
    );
    let others = c["others"].as_array().cloned().unwrap_or_default();
    for m in std::iter::once(&c["me"]).chain(others.iter()) {
        let hot: Vec<String> = (m["hot"].as_array().into_iter().flatten().take(3))
            .map(|h| {
                format!(
                    "{} ({:.1}/s)",
                    h[0].as_str().unwrap_or(""),
                    h[1].as_f64().unwrap_or(0.0)
                )
            })
            .collect();
        out += &format!(
            "{:<16} {:>8} {:>8}  {:<28} {:<28} {}\n",
            m["name"].as_str().unwrap_or("?"),
            m["load"].as_u64().unwrap_or(0),
            m["capacity"].as_u64().unwrap_or(0),
            m["rtsp"].as_str().unwrap_or(""),
            m["http"].as_str().unwrap_or(""),
            hot.join(", ")
        );
    }
    let holds = c["holds"].as_array().map_or(0, Vec::len);
    out += &format!("this node has {holds} titles loaded\n");
    out
}

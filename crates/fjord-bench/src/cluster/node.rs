//! A fjord node: `fjord serve` in its namespace, an edge of the store
//! (`s3://bench/lib`), in the cluster (etcd) or alone.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::net;
use super::procs::{self, Proc};

/// The RTSP and admin ports, on every node's own address.
const RTSP: u16 = 8554;
const ADMIN: u16 = 9090;

/// Membership, when the node is in the cluster.
pub struct Cluster<'a> {
    pub etcd: &'a str,
    pub ttl_s: u32,
    pub hot_rps: f64,
    pub balance_pct: u32,
    pub copy_share_pct: u32,
}

pub struct Node {
    pub proc: Proc,
    /// `rtsp://IP:PORT/`.
    pub url: String,
    admin: String,
}

impl Node {
    /// Node `i`, its files under `dir`.
    pub fn start(
        fjord: &Path,
        dir: &Path,
        i: usize,
        endpoint: &str,
        cluster: Option<&Cluster>,
    ) -> anyhow::Result<Node> {
        let ip = net::node_ip(i);
        let (root, cache) = (dir.join(format!("root{i}")), dir.join(format!("cache{i}")));
        std::fs::create_dir_all(&root)?;
        let mut text = format!(
            "admin_bind = \"{ip}:{ADMIN}\"\nhttp_port = 0\naccess_log = false\n\
             max_connections = 4096\nmax_sessions = 2048\nmax_connections_per_address = 4096\n\
             max_sessions_per_address = 4096\n\
             origin = \"s3://bench/lib\"\norigin_endpoint = \"{endpoint}\"\norigin_region = \"us-east-1\"\n\
             cache_dir = \"{}\"\ncache_gb = 50\n",
            cache.display()
        );
        if let Some(c) = cluster {
            text += &format!(
                "cluster_etcd = [\"{}\"]\nnode_name = \"n{}\"\nadvertise_rtsp = \"rtsp://{ip}:{RTSP}\"\n\
                 cluster_ttl_s = {}\ncluster_hot_rps = {}\ncluster_balance_pct = {}\n\
                 cluster_copy_share_pct = {}\n",
                c.etcd,
                i + 1,
                c.ttl_s,
                c.hot_rps,
                c.balance_pct,
                c.copy_share_pct
            );
        }
        let config = dir.join(format!("node{i}.toml"));
        std::fs::write(&config, text)?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &net::ns(i)])
            .arg(fjord)
            .args([
                "serve",
                "--bind",
                &ip,
                "--port",
                &RTSP.to_string(),
                "--root",
            ])
            .arg(&root)
            .arg("--config")
            .arg(&config)
            .env("AWS_ACCESS_KEY_ID", "fjordbench")
            .env("AWS_SECRET_ACCESS_KEY", "fjord-bench-secret")
            .env("FJORD_LOG", "info");
        let proc = Proc::spawn(
            &format!("fjord node {i}"),
            cmd,
            &dir.join(format!("node{i}.log")),
        )?;
        let node = Node {
            proc,
            url: format!("rtsp://{ip}:{RTSP}/"),
            admin: format!("{ip}:{ADMIN}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while node.metrics().is_err() {
            if Instant::now() > deadline {
                bail!(
                    "fjord node {i} did not answer on {} within 20 s",
                    node.admin
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(node)
    }

    /// The node's `/metrics`.
    pub fn metrics(&self) -> anyhow::Result<String> {
        // The admin listener answers only a Host naming it.
        let req = format!(
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.admin
        );
        procs::http(&self.admin, &req).context("asking /metrics")
    }

    /// A value of its `/metrics` (0 when absent).
    pub fn value(&self, name: &str) -> anyhow::Result<f64> {
        Ok(value(&self.metrics()?, name))
    }
}

/// `name`'s value in a `/metrics` text (0 when absent).
pub fn value(text: &str, name: &str) -> f64 {
    (text.lines())
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until every node counts `n` members (each saw the others' keys).
pub fn wait_members(nodes: &[Node], n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen: Vec<f64> = (nodes.iter())
            .map(|x| x.value("fjord_cluster_members").unwrap_or(0.0))
            .collect();
        if seen.iter().all(|m| *m as usize == n) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let text = nodes[0].metrics().unwrap_or_default();
            let head: String = text.chars().take(300).collect();
            bail!("the nodes see {seen:?} members after 30 s, not {n}; node 1's /metrics: {head}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

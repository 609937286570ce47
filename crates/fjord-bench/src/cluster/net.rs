//! The cluster's network: a bridge in the host's namespace (198.18.40.1,
//! RFC 2544 space) and per node a namespace of its own joined to it by a
//! veth pair, each end rate limited with `tbf` (this kernel has no
//! `netem`, and no `matchall` filter to police with). etcd and the
//! object store listen on the bridge's address; the viewers (host
//! namespace) reach node `i` at `198.18.40.(11 + i)`.

use std::process::{Command, Stdio};

use anyhow::{Context, bail};

const BRIDGE: &str = "fjclbr0";
/// The host's address on the bridge.
pub const HOST_IP: &str = "198.18.40.1";

/// The namespace of node `i`.
pub fn ns(i: usize) -> String {
    format!("fjcl-n{}", i + 1)
}

/// Node `i`'s address.
pub fn node_ip(i: usize) -> String {
    format!("198.18.40.{}", 11 + i)
}

/// The bridge and `nodes` namespaces; all removed when dropped.
pub struct ClusterNet {
    nodes: usize,
}

impl ClusterNet {
    /// Makes the network, each veth end limited to `mbit` Mbit/s.
    pub fn create(nodes: usize, mbit: u32) -> anyhow::Result<ClusterNet> {
        // What a killed run left goes first.
        remove(5);
        let net = ClusterNet { nodes };
        run(&["ip", "link", "add", BRIDGE, "type", "bridge"])?;
        run(&["ip", "addr", "add", &format!("{HOST_IP}/24"), "dev", BRIDGE])?;
        run(&["ip", "link", "set", BRIDGE, "up"])?;
        for i in 0..nodes {
            let (ns, host_end, ns_end) =
                (ns(i), format!("fjcl{}h", i + 1), format!("fjcl{}n", i + 1));
            run(&["ip", "netns", "add", &ns])?;
            run(&[
                "ip", "link", "add", &host_end, "type", "veth", "peer", "name", &ns_end,
            ])?;
            run(&["ip", "link", "set", &ns_end, "netns", &ns])?;
            run(&["ip", "link", "set", &host_end, "master", BRIDGE, "up"])?;
            let inside = |args: &[&str]| run(&[&["ip", "netns", "exec", &ns][..], args].concat());
            inside(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", node_ip(i)),
                "dev",
                &ns_end,
            ])?;
            inside(&["ip", "link", "set", &ns_end, "up"])?;
            inside(&["ip", "link", "set", "lo", "up"])?;
            inside(&["ip", "route", "add", "default", "via", HOST_IP])?;
            let rate = format!("{mbit}mbit");
            let tbf = [
                "tc", "qdisc", "add", "dev", "", "root", "tbf", "rate", &rate, "burst", "256kb",
                "latency", "50ms",
            ];
            let mut host_tbf = tbf;
            host_tbf[4] = &host_end;
            run(&host_tbf)?;
            let mut ns_tbf = tbf;
            ns_tbf[4] = &ns_end;
            inside(&ns_tbf)?;
        }
        Ok(net)
    }
}

impl Drop for ClusterNet {
    fn drop(&mut self) {
        remove(self.nodes);
    }
}

/// Removes the first `nodes` namespaces (their veths go with them) and the
/// bridge; what is not there is skipped.
pub fn remove(nodes: usize) {
    for i in 0..nodes {
        let _ = Command::new("ip")
            .args(["netns", "del", &ns(i)])
            .stderr(Stdio::null())
            .status();
    }
    let _ = Command::new("ip")
        .args(["link", "del", BRIDGE])
        .stderr(Stdio::null())
        .status();
}

fn run(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("running {}", args[0]))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

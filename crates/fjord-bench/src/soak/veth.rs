//! `--veth`: the viewers in a network namespace of their own, across a veth
//! pair (198.18.2.0/24, RFC 2544), whose receiving ends run NAPI in kernel
//! threads of their own (GRO on, `threaded`; TSO off on the sending ends,
//! without which veth hands a local socket's datagrams straight to the
//! receiver in the sender's softirq). Over loopback an engine thread runs
//! its viewers' receive path in its own context, charged as its own CPU:
//! work a server with remote viewers never does, and invisible to the
//! soak's attribution. The NAPI threads run SCHED_FIFO just below the
//! engine threads (as a NIC's receive processing, in softirq, outranks
//! every task): as ordinary threads among 500 viewer threads they fell
//! behind and the veth rings overflowed. Viewer threads enter the namespace (network
//! namespaces are per thread); the server and the sampler stay outside.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

use anyhow::{Context, bail};

/// The namespace and the veth ends' names.
const NS: &str = "fjord-soak";
const SERVER_END: &str = "fjsoak-s";
const VIEWER_END: &str = "fjsoak-v";
/// The server's address, on its end; the viewers have `.2`.
pub const SERVER_IP: &str = "198.18.2.1";
const VIEWER_IP: &str = "198.18.2.2";

/// The viewers' namespace; removed (with its veth pair) when dropped.
pub struct ViewerNet {
    ns: File,
}

impl ViewerNet {
    pub fn create() -> anyhow::Result<ViewerNet> {
        // A namespace left by a killed run goes first.
        let _ = Command::new("ip").args(["netns", "del", NS]).status();
        run(&["ip", "netns", "add", NS])?;
        let net = ViewerNet {
            ns: File::open(format!("/run/netns/{NS}")).context("opening the namespace")?,
        };
        let peer = ["type", "veth", "peer", "name", VIEWER_END];
        run(&[&["ip", "link", "add", SERVER_END][..], &peer[..]].concat())?;
        run(&["ip", "link", "set", VIEWER_END, "netns", NS])?;
        let server_addr = format!("{SERVER_IP}/24");
        run(&["ip", "addr", "add", &server_addr, "dev", SERVER_END])?;
        run(&["ip", "link", "set", SERVER_END, "up"])?;
        let viewer_addr = format!("{VIEWER_IP}/24");
        let inside = ["ip", "netns", "exec", NS];
        run(&[
            &inside[..],
            &["ip", "addr", "add", &viewer_addr, "dev", VIEWER_END],
        ]
        .concat())?;
        run(&[&inside[..], &["ip", "link", "set", VIEWER_END, "up"]].concat())?;
        run(&[&inside[..], &["ip", "link", "set", "lo", "up"]].concat())?;
        for (end, ns) in [(SERVER_END, None), (VIEWER_END, Some(NS))] {
            threaded_napi(end, ns)?;
            napi_realtime(end)?;
        }
        Ok(net)
    }

    /// Moves the calling thread into the viewers' namespace.
    pub fn enter(&self) -> std::io::Result<()> {
        // SAFETY: setns on an open namespace fd affects this thread only.
        match unsafe { libc::setns(self.ns.as_raw_fd(), libc::CLONE_NEWNET) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

impl Drop for ViewerNet {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", NS]).status();
    }
}

/// NAPI of veth end `dev` (in namespace `ns`) in a kernel thread, and no
/// TSO on it for what it sends.
fn threaded_napi(dev: &str, ns: Option<&str>) -> anyhow::Result<()> {
    let inside: Vec<&str> = ns.map_or(vec![], |n| vec!["ip", "netns", "exec", n]);
    let ethtool = ["ethtool", "-K", dev, "tso", "off", "gro", "on"];
    run(&[&inside[..], &ethtool[..]].concat()).context(
        "ethtool sets GRO and TSO on the veth (`make peers` or `apt-get install ethtool`)",
    )?;
    let threaded = format!("echo 1 > /sys/class/net/{dev}/threaded");
    run(&[&inside[..], &["sh", "-c", &threaded]].concat())
}

/// The engine's real-time priority (`fjord-engine`'s SCHED_FIFO 10) less
/// one: the NAPI threads yield to it and outrank every ordinary thread.
const NAPI_PRIORITY: i32 = 9;

/// SCHED_FIFO for the NAPI threads of `dev` (kernel threads `napi/DEV-N`).
fn napi_realtime(dev: &str) -> anyhow::Result<()> {
    // A thread's name is cut at 15 bytes.
    let prefix: String = format!("napi/{dev}").chars().take(15).collect();
    let mut found = 0;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(&prefix) {
            continue;
        }
        let param = libc::sched_param {
            sched_priority: NAPI_PRIORITY,
        };
        // SAFETY: a valid sched_param for a thread that exists or not.
        if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &param) } != 0 {
            bail!(
                "SCHED_FIFO for {}: {}",
                comm.trim(),
                std::io::Error::last_os_error()
            );
        }
        found += 1;
    }
    if found == 0 {
        bail!("no NAPI thread of {dev} found (threaded NAPI not taken?)");
    }
    Ok(())
}

fn run(args: &[&str]) -> anyhow::Result<()> {
    let status = Command::new(args[0])
        .args(&args[1..])
        .status()
        .with_context(|| format!("running {}", args.join(" ")))?;
    if !status.success() {
        bail!("{} failed ({status})", args.join(" "));
    }
    Ok(())
}

//! The report of `fjord bench cluster`, as Markdown.

use super::viewer::Outcome;
use super::{ClusterReport, Phase};

/// The `q` quantile (nearest rank) of `v`; 0 for none.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n => v[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}

fn p50_p99_max(v: &[f64]) -> String {
    format!(
        "{:.1} / {:.1} / {:.1} (n={})",
        quantile(v, 0.5),
        quantile(v, 0.99),
        quantile(v, 1.0),
        v.len()
    )
}

/// Sessions each node took first.
pub fn sessions_per_node(p: &Phase, nodes: usize) -> Vec<usize> {
    let mut per = vec![0; nodes];
    for n in p.viewers.iter().filter_map(|v| v.node) {
        per[n] += 1;
    }
    per
}

/// Busiest node's sessions over the mean.
pub fn balance(per: &[usize]) -> f64 {
    let mean = per.iter().sum::<usize>() as f64 / per.len().max(1) as f64;
    per.iter().copied().max().unwrap_or(0) as f64 / mean.max(1e-9)
}

/// Origin bytes of the parts played (index, packets) over the distinct
/// bytes played.
pub fn ratio(p: &Phase) -> f64 {
    p.origin_played_bytes.iter().sum::<u64>() as f64 / p.distinct_bytes.max(1) as f64
}

/// Times to first packet of viewers of a title some viewer of the phase
/// started at least 5 s before (so its home holds it), redirected or not.
fn ttfp_warm(p: &Phase, redirected: bool) -> Vec<f64> {
    let mut first = std::collections::HashMap::new();
    (p.viewers.iter())
        .filter(|v| *first.entry(v.title.clone()).or_insert(v.start_s) + 5.0 <= v.start_s)
        .filter(|v| v.redirected == redirected && v.lost_at_s.is_none())
        .filter_map(|v| v.first_packet_ms)
        .collect()
}

/// Whether a viewer was playing at `t` or started within 2 s after it.
fn around(v: &Outcome, t: f64, seconds: f64) -> bool {
    v.start_s <= t + 2.0 && v.start_s + seconds >= t
}

pub fn markdown(r: &ClusterReport) -> String {
    let title_s = r.title_s;
    let gb = |b: u64| b as f64 / 1e9;
    let (ro, al) = (&r.routed, &r.alone);
    let (pr, pa) = (
        sessions_per_node(ro, r.nodes),
        sessions_per_node(al, r.nodes),
    );
    let playing = |p: &Phase| p.viewers.iter().filter(|v| v.packets > 0).count();
    let errors = |p: &Phase| p.viewers.iter().filter(|v| v.error.is_some()).count();
    let list = |v: &[usize]| {
        v.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mut md = format!(
        "# fjord bench cluster\n\n`{}`\n\n{} nodes, each in its namespace behind a veth limited to {} Mbit/s each way (tbf); \
         etcd; origin SeaweedFS (master, 3 volume servers, replication 002, filer with S3 gateway). \
         Library: {} ({:.2} GB published, in {:.0} s). cluster_ttl_s = {}, cluster_hot_rps = {}, cluster_balance_pct = {}, cluster_copy_share_pct = {}; a viewer every {:.0} ms.\n\n",
        r.command,
        r.nodes,
        r.mbit,
        r.library,
        gb(r.library_bytes),
        r.publish_s,
        r.ttl_s,
        r.hot_rps,
        r.balance_pct,
        r.copy_share_pct,
        r.gap_ms
    );
    md += "| figure | routed | alone (no cluster) | target |\n|---|---:|---:|---:|\n";
    md += &format!(
        "| viewers (playing, with an error) | {} ({}, {}) | {} ({}, {}) | |\n",
        ro.viewers.len(),
        playing(ro),
        errors(ro),
        al.viewers.len(),
        playing(al),
        errors(al)
    );
    md += &format!(
        "| origin bytes, GB | {:.3} | {:.3} | |\n",
        gb(ro.origin_bytes.iter().sum()),
        gb(al.origin_bytes.iter().sum())
    );
    md += &format!(
        "| … of the index and packets (not the parity header and checksums read at open), GB | {:.3} | {:.3} | |\n",
        gb(ro.origin_played_bytes.iter().sum()),
        gb(al.origin_played_bytes.iter().sum())
    );
    md += &format!(
        "| distinct bytes played (each title played: its index and packet files), GB | {:.3} | {:.3} | |\n",
        gb(ro.distinct_bytes),
        gb(al.distinct_bytes)
    );
    md += &format!(
        "| **origin bytes (index, packets) / distinct bytes** | **{:.3}** | {:.3} | ≤ 1.05 |\n",
        ratio(ro),
        ratio(al)
    );
    md += &format!("| sessions per node | {} | {} | |\n", list(&pr), list(&pa));
    md += &format!(
        "| **busiest node's sessions / mean** | **{:.3}** | {:.3} | ≤ 1.15 |\n",
        balance(&pr),
        balance(&pa)
    );
    let redirected = ro.viewers.iter().filter(|v| v.redirected).count();
    md += &format!("| viewers redirected (302) | {redirected} | 0 | |\n");
    let connect: Vec<f64> = ro.viewers.iter().map(|v| v.connect_ms).collect();
    let (direct, moved) = (ttfp_warm(ro, false), ttfp_warm(ro, true));
    md += &format!(
        "| TCP connect to the entry (≈ 1 RTT), ms, p50 / p99 / max | {} | | |\n",
        p50_p99_max(&connect)
    );
    md += &format!(
        "| time to first packet, direct, ms, p50 / p99 / max | {} | | |\n",
        p50_p99_max(&direct)
    );
    md += &format!(
        "| time to first packet, redirected, ms, p50 / p99 / max | {} | | |\n",
        p50_p99_max(&moved)
    );
    md += &format!(
        "| **extra time to first packet when redirected** (p50 − p50), ms | **{:.1}** | | ≤ 1 RTT + 5 ms ({:.1}) |\n",
        quantile(&moved, 0.5) - quantile(&direct, 0.5),
        quantile(&connect, 0.5) + 5.0
    );
    md += "\n(times to first packet: viewers of a title another viewer of the phase started at least 5 s before, so the cold fetch from the origin is not in them)\n";
    md += &origin_kill(ro, title_s);
    md += &failover(r, title_s);
    md
}

/// The volume server killed in the routed phase.
fn origin_kill(p: &Phase, title_s: f64) -> String {
    let Some(t) = p.kill_at_s else {
        return String::new();
    };
    let (near, far): (Vec<&Outcome>, Vec<&Outcome>) =
        p.viewers.iter().partition(|v| around(v, t, title_s));
    let spread = |v: &[&Outcome]| v.iter().map(|o| o.jitter_ms).collect::<Vec<_>>();
    let bad = |v: &[&Outcome]| {
        v.iter()
            .filter(|o| o.error.is_some() || o.packets == 0)
            .count()
    };
    format!(
        "\n## One origin node killed (routed phase, a volume server SIGKILLed at {t:.1} s)\n\n\
         | viewers | n | failed | arrival spread against media time, ms, p50 / p99 / max |\n|---|---:|---:|---:|\n\
         | playing at the kill or starting within 2 s after | {} | {} | {} |\n| the others | {} | {} | {} |\n",
        near.len(),
        bad(&near),
        p50_p99_max(&spread(&near)),
        far.len(),
        bad(&far),
        p50_p99_max(&spread(&far))
    )
}

/// The fjord node killed in the failover phase.
fn failover(r: &ClusterReport, title_s: f64) -> String {
    let p = &r.failover;
    let Some(t) = p.kill_at_s else {
        return String::new();
    };
    let lost: Vec<&Outcome> = p.viewers.iter().filter(|v| v.lost_at_s.is_some()).collect();
    let back: Vec<f64> = lost
        .iter()
        .filter_map(|v| v.back_at_s)
        .map(|b| b - t)
        .collect();
    let limit = r.ttl_s as f64 + 2.0;
    let within = back.iter().filter(|b| **b <= limit).count();
    let others: Vec<&Outcome> = (p.viewers.iter())
        .filter(|v| v.lost_at_s.is_none() && v.node != Some(0) && around(v, t, title_s))
        .collect();
    let rest: Vec<f64> = (p.viewers.iter())
        .filter(|v| v.node != Some(0) && !around(v, t, title_s))
        .map(|v| v.jitter_ms)
        .collect();
    let failed = p.viewers.iter().filter(|v| v.error.is_some()).count();
    format!(
        "\n## A fjord node killed (failover phase: warm nodes, {} viewers, node 1 SIGKILLed at {t:.1} s)\n\n\
         | figure | value | target |\n|---|---:|---:|\n\
         | viewers whose stream stopped | {} | |\n\
         | … playing again, s after the kill, p50 / p99 / max | {} | |\n\
         | **… playing again within TTL + 2 s ({limit:.0} s)** | **{within} of {}** | all |\n\
         | viewers with an error (any node) | {failed} | 0 |\n\
         | viewers of other nodes playing at the kill: arrival spread, ms, p50 / p99 / max | {} | as the others |\n\
         | viewers of other nodes away from the kill: arrival spread, ms, p50 / p99 / max | {} | |\n",
        p.viewers.len(),
        lost.len(),
        p50_p99_max(&back),
        lost.len(),
        p50_p99_max(&others.iter().map(|o| o.jitter_ms).collect::<Vec<_>>()),
        p50_p99_max(&rest),
    )
}

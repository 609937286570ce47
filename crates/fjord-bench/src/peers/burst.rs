//! fjord's burst as the kernel saw it: packets per send system call of its
//! UDP data path, from the counters on its admin listener's `/metrics`.
//! Measured rather than derived from its settings, since what a session
//! sends per wake-up depends on the load and on when the thread woke.

use crate::soak::server::{Metrics, http_get};

pub const PACKETS: &str = "fjord_datapath_packets_total";
pub const SEND_CALLS: &str = "fjord_datapath_send_calls_total";

/// `(packets, send calls)` summed over engine threads; `None` when either
/// counter is missing (a fjord too old to export them).
pub fn datapath_counts(metrics: &str) -> Option<(f64, f64)> {
    let m = Metrics::parse(metrics);
    let sum = |name| {
        let by = m.by_thread(name);
        (!by.is_empty()).then(|| by.values().sum::<f64>())
    };
    Some((sum(PACKETS)?, sum(SEND_CALLS)?))
}

/// Packets per send call from a `/metrics` text, or why there is none.
pub fn from_metrics(metrics: &str) -> Result<f64, String> {
    let (packets, calls) = datapath_counts(metrics)
        .ok_or_else(|| format!("/metrics has no {PACKETS} and {SEND_CALLS} per thread"))?;
    if calls <= 0.0 {
        return Err("no send calls counted (no UDP sessions?)".into());
    }
    Ok(packets / calls)
}

/// Reads the burst from the admin listener at `admin` (`host:port`).
pub fn read(admin: Option<&str>) -> Result<f64, String> {
    let admin = admin.ok_or("fjord printed no status page address")?;
    let text = http_get(admin, "/metrics").map_err(|e| format!("GET /metrics: {e:#}"))?;
    from_metrics(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "# HELP fjord_datapath_packets Packets the UDP data path sent.\n\
        # TYPE fjord_datapath_packets counter\n\
        fjord_datapath_packets_total{thread=\"0\"} 3000\n\
        fjord_datapath_packets_total{thread=\"1\"} 400\n\
        # TYPE fjord_datapath_send_calls counter\n\
        fjord_datapath_send_calls_total{thread=\"0\"} 900\n\
        fjord_datapath_send_calls_total{thread=\"1\"} 100\n\
        fjord_packets_sent_total{thread=\"0\"} 99999\n\
        # EOF\n";

    #[test]
    fn counters_are_summed_over_threads() {
        assert_eq!(datapath_counts(SCRAPE), Some((3400.0, 1000.0)));
        assert_eq!(from_metrics(SCRAPE), Ok(3.4));
    }

    #[test]
    fn a_missing_counter_is_none() {
        let no_calls: String = SCRAPE
            .lines()
            .filter(|l| !l.contains("send_calls"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(datapath_counts(&no_calls), None);
        let e = from_metrics(&no_calls).unwrap_err();
        assert!(e.contains(SEND_CALLS), "{e}");
        let no_packets = SCRAPE.replace("fjord_datapath_packets_total", "other_total");
        assert_eq!(datapath_counts(&no_packets), None);
        assert_eq!(datapath_counts(""), None);
    }

    #[test]
    fn no_send_calls_is_no_burst() {
        let idle = "fjord_datapath_packets_total{thread=\"0\"} 0\n\
                    fjord_datapath_send_calls_total{thread=\"0\"} 0\n";
        assert_eq!(datapath_counts(idle), Some((0.0, 0.0)));
        assert!(from_metrics(idle).unwrap_err().contains("no send calls"));
    }

    #[test]
    fn no_admin_address_is_a_reason() {
        assert!(read(None).unwrap_err().contains("no status page"));
    }
}

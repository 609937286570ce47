//! A fake clock for a plan: clients arrive, hear what the channels'
//! cursors send inside their windows, and play; every packet's arrival is
//! checked against its play time. Separate from the proofs in
//! [`crate::plan`]: the emissions come from the server-side cursors, the
//! windows and starts from [`Plan::join`], so a mistake in either shows up
//! as an underrun.

use serde::{Deserialize, Serialize};

use crate::Plan;

/// The server bandwidth is measured over this many periods of the longest
/// channel (plus a third of one, so partial cycles count too).
pub const WINDOW_PERIODS: u64 = 100;

/// What a simulation saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SimStats {
    pub clients: u64,
    /// Packets, over all clients, that arrived after their play time or
    /// never. Zero for every scheme as implemented.
    pub underruns: u64,
    /// Clients with at least one underrun.
    pub clients_late: u64,
    pub worst_wait_ns: u64,
    pub mean_wait_ns: f64,
    pub worst_buffer_bytes: u64,
    pub mean_buffer_bytes: f64,
    /// The most channels one client heard at the same time.
    pub worst_channels_at_once: usize,
    /// Bytes all channels sent per second over `window_ns` ([`measure_bandwidth`]).
    pub bandwidth_bytes_per_s: f64,
    pub window_ns: u64,
}

/// Plays every arrival (ns since the epoch) against `plan`.
pub fn simulate(plan: &Plan, arrivals: impl IntoIterator<Item = u64>) -> SimStats {
    let mut st = SimStats::default();
    let (mut wait_sum, mut buffer_sum) = (0f64, 0f64);
    for a in arrivals {
        let (start, listens) = plan.listens(a);
        let got = plan.receive(&listens);
        let late = (0..got.len())
            .filter(|&i| got[i] == u64::MAX || got[i] > plan.play_time(start, i))
            .count() as u64;
        let peak = plan.peak_buffer(start, &got);
        let wait = start.saturating_sub(a);
        st.clients += 1;
        st.underruns += late;
        st.clients_late += u64::from(late > 0);
        st.worst_wait_ns = st.worst_wait_ns.max(wait);
        st.worst_buffer_bytes = st.worst_buffer_bytes.max(peak);
        let at_once = crate::JoinPlan {
            arrival_ns: a,
            start_ns: start,
            listens,
            peak_buffer_bytes: peak,
        }
        .max_channels_at_once();
        st.worst_channels_at_once = st.worst_channels_at_once.max(at_once);
        wait_sum += wait as f64;
        buffer_sum += peak as f64;
    }
    if st.clients > 0 {
        st.mean_wait_ns = wait_sum / st.clients as f64;
        st.mean_buffer_bytes = buffer_sum / st.clients as f64;
    }
    (st.bandwidth_bytes_per_s, st.window_ns) = measure_bandwidth(plan);
    st
}

/// Bytes every channel's cursor sends per second over a window of
/// [`WINDOW_PERIODS`] periods of the longest channel (plus a third of one),
/// from two such periods after the epoch: every channel has started its
/// cycles by then (phases are below periods), so the figure is the steady
/// state. Returns the rate and the window's length.
pub fn measure_bandwidth(plan: &Plan) -> (f64, u64) {
    let longest = plan.channels.iter().map(|c| c.period_ns).max().unwrap_or(1);
    let from = longest.saturating_mul(2);
    let window = longest
        .saturating_mul(WINDOW_PERIODS)
        .saturating_add(longest / 3);
    let until = from.saturating_add(window);
    let bytes: u128 = (0..plan.channels.len())
        .map(|c| bytes_sent_before(plan, c, until) - bytes_sent_before(plan, c, from))
        .sum();
    (
        bytes as f64 * 1e9 / (until - from).max(1) as f64,
        until - from,
    )
}

/// Bytes channel `c` sends before `t`: whole cycles by count, the partial
/// one packet by packet from its cursor.
fn bytes_sent_before(plan: &Plan, c: usize, t: u64) -> u128 {
    let ch = &plan.channels[c];
    if t <= ch.phase_ns {
        return 0;
    }
    let cycles = (t - ch.phase_ns) / ch.period_ns;
    let last_start = ch.phase_ns + cycles * ch.period_ns;
    let packets = plan.title.packets();
    let partial: u128 = plan
        .emissions_from(c, last_start)
        .take_while(|e| e.due_ns < t)
        .map(|e| u128::from(packets[e.packet as usize].bytes))
        .sum();
    u128::from(cycles) * u128::from(plan.cycle_bytes(c)) + partial
}

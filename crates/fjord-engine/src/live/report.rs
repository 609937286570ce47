//! RTCP sender reports to live viewers (RFC 3550 §6.4.1): a viewer's
//! first with its first packets, then every `rtcp_interval_s` while
//! packets flow, and one with the BYE that ends it. Each maps the wall
//! clock to the viewer's RTP timestamps, linearly, as a sender's clock
//! runs: a feed's clock is the timestamp of the first packet this thread
//! got of it, run on at the track's rate from when it came. Every track of
//! a stream is so anchored at the same moment, which keeps the tracks in
//! sync for players that sync them by their reports. It is never moved:
//! a mapping taken afresh from each packet's arrival jitters with it, and
//! ffmpeg shifts a track's times by each change (seen: a frame dropped
//! as out of order). A publisher that continues a held stream is
//! renumbered to follow on by the wall clock (`fjord_live::handover`), so
//! the mapping holds across it; a publisher's clock that drifts from ours
//! moves its packets away from the mapping, every track alike.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fjord_proto::rtcp::{NtpTime, SENDER_REPORT_MAX_LEN, sender_report};

use super::Sink;
use crate::{
    Output,
    command::{LiveBatch, LiveViewer},
};

/// A feed's first packet's timestamp and when it came.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    ts: u32,
    at: Instant,
}

impl Clock {
    /// The clock of a feed whose first batch is `batch`, which came at
    /// `at`.
    pub(super) fn of_batch(batch: &LiveBatch, at: Instant) -> Option<Clock> {
        let p = batch.last()?;
        let ts = u32::from_be_bytes(p.get(4..8)?.try_into().ok()?);
        Some(Clock { ts, at })
    }

    /// The feed's RTP time at `now`, at `rate` Hz.
    fn at(&self, now: Instant, rate: u32) -> u32 {
        let ticks = now.saturating_duration_since(self.at).as_nanos() * u128::from(rate);
        self.ts.wrapping_add((ticks / 1_000_000_000) as u32)
    }
}

/// Sends viewer `v` a sender report (and BYE when `bye`) of its feed's
/// clock `clock` (none: no packet came yet, so its timestamp says 0).
pub(super) fn send(v: &LiveViewer, clock: Option<&Clock>, sink: &mut Sink<'_>, bye: bool) {
    let now = Instant::now();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let rtp = clock.map_or(0, |c| c.at(now, v.clock_rate).wrapping_add(v.ts_delta));
    let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
    let (packets, octets) = v.sent;
    let n = sender_report(
        &mut buf,
        v.ssrc,
        NtpTime::from_unix(wall),
        rtp,
        packets,
        octets,
        sink.cname,
        bye,
    );
    let report = &buf[..n];
    match &v.output {
        Output::Udp {
            rtcp, rtcp_peer, ..
        } => {
            let _ = rtcp.socket().send_to(report, &(*rtcp_peer).into());
        }
        Output::Interleaved {
            conn, rtcp_channel, ..
        } => {
            if let Some(c) = sink.connections.get_mut(conn) {
                c.send_or_queue(*rtcp_channel, [&[], report, &[]], now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_clock_runs_on_from_a_packet_at_the_tracks_rate() {
        let t0 = Instant::now();
        let mut p = [0u8; 12];
        p[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let batch: LiveBatch = vec![Arc::from(&[0u8; 12][..]), Arc::from(&p[..])].into();
        let c = Clock::of_batch(&batch, t0).unwrap();
        assert_eq!(c.at(t0, 90_000), u32::MAX);
        // 1.5 s at 90 kHz, wrapping.
        let later = t0 + Duration::from_millis(1500);
        assert_eq!(c.at(later, 90_000), 135_000 - 1);
        assert_eq!(c.at(later, 48_000), 72_000 - 1);
        let empty: LiveBatch = Vec::new().into();
        assert!(Clock::of_batch(&empty, t0).is_none());
    }
}

//! The RTCP sender report a live viewer's BYE carries (RFC 3550 §6.4.1):
//! the wall clock as NTP time, the packets and payload octets it was
//! sent, and an RTP time: the feed's first packet's timestamp (the first
//! this thread got), run on at the track's rate from its arrival.
//!
//! No report goes while packets flow. A mapping from arrival is right
//! only for a publisher that sends its tracks in step; GStreamer's
//! `rtspclientsink` does not, ffmpeg as a viewer resyncs its tracks by the
//! first reports, and a test saw it drop the frames after the key frame.
//! The publisher's own reports, relayed in the viewers' numbering, would
//! be the right mapping: not built.

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

//! RTCP sender reports to live viewers (RFC 3550 §6.4.1): packets and
//! payload octets counted on what the viewer was sent, and the time
//! mapping of the publisher's own last sender report of the track
//! ([`LiveSync`]) carried into the viewer's numbering (its `ts_delta`). A
//! viewer that relays them ([`LiveViewer::relay`]) gets one before its
//! first packets, then every `rtcp_interval_s` while packets flow, and one
//! with its BYE; one whose track had no publisher report at its first
//! packets gets none but the BYE's, which then says the wall clock and
//! the feed's first packet's timestamp run on from its arrival ([`Clock`]).
//!
//! The publisher's pair is run forward to when the report leaves: both
//! times by the same whole ticks at the track's rate, so the pair stays on
//! the publisher's line exactly, and the NTP time reads as the report's
//! send time on the publisher's clock. A mapping made here from packets'
//! arrival would be wrong for a publisher that does not send its tracks in
//! step (GStreamer's `rtspclientsink`); the publisher's reports all come
//! from its one NTP clock, so players sync the tracks as it meant.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fjord_proto::rtcp::{NtpTime, SENDER_REPORT_MAX_LEN, sender_report};

use super::Sink;
use crate::{
    Output,
    command::{LiveBatch, LiveSync, LiveViewer},
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

/// Sends viewer `v` a sender report (and BYE when `bye`) of the
/// publisher's mapping `sync`, else (a BYE's) of its feed's clock `clock`
/// (none: no packet came yet, so its timestamp says 0).
pub(super) fn send(
    v: &LiveViewer,
    (sync, clock): (Option<&LiveSync>, Option<&Clock>),
    sink: &mut Sink<'_>,
    bye: bool,
) {
    let now = Instant::now();
    let (ntp, rtp) = match sync {
        Some(s) => relayed(s, now, v.clock_rate),
        None => {
            let wall = SystemTime::now().duration_since(UNIX_EPOCH);
            let ntp = NtpTime::from_unix(wall.unwrap_or(Duration::ZERO));
            (ntp, clock.map_or(0, |c| c.at(now, v.clock_rate)))
        }
    };
    let rtp = rtp.wrapping_add(v.ts_delta);
    let mut buf = [0u8; SENDER_REPORT_MAX_LEN];
    let (packets, octets) = v.sent;
    let n = sender_report(&mut buf, v.ssrc, ntp, rtp, packets, octets, sink.cname, bye);
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

/// The publisher's mapping `sync` at `now`, in the stream's numbering:
/// its RTP time run on by the whole ticks (at `rate` Hz) since it came,
/// its NTP time by exactly as long, both wrapping.
fn relayed(sync: &LiveSync, now: Instant, rate: u32) -> (NtpTime, u32) {
    let rate = u128::from(rate.max(1));
    let ticks = now.saturating_duration_since(sync.at).as_nanos() * rate / 1_000_000_000;
    // NTP's unit is 2^-32 s.
    let ntp = sync.ntp.0.wrapping_add(((ticks << 32) / rate) as u64);
    (NtpTime(ntp), sync.rtp.wrapping_add(ticks as u32))
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

    #[test]
    fn a_publisher_report_runs_on_along_its_own_line_wrapping() {
        let t0 = Instant::now();
        let sync = LiveSync {
            ntp: NtpTime(0xffff_ffff_8000_0000),
            rtp: u32::MAX - 10,
            at: t0,
        };
        assert_eq!(relayed(&sync, t0, 90_000), (sync.ntp, sync.rtp));
        // 1.5 s later at 48 kHz: 72,000 ticks, and the NTP time 1.5 s on,
        // both wrapping.
        let later = t0 + Duration::from_millis(1500);
        let (ntp, rtp) = relayed(&sync, later, 48_000);
        assert_eq!(rtp, 72_000 - 11);
        assert_eq!(ntp, NtpTime(0x0000_0001_0000_0000));
        // A time between ticks: both advance by the whole ticks only, so
        // the pair stays on the line (NTP within a unit of it).
        let (ntp, rtp) = relayed(&sync, t0 + Duration::from_micros(50), 90_000);
        assert_eq!(rtp.wrapping_sub(sync.rtp), 4);
        let want = (4u64 << 32) / 90_000;
        assert_eq!(ntp.0.wrapping_sub(sync.ntp.0), want);
        // A report stamped after now (reordered instants) does not run back.
        let early = LiveSync { at: later, ..sync };
        assert_eq!(relayed(&early, t0, 90_000), (sync.ntp, sync.rtp));
    }
}

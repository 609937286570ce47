//! RTCP sender reports and BYE (RFC 3550 §6.4.1) of a source stream and
//! its repair stream, over UDP or the client's RTSP connection: each maps
//! the wall clock to the stream's RTP clock, so players can sync tracks.

use std::time::{SystemTime, UNIX_EPOCH};

use fjord_media::plan::rtp_ticks;
use fjord_proto::rtcp::NtpTime;

use super::{Session, State, pacing::Pacing};
use crate::command::Output;

impl Session {
    /// RTCP sender report (RFC 3550 §6.4.1): the wall clock now against the
    /// RTP timestamp the stream's clock has now, so players can sync tracks.
    /// A stopped stream reports (and says BYE) only when it ends; an ended
    /// one has said BYE already.
    pub(super) fn report(&mut self, p: &mut Pacing, bye: bool) {
        match self.state {
            State::Playing(_) => {}
            State::Stopped if bye => {}
            State::Stopped | State::Ended => return,
        }
        let clock = self.track().map_or(90_000, |t| t.clock_rate());
        let media_ns = self.stream_ns(p.now);
        let rtp_now = self.ts0.wrapping_add(rtp_ticks(media_ns, clock));
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let ntp = NtpTime::from_unix(wall);
        let bytes = self
            .report
            .fill(ntp, rtp_now, self.packets, self.octets, bye);
        send_rtcp(&self.output, bytes, p);
        // The repair stream's timestamps are the source's (docs/fec.md), so
        // its report maps the same instant to the same RTP time.
        if let Some(r) = &mut self.repair
            && (r.packets > 0 || bye)
        {
            let bytes = r.report.fill(ntp, rtp_now, r.packets, r.octets, bye);
            send_rtcp(&r.output, bytes, p);
        }
    }
}

fn send_rtcp(output: &Output, bytes: &[u8], p: &mut Pacing) {
    match output {
        Output::Udp {
            rtcp, rtcp_peer, ..
        } => {
            let _ = rtcp.socket().send_to(bytes, &(*rtcp_peer).into());
        }
        Output::Interleaved {
            conn, rtcp_channel, ..
        } => {
            if let Some(c) = p.connections.get_mut(conn) {
                c.send_frame(*rtcp_channel, bytes, p.now);
            }
        }
    }
}

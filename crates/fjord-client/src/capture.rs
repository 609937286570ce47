//! Collecting a whole stream until the server says goodbye.

use std::time::{Duration, Instant};

use crate::rtcp::RtcpReceived;
use crate::rtp::Received;
use crate::{Event, Result};

/// Anything that yields media events: a [`crate::UdpReceiver`] or an
/// [`crate::RtspClient`] in interleaved mode.
pub trait PacketSource {
    /// The next event, waiting at most `timeout`; `Ok(None)` on timeout.
    fn recv_event(&mut self, timeout: Duration) -> Result<Option<Event>>;
}

/// Why [`capture`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// An RTCP BYE arrived.
    Bye,
    /// Nothing arrived for the quiet timeout.
    Quiet,
    /// The overall limit was reached.
    Limit,
    /// The packet count limit was reached.
    Count,
    /// The connection closed (interleaved only).
    Closed,
}

/// What [`capture`] collected.
#[derive(Debug, Clone)]
pub struct Capture {
    /// RTP packets in arrival order.
    pub packets: Vec<Received>,
    /// RTCP compound packets in arrival order.
    pub rtcp: Vec<RtcpReceived>,
    /// Count of datagrams/frames that parsed as neither.
    pub garbage: usize,
    /// Why it stopped.
    pub end: EndReason,
}

impl Capture {
    /// The payloads concatenated in arrival order.
    pub fn payload_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.packets.iter().map(|p| p.payload.len()).sum());
        for p in &self.packets {
            v.extend_from_slice(&p.payload);
        }
        v
    }

    /// Whether a BYE was seen.
    pub fn saw_bye(&self) -> bool {
        self.rtcp.iter().any(RtcpReceived::is_bye)
    }
}

/// Receives from `src` until an RTCP BYE (then drains what is already
/// queued), `quiet` without any event, `max_packets` RTP packets, or `limit`
/// in total.
pub fn capture(
    src: &mut dyn PacketSource,
    quiet: Duration,
    limit: Duration,
    max_packets: Option<usize>,
) -> Result<Capture> {
    let start = Instant::now();
    let mut cap = Capture {
        packets: Vec::new(),
        rtcp: Vec::new(),
        garbage: 0,
        end: EndReason::Limit,
    };
    let mut bye = false;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= limit {
            cap.end = EndReason::Limit;
            break;
        }
        let quiet_bound = quiet <= limit - elapsed;
        let wait = if bye {
            Duration::from_millis(20)
        } else {
            quiet.min(limit - elapsed)
        };
        let event = match src.recv_event(wait) {
            Ok(e) => e,
            Err(crate::Error::Closed) => {
                cap.end = if bye {
                    EndReason::Bye
                } else {
                    EndReason::Closed
                };
                break;
            }
            Err(e) => return Err(e),
        };
        match event {
            None if bye => {
                cap.end = EndReason::Bye;
                break;
            }
            None => {
                cap.end = if quiet_bound {
                    EndReason::Quiet
                } else {
                    EndReason::Limit
                };
                break;
            }
            Some(Event::Rtp(p)) => {
                cap.packets.push(p);
                if max_packets.is_some_and(|m| cap.packets.len() >= m) {
                    cap.end = EndReason::Count;
                    break;
                }
            }
            Some(Event::Rtcp(r)) => {
                bye |= r.is_bye();
                cap.rtcp.push(r);
            }
            Some(Event::Garbage { .. }) => cap.garbage += 1,
        }
    }
    Ok(cap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtcp::RtcpPacket;
    use std::collections::VecDeque;

    struct Script(VecDeque<Option<Event>>);

    impl PacketSource for Script {
        fn recv_event(&mut self, _timeout: Duration) -> Result<Option<Event>> {
            match self.0.pop_front() {
                Some(e) => Ok(e),
                None => Err(crate::Error::Closed),
            }
        }
    }

    fn rtp(seq: u16) -> Option<Event> {
        Some(Event::Rtp(Received {
            arrival: Instant::now(),
            seq,
            rtp_ts: 0,
            marker: false,
            pt: 33,
            ssrc: 1,
            payload: vec![seq as u8],
        }))
    }

    fn rtcp(packets: Vec<RtcpPacket>) -> Option<Event> {
        Some(Event::Rtcp(RtcpReceived {
            arrival: Instant::now(),
            packets,
        }))
    }

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn stops_after_bye_and_drains_queued_packets() {
        let bye = rtcp(vec![RtcpPacket::Bye { ssrcs: vec![1] }]);
        let mut s = Script(VecDeque::from([rtp(1), rtp(2), bye, rtp(3), None, rtp(4)]));
        let cap = capture(&mut s, LONG / 2, LONG, None).unwrap();
        assert_eq!(cap.end, EndReason::Bye);
        assert!(cap.saw_bye());
        assert_eq!(cap.payload_bytes(), vec![1, 2, 3]);
    }

    #[test]
    fn stops_on_quiet_count_and_close() {
        let sr = rtcp(vec![RtcpPacket::Other { pt: 202 }]);
        let mut s = Script(VecDeque::from([rtp(1), sr, None, rtp(2)]));
        let cap = capture(&mut s, LONG / 2, LONG, None).unwrap();
        assert_eq!(
            (cap.end, cap.packets.len(), cap.rtcp.len()),
            (EndReason::Quiet, 1, 1)
        );

        let mut s = Script(VecDeque::from([rtp(1), rtp(2), rtp(3)]));
        let cap = capture(&mut s, LONG / 2, LONG, Some(2)).unwrap();
        assert_eq!((cap.end, cap.packets.len()), (EndReason::Count, 2));

        let garbage = Some(Event::Garbage {
            arrival: Instant::now(),
            channel: 0,
            data: vec![],
        });
        let mut s = Script(VecDeque::from([rtp(1), garbage]));
        let cap = capture(&mut s, LONG / 2, LONG, None).unwrap();
        assert_eq!((cap.end, cap.garbage), (EndReason::Closed, 1));
    }
}

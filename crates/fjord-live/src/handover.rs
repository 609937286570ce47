//! A stream passing from one publisher to the next (`live_grace_s`): when
//! its publisher goes, the stream is held and its viewers wait; a new
//! publisher of the same media within the grace continues it, its packets
//! renumbered so each viewer sees one stream, with no sequence gap and a
//! timestamp gap of the time nobody published; past the grace it ends.
//!
//! Renumbering is done once per packet as it arrives (not per viewer):
//! each viewer's own offsets and SSRC stay as they were. A publisher's
//! sender report's RTP time is renumbered as its packets are, once they
//! set the offsets ([`Renumber::timestamp`]).

use std::time::{Duration, Instant};

use crate::sdp::Announced;

/// What becomes of a stream whose publisher went at `now`: held until the
/// instant returned, or (a grace of 0) ended at once.
pub fn hold(now: Instant, grace: Duration) -> Option<Instant> {
    (!grace.is_zero()).then(|| now + grace)
}

/// Whether `new` may continue the stream `old` described: its viewers set
/// their decoders up from `old`'s formats (`m=`, `a=rtpmap`, `a=fmtp`: clock
/// rates, parameter sets), so they must be the same, byte for byte; the
/// rest (session lines, bandwidths, SSRC and CNAME attributes) may change.
/// `Err` says why not.
pub fn continues(old: &Announced, new: &Announced) -> Result<(), &'static str> {
    if old.tracks.len() != new.tracks.len() {
        return Err("the new publisher announced another number of tracks");
    }
    let same_track = |(a, b): (&crate::sdp::Track, &crate::sdp::Track)| {
        (a.codec, &a.encoding, a.payload_type, a.clock_rate)
            == (b.codec, &b.encoding, b.payload_type, b.clock_rate)
    };
    if !old.tracks.iter().zip(&new.tracks).all(same_track) {
        return Err("the new publisher announced other formats");
    }
    if !decoder_lines(&old.viewer_sdp).eq(decoder_lines(&new.viewer_sdp)) {
        return Err("the new publisher announced other media parameters");
    }
    Ok(())
}

/// The lines of an SDP a decoder is set up from.
fn decoder_lines(sdp: &str) -> impl Iterator<Item = &str> {
    (sdp.lines().map(str::trim_end)).filter(|l| {
        ["m=", "a=rtpmap:", "a=fmtp:"]
            .iter()
            .any(|k| l.starts_with(k))
    })
}

/// One track's numbering as viewers see it, across publishers: the
/// offsets added to the current publisher's sequence numbers and
/// timestamps, and the newest packet sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Renumber {
    seq: u16,
    ts: u32,
    /// The newest packet's numbering (after the offsets) and arrival.
    last: Option<(u16, u32, Instant)>,
    /// A new publisher took over: its first packet sets the offsets.
    rebase: bool,
}

impl Renumber {
    /// A packet of the current publisher numbered `(seq, ts)`, arrived at
    /// `now`: its numbering for viewers. The first packet after a
    /// [`Renumber::next_publisher`] follows the last one sent: the next
    /// sequence number, and the timestamp advanced by the time between
    /// them at `clock_rate` (at least one tick: it is a new frame).
    pub fn map(&mut self, (seq, ts): (u16, u32), now: Instant, clock_rate: u32) -> (u16, u32) {
        if self.rebase {
            self.rebase = false;
            if let Some((last_seq, last_ts, at)) = self.last {
                let gap = now.saturating_duration_since(at);
                let ticks = (gap.as_nanos() * u128::from(clock_rate) / 1_000_000_000).max(1);
                // Modulo 2^32, as RTP timestamps are.
                let next_ts = last_ts.wrapping_add(ticks as u32);
                self.seq = last_seq.wrapping_add(1).wrapping_sub(seq);
                self.ts = next_ts.wrapping_sub(ts);
            }
        }
        let mapped = (seq.wrapping_add(self.seq), ts.wrapping_add(self.ts));
        // Reordered packets leave `last` at the newest (RFC 3550 A.1).
        let newer = self
            .last
            .is_none_or(|(s, _, _)| (mapped.0.wrapping_sub(s) as i16) > 0);
        if newer {
            self.last = Some((mapped.0, mapped.1, now));
        }
        mapped
    }

    /// A new publisher continues the stream: its first packet is
    /// renumbered to follow the last one sent.
    pub fn next_publisher(&mut self) {
        self.rebase = true;
    }

    /// The newest packet's sequence number and timestamp, as viewers see
    /// them.
    pub fn last(&self) -> Option<(u16, u32)> {
        self.last.map(|(s, t, _)| (s, t))
    }

    /// A time `ts` of the current publisher's RTP clock (its sender
    /// report's) as viewers number it; none from a
    /// [`Renumber::next_publisher`] until its first packet sets the
    /// offsets: the last publisher's would place it wrongly.
    pub fn timestamp(&self, ts: u32) -> Option<u32> {
        (!self.rebase).then(|| ts.wrapping_add(self.ts))
    }

    /// Whether packets are renumbered (a second publisher or later): the
    /// intake then writes a new header, else it keeps the publisher's.
    pub fn shifts(&self) -> bool {
        (self.seq, self.ts) != (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, sdp};

    const FFMPEG: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\na=tool:libavformat 61.7.100\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAFazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aOvjyyLA; profile-level-id=640015\r\na=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\na=control:streamid=1\r\n";

    fn announced(text: &str) -> Announced {
        sdp::parse(text.as_bytes(), &Limits::default()).unwrap()
    }

    #[test]
    fn a_grace_of_zero_ends_at_once() {
        let now = Instant::now();
        assert_eq!(hold(now, Duration::ZERO), None);
        assert_eq!(
            hold(now, Duration::from_secs(10)),
            Some(now + Duration::from_secs(10))
        );
    }

    #[test]
    fn the_same_media_continues_and_other_media_does_not() {
        let old = announced(FFMPEG);
        // Another session line and controls: still the same media.
        let renamed = FFMPEG
            .replace("s=No Name", "s=Camera")
            .replace("o=- 0 0", "o=- 77 1")
            .replace("streamid=", "track")
            .replace(
                "a=rtpmap:97",
                "b=AS:128\r\na=ssrc:1234 cname:cam\r\na=rtpmap:97",
            );
        assert_eq!(continues(&old, &announced(&renamed)), Ok(()));
        let other_sps = FFMPEG.replace("aOvjyyLA", "aOvjyyLB");
        assert!(continues(&old, &announced(&other_sps)).is_err());
        let other_rate = FFMPEG.replace("44100/2", "48000/2");
        assert!(continues(&old, &announced(&other_rate)).is_err());
        let video_only = &FFMPEG[..FFMPEG.find("m=audio").unwrap()];
        let e = continues(&old, &announced(video_only)).unwrap_err();
        assert!(e.contains("number of tracks"), "{e}");
    }

    #[test]
    fn the_first_publisher_keeps_its_numbering() {
        let (mut r, t0) = (Renumber::default(), Instant::now());
        assert_eq!(r.map((100, 9000), t0, 90_000), (100, 9000));
        assert_eq!(r.map((101, 12_600), t0, 90_000), (101, 12_600));
        assert!(!r.shifts());
        assert_eq!(r.last(), Some((101, 12_600)));
    }

    #[test]
    fn a_new_publisher_follows_the_last_packet_by_the_time_between() {
        let (mut r, t0) = (Renumber::default(), Instant::now());
        r.map((65_535, u32::MAX - 100), t0, 90_000);
        r.next_publisher();
        // 1.5 s later, numbered from elsewhere: the next sequence number
        // (wrapping) and 135,000 ticks on (wrapping).
        let t1 = t0 + Duration::from_millis(1500);
        assert_eq!(r.map((7, 500), t1, 90_000), (0, 134_899));
        assert!(r.shifts());
        assert_eq!(r.map((8, 4100), t1, 90_000), (1, 138_499));
        // Still continuous after a third publisher, at once: one tick on.
        r.next_publisher();
        assert_eq!(r.map((40_000, 0), t1, 90_000), (2, 138_500));
    }

    #[test]
    fn a_late_packet_does_not_move_the_newest_back() {
        let (mut r, t0) = (Renumber::default(), Instant::now());
        r.map((10, 1000), t0, 8000);
        r.map((12, 1320), t0, 8000);
        r.map((11, 1160), t0, 8000);
        assert_eq!(r.last(), Some((12, 1320)));
        r.next_publisher();
        assert_eq!(r.map((0, 0), t0 + Duration::from_secs(1), 8000), (13, 9320));
    }

    #[test]
    fn a_track_that_sent_nothing_keeps_the_new_numbering() {
        let (mut r, t0) = (Renumber::default(), Instant::now());
        r.next_publisher();
        assert_eq!(r.map((5, 50), t0, 90_000), (5, 50));
        assert!(!r.shifts());
    }

    #[test]
    fn a_report_time_is_renumbered_as_its_publishers_packets() {
        let (mut r, t0) = (Renumber::default(), Instant::now());
        assert_eq!(
            r.timestamp(u32::MAX),
            Some(u32::MAX),
            "the first keeps its own"
        );
        r.map((1, 1000), t0, 90_000);
        r.next_publisher();
        assert_eq!(r.timestamp(7), None, "the new one sent no packet yet");
        let t1 = t0 + Duration::from_secs(1);
        let first = r.map((9, u32::MAX - 10), t1, 90_000);
        assert_eq!(first.1, 91_000);
        // 20 ticks after its first packet, wrapping: 20 after it for viewers.
        assert_eq!(r.timestamp(9), Some(91_020));
    }

    proptest::proptest! {
        /// Whatever the numbering of the two publishers, the viewers' sequence
        /// numbers go on by one and their timestamps by the gap's ticks.
        #[test]
        fn any_handover_is_continuous(
            a in proptest::prelude::any::<(u16, u32)>(),
            b in proptest::prelude::any::<(u16, u32)>(),
            gap_ms in 0u64..300_000,
            rate in 1u32..200_000,
        ) {
            let (mut r, t0) = (Renumber::default(), Instant::now());
            let last = r.map(a, t0, rate);
            r.next_publisher();
            let gap = Duration::from_millis(gap_ms);
            let next = r.map(b, t0 + gap, rate);
            proptest::prop_assert_eq!(next.0, last.0.wrapping_add(1));
            let ticks = (u128::from(gap_ms) * u128::from(rate) / 1000).max(1) as u32;
            proptest::prop_assert_eq!(next.1, last.1.wrapping_add(ticks));
        }
    }
}

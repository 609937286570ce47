//! The ANNOUNCE body (RFC 2326 §10.3, RFC 8866): the publisher's tracks,
//! and the SDP a viewer's DESCRIBE gets for the same stream.

use sdp_types::{Attribute, Connection, Session};

use crate::{Limits, LiveError};

/// What a track carries, as far as joining viewers is concerned: where a
/// decoder can start ([`crate::keyframe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    H264,
    H265,
    /// MPEG-2 transport stream (RFC 2250).
    Mp2t,
    /// AAC (`MPEG4-GENERIC`, `MP4A-LATM`), Opus and any other audio: every
    /// packet is a place to start.
    Audio,
    /// Anything else: passed through, never a place to start.
    Other,
}

impl Codec {
    /// Whether the stream's join points are this track's key frames.
    pub fn is_video(self) -> bool {
        matches!(self, Codec::H264 | Codec::H265 | Codec::Mp2t)
    }
}

/// One media section of the ANNOUNCE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Track {
    pub codec: Codec,
    /// The encoding name of the first format's `rtpmap` (`H264`), upper case.
    pub encoding: String,
    pub payload_type: u8,
    pub clock_rate: u32,
    /// The encoding parameters of the `rtpmap` (audio: channels), if any.
    pub channels: Option<u8>,
    /// The first format's `a=fmtp` parameters (after the payload type),
    /// if any: the codec's configuration a recording needs.
    pub fmtp: Option<String>,
    /// The publisher's `a=control` (relative or absolute), if any.
    pub control: Option<String>,
}

/// A parsed ANNOUNCE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    pub tracks: Vec<Track>,
    /// The description viewers get: the publisher's, with no address of
    /// its own and controls `trackID=N` (N from 0).
    pub viewer_sdp: String,
}

/// Reads an ANNOUNCE body under `limits`.
pub fn parse(body: &[u8], limits: &Limits) -> Result<Announced, LiveError> {
    if body.len() > limits.max_sdp_bytes {
        return Err(LiveError::SdpTooLarge(body.len(), limits.max_sdp_bytes));
    }
    let mut session = Session::parse(body).map_err(|e| LiveError::BadSdp(e.to_string()))?;
    let n = session.medias.len();
    if n > limits.max_tracks {
        return Err(LiveError::TooManyTracks(n, limits.max_tracks));
    }
    if n == 0 {
        return Err(LiveError::NoTracks);
    }
    let tracks = session.medias.iter().map(track).collect::<Result<_, _>>()?;
    session.connection = Some(Connection::new(
        sdp_types::NetType::In,
        sdp_types::AddrType::Ip4,
        "0.0.0.0",
    ));
    session.attributes.retain(|a| a.attribute != "control");
    session
        .attributes
        .push(Attribute::with_value("control", "*"));
    for (i, m) in session.medias.iter_mut().enumerate() {
        m.port = 0;
        m.connections.clear();
        m.attributes.retain(|a| a.attribute != "control");
        m.attributes
            .push(Attribute::with_value("control", format!("trackID={i}")));
    }
    let mut out = Vec::new();
    session
        .write(&mut out)
        .map_err(|e| LiveError::BadSdp(e.to_string()))?;
    let viewer_sdp = String::from_utf8(out).map_err(|e| LiveError::BadSdp(e.to_string()))?;
    Ok(Announced { tracks, viewer_sdp })
}

fn track(m: &sdp_types::Media) -> Result<Track, LiveError> {
    let bad = |why: &str| LiveError::BadSdp(format!("media {:?}: {why}", m.media));
    let fmt = m
        .fmt
        .split_whitespace()
        .next()
        .ok_or_else(|| bad("no format"))?;
    let payload_type: u8 = fmt
        .parse()
        .ok()
        .filter(|pt| *pt < 128)
        .ok_or_else(|| bad("the format is not an RTP payload type"))?;
    let rtpmap = attr(m, "rtpmap").find_map(|v| {
        let (pt, rest) = v.split_once(' ')?;
        (pt.trim() == fmt).then(|| rest.trim().to_owned())
    });
    let mut channels = None;
    let (encoding, clock_rate) = match (rtpmap, payload_type) {
        (Some(map), _) => {
            let mut parts = map.split('/');
            let name = parts.next().unwrap_or_default().to_ascii_uppercase();
            let clock = parts.next().and_then(|c| c.parse().ok());
            channels = parts.next().and_then(|c| c.trim().parse().ok());
            (name, clock.ok_or_else(|| bad("rtpmap has no clock rate"))?)
        }
        (None, 33) => ("MP2T".to_owned(), 90_000),
        (None, pt) => static_type(pt).ok_or_else(|| bad("no rtpmap for a dynamic type"))?,
    };
    let fmtp = attr(m, "fmtp").find_map(|v| {
        let (pt, rest) = v.split_once(' ')?;
        (pt.trim() == fmt).then(|| rest.trim().to_owned())
    });
    if clock_rate == 0 {
        return Err(bad("the clock rate is 0"));
    }
    let codec = match (encoding.as_str(), m.media.as_str()) {
        ("H264", _) => Codec::H264,
        ("H265", _) => Codec::H265,
        ("MP2T", _) => Codec::Mp2t,
        (_, "audio") => Codec::Audio,
        _ => Codec::Other,
    };
    let control = attr(m, "control").next().map(str::to_owned);
    Ok(Track {
        codec,
        encoding,
        payload_type,
        clock_rate,
        channels,
        fmtp,
        control,
    })
}

/// The values of the media's attributes named `name`.
fn attr<'a>(m: &'a sdp_types::Media, name: &'a str) -> impl Iterator<Item = &'a str> {
    (m.attributes.iter())
        .filter(move |a| a.attribute == name)
        .filter_map(|a| a.value.as_deref())
}

/// RFC 3551's static payload types fjord knows by number.
fn static_type(pt: u8) -> Option<(String, u32)> {
    let (name, clock) = match pt {
        0 => ("PCMU", 8000),
        8 => ("PCMA", 8000),
        14 => ("MPA", 90_000),
        32 => ("MPV", 90_000),
        _ => return None,
    };
    Some((name.to_owned(), clock))
}

impl Announced {
    /// The track a SETUP request-URI names: by the publisher's control
    /// (absolute, or relative to the stream's URL), else `trackID=N` or
    /// `streamid=N` as the last segment.
    pub fn track_for(&self, uri: &str) -> Option<usize> {
        let uri = uri.trim_end_matches('/');
        let by_control = self.tracks.iter().position(|t| {
            t.control.as_deref().is_some_and(|c| {
                let c = c.trim_end_matches('/');
                !c.is_empty() && c != "*" && (uri == c || uri.ends_with(&format!("/{c}")))
            })
        });
        by_control.or_else(|| {
            let last = uri.rsplit('/').next()?;
            let (key, n) = last.split_once('=')?;
            let n: usize = n.parse().ok()?;
            let known = key.eq_ignore_ascii_case("trackID") || key.eq_ignore_ascii_case("streamid");
            (known && n < self.tracks.len()).then_some(n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ffmpeg -f rtsp` announces for H.264 + AAC.
    pub(crate) const FFMPEG: &str = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\na=tool:libavformat 61.7.100\r\nm=video 0 RTP/AVP 96\r\nb=AS:200\r\na=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAFazZQUH7ARAAAAMAEAAAAwMg8UKZYA==,aOvjyyLA; profile-level-id=640015\r\na=control:streamid=0\r\nm=audio 0 RTP/AVP 97\r\nb=AS:128\r\na=rtpmap:97 MPEG4-GENERIC/44100/2\r\na=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\na=control:streamid=1\r\n";

    #[test]
    fn ffmpegs_announce_gives_its_tracks_and_a_viewer_sdp() {
        let a = parse(FFMPEG.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(a.tracks.len(), 2);
        assert_eq!(a.tracks[0].codec, Codec::H264);
        assert_eq!(a.tracks[0].clock_rate, 90_000);
        assert_eq!(a.tracks[1].codec, Codec::Audio);
        assert_eq!(a.tracks[1].clock_rate, 44_100);
        assert_eq!(a.tracks[1].payload_type, 97);
        assert_eq!(a.tracks[1].channels, Some(2));
        let fmtp = a.tracks[1].fmtp.as_deref().unwrap();
        assert!(fmtp.starts_with("profile-level-id=1;") && fmtp.ends_with("config=121056E500"));
        assert!(
            a.tracks[0]
                .fmtp
                .as_deref()
                .unwrap()
                .contains("sprop-parameter-sets=Z2QA")
        );
        assert!(a.viewer_sdp.contains("a=control:trackID=1\r\n"));
        assert!(a.viewer_sdp.contains("sprop-parameter-sets"));
        assert!(!a.viewer_sdp.contains("127.0.0.1\r\nt="));
        assert!(!a.viewer_sdp.contains("streamid"));
        let url = "rtsp://127.0.0.1:8554/live/a";
        assert_eq!(a.track_for(&format!("{url}/streamid=1")), Some(1));
        assert_eq!(a.track_for(&format!("{url}/trackID=0")), Some(0));
        assert_eq!(a.track_for(&format!("{url}/trackID=2")), None);
        assert_eq!(a.track_for(url), None);
        // The viewer's SDP reads back the same.
        let again = parse(a.viewer_sdp.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(again.tracks.len(), 2);
    }

    #[test]
    fn limits_are_enforced_with_their_status() {
        let small = Limits {
            max_sdp_bytes: 100,
            ..Limits::default()
        };
        let e = parse(FFMPEG.as_bytes(), &small).unwrap_err();
        assert_eq!(e.status(), 413);
        let one = Limits {
            max_tracks: 1,
            ..Limits::default()
        };
        assert_eq!(parse(FFMPEG.as_bytes(), &one).unwrap_err().status(), 453);
        let none = "v=0\r\no=- 0 0 IN IP4 1.2.3.4\r\ns=x\r\nt=0 0\r\n";
        assert_eq!(
            parse(none.as_bytes(), &Limits::default()),
            Err(LiveError::NoTracks)
        );
        assert!(parse(b"garbage", &Limits::default()).is_err());
    }

    #[test]
    fn mp2t_by_static_type_and_rtpmap() {
        let s = "v=0\r\no=- 0 0 IN IP4 1.2.3.4\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 33\r\na=control:track0\r\n";
        let a = parse(s.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(a.tracks[0].codec, Codec::Mp2t);
        assert_eq!(a.track_for("rtsp://h/live/x/track0"), Some(0));
        let dynamic = "v=0\r\no=- 0 0 IN IP4 1.2.3.4\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\n";
        assert!(parse(dynamic.as_bytes(), &Limits::default()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_body_is_read_or_refused_without_a_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = parse(&body, &Limits::default());
        }

        #[test]
        fn mutated_announces_never_panic(pos in 0usize..FFMPEG.len(), byte in proptest::prelude::any::<u8>()) {
            let mut body = FFMPEG.as_bytes().to_vec();
            body[pos] = byte;
            if let Ok(a) = parse(&body, &Limits::default()) {
                proptest::prop_assert!(a.tracks.len() <= 2);
            }
        }
    }
}

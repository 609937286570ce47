//! The SDP session description returned by DESCRIBE (RFC 8866, RFC 2326 §C).

use std::net::IpAddr;

use sdp_types::{Attribute, Connection, Media, Origin, Session, Time};

/// What DESCRIBE needs to know about a title.
#[derive(Debug, Clone, Copy)]
pub struct SdpTitle<'a> {
    /// `s=` line.
    pub name: &'a str,
    /// `o=` address (the server's address as the client reached it).
    pub origin_addr: IpAddr,
    /// `o=` session id (stable per title, e.g. from the index hash).
    pub session_id: u64,
    /// `a=range:npt=0-<duration>`; non-finite or ≤ 0 writes an open range.
    pub duration_s: f64,
    pub tracks: &'a [SdpTrack<'a>],
    /// `a=group:FEC-FR <source mid> <repair mid>` (RFC 5956) per pair.
    pub fec_groups: &'a [(&'a str, &'a str)],
}

/// One `m=` section.
#[derive(Debug, Clone, Copy)]
pub struct SdpTrack<'a> {
    /// `video`, `audio` or `application`.
    pub media: &'a str,
    pub payload_type: u8,
    /// Encoding name for `a=rtpmap`, e.g. `MP2T`.
    pub encoding: &'a str,
    pub clock_rate: u32,
    /// Audio channels, appended to `a=rtpmap` when non-zero.
    pub channels: u8,
    /// `a=fmtp:<pt> <this>` when present.
    pub fmtp: Option<&'a str>,
    /// `a=control:<this>`, e.g. `track1`.
    pub control: &'a str,
    /// `a=mid:<this>` (RFC 5888), for grouping.
    pub mid: Option<&'a str>,
}

/// Render the description with sdp-types' writer.
///
/// Text fields are cleaned of control characters and spaces where a space
/// would split an SDP field, so a title name cannot inject lines.
pub fn describe(t: &SdpTitle) -> String {
    let mut session = Session::new(
        Origin::with_ip_addr(t.session_id, 1, t.origin_addr),
        non_empty(&free_text(t.name)),
    );
    session.connection = Some(Connection::from_ip_addr(match t.origin_addr {
        IpAddr::V4(_) => IpAddr::from([0u8, 0, 0, 0]),
        IpAddr::V6(_) => IpAddr::from([0u16; 8]),
    }));
    session.times.push(Time::new(0, 0));
    session
        .attributes
        .push(Attribute::with_value("tool", "fjord"));
    session
        .attributes
        .push(Attribute::with_value("control", "*"));
    let range = if t.duration_s.is_finite() && t.duration_s > 0.0 {
        format!("npt=0-{:.3}", t.duration_s)
    } else {
        "npt=0-".to_owned()
    };
    session
        .attributes
        .push(Attribute::with_value("range", range));
    for (source, repair) in t.fec_groups {
        session.attributes.push(Attribute::with_value(
            "group",
            format!("FEC-FR {} {}", token(source), token(repair)),
        ));
    }
    for tr in t.tracks {
        let pt = tr.payload_type & 0x7f;
        let mut media = Media {
            media: non_empty(&token(tr.media)),
            port: 0,
            num_ports: None,
            proto: "RTP/AVP".to_owned(),
            fmt: pt.to_string(),
            media_title: None,
            connections: Vec::new(),
            bandwidths: Vec::new(),
            key: None,
            attributes: Vec::new(),
        };
        let mut rtpmap = format!("{pt} {}/{}", non_empty(&token(tr.encoding)), tr.clock_rate);
        if tr.channels > 0 {
            rtpmap.push_str(&format!("/{}", tr.channels));
        }
        media
            .attributes
            .push(Attribute::with_value("rtpmap", rtpmap));
        if let Some(fmtp) = tr.fmtp {
            media.attributes.push(Attribute::with_value(
                "fmtp",
                format!("{pt} {}", free_text(fmtp)),
            ));
        }
        media.attributes.push(Attribute::with_value(
            "control",
            non_empty(&token(tr.control)),
        ));
        if let Some(mid) = tr.mid {
            media
                .attributes
                .push(Attribute::with_value("mid", non_empty(&token(mid))));
        }
        session.medias.push(media);
    }
    let mut out = Vec::with_capacity(512);
    // Writing into a Vec cannot fail.
    let _ = session.write(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn free_text(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

fn token(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() && !c.is_whitespace())
        .collect()
}

fn non_empty(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn title<'a>(tracks: &'a [SdpTrack<'a>]) -> SdpTitle<'a> {
        SdpTitle {
            name: "clip.ts",
            origin_addr: "192.0.2.1".parse().unwrap(),
            session_id: 1234,
            duration_s: 10.0,
            tracks,
            fec_groups: &[],
        }
    }

    const TS: SdpTrack<'static> = SdpTrack {
        media: "video",
        payload_type: 33,
        encoding: "MP2T",
        clock_rate: 90000,
        channels: 0,
        fmtp: None,
        control: "track1",
        mid: None,
    };

    #[test]
    fn exact_text() {
        let s = describe(&title(&[TS]));
        assert_eq!(
            s,
            "v=0\r\no=- 1234 1 IN IP4 192.0.2.1\r\ns=clip.ts\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
             a=tool:fjord\r\na=control:*\r\na=range:npt=0-10.000\r\n\
             m=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:track1\r\n"
        );
    }

    /// A protected track and its repair stream, as `docs/fec.md` shows them.
    #[test]
    fn fec_grouping() {
        let source = SdpTrack {
            mid: Some("S1"),
            ..TS
        };
        let repair = SdpTrack {
            media: "application",
            payload_type: 100,
            encoding: "x-fjord-rfc6865",
            clock_rate: 90000,
            channels: 0,
            fmtp: Some("encoding-id=8; fssi=E:1324,m:8; k=223; repair=32; repair-window=300000"),
            control: "track1-fec",
            mid: Some("R1"),
        };
        let s = describe(&SdpTitle {
            fec_groups: &[("S1", "R1")],
            ..title(&[source, repair])
        });
        assert!(
            s.ends_with(
                "a=range:npt=0-10.000\r\na=group:FEC-FR S1 R1\r\n\
                 m=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:track1\r\na=mid:S1\r\n\
                 m=application 0 RTP/AVP 100\r\na=rtpmap:100 x-fjord-rfc6865/90000\r\n\
                 a=fmtp:100 encoding-id=8; fssi=E:1324,m:8; k=223; repair=32; repair-window=300000\r\n\
                 a=control:track1-fec\r\na=mid:R1\r\n"
            ),
            "{s}"
        );
    }

    #[test]
    fn parses_back() {
        let audio = SdpTrack {
            media: "audio",
            payload_type: 97,
            encoding: "MPEG4-GENERIC",
            clock_rate: 48000,
            channels: 2,
            fmtp: Some("streamtype=5;mode=AAC-hbr"),
            control: "track2",
            mid: None,
        };
        let tracks = [TS, audio];
        let s = describe(&title(&tracks));
        let parsed = sdp_types::Session::parse(s.as_bytes()).unwrap();
        assert_eq!(parsed.session_name, "clip.ts");
        assert_eq!(parsed.origin.sess_id, "1234");
        assert_eq!(parsed.origin.unicast_address, "192.0.2.1");
        assert_eq!(
            parsed.get_first_attribute_value("range").unwrap(),
            Some("npt=0-10.000")
        );
        assert_eq!(
            parsed.get_first_attribute_value("control").unwrap(),
            Some("*")
        );
        assert_eq!(parsed.medias.len(), 2);
        let a = &parsed.medias[1];
        assert_eq!(a.media, "audio");
        assert_eq!(a.fmt, "97");
        assert_eq!(a.proto, "RTP/AVP");
        assert_eq!(
            a.get_first_attribute_value("rtpmap").unwrap(),
            Some("97 MPEG4-GENERIC/48000/2")
        );
        assert_eq!(
            a.get_first_attribute_value("fmtp").unwrap(),
            Some("97 streamtype=5;mode=AAC-hbr")
        );
        assert_eq!(
            a.get_first_attribute_value("control").unwrap(),
            Some("track2")
        );
    }

    #[test]
    fn hostile_text_and_odd_values() {
        let evil = SdpTrack {
            media: "vid eo\r\n",
            payload_type: 200,
            encoding: "",
            clock_rate: 0,
            channels: 0,
            fmtp: Some("x\r\na=evil"),
            control: "tr ack\n",
            mid: None,
        };
        let t = SdpTitle {
            name: "bad\r\nname\0",
            origin_addr: "2001:db8::1".parse().unwrap(),
            session_id: u64::MAX,
            duration_s: f64::NAN,
            tracks: &[evil],
            fec_groups: &[],
        };
        let s = describe(&t);
        let parsed = sdp_types::Session::parse(s.as_bytes()).unwrap();
        assert_eq!(parsed.session_name, "badname");
        assert_eq!(parsed.origin.unicast_address, "2001:db8::1");
        assert!(s.contains("c=IN IP6 ::\r\n"));
        assert!(s.contains("a=range:npt=0-\r\n"));
        assert!(!s.contains("\na=evil"));
        assert_eq!(parsed.medias[0].media, "video");
        assert_eq!(parsed.medias[0].fmt, "72");
        assert_eq!(
            parsed.medias[0]
                .get_first_attribute_value("control")
                .unwrap(),
            Some("track")
        );
        let empty = SdpTitle {
            name: "",
            tracks: &[],
            ..t
        };
        let parsed = sdp_types::Session::parse(describe(&empty).as_bytes()).unwrap();
        assert_eq!(parsed.session_name, "-");
        assert!(parsed.medias.is_empty());
    }
}

//! The `Transport` header (RFC 2326 §12.39): choosing one of the client's
//! alternatives, and rendering our answer.
//!
//! Each alternative is parsed by `rtsp_types::headers::Transports`; we only
//! split the list ourselves (quote-aware) so one bad alternative does not hide
//! a good one, and so we can tell "unsupported" (461) from "garbage" (400).

use std::net::IpAddr;

use rtsp_types::headers::{
    RtpLowerTransport, RtpProfile, TRANSPORT, Transport, TransportMode, Transports,
};

/// The transport the server will use for one track.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportRequest {
    /// RTP/AVP over UDP unicast to the client's ports.
    Udp {
        client_rtp: u16,
        client_rtcp: u16,
        /// `destination=` if given; the server must check it against the
        /// peer address (or ignore it) to avoid being used as a reflector.
        destination: Option<IpAddr>,
    },
    /// RTP/AVP interleaved on the RTSP TCP connection.
    Tcp { rtp_channel: u8, rtcp_channel: u8 },
    /// RTP/AVP over UDP to a multicast group (RFC 2326 §12.39): the server
    /// picks the group and ports. What the client names is what it asked
    /// for, not a promise: a server that honoured it would send a title's
    /// RTP to any group and port a client chose (SSDP's, mDNS's).
    Multicast {
        destination: Option<IpAddr>,
        /// `port=` (RTP, RTCP).
        ports: Option<(u16, u16)>,
        ttl: Option<u8>,
    },
}

/// Why no alternative of a `Transport` header can be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Understood, but not something we serve (answer 461).
    #[error("unsupported transport: {0}")]
    Unsupported(String),
    /// Not a transport specification at all (answer 400).
    #[error("malformed Transport header")]
    Malformed,
}

impl TransportError {
    /// The status to answer with: 461 or 400.
    pub fn status(&self) -> u16 {
        match self {
            TransportError::Unsupported(_) => 461,
            TransportError::Malformed => 400,
        }
    }
}

/// Alternatives looked at; the rest of an absurdly long list is ignored.
const MAX_ALTERNATIVES: usize = 16;

/// Pick the first alternative of a client's `Transport` header that we
/// support: `RTP/AVP[/UDP]` unicast with `client_port`, or `RTP/AVP/TCP`
/// (channels from `interleaved`, default 0-1).
///
/// A missing `unicast`/`multicast` flag is read as unicast when
/// `client_port` is present (RFC 2326 says multicast is the default, but no
/// client relies on that).
pub fn choose(header: &str) -> Result<TransportRequest, TransportError> {
    choose_for(header, true)
}

/// As [`choose`], with multicast alternatives unsupported unless
/// `multicast`: a client that lists unicast after multicast gets unicast
/// from a server that does not offer multicast.
pub fn choose_for(header: &str, multicast: bool) -> Result<TransportRequest, TransportError> {
    choose_mode(header, multicast, &TransportMode::Play)
}

/// A publisher's `Transport` (RFC 2326 §10.11: `mode=record`): the first
/// unicast UDP or TCP alternative with `mode=record`; `client_port` names
/// where the publisher sends RTCP from, and it sends RTP to our ports.
pub fn choose_record(header: &str) -> Result<TransportRequest, TransportError> {
    choose_mode(header, false, &TransportMode::Record)
}

/// Whether any alternative of `header` asks for `mode=record`.
pub fn is_record(header: &str) -> bool {
    (split_alternatives(header).take(MAX_ALTERNATIVES)).any(|alt| {
        alt.split(';').any(|p| {
            let p = p.trim();
            let v = p.strip_prefix("mode=").or_else(|| p.strip_prefix("MODE="));
            v.is_some_and(|v| v.trim_matches('"').eq_ignore_ascii_case("record"))
        })
    })
}

fn choose_mode(
    header: &str,
    multicast: bool,
    mode: &TransportMode,
) -> Result<TransportRequest, TransportError> {
    let mut first_reason: Option<String> = None;
    for alt in split_alternatives(header).take(MAX_ALTERNATIVES) {
        let alt = alt.trim();
        if alt.is_empty() {
            continue;
        }
        if !spec_is_valid(alt) {
            continue;
        }
        let reason = match parse_one(alt) {
            Ok(t) => match evaluate(&t, multicast, mode) {
                Ok(req) => return Ok(req),
                Err(reason) => reason,
            },
            Err(()) => format!("bad parameters in `{}`", clip(alt)),
        };
        first_reason.get_or_insert(reason);
    }
    Err(first_reason.map_or(TransportError::Malformed, TransportError::Unsupported))
}

/// Our answer for UDP, e.g.
/// `RTP/AVP;unicast;client_port=5000-5001;server_port=6970-6971;ssrc=0A1B2C3D`.
pub fn reply_udp(
    client_rtp: u16,
    client_rtcp: u16,
    server_rtp: u16,
    server_rtcp: u16,
    ssrc: u32,
) -> String {
    // A format! keeps the conventional parameter order; rtsp-types would
    // need a throw-away Request to render one header.
    format!(
        "RTP/AVP;unicast;client_port={client_rtp}-{client_rtcp};\
         server_port={server_rtp}-{server_rtcp};ssrc={ssrc:08X}"
    )
}

/// Our answer for TCP, e.g. `RTP/AVP/TCP;unicast;interleaved=0-1;ssrc=0A1B2C3D`.
pub fn reply_tcp(rtp_channel: u8, rtcp_channel: u8, ssrc: u32) -> String {
    format!("RTP/AVP/TCP;unicast;interleaved={rtp_channel}-{rtcp_channel};ssrc={ssrc:08X}")
}

#[cfg(test)]
#[test]
fn record_transports() {
    let udp = "RTP/AVP/UDP;unicast;client_port=5000-5001;mode=record";
    assert!(is_record(udp) && is_record("RTP/AVP/TCP;interleaved=0-1;mode=\"RECORD\""));
    assert!(!is_record("RTP/AVP;unicast;client_port=5000-5001"));
    assert!(matches!(
        choose_record(udp),
        Ok(TransportRequest::Udp {
            client_rtp: 5000,
            ..
        })
    ));
    let tcp = "RTP/AVP/TCP;unicast;interleaved=2-3;mode=record";
    assert_eq!(
        choose_record(tcp),
        Ok(TransportRequest::Tcp {
            rtp_channel: 2,
            rtcp_channel: 3
        })
    );
    assert!(choose_record("RTP/AVP;unicast;client_port=5000-5001").is_err());
    assert!(
        choose(udp).is_err(),
        "a player's SETUP is not a publisher's"
    );
}

fn clip(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Split on commas outside double quotes (`mode="PLAY,RECORD"` is one value).
fn split_alternatives(header: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(header);
    std::iter::from_fn(move || {
        let s = rest?;
        let mut in_quotes = false;
        for (i, c) in s.char_indices() {
            match c {
                '"' => in_quotes = !in_quotes,
                ',' if !in_quotes => {
                    rest = Some(&s[i + 1..]);
                    return Some(&s[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(s)
    })
}

/// `token/token[/token]` before the first `;`.
fn spec_is_valid(alt: &str) -> bool {
    let spec = alt.split(';').next().unwrap_or("").trim();
    let parts: Vec<&str> = spec.split('/').collect();
    (2..=3).contains(&parts.len())
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        })
}

fn parse_one(alt: &str) -> Result<Transport, ()> {
    // rtsp-types 0.1.3 asserts (panics) on a lone backslash inside a quoted
    // dest_addr/src_addr; RTSP/1.0 transports never carry one, so refuse it here.
    if alt.contains('\\') || alt.bytes().any(|b| b.is_ascii_control()) {
        return Err(());
    }
    let req = rtsp_types::Request::builder(rtsp_types::Method::Setup, rtsp_types::Version::V1_0)
        .header(TRANSPORT, alt)
        .empty();
    match req.typed_header::<Transports>() {
        Ok(Some(ts)) if ts.len() == 1 => ts.iter().next().cloned().ok_or(()),
        _ => Err(()),
    }
}

fn evaluate(
    t: &Transport,
    multicast_offered: bool,
    mode: &TransportMode,
) -> Result<TransportRequest, String> {
    let rtp = match t {
        Transport::Rtp(rtp) => rtp,
        Transport::Other(o) => return Err(format!("transport `{}`", clip(&o.spec))),
    };
    if rtp.profile != RtpProfile::Avp {
        return Err(format!("profile RTP/{}", clip(rtp.profile.as_str())));
    }
    let p = &rtp.params;
    let asked = |m: &TransportMode| m == mode;
    match mode {
        TransportMode::Play if !p.mode.iter().all(asked) => {
            return Err("mode other than PLAY".to_owned());
        }
        TransportMode::Record if !p.mode.iter().any(asked) => {
            return Err("mode other than RECORD".to_owned());
        }
        _ => {}
    }
    if p.multicast && !multicast_offered {
        return Err("multicast (this server does not offer it)".to_owned());
    }
    if p.multicast {
        return multicast(rtp.lower_transport.as_ref(), p);
    }
    match &rtp.lower_transport {
        None | Some(RtpLowerTransport::Udp) => {
            let Some((rtp_port, rtcp_port)) = p.client_port else {
                return Err("UDP without client_port".to_owned());
            };
            let rtcp_port = match rtcp_port {
                Some(r) => r,
                None => rtp_port
                    .checked_add(1)
                    .ok_or_else(|| "client_port 65535 leaves no RTCP port".to_owned())?,
            };
            if rtp_port == 0 || rtcp_port == 0 {
                return Err("client port 0".to_owned());
            }
            let destination = match &p.destination {
                None => None,
                Some(d) => Some(
                    d.parse::<IpAddr>()
                        .map_err(|_| "destination is not an IP address".to_owned())?,
                ),
            };
            Ok(TransportRequest::Udp {
                client_rtp: rtp_port,
                client_rtcp: rtcp_port,
                destination,
            })
        }
        Some(RtpLowerTransport::Tcp) => {
            let (rtp_channel, rtcp_channel) = match p.interleaved {
                None => (0, 1),
                Some((a, Some(b))) => (a, b),
                Some((a, None)) => (
                    a,
                    a.checked_add(1)
                        .ok_or_else(|| "interleaved=255 leaves no RTCP channel".to_owned())?,
                ),
            };
            if rtp_channel == rtcp_channel {
                return Err("RTP and RTCP on the same interleaved channel".to_owned());
            }
            Ok(TransportRequest::Tcp {
                rtp_channel,
                rtcp_channel,
            })
        }
        Some(RtpLowerTransport::Other(o)) => Err(format!("lower transport {}", clip(o))),
    }
}

fn multicast(
    lower: Option<&RtpLowerTransport>,
    p: &rtsp_types::headers::RtpTransportParameters,
) -> Result<TransportRequest, String> {
    if !matches!(lower, None | Some(RtpLowerTransport::Udp)) {
        return Err("multicast other than over UDP".to_owned());
    }
    let destination = match &p.destination {
        None => None,
        Some(d) => match d.parse::<IpAddr>() {
            Ok(a) if a.is_multicast() => Some(a),
            _ => return Err("destination is not a multicast address".to_owned()),
        },
    };
    let ports = match p.port {
        None => None,
        Some((0, _)) | Some((_, Some(0))) => return Err("multicast port 0".to_owned()),
        Some((a, Some(b))) => Some((a, b)),
        Some((a, None)) => Some((
            a,
            a.checked_add(1)
                .ok_or_else(|| "port 65535 leaves no RTCP port".to_owned())?,
        )),
    };
    Ok(TransportRequest::Multicast {
        destination,
        ports,
        ttl: p.ttl,
    })
}

/// Our answer for multicast, e.g.
/// `RTP/AVP;multicast;destination=239.255.0.1;port=5004-5005;ttl=1;ssrc=0A1B2C3D`.
pub fn reply_multicast(group: IpAddr, rtp: u16, rtcp: u16, ttl: u8, ssrc: u32) -> String {
    format!("RTP/AVP;multicast;destination={group};port={rtp}-{rtcp};ttl={ttl};ssrc={ssrc:08X}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn udp(a: u16, b: u16) -> TransportRequest {
        TransportRequest::Udp {
            client_rtp: a,
            client_rtcp: b,
            destination: None,
        }
    }

    fn tcp(a: u8, b: u8) -> TransportRequest {
        TransportRequest::Tcp {
            rtp_channel: a,
            rtcp_channel: b,
        }
    }

    fn unsupported(h: &str) {
        match choose(h) {
            Err(e @ TransportError::Unsupported(_)) => assert_eq!(e.status(), 461),
            other => panic!("{h}: expected Unsupported, got {other:?}"),
        }
    }

    #[test]
    fn udp_forms() {
        assert_eq!(
            choose("RTP/AVP;unicast;client_port=5000-5001"),
            Ok(udp(5000, 5001))
        );
        assert_eq!(
            choose("RTP/AVP/UDP;unicast;client_port=5000-5001"),
            Ok(udp(5000, 5001))
        );
        assert_eq!(
            choose("RTP/AVP;unicast;client_port=5000"),
            Ok(udp(5000, 5001))
        );
        assert_eq!(choose("RTP/AVP;client_port=5000"), Ok(udp(5000, 5001)));
        assert_eq!(
            choose(" RTP/AVP ; unicast ; client_port=5000-5001 ; mode=play"),
            Ok(udp(5000, 5001))
        );
        assert_eq!(
            choose("RTP/AVP;unicast;client_port=5000-5001;mode=\"PLAY\""),
            Ok(udp(5000, 5001))
        );
        assert_eq!(
            choose("RTP/AVP;unicast;destination=10.0.0.7;client_port=5000-5001"),
            Ok(TransportRequest::Udp {
                client_rtp: 5000,
                client_rtcp: 5001,
                destination: Some("10.0.0.7".parse().unwrap())
            })
        );
    }

    #[test]
    fn multicast_forms() {
        assert_eq!(
            choose("RTP/AVP;multicast"),
            Ok(TransportRequest::Multicast {
                destination: None,
                ports: None,
                ttl: None
            })
        );
        assert_eq!(
            choose("RTP/AVP/UDP;multicast;destination=239.1.2.3;port=5000-5001;ttl=4"),
            Ok(TransportRequest::Multicast {
                destination: Some("239.1.2.3".parse().unwrap()),
                ports: Some((5000, 5001)),
                ttl: Some(4)
            })
        );
        assert_eq!(
            choose("RTP/AVP;multicast;port=6000"),
            Ok(TransportRequest::Multicast {
                destination: None,
                ports: Some((6000, 6001)),
                ttl: None
            })
        );
        assert_eq!(
            reply_multicast("239.255.0.1".parse().unwrap(), 5004, 5005, 1, 0xA1B2),
            "RTP/AVP;multicast;destination=239.255.0.1;port=5004-5005;ttl=1;ssrc=0000A1B2"
        );
    }

    #[test]
    fn tcp_forms() {
        assert_eq!(choose("RTP/AVP/TCP;unicast;interleaved=0-1"), Ok(tcp(0, 1)));
        assert_eq!(choose("RTP/AVP/TCP;unicast;interleaved=4-5"), Ok(tcp(4, 5)));
        assert_eq!(choose("RTP/AVP/TCP;interleaved=6"), Ok(tcp(6, 7)));
        assert_eq!(choose("RTP/AVP/TCP;unicast"), Ok(tcp(0, 1)));
        unsupported("RTP/AVP/TCP;interleaved=255");
        unsupported("RTP/AVP/TCP;interleaved=3-3");
        unsupported("RTP/AVP/TCP;interleaved=300");
    }

    #[test]
    fn first_supported_alternative_wins() {
        assert_eq!(
            choose(
                "RTP/SAVP;unicast;client_port=1-2,RTP/AVP/TCP;interleaved=2-3,RTP/AVP;unicast;client_port=9-10"
            ),
            Ok(tcp(2, 3))
        );
        assert_eq!(
            choose("RTP/AVP/TCP;multicast,garbage!!,RTP/AVP;unicast;client_port=9000-9001"),
            Ok(udp(9000, 9001))
        );
        assert_eq!(
            choose("RTP/AVP;unicast;client_port=x,RTP/AVP;unicast;client_port=9000-9001"),
            Ok(udp(9000, 9001))
        );
        assert_eq!(
            choose("RTP/AVP;mode=\"PLAY,RECORD\";client_port=1-2, RTP/AVP/TCP"),
            Ok(tcp(0, 1))
        );
    }

    #[test]
    fn multicast_alternatives_are_skipped_unless_offered() {
        let both = "RTP/AVP;multicast;destination=239.255.255.250;port=1900-1901,RTP/AVP;unicast;client_port=9000-9001";
        assert_eq!(choose_for(both, false), Ok(udp(9000, 9001)));
        assert!(matches!(
            choose_for(both, true),
            Ok(TransportRequest::Multicast { .. })
        ));
        match choose_for("RTP/AVP;multicast", false) {
            Err(e @ TransportError::Unsupported(_)) => {
                assert_eq!(e.status(), 461);
                assert!(e.to_string().contains("does not offer"), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsupported_forms() {
        unsupported("RTP/AVP/TCP;multicast");
        unsupported("RTP/AVP;multicast;destination=10.1.2.3");
        unsupported("RTP/AVP;multicast;port=0-1");
        unsupported("RTP/AVP;multicast;port=65535");
        unsupported("RTP/AVP;unicast;client_port=5000-5001;mode=record");
        unsupported("RTP/AVP;unicast;client_port=5000-5001;mode=\"PLAY,RECORD\"");
        unsupported("RTP/SAVP;unicast;client_port=5000-5001");
        unsupported("RTP/AVPF;unicast;client_port=5000-5001");
        unsupported("RTP/AVP/SCTP;unicast;client_port=5000-5001");
        unsupported("RAW/RAW/UDP;unicast;client_port=5000-5001");
        unsupported("RTP/AVP;unicast");
        unsupported("RTP/AVP;unicast;client_port=0-1");
        unsupported("RTP/AVP;unicast;client_port=5000-0");
        unsupported("RTP/AVP;unicast;client_port=0");
        unsupported("RTP/AVP;unicast;client_port=65535");
        unsupported("RTP/AVP;unicast;client_port=abc");
        unsupported("RTP/AVP;unicast;client_port=70000");
        unsupported("RTP/AVP;unicast;client_port=5000-5001;destination=example.com");
        unsupported("RTP/AVP;unicast;dest_addr=\"\\\"");
    }

    #[test]
    fn malformed_forms() {
        for h in [
            "", "   ", ",,,", "garbage", "RTP", "RTP/", ";;;", "\u{0}", "é/é",
        ] {
            assert_eq!(choose(h), Err(TransportError::Malformed), "{h:?}");
        }
        assert_eq!(TransportError::Malformed.status(), 400);
    }

    #[test]
    fn replies() {
        assert_eq!(
            reply_udp(5000, 5001, 6970, 6971, 0x0A1B2C3D),
            "RTP/AVP;unicast;client_port=5000-5001;server_port=6970-6971;ssrc=0A1B2C3D"
        );
        assert_eq!(
            reply_tcp(0, 1, 0xdeadbeef),
            "RTP/AVP/TCP;unicast;interleaved=0-1;ssrc=DEADBEEF"
        );
    }

    #[test]
    fn long_lists_are_bounded() {
        let mut h = "RTP/SAVP;unicast;client_port=1-2,".repeat(100);
        h.push_str("RTP/AVP;unicast;client_port=9-10");
        unsupported(&h);
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,200}") {
            let _ = choose(&s);
            let _ = choose_for(&s, false);
        }

        #[test]
        fn never_panics_on_transportish(s in "[RTPAVUDCS/;,=\"\\\\a-z_0-9 -]{0,80}") {
            let _ = choose(&s);
        }

        #[test]
        fn udp_reply_round_trips(a in 1u16.., b in 1u16.., sa: u16, sb: u16, ssrc: u32) {
            prop_assert_eq!(choose(&reply_udp(a, b, sa, sb, ssrc)), Ok(udp(a, b)));
        }

        #[test]
        fn tcp_reply_round_trips(a: u8, b: u8, ssrc: u32) {
            prop_assume!(a != b);
            prop_assert_eq!(choose(&reply_tcp(a, b, ssrc)), Ok(tcp(a, b)));
        }
    }
}

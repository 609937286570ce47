//! `transport::choose` on arbitrary strings: never panics; a UDP choice has
//! non-zero ports, and our own reply for it is chosen back identically; a
//! multicast choice names only multicast groups and non-zero ports, and our
//! reply for a group is chosen back as that group; without multicast
//! offered, no alternative is taken for multicast.
#![no_main]

use fjord_proto::rtsp::transport::{
    TransportRequest, choose, choose_for, reply_multicast, reply_tcp, reply_udp,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    assert!(!matches!(
        choose_for(s, false),
        Ok(TransportRequest::Multicast { .. })
    ));
    match choose(s) {
        Ok(TransportRequest::Udp {
            client_rtp,
            client_rtcp,
            ..
        }) => {
            assert!(client_rtp != 0 && client_rtcp != 0);
            let back = choose(&reply_udp(client_rtp, client_rtcp, 6970, 6971, 1));
            assert!(
                matches!(back, Ok(TransportRequest::Udp { client_rtp: a, client_rtcp: b, .. })
                if a == client_rtp && b == client_rtcp)
            );
        }
        Ok(TransportRequest::Tcp {
            rtp_channel,
            rtcp_channel,
        }) => {
            let back = choose(&reply_tcp(rtp_channel, rtcp_channel, 1));
            assert_eq!(
                back,
                Ok(TransportRequest::Tcp {
                    rtp_channel,
                    rtcp_channel
                })
            );
        }
        Ok(TransportRequest::Multicast {
            destination, ports, ..
        }) => {
            assert!(destination.is_none_or(|d| d.is_multicast()));
            assert!(ports.is_none_or(|(a, b)| a != 0 && b != 0));
            let group = destination.unwrap_or_else(|| "239.255.0.1".parse().unwrap());
            let back = choose(&reply_multicast(group, 5004, 5005, 1, 1));
            assert_eq!(
                back,
                Ok(TransportRequest::Multicast {
                    destination: Some(group),
                    ports: Some((5004, 5005)),
                    ttl: Some(1)
                })
            );
        }
        Err(e) => assert!(e.status() == 400 || e.status() == 461),
    }
});

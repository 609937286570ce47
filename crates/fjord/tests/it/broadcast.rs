//! Periodic broadcasting as viewers meet it, inside a network namespace of
//! the test's own: the server sends `[[broadcast]]` titles on their channels
//! from its start and publishes the schedule; `fjord play --broadcast`
//! joins at a random time and writes the title bit-exact.

use std::time::Duration;

use fjord_client::RtspClient;
use serde_json::Value;

use crate::common::{Server, in_private_network};
use crate::multicast::{count_ssrc, join};

/// A server broadcasting `clip.ts` by `scheme` (max start 2 s).
fn broadcasting(scheme: &str) -> Server {
    Server::start(&format!(
        "[[broadcast]]\ntitle = \"clip.ts\"\nscheme = \"{scheme}\"\nmax_start_s = 2\n"
    ))
}

/// The published schedule of `title`, or the DESCRIBE's status.
fn schedule(server: &Server, title: &str) -> Result<Value, u16> {
    let url = server.url(title);
    let mut c = RtspClient::connect(&url).unwrap();
    let r = c
        .request(
            "DESCRIBE",
            &format!("{url}?broadcast"),
            &[("Accept", "application/json")],
            &[],
        )
        .unwrap();
    match r.status {
        200 => Ok(serde_json::from_slice(&r.body).unwrap()),
        s => Err(s),
    }
}

#[test]
fn the_schedule_is_published_and_every_channel_carries_the_titles_packets() {
    in_private_network(|| {
        let mut server = broadcasting("cautious-harmonic");
        // The channels start shortly after the server.
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(
            schedule(&server, "vbr.ts").err(),
            Some(404),
            "not broadcast"
        );
        let s = schedule(&server, "clip.ts").unwrap();
        assert_eq!(
            (s["version"].as_u64(), s["title"].as_str()),
            (Some(1), Some("clip.ts"))
        );
        let channels = s["channels"].as_array().unwrap();
        let planned = s["plan"]["channels"].as_array().unwrap();
        assert!(
            channels.len() >= 2 && channels.len() == planned.len(),
            "{s}"
        );
        let ssrc = s["ssrc"].as_u64().unwrap() as u32;
        for (c, ch) in channels.iter().enumerate() {
            let (group, port) = (ch["group"].as_str().unwrap(), ch["port"].as_u64().unwrap());
            assert_eq!(port, 5004 + 2 * c as u64, "a port per channel");
            let rx = join(group, port as u16);
            let period = Duration::from_nanos(planned[c]["period_ns"].as_u64().unwrap());
            let got = count_ssrc(&rx, ssrc, period.min(Duration::from_secs(2)));
            assert!(
                got > 0,
                "channel {c} ({group}:{port}) sent nothing of SSRC {ssrc:08X}"
            );
        }
        server.assert_healthy();
    });
}

//! The titles of a load run: each described once (where to SETUP and
//! PLAY, its clock rate and repair stream), what an SDP says of duration
//! and clock, and random places to start sessions in them.

use std::net::SocketAddr;

use super::config::SessionStart;
use crate::fec::{RepairOffer, fec_streams};
use crate::{Error, Result, RtspClient};

/// What a session needs of its title: where to SETUP and PLAY.
pub(super) struct Title {
    pub(super) track_url: String,
    pub(super) repair: Option<RepairOffer>,
    pub(super) control_url: String,
    pub(super) clock_rate: u32,
}

pub(super) fn describe_title(url: &str, fec: bool) -> Result<(Title, SocketAddr)> {
    let mut describe = RtspClient::connect(url)?;
    let d = match fec {
        true => describe.describe_fec()?,
        false => describe.describe()?,
    };
    let server = describe.peer_addr()?;
    drop(describe);
    let no_media = || Error::Protocol(format!("the SDP of {url} has no media section"));
    let (track_url, repair) = match fec {
        true => {
            let stream = fec_streams(&d).into_iter().next().ok_or_else(no_media)?;
            let repair = stream.repair.ok_or_else(|| {
                Error::Protocol("the title offers no repair stream (ingest it with --fec)".into())
            })?;
            (stream.source_url, Some(repair))
        }
        false => (d.track_urls.first().cloned().ok_or_else(no_media)?, None),
    };
    let clock_rate = sdp_clock_rate(&d.sdp).unwrap_or(90_000);
    let title = Title {
        track_url,
        repair,
        control_url: d.aggregate_url,
        clock_rate,
    };
    Ok((title, server))
}

/// The duration `url` announces in its SDP, seconds.
pub fn title_duration_s(url: &str) -> Result<f64> {
    let mut c = RtspClient::connect(url)?;
    let d = c.describe()?;
    sdp_duration_s(&d.sdp)
        .ok_or_else(|| Error::Protocol(format!("{url} announces no duration (a=range)")))
}

/// The duration an SDP announces (`a=range:npt=0-X`), seconds; `None` for
/// an open range or none.
pub fn sdp_duration_s(sdp: &str) -> Option<f64> {
    sdp.lines().find_map(|l| {
        let r = l.trim().strip_prefix("a=range:npt=")?;
        let (_, end) = r.split_once('-')?;
        end.trim().parse::<f64>().ok().filter(|d| d.is_finite())
    })
}

/// The clock rate of the first `a=rtpmap` of an SDP.
pub(super) fn sdp_clock_rate(sdp: &str) -> Option<u32> {
    sdp.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("a=rtpmap:")?;
        let enc = rest.split_whitespace().nth(1)?;
        enc.split('/').nth(1)?.trim().parse().ok()
    })
}

/// `n` sessions at random places: each a uniformly chosen title of
/// `titles` (URL, duration in seconds) and a uniform start in
/// `[0, duration - seconds]` (0 for a title shorter than `seconds`).
/// The same `seed` gives the same starts.
pub fn random_starts(
    titles: &[(String, f64)],
    n: usize,
    seconds: f64,
    seed: u64,
) -> Vec<SessionStart> {
    let mut state = seed;
    // SplitMix64: small, and enough to spread sessions.
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    if titles.is_empty() {
        return Vec::new();
    }
    (0..n)
        .map(|_| {
            let (url, duration) = &titles[(next() % titles.len() as u64) as usize];
            let span = (duration - seconds).max(0.0);
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            SessionStart {
                url: url.clone(),
                npt_s: (span * u * 1000.0).floor() / 1000.0,
            }
        })
        .collect()
}

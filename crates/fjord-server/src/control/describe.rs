//! DESCRIBE: a title's SDP, or its broadcast schedule (`?broadcast`).

use std::{net::IpAddr, sync::Arc};

use fjord_engine::Title;
use fjord_media::index::TrackKind;
use fjord_proto::{
    rtsp::{framing::Request, response::Response, url::title_path},
    sdp,
};

use super::{
    Client, Reply,
    ask::{Pending, Question, Step},
    refuse, status,
};
use crate::{Server, catalog::CatalogError, cluster, title_streams};

/// The `Content-Base` of a DESCRIBE of `uri`: the URL without its query,
/// ending in `/`, which the tracks' controls are relative to.
pub(super) fn content_base(uri: &str) -> String {
    let url = uri.split('?').next().unwrap_or("");
    format!("{}/", url.trim_end_matches('/'))
}

pub(super) fn answer(server: &Server, conn: &dyn Client, req: &Request) -> Step {
    let Ok(target) = title_path(&req.uri) else {
        return status(404).into();
    };
    if target.track.is_some() {
        return status(404).into();
    }
    if broadcast_query(&req.uri) {
        return schedule(server, &target.title).into();
    }
    // Over TLS to an rtsps:// URL only (none: the title is served here).
    let (scheme, path) = (
        cluster::Scheme::rtsp(conn.is_tls()),
        cluster::path_of(&req.uri),
    );
    if let Some(to) = server.cluster.redirect(server, &target.title, scheme, path) {
        return Step::Reply(Response::new(302).header("Location", &to).into());
    }
    let local = match conn.local() {
        Ok(a) => a,
        Err(e) => return refuse(500, &e.to_string()).into(),
    };
    let opening = Opening {
        base: content_base(&req.uri),
        ip: local.ip(),
        // Players set up every stream the SDP lists (ffmpeg makes the
        // repair stream a data stream of its output), so repair streams
        // are offered only to clients that say they support them.
        fec: supports(req, FEC_FEATURE),
    };
    Step::ask(
        Question::Open(target.title.as_str().into()),
        Pending::Describe(opening),
    )
}

/// What a DESCRIBE's reply needs of its request, kept while its title
/// opens.
pub(crate) struct Opening {
    base: String,
    ip: IpAddr,
    fec: bool,
}

/// The SDP of the title a DESCRIBE opened, or why it could not be opened.
pub(super) fn on_opened(o: Opening, opened: Result<(Arc<str>, Arc<Title>), CatalogError>) -> Reply {
    let (name, title) = match opened {
        Ok(t) => t,
        Err(e) => return refuse(e.status(), &e.to_string()),
    };
    if let Some(why) = title.index().not_over_rtp() {
        return refuse(415, why);
    }
    let body = sdp(&title, &name, o.ip, o.fec);
    let mut response = Response::new(200).header("Content-Base", &o.base);
    if (0..title.index().track_count()).any(|i| title.fec(i).is_some()) {
        response = response.header("Supported", FEC_FEATURE);
    }
    response.body("application/sdp", body).into()
}

/// The `?broadcast` answer: the title's schedule as JSON, 503 while its
/// broadcast is starting, 404 when it is not broadcast.
fn schedule(server: &Server, title: &str) -> Reply {
    let (json, configured) = {
        let core = server.core.lock();
        let b = &core.broadcasts;
        (b.schedule(title), b.configured(&server.config(), title))
    };
    match json {
        Some(json) => Response::new(200)
            .body("application/json", json.to_string())
            .into(),
        None if configured => Response::new(503)
            .header("Retry-After", "1")
            .body(
                "text/plain",
                "the broadcast is starting (its parity is being made)\r\n",
            )
            .into(),
        None => refuse(404, "this title is not broadcast"),
    }
}

/// The title's SDP: a media section per track, and with `offer_fec` one
/// per repair stream, grouped with its track (RFC 5956 `FEC-FR`).
fn sdp(title: &Title, name: &str, origin_addr: IpAddr, offer_fec: bool) -> String {
    let index = title.index();
    let n = index.track_count();
    let controls: Vec<String> = (0..n).map(track_control).collect();
    let repair_controls: Vec<String> = controls
        .iter()
        .map(|c| format!("{c}{REPAIR_SUFFIX}"))
        .collect();
    let mids: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("S{i}"), format!("R{i}")))
        .collect();
    let repair_fmtps: Vec<Option<String>> = (0..n)
        .map(|i| repair_fmtp(title, i).filter(|_| offer_fec))
        .collect();
    let repair_pt = title_streams::repair_payload_type(title);
    let mut tracks: Vec<sdp::SdpTrack> = Vec::with_capacity(2 * n);
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for (i, t) in index.tracks().enumerate() {
        let protected = repair_fmtps[i].is_some();
        tracks.push(sdp::SdpTrack {
            media: sdp_media(t.kind()),
            payload_type: t.payload_type(),
            encoding: t.encoding(),
            clock_rate: t.clock_rate(),
            channels: t.channels(),
            fmtp: Some(t.fmtp()).filter(|f| !f.is_empty()),
            control: &controls[i],
            mid: protected.then_some(mids[i].0.as_str()),
        });
        if let Some(fmtp) = &repair_fmtps[i] {
            tracks.push(sdp::SdpTrack {
                media: "application",
                payload_type: repair_pt,
                encoding: REPAIR_ENCODING,
                clock_rate: t.clock_rate(),
                channels: 0,
                fmtp: Some(fmtp),
                control: &repair_controls[i],
                mid: Some(&mids[i].1),
            });
            groups.push((&mids[i].0, &mids[i].1));
        }
    }
    sdp::describe(&sdp::SdpTitle {
        name,
        origin_addr,
        session_id: rand::random::<u32>() as u64,
        duration_s: index.duration_ns() as f64 / 1e9,
        tracks: &tracks,
        fec_groups: &groups,
    })
}

/// The RTSP feature tag (RFC 7826 `Supported`) a client sends with
/// DESCRIBE to be offered repair streams; a reply names it when the title
/// has them.
const FEC_FEATURE: &str = "fjord.fec";

/// Whether the request's `Supported` headers list `feature`.
/// `?broadcast` in a request URI: the title's broadcast schedule.
fn broadcast_query(uri: &str) -> bool {
    uri.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p == "broadcast"))
}

fn supports(req: &Request, feature: &str) -> bool {
    req.headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("Supported"))
        .flat_map(|(_, value)| value.split(','))
        .any(|tag| tag.trim().eq_ignore_ascii_case(feature))
}

fn sdp_media(kind: TrackKind) -> &'static str {
    match kind {
        TrackKind::Video => "video",
        TrackKind::Audio => "audio",
        TrackKind::Data => "application",
    }
}

fn track_control(i: usize) -> String {
    format!("track{}", i + 1)
}

/// A repair stream's control URL is its track's with this appended.
pub(super) const REPAIR_SUFFIX: &str = "-fec";
/// The repair payload format of `docs/fec.md`.
const REPAIR_ENCODING: &str = fjord_fec::symbol::REPAIR_ENCODING;

/// `a=fmtp` of track `t`'s repair stream, when the title has parity for it:
/// RFC 6865's FEC Encoding ID and scheme-specific information (E and m, in
/// RFC 6364's `fssi` form), the block layout and the repair window.
fn repair_fmtp(title: &Title, t: usize) -> Option<String> {
    let fec = title.fec(t)?;
    let params = fec.params();
    let window_us = title.repair_window_ns(t)?.div_ceil(1000);
    Some(format!(
        "encoding-id={}; fssi=E:{},m:8; k={}; repair={}; repair-window={window_us}",
        fjord_fec::symbol::FEC_ENCODING_ID,
        fec.symbol_len(),
        params.k,
        params.m
    ))
}

//! One viewer, as a player behind DNS round robin: DESCRIBE at its entry
//! node, following a `302` to the title's home node, SETUP (UDP) and PLAY,
//! then receive to the title's end. Packets stopping before the end (the
//! node died) make it reconnect as a player would: DESCRIBE again at an
//! entry node (the next one after a refused connection), PLAY with `Range`
//! from the position reached.

use std::time::{Duration, Instant};

use fjord_client::{Event, RtspClient, UdpReceiver};
use serde::Serialize;

/// What a viewer is to do.
#[derive(Clone, Debug)]
pub struct Ask {
    pub title: String,
    pub entry: usize,
    /// The title's length, s: the viewer stops there.
    pub seconds: f64,
}

/// What happened to it; times in s from the run's start.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    pub title: String,
    pub entry: usize,
    pub start_s: f64,
    /// The node it played at first (an index of the entries).
    pub node: Option<usize>,
    pub redirected: bool,
    /// TCP connect to the entry node, ms (about one round trip).
    pub connect_ms: f64,
    /// From the first connect to the first RTP packet, ms.
    pub first_packet_ms: Option<f64>,
    pub packets: u64,
    /// The widest spread of (arrival − media time) over its packets, ms:
    /// a stall of the stream shows as its length.
    pub jitter_ms: f64,
    /// When packets stopped before the title's end.
    pub lost_at_s: Option<f64>,
    /// When packets came again after reconnecting, and from which node.
    pub back_at_s: Option<f64>,
    pub back_node: Option<usize>,
    pub error: Option<String>,
}

/// No packet for this long before the end: the stream is lost.
const STALL: Duration = Duration::from_millis(500);
/// How long a lost viewer keeps trying to reconnect.
const RETRY_FOR: Duration = Duration::from_secs(20);
const CLOCK: f64 = 90_000.0;

/// A session playing.
struct Playing {
    _client: RtspClient,
    rx: UdpReceiver,
    node: usize,
    redirected: bool,
    connect_ms: f64,
}

/// Plays `ask` with `entries` (`rtsp://IP:PORT/`) as the cluster's entry
/// points; `t0` is the run's start.
pub fn watch(entries: &[String], ask: &Ask, t0: Instant) -> Outcome {
    let begun = Instant::now();
    let mut o = Outcome {
        title: ask.title.clone(),
        entry: ask.entry,
        start_s: begun.duration_since(t0).as_secs_f64(),
        ..Outcome::default()
    };
    // An entry refusing (a dead node) sends the viewer to the next one.
    let mut p = match open_any(entries, ask, 0.0, begun + RETRY_FOR) {
        Ok(p) => p,
        Err(e) => {
            o.error = Some(e);
            return o;
        }
    };
    (o.node, o.redirected, o.connect_ms) = (Some(p.node), p.redirected, p.connect_ms);
    let mut clock = Clock::default();
    let mut position = 0.0;
    let end = begun + Duration::from_secs_f64(ask.seconds + 5.0);
    loop {
        match p.rx.recv(STALL) {
            Some(Event::Rtp(r)) => {
                if o.first_packet_ms.is_none() {
                    o.first_packet_ms = Some(r.arrival.duration_since(begun).as_secs_f64() * 1e3);
                }
                if o.lost_at_s.is_some() && o.back_at_s.is_none() {
                    o.back_at_s = Some(r.arrival.duration_since(t0).as_secs_f64());
                    o.back_node = Some(p.node);
                }
                o.packets += 1;
                position = clock.on_packet(r.rtp_ts, r.arrival);
                o.jitter_ms = o.jitter_ms.max(clock.spread_ms());
            }
            Some(_) => {}
            None if clock.start_npt + position + 1.0 >= ask.seconds || Instant::now() > end => {
                break;
            }
            None if o.lost_at_s.is_some() => {
                o.error = Some("lost twice".into());
                break;
            }
            None => {
                o.lost_at_s = Some(t0.elapsed().as_secs_f64() - STALL.as_secs_f64());
                let at = clock.start_npt + position;
                match open_any(entries, ask, at, Instant::now() + RETRY_FOR) {
                    Ok(again) => p = again,
                    Err(e) => {
                        o.error = Some(format!("reconnecting: {e}"));
                        break;
                    }
                }
                clock = Clock {
                    start_npt: at,
                    ..Clock::default()
                };
            }
        }
    }
    o
}

/// Media time and the spread of arrivals against it, for one PLAY.
#[derive(Default)]
struct Clock {
    start_npt: f64,
    first: Option<(u32, Instant)>,
    /// The least and most (arrival − media time), s, since the first packet.
    lo: f64,
    hi: f64,
}

impl Clock {
    /// Takes a packet in: seconds of media since this PLAY's first one.
    fn on_packet(&mut self, ts: u32, arrival: Instant) -> f64 {
        let (first, t) = *self.first.get_or_insert((ts, arrival));
        let media = f64::from(ts.wrapping_sub(first)) / CLOCK;
        let d = arrival.saturating_duration_since(t).as_secs_f64() - media;
        (self.lo, self.hi) = (self.lo.min(d), self.hi.max(d));
        media
    }

    /// The widest spread so far of (arrival − media time), ms.
    fn spread_ms(&self) -> f64 {
        (self.hi - self.lo) * 1e3
    }
}

/// Tries the entries from `ask.entry` on, round, until one plays or
/// `deadline`.
fn open_any(entries: &[String], ask: &Ask, npt: f64, deadline: Instant) -> Result<Playing, String> {
    let mut i = ask.entry;
    loop {
        match open(entries, i, &ask.title, npt) {
            Ok(p) => return Ok(p),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => {
                i = (i + 1) % entries.len();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// DESCRIBE (following one `302`), SETUP and PLAY from `npt`.
fn open(entries: &[String], entry: usize, title: &str, npt: f64) -> Result<Playing, String> {
    let url = format!("{}{title}", entries[entry]);
    let t = Instant::now();
    let mut c = RtspClient::connect(&url).map_err(|e| format!("{url}: {e}"))?;
    let connect_ms = t.elapsed().as_secs_f64() * 1e3;
    c.set_timeout(Duration::from_secs(5));
    let (mut c, d, redirected) = match c.describe() {
        Ok(d) => (c, d, false),
        Err(fjord_client::Error::Status { response, .. }) if response.status == 302 => {
            let to = response
                .header("Location")
                .ok_or("302 without Location")?
                .to_owned();
            let mut c = RtspClient::connect(&to).map_err(|e| format!("{to}: {e}"))?;
            c.set_timeout(Duration::from_secs(5));
            let d = c.describe().map_err(|e| format!("DESCRIBE {to}: {e}"))?;
            (c, d, true)
        }
        Err(e) => return Err(format!("DESCRIBE {url}: {e}")),
    };
    let node = node_of(entries, c.url()).ok_or_else(|| format!("{} is no node", c.url()))?;
    let track = d.track_urls.first().ok_or("no media in the SDP")?.clone();
    let (_, rx) = c.setup_udp(&track).map_err(|e| format!("SETUP: {e}"))?;
    c.play(Some(&format!("npt={npt:.3}-")))
        .map_err(|e| format!("PLAY: {e}"))?;
    Ok(Playing {
        _client: c,
        rx,
        node,
        redirected,
        connect_ms,
    })
}

/// Which entry `url` is on (by host and port).
fn node_of(entries: &[String], url: &str) -> Option<usize> {
    let host = |u: &str| {
        u.trim_start_matches("rtsp://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned()
    };
    entries.iter().position(|e| host(e) == host(url))
}

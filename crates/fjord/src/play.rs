//! `fjord play`: one session, every source track and its repair stream,
//! lost packets rebuilt from the parity, the received stream written out.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use fjord_client::{
    Event, RtcpPacket, RtspClient, UdpReceiver,
    fec::{Delivery, FecReceiver, FecStats, Loss, LossModel, fec_streams},
};
use fjord_fec::SourcePacket;

/// Play a title to the end, rebuilding lost packets from its repair streams.
///
/// Sets up every source track and, when the server offers it (a title
/// ingested with `--fec`), the track's repair stream; receives until the
/// server's RTCP BYE; rebuilds up to M lost packets per block; reports
/// packets received, dropped, recovered and unrecoverable, and the decode
/// CPU time. Unrecoverable packets are left out of FILE, never replaced.
#[derive(clap::Args, Debug, Clone)]
pub struct PlayArgs {
    /// The title, e.g. rtsp://127.0.0.1:8554/clip.ts
    pub url: String,
    /// Write the first track's RTP payloads here in order (for MPEG-TS: the
    /// transport stream, so a whole title yields a copy of the stored file)
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// RTP interleaved on the RTSP connection instead of UDP
    #[arg(long)]
    pub tcp: bool,
    /// Join the title's periodic broadcast channels (the server's
    /// [[broadcast]] titles) instead of a session; `-o -` writes the title
    /// to stdout as it arrives (e.g. `| ffplay -`)
    #[arg(long)]
    pub broadcast: bool,
    /// Testing: drop each received packet (source or repair) with this
    /// probability before recovery
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub drop: f64,
    /// Testing, with --drop P: drop runs of exactly N source packets
    /// instead, a run starting with probability P after at least K kept
    /// source packets (so a block of K loses at most N); repair packets kept
    #[arg(long, value_name = "N")]
    pub burst: Option<u16>,
    /// Seed of the loss model
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Nothing at all for this long ends the session.
const QUIET: Duration = Duration::from_secs(10);
/// After every track's BYE, packets still queued are read for this long.
const DRAIN: Duration = Duration::from_millis(300);
/// Well inside the server's session timeout.
const KEEPALIVE: Duration = Duration::from_secs(20);

struct Track {
    url: String,
    ssrc: u32,
    repair_ssrc: Option<u32>,
    spacing: u32,
    fec: Option<FecReceiver>,
    loss: Loss,
    dropped: u64,
    repair_dropped: u64,
    ended: bool,
}

pub fn run(args: PlayArgs) -> anyhow::Result<()> {
    if args.broadcast {
        return crate::play_broadcast::run(args);
    }
    ensure!(
        (0.0..=1.0).contains(&args.drop),
        "--drop must be a probability between 0 and 1"
    );
    ensure!(args.burst != Some(0), "--burst must be at least 1");
    let mut client = RtspClient::connect(&args.url)?;
    let describe = client.describe_fec()?;
    let streams = fec_streams(&describe);
    ensure!(!streams.is_empty(), "the title has no tracks");
    let (tx, rx) = mpsc::channel::<Event>();
    let mut receivers: Vec<UdpReceiver> = Vec::new();
    let mut tracks: Vec<Track> = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        let channel = u8::try_from(4 * i).context("too many tracks for interleaving")?;
        let mut setup = |url: &str, channel: u8| -> anyhow::Result<u32> {
            let session = if args.tcp {
                client.setup_tcp_on(url, channel)?
            } else {
                let (session, r) = client.setup_udp_into(url, tx.clone())?;
                receivers.push(r);
                session
            };
            session
                .ssrc
                .with_context(|| format!("SETUP {url}: the reply names no SSRC"))
        };
        let ssrc = setup(&s.source_url, channel)?;
        let repair_ssrc = match &s.repair {
            Some(r) => Some(setup(&r.url, channel + 2)?),
            None => None,
        };
        let spacing = s.repair.as_ref().map_or(0, |r| u32::from(r.k));
        let model = LossModel::from_options(args.drop, args.burst.map(u32::from), spacing);
        tracks.push(Track {
            url: s.source_url.clone(),
            ssrc,
            repair_ssrc,
            spacing,
            fec: None,
            loss: Loss::new(model, args.seed.wrapping_add(i as u64)),
            dropped: 0,
            repair_dropped: 0,
            ended: false,
        });
    }
    drop(tx);
    let play = client.play(None)?;
    for (t, s) in tracks.iter_mut().zip(&streams) {
        let first_seq = play
            .rtp_info
            .iter()
            .find(|i| i.url == t.url || t.url.ends_with(&i.url))
            .and_then(|i| i.seq);
        let layout = s.repair.as_ref().map(|r| (r.k, r.m));
        t.fec = Some(FecReceiver::new(layout, first_seq));
    }
    let mut out = match &args.output {
        Some(path) => Some(BufWriter::new(
            File::create(path).with_context(|| format!("create {}", path.display()))?,
        )),
        None => None,
    };
    let mut write_error: Option<std::io::Error> = None;
    let mut deliver = |track: usize, d: Delivery| {
        if track != 0 {
            return;
        }
        if let (Some(w), Delivery::Packet { packet, .. }) = (&mut out, d)
            && write_error.is_none()
            && let Err(e) = w.write_all(&packet.payload)
        {
            write_error = Some(e);
        }
    };
    let started = Instant::now();
    let mut last_event = Instant::now();
    let mut last_keepalive = Instant::now();
    let mut all_ended: Option<Instant> = None;
    loop {
        if all_ended.is_some_and(|t| t.elapsed() >= DRAIN) {
            break;
        }
        if last_event.elapsed() >= QUIET {
            eprintln!("fjord: nothing received for {QUIET:?}; stopping");
            break;
        }
        if last_keepalive.elapsed() >= KEEPALIVE {
            client.keepalive()?;
            last_keepalive = Instant::now();
        }
        let wait = Duration::from_millis(50);
        let event = if args.tcp {
            match client.recv_interleaved(wait) {
                Ok(e) => e,
                Err(fjord_client::Error::Closed) => break,
                Err(e) => return Err(e.into()),
            }
        } else {
            rx.recv_timeout(wait).ok()
        };
        let Some(event) = event else { continue };
        last_event = Instant::now();
        match event {
            Event::Rtp(p) => {
                let Some(i) = tracks
                    .iter()
                    .position(|t| t.ssrc == p.ssrc || t.repair_ssrc == Some(p.ssrc))
                else {
                    continue;
                };
                let t = &mut tracks[i];
                let repair = t.repair_ssrc == Some(p.ssrc);
                if t.loss.drop_packet(repair) {
                    *if repair {
                        &mut t.repair_dropped
                    } else {
                        &mut t.dropped
                    } += 1;
                    continue;
                }
                let Some(fec) = &mut t.fec else { continue };
                if repair {
                    fec.repair(p.rtp_ts, &p.payload);
                } else {
                    let packet = SourcePacket {
                        payload: p.payload,
                        marker: p.marker,
                        timestamp: p.rtp_ts,
                    };
                    fec.source(p.seq, packet, &mut |d| deliver(i, d));
                }
            }
            Event::Rtcp(r) => {
                for packet in &r.packets {
                    if let RtcpPacket::Bye { ssrcs } = packet {
                        for t in tracks.iter_mut().filter(|t| ssrcs.contains(&t.ssrc)) {
                            t.ended = true;
                        }
                    }
                }
                if all_ended.is_none() && tracks.iter().all(|t| t.ended) {
                    all_ended = Some(Instant::now());
                }
            }
            Event::Garbage { .. } => {}
        }
    }
    for (i, t) in tracks.iter_mut().enumerate() {
        if let Some(fec) = &mut t.fec {
            fec.finish(&mut |d| deliver(i, d));
        }
    }
    let _ = client.teardown();
    drop(receivers);
    if let Some(e) = write_error {
        bail!("write {}: {e}", args.output.unwrap_or_default().display());
    }
    if let Some(mut w) = out {
        w.flush().context("write the output file")?;
    }
    println!(
        "played {} in {:.1} s",
        args.url,
        started.elapsed().as_secs_f64()
    );
    for t in &tracks {
        report(t, args.output.is_some());
    }
    if !tracks.iter().all(|t| t.ended) {
        bail!("the server did not end every track (no RTCP BYE)");
    }
    Ok(())
}

fn report(t: &Track, written: bool) {
    let s = t
        .fec
        .as_ref()
        .map_or(FecStats::default(), FecReceiver::stats);
    let expected = s.received + s.recovered + s.unrecoverable;
    let repair = match t.repair_ssrc {
        Some(_) => format!(
            "repair: K {} received {} dropped {} rejected {}",
            t.spacing, s.repair_received, t.repair_dropped, s.repair_rejected
        ),
        None => "repair: none offered".to_owned(),
    };
    println!(
        "{}: source packets: expected {expected} received {} dropped {} lost {} recovered {} unrecoverable {}; {repair}; decode CPU {:.3} ms",
        t.url,
        s.received,
        t.dropped,
        s.recovered + s.unrecoverable,
        s.recovered,
        s.unrecoverable,
        s.decode_cpu.as_secs_f64() * 1e3,
    );
    if s.unrecoverable > 0 {
        println!(
            "{}: {} packets could not be rebuilt{}",
            t.url,
            s.unrecoverable,
            if written {
                " and are left out of the output file"
            } else {
                ""
            }
        );
    }
}

//! MPEG transport stream packetization (sans-IO): bytes in, RTP packet plan out.
//!
//! The whole file is scanned once. Valid 188-byte TS packets are grouped into
//! RTP payloads (RFC 2250: up to seven TS packets each), every TS packet gets a
//! send time from the stream's own clock (PCR, else PES timestamps, else an
//! assumed bitrate) and random access points become seek targets.
//!
//! The few header fields needed here (TS header, adaptation field, PAT, PMT, PES
//! timestamps) are parsed by hand over the byte slice: that is simpler and much
//! faster than a general demuxer, and allocates nothing per packet.
//!
//! PSI limits: only PAT and PMT sections that fit in one TS packet are read
//! (true of practically every file), only the first program is used, and CRCs
//! are not checked (a wrong PMT only changes which PID is preferred).

use crate::index::TrackDesc;
pub use crate::plan::{
    FLAG_KEY_FRAME_END, FLAG_MARKER, FLAG_RANDOM_ACCESS, IngestReport, MediaPlan, PacketRecord,
    SyncPoint, TimingSource, TrackPlan,
};

/// Size of an MPEG-TS packet; fjord serves 188-byte packets only (not 192/204).
pub const TS_PACKET_LEN: usize = 188;

pub mod params;

const SYNC: u8 = 0x47;
/// Consecutive sync bytes (at 188-byte spacing) that establish sync.
const SYNC_RUN: usize = 5;
/// How far into a file the first sync is looked for before giving up.
const SNIFF_LIMIT: usize = 1 << 20;
/// PCR ticks per second (27 MHz).
const PCR_HZ: f64 = 27_000_000.0;
/// PCR wraps when its 33-bit base (90 kHz) wraps; the extension counts 0..300.
const PCR_WRAP: u64 = (1 << 33) * 300;
/// PES timestamps are 33-bit, 90 kHz.
const PTS_WRAP: u64 = 1 << 33;
/// Bits in one TS packet.
const PACKET_BITS: f64 = (TS_PACKET_LEN * 8) as f64;
/// Offsets are stored in 48 bits in the index.
const MAX_FILE_LEN: u64 = 1 << 48;
/// Call the progress callback every this many bytes.
const PROGRESS_STEP: usize = 8 << 20;
/// PES-timestamp clocks tracked at most (bounds memory on garbage input).
const MAX_PES_CLOCKS: usize = 64;
/// Measured bitrates outside this range are not believed.
const PLAUSIBLE_BPS: std::ops::RangeInclusive<f64> = 10_000.0..=2_000_000_000.0;
/// Stream types that carry video (MPEG-1/2, MPEG-4 part 2, H.264, SVC, MVC,
/// HEVC, AVS, VC-1).
const VIDEO_STREAM_TYPES: &[u8] = &[0x01, 0x02, 0x10, 0x1b, 0x1f, 0x20, 0x24, 0x42, 0xea];

/// Packetization settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TsOptions {
    /// TS packets per RTP packet, clamped to 1..=7 (7 × 188 fits a 1500-byte MTU).
    pub ts_per_rtp: u8,
    /// Bits per second to pace at when the file has neither PCR nor PTS
    /// (at least 1000).
    pub fallback_bitrate: u64,
}

impl Default for TsOptions {
    fn default() -> Self {
        TsOptions {
            ts_per_rtp: 7,
            fallback_bitrate: 4_000_000,
        }
    }
}

/// The result of [`packetize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packetization {
    pub packets: Vec<PacketRecord>,
    /// Sorted by packet and time, first is `{0, 0}`.
    pub sync: Vec<SyncPoint>,
    /// Time at the end of the last whole TS packet.
    pub duration_ns: u64,
    /// The TS packets per RTP packet used (after clamping).
    pub ts_per_rtp: u8,
    pub report: IngestReport,
}

/// Why a byte slice cannot be packetized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TsError {
    #[error("the file is empty")]
    Empty,
    #[error(
        "not an MPEG transport stream (no 0x47 sync byte pattern at 188-byte spacing in the first 1 MiB)"
    )]
    NotTs,
    #[error("too large to index (over 256 TiB or 2^32 RTP packets)")]
    TooLarge,
}

/// Content sniff: does this look like the start of a 188-byte-packet TS?
pub fn looks_like_ts(head: &[u8]) -> bool {
    initial_sync(head).is_some()
}

/// Packetize a whole transport stream held in memory.
pub fn packetize(data: &[u8], opts: &TsOptions) -> Result<Packetization, TsError> {
    packetize_with_progress(data, opts, &mut |_, _| {})
}

/// [`packetize`], calling `progress(bytes_done, bytes_total)` every few MiB.
pub fn packetize_with_progress(
    data: &[u8],
    opts: &TsOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Packetization, TsError> {
    if data.is_empty() {
        return Err(TsError::Empty);
    }
    if data.len() as u64 >= MAX_FILE_LEN {
        return Err(TsError::TooLarge);
    }
    let start = initial_sync(data).ok_or(TsError::NotTs)?;
    let per_rtp = opts.ts_per_rtp.clamp(1, 7) as u32;
    let total = data.len() as u64;

    let mut scan = Scan::default();
    let mut groups = Groups::default();
    let mut resyncs = 0u64;
    let mut skipped = start as u64;
    let mut truncated = 0u64;
    let mut pos = start;
    let mut ordinal = 0u64;
    let mut next_progress = PROGRESS_STEP;
    loop {
        if pos >= next_progress {
            progress(pos as u64, total);
            next_progress = pos + PROGRESS_STEP;
        }
        let Some(pkt) = data
            .get(pos..pos + TS_PACKET_LEN)
            .and_then(|s| <&[u8; TS_PACKET_LEN]>::try_from(s).ok())
        else {
            let rest = data.len().saturating_sub(pos) as u64;
            if data.get(pos) == Some(&SYNC) {
                truncated = rest;
            } else {
                skipped += rest;
            }
            break;
        };
        if pkt[0] != SYNC {
            groups.close();
            match find_sync(data, pos + 1, data.len()) {
                Some(p) => {
                    resyncs += 1;
                    skipped += (p - pos) as u64;
                    pos = p;
                    continue;
                }
                None => {
                    skipped += (data.len() - pos) as u64;
                    break;
                }
            }
        }
        scan.packet(pkt, ordinal);
        groups.push(pos as u64, ordinal, per_rtp);
        ordinal += 1;
        pos += TS_PACKET_LEN;
    }
    groups.close();
    progress(total, total);
    if groups.offsets.len() > u32::MAX as usize {
        return Err(TsError::TooLarge);
    }
    Ok(finish(
        scan, groups, ordinal, opts, resyncs, skipped, truncated,
    ))
}

/// First position that starts a run of sync bytes, within the sniff limit.
/// A file with fewer than [`SYNC_RUN`] packets must start with them.
fn initial_sync(data: &[u8]) -> Option<usize> {
    let p = find_sync(data, 0, SNIFF_LIMIT)?;
    (p == 0 || whole_packets_from(data, p) >= SYNC_RUN).then_some(p)
}

fn whole_packets_from(data: &[u8], pos: usize) -> usize {
    data.len().saturating_sub(pos) / TS_PACKET_LEN
}

/// True if `SYNC_RUN` packets (or all the whole packets left, if fewer) start
/// with the sync byte from `pos` on.
fn is_sync_at(data: &[u8], pos: usize) -> bool {
    let need = whole_packets_from(data, pos).min(SYNC_RUN);
    need > 0 && (0..need).all(|i| data.get(pos + i * TS_PACKET_LEN) == Some(&SYNC))
}

/// Next position at or after `from` (and before `limit`) where sync holds.
fn find_sync(data: &[u8], from: usize, limit: usize) -> Option<usize> {
    let end = limit.min(data.len());
    let mut p = from;
    while p < end {
        p += data.get(p..end)?.iter().position(|&b| b == SYNC)?;
        if is_sync_at(data, p) {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// RTP payloads being formed: runs of consecutive valid TS packets.
#[derive(Default)]
struct Groups {
    offsets: Vec<u64>,
    counts: Vec<u32>,
    first_ordinals: Vec<u64>,
    open: bool,
}

impl Groups {
    fn push(&mut self, offset: u64, ordinal: u64, per_rtp: u32) {
        if self.open
            && let Some(count) = self.counts.last_mut()
        {
            *count += 1;
            if *count >= per_rtp {
                self.open = false;
            }
            return;
        }
        self.offsets.push(offset);
        self.counts.push(1);
        self.first_ordinals.push(ordinal);
        self.open = per_rtp > 1;
    }

    fn close(&mut self) {
        self.open = false;
    }

    /// The same TS packets regrouped so that each of `starts` (sorted TS
    /// ordinals) begins an RTP packet, counting `per_rtp` afresh from there.
    /// Runs broken by lost sync stay broken.
    fn regroup(self, starts: &[u64], per_rtp: u32) -> Groups {
        let mut out = Groups {
            offsets: Vec::with_capacity(self.offsets.len() + starts.len()),
            counts: Vec::with_capacity(self.counts.len() + starts.len()),
            first_ordinals: Vec::with_capacity(self.first_ordinals.len() + starts.len()),
            open: false,
        };
        let mut cuts = starts.iter().copied().peekable();
        let mut run_end: Option<(u64, u64)> = None;
        for ((&offset, &count), &first) in self
            .offsets
            .iter()
            .zip(&self.counts)
            .zip(&self.first_ordinals)
        {
            let contiguous = run_end == Some((offset, first));
            for k in 0..u64::from(count) {
                let ordinal = first + k;
                let mut cut = k == 0 && !contiguous;
                while let Some(c) = cuts.next_if(|&c| c <= ordinal) {
                    cut |= c == ordinal;
                }
                if cut {
                    out.open = false;
                }
                out.push(offset + k * TS_PACKET_LEN as u64, ordinal, per_rtp);
            }
            run_end = Some((
                offset + u64::from(count) * TS_PACKET_LEN as u64,
                first + u64::from(count),
            ));
        }
        out.open = false;
        out
    }

    /// Index of the RTP packet holding TS packet `ordinal`.
    fn containing(&self, ordinal: u64) -> u32 {
        self.first_ordinals
            .partition_point(|&o| o <= ordinal)
            .saturating_sub(1) as u32
    }
}

#[derive(Clone, Copy)]
struct PcrSample {
    ordinal: u64,
    pcr: u64,
    pid: u16,
    discontinuity: bool,
}

/// Unwrapped PES timestamps of one PID.
#[derive(Clone, Copy)]
struct PesClock {
    pid: u16,
    first_ordinal: u64,
    last_ordinal: u64,
    last_raw: u64,
    /// 90 kHz ticks from the first to the last timestamp, jumps removed.
    span: i64,
}

#[derive(Default, Clone, Copy)]
struct Pmt {
    pcr_pid: u16,
    video_pid: Option<u16>,
    first_es_pid: Option<u16>,
}

/// What the per-packet pass collects; everything is small next to the file.
#[derive(Default)]
struct Scan {
    pmt_pid: Option<u16>,
    pmt: Option<Pmt>,
    pcrs: Vec<PcrSample>,
    /// (ordinal, pid) of PES starts flagged random_access_indicator.
    raps: Vec<(u64, u16)>,
    /// Ordinals of PAT section starts.
    pats: Vec<u64>,
    /// (ordinal, pid) of PES starts with a timestamp.
    pes_starts: Vec<(u64, u16)>,
    pes_clocks: Vec<PesClock>,
}

impl Scan {
    fn packet(&mut self, pkt: &[u8; TS_PACKET_LEN], ordinal: u64) {
        if pkt[1] & 0x80 != 0 {
            return; // transport_error_indicator: fields can't be trusted
        }
        let pusi = pkt[1] & 0x40 != 0;
        let pid = u16::from_be_bytes([pkt[1] & 0x1f, pkt[2]]);
        let afc = (pkt[3] >> 4) & 3;
        let mut payload_start = 4;
        let mut rai = false;
        if afc & 2 != 0 {
            let af_len = pkt[4] as usize;
            payload_start = 5 + af_len;
            if af_len > 0 {
                let flags = pkt[5];
                rai = flags & 0x40 != 0;
                if flags & 0x10 != 0
                    && af_len >= 7
                    && let Some(pcr) = pkt.get(6..12).and_then(read_pcr)
                {
                    self.pcrs.push(PcrSample {
                        ordinal,
                        pcr,
                        pid,
                        discontinuity: flags & 0x80 != 0,
                    });
                }
            }
        }
        if afc & 1 == 0 || !pusi {
            return;
        }
        let Some(payload) = pkt.get(payload_start..) else {
            return;
        };
        if pid == 0 {
            self.pats.push(ordinal);
            if self.pmt_pid.is_none() {
                self.pmt_pid = parse_pat(payload);
            }
        } else if Some(pid) == self.pmt_pid {
            if self.pmt.is_none() {
                self.pmt = parse_pmt(payload);
            }
        } else if let Some(ts) = pes_timestamp(payload) {
            if rai {
                self.raps.push((ordinal, pid));
            }
            self.pes_starts.push((ordinal, pid));
            self.pes_timestamp(pid, ordinal, ts);
        } else if rai {
            self.raps.push((ordinal, pid));
        }
    }

    fn pes_timestamp(&mut self, pid: u16, ordinal: u64, ts: u64) {
        if let Some(c) = self.pes_clocks.iter_mut().find(|c| c.pid == pid) {
            let d = ts.wrapping_sub(c.last_raw) & (PTS_WRAP - 1);
            // Signed distance on the 33-bit circle; B-frame reordering goes back a little.
            let d = if d >= PTS_WRAP / 2 {
                d as i64 - PTS_WRAP as i64
            } else {
                d as i64
            };
            if d.abs() <= 10 * 90_000 {
                c.span += d;
            }
            c.last_raw = ts;
            c.last_ordinal = ordinal;
        } else if self.pes_clocks.len() < MAX_PES_CLOCKS {
            self.pes_clocks.push(PesClock {
                pid,
                first_ordinal: ordinal,
                last_ordinal: ordinal,
                last_raw: ts,
                span: 0,
            });
        }
    }
}

/// 27 MHz PCR from the 6 adaptation-field bytes.
fn read_pcr(b: &[u8]) -> Option<u64> {
    let b: &[u8; 6] = b.try_into().ok()?;
    let base = (u64::from(b[0]) << 25)
        | (u64::from(b[1]) << 17)
        | (u64::from(b[2]) << 9)
        | (u64::from(b[3]) << 1)
        | (u64::from(b[4]) >> 7);
    let ext = (u64::from(b[4] & 1) << 8) | u64::from(b[5]);
    // The extension is 9 bits but counts only to 299; an out-of-range one
    // (bad input) must not push the clock past its wrap point.
    (ext < 300).then_some(base * 300 + ext)
}

/// The section a PSI payload starts (after its pointer field), cut to its length.
fn psi_section(payload: &[u8], table_id: u8) -> Option<&[u8]> {
    let pointer = *payload.first()? as usize;
    let section = payload.get(1 + pointer..)?;
    if *section.first()? != table_id {
        return None;
    }
    let len = (usize::from(*section.get(1)? & 0x0f) << 8) | usize::from(*section.get(2)?);
    // Drop the 4-byte CRC.
    section.get(..(3 + len).checked_sub(4)?)
}

/// PMT PID of the first program in a PAT.
fn parse_pat(payload: &[u8]) -> Option<u16> {
    let section = psi_section(payload, 0x00)?;
    section.get(8..)?.chunks_exact(4).find_map(|e| {
        let program = u16::from_be_bytes([e[0], e[1]]);
        (program != 0).then(|| u16::from_be_bytes([e[2] & 0x1f, e[3]]))
    })
}

fn parse_pmt(payload: &[u8]) -> Option<Pmt> {
    let section = psi_section(payload, 0x02)?;
    let pcr_pid = u16::from_be_bytes([*section.get(8)? & 0x1f, *section.get(9)?]);
    let info_len = (usize::from(*section.get(10)? & 0x0f) << 8) | usize::from(*section.get(11)?);
    let mut pmt = Pmt {
        pcr_pid,
        video_pid: None,
        first_es_pid: None,
    };
    let mut es = section.get(12 + info_len..)?;
    while let [stream_type, p0, p1, l0, l1, rest @ ..] = es {
        let pid = u16::from_be_bytes([p0 & 0x1f, *p1]);
        pmt.first_es_pid.get_or_insert(pid);
        if pmt.video_pid.is_none() && VIDEO_STREAM_TYPES.contains(stream_type) {
            pmt.video_pid = Some(pid);
        }
        let info = (usize::from(l0 & 0x0f) << 8) | usize::from(*l1);
        es = rest.get(info..).unwrap_or_default();
    }
    Some(pmt)
}

/// DTS (else PTS) of a PES packet starting in this payload, 90 kHz.
fn pes_timestamp(payload: &[u8]) -> Option<u64> {
    let [0, 0, 1, stream_id, _, _, marker, flags, _, rest @ ..] = payload else {
        return None;
    };
    // Stream ids without the optional PES header: program stream map, padding,
    // private 2, ECM, EMM, directory, DSM-CC, H.222.1 type E.
    if matches!(
        stream_id,
        0xbc | 0xbe | 0xbf | 0xf0 | 0xf1 | 0xf2 | 0xf8 | 0xff
    ) || marker & 0xc0 != 0x80
    {
        return None;
    }
    match flags >> 6 {
        3 => read_timestamp(rest.get(5..10)?),
        2 => read_timestamp(rest.get(..5)?),
        _ => None,
    }
}

fn read_timestamp(b: &[u8]) -> Option<u64> {
    let b: &[u8; 5] = b.try_into().ok()?;
    Some(
        (u64::from((b[0] >> 1) & 7) << 30)
            | (u64::from(b[1]) << 22)
            | (u64::from(b[2] >> 1) << 15)
            | (u64::from(b[3]) << 7)
            | (u64::from(b[4]) >> 1),
    )
}

/// Piecewise-linear clock: 27 MHz ticks as a function of TS packet ordinal.
///
/// The x axis is the ordinal of valid packets rather than the byte offset, so
/// garbage skipped during a resync takes no time.
struct Timeline {
    /// (ordinal, ticks), ordinals strictly increasing, ticks non-decreasing.
    points: Vec<(u64, f64)>,
    head_rate: f64,
    tail_rate: f64,
}

impl Timeline {
    fn constant(bitrate_bps: f64) -> Timeline {
        let rate = PACKET_BITS / bitrate_bps * PCR_HZ;
        Timeline {
            points: vec![(0, 0.0)],
            head_rate: rate,
            tail_rate: rate,
        }
    }

    fn ticks(&self, ordinal: u64) -> f64 {
        let i = self.points.partition_point(|p| p.0 <= ordinal);
        match (
            i.checked_sub(1).and_then(|j| self.points.get(j)),
            self.points.get(i),
        ) {
            (Some(&(n0, t0)), Some(&(n1, t1))) => {
                t0 + (t1 - t0) * ((ordinal - n0) as f64 / (n1 - n0) as f64)
            }
            (Some(&(n0, t0)), None) => t0 + (ordinal - n0) as f64 * self.tail_rate,
            (None, Some(&(n1, t1))) => t1 - (n1 - ordinal) as f64 * self.head_rate,
            (None, None) => 0.0,
        }
    }
}

/// Clock from PCRs, or None if fewer than two usable ones. Also returns the
/// number of PCRs used and of discontinuities bridged.
fn pcr_timeline(scan: &Scan) -> Option<(Timeline, u64, u64)> {
    let first_pid = scan.pcrs.first()?.pid;
    let pid = match scan.pmt {
        Some(pmt) if scan.pcrs.iter().any(|s| s.pid == pmt.pcr_pid) => pmt.pcr_pid,
        _ => first_pid,
    };
    let samples: Vec<PcrSample> = scan.pcrs.iter().filter(|s| s.pid == pid).copied().collect();
    // Per interval: packets spanned and the PCR advance, None where the clock jumped.
    let mut intervals: Vec<(u64, Option<u64>)> = Vec::with_capacity(samples.len());
    let mut last_rate: Option<f64> = None;
    for w in samples.windows(2) {
        let [a, b] = w else { continue };
        let dn = b.ordinal - a.ordinal;
        let d = (b.pcr + PCR_WRAP - a.pcr) % PCR_WRAP;
        let df = d as f64;
        let jumped = b.discontinuity
            || d > PCR_WRAP / 2
            || (df > PCR_HZ && last_rate.is_none_or(|r| df > dn as f64 * r + PCR_HZ));
        if jumped {
            intervals.push((dn, None));
        } else {
            last_rate = Some(df / dn as f64);
            intervals.push((dn, Some(d)));
        }
    }
    let first_good = intervals
        .iter()
        .find_map(|&(dn, d)| Some(d? as f64 / dn as f64))?;
    let mut points = Vec::with_capacity(samples.len());
    let mut ticks = 0.0;
    let mut rate = first_good;
    let mut jumps = 0;
    let mut head_rate = None;
    points.extend(samples.first().map(|s| (s.ordinal, ticks)));
    for (&(dn, d), s) in intervals.iter().zip(samples.iter().skip(1)) {
        match d {
            Some(d) => {
                rate = d as f64 / dn as f64;
                ticks += d as f64;
            }
            None => {
                jumps += 1;
                ticks += dn as f64 * rate;
            }
        }
        head_rate.get_or_insert(rate);
        points.push((s.ordinal, ticks));
    }
    let timeline = Timeline {
        points,
        head_rate: head_rate.unwrap_or(first_good),
        tail_rate: rate,
    };
    Some((timeline, samples.len() as u64, jumps))
}

/// Constant bitrate measured from PES timestamps, if believable.
fn pts_bitrate(scan: &Scan) -> Option<f64> {
    let preferred = scan.pmt.and_then(|p| p.video_pid.or(p.first_es_pid));
    let usable = |c: &&PesClock| c.span > 0 && c.last_ordinal > c.first_ordinal;
    let clock = scan
        .pes_clocks
        .iter()
        .filter(usable)
        .find(|c| Some(c.pid) == preferred)
        .or_else(|| {
            scan.pes_clocks
                .iter()
                .filter(usable)
                .max_by_key(|c| c.last_ordinal - c.first_ordinal)
        })?;
    let seconds = clock.span as f64 / 90_000.0;
    let bps = (clock.last_ordinal - clock.first_ordinal) as f64 * PACKET_BITS / seconds;
    PLAUSIBLE_BPS.contains(&bps).then_some(bps)
}

fn finish(
    scan: Scan,
    groups: Groups,
    ts_packets: u64,
    opts: &TsOptions,
    resyncs: u64,
    skipped_bytes: u64,
    truncated_tail_bytes: u64,
) -> Packetization {
    let mut warnings = Vec::new();
    let (timeline, timing, pcr_count) = match pcr_timeline(&scan) {
        Some((t, count, jumps)) => {
            if jumps > 0 {
                warnings.push(format!(
                    "{jumps} PCR discontinuities; timing carried on across them at the previous rate"
                ));
            }
            (t, TimingSource::Pcr, count)
        }
        None => match pts_bitrate(&scan) {
            Some(bps) => {
                warnings.push(format!(
                    "no PCR in file; pacing at a rate measured from PTS: {:.2} Mbit/s",
                    bps / 1e6
                ));
                (Timeline::constant(bps), TimingSource::MeasuredFromPts, 0)
            }
            None => {
                let bps = opts.fallback_bitrate.max(1000) as f64;
                warnings.push(format!(
                    "no PCR and no PTS in file; pacing at an assumed {:.2} Mbit/s",
                    bps / 1e6
                ));
                (Timeline::constant(bps), TimingSource::AssumedBitrate, 0)
            }
        },
    };
    let origin = timeline.ticks(0);
    let time_ns = |ordinal: u64| -> u64 {
        let ns = (timeline.ticks(ordinal) - origin) * 1000.0 / 27.0;
        ns.round().max(0.0) as u64
    };

    // Random access points: RAI-flagged PES starts on the video PID (or any
    // PID if there is no video), else every PAT. Playback from one starts at
    // the PAT before it when that is near, so a joining player gets PAT and
    // PMT first.
    let video = scan.pmt.and_then(|p| p.video_pid);
    let mut raps: Vec<u64> = scan
        .raps
        .iter()
        .filter(|&&(_, pid)| video.is_none_or(|v| v == pid))
        .map(|&(o, _)| o)
        .collect();
    let video_raps = video.filter(|_| !raps.is_empty());
    if raps.is_empty() {
        warnings.push(
            "no random access indicators on the video stream; seeking snaps to PAT positions"
                .to_owned(),
        );
        raps.clone_from(&scan.pats);
    }
    let entries: Vec<(u64, u64)> = raps
        .iter()
        .map(|&rap| {
            let rap_time = time_ns(rap);
            let start = scan
                .pats
                .partition_point(|&p| p <= rap)
                .checked_sub(1)
                .and_then(|i| scan.pats.get(i))
                .filter(|&&p| rap_time - time_ns(p).min(rap_time) <= 1_000_000_000)
                .map_or(rap, |&p| p);
            (start, rap)
        })
        .collect();
    // Where each key frame ends: before the next PES start of its stream.
    let key_frame_ends: Vec<u64> = match video_raps {
        Some(v) => {
            let pes: Vec<u64> = (scan.pes_starts.iter())
                .filter(|&&(_, p)| p == v)
                .map(|&(o, _)| o)
                .collect();
            (entries.iter())
                .filter_map(|&(_, rap)| pes.get(pes.partition_point(|&o| o <= rap)).copied())
                .collect()
        }
        None => vec![],
    };
    // An RTP packet begins at every entry point: a seek then delivers from
    // exactly there, never the tail of the previous picture. One begins
    // after each key frame, too, so trick play sends key frames whole and
    // nothing of the picture after them.
    let mut starts: Vec<u64> = entries.iter().map(|&(s, _)| s).collect();
    starts.extend(&key_frame_ends);
    starts.sort_unstable();
    let groups = groups.regroup(&starts, u32::from(opts.ts_per_rtp.clamp(1, 7)));

    let mut packets = Vec::with_capacity(groups.offsets.len());
    let mut last_time = 0;
    for ((&offset, &count), &first) in groups
        .offsets
        .iter()
        .zip(&groups.counts)
        .zip(&groups.first_ordinals)
    {
        let send_time_ns = time_ns(first).max(last_time);
        last_time = send_time_ns;
        packets.push(PacketRecord::file_run(
            send_time_ns,
            rtp_timestamp(send_time_ns),
            offset,
            count * TS_PACKET_LEN as u32,
        ));
    }

    for &end in &key_frame_ends {
        if let Some(p) = packets.get_mut(groups.containing(end - 1) as usize) {
            p.flags |= FLAG_KEY_FRAME_END;
        }
    }

    let mut sync = vec![SyncPoint::default()];
    for &(start, rap) in &entries {
        if let Some(p) = packets.get_mut(groups.containing(rap) as usize) {
            p.flags |= FLAG_RANDOM_ACCESS;
        }
        sync.push(SyncPoint {
            packet: groups.containing(start),
            time_ns: time_ns(rap),
        });
    }
    sync.sort_by_key(|s| (s.packet, s.time_ns));
    sync.dedup_by_key(|s| s.packet);
    let mut latest = 0;
    sync.retain(|s| {
        let keep = s.time_ns >= latest;
        latest = latest.max(s.time_ns);
        keep
    });

    if resyncs > 0 {
        warnings.push(format!(
            "lost sync {resyncs} times; skipped {skipped_bytes} bytes of garbage"
        ));
    } else if skipped_bytes > 0 {
        warnings.push(format!(
            "skipped {skipped_bytes} bytes before the first TS packet"
        ));
    }
    if truncated_tail_bytes > 0 {
        warnings.push(format!(
            "last TS packet is cut short ({truncated_tail_bytes} bytes); not served"
        ));
    }
    let duration_ns = time_ns(ts_packets).max(last_time);
    let bitrate_bps = if duration_ns > 0 {
        (ts_packets as f64 * PACKET_BITS * 1e9 / duration_ns as f64) as u64
    } else {
        0
    };
    let report = IngestReport {
        format: "MPEG-TS".to_owned(),
        ts_packets,
        rtp_packets: packets.len() as u64,
        resyncs,
        skipped_bytes,
        truncated_tail_bytes,
        pcr_count,
        timing,
        warnings,
        bitrate_bps,
    };
    Packetization {
        packets,
        sync,
        duration_ns,
        ts_per_rtp: opts.ts_per_rtp.clamp(1, 7),
        report,
    }
}

impl Packetization {
    /// The title plan: one MP2T track carrying the whole stream.
    pub fn into_plan(self) -> MediaPlan {
        MediaPlan {
            tracks: vec![TrackPlan {
                desc: TrackDesc::mpeg_ts(),
                packets: self.packets,
                sync: self.sync,
                fec: None,
            }],
            duration_ns: self.duration_ns,
            ts_per_rtp: self.ts_per_rtp,
            report: self.report,
        }
    }
}

/// 90 kHz RTP timestamp of a send time, wrapping at 2^32.
pub fn rtp_timestamp(send_time_ns: u64) -> u32 {
    (u128::from(send_time_ns) * 90_000 / 1_000_000_000) as u32
}

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
//! [`growing`] plans a file still being written on from where the plan of a
//! shorter prefix of it is final, with the same pass and layout.
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

pub mod growing;
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
/// An entry point starts at the PAT before its random access point when
/// that is at most this much earlier.
const PAT_LOOKBACK_NS: u64 = 1_000_000_000;
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
    let (_, run) = whole_run(data, opts, progress)?;
    Ok(finish(run, opts))
}

/// The pass over all of `data`: where its first packet is, and what it found.
fn whole_run(
    data: &[u8],
    opts: &TsOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(usize, Run), TsError> {
    if data.is_empty() {
        return Err(TsError::Empty);
    }
    if data.len() as u64 >= MAX_FILE_LEN {
        return Err(TsError::TooLarge);
    }
    let start = initial_sync(data).ok_or(TsError::NotTs)?;
    let per_rtp = opts.ts_per_rtp.clamp(1, 7) as u32;
    let mut run = scan_from(data, start, 0, Scan::default(), per_rtp, progress);
    run.skipped += start as u64;
    if run.groups.offsets.len() > u32::MAX as usize {
        return Err(TsError::TooLarge);
    }
    Ok((start, run))
}

/// What a pass over the packets from some position on found.
struct Run {
    scan: Scan,
    groups: Groups,
    /// Ordinal after the last whole packet.
    ordinal: u64,
    resyncs: u64,
    skipped: u64,
    truncated: u64,
}

/// Scans the packets of `data` from `pos` on, the first numbered
/// `ordinal`, into `scan`.
fn scan_from(
    data: &[u8],
    mut pos: usize,
    mut ordinal: u64,
    mut scan: Scan,
    per_rtp: u32,
    progress: &mut dyn FnMut(u64, u64),
) -> Run {
    let total = data.len() as u64;
    let mut groups = Groups::default();
    let mut resyncs = 0u64;
    let mut skipped = 0u64;
    let mut truncated = 0u64;
    let mut next_progress = pos + PROGRESS_STEP;
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
    Run {
        scan,
        groups,
        ordinal,
        resyncs,
        skipped,
        truncated,
    }
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

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pmt {
    pcr_pid: u16,
    video_pid: Option<u16>,
    first_es_pid: Option<u16>,
}

/// What the per-packet pass collects; everything is small next to the file.
#[derive(Default)]
struct Scan {
    pmt_pid: Option<u16>,
    /// Ordinal of the PAT that gave it: packets before are read without.
    pmt_pid_at: u64,
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
                self.pmt_pid_at = ordinal;
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

/// The PCR clock at a sample: what the next interval is judged and timed
/// by. [`growing`] carries it from one plan to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Clock {
    ordinal: u64,
    pcr: u64,
    /// Ticks at this sample since the first.
    ticks: f64,
    /// What an interval the clock jumped over is timed at: the last good
    /// interval's rate (before one, the first good one's).
    rate: f64,
    /// The last good interval's rate, which judges the next.
    last_rate: Option<f64>,
    /// Samples so far, and intervals the clock jumped over.
    count: u64,
    jumps: u64,
}

impl Clock {
    fn step(&mut self, s: &PcrSample) {
        let dn = s.ordinal - self.ordinal;
        let d = (s.pcr + PCR_WRAP - self.pcr) % PCR_WRAP;
        if jumped(s.discontinuity, d, dn, self.last_rate) {
            self.jumps += 1;
            self.ticks += dn as f64 * self.rate;
        } else {
            self.rate = d as f64 / dn as f64;
            self.last_rate = Some(self.rate);
            self.ticks += d as f64;
        }
        self.ordinal = s.ordinal;
        self.pcr = s.pcr;
        self.count += 1;
    }

    /// The timeline from this sample through `samples` (later ones), and
    /// the clock at the last.
    fn timeline(mut self, samples: &[PcrSample]) -> (Timeline, Clock) {
        let mut points = Vec::with_capacity(samples.len() + 1);
        points.push((self.ordinal, self.ticks));
        let mut head_rate = None;
        for s in samples {
            self.step(s);
            head_rate.get_or_insert(self.rate);
            points.push((s.ordinal, self.ticks));
        }
        let timeline = Timeline {
            points,
            head_rate: head_rate.unwrap_or(self.rate),
            tail_rate: self.rate,
        };
        (timeline, self)
    }
}

/// Whether the clock jumped over an interval of `dn` packets in which the
/// PCR went on by `d` (mod its wrap), judged by the last good rate.
fn jumped(discontinuity: bool, d: u64, dn: u64, last_rate: Option<f64>) -> bool {
    let df = d as f64;
    discontinuity
        || d > PCR_WRAP / 2
        || (df > PCR_HZ && last_rate.is_none_or(|r| df > dn as f64 * r + PCR_HZ))
}

/// The PID whose PCRs time the stream: the PMT's PCR PID if it has any,
/// else the first with one.
fn pcr_pid(scan: &Scan) -> Option<u16> {
    let first_pid = scan.pcrs.first()?.pid;
    Some(match scan.pmt {
        Some(pmt) if scan.pcrs.iter().any(|s| s.pid == pmt.pcr_pid) => pmt.pcr_pid,
        _ => first_pid,
    })
}

/// The samples of the PCR PID and the clock at the first, or None if no
/// interval between them is usable.
fn pcr_clock(scan: &Scan) -> Option<(Vec<PcrSample>, Clock)> {
    let pid = pcr_pid(scan)?;
    let samples: Vec<PcrSample> = scan.pcrs.iter().filter(|s| s.pid == pid).copied().collect();
    let first_good = samples.windows(2).find_map(|w| {
        let [a, b] = w else { return None };
        let dn = b.ordinal - a.ordinal;
        let d = (b.pcr + PCR_WRAP - a.pcr) % PCR_WRAP;
        (!jumped(b.discontinuity, d, dn, None)).then(|| d as f64 / dn as f64)
    })?;
    let first = samples.first()?;
    let clock = Clock {
        ordinal: first.ordinal,
        pcr: first.pcr,
        ticks: 0.0,
        rate: first_good,
        last_rate: None,
        count: 1,
        jumps: 0,
    };
    Some((samples, clock))
}

/// Clock from PCRs, or None if fewer than two usable ones. Also returns the
/// number of PCRs used and of discontinuities bridged.
fn pcr_timeline(scan: &Scan) -> Option<(Timeline, u64, u64)> {
    let (samples, clock) = pcr_clock(scan)?;
    let (timeline, clock) = clock.timeline(samples.get(1..).unwrap_or_default());
    Some((timeline, clock.count, clock.jumps))
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

/// How a plan is timed: the clock and the ticks at the file's start.
struct Timing {
    timeline: Timeline,
    origin: f64,
    source: TimingSource,
    pcr_count: u64,
}

impl Timing {
    /// Send time of TS packet `ordinal`, ns from the file's start.
    fn ns(&self, ordinal: u64) -> u64 {
        let ns = (self.timeline.ticks(ordinal) - self.origin) * 1000.0 / 27.0;
        ns.round().max(0.0) as u64
    }
}

/// The stream's clock: PCR, else a bitrate from PTS, else the assumed one.
fn timing(scan: &Scan, opts: &TsOptions, warnings: &mut Vec<String>) -> Timing {
    let (timeline, source, pcr_count) = match pcr_timeline(scan) {
        Some((t, count, jumps)) => {
            if jumps > 0 {
                warnings.push(jumps_warning(jumps));
            }
            (t, TimingSource::Pcr, count)
        }
        None => match pts_bitrate(scan) {
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
    Timing {
        origin: timeline.ticks(0),
        timeline,
        source,
        pcr_count,
    }
}

fn jumps_warning(jumps: u64) -> String {
    format!("{jumps} PCR discontinuities; timing carried on across them at the previous rate")
}

/// What a plan laid out from TS packet F of a longer one takes from the
/// packets before F ([`growing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Before {
    /// F.
    ordinal: u64,
    /// RTP packets before F, and the last one's send time (send times
    /// never go back).
    packets: u32,
    last_time: u64,
    /// The last PAT before F and its time: an entry point may start there.
    pat: Option<(u64, u64)>,
    /// A key frame before F ends at the video's first PES start from F on.
    key_frame_open: bool,
    /// The last sync point candidate's packet, and the latest sync point's
    /// time: the next candidates are kept against them.
    sync_packet: u32,
    sync_time: u64,
}

/// Packets and sync points laid out, and what they were made of.
struct Laid {
    packets: Vec<PacketRecord>,
    /// Numbered from the title's first packet.
    sync: Vec<SyncPoint>,
    groups: Groups,
    /// (start, random access point) of each entry point.
    entries: Vec<(u64, u64)>,
    /// The video PID, if its RAPs are the entry points (key frames end at
    /// its next PES start).
    video_raps: Option<u16>,
    before: Option<Before>,
}

/// RTP packets, their flags and the sync points, from the packets scanned
/// (from `before`'s F on, if given, else the whole file).
fn lay_out(
    scan: &Scan,
    groups: Groups,
    timing: &Timing,
    per_rtp: u32,
    before: Option<&Before>,
    warnings: &mut Vec<String>,
) -> Laid {
    let time_ns = |ordinal| timing.ns(ordinal);
    // Random access points: RAI-flagged PES starts on the video PID (or any
    // PID if there is no video), else every PAT. Playback from one starts at
    // the PAT before it when that is near, so a joining player gets PAT and
    // PMT first. A plan laid out from F is one of a file with RAPs.
    let video = scan.pmt.and_then(|p| p.video_pid);
    let mut raps: Vec<u64> = scan
        .raps
        .iter()
        .filter(|&&(_, pid)| video.is_none_or(|v| v == pid))
        .map(|&(o, _)| o)
        .collect();
    let video_raps = video.filter(|_| before.is_some() || !raps.is_empty());
    if raps.is_empty() && before.is_none() {
        warnings.push(
            "no random access indicators on the video stream; seeking snaps to PAT positions"
                .to_owned(),
        );
        raps.clone_from(&scan.pats);
    }
    let pat_before = before.and_then(|b| b.pat);
    let entries: Vec<(u64, u64)> = raps
        .iter()
        .map(|&rap| {
            let rap_time = time_ns(rap);
            let start = scan
                .pats
                .partition_point(|&p| p <= rap)
                .checked_sub(1)
                .and_then(|i| scan.pats.get(i))
                .map(|&p| (p, time_ns(p)))
                .or(pat_before)
                .filter(|&(_, t)| rap_time - t.min(rap_time) <= PAT_LOOKBACK_NS)
                .map_or(rap, |(p, _)| p);
            (start, rap)
        })
        .collect();
    let key_frame_ends = video_raps.map_or_else(Vec::new, |v| {
        key_frame_ends(&scan.pes_starts, v, &entries, before)
    });
    // An RTP packet begins at every entry point: a seek then delivers from
    // exactly there, never the tail of the previous picture. One begins
    // after each key frame, too, so trick play sends key frames whole and
    // nothing of the picture after them.
    let mut starts: Vec<u64> = entries.iter().map(|&(s, _)| s).collect();
    starts.extend(&key_frame_ends);
    starts.sort_unstable();
    let groups = groups.regroup(&starts, per_rtp);

    let mut packets = Vec::with_capacity(groups.offsets.len());
    let mut last_time = before.map_or(0, |b| b.last_time);
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

    // What starts or ends before F was laid out with the packets before it.
    let first = before.map_or(0, |b| b.ordinal);
    for &end in &key_frame_ends {
        if end > first
            && let Some(p) = packets.get_mut(groups.containing(end - 1) as usize)
        {
            p.flags |= FLAG_KEY_FRAME_END;
        }
    }
    let base = before.map_or(0, |b| b.packets);
    let mut candidates = Vec::with_capacity(entries.len());
    for &(start, rap) in &entries {
        if let Some(p) = packets.get_mut(groups.containing(rap) as usize) {
            p.flags |= FLAG_RANDOM_ACCESS;
        }
        if start >= first {
            candidates.push(SyncPoint {
                packet: base + groups.containing(start),
                time_ns: time_ns(rap),
            });
        }
    }
    let sync = keep_sync(candidates, before);
    Laid {
        packets,
        sync,
        groups,
        entries,
        video_raps,
        before: before.copied(),
    }
}

/// Of the sync point candidates, one per packet, the earliest, and none
/// earlier than one before (planned on from F, those before F too).
fn keep_sync(mut candidates: Vec<SyncPoint>, before: Option<&Before>) -> Vec<SyncPoint> {
    candidates.sort_by_key(|s| (s.packet, s.time_ns));
    let mut sync = Vec::with_capacity(candidates.len() + 1);
    let (mut last_packet, mut latest) = match before {
        Some(b) => (b.sync_packet, b.sync_time),
        None => {
            sync.push(SyncPoint::default());
            (0, 0)
        }
    };
    for s in candidates {
        if s.packet != last_packet {
            last_packet = s.packet;
            if s.time_ns >= latest {
                latest = s.time_ns;
                sync.push(s);
            }
        }
    }
    sync
}

/// Where each entry's key frame ends: before the next PES start of its
/// stream, `video` (planned on from F, also the one open before F).
fn key_frame_ends(
    pes_starts: &[(u64, u16)],
    video: u16,
    entries: &[(u64, u64)],
    before: Option<&Before>,
) -> Vec<u64> {
    let pes: Vec<u64> = (pes_starts.iter())
        .filter(|&&(_, p)| p == video)
        .map(|&(o, _)| o)
        .collect();
    let open = before.filter(|b| b.key_frame_open);
    let ends = (entries.iter()).filter_map(|&(_, rap)| pes.get(pes.partition_point(|&o| o <= rap)));
    (open.and_then(|_| pes.first()).into_iter())
        .chain(ends)
        .copied()
        .collect()
}

fn finish(run: Run, opts: &TsOptions) -> Packetization {
    let mut warnings = Vec::new();
    let timing = timing(&run.scan, opts, &mut warnings);
    let per_rtp = u32::from(opts.ts_per_rtp.clamp(1, 7));
    let laid = lay_out(&run.scan, run.groups, &timing, per_rtp, None, &mut warnings);
    let counts = Counts {
        ts_packets: run.ordinal,
        resyncs: run.resyncs,
        skipped: run.skipped,
        truncated: run.truncated,
        pcr_count: timing.pcr_count,
    };
    assemble(laid, &timing, counts, warnings, opts)
}

/// The report's counts.
struct Counts {
    ts_packets: u64,
    resyncs: u64,
    skipped: u64,
    truncated: u64,
    pcr_count: u64,
}

/// The packetization of the packets laid out (after `before`'s), its
/// duration to TS packet `ts_packets`.
fn assemble(
    laid: Laid,
    timing: &Timing,
    c: Counts,
    mut warnings: Vec<String>,
    opts: &TsOptions,
) -> Packetization {
    let Laid {
        packets,
        sync,
        before,
        ..
    } = laid;
    let (before, last_time) = before.map_or((0, 0), |b| (b.packets, b.last_time));
    if c.resyncs > 0 {
        warnings.push(format!(
            "lost sync {} times; skipped {} bytes of garbage",
            c.resyncs, c.skipped
        ));
    } else if c.skipped > 0 {
        warnings.push(format!(
            "skipped {} bytes before the first TS packet",
            c.skipped
        ));
    }
    if c.truncated > 0 {
        warnings.push(format!(
            "last TS packet is cut short ({} bytes); not served",
            c.truncated
        ));
    }
    let last_time = packets.last().map_or(last_time, |p| p.send_time_ns);
    let duration_ns = timing.ns(c.ts_packets).max(last_time);
    let bitrate_bps = if duration_ns > 0 {
        (c.ts_packets as f64 * PACKET_BITS * 1e9 / duration_ns as f64) as u64
    } else {
        0
    };
    let report = IngestReport {
        format: "MPEG-TS".to_owned(),
        ts_packets: c.ts_packets,
        rtp_packets: u64::from(before) + packets.len() as u64,
        resyncs: c.resyncs,
        skipped_bytes: c.skipped,
        truncated_tail_bytes: c.truncated,
        pcr_count: c.pcr_count,
        timing: timing.source,
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

//! An MPEG-TS file still being written (a live recording), planned on
//! from where the plan of a shorter prefix of it stopped: only the TS
//! packets after that point are read.
//!
//! A TS plan is not final to its end. A packet's send time is
//! interpolated between the PCRs around it, and after the last PCR
//! extrapolated at its rate, so it moves when the next PCR comes; a key
//! frame ends at the video's next PES start; an entry point starts at
//! the PAT before its random access point when that is within a second,
//! so a later RAP may cut an RTP packet at a PAT already read. A plan of
//! a growing file is therefore cut at its *final point* F: the first TS
//! packet of the RTP packet that holds the last PCR (on the PCR PID), or
//! of the one holding the last PAT before that PCR if no entry point
//! ending by that PCR starts at that PAT and it is within a second of
//! that PCR (a later RAP's entry may start there). Before F nothing a longer
//! prefix adds changes: send times there lie between PCRs read, the
//! entry points and key frame ends still to come cut at F or after. The
//! cut plan holds the RTP packets before F, the sync points starting
//! before F, its duration is F's send time and its report counts the TS
//! packets and PCRs before F; it lags the prefix's end by a PCR interval
//! or so (ffmpeg writes a PCR every 20-100 ms), by up to a second after
//! a PAT no RAP has followed yet.
//!
//! [`plan_whole`] plans the prefix and cuts it at F; [`plan_on`] reads
//! from F on and joins, carrying what crosses F in a [`Resume`]: the
//! PCR clock at the last PCR before F, the last PAT before F and its
//! time, whether a key frame before F is still open, the last send time
//! and the state that keeps sync points one per packet and in time. A
//! prefix is cut only when the plan of any longer one agrees on what
//! lies before F: it is whole TS packets from its first (no sync lost,
//! no junk after; a last packet cut short is left for later), its PMT
//! was read before F and the PMT's PCR PID has the PCRs that time it
//! (one interval of them usable, one before F), and it has random
//! access points. Otherwise [`plan_whole`] plans the whole prefix and
//! gives no [`Resume`], and [`plan_on`] says no on new bytes that are
//! not whole packets: the caller plans the whole prefix.

use super::{
    Before, Clock, Counts, Laid, MAX_FILE_LEN, PAT_LOOKBACK_NS, Packetization, PcrSample, Pmt, Run,
    Scan, TS_PACKET_LEN, Timing, TimingSource, TsError, TsOptions, assemble, jumps_warning,
    lay_out, pcr_clock, pcr_pid, scan_from, timing, whole_run,
};

/// Where the cut plan of a prefix of a TS file stopped (its final point),
/// for a plan of a longer prefix to go on from ([`plan_on`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    len: usize,
    /// Byte position of the final point.
    pos: usize,
    per_rtp: u8,
    before: Before,
    pmt_pid: u16,
    pmt: Pmt,
    /// The clock at the last PCR before the final point, and the ticks at
    /// the file's start.
    clock: Clock,
    origin: f64,
    /// Bytes before the first TS packet.
    skipped: u64,
}

impl Resume {
    /// Bytes planned (the prefix, past the final point).
    pub fn bytes(&self) -> usize {
        self.len
    }

    /// RTP packets planned (before the final point).
    pub fn packets(&self) -> u64 {
        u64::from(self.before.packets)
    }
}

/// The plan of `data` and, if a plan of a longer prefix may go on from
/// it, where: then the plan is cut at its final point (see the module
/// doc), else it is [`super::packetize`]'s.
pub fn plan_whole(
    data: &[u8],
    opts: &TsOptions,
) -> Result<(Packetization, Option<Resume>), TsError> {
    let per_rtp = opts.ts_per_rtp.clamp(1, 7);
    let (start, run) = whole_run(data, opts, &mut |_, _| {})?;
    let Run {
        scan,
        groups,
        ordinal,
        resyncs,
        skipped,
        truncated,
    } = run;
    let mut warnings = Vec::new();
    let timing = timing(&scan, opts, &mut warnings);
    let settled = (resyncs == 0 && skipped == start as u64)
        .then(|| settled(&scan))
        .flatten();
    let laid = lay_out(
        &scan,
        groups,
        &timing,
        u32::from(per_rtp),
        None,
        &mut warnings,
    );
    let cut = settled.and_then(|(samples, clock, pmt_pid, pmt)| {
        let (k, before, at) = cut(&scan, &laid, &timing, clock, samples.get(1..)?)?;
        (scan.pmt_pid_at < before.ordinal).then_some((k, before, at, pmt_pid, pmt))
    });
    let Some((k, before, clock, pmt_pid, pmt)) = cut else {
        let counts = Counts {
            ts_packets: ordinal,
            resyncs,
            skipped,
            truncated,
            pcr_count: timing.pcr_count,
        };
        return Ok((assemble(laid, &timing, counts, warnings, opts), None));
    };
    let resume = Resume {
        len: data.len(),
        pos: start + before.ordinal as usize * TS_PACKET_LEN,
        per_rtp,
        before,
        pmt_pid,
        pmt,
        clock,
        origin: timing.origin,
        skipped,
    };
    Ok((cut_plan(laid, k, &resume, &timing, opts), Some(resume)))
}

/// What planning `data`, a longer prefix of the file `from` was planned
/// from, adds to that cut plan: the RTP packets from its final point to
/// the new one, the sync points starting there (numbered from the
/// title's first packet), the duration and report of the new cut plan;
/// and where it stopped. `None`: it cannot be planned on from there
/// (see the module doc); plan the whole prefix instead.
pub fn plan_on(data: &[u8], opts: &TsOptions, from: &Resume) -> Option<(Packetization, Resume)> {
    let per_rtp = opts.ts_per_rtp.clamp(1, 7);
    if from.len > data.len() || per_rtp != from.per_rtp || data.len() as u64 >= MAX_FILE_LEN {
        return None;
    }
    let scan = Scan {
        pmt_pid: Some(from.pmt_pid),
        pmt: Some(from.pmt),
        ..Scan::default()
    };
    let first = from.before.ordinal;
    let run = scan_from(
        data,
        from.pos,
        first,
        scan,
        u32::from(per_rtp),
        &mut |_, _| {},
    );
    let packets = run.groups.offsets.len() as u64 + from.packets();
    if run.resyncs > 0 || run.skipped > 0 || packets > u64::from(u32::MAX) {
        return None;
    }
    let steps: Vec<PcrSample> = (run.scan.pcrs.iter())
        .filter(|s| s.pid == from.pmt.pcr_pid)
        .copied()
        .collect();
    let timing = Timing {
        timeline: from.clock.timeline(&steps).0,
        origin: from.origin,
        source: TimingSource::Pcr,
        pcr_count: 0,
    };
    let laid = lay_out(
        &run.scan,
        run.groups,
        &timing,
        u32::from(per_rtp),
        Some(&from.before),
        &mut Vec::new(),
    );
    let (k, before, clock) = cut(&run.scan, &laid, &timing, from.clock, &steps)?;
    let resume = Resume {
        len: data.len(),
        pos: from.pos + (before.ordinal - first) as usize * TS_PACKET_LEN,
        before,
        clock,
        ..from.clone()
    };
    Some((cut_plan(laid, k, &resume, &timing, opts), resume))
}

/// The PCR samples and the clock at the first, the PMT's PID and the
/// PMT, of a scan whose plan may be cut: its PMT read, its PCR PID the
/// PMT's, its clock usable and its entry points RAPs.
fn settled(scan: &Scan) -> Option<(Vec<PcrSample>, Clock, u16, Pmt)> {
    let (pmt_pid, pmt) = (scan.pmt_pid?, scan.pmt?);
    let video = pmt.video_pid;
    let has_raps = (scan.raps.iter()).any(|&(_, pid)| video.is_none_or(|v| v == pid));
    if pcr_pid(scan) != Some(pmt.pcr_pid) || !has_raps {
        return None;
    }
    let (samples, clock) = pcr_clock(scan)?;
    Some((samples, clock, pmt_pid, pmt))
}

/// The final point of the packets laid out (`clock` at the last PCR
/// before them, `steps` the PCRs among them): the number of RTP packets
/// laid out before it, what a plan from there takes from before it and
/// the clock at the last PCR before it. None if no PCR is before it.
fn cut(
    scan: &Scan,
    laid: &Laid,
    timing: &Timing,
    clock: Clock,
    steps: &[PcrSample],
) -> Option<(usize, Before, Clock)> {
    let first = laid.before.map_or(0, |b| b.ordinal);
    let last_pcr = steps.last().map_or(clock.ordinal, |s| s.ordinal);
    let pats_to = |end: u64| &scan.pats[..scan.pats.partition_point(|&p| p < end)];
    // A PAT no entry point starts at yet may start a later one, unless
    // it is too far back already (send times never go back).
    let open_pat = (pats_to(last_pcr + 1).last()).filter(|&&p| {
        timing.ns(last_pcr).saturating_sub(timing.ns(p)) <= PAT_LOOKBACK_NS
            && !(laid.entries.iter()).any(|&(s, r)| s == p && r <= last_pcr)
    });
    let x = open_pat.map_or(last_pcr, |&p| p.min(last_pcr));
    let groups = &laid.groups;
    let k = if x < first {
        0
    } else {
        groups.containing(x) as usize
    };
    let f = match k {
        0 => first,
        _ => *groups.first_ordinals.get(k)?,
    };
    let mut at = clock;
    for s in steps.iter().take_while(|s| s.ordinal < f) {
        at.step(s);
    }
    if at.ordinal >= f {
        return None;
    }
    let was = laid.before;
    let base = was.map_or(0, |b| b.packets);
    let pat = (pats_to(f).last().map(|&p| (p, timing.ns(p)))).or(was.and_then(|b| b.pat));
    let video_pes = |from: u64| {
        (scan.pes_starts.iter()).any(|&(o, p)| Some(p) == laid.video_raps && o >= from && o < f)
    };
    let key_frame_open = laid.video_raps.is_some()
        && match laid.entries.iter().rev().find(|&&(_, r)| r < f) {
            Some(&(_, rap)) => !video_pes(rap + 1),
            None => was.is_some_and(|b| b.key_frame_open) && !video_pes(first),
        };
    let sync_packet = (laid.entries.iter())
        .filter(|&&(s, _)| s >= first && s < f)
        .map(|&(s, _)| base + groups.containing(s))
        .max()
        .or(was.map(|b| b.sync_packet))
        .unwrap_or(0);
    let packets = base + k as u32;
    let sync_time = (laid.sync.iter().rev())
        .find(|s| s.packet < packets)
        .map(|s| s.time_ns)
        .or(was.map(|b| b.sync_time))
        .unwrap_or(0);
    let last_time = (laid.packets.get(..k)?.last())
        .map(|p| p.send_time_ns)
        .or(was.map(|b| b.last_time))
        .unwrap_or(0);
    let before = Before {
        ordinal: f,
        packets,
        last_time,
        pat,
        key_frame_open,
        sync_packet,
        sync_time,
    };
    Some((k, before, at))
}

/// The plan laid out cut at `to`'s final point: its first `k` RTP
/// packets.
fn cut_plan(
    mut laid: Laid,
    k: usize,
    to: &Resume,
    timing: &Timing,
    opts: &TsOptions,
) -> Packetization {
    laid.packets.truncate(k);
    laid.sync.retain(|s| s.packet < to.before.packets);
    let warnings = match to.clock.jumps {
        0 => vec![],
        jumps => vec![jumps_warning(jumps)],
    };
    let counts = Counts {
        ts_packets: to.before.ordinal,
        resyncs: 0,
        skipped: to.skipped,
        truncated: 0,
        pcr_count: to.clock.count,
    };
    assemble(laid, timing, counts, warnings, opts)
}

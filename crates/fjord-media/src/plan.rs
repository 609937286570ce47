//! The packet plan: what every demuxer/packetizer produces and the index
//! stores. One [`TrackPlan`] per RTP stream, each a list of packets that say
//! when to send, which RTP timestamp to stamp, which payload-header bytes to
//! put first and which bytes of the media file follow them.
//!
//! # Timeline conventions (all formats)
//! - Every track of a title shares one timeline in nanoseconds, 0 = the first
//!   presented sample (after edit lists).
//! - `rtp_ts` = presentation time on that timeline in the track's clock
//!   (see [`rtp_ticks`]), wrapping at 2^32. The engine adds a random offset
//!   per session; RTCP SRs then map NTP↔RTP for all tracks from one clock,
//!   which is what lets players lip-sync.
//! - `send_time_ns` is non-decreasing within a track: decode time for video
//!   (clamped at 0), presentation time for audio.
//! - Sync points are the video track's random-access points (time = the
//!   keyframe's presentation time, packet = its first packet). Tracks without
//!   sync points (audio) are entered at their first packet whose
//!   `send_time_ns` is at or after the seek time.

use crate::index::TrackDesc;

/// [`PacketRecord::flags`] bit: RTP marker bit.
pub const FLAG_MARKER: u8 = 1;
/// [`PacketRecord::flags`] bit: the payload holds a random access point.
pub const FLAG_RANDOM_ACCESS: u8 = 2;
/// [`PacketRecord::flags`] bit (MPEG-TS): the key frame of the latest
/// random access point ends with this packet (ingest starts the next one
/// at the next PES of its stream), so the bytes from the random access
/// point's packet through this one hold the whole key frame and nothing
/// of the next picture (an I-frame playlist's range, a trick stream's
/// key frame).
pub const FLAG_KEY_FRAME_END: u8 = 4;
/// Most payload-header bytes a packet may carry inline (RFC 2250 MPEG video
/// header with its MPEG-2 extension is the largest: 8).
pub const MAX_PREFIX: usize = 8;

/// One RTP packet: when to send it and what it carries.
///
/// Payload = `prefix()` then `len` file bytes at `offset`, then (rarely, when
/// the data straddles a container boundary such as a PES packet of a program
/// stream) `len2` more file bytes starting `skip` bytes after the first run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketRecord {
    /// Send time on the title's timeline.
    pub send_time_ns: u64,
    /// RTP timestamp (track clock), before the session's random offset.
    pub rtp_ts: u32,
    /// Start of the first file run.
    pub offset: u64,
    /// Length of the first file run.
    pub len: u32,
    /// [`FLAG_MARKER`], [`FLAG_RANDOM_ACCESS`].
    pub flags: u8,
    pub prefix_len: u8,
    /// Payload-header bytes sent before the file bytes; `prefix_len` used.
    pub prefix: [u8; MAX_PREFIX],
    /// Gap between the end of the first run and the start of the second.
    pub skip: u32,
    /// Length of the second file run (0: none).
    pub len2: u32,
}

impl PacketRecord {
    /// A packet of `len` file bytes at `offset`, nothing else.
    pub fn file_run(send_time_ns: u64, rtp_ts: u32, offset: u64, len: u32) -> Self {
        PacketRecord {
            send_time_ns,
            rtp_ts,
            offset,
            len,
            ..Default::default()
        }
    }

    /// Sets the payload-header bytes (at most [`MAX_PREFIX`]; more is a bug
    /// in the packetizer).
    pub fn with_prefix(mut self, bytes: &[u8]) -> Self {
        assert!(bytes.len() <= MAX_PREFIX, "payload header too long");
        self.prefix[..bytes.len()].copy_from_slice(bytes);
        self.prefix_len = bytes.len() as u8;
        self
    }

    pub fn prefix(&self) -> &[u8] {
        &self.prefix[..usize::from(self.prefix_len).min(MAX_PREFIX)]
    }

    /// Offset of the second file run.
    pub fn offset2(&self) -> u64 {
        self.offset + u64::from(self.len) + u64::from(self.skip)
    }

    /// One past the last file byte this packet uses.
    pub fn file_end(&self) -> u64 {
        if self.len2 == 0 {
            self.offset + u64::from(self.len)
        } else {
            self.offset2() + u64::from(self.len2)
        }
    }

    /// The packet's file runs in `media` (the second empty when it has
    /// none); `None` when a run lies outside it.
    pub fn runs<'m>(&self, media: &'m [u8]) -> Option<(&'m [u8], &'m [u8])> {
        let run = |offset: u64, len: u32| {
            let start = usize::try_from(offset).ok()?;
            media.get(start..start.checked_add(len as usize)?)
        };
        let run2 = if self.len2 == 0 {
            &[][..]
        } else {
            run(
                self.offset
                    .checked_add(u64::from(self.len))?
                    .checked_add(u64::from(self.skip))?,
                self.len2,
            )?
        };
        Some((run(self.offset, self.len)?, run2))
    }

    /// RTP payload length: prefix and both runs.
    pub fn payload_len(&self) -> usize {
        self.prefix().len() + self.len as usize + self.len2 as usize
    }

    pub fn marker(&self) -> bool {
        self.flags & FLAG_MARKER != 0
    }
}

/// A place where playback can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncPoint {
    /// Packet index to start sending from.
    pub packet: u32,
    /// Presentation time of the random access point.
    pub time_ns: u64,
}

/// A track's FEC block layout: K source packets and M repair packets per
/// block, E bytes per symbol. The parity code (fjord-fec) chooses it at
/// ingest and the index records it; the parity sidecar must match it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    pub k: u16,
    pub m: u16,
    pub symbol_len: u32,
}

/// Chooses the FEC block layout of each track of a planned title, in track
/// order (the parity code's `--fec` choice, `fjord_fec::layouts`); ingest
/// records it in the index. Tracks without an entry get none.
pub type ChooseLayouts<'a> = &'a dyn Fn(&MediaPlan) -> Vec<Option<BlockLayout>>;

/// The [`ChooseLayouts`] of a title without parity.
pub fn no_parity(_: &MediaPlan) -> Vec<Option<BlockLayout>> {
    Vec::new()
}

/// Everything one RTP stream of a title needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackPlan {
    pub desc: TrackDesc,
    pub packets: Vec<PacketRecord>,
    /// Sorted by packet and time; empty for tracks entered by time (audio).
    pub sync: Vec<SyncPoint>,
    /// Planners leave it `None`; ingest sets what the parity code chose.
    pub fec: Option<BlockLayout>,
}

/// A whole title: what ingest writes into the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaPlan {
    pub tracks: Vec<TrackPlan>,
    /// End of the last presented sample on the title timeline.
    pub duration_ns: u64,
    /// TS packets per RTP packet for MPEG-TS (0 for other formats): an index
    /// made with other options is re-ingested.
    pub ts_per_rtp: u8,
    pub report: IngestReport,
}

impl MediaPlan {
    /// Sets every track's block layout to what `fec` chooses for this plan.
    pub fn choose_fec(&mut self, fec: ChooseLayouts<'_>) {
        let layouts = fec(self);
        for (track, layout) in self.tracks.iter_mut().zip(layouts) {
            track.fec = layout;
        }
    }
}

/// Where the send times came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimingSource {
    /// Interpolated between MPEG-TS program clock references: the file's true rate.
    Pcr,
    /// Constant rate measured from PES presentation/decoding timestamps.
    MeasuredFromPts,
    /// Constant rate from an assumed bitrate.
    AssumedBitrate,
    /// The samples' own timestamps (container tables, frame counts).
    Timestamps,
}

/// What ingest found, for the operator. The TS counters are 0 for other formats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestReport {
    /// Container and codecs, e.g. "MPEG-TS" or "MP4 (H.264, AAC)".
    pub format: String,
    pub ts_packets: u64,
    pub rtp_packets: u64,
    /// Times sync was lost and found again.
    pub resyncs: u64,
    /// Bytes not in any valid packet or frame (leading junk, garbage between).
    pub skipped_bytes: u64,
    /// Bytes of an incomplete last packet or frame, not served.
    pub truncated_tail_bytes: u64,
    /// PCRs used for timing.
    pub pcr_count: u64,
    pub timing: TimingSource,
    /// Plain-English notes about anything unusual.
    pub warnings: Vec<String>,
    /// Average bitrate over the whole file.
    pub bitrate_bps: u64,
}

impl IngestReport {
    /// A report for a non-TS format: its name, packet count and bitrate.
    pub fn new(format: impl Into<String>, rtp_packets: u64, bitrate_bps: u64) -> Self {
        IngestReport {
            format: format.into(),
            ts_packets: 0,
            rtp_packets,
            resyncs: 0,
            skipped_bytes: 0,
            truncated_tail_bytes: 0,
            pcr_count: 0,
            timing: TimingSource::Timestamps,
            warnings: Vec::new(),
            bitrate_bps,
        }
    }
}

/// Nanoseconds on the title timeline to ticks of a `clock_rate` clock,
/// rounded to nearest (exact for 90 kHz and the audio rates of whole-ms
/// frames), wrapping at 2^32 as RTP timestamps do.
pub fn rtp_ticks(ns: u64, clock_rate: u32) -> u32 {
    ((u128::from(ns) * u128::from(clock_rate) + 500_000_000) / 1_000_000_000) as u32
}

/// Ticks of a `timescale` clock (container timestamps) to nanoseconds, rounded.
pub fn ticks_to_ns(ticks: u64, timescale: u32) -> u64 {
    if timescale == 0 {
        return 0;
    }
    let ts = u128::from(timescale);
    ((u128::from(ticks) * 1_000_000_000 + ts / 2) / ts) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_round_trip_at_common_rates() {
        assert_eq!(rtp_ticks(1_000_000_000, 90_000), 90_000);
        assert_eq!(rtp_ticks(40_000_000, 90_000), 3600);
        assert_eq!(rtp_ticks(ticks_to_ns(1024, 48_000), 48_000), 1024);
        assert_eq!(rtp_ticks(ticks_to_ns(1001, 30_000), 90_000), 3003);
        // Wraps like an RTP timestamp.
        let day = 86_400_000_000_000u64;
        assert_eq!(
            rtp_ticks(day, 90_000),
            (day as u128 * 90_000 / 1_000_000_000) as u64 as u32
        );
    }

    #[test]
    fn a_record_describes_its_payload() {
        let r = PacketRecord::file_run(5, 6, 100, 50).with_prefix(&[1, 2, 3, 4]);
        assert_eq!(r.prefix(), &[1, 2, 3, 4]);
        assert_eq!(r.payload_len(), 54);
        assert_eq!(r.file_end(), 150);
        let split = PacketRecord {
            skip: 14,
            len2: 30,
            ..r
        };
        assert_eq!(split.offset2(), 164);
        assert_eq!(split.file_end(), 194);
        assert_eq!(split.payload_len(), 84);
    }
}

//! A fragmented MP4 still being written (a live recording), planned on
//! from where the plan of a shorter prefix of it stopped: only the
//! fragments after it are read, and their packets are what planning the
//! whole longer prefix would add to that plan's.
//!
//! What crosses a fragment boundary in a plan is small and carried in a
//! [`Resume`]: per track the decode time of a fragment without `tfdt`,
//! the last send time (send times never go back), the end of the last
//! presented sample, the latest sync point's time (kept sync points grow
//! in time) and the packet count (sync points index packets); for the
//! title, the sample bytes (its bitrate). The `moov` (codecs, timing,
//! warnings about it) is read again each time. A plan is resumed only
//! where nothing else could differ: the prefix planned ended on a whole
//! top-level box, no sample was dropped or cut and no fragment was
//! unreadable, in it or in what follows; and every track served now was
//! served then. Otherwise [`plan_on`] says no and the caller plans the
//! whole prefix (which says what is wrong, as for any file).

use super::{BoxRef, NS, Sample};
use crate::format::FormatError;
use crate::plan::MediaPlan;

/// What planning a track carries from one sample to the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Carry {
    /// Decode time of the next sample when its fragment gives none.
    pub next_dts: i64,
    pub last_send: u64,
    /// End of the last presented sample, ns.
    pub end_ns: u64,
    pub latest_sync: u64,
    /// Packets planned so far.
    pub packets: u64,
}

impl Carry {
    /// Before the first fragment, after the `moov`'s own `samples`.
    pub fn after(samples: &[Sample]) -> Carry {
        Carry {
            next_dts: samples
                .last()
                .map_or(0, |s| s.dts.saturating_add(i64::from(s.dur))),
            ..Carry::default()
        }
    }
}

/// Where the plan of a prefix of a fragmented MP4 stopped, for a plan of
/// a longer prefix to go on from ([`plan_on`]). A few numbers per track:
/// the packets stay in the plan's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    len: usize,
    moov: (usize, usize),
    /// Per audio or video track of the `moov`, in order: its carry if served.
    traks: Vec<Option<Carry>>,
    media_bytes: u64,
}

impl Resume {
    pub(super) fn new(
        len: usize,
        moov: BoxRef,
        traks: Vec<Option<Carry>>,
        media_bytes: u64,
    ) -> Self {
        Resume {
            len,
            moov: (moov.start, moov.end),
            traks,
            media_bytes,
        }
    }

    /// Bytes planned.
    pub fn bytes(&self) -> usize {
        self.len
    }

    /// Packets planned, per served track.
    pub fn packets(&self) -> impl Iterator<Item = u64> + '_ {
        self.traks.iter().flatten().map(|c| c.packets)
    }

    pub(super) fn moov(&self) -> BoxRef {
        BoxRef {
            kind: *b"moov",
            start: self.moov.0,
            end: self.moov.1,
        }
    }

    /// The `k`th audio or video track's carry, `None` if not served.
    pub(super) fn track(&self, k: usize) -> Option<Carry> {
        self.traks.get(k).copied().flatten()
    }

    pub(super) fn media_bytes(&self) -> u64 {
        self.media_bytes
    }
}

/// The plan of the whole of `data` (as [`super::plan`]) and where it
/// stopped, if a plan of a longer prefix may go on from there.
pub fn plan_whole(data: &[u8]) -> Result<(MediaPlan, Option<Resume>), FormatError> {
    super::plan_whole(data, &mut |_, _| {})
}

/// What planning `data`, a longer prefix of the file `from` was planned
/// from, adds: a plan whose tracks hold the packets and sync points after
/// `from`'s (sync points numbered from the track's first packet), its
/// duration, report and warnings the whole prefix's; and where it
/// stopped. `None`: it cannot be planned on from there (see the module
/// doc); plan the whole prefix instead.
pub fn plan_on(data: &[u8], from: &Resume) -> Option<(MediaPlan, Resume)> {
    if from.len > data.len() || from.moov.1 > from.len {
        return None;
    }
    match super::plan_from(data, Some(from), &mut |_, _| {}) {
        Ok(Some((plan, Some(resume)))) => Some((plan, resume)),
        _ => None,
    }
}

/// A title's bitrate from its sample bytes and duration.
pub(super) fn bitrate(media_bytes: u64, duration_ns: u64) -> u64 {
    if duration_ns > 0 {
        (u128::from(media_bytes) * 8 * NS as u128 / u128::from(duration_ns)) as u64
    } else {
        0
    }
}

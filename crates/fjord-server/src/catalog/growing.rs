//! Live recordings still being written (`docs/live.md#recording`), as
//! titles: the recording's thread says how much of its file is durable
//! (whole fragments, synced) after each fragment; the catalog opens such a
//! title as a snapshot of that prefix (`fjord_media::ingest::snapshot`),
//! made again when a request comes and the file has grown since (planned
//! on from the snapshot before when it can be: a fragmented MP4's), at
//! most once per [`SNAPSHOT_DUTY`] times what the last took. Sessions
//! keep the snapshot they started with. When the recording ends it is
//! forgotten here, and the next open ingests the whole file as any title's.
//!
//! A recording that ended while the server ran keeps its HLS playlist an
//! EVENT one ([`Growing::ended_here`]): players that followed it as it
//! grew may only see lines appended (RFC 8216 §6.2.1).
//!
//! `PATH/latest.mp4` names the newest MP4 recording of the stream at
//! `PATH` (growing or whole), `PATH/latest.ts` its newest MPEG-TS one
//! (the alias's extension is its file's, so the name says the format), for
//! viewers who know the stream's path but not when its recording began:
//! the newest since the server started, else the newest file in `PATH`
//! named as recordings are ([`newest`]).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The extensions of recordings: `PATH/latest.EXT` stands for the
/// stream's newest recording of each.
const RECORDED: [&str; 2] = ["mp4", "ts"];

/// How many ended recordings are remembered as such, newest kept: a
/// player follows a growing playlist to its end, not for days after.
const ENDED_KEPT: usize = 1024;

#[derive(Default)]
pub struct Growing {
    state: Mutex<State>,
    /// Snapshots made: planned on from the one before, or whole.
    incremental: AtomicU64,
    whole: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The recordings being written, by title: the bytes of each file
    /// that are durable (0: no whole fragment yet).
    durable: HashMap<String, u64>,
    /// The newest recording's title, by `PATH/latest.EXT`.
    latest: HashMap<String, String>,
    /// Recordings that ended, oldest first, at most [`ENDED_KEPT`].
    ended: VecDeque<String>,
}

impl Growing {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The recording of `title` (`PATH/STAMP.EXT`) begins: it is no title
    /// until a run of it is durable; it is `PATH`'s newest of its format.
    pub fn began(&self, title: &str) {
        let mut state = self.lock();
        state.durable.insert(title.to_owned(), 0);
        if let Some(alias) = alias_of(title) {
            state.latest.insert(alias, title.to_owned());
        }
    }

    /// The newest file of the recording whose first file is `title`: a
    /// recording longer than `live_record_max_s` goes on in new files.
    pub fn newest_file(&self, title: &str) -> String {
        let latest = alias_of(title).and_then(|a| self.latest(&a));
        latest.unwrap_or_else(|| title.to_owned())
    }

    /// Its first `durable` bytes are whole runs (fragments, TS packets),
    /// synced.
    pub fn grew(&self, title: &str, durable: u64) {
        if let Some(d) = self.lock().durable.get_mut(title) {
            *d = durable.max(*d);
        }
    }

    /// The recording ended: `title` is a title as any other.
    pub fn ended(&self, title: &str) {
        let mut state = self.lock();
        if state.durable.remove(title).is_some() {
            if state.ended.len() == ENDED_KEPT {
                state.ended.pop_front();
            }
            state.ended.push_back(title.to_owned());
        }
    }

    /// `title` is a recording that grew and ended while this server ran
    /// (one of the last [`ENDED_KEPT`]).
    pub fn ended_here(&self, title: &str) -> bool {
        let state = self.lock();
        let title = state.named(title);
        state.ended.iter().any(|t| t == title)
    }

    /// How much of `title` (or the recording a `latest.EXT` names) is
    /// durable, if it is a recording still being written.
    pub fn durable(&self, title: &str) -> Option<u64> {
        let state = self.lock();
        state.durable.get(state.named(title)).copied()
    }

    /// The title `name` stands for, when it is a `PATH/latest.EXT` of a
    /// stream recorded since the server started.
    pub fn latest(&self, name: &str) -> Option<String> {
        self.lock().latest.get(name).cloned()
    }

    /// A snapshot was made, `incremental`ly (planned on from the one
    /// before) or whole.
    pub fn made(&self, incremental: bool) {
        let n = if incremental {
            &self.incremental
        } else {
            &self.whole
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// Snapshots made since the start: (incrementally, whole).
    pub fn snapshots(&self) -> (u64, u64) {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (n(&self.incremental), n(&self.whole))
    }
}

impl State {
    /// The recording `name` stands for: itself, or the one a
    /// `latest.EXT` names.
    fn named<'a>(&'a self, name: &'a str) -> &'a str {
        self.latest.get(name).map_or(name, String::as_str)
    }
}

/// `PATH/latest.EXT` of a recording's file `PATH/STAMP.EXT`.
fn alias_of(title: &str) -> Option<String> {
    let (path, name) = title.rsplit_once('/')?;
    let (_, ext) = name
        .rsplit_once('.')
        .filter(|(_, e)| RECORDED.contains(e))?;
    Some(format!("{path}/latest.{ext}"))
}

/// The stream's path and the extension when `name` is an alias,
/// `PATH/latest.EXT` of a recorded extension.
pub fn alias(name: &str) -> Option<(&str, &str)> {
    let (path, file) = name.rsplit_once('/')?;
    let ext = file.strip_prefix("latest.")?;
    RECORDED.contains(&ext).then_some((path, ext))
}

/// The newest of `names` that is named as a recording of extension `ext`
/// is (its UTC start, `YYYY-MM-DDTHH-MM-SSZ.EXT`, so the newest sorts
/// last).
pub fn newest(names: impl Iterator<Item = String>, ext: &str) -> Option<String> {
    names.filter(|n| is_recording(n, ext)).max()
}

fn is_recording(name: &str, ext: &str) -> bool {
    (name.strip_suffix(ext).and_then(|n| n.strip_suffix("Z."))).is_some_and(is_stamp)
}

/// Whether `stamp` is a recording's start as its name writes it:
/// `YYYY-MM-DDTHH-MM-SS` (UTC).
fn is_stamp(stamp: &str) -> bool {
    let b = stamp.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 19
        && (b[4], b[7], b[10], b[13], b[16]) == (b'-', b'-', b'T', b'-', b'-')
        && [0..4, 5..7, 8..10, 11..13, 14..16, 17..19]
            .into_iter()
            .all(digits)
}

/// When the recording `title` (`PATH/STAMP.EXT` or `PATH/STAMP-N.EXT`)
/// began, to the second, in RFC 3339 (`2026-11-29T18:51:45Z`): its name
/// says it.
pub fn started_at(title: &str) -> Option<String> {
    let name = title.rsplit('/').next()?;
    let (stamp, rest) = (name.get(..19)?, name.get(19..)?);
    if !is_stamp(stamp) || !(rest.starts_with("Z.") || rest.starts_with("Z-")) {
        return None;
    }
    let (date, time) = stamp.split_at(10);
    Some(format!("{date}{}Z", time.replace('-', ":")))
}

/// What an open of a growing title does.
#[derive(Debug, PartialEq, Eq)]
pub enum Open {
    /// Nothing to serve yet: no whole run.
    NotYet,
    /// The snapshot loaded holds all that is durable: it is served.
    Loaded,
    /// A snapshot of the first `.0` bytes is made (none is loaded, or the
    /// one loaded holds less).
    Snapshot(u64),
}

/// A snapshot is made again at most once per this many times what the
/// last one took, so its viewers keep at most a twentieth of a core per
/// recording planning. A snapshot is planned on from the one before
/// (`fjord_media::mp4::growing`, `fjord_media::ts::growing`), so it costs
/// what the new fragments or TS packets and copying the index cost (some
/// 50 ms at an hour of 5 Mbit/s): its viewers see it about a fragment
/// behind. One planned whole (the first, or one a fault stops from being
/// planned on) costs what the whole prefix does (some 0.35-0.65 s an hour),
/// and holds back the next accordingly, unless that one is planned on
/// from it ([`Made::planned_on`]).
const SNAPSHOT_DUTY: u32 = 20;

/// When the snapshot loaded was made and what making it took.
#[derive(Clone, Copy, Debug)]
pub struct Made {
    pub at: Instant,
    pub took: Duration,
    /// It was planned whole and the next is planned on from it: that one
    /// costs a fraction of it and is not held back by it (so planning
    /// takes at most twice the duty's share, once, after a whole plan).
    pub planned_on: bool,
}

/// What to do at `now` for a request of a recording `durable` bytes of
/// which are durable, when a snapshot of `loaded.0` bytes is loaded
/// (`None`: none).
pub fn open(durable: u64, loaded: Option<(u64, Made)>, now: Instant) -> Open {
    match loaded {
        _ if durable == 0 => Open::NotYet,
        Some((len, _)) if len >= durable => Open::Loaded,
        Some((_, m)) if !m.planned_on && now < m.at + m.took * SNAPSHOT_DUTY => Open::Loaded,
        _ => Open::Snapshot(durable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_is_a_title_from_its_first_durable_fragment_to_its_end() {
        let g = Growing::default();
        assert_eq!(g.durable("live/a/x.mp4"), None);
        g.began("live/a/x.mp4");
        assert_eq!(g.durable("live/a/x.mp4"), Some(0));
        assert_eq!(open(0, None, Instant::now()), Open::NotYet);
        g.grew("live/a/x.mp4", 1000);
        // Never back: a late report of a shorter length changes nothing.
        g.grew("live/a/x.mp4", 600);
        assert_eq!(g.durable("live/a/x.mp4"), Some(1000));
        // Another title's recording is its own.
        g.grew("live/b/y.mp4", 5);
        assert_eq!(g.durable("live/b/y.mp4"), None);
        assert!(!g.ended_here("live/a/x.mp4"));
        g.ended("live/a/x.mp4");
        assert_eq!(g.durable("live/a/x.mp4"), None);
        assert!(g.ended_here("live/a/x.mp4"));
        // Only what began here ends here.
        g.ended("live/b/y.mp4");
        assert!(!g.ended_here("live/b/y.mp4"));
    }

    #[test]
    fn ended_recordings_are_remembered_up_to_a_bound_newest_kept() {
        let g = Growing::default();
        for i in 0..=ENDED_KEPT {
            let t = format!("live/a/{i}.mp4");
            g.began(&t);
            g.ended(&t);
        }
        assert!(!g.ended_here("live/a/0.mp4"));
        assert!(g.ended_here("live/a/1.mp4"));
        assert!(g.ended_here(&format!("live/a/{ENDED_KEPT}.mp4")));
    }

    #[test]
    fn latest_names_a_paths_newest_recording_growing_or_whole() {
        let g = Growing::default();
        assert_eq!(g.latest("live/a/latest.mp4"), None);
        g.began("live/a/2026-11-29T01-00-00Z.mp4");
        let latest = g.latest("live/a/latest.mp4");
        assert_eq!(latest.as_deref(), Some("live/a/2026-11-29T01-00-00Z.mp4"));
        g.grew("live/a/2026-11-29T01-00-00Z.mp4", 700);
        assert_eq!(g.durable("live/a/latest.mp4"), Some(700));
        g.ended("live/a/2026-11-29T01-00-00Z.mp4");
        assert_eq!(g.latest("live/a/latest.mp4"), latest);
        assert!(g.ended_here("live/a/latest.mp4"));
        g.began("live/a/2026-11-29T02-00-00Z.mp4");
        let latest = g.latest("live/a/latest.mp4");
        assert_eq!(latest.as_deref(), Some("live/a/2026-11-29T02-00-00Z.mp4"));
        // Only the path's own.
        assert_eq!(g.latest("live/latest.mp4"), None);
        assert_eq!(g.latest("live/a/2026-11-29T01-00-00Z.mp4"), None);
        // An MPEG-TS recording is `latest.ts`; `latest.mp4` stays the MP4.
        g.began("live/a/2026-11-29T03-00-00Z.ts");
        let ts = g.latest("live/a/latest.ts");
        assert_eq!(ts.as_deref(), Some("live/a/2026-11-29T03-00-00Z.ts"));
        assert_eq!(g.latest("live/a/latest.mp4"), latest);
        assert_eq!(g.durable("live/a/latest.ts"), Some(0));
        assert_eq!(alias("live/a/latest.ts"), Some(("live/a", "ts")));
        assert_eq!(alias("live/a/latest.mkv"), None);
        assert_eq!(alias("latest.mp4"), None);
    }

    #[test]
    fn the_newest_file_named_as_a_recording_is_the_latest() {
        let names = [
            "2026-11-29T01-00-00Z.mp4",
            "2026-11-30T00-59-59Z.mp4",
            "2026-11-29T23-00-00Z.mp4",
            // Not recordings: another name, a later one of another shape.
            "zzz.mp4",
            "2026-12-01T00-00-00Z.mkv",
            "2026-12-01T00-00-00.mp4",
            "2026-12-0xT00-00-00Z.mp4",
        ];
        let latest = newest(names.iter().map(|n| n.to_string()), "mp4");
        assert_eq!(latest.as_deref(), Some("2026-11-30T00-59-59Z.mp4"));
        assert_eq!(newest(["a.mp4".to_string()].into_iter(), "mp4"), None);
        // Each format's own: the newest .ts is older here.
        let names = names.iter().map(|n| n.to_string());
        let ts = ["2026-11-28T00-00-00Z.ts".to_string(), "x.ts".to_string()];
        let latest = newest(names.chain(ts), "ts");
        assert_eq!(latest.as_deref(), Some("2026-11-28T00-00-00Z.ts"));
    }

    #[test]
    fn a_recordings_name_says_when_it_began() {
        let at = |t| started_at(t);
        assert_eq!(
            at("live/a/2026-11-29T18-51-45Z.mp4").as_deref(),
            Some("2026-11-29T18:51:45Z")
        );
        assert_eq!(
            at("2026-11-29T18-51-45Z-2.ts").as_deref(),
            Some("2026-11-29T18:51:45Z")
        );
        for other in [
            "live/a/latest.mp4",
            "2026-11-29T18-51-45.mp4",
            "2026-11-29x18-51-45Z.mp4",
        ] {
            assert_eq!(at(other), None, "{other}");
        }
    }

    #[test]
    fn a_snapshot_is_made_again_only_when_the_file_grew() {
        let t0 = Instant::now();
        let made = Made {
            at: t0,
            took: Duration::from_millis(20),
            planned_on: false,
        };
        assert_eq!(open(1000, None, t0), Open::Snapshot(1000));
        let later = t0 + Duration::from_secs(1);
        assert_eq!(open(1000, Some((1000, made)), later), Open::Loaded);
        assert_eq!(open(2500, Some((1000, made)), later), Open::Snapshot(2500));
    }

    #[test]
    fn a_costly_snapshot_is_made_again_only_after_twenty_times_its_cost() {
        let t0 = Instant::now();
        let made = Made {
            at: t0,
            took: Duration::from_millis(700),
            planned_on: false,
        };
        let loaded = Some((1000, made));
        let soon = t0 + Duration::from_secs(13);
        assert_eq!(open(2500, loaded, soon), Open::Loaded, "the old one served");
        let late = t0 + Duration::from_secs(14);
        assert_eq!(open(2500, loaded, late), Open::Snapshot(2500));
        assert_eq!(open(0, loaded, late), Open::NotYet);
        // Planned whole, and the next planned on from it: made at once.
        let whole = Made {
            planned_on: true,
            ..made
        };
        let next = t0 + Duration::from_millis(800);
        let loaded = Some((1000, whole));
        assert_eq!(open(2500, loaded, next), Open::Snapshot(2500));
        assert_eq!(open(1000, loaded, next), Open::Loaded);
    }
}

//! A live stream recorded as a title (`docs/live.md#recording`): where
//! `live_record` globs match the path, the stream's packets are also
//! handed, by reference, to a thread of the recording's own that makes
//! the file (`fjord_live::record`: a fragmented MP4, or the MPEG-TS of an
//! MP2T track) and writes it in the first media root,
//! `PATH/YYYY-MM-DDTHH-MM-SSZ.mp4` (or `.ts`) by its UTC start, synced as
//! each run of it (a fragment, a second of TS packets) completes. The
//! intake never waits for the disk: the queue between them is bounded,
//! and a recording that falls behind it is stopped (an error in the log,
//! `fjord_live_recordings{outcome="stopped"}`), the file whole up to its
//! last run. While it is written, the catalog is told after each run how
//! much of the file is durable, and serves that much as a title
//! (`crate::catalog::growing`). When the stream ends the file is closed
//! and opened as a title (ingested: index, parity, packets), so viewers
//! can play it whole at once.

use std::{
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Weak, mpsc},
    time::{Duration, Instant, SystemTime},
};

use fjord_engine::LivePacket;
use fjord_live::{
    record::{self, Record, RecordLimits},
    sdp::Track,
};

use crate::{
    Server,
    metrics::{Metrics, Recording as Outcome},
};

/// Packets waiting for the recording's thread; past it the recording
/// stops (at 1,500 bytes a packet, 12 MiB: seconds of a 20 Mbit/s
/// stream for a disk that stalls).
pub(super) const QUEUE: usize = 8192;

/// What the recording's thread is handed: a packet of a track, or the
/// place where the next publisher continues the stream.
enum Input {
    /// Track, whether it starts a key frame, the packet.
    Packet(usize, bool, LivePacket),
    NextPublisher,
}

/// The intake's end of a recording.
pub(super) struct Recording {
    /// `None` once the recording stopped; dropped, it ends the recording.
    tx: Option<mpsc::SyncSender<Input>>,
    pub(super) title: String,
}

impl Recording {
    /// Hands a packet of track `track` to the recording, never waiting;
    /// `key`: it starts a key frame (the intake's [`fjord_live::keyframe::starts_key`]).
    pub(super) fn packet(
        &mut self,
        metrics: &Metrics,
        (track, key): (usize, bool),
        packet: &LivePacket,
    ) {
        self.send(metrics, Input::Packet(track, key, packet.clone()));
    }

    /// A publisher continues the stream: the recording goes on in the
    /// same file (an MP4's from its next key frame: `Record::next_publisher`).
    pub(super) fn next_publisher(&mut self, metrics: &Metrics) {
        self.send(metrics, Input::NextPublisher);
    }

    fn send(&mut self, metrics: &Metrics, input: Input) {
        let Some(tx) = &self.tx else { return };
        if let Err(e) = tx.try_send(input) {
            if matches!(e, mpsc::TrySendError::Full(_)) {
                tracing::error!(
                    title = self.title,
                    "live recording stopped: the disk did not keep up ({QUEUE} packets waiting)"
                );
                metrics.recording(Outcome::Stopped);
            }
            self.tx = None;
        }
    }

    pub(super) fn stopped(&self) -> bool {
        self.tx.is_none()
    }
}

/// Starts recording the stream at `path` of `tracks` when `live_record`
/// says so; `None` when it does not, or it cannot (logged).
pub(super) fn start(server: &Server, path: &str, tracks: &[Track]) -> Option<Recording> {
    let config = server.config();
    if !config.records(path) {
        return None;
    }
    let (_, left_out) = match record::recorder(tracks, RecordLimits::default()) {
        Ok(r) => r,
        Err(why) => {
            tracing::warn!(path, "live stream not recorded: {why}");
            return None;
        }
    };
    for why in left_out {
        tracing::warn!(path, "{why}");
    }
    let root = server.catalog.roots().into_iter().next()?;
    let plan = Plan {
        root,
        path: path.to_owned(),
        tracks: tracks.to_vec(),
        max: (config.live_record_max_s > 0).then(|| Duration::from_secs(config.live_record_max_s)),
    };
    let file = match Part::begin(server, &plan) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(path, "live stream not recorded: {e}");
            server.metrics.recording(Outcome::Failed);
            return None;
        }
    };
    let title = file.title.clone();
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    let weak = server.live.server.get().cloned().unwrap_or_default();
    let rt = tokio::runtime::Handle::try_current().ok();
    let spawned = std::thread::Builder::new()
        .name("fjord-record".to_owned())
        .spawn(move || run(rx, plan, file, (weak, rt)));
    if let Err(e) = spawned {
        server.catalog.growing().ended(&title);
        tracing::error!(path, "live stream not recorded: {e}");
        return None;
    }
    tracing::info!(path, title, "live stream recorded");
    Some(Recording {
        tx: Some(tx),
        title,
    })
}

/// What each file of a recording is made of: where, of which tracks, and
/// for how long at most (`live_record_max_s`).
struct Plan {
    root: PathBuf,
    path: String,
    tracks: Vec<Track>,
    max: Option<Duration>,
}

/// One file of a recording being written.
struct Part {
    recorder: Box<dyn Record>,
    file: File,
    title: String,
    began: Instant,
    failed: Option<std::io::Error>,
}

impl Part {
    /// A new file of the recording, its head written, told to the catalog.
    fn begin(server: &Server, plan: &Plan) -> Result<Part, String> {
        let (recorder, _) = record::recorder(&plan.tracks, RecordLimits::default())?;
        let (mut file, title) =
            create(&plan.root, &plan.path, recorder.extension()).map_err(|e| e.to_string())?;
        let mut out = recorder.init();
        let failed = write(&mut file, &mut out).err();
        server.catalog.growing().began(&title);
        Ok(Part {
            recorder,
            file,
            title,
            began: Instant::now(),
            failed,
        })
    }
}

/// Whether a recording's file that began `age` ago ends before this
/// packet (of track `track`; `key`: it starts a key frame) and the next
/// one begins with it: past `max`, at a key frame of the first video
/// track (at any packet without video), so each file starts where a
/// decoder can.
fn ends_before(
    age: Duration,
    max: Option<Duration>,
    tracks: &[Track],
    (track, key): (usize, bool),
) -> bool {
    max.is_some_and(|max| age >= max)
        && match tracks.iter().position(|t| t.codec.is_video()) {
            Some(k) => k == track && key,
            None => true,
        }
}

/// The file of a recording starting now: `root/PATH/STAMP.EXT`, a
/// suffix added if a recording of the same second exists; and its title.
fn create(root: &Path, path: &str, ext: &str) -> std::io::Result<(File, String)> {
    let dir = root.join(path);
    std::fs::create_dir_all(&dir)?;
    // RFC 3339 with `-` for `:`, which some filesystems and URLs mind.
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(':', "-");
    for n in 0..100 {
        let name = match n {
            0 => format!("{stamp}.{ext}"),
            n => format!("{stamp}-{n}.{ext}"),
        };
        let at: PathBuf = dir.join(&name);
        match File::options().write(true).create_new(true).open(&at) {
            Ok(f) => return Ok((f, format!("{path}/{name}"))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("100 recordings of this second exist"))
}

type Ingest = (Weak<Server>, Option<tokio::runtime::Handle>);

/// The recording's thread: packets in, runs (fragments, TS packets)
/// written and synced, each told to the catalog; a file past
/// `live_record_max_s` ends at the next key frame, which begins the next
/// file. When the intake's end is dropped (the stream ended, or the
/// recording stopped), the last run, then each file is ingested whole.
fn run(rx: mpsc::Receiver<Input>, plan: Plan, mut file: Part, (server, rt): Ingest) {
    let mut out = Vec::new();
    while let Ok(input) = rx.recv() {
        if file.failed.is_some() {
            continue;
        }
        match input {
            Input::Packet(track, key, packet) => {
                if ends_before(file.began.elapsed(), plan.max, &plan.tracks, (track, key)) {
                    let Some(s) = server.upgrade() else { return };
                    match Part::begin(&s, &plan) {
                        Ok(next) => close(std::mem::replace(&mut file, next), &s, rt.as_ref()),
                        Err(e) => tracing::error!(plan.path, "live recording not split: {e}"),
                    }
                }
                file.recorder.push(track, &packet, &mut out);
            }
            Input::NextPublisher => file.recorder.next_publisher(),
        }
        if !out.is_empty() {
            file.failed = write(&mut file.file, &mut out).err();
            if file.failed.is_none() && file.recorder.cuts() > 0 {
                grew(&server, &file);
            }
        }
    }
    if let Some(s) = server.upgrade() {
        close(file, &s, rt.as_ref());
    }
}

/// Ends a file of the recording: its last run written, then ingested as
/// a title.
fn close(mut f: Part, server: &Arc<Server>, rt: Option<&tokio::runtime::Handle>) {
    let mut out = Vec::new();
    f.recorder.finish(&mut out);
    if f.failed.is_none() {
        f.failed = write(&mut f.file, &mut out).err();
    }
    let counts = f.recorder.counts();
    server.catalog.growing().ended(&f.title);
    if let Some(e) = f.failed {
        tracing::error!(title = f.title, "live recording failed: {e}");
        server.metrics.recording(Outcome::Failed);
        return;
    }
    tracing::info!(
        title = f.title,
        runs = f.recorder.cuts(),
        frames = counts.frames,
        dropped = counts.dropped,
        "live recording closed"
    );
    server.metrics.recording(Outcome::Done);
    ingest(server.clone(), f.title, rt.cloned());
}

/// Tells the catalog the file's length: all of it is whole runs (MP4
/// fragments, TS packets), synced (`write` returned).
fn grew(server: &Weak<Server>, f: &Part) {
    let (Some(server), Ok(meta)) = (server.upgrade(), f.file.metadata()) else {
        return;
    };
    server.catalog.growing().grew(&f.title, meta.len());
}

/// Appends `out` to the file and syncs it: what a crash leaves is whole
/// up to the last run written.
fn write(file: &mut File, out: &mut Vec<u8>) -> std::io::Result<()> {
    file.write_all(out)?;
    out.clear();
    file.sync_data()
}

/// Opens the closed recording as a title: ingested now, not by its first
/// viewer.
fn ingest(server: Arc<Server>, title: String, rt: Option<tokio::runtime::Handle>) {
    let Some(rt) = rt else { return };
    rt.spawn(async move {
        if let Err(e) = server.catalog.open(&title).await {
            tracing::error!(title, "live recording not ingested: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_the_disk_does_not_keep_up_with_stops_and_the_intake_goes_on() {
        let (tx, rx) = mpsc::sync_channel(2);
        let mut r = Recording {
            tx: Some(tx),
            title: "live/a/x.mp4".to_owned(),
        };
        let metrics = Metrics::default();
        let packet: LivePacket = Arc::from(&[0x80u8, 96, 0, 0][..]);
        r.packet(&metrics, (0, false), &packet);
        r.packet(&metrics, (0, false), &packet);
        assert!(!r.stopped());
        // The queue is full: the packet is not waited for, the recording stops.
        r.packet(&metrics, (0, false), &packet);
        assert!(r.stopped());
        r.packet(&metrics, (0, false), &packet);
        // The writer gets what was queued, then the end.
        assert_eq!(rx.try_iter().count(), 2);
        r.next_publisher(&metrics);
        assert!(rx.recv().is_err());
        // The packets are the intake's, by reference.
        assert_eq!(Arc::strong_count(&packet), 1);
    }

    #[test]
    fn a_file_ends_past_its_length_at_a_key_frame_of_the_video() {
        let sdp = b"v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
            m=audio 0 RTP/AVP 97\r\na=rtpmap:97 OPUS/48000/2\r\n\
            m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n";
        let limits = fjord_live::Limits::default();
        let tracks = fjord_live::sdp::parse(sdp, &limits).unwrap().tracks;
        let max = Some(Duration::from_secs(60));
        let (young, old) = (Duration::from_secs(59), Duration::from_secs(60));
        assert!(ends_before(old, max, &tracks, (1, true)));
        assert!(!ends_before(young, max, &tracks, (1, true)), "not yet");
        assert!(
            !ends_before(old, max, &tracks, (1, false)),
            "not a key frame"
        );
        assert!(!ends_before(old, max, &tracks, (0, true)), "the audio's");
        assert!(
            !ends_before(old, None, &tracks, (1, true)),
            "one file a stream"
        );
        // Audio alone: at any packet.
        assert!(ends_before(old, max, &tracks[..1], (0, false)));
    }

    #[test]
    fn a_recordings_file_is_named_by_its_start_and_never_overwritten() {
        let root = tempfile::tempdir().unwrap();
        let (_, a) = create(root.path(), "live/cam1", "mp4").unwrap();
        let (_, b) = create(root.path(), "live/cam1", "mp4").unwrap();
        let (_, c) = create(root.path(), "live/cam1", "ts").unwrap();
        assert!(a.starts_with("live/cam1/20") && a.ends_with("Z.mp4"), "{a}");
        assert!(c.starts_with("live/cam1/20") && c.ends_with("Z.ts"), "{c}");
        assert_ne!(a, b);
        assert!(root.path().join(&a).is_file() && root.path().join(&b).is_file());
    }
}

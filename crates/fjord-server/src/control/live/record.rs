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
    time::SystemTime,
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
    Packet(usize, LivePacket),
    NextPublisher,
}

/// The intake's end of a recording.
pub(super) struct Recording {
    /// `None` once the recording stopped; dropped, it ends the recording.
    tx: Option<mpsc::SyncSender<Input>>,
    pub(super) title: String,
}

impl Recording {
    /// Hands a packet of track `track` to the recording, never waiting.
    pub(super) fn packet(&mut self, metrics: &Metrics, track: usize, packet: &LivePacket) {
        self.send(metrics, Input::Packet(track, packet.clone()));
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
    let (recorder, left_out) = match record::recorder(tracks, RecordLimits::default()) {
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
    let (file, title) = match create(&root, path, recorder.extension()) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(path, "live stream not recorded: {e}");
            server.metrics.recording(Outcome::Failed);
            return None;
        }
    };
    server.catalog.growing().began(&title);
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    let weak = server.live.server.get().cloned().unwrap_or_default();
    let rt = tokio::runtime::Handle::try_current().ok();
    let name = title.clone();
    let spawned = std::thread::Builder::new()
        .name("fjord-record".to_owned())
        .spawn(move || run(rx, recorder, file, (name, weak, rt)));
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

type Ingest = (String, Weak<Server>, Option<tokio::runtime::Handle>);

/// The recording's thread: packets in, runs (fragments, TS packets)
/// written and synced, each told to the catalog; when the intake's end is
/// dropped (the stream ended, or the recording stopped), the last run,
/// then the title is ingested whole.
fn run(
    rx: mpsc::Receiver<Input>,
    mut recorder: Box<dyn Record>,
    mut file: File,
    (title, server, rt): Ingest,
) {
    let mut out = recorder.init();
    let mut failed = write(&mut file, &mut out).err();
    while let Ok(input) = rx.recv() {
        if failed.is_some() {
            continue;
        }
        match input {
            Input::Packet(track, packet) => recorder.push(track, &packet, &mut out),
            Input::NextPublisher => recorder.next_publisher(),
        }
        if !out.is_empty() {
            failed = write(&mut file, &mut out).err();
            if failed.is_none() && recorder.cuts() > 0 {
                grew(&server, &title, &file);
            }
        }
    }
    recorder.finish(&mut out);
    if failed.is_none() {
        failed = write(&mut file, &mut out).err();
    }
    drop(file);
    let counts = recorder.counts();
    let Some(server) = server.upgrade() else {
        return;
    };
    server.catalog.growing().ended(&title);
    if let Some(e) = failed {
        tracing::error!(title, "live recording failed: {e}");
        server.metrics.recording(Outcome::Failed);
        return;
    }
    tracing::info!(
        title,
        runs = recorder.cuts(),
        frames = counts.frames,
        dropped = counts.dropped,
        "live recording closed"
    );
    server.metrics.recording(Outcome::Done);
    ingest(server, title, rt);
}

/// Tells the catalog the file's length: all of it is whole runs (MP4
/// fragments, TS packets), synced (`write` returned).
fn grew(server: &Weak<Server>, title: &str, file: &File) {
    let (Some(server), Ok(meta)) = (server.upgrade(), file.metadata()) else {
        return;
    };
    server.catalog.growing().grew(title, meta.len());
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
        r.packet(&metrics, 0, &packet);
        r.packet(&metrics, 0, &packet);
        assert!(!r.stopped());
        // The queue is full: the packet is not waited for, the recording stops.
        r.packet(&metrics, 0, &packet);
        assert!(r.stopped());
        r.packet(&metrics, 0, &packet);
        // The writer gets what was queued, then the end.
        assert_eq!(rx.try_iter().count(), 2);
        r.next_publisher(&metrics);
        assert!(rx.recv().is_err());
        // The packets are the intake's, by reference.
        assert_eq!(Arc::strong_count(&packet), 1);
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

//! The live streams as the admin API shows them (`GET /api/v1/live`):
//! each path, whether its publisher is there or it is held, its viewers,
//! and per track the packets received, lost on the way in and refused.

use serde::Serialize;

use crate::Server;

#[derive(Serialize)]
pub(crate) struct StreamView {
    path: String,
    /// No publisher now: held for the next within `live_grace_s`.
    held: bool,
    viewers: usize,
    /// Packets refused (malformed, too large, of an unknown channel).
    refused: u64,
    /// The title it is recorded as now (`live_record`; a recording
    /// longer than `live_record_max_s` goes on in new files), if it is.
    recording: Option<String>,
    /// The recording stopped before the stream (the disk fell behind).
    recording_stopped: bool,
    tracks: Vec<TrackView>,
}

#[derive(Serialize)]
pub(crate) struct TrackView {
    codec: String,
    received: u64,
    lost: u64,
}

/// Every live stream now, by path.
pub(crate) fn streams(server: &Server) -> Vec<StreamView> {
    let growing = server.catalog.growing();
    let state = server.live.lock();
    let mut views: Vec<StreamView> = (state.streams.iter())
        .map(|(id, s)| StreamView {
            path: s.path.clone(),
            held: s.held.is_some(),
            viewers: state.viewers.values().filter(|v| v.stream == *id).count(),
            refused: s.refused,
            recording: (s.recording.as_ref()).map(|r| growing.newest_file(&r.title)),
            recording_stopped: s.recording.as_ref().is_some_and(|r| r.stopped()),
            tracks: (s.tracks.iter())
                .map(|t| TrackView {
                    codec: format!("{:?}", t.codec),
                    received: t.loss.received(),
                    lost: t.loss.lost(),
                })
                .collect(),
        })
        .collect();
    views.sort_by(|a, b| a.path.cmp(&b.path));
    views
}

//! The storage layer as a session sees it: the session registers its
//! read-ahead, tells it where it stands and how fast it moves, and asks how
//! many of its next packets are resident (a few atomic loads). An engine
//! thread never waits for a disk: a packet not resident yet is looked at
//! again shortly.

use std::time::Instant;

use fjord_storage::{Mode, Storage, Uses};

use super::{
    Session, State,
    pacing::{NOT_READY_RETRY, Pacing},
};
use crate::{clock::Clock, lateness::Hold};

impl Session {
    /// Has the storage layer read ahead of this session; `prefab_path`:
    /// the engine's data path sends prefabricated packets.
    pub(crate) fn attach_storage(&mut self, storage: &Storage, prefab_path: bool) {
        match storage.register(self.title.clone(), self.track, self.uses(prefab_path)) {
            Ok(r) => self.readahead = Some(r),
            Err(e) => tracing::warn!("no read-ahead for a session: {e}"),
        }
    }

    /// The files this session reads when the data path sends prefabricated
    /// packets (`prefab_path`) or not.
    pub(super) fn uses(&self, prefab_path: bool) -> Uses {
        let packets = if self.prefab && (prefab_path || self.is_interleaved()) {
            Uses::PREFAB
        } else {
            Uses::MEDIA
        };
        let parity = match &self.repair {
            Some(r) if r.live.is_none() => Uses::PARITY,
            _ => Uses(0),
        };
        Uses::INDEX | packets | parity
    }

    /// The data path changed: read ahead what the session now sends.
    pub(crate) fn set_prefab_path(&self, prefab_path: bool) {
        let uses = self.uses(prefab_path);
        if let Some(r) = &self.readahead {
            r.set_uses(uses);
        }
    }

    /// How many packets from the next one are resident.
    pub(super) fn ready(&self) -> u32 {
        self.readahead
            .as_ref()
            .map_or(u32::MAX, |r| r.cursor().ready_from(self.next))
    }

    /// The next packet is not resident yet: look again shortly. Before the
    /// first packet of a PLAY the session's clock slips with the wait: the
    /// stream starts late rather than in a burst of packets already due.
    /// Elsewhere a wait makes late packets, and counts them.
    pub(super) fn not_ready(&mut self, p: &mut Pacing) -> Option<Instant> {
        p.stats.not_ready += 1;
        self.hold = Some(Hold::Storage);
        let retry = p.now + NOT_READY_RETRY;
        if self.starting {
            self.start_waits += 1;
        } else {
            self.log_storage_wait();
        }
        if self.starting
            && let State::Playing(c) = self.state
        {
            // The first packet is due at t0 (its record is not read: its
            // index page may be what the disk is reading). A clock that
            // starts later (a multicast group's batching window, a loop's
            // next round) keeps its start.
            let t0 = c.t0.max(retry);
            self.state = State::Playing(Clock { t0, ..c });
            self.next_report = self.next_report.max(t0);
        }
        Some(retry)
    }

    /// Logs (debug) the session's first wait for the storage layer in
    /// mid-stream, with what the storage layer had resident: the read-ahead
    /// fell behind. Most such waits make no packet late (the session sends
    /// ahead of time); the late ones are counted (`late_storage`).
    fn log_storage_wait(&mut self) {
        if self.storage_wait_logged {
            return;
        }
        self.storage_wait_logged = true;
        let resident = self.readahead.as_ref().map(|r| r.cursor().resident());
        tracing::debug!(
            ssrc = self.ssrc,
            track = self.track,
            next = self.next,
            ?resident,
            sent = self.packets,
            "a playing session's next packet is not read yet (logged once per session)"
        );
    }

    /// Whether the storage layer found the title's files changed or
    /// unreadable.
    pub(super) fn storage_failed(&self) -> bool {
        self.readahead.as_ref().is_some_and(|r| r.cursor().failed())
    }

    /// Tells the storage layer where the session stands, how, and how fast
    /// it moves through its title (its clock's speed, times the scale in
    /// fast forward: it reads ahead that much further).
    pub(super) fn tell_storage(&self, mode: Mode) {
        if let Some(r) = &self.readahead {
            let forward = self.trick.as_ref().map_or(1, |t| t.forward());
            r.position(self.next, mode, self.speed.saturating_mul(forward));
        }
    }

    /// Whether a file of the session's title shrank under its mapping and
    /// was read since ([`crate::Title::damaged`]).
    pub(crate) fn title_damaged(&self) -> bool {
        self.title.damaged()
    }

    /// Ends a session whose title can no longer be read (a burst failed
    /// with EFAULT, [`Self::title_damaged`], or the storage layer found a
    /// file of it changed or unreadable): an RTCP BYE tells the client the
    /// stream ended, and the engine never wakes it again (the client's
    /// TEARDOWN or the session timeout removes it).
    pub(crate) fn end_unreadable(&mut self, p: &mut Pacing) -> Option<Instant> {
        if matches!(self.state, State::Playing(_)) {
            tracing::warn!(
                ssrc = self.ssrc,
                track = self.track,
                "a file of the title changed or cannot be read under a playing session; ending the session"
            );
        }
        self.end(p)
    }
}

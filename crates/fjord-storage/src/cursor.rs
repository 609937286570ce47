//! A session's place in its title, shared by the engine thread that sends
//! it and the storage thread that reads ahead of it. The engine publishes
//! where it stands and asks whether a packet is ready; the storage layer
//! publishes the window of packets whose bytes are resident. Neither waits
//! for the other: these are atomics, and the engine's side never locks.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering::*};

use crate::source::Uses;

/// A [`Cursor`]'s rate meaning "the title plays in real time": title time
/// per wall time, in millionths (the engine's clock speed has this unit).
pub const REAL_TIME: u32 = 1_000_000;

/// How the session stands, as the storage layer needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    /// Positioned, waiting for PLAY's start: the next read is urgent.
    Starting = 0,
    Playing = 1,
    Paused = 2,
    /// Set up, never played: where it will start is not known yet (a PLAY
    /// may seek), so nothing is read for it.
    Idle = 3,
}

pub struct Cursor {
    /// The next packet the engine will send.
    next: AtomicU32,
    /// Resident packets `[start, end)`, packed `start << 32 | end`.
    window: AtomicU64,
    mode: AtomicU8,
    /// How fast the session moves through its title forward: title time
    /// per wall time, [`REAL_TIME`] for 1x (faster with RTSP `Speed`, or in
    /// fast forward, where it jumps from key frame to key frame).
    rate: AtomicU32,
    uses: AtomicU8,
    /// Set by the storage layer: a file of the title changed or could not
    /// be read; the session must end.
    failed: AtomicBool,
    /// Set by the engine when the session is gone.
    gone: AtomicBool,
    /// Set by the engine when its state changed in a way the storage layer
    /// should look at now rather than at its next planned check.
    poke: AtomicBool,
}

impl Cursor {
    pub(crate) fn new(uses: Uses) -> Self {
        Self {
            next: AtomicU32::new(0),
            window: AtomicU64::new(0),
            mode: AtomicU8::new(Mode::Idle as u8),
            rate: AtomicU32::new(REAL_TIME),
            uses: AtomicU8::new(uses.0),
            failed: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            poke: AtomicBool::new(false),
        }
    }

    // The engine's side.

    /// Whether packets `i..` are resident, and how many of them: `0` when
    /// packet `i` is not. The engine publishes `i` as its position first,
    /// so the storage layer never releases what it is about to read (see
    /// [`Cursor::shrink_window`]).
    #[inline]
    pub fn ready_from(&self, i: u32) -> u32 {
        if self.next.load(Relaxed) != i {
            self.next.store(i, SeqCst);
        }
        let w = self.window.load(SeqCst);
        let (start, end) = ((w >> 32) as u32, w as u32);
        if start <= i && i < end { end - i } else { 0 }
    }

    /// The session moved to packet `i` (a PLAY with a position) or changed
    /// mode or `rate` (see [`REAL_TIME`]); the storage layer looks at it
    /// soon.
    pub fn position(&self, i: u32, mode: Mode, rate: u32) {
        self.next.store(i, SeqCst);
        self.mode.store(mode as u8, SeqCst);
        self.rate.store(rate.max(1), Relaxed);
        self.poke.store(true, Release);
    }

    /// The session now reads these files (the data path changed).
    pub fn set_uses(&self, uses: Uses) {
        self.uses.store(uses.0, Relaxed);
        self.poke.store(true, Release);
    }

    /// The resident packets `[start, end)` as last published (for logs).
    pub fn resident(&self) -> (u32, u32) {
        self.window()
    }

    #[inline]
    pub fn failed(&self) -> bool {
        self.failed.load(Relaxed)
    }

    pub(crate) fn set_gone(&self) {
        self.gone.store(true, Release);
    }

    // The storage layer's side.

    pub(crate) fn next(&self) -> u32 {
        self.next.load(SeqCst)
    }

    pub(crate) fn mode(&self) -> Mode {
        match self.mode.load(SeqCst) {
            0 => Mode::Starting,
            1 => Mode::Playing,
            2 => Mode::Paused,
            _ => Mode::Idle,
        }
    }

    pub(crate) fn rate(&self) -> u32 {
        self.rate.load(Relaxed)
    }

    /// The files the session reads.
    pub fn uses(&self) -> Uses {
        Uses(self.uses.load(Relaxed))
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Acquire)
    }

    pub(crate) fn take_poke(&self) -> bool {
        self.poke.swap(false, AcqRel)
    }

    pub(crate) fn fail(&self) {
        self.failed.store(true, Relaxed);
    }

    pub(crate) fn window(&self) -> (u32, u32) {
        let w = self.window.load(SeqCst);
        ((w >> 32) as u32, w as u32)
    }

    /// Publishes a window that grew at its end (or a new one).
    pub(crate) fn set_window(&self, start: u32, end: u32) {
        self.window
            .store(u64::from(start) << 32 | u64::from(end), SeqCst);
    }

    /// Publishes the window starting at `start` instead, then says whether
    /// the engine is still at or past `start`: only then may the storage
    /// layer release what lies before it. (The engine stores its position
    /// before it reads the window, this side the other way round: at least
    /// one of them sees the other's store.)
    pub(crate) fn shrink_window(&self, start: u32) -> bool {
        let (_, end) = self.window();
        self.set_window(start, end);
        self.next.load(SeqCst) >= start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_packets_inside_the_window_are_ready() {
        let c = Cursor::new(Uses::INDEX);
        assert_eq!(c.ready_from(0), 0, "nothing is resident at first");
        c.set_window(10, 20);
        assert_eq!(c.ready_from(9), 0);
        assert_eq!(c.ready_from(10), 10);
        assert_eq!(c.ready_from(19), 1);
        assert_eq!(c.ready_from(20), 0);
        assert_eq!(c.next(), 20, "asking publishes the position");
    }

    #[test]
    fn a_window_is_not_shrunk_past_a_session_that_seeked_back() {
        let c = Cursor::new(Uses::INDEX);
        c.set_window(0, 100);
        c.ready_from(50);
        assert!(c.shrink_window(40));
        c.position(30, Mode::Starting, REAL_TIME);
        assert!(!c.shrink_window(45), "the engine went back to 30");
        assert_eq!(c.ready_from(30), 0);
    }
}

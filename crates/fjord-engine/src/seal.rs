//! An interleaved connection whose bytes are encrypted before its socket
//! (RTSPS): the engine hands the `$` frames of a burst to a [`Seal`], by
//! reference into the mapping, as it hands a plain connection's to
//! `writev`; the seal encrypts them into records and writes those. The
//! engine does not know the protocol (the control plane's TLS implements
//! it), only that bytes taken are bytes sent, in order.

use std::{
    io::{self, IoSlice},
    os::fd::BorrowedFd,
};

/// The encrypting side of a connection, shared with the control plane's
/// task that reads the connection (which decrypts through the same state):
/// its methods never wait.
pub trait Seal: Send + Sync {
    /// Writes records still queued, then seals a prefix of `data` into
    /// records, queues them and writes what `socket` takes. Returns how
    /// many bytes of `data` were taken; 0 when its queue is full (the
    /// client takes nothing).
    fn seal(&self, socket: BorrowedFd<'_>, data: &[IoSlice<'_>]) -> io::Result<usize>;

    /// Writes queued records as `socket` takes them.
    fn flush(&self, socket: BorrowedFd<'_>) -> io::Result<Flushed>;
}

/// What [`Seal::flush`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flushed {
    /// The socket took bytes.
    pub wrote: bool,
    /// No record is left queued.
    pub empty: bool,
}

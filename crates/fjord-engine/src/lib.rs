//! The engine: the data path of fjord.
//!
//! Engine threads own the playing sessions. Each thread paces its sessions'
//! packets by the send times of the packetization index and hands them to a
//! [`DataPath`](datapath::DataPath). The control plane never touches a socket
//! of a playing session: it sends [`Command`]s — the seeds' `mediastream`
//! call, made a queue. A PLAY at a `Scale` other than 1 sends only key
//! frames, chosen from the index's sync table (`trick`): never by parsing
//! media.

#![deny(clippy::undocumented_unsafe_blocks)]

mod clock;
pub mod command;
pub mod datapath;
mod files;
mod inbox;
mod interleaved;
mod lateness;
mod prefault;
mod rebuild;
mod session;
mod storage;
mod thread;
pub mod title;
mod totals;
mod trick;
mod wheel;

pub use command::{
    Command, LATE, MAX_SCALE, Output, PlayInfo, REAL_TIME, RepairSpec, SessionSpec, Start,
    ThreadStats, Until,
};
pub use datapath::UdpSocket;
pub use thread::{DEFAULT_BURST, Engine, EngineConfig, wake_grid};
pub use title::{Title, VerifyError};
pub use totals::Totals;

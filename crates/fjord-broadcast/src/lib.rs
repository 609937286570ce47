//! fjord-broadcast: periodic broadcasting of popular titles (the seeds'
//! zero-copy-one-copy, 001): a title is cut into segments that loop on a few
//! multicast channels, so any number of viewers start within a bounded
//! wait at a server cost that does not grow with them.
//!
//! Pure code: no sockets, no files, no clocks. Every time is a `u64` of
//! nanoseconds, since the schedule's epoch (channels, arrivals, playback
//! starts) or on the title's timeline (packets, segments).
//!
//! In: a [`Title`] (each packet's presentation time and payload bytes, the
//! packet indices of its sync points, its duration) and a [`Config`] (a
//! [`Scheme`], the longest start-up wait w, a channel cap, default 64). Out:
//! a [`Plan`]: [`Segment`]s (contiguous packet ranges, each starting at a
//! sync point) and [`Channel`]s (the segment slots each loops over, its
//! rate, its period), and from it:
//! 1. [`Plan::emissions`]: per channel, for ever, `(due ns, packet index)`
//!    in order: the engine sends packet i on that channel's group then.
//!    Deterministic from the epoch ([`Plan::emissions_from`] starts
//!    anywhere), so a client can compute what is on any channel at any time.
//! 2. [`Plan::join`]: for a client arriving at `a`, a [`JoinPlan`]: which
//!    channels to hear from when until when (it leaves each as soon as it
//!    has its segments), when playback starts, and its peak buffer (bytes
//!    received but not yet played).
//! 3. [`simulate`]: a fake clock, byte-accurate per packet: every arrival's
//!    packets (first sending on their channel inside the windows) against
//!    their play times (start + presentation time): underruns, worst and
//!    mean wait and peak buffer, and the server bandwidth measured from the
//!    cursors over 100 periods of the longest channel.
//! 4. [`formula()`]: the papers' closed forms, bandwidth and worst wait.
//! 5. [`Plan::description`] / [`Plan::from_description`]: the plan as
//!    serde data (JSON) for a server to publish and a client to rebuild;
//!    [`schedule::Schedule`] is the whole published document (the plan,
//!    its epoch as a wall-clock instant, the RTP numbering, the channels'
//!    groups), checked by [`schedule::Schedule::from_json`] before a client
//!    trusts it.
//!
//! b is the title's consumption rate (bytes over duration), D its duration.
//! The schemes ([`Scheme`]):
//! - staggered: K = ceil(D/w) channels, each the whole title at b, started
//!   D/K apart; B = K·b, worst wait D/K.
//! - pyramid (Viswanathan & Imielinski 1996): K channels at α·b, segment
//!   sizes D1·α^(i-1). The paper's choice is α ≈ e (K = ⌊B/(b·e)⌋, α =
//!   B/(K·b) for a given B); here w is given instead, so α = e (settable)
//!   and K is the least with worst wait D1/α ≤ w; B = K·α·b.
//! - skyscraper (Hua & Sheu, SIGCOMM 97): channels at b, segment sizes
//!   1, 2, 2, 5, 5, 12, 12, 25, 25, 52, 52, ... units, capped at the width W
//!   (default 52); K the least with D1 = D/Σ ≤ w; B = K·b, worst wait D1.
//! - harmonic (Juhn & Tseng 1997): n = ceil(D/w) segments, channel i sends
//!   S_i at b/i; B = b·H(n). Played as soon as S1 starts, plain harmonic
//!   broadcasting can underrun (Pâris, Carter & Long showed it). This is
//!   the delayed variant: the client hears every channel from its arrival
//!   and plays one slot d = D/n later, so each S_i has fully arrived when
//!   it is due; every client waits exactly d (worst wait d, as the formula).
//! - cautious harmonic (Pâris, Carter & Long 1998): channel 1 sends S1 at b,
//!   channel 2 alternates S2 and S3 at b, channel i ≥ 3 sends S(i+1) at b/i;
//!   B = b·(H(n-1) + 1/2), worst wait d = D/n. For D = 180 s, w = 5 s,
//!   b = 3.5 Mbit/s: n = 36 and 16.26 Mbit/s (INSTANCE's figure, seed 001).
//!
//! Cutting at sync points ([`segment`], [`layout`]): the ideal cut times
//! come from the scheme's grid; each moves to a sync point next to it (the
//! first to whichever of the two gives the smaller sum of relative
//! bandwidth and wait, the others to the one costing less bandwidth).
//! Rates come from the segments actually cut (bytes over the time they
//! must be received in), so a client's rule never underruns; the measured
//! bandwidth then differs from the formula by what the moved cuts add and
//! remove (within 2 % for three minutes at 3.5 Mbit/s, key frames every
//! 0.5 to 2 s and a 5 s wait; more as segments shorten against the key-frame
//! spacing; `fjord bench broadcast` reports it), and
//! the worst wait stays the grid's plus a start delay that [`Plan`]
//! derives for any title so that no underrun is possible: microseconds for
//! a constant-rate title, the title's lead over its mean rate for a
//! variable-rate one (an MPEG-TS mux's initial burst costs about half a
//! second at 3.5 Mbit/s). The client's rule is in [`join`], its proof in
//! [`plan`].
//!
//! Everything is bounded: a title without packets or duration, w = 0 or
//! w ≥ D, a scheme needing more channels than the cap, sync points too
//! sparse for the segments asked, and any inconsistent description are
//! [`PlanError`]s; nothing panics on any input.

#![forbid(unsafe_code)]

pub mod channel;
pub mod cursor;
pub mod describe;
pub mod error;
pub mod formula;
pub mod join;
pub mod layout;
pub mod plan;
pub mod schedule;
pub mod scheme;
pub mod segment;
pub mod sim;
pub mod title;

pub use channel::{Channel, Rate, Reception, Slot};
pub use cursor::{Cursor, Emission};
pub use describe::{ChannelDescription, DESCRIPTION_VERSION, Description, PacketOrder};
pub use error::PlanError;
pub use formula::{Expected, formula, harmonic_number};
pub use join::{JoinPlan, Listen};
pub use plan::Plan;
pub use scheme::{
    CHANNEL_LIMIT, Config, DEFAULT_MAX_CHANNELS, DEFAULT_WIDTH, Scheme, skyscraper_series,
};
pub use segment::Segment;
pub use sim::{SimStats, measure_bandwidth, simulate};
pub use title::{Packet, Title};

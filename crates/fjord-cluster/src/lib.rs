//! fjord's cluster of edges: which node serves a title.
//!
//! In: this node's name and URLs, and either etcd's endpoints (members
//! keep a lease on a key holding their URLs, capacity, load, most
//! asked-for titles and titles with most sessions: [`membership`], over etcd's JSON gateway, [`etcd`])
//! or a static list of peers (probed for liveness: [`probe`]). Out: a [`View`] of the other members, and
//! for a title asked for here, whether to serve it or which member to
//! send it to ([`placement::choose`]: rendezvous hashing over the members,
//! a home set of `k` nodes growing with the title's request rate across
//! the cluster, [`popularity`], and with its share of the cluster's
//! sessions, [`placement::copies_for_sessions`]; the least loaded home
//! taking the viewer; loads bounded to `1 + ε` of the mean, spilling to
//! the next nodes in order), and the mark a redirect carries ([`mark`]).
//!
//! The contract: every node computes the same home set from the same
//! members; a member joining or leaving moves only the titles it is (or
//! becomes) first for, about 1/N; with loads as placement saw them, no
//! node takes a viewer past `1 + ε` of its share (and [`placement::FEW`]
//! sessions) while another can; a
//! request sent on by placement is never sent back to a node it came
//! through, and takes at most [`placement::HOPS`] redirects (a forged
//! mark only skips balancing); a node that stops renewing its lease
//! leaves every view within the lease's TTL; etcd not answering leaves the
//! last members in place (logged, counted), never an empty cluster.
//! Placement and popularity are pure code (no sockets, clocks or
//! threads); this crate never parses media or touches a session.

//!
//! Without the `client` feature (on by default) only the pure parts are
//! built: records, etcd's answers decoded ([`answer`]), placement, marks
//! and popularity; the fuzz targets use them so, without the HTTP client.

#![forbid(unsafe_code)]

pub mod answer;
#[cfg(feature = "client")]
pub mod etcd;
pub mod mark;
pub mod member;
#[cfg(feature = "client")]
pub mod membership;
pub mod placement;
pub mod popularity;
#[cfg(feature = "client")]
pub mod probe;
#[cfg(feature = "client")]
pub mod view;

#[cfg(feature = "client")]
pub use etcd::Etcd;
pub use member::Member;
#[cfg(feature = "client")]
pub use view::{Health, View};

//! Why a title, a configuration or a description gives no plan.

/// Every refusal of the crate. Nothing here panics on any input: what
/// cannot be planned is one of these, with what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the title has no packets")]
    EmptyTitle,
    #[error("the title's duration is zero")]
    ZeroDuration,
    #[error("the title has more than 2^32 - 1 packets")]
    TooManyPackets,
    #[error("packet {index} has no payload bytes")]
    EmptyPacket { index: usize },
    #[error("packet {index} is presented before the packet ahead of it")]
    Unsorted { index: usize },
    #[error("packet {index} is presented at or after the title's end")]
    PastEnd { index: usize },
    #[error("sync point {index} is not a packet index above the one before it")]
    BadSyncPoint { index: usize },
    #[error(
        "the maximum start-up wait must be above 0 and below the title's duration \
         ({duration_ns} ns); got {max_wait_ns} ns"
    )]
    BadMaxWait { max_wait_ns: u64, duration_ns: u64 },
    #[error("the channel cap must be 1..={limit}; got {cap}")]
    BadChannelCap { cap: usize, limit: usize },
    #[error("{scheme}: {what}")]
    BadParameter { scheme: &'static str, what: String },
    #[error(
        "{scheme} needs more than {cap} channels for this title and start-up wait; \
         allow a longer wait or more channels"
    )]
    TooManyChannels { scheme: &'static str, cap: usize },
    #[error(
        "segment {segment} would be empty: no sync point (key frame) near {ideal_ns} ns \
         that is after the previous cut; the title's sync points are too sparse for \
         segments this short (allow a longer wait)"
    )]
    SyncTooSparse { segment: usize, ideal_ns: u64 },
    #[error("invalid description: {0}")]
    InvalidDescription(String),
}

impl PlanError {
    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        PlanError::InvalidDescription(what.into())
    }
}

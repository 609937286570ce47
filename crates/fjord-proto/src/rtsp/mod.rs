//! RTSP/1.0 (RFC 2326), server side.

pub mod framing;
pub mod range;
pub mod rate;
pub mod response;
pub mod rtp_info;
pub mod session;
pub mod transport;
pub mod url;

pub use framing::{Frame, FrameError, Limits, Method, Request, Version, next_frame};
pub use response::{Response, reason};

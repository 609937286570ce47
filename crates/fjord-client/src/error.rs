//! The client's error type.

use crate::rtsp::Response;

/// What can go wrong talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The URL is not an `rtsp://host[:port]/path` URL.
    #[error("bad URL {0:?}")]
    Url(String),
    /// The server sent bytes that are not RTSP.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server closed the connection.
    #[error("connection closed by the server")]
    Closed,
    /// No reply arrived in time.
    #[error("timed out waiting for the server")]
    Timeout,
    /// The server answered with a status other than 2xx.
    #[error("{method} failed: {} {}", .response.status, .response.reason)]
    Status {
        /// The method of the failed request.
        method: String,
        /// The reply.
        response: Box<Response>,
    },
    /// A call that needs a session was made before SETUP.
    #[error("no session: SETUP first")]
    NoSession,
}

impl Error {
    /// The RTSP status code if this is a [`Error::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { response, .. } => Some(response.status),
            _ => None,
        }
    }
}

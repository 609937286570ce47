//! Accepting connections without spinning when descriptors run out: a
//! failed `accept` leaves the connection in the backlog, so the listener
//! stays readable and an immediate retry would busy-loop until a
//! descriptor is freed.

use std::{net::SocketAddr, time::Duration};

use tokio::net::{TcpListener, TcpStream};

/// How long a listener rests when the process or system is out of
/// descriptors or memory before it tries again.
const BACKOFF: Duration = Duration::from_millis(100);

/// A listener's accepting, and whether it is starved now (logged once per
/// episode, not once per try).
pub(crate) struct Acceptor<'a> {
    listener: &'a TcpListener,
    what: &'static str,
    starved: bool,
}

impl<'a> Acceptor<'a> {
    pub(crate) fn new(listener: &'a TcpListener, what: &'static str) -> Self {
        Self {
            listener,
            what,
            starved: false,
        }
    }

    /// The next connection; cancel-safe (for `select!`).
    pub(crate) async fn next(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok(accepted) => {
                    if std::mem::take(&mut self.starved) {
                        tracing::info!(listener = self.what, "accepting connections again");
                    }
                    return accepted;
                }
                Err(e) if starved(&e) => {
                    if !std::mem::replace(&mut self.starved, true) {
                        tracing::warn!(
                            listener = self.what,
                            "cannot accept connections: {e}; retrying every {} ms \
                             (raise the open-file limit, LimitNOFILE=, or lower max_connections)",
                            BACKOFF.as_millis()
                        );
                    }
                    tokio::time::sleep(BACKOFF).await;
                }
                // A connection reset before it was accepted: the next one.
                Err(_) => {}
            }
        }
    }
}

fn starved(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

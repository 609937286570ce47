//! TLS for RTSP (`rtsps://` on `rtsps_port`, RTP interleaved inside) and
//! HTTP downloads (HTTPS on `http_port`), with the certificate and key of
//! `tls_cert`/`tls_key` (PEM), reloaded on SIGHUP.
//!
//! HTTPS is served in the connection's own task after [`Tls::handshake`]:
//! the HTTP code reads and writes the TLS stream, and file bytes are
//! sealed from the page cache straight into the socket (`http::wire`).
//!
//! RTSPS is still bridged ([`Tls::accept`]): each TLS connection is joined
//! to a loopback TCP connection that the RTSP code and the engine's
//! interleaved writer serve as any other, and a task moves the bytes
//! between the two, decrypting and encrypting. That costs a copy and a
//! loopback hop per byte beside the encryption. A bridge lives only as
//! long as its server side (see [`bridge`]).
//!
//! The kernel's TLS (kTLS) would let `sendfile` and the engine write into
//! an encrypting socket; it is not in every kernel (not in this project's
//! test machines).

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::Path,
    sync::{Arc, RwLock},
    time::Duration,
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use crate::{Config, ConfigError};

pub(crate) struct Tls {
    acceptor: RwLock<TlsAcceptor>,
    /// Loopback listener the bridges connect to.
    bridge: TcpListener,
    /// One bridge is made at a time, so each connect meets its own accept.
    making: tokio::sync::Mutex<()>,
}

/// The ends of a TLS connection (its bridge's are both loopback).
#[derive(Clone, Copy)]
pub(crate) struct Endpoints {
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

impl Tls {
    /// `None` when no certificate is configured.
    pub(crate) async fn new(config: &Config) -> Result<Option<Tls>, crate::ServeError> {
        let Some(acceptor) = acceptor(config)? else {
            return Ok(None);
        };
        Ok(Some(Tls {
            acceptor: RwLock::new(acceptor),
            bridge: TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?,
            making: tokio::sync::Mutex::new(()),
        }))
    }

    /// Takes the certificate and key of a reloaded config.
    pub(crate) fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        if let Some(a) = acceptor(config)? {
            *self.acceptor.write().unwrap_or_else(|e| e.into_inner()) = a;
        }
        Ok(())
    }

    /// Completes the TLS handshake of `stream` within `request_timeout_s`.
    pub(crate) async fn handshake(
        &self,
        stream: TcpStream,
        config: &Config,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let acceptor = self
            .acceptor
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        tokio::time::timeout(config.request_timeout(), acceptor.accept(stream))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })?
    }

    /// Completes the TLS handshake of `stream` and starts moving its bytes
    /// to and from a new loopback connection, whose server side is
    /// returned with the TLS connection's ends.
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        config: &Config,
    ) -> std::io::Result<(TcpStream, Endpoints)> {
        let stall = Duration::from_secs(config.stall_timeout_s);
        let local = stream.local_addr()?;
        let tls = self.handshake(stream, config).await?;
        let (inner, server_side) = {
            let _one = self.making.lock().await;
            let inner = TcpStream::connect(self.bridge.local_addr()?).await?;
            // Another local process may connect to the bridge port too: only
            // our own connect is taken.
            let server_side = loop {
                let (s, from) = self.bridge.accept().await?;
                if from == inner.local_addr()? {
                    break s;
                }
            };
            (inner, server_side)
        };
        let _ = inner.set_nodelay(true);
        tokio::spawn(bridge(tls, inner, stall));
        Ok((server_side, Endpoints { peer, local }))
    }
}

/// Moves bytes between a TLS connection and its loopback twin until the
/// server side closes (its task ended: the connection's slot is free) or
/// the client takes nothing for `stall`; the client closing is passed on,
/// and the server side then closes. Never waits on the client alone, so a
/// client silent after the handshake holds no descriptor beyond its
/// connection's own timeouts.
async fn bridge(tls: TlsStream<TcpStream>, inner: TcpStream, stall: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut from_client, mut to_client) = tokio::io::split(tls);
    let (mut from_server, mut to_server) = inner.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
        let _ = to_server.shutdown().await;
        std::future::pending::<()>().await
    };
    let down = async {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let sent = async {
                to_client.write_all(&buf[..n]).await?;
                to_client.flush().await
            };
            if !matches!(tokio::time::timeout(stall, sent).await, Ok(Ok(()))) {
                return;
            }
        }
        let _ = tokio::time::timeout(stall, to_client.shutdown()).await;
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

fn acceptor(config: &Config) -> Result<Option<TlsAcceptor>, ConfigError> {
    if config.tls_cert.as_os_str().is_empty() {
        return Ok(None);
    }
    let bad = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        ConfigError::Invalid(format!(
            "{what} {}: {e} (PEM expected; `fjord cert` makes a self-signed pair)",
            path.display()
        ))
    };
    let (cert, key) = (&config.tls_cert, &config.tls_key);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect())
        .map_err(|e| bad("tls_cert", cert, &e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("tls_key", key, &e))?;
    // ring, measured against aws-lc-rs on the project's machines (16 KiB
    // records sealed in a loop): AES-GCM 3.5 GB/s against 1.6 (ring uses
    // VAES there), ChaCha20-Poly1305 within 15 %. Its suites: AES-256-GCM,
    // AES-128-GCM, ChaCha20, the client's order of preference honoured.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| bad("tls_cert/tls_key", cert, &e))?;
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}

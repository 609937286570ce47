//! TLS for RTSP (`rtsps://` on `rtsps_port`, RTP interleaved inside) and
//! HTTP downloads (HTTPS on `http_port`), with the certificate and key of
//! `tls_cert`/`tls_key` (PEM), reloaded on SIGHUP.
//!
//! Both are served in the connection's own task after [`Tls::handshake`],
//! with no loopback bridge. HTTPS: the HTTP code reads and writes the TLS
//! stream, and file bytes are sealed from the page cache straight into the
//! socket (`http::wire`). RTSPS: the RTSP code reads through the
//! connection's TLS state and the engine seals the interleaved RTP into it
//! from the title's mapping (`rtsps`).
//!
//! The kernel's TLS (kTLS) would let `sendfile` and the engine write into
//! an encrypting socket; it is not in every kernel (not in this project's
//! test machines).

use std::{
    path::Path,
    sync::{Arc, RwLock},
};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use crate::{Config, ConfigError};

pub(crate) struct Tls {
    acceptor: RwLock<TlsAcceptor>,
}

impl Tls {
    /// `None` when no certificate is configured.
    pub(crate) fn new(config: &Config) -> Result<Option<Tls>, crate::ServeError> {
        let Some(acceptor) = acceptor(config)? else {
            return Ok(None);
        };
        Ok(Some(Tls {
            acceptor: RwLock::new(acceptor),
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

    /// Completes the TLS handshake of an RTSPS connection: its socket and
    /// its TLS state, which the connection's task and the engine share.
    pub(crate) async fn accept_rtsps(
        &self,
        stream: TcpStream,
        config: &Config,
    ) -> std::io::Result<(TcpStream, crate::rtsps::TlsConn)> {
        let (stream, state) = self.handshake(stream, config).await?.into_inner();
        Ok((stream, crate::rtsps::TlsConn::new(state)))
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

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
//! Where the kernel has TLS (kTLS: the `tls` upper-layer protocol, probed
//! once at start), a connection's keys go to the kernel after the
//! handshake ([`Tls::handshake_to_kernel`], `kernel_tls`): an HTTPS body
//! goes by `sendfile`, and RTSPS's interleaved RTP by the engine's
//! `writev`, as over plain connections. Where it has not (the project's
//! test machines; `tests/vm/` runs the tests in a kernel that has), or a
//! socket refuses it, both are sealed in user space as above.

use std::{
    path::Path,
    sync::{Arc, RwLock},
};

use ktls::CorkStream;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use crate::{
    Config, ConfigError,
    kernel_tls::{self, Handoff},
    rtsps::{Encryption, TlsConn},
};

pub(crate) struct Tls {
    acceptor: RwLock<TlsAcceptor>,
    /// Whether this kernel takes TLS keys (kTLS).
    kernel: bool,
}

impl Tls {
    /// `None` when no certificate is configured.
    pub(crate) fn new(config: &Config) -> Result<Option<Tls>, crate::ServeError> {
        if config.tls_cert.as_os_str().is_empty() {
            return Ok(None); // no probe of the kernel either
        }
        let kernel = kernel_tls::available();
        let Some(acceptor) = acceptor(config, kernel)? else {
            return Ok(None);
        };
        if kernel {
            tracing::info!("kTLS: the kernel encrypts HTTPS and RTSPS; bodies go by sendfile");
        } else {
            tracing::info!(
                "kTLS: this kernel has no `tls` ULP (modprobe tls); HTTPS and RTSPS are encrypted in user space"
            );
        }
        Ok(Some(Tls {
            acceptor: RwLock::new(acceptor),
            kernel,
        }))
    }

    /// Takes the certificate and key of a reloaded config.
    pub(crate) fn reload(&self, config: &Config) -> Result<(), ConfigError> {
        if let Some(a) = acceptor(config, self.kernel)? {
            *self.acceptor.write().unwrap_or_else(|e| e.into_inner()) = a;
        }
        Ok(())
    }

    /// Whether HTTPS and RTSPS connections go to the kernel ([`Self::handshake_to_kernel`]).
    pub(crate) fn kernel(&self) -> bool {
        self.kernel
    }

    /// Completes the TLS handshake of `stream` (the error), then hands its
    /// keys to the kernel if it takes them: what is written to the socket
    /// from then on, by `sendfile` too, is encrypted there.
    pub(crate) async fn handshake_to_kernel(
        &self,
        stream: TcpStream,
        config: &Config,
    ) -> std::io::Result<Handoff> {
        let tls = self.handshake(CorkStream::new(stream), config).await?;
        Ok(kernel_tls::handoff(tls, config.idle_timeout()).await)
    }

    /// Completes the TLS handshake of `stream` within `request_timeout_s`.
    pub(crate) async fn handshake<IO: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: IO,
        config: &Config,
    ) -> std::io::Result<TlsStream<IO>> {
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

    /// Completes the TLS handshake of an RTSPS connection: its socket, who
    /// encrypts it (the kernel where it takes the keys, else rustls, whose
    /// state the connection's task and the engine share) and the bytes
    /// opened before the kernel took it (its first request, if it sent it
    /// right behind the handshake).
    pub(crate) async fn accept_rtsps(
        &self,
        stream: TcpStream,
        config: &Config,
    ) -> std::io::Result<(TcpStream, Encryption, Vec<u8>)> {
        let user = |stream, state| (stream, Encryption::User(Arc::new(TlsConn::new(state))));
        if !self.kernel {
            let (stream, state) = self.handshake(stream, config).await?.into_inner();
            let (stream, e) = user(stream, state);
            return Ok((stream, e, Vec::new()));
        }
        match self.handshake_to_kernel(stream, config).await? {
            Handoff::Kernel(k) => {
                let (stream, first) = k.into_parts();
                Ok((stream, Encryption::Kernel, first))
            }
            Handoff::User(tls, why) => {
                tracing::debug!("the socket refused kTLS ({why}): RTSPS in user space");
                let (cork, state) = tls.into_inner();
                let (stream, e) = user(cork.io, state);
                Ok((stream, e, Vec::new()))
            }
            Handoff::Refused(e) => Err(std::io::Error::other(format!(
                "the kernel refused the TLS keys: {e}"
            ))),
            Handoff::Client(e) => Err(e),
        }
    }
}

fn acceptor(config: &Config, kernel: bool) -> Result<Option<TlsAcceptor>, ConfigError> {
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
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| bad("tls_cert/tls_key", cert, &e))?;
    // The kernel needs the session's keys.
    server.enable_secret_extraction = kernel;
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}

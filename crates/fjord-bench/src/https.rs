//! HTTPS for `fjord bench http --tls`: one certificate (`fjord cert`) for
//! every server, and clients (rustls) that offer one cipher suite (and its
//! TLS version), so each server encrypts with the same cipher. The clients
//! resume sessions and do not check the certificate: what is measured is
//! the servers' encryption, not trust.

use std::{
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, bail};
use rustls::{
    crypto::{CryptoProvider, ring},
    pki_types::ServerName,
};

/// A cipher suite the clients offer alone.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Cipher {
    /// TLS 1.3 TLS_AES_256_GCM_SHA384
    Aes256Gcm,
    /// TLS 1.3 TLS_AES_128_GCM_SHA256
    Aes128Gcm,
    /// TLS 1.3 TLS_CHACHA20_POLY1305_SHA256
    Chacha20,
    /// TLS 1.2 ECDHE-ECDSA-AES256-GCM-SHA384
    Tls12Aes256Gcm,
}

impl Cipher {
    fn suite(self) -> rustls::SupportedCipherSuite {
        match self {
            Cipher::Aes256Gcm => ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
            Cipher::Aes128Gcm => ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
            Cipher::Chacha20 => ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            Cipher::Tls12Aes256Gcm => ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        }
    }

    fn version(self) -> &'static rustls::SupportedProtocolVersion {
        match self {
            Cipher::Tls12Aes256Gcm => &rustls::version::TLS12,
            _ => &rustls::version::TLS13,
        }
    }

    pub fn name(self) -> &'static str {
        self.suite().suite().as_str().unwrap_or("?")
    }
}

/// The certificate and key every server of a run uses.
pub struct Certificate {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Has `fjord cert` make a certificate in `dir`, outside the media
/// `root`.
pub fn certificate(fjord: &Path, dir: &Path, root: &Path) -> anyhow::Result<Certificate> {
    let out = std::process::Command::new(fjord)
        .args(["cert", "--out"])
        .arg(dir)
        .arg("--root")
        .arg(root)
        .output()
        .context("running fjord cert")?;
    if !out.status.success() {
        bail!("fjord cert: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(Certificate {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    })
}

/// The clients' TLS settings: `cipher` alone, sessions resumed.
pub fn client_config(cipher: Cipher) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(CryptoProvider {
        cipher_suites: vec![cipher.suite()],
        ..ring::default_provider()
    });
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[cipher.version()])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(fjord_client::tls::AnyCertificate(provider)))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A connection a client speaks HTTP on, plain or TLS.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A connection to `port` on loopback, TLS with `tls`.
pub fn connect(
    port: u16,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<Box<dyn Stream>> {
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_nodelay(true)?;
    let Some(config) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::try_from("localhost")?;
    let conn = rustls::ClientConnection::new(config.clone(), name)?;
    Ok(Box::new(rustls::StreamOwned::new(conn, tcp)))
}

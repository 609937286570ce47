//! RTSP over TLS (`rtsps://`): rustls with ring, the handshake done
//! blocking on the connected socket. The server's certificate is not
//! checked (as `curl -k`): this client measures and verifies what a server
//! sends, it does not trust it with anything, and test servers have
//! self-signed certificates. Signatures are still checked, so the
//! handshake is a real one.

use std::{
    io::{self, Read, Write},
    net::TcpStream,
    sync::{Arc, OnceLock},
    time::Duration,
};

use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature},
    pki_types::{CertificateDer, ServerName, UnixTime},
};

/// Whether `url` is RTSP over TLS.
pub fn is_rtsps(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("rtsps://"))
}

/// Takes any certificate, as `curl -k` does (test servers' are
/// self-signed); checks the handshake's signatures with the provider's
/// algorithms as usual.
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let verifier = Arc::new(AnyCertificate(provider.clone()));
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

/// Does the TLS handshake on `stream` (blocking, within `timeout`) for
/// host `host`; the socket is left blocking.
pub fn handshake(
    stream: &mut TcpStream,
    host: &str,
    timeout: Duration,
) -> io::Result<ClientConnection> {
    let name = ServerName::try_from(host.to_string())
        .unwrap_or_else(|_| ServerName::try_from("localhost").expect("a valid name"));
    let mut c = ClientConnection::new(config(), name).map_err(io::Error::other)?;
    // Requests are small; nothing this client writes needs a bound.
    c.set_buffer_limit(None);
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    while c.is_handshaking() {
        c.complete_io(stream)?;
    }
    while c.wants_write() {
        c.write_tls(stream)?;
    }
    Ok(c)
}

/// A blocking TLS stream over `stream`, its handshake done (for tests
/// that speak RTSPS by hand).
pub fn stream(
    mut stream: TcpStream,
    host: &str,
    timeout: Duration,
) -> io::Result<rustls::StreamOwned<ClientConnection, TcpStream>> {
    let c = handshake(&mut stream, host, timeout)?;
    Ok(rustls::StreamOwned::new(c, stream))
}

/// The host of an `rtsp(s)://[user@]host[:port]/…` URL.
pub fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    }
}

/// Reads from a non-blocking socket through `c`: like `recv`, `Ok(None)`
/// when nothing arrived, `Ok(Some(0))` when the server closed.
pub fn read_nonblocking(
    c: &mut ClientConnection,
    stream: &mut TcpStream,
    buf: &mut [u8],
) -> io::Result<Option<usize>> {
    let closed = match c.read_tls(stream) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        Err(e) if e.kind() == io::ErrorKind::Interrupted => false,
        Err(e) => return Err(e),
    };
    c.process_new_packets().map_err(io::Error::other)?;
    match c.reader().read(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(closed.then_some(0)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(Some(0)),
        Err(e) => Err(e),
    }
}

/// Seals `bytes` and writes the records the non-blocking socket takes;
/// the rest waits in `c` ([`flush_nonblocking`]).
pub fn write_nonblocking(
    c: &mut ClientConnection,
    stream: &mut TcpStream,
    bytes: &[u8],
) -> io::Result<()> {
    c.writer().write_all(bytes)?;
    flush_nonblocking(c, stream).map(|_| ())
}

/// Writes sealed records the socket takes: true when none is left.
pub fn flush_nonblocking(c: &mut ClientConnection, stream: &mut TcpStream) -> io::Result<bool> {
    while c.wants_write() {
        match c.write_tls(stream) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The blocking client's stream: plain, or TLS over it.
#[derive(Debug)]
pub(crate) struct Tls(pub ClientConnection);

impl Tls {
    pub(crate) fn read(&mut self, stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        rustls::Stream::new(&mut self.0, stream).read(buf)
    }

    pub(crate) fn write_all(&mut self, stream: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
        let mut s = rustls::Stream::new(&mut self.0, stream);
        s.write_all(bytes)?;
        s.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_schemes() {
        assert!(is_rtsps("rtsps://h/a") && is_rtsps("RTSPS://h/a"));
        assert!(!is_rtsps("rtsp://h/a") && !is_rtsps("rtsps:"));
        assert_eq!(host_of("rtsps://u:p@example.org:322/a/b"), "example.org");
        assert_eq!(host_of("rtsps://[::1]:322/a"), "::1");
        assert_eq!(host_of("rtsp://127.0.0.1/a"), "127.0.0.1");
    }
}

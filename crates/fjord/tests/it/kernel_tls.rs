//! HTTPS where the kernel holds the keys (kTLS) and where it does not:
//! the same tests pass either way, and assert which way each connection
//! went. This machine's kernel has no `tls` ULP, so here they test the
//! user-space path; `make test-vm` (tests/vm/run.sh) runs them in
//! Debian's own kernel, which has it: a 32 MB download by `sendfile`, an
//! HLS segment's range, records no HTTPS client sends after the
//! handshake (each closes its own connection, none panics the server),
//! and a client that half-closes before the kernel could take its keys.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::cipher::{MessageEncrypter, OutboundPlainMessage};
use rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384;
use rustls::{
    ClientConfig, ClientConnection, ConnectionTrafficSecrets, ContentType, ProtocolVersion,
    SupportedCipherSuite,
};

use crate::common::{Server, clip_bytes, read_until_close};
use crate::tls::{
    curl_suite, expected_encryption, https_connections, https_only, md5_hex, python_client,
    with_big_title,
};

#[test]
fn a_large_download_and_an_hls_range_bit_exact_the_way_this_kernel_allows() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = Vec::new();
    let (server, port) =
        Server::start_http_with(&https_only(dir.path()), |root| big = with_big_title(root));
    let url = format!("https://127.0.0.1:{port}");
    for (suite, tls12) in [
        ("TLS_AES_256_GCM_SHA384", false),
        ("ECDHE-ECDSA-CHACHA20-POLY1305", true),
    ] {
        let (code, body, _) = curl_suite(&format!("{url}/big.ts"), suite, tls12, &[]);
        assert_eq!((code, md5_hex(&body)), (200, md5_hex(&big)), "{suite}");
    }
    let (code, playlist, _) = curl_suite(
        &format!("{url}/clip.ts/media.m3u8"),
        "TLS_AES_128_GCM_SHA256",
        false,
        &[],
    );
    assert_eq!(code, 200);
    let playlist = String::from_utf8(playlist).unwrap();
    let (len, at) = (playlist.lines())
        .filter_map(|l| l.strip_prefix("#EXT-X-BYTERANGE:"))
        .nth(1)
        .and_then(|r| r.split_once('@'))
        .map(|(l, a)| (l.parse::<usize>().unwrap(), a.parse::<usize>().unwrap()))
        .expect("a second byte range");
    let range = format!("{at}-{}", at + len - 1);
    let (code, segment, _) = curl_suite(
        &format!("{url}/clip.ts"),
        "TLS_AES_128_GCM_SHA256",
        false,
        &["-r", &range],
    );
    assert_eq!(code, 206);
    assert_eq!(md5_hex(&segment), md5_hex(&clip_bytes()[at..at + len]));
    let (encryption, other) = expected_encryption();
    assert_eq!(https_connections(&server, encryption), 4, "{encryption}");
    assert_eq!(https_connections(&server, other), 0, "{other}");
    assert_eq!(https_connections(&server, "kernel_failed"), 0);
}

/// A TLS 1.3 client (AES-256-GCM) past its handshake that seals its own
/// records, of any type: what a client with its own TLS stack can send.
struct Forger {
    sock: TcpStream,
    seal: Box<dyn MessageEncrypter>,
    seq: u64,
}

impl Forger {
    fn connect(port: u16) -> Forger {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = vec![TLS13_AES_256_GCM_SHA384];
        let provider = Arc::new(provider);
        let verifier = Arc::new(fjord_client::tls::AnyCertificate(provider.clone()));
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.enable_secret_extraction = true;
        let name = "localhost".try_into().unwrap();
        let mut conn = ClientConnection::new(Arc::new(config), name).unwrap();
        let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        while conn.wants_write() {
            conn.write_tls(&mut sock).unwrap();
        }
        let (seq, secrets) = conn.dangerous_extract_secrets().unwrap().tx;
        let ConnectionTrafficSecrets::Aes256Gcm { key, iv } = secrets else {
            panic!("AES-256-GCM was the only suite offered")
        };
        let SupportedCipherSuite::Tls13(suite) = TLS13_AES_256_GCM_SHA384 else {
            unreachable!("a TLS 1.3 suite")
        };
        let seal = suite.aead_alg.encrypter(key, iv);
        Forger { sock, seal, seq }
    }

    /// Sends `body` sealed as a record of type `kind`.
    fn send(&mut self, kind: u8, body: &[u8]) {
        let plain = OutboundPlainMessage {
            typ: ContentType::from(kind),
            version: ProtocolVersion::TLSv1_2,
            payload: body.into(),
        };
        let wire = self.seal.encrypt(plain, self.seq).unwrap().encode();
        self.seq += 1;
        self.sock.write_all(&wire).unwrap();
    }
}

/// Records no HTTPS or RTSPS client sends after the handshake, each
/// followed by a request: each closes its own connection within a second
/// or two (the kernel's reader hands their types to fjord, which used to
/// panic on some), while a download beside goes on, bit-exact.
#[test]
fn records_no_client_sends_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = Vec::new();
    let (mut server, port) =
        Server::start_http_with(&https_only(dir.path()), |root| big = with_big_title(root));
    let url = format!("https://127.0.0.1:{port}/big.ts");
    let slow = std::thread::spawn(move || {
        curl_suite(
            &url,
            "TLS_AES_256_GCM_SHA384",
            false,
            &["--limit-rate", "8M"],
        )
    });
    let rtsps: u16 = (server.rtsps_url("").rsplit(':').next())
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap();
    let http = b"GET /clip.ts HTTP/1.1\r\nHost: t\r\n\r\n";
    let rtsp = b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n";
    let cases: [(&str, u8, &[u8]); 6] = [
        ("change_cipher_spec", 20, &[1]),
        ("an alert of three bytes", 21, &[1, 0, 0]),
        ("an empty alert", 21, &[]),
        ("a fatal alert", 21, &[2, 40]),
        ("a KeyUpdate", 22, &[24, 0, 0, 1, 0]),
        ("a record of type 99", 99, b"x"),
    ];
    let both = [(port, &http[..]), (rtsps, &rtsp[..])];
    for ((port, request), (what, kind, body)) in both.iter().flat_map(|p| cases.map(|c| (p, c))) {
        let mut client = Forger::connect(*port);
        client.send(kind, body);
        client.send(23, request);
        let t0 = std::time::Instant::now();
        let (_, closed) = read_until_close(&mut client.sock, Duration::from_secs(5));
        assert!(closed, "{what}: the connection is still open");
        assert!(t0.elapsed() < Duration::from_secs(3), "{what}: closed late");
    }
    let (code, body, _) = slow.join().unwrap();
    assert_eq!(
        (code, md5_hex(&body)),
        (200, md5_hex(&big)),
        "the other download"
    );
    server.assert_healthy();
    let log = server.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// A client that sends the handshake's last flight, its request and a
/// FIN at once is answered: the kernel will not take the ULP on a
/// half-closed connection (fjord used to drop it as `kernel_failed`), so
/// rustls keeps it.
#[test]
fn a_client_half_closed_after_its_request_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = Server::start_http(&https_only(dir.path()));
    for _ in 0..3 {
        let got = python_client("halfclose", port, "clip.ts");
        assert_eq!(got["status"], "HTTP/1.1 200 OK", "{got}");
        assert_eq!(got["md5"], md5_hex(clip_bytes()).as_str(), "{got}");
    }
    assert_eq!(https_connections(&server, "kernel_failed"), 0);
}

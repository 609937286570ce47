//! `fjord load` over TCP counts the frames a server writes right behind
//! its PLAY reply, read with it: a server's first burst follows the reply
//! at once. (They were once dropped, so a repair block that began there
//! looked short of packets it had received and was given up.)
//!
//! The server here is a few lines of RTSP on a socket: the behaviour under
//! test is the client's reading of one write holding the reply and frames.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use fjord_client::load::{LoadConfig, run};

const FRAMES: u16 = 5;
const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=t\r\nt=0 0\r\na=control:*\r\n\
                   m=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:track1\r\n";

/// Reads one request: its method and CSeq.
fn request(r: &mut BufReader<TcpStream>) -> Option<(String, String)> {
    let mut method = None;
    let mut cseq = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Some((method?, cseq));
        }
        if method.is_none() {
            method = line.split(' ').next().map(str::to_owned);
        } else if let Some(v) = line.strip_prefix("CSeq:") {
            cseq = v.trim().to_owned();
        }
    }
}

/// An interleaved RTP frame on channel 0: MP2T, sequence `seq`.
fn frame(seq: u16) -> Vec<u8> {
    let mut rtp = vec![0x80, 33];
    rtp.extend_from_slice(&seq.to_be_bytes());
    rtp.extend_from_slice(&(u32::from(seq) * 3600).to_be_bytes());
    rtp.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    rtp.extend_from_slice(&[0x47; 188]);
    let mut f = vec![b'$', 0];
    f.extend_from_slice(&(rtp.len() as u16).to_be_bytes());
    f.extend_from_slice(&rtp);
    f
}

/// Answers one connection; PLAY's reply and [`FRAMES`] frames go in one
/// write, and nothing after them.
fn serve(stream: TcpStream) {
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    while let Some((method, cseq)) = request(&mut r) {
        let head = format!("RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\n");
        let mut out = match method.as_str() {
            "DESCRIBE" => format!(
                "{head}Content-Base: rtsp://127.0.0.1/t/\r\nContent-Type: application/sdp\r\n\
                 Content-Length: {}\r\n\r\n{SDP}",
                SDP.len()
            )
            .into_bytes(),
            "SETUP" => format!(
                "{head}Session: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1;ssrc=12345678\r\n\r\n"
            )
            .into_bytes(),
            _ => format!("{head}Session: 1\r\n\r\n").into_bytes(),
        };
        if method == "PLAY" {
            (0..FRAMES).for_each(|s| out.extend(frame(s)));
        }
        if w.write_all(&out).is_err() {
            return;
        }
    }
}

#[test]
fn frames_in_the_read_of_the_play_reply_are_counted() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    let mut config = LoadConfig::new(
        format!("rtsp://127.0.0.1:{port}/t"),
        1,
        Duration::from_millis(300),
    );
    config.tcp = true;
    config.replay = false;
    let report = run(&config).unwrap();
    let json = report.to_json();
    assert_eq!(report.sessions_playing, 1, "{json}");
    assert_eq!(report.totals.packets, u64::from(FRAMES), "{json}");
    assert_eq!(report.totals.lost, 0, "{json}");
}

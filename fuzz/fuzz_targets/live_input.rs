//! A publisher's input (fjord-live): ANNOUNCE bodies, RTP packets and the
//! key-frame check of their payloads, the join ring they fill and the
//! loss counted from their sequence numbers, never panic and stay within
//! their limits.
#![no_main]

use fjord_live::{Limits, keyframe, loss::Loss, publish::Publish, ring::Ring, rtp, sdp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_buffer_bytes: 4096,
        ..Limits::default()
    };
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // The head an SDP, the tail packets: 2-byte length, then the packet.
    let (body, mut packets) = rest.split_at((split as usize * 4).min(rest.len()));
    let Ok(announced) = sdp::parse(body, &limits) else {
        return;
    };
    assert!(!announced.tracks.is_empty() && announced.tracks.len() <= limits.max_tracks);
    let _ = sdp::parse(announced.viewer_sdp.as_bytes(), &limits);
    let codecs: Vec<_> = announced.tracks.iter().map(|t| t.codec).collect();
    let mut publish = Publish::new(announced);
    let _ = publish.setup("rtsp://h/live/a/trackID=0");
    let _ = publish.record();
    let mut ring = Ring::new(codecs.iter().position(|c| c.is_video()), limits.max_buffer_bytes);
    let (mut loss, mut taken) = (Loss::default(), 0u64);
    while packets.len() >= 2 {
        let n = u16::from_be_bytes([packets[0], packets[1]]) as usize;
        let p = &packets[2..(2 + n).min(packets.len())];
        packets = &packets[(2 + n).min(packets.len())..];
        if let Ok(h) = rtp::parse(p, &limits) {
            let track = usize::from(h.payload_type) % codecs.len();
            let key = keyframe::starts_key(codecs[track], &p[h.payload]);
            ring.push(track, h.timestamp, key, p.len(), ());
            assert!(ring.bytes() <= limits.max_buffer_bytes);
            loss.on(h.seq);
            taken += 1;
            // A packet moves the highest sequence number on by less than
            // a dropout (3,000): so much can be lost per packet at most.
            assert!(loss.received() <= taken && loss.lost() < taken * 3000);
        }
    }
    let _ = ring.backlog().count();
});

//! A publisher's input (fjord-live): ANNOUNCE bodies, RTP packets and the
//! key-frame check of their payloads, the join ring they fill, the loss
//! counted from their sequence numbers, and the recording made of them
//! (the depacketizers, LATM's StreamMuxConfig among them, the fragmented
//! MP4 written, read back by fjord's MP4 ingest; or an MP2T track's TS
//! packets, checked whole), never panic and stay within their limits.
#![no_main]

use fjord_live::{
    Limits,
    depacketize::{AuHeaders, Depacketizer, Payload},
    keyframe,
    loss::Loss,
    publish::Publish,
    record::{self, RecordLimits},
    ring::Ring,
    rtp, sdp,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_buffer_bytes: 4096,
        ..Limits::default()
    };
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // A LATM StreamMuxConfig (an SDP's `config`) read or refused.
    if let Ok(c) = fjord_live::latm::config(rest) {
        assert!(c.sub_frames >= 1 && c.asc.len() <= rest.len());
    }
    // The head an SDP, the tail packets: 2-byte length, then the packet.
    let (body, mut packets) = rest.split_at((split as usize * 4).min(rest.len()));
    let Ok(announced) = sdp::parse(body, &limits) else {
        return;
    };
    assert!(!announced.tracks.is_empty() && announced.tracks.len() <= limits.max_tracks);
    let _ = sdp::parse(announced.viewer_sdp.as_bytes(), &limits);
    let codecs: Vec<_> = announced.tracks.iter().map(|t| t.codec).collect();
    let bounds = RecordLimits {
        max_frame_bytes: 8192,
        max_fragment_bytes: 32 * 1024,
        fragment_ms: 100,
    };
    let mut recorder = record::recorder(&announced.tracks, bounds).ok().map(|(r, _)| r);
    let headers = AuHeaders {
        size_bits: 13,
        index_bits: 3,
        delta_bits: 3,
    };
    let mut depacketizers = [
        Payload::H264,
        Payload::H265,
        Payload::Aac {
            headers,
            frame: 1024,
        },
        Payload::Opus,
        Payload::Latm {
            sub_frames: 1,
            frame: 1024,
        },
    ]
    .map(|p| Depacketizer::new(p, 8192));
    let mut file = recorder.as_ref().map(|r| r.init()).unwrap_or_default();
    let mut frames = Vec::new();
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
            let key = keyframe::starts_key(codecs[track], &p[h.payload.clone()]);
            ring.push(track, h.timestamp, key, p.len(), ());
            assert!(ring.bytes() <= limits.max_buffer_bytes);
            loss.on(h.seq);
            for d in &mut depacketizers {
                d.push((h.seq, h.timestamp, h.marker), &p[h.payload.clone()], &mut frames);
                assert!(frames.iter().all(|f| f.data.len() <= 8192));
                frames.clear();
            }
            if let Some(r) = recorder.as_mut() {
                let before = file.len();
                r.push(track, p, &mut file);
                // A fragment holds at most the bound and one more frame, and its head.
                assert!(file.len() - before <= 2 * (32 * 1024 + 8192) + 64 * 1024);
            }
            taken += 1;
            // A packet moves the highest sequence number on by less than
            // a dropout (3,000): so much can be lost per packet at most.
            assert!(loss.received() <= taken && loss.lost() < taken * 3000);
        }
    }
    for track in 0..codecs.len() {
        let _ = ring.backlog(track).iter().count();
    }
    if let Some(mut r) = recorder {
        r.finish(&mut file);
        match r.extension() {
            "ts" => assert!(file.is_empty() || record::ts::whole_ts(&file)),
            _ => drop(fjord_media::mp4::plan(&file, &mut |_, _| {})),
        }
    }
});

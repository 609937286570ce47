//! What every media fuzz target asserts of a plan: each packet lies inside
//! the input and fits an RTP payload, send times never go back, and every
//! sync point names a packet.

use fjord_media::format::{MAX_RTP_PAYLOAD, plan};

/// Plans `data` (errors are fine, panics are not) and checks the plan.
pub fn check(data: &[u8]) {
    let Ok(p) = plan(data, &Default::default(), &mut |_, _| {}) else {
        return;
    };
    for t in &p.tracks {
        let mut last = 0;
        for r in &t.packets {
            assert!(r.file_end() <= data.len() as u64);
            assert!(r.payload_len() <= MAX_RTP_PAYLOAD);
            assert!(r.send_time_ns >= last);
            last = r.send_time_ns;
        }
        assert!(t.sync.iter().all(|s| (s.packet as usize) < t.packets.len()));
    }
}

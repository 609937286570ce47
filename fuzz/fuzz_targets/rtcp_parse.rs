//! `parse_compound` on arbitrary bytes: never panics, output bounded.
#![no_main]

use fjord_proto::rtcp::{MAX_RTCP_PACKETS, RtcpInfo, parse_compound};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(items) = parse_compound(data) {
        assert!(items.len() <= MAX_RTCP_PACKETS);
        for item in items {
            if let RtcpInfo::ReceiverReport { blocks, .. } = item {
                assert!(blocks.len() <= 31);
            }
        }
    }
    let _ = fjord_proto::rtp::parse(data);
});

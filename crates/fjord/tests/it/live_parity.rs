//! Parity of a growing recording (`docs/live.md`, `fjord_fec::growing`):
//! while GStreamer's MPEG-TS stream is recorded, a viewer of the recording
//! that asks for repair streams gets them, and `fjord play`, dropping a
//! tenth of what it receives, rebuilds the lost packets bit-exact from
//! them: its output is the published TS. The recording's parity file
//! grows in place as later snapshots add blocks.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::common::{Server, TS};
use crate::fec::{assert_source_minus_packets, play_url};
use crate::live_publishers::{CONFIG, end_of, publish_ts, recording};

const K: u64 = 12;

#[test]
fn a_growing_recordings_repair_streams_rebuild_lost_packets_bit_exact() {
    let server = Server::start(&format!("fec = \"{K}:8\"\n{CONFIG}"));
    let sent = server.root.path().join("published.ts");
    let mut publisher = publish_ts(&server, "live/fecrec", 400, Some(&sent));
    server.wait_for_log("live stream recorded", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(3));
    let url = server.url("live/fecrec/latest.ts");
    let describe = || {
        let mut c = fjord_client::RtspClient::connect(&url).unwrap();
        let sdp = c.describe_fec().unwrap().sdp;
        assert!(sdp.contains("a=group:FEC-FR S1 R1\r\n"), "{sdp}");
        assert!(sdp.contains(&format!("k={K}; repair=8;")), "{sdp}");
        let parity = recording(&server.media_root(), "live/fecrec", "fjfec");
        std::fs::metadata(&parity).unwrap()
    };
    let before = describe();
    let out = tempfile::tempdir().unwrap();
    let first = play_url(
        &url,
        out.path(),
        "first.ts",
        &["--drop", "0.1", "--seed", "5"],
    );
    let after = describe();
    assert_eq!(after.ino(), before.ino(), "the parity grows in place");
    assert!(after.len() > before.len(), "a later snapshot adds blocks");
    let later = play_url(
        &url,
        out.path(),
        "later.ts",
        &["--drop", "0.1", "--seed", "6"],
    );
    assert!(
        later.1.len() > first.1.len(),
        "the later snapshot holds more"
    );

    end_of(&mut publisher);
    let ts = std::fs::read(&sent).unwrap();
    for (what, (report, got)) in [("first", first), ("later", later)] {
        let lost = report.get("unrecoverable");
        assert!(report.get("dropped") > 5, "{what}: {}", report.text);
        assert!(report.get("recovered") > 0, "{what}: {}", report.text);
        // Only the unfinished last block of the snapshot has no parity.
        assert!(lost < K, "{what}: {}", report.text);
        let want = &ts[..(got.len() + lost as usize * 7 * TS).min(ts.len())];
        assert_source_minus_packets(want, &got, lost, what);
    }
}

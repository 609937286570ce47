//! Prefabricated packets: each packet is its RTP header and payload as a
//! session would build them, back to back; a packet file is used only with
//! the index it was made from, and a damaged one is refused.

mod synth;

use std::path::Path;

use fjord_media::{
    Index, TsOptions,
    index::index_path_for,
    ingest_file, no_parity,
    prefab::{self, Prefab, PrefabError, prefab_path_for},
    synthetic::write_constant_rate,
};

fn prefabricate(media: &Path) -> (Index, Vec<u8>) {
    prefab::prefabricate(media, &mut |_, _| {}).unwrap();
    let index = Index::open(&index_path_for(media)).unwrap();
    (index, std::fs::read(prefab_path_for(media)).unwrap())
}

#[test]
fn packets_are_header_and_payload_back_to_back() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("t.ts");
    write_constant_rate(&media, 188, 10_000_000, 300, &no_parity).unwrap();
    let (index, bytes) = prefabricate(&media);
    let data = std::fs::read(&media).unwrap();
    let p = Prefab::parse(&bytes[..], &index).unwrap();
    let track = index.track(0).unwrap();
    let pt = p.track(0).unwrap();
    let ids = pt.ids;
    for i in 0..track.packet_count() {
        let rec = track.packet(i).unwrap();
        let (offset, pkt) = pt.packet(i).unwrap();
        assert_eq!(&bytes[offset as usize..][..pkt.len()], pkt);
        assert_eq!(pkt[0], 0x80);
        assert_eq!(pkt[1] & 0x7f, track.payload_type());
        let seq = u16::from_be_bytes([pkt[2], pkt[3]]);
        assert_eq!(
            seq,
            ids.seq0.wrapping_add(i as u16),
            "packet {i}: sequence wraps with i"
        );
        assert_eq!(
            u32::from_be_bytes(pkt[4..8].try_into().unwrap()),
            ids.ts0.wrapping_add(rec.rtp_ts)
        );
        assert_eq!(u32::from_be_bytes(pkt[8..12].try_into().unwrap()), ids.ssrc);
        assert_eq!(&pkt[12..], &data[rec.offset as usize..][..rec.len as usize]);
    }
    // Consecutive packets are adjacent: a burst is one run of the file.
    for i in 1..track.packet_count() {
        let (prev, p) = (pt.packet(i - 1).unwrap(), pt.packet(i).unwrap());
        assert_eq!(prev.0 + prev.1.len() as u64, p.0, "packet {i}");
    }
    assert!(pt.packet(track.packet_count()).is_none());
    // Made again from the same index: the same file.
    let (_, again) = prefabricate(&media);
    assert_eq!(again, bytes);
}

#[test]
fn a_packet_file_of_another_index_or_damaged_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("t.ts");
    std::fs::write(&media, synth::Stream::default().cbr(0)).unwrap();
    let opts = |n| TsOptions {
        ts_per_rtp: n,
        ..Default::default()
    };
    ingest_file(&media, &opts(7), &no_parity, &mut |_, _| {}).unwrap();
    let (index, bytes) = prefabricate(&media);
    assert!(Prefab::parse(&bytes[..], &index).is_ok());

    // Re-ingested another way: the old packets are not this index's.
    ingest_file(&media, &opts(4), &no_parity, &mut |_, _| {}).unwrap();
    let other = Index::open(&index_path_for(&media)).unwrap();
    assert!(matches!(
        Prefab::parse(&bytes[..], &other),
        Err(PrefabError::OtherIndex)
    ));
    let err = prefab::open(&prefab_path_for(&media), &other).unwrap_err();
    assert!(err.to_string().contains("fjord ingest"), "{err}");

    // Truncated, a length changed, not ours, another version.
    let truncated = &bytes[..bytes.len() - 1];
    assert!(matches!(
        Prefab::parse(truncated, &index),
        Err(PrefabError::Corrupt(_))
    ));
    let mut bad = bytes.clone();
    let table = u64::from_le_bytes(bad[80..88].try_into().unwrap()) as usize;
    let second = &mut bad[table + 8..table + 16];
    let v = u64::from_le_bytes(second.try_into().unwrap()) + 1;
    second.copy_from_slice(&v.to_le_bytes());
    assert!(matches!(
        Prefab::parse(&bad[..], &index),
        Err(PrefabError::Corrupt(_))
    ));
    // Loaded unverified (header only), the same damage is found by verify,
    // and packets are read bounded meanwhile.
    let loaded = Prefab::parse_unverified(&bad[..], &index).unwrap();
    assert!(loaded.track(0).unwrap().packet(1).is_some());
    assert!(matches!(
        loaded.verify(&index, &mut |_| Ok(())),
        Err(PrefabError::Corrupt(_))
    ));
    let mut huge = bytes.clone();
    huge[table + 8..table + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let loaded = Prefab::parse_unverified(&huge[..], &index).unwrap();
    assert_eq!(loaded.track(0).unwrap().packet(0), None);
    assert!(
        Prefab::parse_unverified(truncated, &index).is_err(),
        "the header's length is checked on load"
    );
    let mut magic = bytes.clone();
    magic[0] ^= 1;
    assert!(matches!(
        Prefab::parse(&magic[..], &index),
        Err(PrefabError::Magic)
    ));
    let mut version = bytes.clone();
    version[8] = 9;
    assert!(matches!(
        Prefab::parse(&version[..], &index),
        Err(PrefabError::Version { found: 9 })
    ));

    // Removed when a title is ingested without packets.
    prefab::remove(&media).unwrap();
    assert!(!prefab_path_for(&media).exists());
    prefab::remove(&media).unwrap();
}

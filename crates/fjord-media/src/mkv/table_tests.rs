use proptest::prelude::*;

use super::*;
use crate::mkv::testfile::*;

/// A WebM file of VP8 and Opus in two clusters: key frames flagged, the
/// frames' first bytes what the codecs read.
fn webm() -> Vec<u8> {
    let opus = [0xfc, 1, 2, 3];
    let mut vp8 = vec![0x55u8; 300];
    vp8[0] = 0x10;
    let c1 = cluster(
        0,
        &[
            simple_block(1, 0, true, &vp8),
            simple_block(2, 0, true, &opus),
            simple_block(1, 40, false, &[0x11, 9, 9]),
        ],
    );
    let c2 = cluster(
        80,
        &[
            simple_block(1, 0, true, &vp8),
            simple_block(2, 0, true, &opus),
        ],
    );
    let tracks = [
        track(1, 1, "V_VP8", b""),
        track(2, 2, "A_OPUS", &opus_head(2)),
    ];
    file("webm", &tracks, &[c1, c2])
}

fn table_of(data: &[u8]) -> Table {
    Table::parse(&of_media(data).unwrap().expect("a table")).unwrap()
}

#[test]
fn a_table_gives_the_files_frames_from_its_head_alone() {
    let data = webm();
    let whole = demux::demux(&data, &mut |_| {}).unwrap();
    let t = table_of(&data);
    assert_eq!(t.frames, whole.frames);
    assert_eq!(t.frames[1][0].lead, [0xfc, 1]);
    // Only the head read: the rest zeros.
    let mut holed = vec![0u8; data.len()];
    assert_eq!(t.head(), 0..whole.clusters_at.unwrap());
    let head = t.head().end as usize;
    holed[..head].copy_from_slice(&data[..head]);
    let d = t.demuxed(&holed).unwrap();
    assert_eq!(
        (d.tracks, d.frames, d.doc_type),
        (whole.tracks, whole.frames, whole.doc_type)
    );
}

#[test]
fn a_table_of_another_file_is_refused() {
    let data = webm();
    let t = table_of(&data);
    let mut other = data.clone();
    other[20] ^= 1;
    assert_eq!(
        t.demuxed(&other).unwrap_err(),
        TableError::Other("its head differs")
    );
    assert_eq!(
        t.demuxed(&data[..data.len() - 1]).unwrap_err(),
        TableError::Other("its length differs")
    );
    assert!(of_media(b"not matroska").unwrap().is_none());
}

#[test]
fn a_damaged_table_is_refused_with_its_reason() {
    let bytes = of_media(&webm()).unwrap().unwrap();
    let mut flipped = bytes.clone();
    flipped[40] ^= 0x20;
    assert_eq!(Table::parse(&flipped), Err(TableError::Checksum));
    let mut newer = bytes.clone();
    newer[8] = 2;
    assert_eq!(Table::parse(&newer), Err(TableError::Version(2)));
    assert_eq!(
        Table::parse(b"FJFRX\r\n\x1a\x01\0\0\0"),
        Err(TableError::Magic)
    );
    assert_eq!(Table::parse(&bytes[..20]), Err(TableError::Short));
}

/// A table whose checksum holds but whose frames lie outside its media.
#[test]
fn frames_outside_the_media_are_refused() {
    let data = webm();
    let mut t = table_of(&data);
    t.media_len = 100;
    t.head_len = 50;
    assert_eq!(
        Table::parse(&t.to_bytes()),
        Err(TableError::Malformed("a frame outside the media"))
    );
}

fn frame() -> impl Strategy<Value = Frame> {
    (
        any::<i64>(),
        0u64..1 << 40,
        1u32..,
        any::<bool>(),
        any::<bool>(),
        any::<[u8; 2]>(),
    )
        .prop_map(|(time_ns, offset, size, key, laced, lead)| Frame {
            time_ns,
            offset,
            size,
            key,
            laced,
            lead,
        })
}

proptest! {
    #[test]
    fn any_table_reads_back_as_written(
        frames in proptest::collection::vec(proptest::collection::vec(frame(), 0..40), 0..4),
        head_len in 0u64..1000,
    ) {
        let t = Table {
            media_len: 1 << 42,
            head_len,
            head_hash: [7; 32],
            numbers: (1..=frames.len() as u64).collect(),
            frames,
        };
        prop_assert_eq!(Table::parse(&t.to_bytes()), Ok(t));
    }

    #[test]
    fn any_bytes_parse_or_not_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Table::parse(&b);
    }

    /// Past the checksum (rewritten to hold): body bytes changed anyhow
    /// read as some table or an error, never a panic or a frame outside.
    #[test]
    fn any_body_with_a_right_checksum_parses_or_not(at in 12usize..400, to in any::<u8>()) {
        let bytes = of_media(&webm()).unwrap().unwrap();
        let mut body = bytes[..bytes.len() - 32].to_vec();
        let at = at % body.len();
        body[at] = to;
        let sum = blake3::hash(&body);
        body.extend_from_slice(sum.as_bytes());
        if let Ok(t) = Table::parse(&body) {
            for f in t.frames.iter().flatten() {
                prop_assert!(f.offset + u64::from(f.size) <= t.media_len);
            }
        }
    }
}

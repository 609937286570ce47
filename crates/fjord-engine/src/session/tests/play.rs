//! PLAY, PAUSE, seeks, trick play, loops and where a PLAY stops.

use super::*;

#[test]
fn pause_resume_and_seek_continue_the_sequence_and_the_rtp_clock() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 0);
    assert_eq!(tick(&mut s, t0, usize::MAX).0.len(), 2);
    s.pause(t0 + Duration::from_millis(15));
    assert_eq!(
        tick(&mut s, t0 + Duration::from_secs(1), usize::MAX),
        (vec![], None)
    );

    // Resumes where the clock stopped: packet 2 (due at 20 ms) is next.
    let info = s.play(Start::Resume, Until::Previous, 1, Instant::now());
    assert_eq!((info.packet, info.seq, info.time_ns), (2, 0, 15 * MS));
    assert_eq!(info.rtptime, (u32::MAX - 100).wrapping_add(1350));
    let t1 = t0 + Duration::from_secs(2);
    s.start(t1, info.time_ns);
    let (c, wake) = tick(&mut s, t1, usize::MAX);
    assert_eq!(c[0], (0, (u32::MAX - 100).wrapping_add(1800), vec![2; 188]));
    assert_eq!(c.len(), 2, "20 and 30 ms are within the burst of 15 ms");
    assert_eq!(
        wake,
        Some(t1 + Duration::from_millis(25) - Duration::from_millis(15) / 4)
    );

    // A seek on a track without sync points enters at the first packet
    // at or after the time. Packets 0-3 have left: packet 8 goes on
    // with the next sequence number, and the RTP clock goes on from
    // where the stream stands (40 ms) as if 75 ms followed.
    let info = s.play(
        Start::at(&s.title.clone(), 0, 75 * MS),
        Until::Previous,
        1,
        t1 + Duration::from_millis(25),
    );
    assert_eq!((info.packet, info.seq), (8, 65534u16.wrapping_add(4)));
    let cut = (u32::MAX - 100).wrapping_add(40 * 90);
    assert_eq!(info.rtptime, cut);
    s.start(t1, info.time_ns);
    let (d, _) = tick(&mut s, t1, usize::MAX);
    assert_eq!(d.last().unwrap().2, vec![9; 188]);
    assert_eq!(d[0].0, info.seq, "RTP-Info names the first packet's number");
    assert_eq!(
        d[0].1,
        cut.wrapping_add(5 * 90),
        "packet 8 is 5 ms after 75 ms"
    );
    assert_eq!(d[1].0, info.seq.wrapping_add(1));
}

/// The packet file's headers number the title's packets in order: a
/// session that seeks after packets have left builds its own headers,
/// numbered on from the last one sent, over the same payloads.
#[test]
fn a_seek_after_packets_left_builds_headers_that_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (title, expected) = prefabricated_title(dir.path());
    let ids = title.prefab_ids(0).unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title.clone(), &rtcp);
    (s.ssrc, s.seq0, s.ts0) = (ids.ssrc, ids.seq0, ids.ts0);
    s.prefab = true;
    let at = |ms: u64| Start::At {
        ns: ms * MS,
        packet: (ms / 10) as u32,
    };
    s.play(at(20), Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 20 * MS);
    let (first, _) = tick(&mut s, t0, usize::MAX);
    assert_eq!(first.len(), 2, "packets 2 and 3 (the burst is 15 ms)");
    assert!(s.prefab, "a first PLAY at a position sends the packet file");

    let info = s.play(at(80), Until::Previous, 1, t0 + Duration::from_millis(20));
    assert!(!s.prefab);
    assert_eq!((info.packet, info.seq), (8, ids.seq0.wrapping_add(4)));
    s.start(t0, 80 * MS);
    let mut batch = Batch::default();
    assert_eq!(
        s.collect(t0, Duration::from_millis(15), true, &mut batch)
            .source,
        2
    );
    for (k, p) in batch.packets.iter().enumerate() {
        assert!(!p.head().is_empty(), "packet {k} has a built header");
        let (seq, ts, payload) = sent_packet(p);
        assert_eq!(seq, info.seq.wrapping_add(k as u16));
        assert_eq!(ts, info.rtptime.wrapping_add(k as u32 * 900));
        assert_eq!(payload, expected[8 + k]);
    }
}

/// A broadcast channel: packets 2..5 over and over, each time with the
/// packet file's own headers, at a tenth of real time.
#[test]
fn a_loop_repeats_its_packets_as_stored_at_its_speed() {
    let dir = tempfile::tempdir().unwrap();
    let (title, expected) = prefabricated_title(dir.path());
    let ids = title.prefab_ids(0).unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title.clone(), &rtcp);
    (s.ssrc, s.seq0, s.ts0) = (ids.ssrc, ids.seq0, ids.ts0);
    s.prefab = true;
    s.set_speed(REAL_TIME / 10);
    let start = Start::At {
        ns: 20 * MS,
        packet: 2,
    };
    let until = Until::Loop {
        ns: 50 * MS,
        packet: 5,
        period: Duration::ZERO,
    };
    s.play(start, until, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 20 * MS);
    let mut got = Vec::new();
    let mut now = t0;
    // 10 ms of title time per packet take 100 ms at a tenth of speed.
    while now < t0 + Duration::from_millis(700) {
        let (sent, _) = tick(&mut s, now, usize::MAX);
        got.extend(sent.into_iter().map(|(seq, _, payload)| (seq, payload)));
        now += Duration::from_millis(20);
    }
    assert!(s.prefab, "a loop keeps the stored headers");
    let want: Vec<(u16, Vec<u8>)> = [2, 3, 4, 2, 3, 4, 2]
        .iter()
        .map(|&i| (ids.seq0.wrapping_add(i as u16), expected[i].clone()))
        .collect();
    assert_eq!(got, want, "seven packets in 700 ms, round and round");
}

/// A paced channel: packets 2..5 at 0, 5 and 30 ms of each round, a
/// round every 100 ms, whatever their media times.
#[test]
fn a_paced_loop_sends_at_its_offsets_each_period() {
    let dir = tempfile::tempdir().unwrap();
    let (title, _) = prefabricated_title(dir.path());
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title.clone(), &rtcp);
    s.pace(2, vec![0, 5 * MS, 30 * MS].into_boxed_slice());
    let start = Start::At {
        ns: 20 * MS,
        packet: 2,
    };
    let until = Until::Loop {
        ns: 20 * MS + 31 * MS,
        packet: 5,
        period: Duration::from_millis(100),
    };
    s.play(start, until, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 20 * MS);
    let mut sent_at = Vec::new();
    for ms in 0..250 {
        let now = t0 + Duration::from_millis(ms);
        let (sent, _) = tick(&mut s, now, usize::MAX);
        sent_at.extend(sent.iter().map(|_| ms));
    }
    // A packet leaves up to a burst (15 ms) early: by its due time.
    let due = [0, 5, 30, 100, 105, 130, 200, 205, 230];
    assert_eq!(sent_at.len(), due.len(), "{sent_at:?}");
    for (at, due) in sent_at.iter().zip(due) {
        assert!(
            *at <= due && due < at + 16,
            "sent at {at} ms, due {due}: {sent_at:?}"
        );
    }
}

#[test]
fn trick_play_sends_key_frames_and_the_stream_goes_on_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let (media, index) = crate::trick::tests::gop_title(dir.path());
    let title = Arc::new(Title::new(index, &media).unwrap());
    let sync = |s: usize| title.index().track(0).unwrap().sync_point(s).unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title.clone(), &rtcp);
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 0);
    let (first, _) = tick(&mut s, t0, usize::MAX);
    assert_eq!(first.len(), 10, "the first key frame");

    let at = |k: usize| Start::At {
        ns: sync(k).time_ns,
        packet: sync(k).packet,
    };
    let info = s.play(at(2), Until::End, 4, t0 + Duration::from_millis(20));
    assert_eq!(
        info.seq,
        65534u16.wrapping_add(10),
        "on from the last packet sent"
    );
    assert_eq!(info.time_ns, sync(2).time_ns);
    let t1 = t0 + Duration::from_millis(40);
    s.start(t1, info.time_ns);
    let mut got = vec![];
    for ms in (0..2_000).step_by(5) {
        let (sent, _) = tick(&mut s, t1 + Duration::from_millis(ms), usize::MAX);
        got.extend(sent.into_iter().map(|p| (ms, p)));
    }
    // Key frames 2..9 (10 packets each), a quarter second apart.
    assert_eq!(got.len(), 80);
    for (n, (ms, (seq, ts, payload))) in got.iter().enumerate() {
        let (frame, k) = (2 + n / 10, n % 10);
        let packet = sync(frame).packet as usize + k;
        assert_eq!(payload[0], packet as u8, "packet {n}: key frame {frame}");
        assert_eq!(*seq, info.seq.wrapping_add(n as u16));
        let due_ms = (frame as u64 - 2) * 250;
        assert!(
            *ms + 15 >= due_ms && *ms <= due_ms + 250,
            "{n} left at {ms}"
        );
        let ticks = (frame as u32 - 2) * 250 * 90;
        assert_eq!(*ts, info.rtptime.wrapping_add(ticks));
    }

    // Back to every packet from 5 s: the numbers go on.
    let back = s.play(at(5), Until::End, 1, t1 + Duration::from_secs(2));
    assert_eq!(back.seq, info.seq.wrapping_add(80));
    let t2 = t1 + Duration::from_secs(3);
    s.start(t2, back.time_ns);
    let (sent, _) = tick(&mut s, t2, usize::MAX);
    let first = &sent[0];
    assert_eq!((first.0, first.2[0]), (back.seq, sync(5).packet as u8));
    assert_eq!(sent.len(), 10, "the key frame only (a 15 ms burst)");
}

#[test]
fn end_of_stream_sends_a_sender_report_with_bye() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    let t0 = Instant::now();
    s.start(t0, 0);
    let (all, wake) = tick(&mut s, t0 + Duration::from_millis(90), usize::MAX);
    assert_eq!(all.len(), 10);
    let wake = wake.unwrap();
    assert_eq!(wake, t0 + Duration::from_millis(90) + BYE_DELAY);
    let mut buf = [0u8; 512];
    let n = rtcp.recv(&mut buf).unwrap();
    let first = parse_compound(&buf[..n]).unwrap();
    assert!(matches!(
        first[0],
        RtcpInfo::SenderReport {
            packets: 10,
            octets: 1880,
            ..
        }
    ));
    assert_eq!(tick(&mut s, wake, usize::MAX).1, None);
    let n = rtcp.recv(&mut buf).unwrap();
    let last = parse_compound(&buf[..n]).unwrap();
    assert!(last.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })));
}

/// `Range: npt=a-b`: the stream ends with BYE at b, a PLAY without a
/// Range keeps that end, and one with an open end plays to the end.
#[test]
fn a_range_end_stops_the_stream_there() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    rtcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    let title = s.title.clone();
    let info = s.play(
        Start::at(&title, 0, 20 * MS),
        Until::at(&title, 0, 55 * MS),
        1,
        Instant::now(),
    );
    assert_eq!((info.packet, info.end_ns), (2, 55 * MS));
    let t0 = Instant::now();
    s.start(t0, 20 * MS);
    let (c, _) = tick(&mut s, t0, usize::MAX);
    assert_eq!(c.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [2, 3]);
    s.pause(t0 + Duration::from_millis(12));
    s.play(Start::Resume, Until::Previous, 1, Instant::now());
    s.start(t0, 32 * MS);
    let late = t0 + Duration::from_secs(1);
    let (c, wake) = tick(&mut s, late, usize::MAX);
    let sent: Vec<u8> = c.iter().map(|p| p.2[0]).collect();
    assert_eq!(sent, [4, 5], "packet 6 (60 ms) is past the end");
    assert_eq!(wake, Some(late + BYE_DELAY));
    assert_eq!(tick(&mut s, late + BYE_DELAY, usize::MAX).1, None);
    let mut buf = [0u8; 512];
    let bye = (0..3).any(|_| {
        let n = rtcp.recv(&mut buf).unwrap_or(0);
        parse_compound(&buf[..n]).is_ok_and(|r| r.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })))
    });
    assert!(bye, "BYE at the range's end");

    let info = s.play(Start::at(&title, 0, 70 * MS), Until::End, 1, Instant::now());
    assert_eq!(info.end_ns, title.index().duration_ns());
    s.start(late, 70 * MS);
    let (c, _) = tick(&mut s, late + Duration::from_secs(1), usize::MAX);
    assert_eq!(c.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [7, 8, 9]);
}

/// A PLAY that comes while one plays to a given end waits for that end
/// and goes on there on the same clock, the sequence numbers and RTP
/// time as its reply predicted; no BYE between the two.
#[test]
fn a_pipelined_play_goes_on_where_the_playing_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    let title = s.title.clone();
    s.play(
        Start::Resume,
        Until::at(&title, 0, 30 * MS),
        1,
        Instant::now(),
    );
    let t0 = Instant::now();
    s.start(t0, 0);
    let next = s
        .queue(Start::at(&title, 0, 60 * MS), Until::End)
        .expect("queued behind the range playing");
    assert!(next.queued);
    assert_eq!((next.packet, next.seq), (6, 65534u16.wrapping_add(3)));
    let mut sent = vec![];
    let mut at = t0;
    while let (c, Some(wake)) = tick(&mut s, at, usize::MAX) {
        sent.extend(c);
        at = wake.max(at + Duration::from_millis(1));
    }
    let ids: Vec<u8> = sent.iter().map(|p| p.2[0]).collect();
    assert_eq!(ids, [0, 1, 2, 6, 7, 8, 9]);
    let seqs: Vec<u16> = sent.iter().map(|p| p.0).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0].wrapping_add(1)),
        "{seqs:?}"
    );
    assert_eq!(
        sent[3].1, next.rtptime,
        "packet 6 has the RTP time the reply named"
    );
    assert_eq!(
        sent[3].1.wrapping_sub(sent[2].1),
        10 * 90,
        "10 ms after packet 2"
    );
    let mut buf = [0u8; 512];
    rtcp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut byes = 0;
    while let Ok(n) = rtcp.recv(&mut buf) {
        let bye = parse_compound(&buf[..n])
            .is_ok_and(|r| r.iter().any(|i| matches!(i, RtcpInfo::Bye { .. })));
        byes += usize::from(bye);
    }
    assert_eq!(byes, 1, "one BYE, at the end of the second range");
    assert!(
        s.queue(Start::at(&title, 0, 0), Until::End).is_none(),
        "nothing is queued behind an ended stream"
    );
}

/// A PAUSE with a Range stops the stream at its pause point without
/// BYE; a PLAY then plays on to the range's own end.
#[test]
fn a_pause_point_stops_the_stream_there_and_play_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let rtcp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut s = session(title(dir.path()), &rtcp);
    let title = s.title.clone();
    s.play(
        Start::Resume,
        Until::at(&title, 0, 80 * MS),
        1,
        Instant::now(),
    );
    let t0 = Instant::now();
    s.start(t0, 0);
    assert!(!s.pause_at(0, 0, t0 + Duration::from_millis(20)), "behind");
    assert!(s.pause_at(4, 40 * MS, t0));
    let mut sent = vec![];
    let mut at = t0;
    while let (c, Some(wake)) = tick(&mut s, at, usize::MAX) {
        sent.extend(c);
        at = wake.max(at + Duration::from_millis(1));
    }
    assert_eq!(
        sent.iter().map(|p| p.2[0]).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(s.position_at(at), 40 * MS);
    let info = s.play(Start::Resume, Until::Previous, 1, at);
    assert_eq!((info.packet, info.end_ns), (4, 80 * MS));
    s.start(at, info.time_ns);
    let (c, _) = tick(&mut s, at + Duration::from_secs(1), usize::MAX);
    assert_eq!(c.iter().map(|p| p.2[0]).collect::<Vec<_>>(), [4, 5, 6, 7]);
}

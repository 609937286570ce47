//! The engine's hot path allocates nothing: once sessions are playing, no
//! tick, batch or send calls the allocator. A counting global allocator
//! watches the whole process while 20 sessions stream.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    backtrace::Backtrace,
    cell::Cell,
    net::UdpSocket,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use fjord_engine::{
    Command, Engine, EngineConfig, Output, SessionSpec, Start, Title, UdpSocket as UdpSocket2,
    Until, datapath,
};
use fjord_media::{
    plan::PacketRecord,
    synthetic::{write_constant_rate, write_video_track},
};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Whether an allocation now is one the test fails on.
static WATCHING: AtomicBool = AtomicBool::new(false);
/// Where the first allocation while watching came from, for the failure
/// message (frames resolved only when printed).
static FIRST: Mutex<Option<(String, Backtrace)>> = Mutex::new(None);

thread_local! {
    /// Set while the allocator records a backtrace (which allocates).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if RECORDING.get() {
        return;
    }
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if WATCHING.load(Ordering::Relaxed) {
        RECORDING.set(true);
        let mut first = FIRST.lock().unwrap();
        if first.is_none() {
            let thread = std::thread::current().name().unwrap_or("?").to_string();
            *first = Some((thread, Backtrace::force_capture()));
        }
        drop(first);
        RECORDING.set(false);
    }
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A 4.5 Mbit/s title: 1316-byte packets every 2.34 ms for 20 s, as `name`,
/// with prefabricated packets when `prefab`.
fn title(dir: &std::path::Path, name: &str, prefab: bool) -> Arc<Title> {
    let media = dir.join(name);
    let index =
        write_constant_rate(&media, 1316, 2_339_000, 8_550, &fjord_media::no_parity).unwrap();
    let mut title = Title::new(index, &media).unwrap();
    if prefab {
        fjord_media::prefab::prefabricate(&media, &mut |_, _| {}).unwrap();
        title
            .attach_prefab(
                &fjord_media::prefab::prefab_path_for(&media),
                fjord_media::index::Check::Now,
            )
            .unwrap();
    }
    Arc::new(title)
}

/// The same rate in the elementary-stream shape: 2- to 8-byte payload
/// headers, runs at odd and even offsets, every third packet in two runs.
fn prefixed_title(dir: &std::path::Path) -> Arc<Title> {
    const PACKETS: u64 = 8_550;
    let media = dir.join("t.h264");
    let data: Vec<u8> = (0..PACKETS * 1400).map(|i| i as u8).collect();
    let packets = (0..PACKETS)
        .map(|i| {
            let split = i % 3 == 0;
            PacketRecord {
                skip: if split { 50 } else { 0 },
                len2: if split { 100 } else { 0 },
                ..PacketRecord::file_run(i * 2_339_000, (i * 210) as u32, i * 1400 + i % 2, 1200)
                    .with_prefix(&[0x7c; 8][..2 + (i % 7) as usize])
            }
        })
        .collect();
    let index = write_video_track(&media, &data, packets, PACKETS * 2_339_000).unwrap();
    Arc::new(Title::new(index, &media).unwrap())
}

#[test]
fn streaming_sessions_allocate_nothing_per_packet() {
    let dir = tempfile::tempdir().unwrap();
    // MPEG-TS-shaped packets, prefixed and split ones, prefabricated ones.
    let titles = [
        title(dir.path(), "t.ts", false),
        prefixed_title(dir.path()),
        title(dir.path(), "p.ts", true),
    ];
    for &path in datapath::NAMES {
        let engine = Engine::start(EngineConfig {
            threads: 1,
            burst: Duration::from_millis(10),
            rtcp_interval: Duration::from_millis(300),
            cname: "test".into(),
            datapath: path.into(),
            cpus: vec![],
            realtime: false,
            stall_timeout: Duration::from_secs(10),
            storage: None,
        })
        .unwrap();
        let receivers: Vec<UdpSocket> = (0..20)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let udp = || socket2::Socket::from(UdpSocket::bind("127.0.0.1:0").unwrap());
        // Every other session sends from one shared unconnected socket
        // (the paths that can address each message).
        let shared = std::sync::Arc::new(udp());
        datapath::prepare_shared(&shared).unwrap();
        for (i, rx) in receivers.iter().enumerate() {
            let rtp = if i % 4 >= 2 && datapath::addresses_each_message(path) {
                UdpSocket2::Shared(shared.clone())
            } else {
                let rtp = udp();
                rtp.connect(&rx.local_addr().unwrap().into()).unwrap();
                rtp.set_nonblocking(true).unwrap();
                rtp.into()
            };
            let id = i as u64 + 1;
            let title = titles[i % 3].clone();
            let ids = title.prefab_ids(0);
            engine.send(
                id,
                Command::Add(Box::new(SessionSpec {
                    id,
                    title,
                    track: 0,
                    ssrc: ids.map_or(i as u32, |p| p.ssrc),
                    seq0: ids.map_or(0, |p| p.seq0),
                    ts0: ids.map_or(0, |p| p.ts0),
                    output: Output::Udp {
                        rtp,
                        rtp_peer: rx.local_addr().unwrap(),
                        rtcp: udp().into(),
                        rtcp_peer: rx.local_addr().unwrap(),
                    },
                })),
            );
            engine.send(
                id,
                Command::Play {
                    id,
                    start: Start::Resume,
                    until: Until::Previous,
                    scale: 1,
                    speed: fjord_engine::REAL_TIME,
                    queue: false,
                    reply: Box::new(|_| {}),
                },
            );
            engine.send(
                id,
                Command::Start {
                    id,
                    at: std::time::Instant::now(),
                    origin_ns: 0,
                },
            );
        }
        // Warm up: buffers reach their working size, lazy statics settle.
        std::thread::sleep(Duration::from_millis(800));
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        WATCHING.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(600));
        WATCHING.store(false, Ordering::Relaxed);
        let during = ALLOCATIONS.load(Ordering::Relaxed) - before;
        let first = FIRST.lock().unwrap().take();
        for rx in &receivers {
            rx.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 2048];
            let mut got = 0;
            while rx.recv(&mut buf).is_ok() {
                got += 1;
            }
            assert!(
                got > 50,
                "{path}: sessions are streaming ({got} packets buffered)"
            );
        }
        let (thread, trace) = first.unzip();
        assert_eq!(
            during,
            0,
            "{path}: allocations while 20 sessions streamed for 0.6 s; the first, on thread {}:\n{}",
            thread.unwrap_or_default(),
            trace.map(|t| t.to_string()).unwrap_or_default(),
        );
        engine.shutdown();
    }
}

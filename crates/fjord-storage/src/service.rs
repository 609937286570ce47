//! The storage service: per disk, worker threads that keep every playing
//! session's next seconds resident, earliest deadline first.
//!
//! Each registered session (a [`ReadAhead`]) is looked at when its
//! resident lead is about to fall to its disk's `low` ([`crate::lead`]),
//! when the engine moves it (PLAY, PAUSE), or when a refill of it finished.
//! A refill pins the bytes of the next packets a read past `low`
//! ([`crate::pin`]), a grant per chunk's worth, and then widens the
//! session's window; what the session has passed is released, and what a
//! paused one does not need soon. Every finished refill tells its disk's
//! model ([`crate::disk_lead`]) how long it queued and read. A session whose title changed on disk
//! or could not be read is marked failed, and its engine thread ends it.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, VecDeque},
    io,
    ops::Range,
    os::fd::RawFd,
    sync::{
        Arc, Condvar, Mutex, MutexGuard,
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
    },
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, Sender};

use crate::{
    admission::{Charge, Ledger, Refusal},
    cursor::{Cursor, Mode, REAL_TIME},
    disk_lead::DiskLead,
    disk_model::Estimate,
    lead::LeadConfig,
    pin::{Backing, CHUNK, ChunkKey, PinError, Pins},
    sched::{self, Scheduler, Ticket},
    signal::Signal,
    source::{Extent, Source, Uses},
    still::Still,
    timeline::{
        Rate, bytes_per_packet, learned_rate, packet_at_or_after, packets_in, piece_packets,
        tables_reach, title_bytes_per_s,
    },
};

mod dispatch;

#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// How far ahead of a playing session its packets are kept resident:
    /// from its disk's recent latency, within bounds ([`crate::lead`]).
    pub lead: LeadConfig,
    /// The first read of a session at a new position: small, so its first
    /// packet leaves soon; the rest follows at once.
    pub first_read: Duration,
    /// Bytes of pinned read-ahead at most (see [`crate::default_budget`]).
    pub budget: u64,
    /// Seconds at the start of every loaded title kept resident.
    pub head: Duration,
    /// Reads in flight per disk.
    pub workers_per_disk: usize,
    /// Bytes per second each disk (by `st_dev`) reads, for admission;
    /// disks not listed are not limited.
    pub disk_capacity: HashMap<u64, u64>,
    /// Bytes per second the link to the origin carries, for admission of
    /// streams of titles filled from it ([`Source::filled`]); `None`: not
    /// limited.
    pub origin_capacity: Option<u64>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            lead: LeadConfig::default(),
            first_read: Duration::from_secs(1),
            budget: crate::budget::default_budget(),
            head: Duration::from_secs(2),
            workers_per_disk: 4,
            disk_capacity: HashMap::new(),
            origin_capacity: None,
        }
    }
}

/// Counters of the whole storage layer.
#[derive(Clone, Copy, Debug, Default)]
pub struct StorageStats {
    pub budget_bytes: u64,
    pub pinned_bytes: u64,
    /// Refills done and the bytes they covered.
    pub reads: u64,
    pub read_bytes: u64,
    /// Chunks the disk failed to read (EIO), whether rebuilt or not.
    pub read_errors: u64,
    /// Of those, chunks rebuilt from the title's parity: their sessions
    /// played on (the title needs `fjord repair`).
    pub repaired_chunks: u64,
    /// Refills that finished after the session would have run dry.
    pub late_reads: u64,
    /// Times a refill waited because the budget was spent.
    pub budget_waits: u64,
    /// Bytes bulk work (ingest, parity, packet files, verification) read.
    pub bulk_bytes: u64,
    /// Sessions started at a new position (PLAY, seek) whose first packets
    /// were made resident, and the longest that took, µs.
    pub first_reads: u64,
    pub first_read_max_us: u64,
    /// Sessions registered now.
    pub sessions: u64,
    /// Whether pinned pages are locked (else only populated).
    pub locked: bool,
    /// Refills waiting for a disk now, and those being read (all disks).
    pub queued_reads: u64,
    pub reading: u64,
    /// Bulk jobs waiting for their turn now.
    pub queued_bulk: u64,
    /// Chunks a refill found resident already (another session of the
    /// title held them: one copy for all), and those it had to read.
    pub chunk_hits: u64,
    pub chunk_reads: u64,
}

/// One disk's figures (see [`Storage::disk_stats`]).
#[derive(Clone, Copy, Debug)]
pub struct DiskStats {
    pub device: u64,
    /// What it reads, for admission; `None`: not known, not limited.
    pub capacity_bytes_per_s: Option<u64>,
    pub promised_bytes_per_s: u64,
    /// Its refills over the last [`crate::disk_lead::WINDOW`].
    pub measured: Estimate,
    /// The lead its sessions are refilled at now.
    pub low: Duration,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    late_reads: AtomicU64,
    budget_waits: AtomicU64,
    bulk_bytes: AtomicU64,
    first_reads: AtomicU64,
    first_read_max_us: AtomicU64,
    sessions: AtomicU64,
}

/// Handle to the storage layer; clones share it.
#[derive(Clone)]
pub struct Storage {
    inner: Arc<Inner>,
}

struct Inner {
    ledger: Mutex<Ledger>,
    /// Bytes that queued and running refills are about to pin (estimated),
    /// so that the budget holds before they finish.
    committed: AtomicU64,
    /// The most `low` the budget gives every promised stream, ns (see
    /// [`crate::lead::memory_cap`]).
    memory_cap_ns: AtomicU64,
    config: StorageConfig,
    pins: Pins,
    counters: Counters,
    disks: Mutex<HashMap<u64, Arc<Disk>>>,
}

type Channel<T> = (Sender<T>, Receiver<T>);

struct Disk {
    state: Mutex<DiskState>,
    /// Wakes the disk's workers: anything that gives them work notifies.
    wake: Signal,
    pokes: Channel<usize>,
    /// Sessions registered and not yet in `state` (id, entry): an engine
    /// thread registers its sessions, and it never takes `state`'s lock,
    /// which a storage worker may hold while the kernel runs others (a
    /// lock does not lend the waiter's priority: the engine would wait for
    /// the worker's next turn on the CPU).
    added: Channel<(usize, Entry)>,
    /// Ids of removed entries, for new ones; `next_id` when there is none.
    free: Channel<usize>,
    next_id: AtomicUsize,
    /// The origin of the scheduler's clock.
    epoch: Instant,
    lead: DiskLead,
}

struct DiskState {
    entries: Vec<Option<Entry>>,
    /// When to look at which entry next (entry, generation).
    checks: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// Refills (earliest deadline first) and bulk work, shared by DRR.
    sched: Scheduler<Tag>,
    /// The idle worker that sleeps until the next check, and until when;
    /// the others sleep until woken, so a check wakes one thread, not every
    /// worker of the disk.
    timer: Option<(Instant, usize)>,
    /// Entries whose checks are due, looked at together (kept to reuse).
    due: Vec<usize>,
}

/// What a scheduled request is for.
enum Tag {
    /// A refill of entry `id` at `generation`, committing `bytes`.
    Refill { id: usize, generation: u64 },
    /// Bulk work waiting for its turn.
    Bulk(Arc<BulkTurn>),
}

/// A bulk job's turn: set when the scheduler dispatches it.
#[derive(Default)]
struct BulkTurn {
    ticket: Mutex<Option<Ticket>>,
    given: Condvar,
}

struct Entry {
    cursor: Arc<Cursor>,
    source: Arc<dyn Source>,
    track: usize,
    uses: Uses,
    /// Pinned runs of packets, oldest first.
    grants: VecDeque<Grant>,
    /// A refill to this packet is queued or running, and the bytes it is
    /// expected to pin.
    refill: Option<(u32, u64)>,
    /// When the session moved to a position not yet resident (counted
    /// when its first read lands).
    moved: Option<Instant>,
    /// When its refill was queued.
    asked: Instant,
    /// Bytes of its files per second of title time (learned from its
    /// refills), which sizes its reads.
    bytes_per_s: u64,
    /// Bumped whenever the entry is rescheduled: stale heap entries skip.
    generation: u64,
    /// Where the engine was last seen, and since when.
    still: Still,
}

struct Grant {
    /// One past the last packet this grant covers.
    end: u32,
    chunks: Vec<ChunkKey>,
}

/// A session's read-ahead: held by the engine's session; dropping it
/// releases what was pinned for it.
pub struct ReadAhead {
    cursor: Arc<Cursor>,
    id: usize,
    disk: Arc<Disk>,
}

impl ReadAhead {
    pub fn cursor(&self) -> &Cursor {
        &self.cursor
    }

    /// The session moved or changed mode or rate: look at it now.
    pub fn position(&self, packet: u32, mode: Mode, rate: u32) {
        self.cursor.position(packet, mode, rate);
        self.disk.poke(self.id);
    }

    pub fn set_uses(&self, uses: Uses) {
        self.cursor.set_uses(uses);
        self.disk.poke(self.id);
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.cursor.set_gone();
        self.disk.poke(self.id);
    }
}

/// A stream's promise of disk bandwidth and read-ahead memory, given
/// back when it is dropped.
#[derive(Debug)]
pub struct StorageReservation {
    storage: Storage,
    charge: Charge,
}

impl Drop for StorageReservation {
    fn drop(&mut self) {
        let mut ledger = lock(&self.storage.inner.ledger);
        ledger.release(self.charge);
        self.storage.set_memory_cap(&ledger);
    }
}

/// Pinned head of a title: its tables and first seconds, while loaded.
pub struct HeadPin {
    chunks: Vec<ChunkKey>,
    storage: Storage,
    // Keeps the mappings alive while they are pinned.
    _source: Arc<dyn Source>,
}

impl Drop for HeadPin {
    fn drop(&mut self) {
        self.storage.inner.pins.unpin(&self.chunks);
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Disk {
    fn poke(&self, id: usize) {
        let _ = self.pokes.0.send(id);
        self.wake.notify_one();
    }

    fn now_ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

/// Permission for bulk work to do some I/O on a disk; the I/O is done
/// when this is dropped, which frees the disk's slot.
pub struct BulkGrant {
    disk: Arc<Disk>,
    ticket: Ticket,
}

impl Drop for BulkGrant {
    fn drop(&mut self) {
        let now = self.disk.now_ns(Instant::now());
        lock(&self.disk.state).sched.complete(self.ticket, now);
        // The slot it frees: one worker dispatches what waits for it.
        self.disk.wake.notify_one();
    }
}

/// Paces bulk work that reports its progress (ingest, parity, packet
/// files): each piece waits for its turn on the disk, so bulk gets what
/// the playing sessions leave (at least the scheduler's bulk share); on a
/// disk of known speed it also keeps to the bandwidth the streams'
/// promises leave ([`Storage::bulk_rate`]): bulk work reads by page
/// faults with the kernel's read-ahead, so the bytes it has in flight at
/// a throttle or a disk queue would otherwise delay stream reads.
pub struct BulkPacer {
    storage: Storage,
    device: u64,
    done: u64,
    grant: Option<BulkGrant>,
    /// When the work started and the bytes it may have done by now.
    started: Instant,
    paced: u64,
    /// Paced at the floor bulk always keeps (a tenth of the disk), not at
    /// what the streams leave: work nobody waits for.
    background: bool,
}

impl BulkPacer {
    /// The work has done `done` bytes: the piece before is over; wait for
    /// the disk's permission for the next one (as large as the last).
    pub fn progress(&mut self, done: u64) {
        let piece = done.saturating_sub(self.done);
        self.done = done;
        self.read(piece);
    }

    /// The work has read `bytes` more (see [`BulkPacer::progress`]).
    pub fn read(&mut self, bytes: u64) {
        drop(self.grant.take());
        let c = &self.storage.inner.counters;
        c.bulk_bytes.fetch_add(bytes, Relaxed);
        let piece = bytes.max(1 << 20);
        self.paced += piece;
        let rate = match self.background {
            true => self.storage.bulk_floor(self.device),
            false => self.storage.bulk_rate(self.device),
        };
        if let Some(rate) = rate {
            let due = Duration::from_secs_f64(self.paced as f64 / rate.max(1) as f64);
            std::thread::sleep(due.saturating_sub(self.started.elapsed()));
        }
        self.grant = self.storage.bulk(self.device, piece).ok();
    }
}

impl Storage {
    pub fn new(config: StorageConfig) -> Self {
        let pins = Pins::default();
        if !pins.locks() {
            tracing::warn!(
                "read-ahead cannot be locked in memory (RLIMIT_MEMLOCK; run as root or with CAP_IPC_LOCK): pages may be evicted before they are sent"
            );
        }
        Self {
            inner: Arc::new(Inner {
                ledger: Mutex::new(
                    Ledger::new(config.budget, config.disk_capacity.clone())
                        .with_origin(config.origin_capacity),
                ),
                committed: AtomicU64::new(0),
                memory_cap_ns: AtomicU64::new(u64::MAX),
                config,
                pins,
                counters: Counters::default(),
                disks: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Bytes per second bulk work may read from `device` (see
    /// [`Ledger::bulk_rate`]); `None`: unknown disk speed, no limit.
    pub fn bulk_rate(&self, device: u64) -> Option<u64> {
        lock(&self.inner.ledger).bulk_rate(device)
    }

    /// What bulk work keeps on `device` whatever the streams take (a tenth
    /// of its measured bandwidth); `None` for a disk of unknown speed.
    pub fn bulk_floor(&self, device: u64) -> Option<u64> {
        lock(&self.inner.ledger).bulk_floor(device)
    }

    /// Promises a stream of `source` at `bytes_per_s` its disk's share
    /// and its read-ahead memory, or says why not (RTSP 453).
    pub fn reserve(
        &self,
        source: &dyn Source,
        bytes_per_s: u64,
    ) -> Result<StorageReservation, Refusal> {
        let device = source.device();
        let low = lock(&self.inner.disks)
            .get(&device)
            .map_or(self.inner.config.lead.floor, |d| d.lead.low());
        let lead = crate::lead::lead(&self.inner.config.lead, low, bytes_per_s);
        let charge = Charge {
            device,
            title: source.files().first().map_or(0, |f| f.base as usize),
            bytes_per_s,
            // What a session holds at its disk's lead now: `low` and a read
            // (what it passed is released a chunk's worth at a time), and
            // a partial chunk at both ends of the two files it reads. (Two
            // reads and six 256 KiB chunks charged 3.9 MB for a 4.5 Mbit/s
            // stream holding 2.3 MB: 135 of 160 admitted at 512 MiB.)
            memory: (bytes_per_s as f64 * lead.high.as_secs_f64()) as u64 + 4 * CHUNK as u64,
            origin: source.filled(),
        };
        let title_bytes = source.files().iter().map(|f| f.len as u64).sum();
        let mut ledger = lock(&self.inner.ledger);
        ledger.reserve(charge, title_bytes)?;
        self.set_memory_cap(&ledger);
        drop(ledger);
        Ok(StorageReservation {
            storage: self.clone(),
            charge,
        })
    }

    /// What the budget leaves each promised stream for its `low`, after
    /// its reads and partial chunks (see [`crate::lead::memory_cap`]).
    fn set_memory_cap(&self, ledger: &Ledger) {
        let cfg = &self.inner.config;
        // Besides its `low`: the read it holds and the one it may have
        // queued (committed before it is pinned), and partial chunks at both
        // ends of the packets and the tables of each. Less let 160 streams
        // grow their leads into the whole budget, then wait for it, late
        // (one read and six 64 KiB chunks: 167 streams at a busy disk).
        let per_stream = (2 * cfg.lead.read_bytes).saturating_add(8 * CHUNK as u64);
        let cap =
            crate::lead::memory_cap(cfg.budget, ledger.streams(), ledger.promised(), per_stream);
        self.inner
            .memory_cap_ns
            .store(u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    fn memory_cap_of(inner: &Inner) -> Duration {
        Duration::from_nanos(inner.memory_cap_ns.load(Relaxed))
    }

    /// Per disk: what the streams were promised, what its refills read
    /// lately, their queue delay and service time, and the lead.
    pub fn disk_stats(&self) -> Vec<DiskStats> {
        let disks: Vec<(u64, Arc<Disk>)> = lock(&self.inner.disks)
            .iter()
            .map(|(&dev, d)| (dev, d.clone()))
            .collect();
        let ledger = lock(&self.inner.ledger);
        let now = Instant::now();
        disks
            .into_iter()
            .map(|(device, d)| DiskStats {
                device,
                capacity_bytes_per_s: ledger.capacity(device),
                promised_bytes_per_s: ledger.promised_on(device),
                measured: d.lead.estimate(now),
                low: d.lead.low(),
            })
            .collect()
    }

    pub fn config(&self) -> &StorageConfig {
        &self.inner.config
    }

    pub fn stats(&self) -> StorageStats {
        let c = &self.inner.counters;
        StorageStats {
            budget_bytes: self.inner.config.budget,
            pinned_bytes: self.inner.pins.pinned_bytes(),
            reads: c.reads.load(Relaxed),
            read_bytes: c.read_bytes.load(Relaxed),
            read_errors: self.inner.pins.read_errors(),
            repaired_chunks: self.inner.pins.repaired_chunks(),
            late_reads: c.late_reads.load(Relaxed),
            budget_waits: c.budget_waits.load(Relaxed),
            bulk_bytes: c.bulk_bytes.load(Relaxed),
            first_reads: c.first_reads.load(Relaxed),
            first_read_max_us: c.first_read_max_us.load(Relaxed),
            sessions: c.sessions.load(Relaxed),
            locked: self.inner.pins.locks(),
            chunk_hits: self.inner.pins.hits(),
            chunk_reads: self.inner.pins.misses(),
            ..self.queues()
        }
    }

    /// What waits in every disk's queue now.
    fn queues(&self) -> StorageStats {
        let disks: Vec<Arc<Disk>> = lock(&self.inner.disks).values().cloned().collect();
        let mut q = StorageStats::default();
        for d in disks {
            let st = lock(&d.state);
            q.queued_reads += st.sched.queued_rt() as u64;
            q.queued_bulk += st.sched.queued_bulk() as u64;
            q.reading += st.sched.in_flight() as u64;
        }
        q
    }

    /// Registers a session of `source`'s track `track` reading `uses`; it
    /// is read for once [`ReadAhead::position`] says where it starts.
    pub fn register(
        &self,
        source: Arc<dyn Source>,
        track: usize,
        uses: Uses,
    ) -> io::Result<ReadAhead> {
        let disk = self.disk(source.device())?;
        let cursor = Arc::new(Cursor::new(uses));
        let bytes_per_s = title_bytes_per_s(&*source);
        let id = (disk.free.1.try_recv()).unwrap_or_else(|_| disk.next_id.fetch_add(1, Relaxed));
        let entry = Entry {
            cursor: cursor.clone(),
            source,
            track,
            uses,
            grants: VecDeque::new(),
            refill: None,
            moved: None,
            asked: Instant::now(),
            bytes_per_s,
            generation: 0,
            still: Still::new(Instant::now()),
        };
        // A worker puts it in place and plans it (see `Disk::added`).
        let _ = disk.added.0.send((id, entry));
        disk.wake.notify_one();
        self.inner.counters.sessions.fetch_add(1, Relaxed);
        Ok(ReadAhead { cursor, id, disk })
    }

    /// Pins `source`'s head and the first seconds of every track (blocks
    /// for the disk: call it where loading a title may wait).
    pub fn hold_head(&self, source: Arc<dyn Source>) -> Result<HeadPin, PinError> {
        let mut head = HeadPin {
            chunks: Vec::new(),
            storage: self.clone(),
            _source: source.clone(),
        };
        let mut extents = Vec::new();
        source.head(&mut extents);
        pin_all(&self.inner.pins, &*source, &extents, &mut head.chunks)?;
        let head_ns = self.inner.config.head.as_nanos() as u64;
        let uses = source.default_uses();
        for t in 0..source.track_count() {
            let count = source.packet_count(t);
            // The tables of (about twice) the head first, as one read each:
            // the search below and the extents read them.
            let guess = packets_in(&*source, t, 2 * self.inner.config.head);
            let mut tables = Vec::new();
            source.tables(t, 0..guess.min(count), uses, &mut tables);
            pin_all(&self.inner.pins, &*source, &tables, &mut head.chunks)?;
            let end = packet_at_or_after(&*source, t, 0, head_ns, count);
            extents.clear();
            source.extents(t, 0..end, uses, &mut extents);
            pin_all(&self.inner.pins, &*source, &extents, &mut head.chunks)?;
        }
        Ok(head)
    }

    /// Waits until the disk `device` lets bulk work do `bytes` of I/O.
    pub fn bulk(&self, device: u64, bytes: u64) -> io::Result<BulkGrant> {
        let disk = self.disk(device)?;
        let turn = Arc::new(BulkTurn::default());
        lock(&disk.state)
            .sched
            .push_bulk(Tag::Bulk(turn.clone()), bytes);
        disk.wake.notify_one();
        let mut ticket = lock(&turn.ticket);
        let ticket = loop {
            match *ticket {
                Some(t) => break t,
                None => ticket = turn.given.wait(ticket).unwrap_or_else(|e| e.into_inner()),
            }
        };
        Ok(BulkGrant { disk, ticket })
    }

    /// A pacer for bulk work on the disk `device` (see [`BulkPacer`]).
    pub fn bulk_pacer(&self, device: u64) -> BulkPacer {
        BulkPacer {
            storage: self.clone(),
            device,
            done: 0,
            grant: None,
            started: Instant::now(),
            paced: 0,
            background: false,
        }
    }

    /// A pacer for work nobody waits for (verifying loaded titles): at the
    /// floor bulk always keeps, a tenth of the disk, so the streams'
    /// read-ahead has the rest (their first seconds read far more than the
    /// steady rate admission promised them).
    pub fn background_pacer(&self, device: u64) -> BulkPacer {
        BulkPacer {
            background: true,
            ..self.bulk_pacer(device)
        }
    }

    fn disk(&self, device: u64) -> io::Result<Arc<Disk>> {
        let mut disks = lock(&self.inner.disks);
        if let Some(d) = disks.get(&device) {
            return Ok(d.clone());
        }
        let depth = self.inner.config.workers_per_disk.max(1);
        let epoch = Instant::now();
        let disk = Arc::new(Disk {
            state: Mutex::new(DiskState {
                timer: None,
                due: Vec::new(),
                entries: Vec::new(),
                checks: BinaryHeap::new(),
                sched: Scheduler::new(sched::Config {
                    depth,
                    // One bulk piece at a time: the others are stream reads.
                    bulk_depth: 1,
                    ..Default::default()
                }),
            }),
            wake: Signal::default(),
            pokes: crossbeam_channel::unbounded(),
            added: crossbeam_channel::unbounded(),
            free: crossbeam_channel::unbounded(),
            next_id: AtomicUsize::new(0),
            epoch,
            lead: DiskLead::new(self.inner.config.lead, epoch),
        });
        for index in 0..self.inner.config.workers_per_disk.max(1) {
            let (inner, disk) = (self.inner.clone(), disk.clone());
            std::thread::Builder::new()
                .name(format!("fjord-storage-{index}"))
                .spawn(move || Worker { inner, disk, index }.run())?;
        }
        disks.insert(device, disk.clone());
        Ok(disk)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pins `extents` of `source` into `chunks` (blocks for the disk). On
/// error the chunks already pinned stay in `chunks`.
fn pin_all(
    pins: &Pins,
    source: &dyn Source,
    extents: &[Extent],
    chunks: &mut Vec<ChunkKey>,
) -> Result<(), PinError> {
    for e in extents {
        let Some(file) = source.files().get(e.file).copied() else {
            continue;
        };
        let fill = |range| source.fill(e.file, range);
        let rebuild = |range, out: &mut [u8]| source.rebuild(e.file, range, out);
        let backing = Backing {
            fill: Some(&fill),
            rebuild: Some(&rebuild),
        };
        pins.pin(&file, e.range.clone(), chunks, backing)?;
    }
    Ok(())
}

/// A refill a worker took from the queue.
struct Refill {
    ticket: Ticket,
    /// Bytes of the budget this refill committed (see `Inner::committed`).
    committed: u64,
    id: usize,
    source: Arc<dyn Source>,
    track: usize,
    uses: Uses,
    packets: std::ops::Range<u32>,
    rate: Rate,
    deadline: Instant,
    /// When it was queued, and when a worker took it.
    asked: Instant,
    taken: Instant,
    /// The session's lead when it was taken (how far ahead to pin tables).
    high: Duration,
    /// Packets of about a chunk of the session's files: a grant each.
    piece: u32,
}

struct Worker {
    inner: Arc<Inner>,
    disk: Arc<Disk>,
    /// Its number among the disk's workers (who holds the timer).
    index: usize,
}

/// The longest a session goes without a look: what it passed is released
/// at looks, and its place moves without a poke (the engine publishes it
/// once per burst).
const MAX_LOOK: Duration = Duration::from_secs(1);
/// A first read slower than this is logged.
const SLOW_FIRST_READ: Duration = Duration::from_millis(100);
/// The soonest a session is looked at again when it needs nothing now.
const MIN_LOOK: Duration = Duration::from_millis(1);

/// Whether `e`'s client stopped taking its packets ([`Still`]).
fn stalled(e: &Entry, now: Instant) -> bool {
    e.still.stalled(e.cursor.mode(), e.cursor.window().1, now)
}
/// A refill due this soon is made now: the engine publishes its position
/// once per burst, so a look sooner than that would find it where it was
/// (a session 1 ms above the low-water mark was looked at every 1 ms until
/// its position moved, some 30 times).
const EARLY: Duration = Duration::from_millis(50);
/// How soon to look again at a session whose refill waits for budget.
const BUDGET_RETRY: Duration = Duration::from_millis(20);

impl Worker {
    /// Looks at entry `id`: drops it when gone, releases what it passed,
    /// and queues a refill or schedules the next look.
    fn plan(&self, st: &mut DiskState, id: usize, now: Instant) {
        let Some(e) = st.entries.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        // A PLAY, PAUSE or seek: the engine's stillness counts from now.
        let poked = e.cursor.take_poke();
        if e.cursor.is_gone() || e.cursor.failed() {
            if e.refill.is_some() {
                // Removed when it finishes: its id must not be reused first.
                return;
            }
            self.release(e, u32::MAX);
            st.entries[id] = None;
            let _ = self.disk.free.0.send(id);
            self.inner.counters.sessions.fetch_sub(1, Relaxed);
            return;
        }
        if e.source.changed() {
            tracing::warn!("a file of a playing title changed on disk; ending its sessions");
            e.cursor.fail();
            return;
        }
        if e.refill.is_some() {
            return; // looked at again when it finishes
        }
        self.disk
            .lead
            .refresh(now, Storage::memory_cap_of(&self.inner));
        let next = e.cursor.next();
        e.still.see(next, poked, now);
        if e.cursor.mode() == Mode::Paused || stalled(e, now) {
            self.give_back(e);
        }
        let (start, end) = e.cursor.window();
        if next < start || next > end || e.cursor.uses() != e.uses {
            self.release(e, u32::MAX);
            e.uses = e.cursor.uses();
            e.cursor.set_window(next, next);
            e.moved = Some(now);
        } else {
            let keep = next.saturating_sub(e.source.trailing_packets(e.track));
            if e.cursor.shrink_window(keep.max(start)) {
                self.release(e, keep);
            }
        }
        let (at, refill) = self.schedule(e, now);
        e.generation += 1;
        let generation = e.generation;
        match refill {
            Some((to, deadline)) => {
                // From the window's end as it is now (a seek moved it).
                let from = e.cursor.window().1;
                let bytes = self.refill_bytes(e, from, to);
                self.inner.committed.fetch_add(bytes, Relaxed);
                e.refill = Some((to, bytes));
                e.asked = now;
                let deadline_ns = self.disk.now_ns(deadline);
                let tag = Tag::Refill { id, generation };
                st.sched.push_rt(tag, bytes, deadline_ns);
            }
            None => st.checks.push(Reverse((at, id, generation))),
        }
    }

    /// What a refill of `e`'s packets `from..to` will pin: the packets,
    /// the tables ahead that the next refill is planned from, and a
    /// partial chunk at either end of both runs.
    fn refill_bytes(&self, e: &Entry, from: u32, to: u32) -> u64 {
        let high = self.lead(e).high;
        let reach = tables_reach(&*e.source, e.track, Rate(e.cursor.rate()), high, to);
        let tables = u64::from(reach.saturating_sub(to)) * e.source.table_bytes(e.track, e.uses);
        u64::from(to.saturating_sub(from)) * bytes_per_packet(&*e.source)
            + tables
            + 4 * CHUNK as u64
    }

    /// When to look at `e` next, or the refill it needs now (to which
    /// packet, by when).
    fn schedule(&self, e: &Entry, now: Instant) -> (Instant, Option<(u32, Instant)>) {
        let cfg = &self.inner.config;
        let count = e.source.packet_count(e.track);
        let (next, (start, end)) = (e.cursor.next(), e.cursor.window());
        if end >= count {
            return (now + MAX_LOOK, None);
        }
        let time = |i| e.source.send_time_ns(e.track, i).unwrap_or(u64::MAX);
        let (mode, rate) = (e.cursor.mode(), Rate(e.cursor.rate()));
        if mode == Mode::Idle {
            // Its PLAY pokes it. Reading from packet 0 at set-up gave a
            // session whose PLAY seeks a window ending just past its place.
            return (now + MAX_LOOK, None);
        }
        // A new place (a start or a seek) has an empty window: its first
        // read is planned from the title's average rate, so that planning
        // reads none of its tables (the refill reads them first, in one
        // request). Otherwise the refill that ended the window read them.
        let fresh = start == end;
        let lead = if fresh {
            Duration::ZERO
        } else {
            rate.wall(time(end).saturating_sub(time(next)))
        };
        let want = self.lead(e);
        let low = want.low;
        let stalled = stalled(e, now);
        if (mode == Mode::Paused || stalled) && end > next || lead >= low + EARLY {
            let until_low = match mode {
                // Its client may read again at any time.
                _ if stalled => crate::still::LOOK,
                Mode::Playing => lead - low,
                _ => MAX_LOOK, // its PLAY pokes it
            };
            // Never `now` itself: planning looks again at every check due
            // by `now`, so one due at once would be planned for ever.
            return (now + until_low.clamp(MIN_LOOK, MAX_LOOK), None);
        }
        let committed = self.inner.committed.load(Relaxed);
        if self.inner.pins.pinned_bytes() + committed >= cfg.budget {
            self.inner.counters.budget_waits.fetch_add(1, Relaxed);
            return (now + BUDGET_RETRY, None);
        }
        let to = if fresh {
            let first = Duration::from_nanos(rate.title(cfg.first_read));
            end.saturating_add(packets_in(&*e.source, e.track, first))
        } else {
            let ahead = if end == next {
                cfg.first_read
            } else {
                want.high
            };
            let t = time(next).saturating_add(rate.title(ahead));
            packet_at_or_after(&*e.source, e.track, end + 1, t, count)
        };
        let deadline = match mode {
            Mode::Playing => now + lead,
            Mode::Starting => now,
            Mode::Paused | Mode::Idle => now + MAX_LOOK,
        };
        (now, Some((to.clamp(end + 1, count), deadline)))
    }

    /// The lead of `e` on this disk now.
    fn lead(&self, e: &Entry) -> crate::lead::Lead {
        let wall = u128::from(e.bytes_per_s) * u128::from(e.cursor.rate()) / u128::from(REAL_TIME);
        self.disk.lead.lead(u64::try_from(wall).unwrap_or(u64::MAX))
    }

    /// A paused or stalled session keeps the grants that cover half a
    /// first read past its place (its PLAY, or its client reading again,
    /// starts on them as a new one starts on its first read, and refills at
    /// once) and gives back the rest.
    fn give_back(&self, e: &mut Entry) {
        let next = e.cursor.next();
        let (start, end) = e.cursor.window();
        if next < start || next >= end {
            return;
        }
        // When the last packet before `i` is due.
        let due = |i: u32| {
            let t = e.source.send_time_ns(e.track, i.saturating_sub(1));
            t.unwrap_or(u64::MAX)
        };
        let keep = Rate(e.cursor.rate()).title(self.inner.config.first_read / 2);
        let want = due(next + 1).saturating_add(keep);
        let keep = e
            .grants
            .iter()
            .position(|g| g.end > next && due(g.end) >= want);
        let Some(keep) = keep.filter(|&k| k + 1 < e.grants.len()) else {
            return;
        };
        // The window shrinks first; a PLAY or a step of the engine since
        // (it stores its mode or place before it reads the window) keeps
        // everything.
        let mode = e.cursor.mode();
        e.cursor.set_window(start, e.grants[keep].end);
        if e.cursor.mode() != mode || e.cursor.next() != next {
            e.cursor.set_window(start, end);
            return;
        }
        for g in e.grants.drain(keep + 1..) {
            self.inner.pins.unpin(&g.chunks);
        }
    }

    /// Releases the grants of `e` wholly before packet `upto`.
    fn release(&self, e: &mut Entry, upto: u32) {
        while e.grants.front().is_some_and(|g| g.end <= upto) {
            if let Some(g) = e.grants.pop_front() {
                self.inner.pins.unpin(&g.chunks);
            }
        }
    }

    /// Pins the bytes of a refill (no lock held: this waits for the disk):
    /// first the tables its packets and the next refill's are found from
    /// (so that neither finding them nor the next plan, under the disk's
    /// lock, faults a table page in), then what they say the packets read.
    fn pin(&self, r: &Refill, packets: Range<u32>) -> (Result<Vec<ChunkKey>, PinError>, u64) {
        let mut chunks = Vec::new();
        let mut tables = Vec::new();
        let next = tables_reach(&*r.source, r.track, r.rate, r.high, packets.end);
        r.source
            .tables(r.track, packets.start..next, r.uses, &mut tables);
        let mut extents = Vec::new();
        let pinned = pin_all(&self.inner.pins, &*r.source, &tables, &mut chunks).and_then(|()| {
            r.source.extents(r.track, packets, r.uses, &mut extents);
            pin_all(&self.inner.pins, &*r.source, &extents, &mut chunks)
        });
        let bytes = extents.iter().map(|e| e.range.len() as u64).sum();
        if let Err(err) = pinned {
            self.inner.pins.unpin(&chunks);
            return (Err(err), bytes);
        }
        (Ok(chunks), bytes)
    }

    /// Pins a refill as one read (a request per file: the disk's IOPS
    /// want large reads), then splits it into a grant per piece (about a
    /// chunk of the session's files), the last also holding the tables
    /// the next refill is planned from: what a session passed, or what a
    /// paused one does not need, is released a piece at a time.
    fn pin_pieces(&self, r: &Refill) -> (Result<Vec<Grant>, PinError>, u64) {
        let (whole, bytes) = self.pin(r, r.packets.clone());
        let whole = match whole {
            Ok(chunks) => chunks,
            Err(err) => return (Err(err), bytes),
        };
        let (mut grants, mut extents) = (Vec::new(), Vec::new());
        let mut start = r.packets.start;
        while start < r.packets.end {
            let end = start.saturating_add(r.piece.max(1)).min(r.packets.end);
            extents.clear();
            r.source.extents(r.track, start..end, r.uses, &mut extents);
            if end == r.packets.end {
                let reach = tables_reach(&*r.source, r.track, r.rate, r.high, end);
                r.source.tables(r.track, end..reach, r.uses, &mut extents);
            }
            let mut chunks = Vec::new();
            for e in &extents {
                if let Some(file) = r.source.files().get(e.file) {
                    self.inner.pins.hold(file, e.range.clone(), &mut chunks);
                }
            }
            grants.push(Grant { end, chunks });
            start = end;
        }
        self.inner.pins.unpin(&whole);
        (Ok(grants), bytes)
    }

    fn finish(&self, r: Refill, result: Result<Vec<Grant>, PinError>, bytes: u64) {
        self.inner.committed.fetch_sub(r.committed, Relaxed);
        let now = Instant::now();
        let c = &self.inner.counters;
        let mut st = lock(&self.disk.state);
        // No wake-up: this worker looks next, at the slot this frees too.
        st.sched.complete(r.ticket, self.disk.now_ns(now));
        let Some(e) = st.entries.get_mut(r.id).and_then(Option::as_mut) else {
            if let Ok(grants) = result {
                grants.iter().for_each(|g| self.inner.pins.unpin(&g.chunks));
            }
            return;
        };
        e.refill = None;
        match result {
            Ok(grants) => {
                c.reads.fetch_add(1, Relaxed);
                c.read_bytes.fetch_add(bytes, Relaxed);
                let cap = Storage::memory_cap_of(&self.inner);
                self.disk.lead.observe(r.asked, r.taken, now, bytes, cap);
                e.bytes_per_s =
                    learned_rate(&*r.source, r.track, r.packets.clone(), bytes, e.bytes_per_s);
                if now > r.deadline + Duration::from_millis(1) {
                    c.late_reads.fetch_add(1, Relaxed);
                }
                e.grants.extend(grants);
                let (start, end) = e.cursor.window();
                if end == r.packets.start {
                    e.cursor.set_window(start, r.packets.end);
                    if let Some(moved) = e.moved.take() {
                        let took = now.saturating_duration_since(moved);
                        c.first_reads.fetch_add(1, Relaxed);
                        c.first_read_max_us
                            .fetch_max(took.as_micros() as u64, Relaxed);
                        if took > SLOW_FIRST_READ {
                            let queued = r.taken.saturating_duration_since(moved);
                            tracing::warn!(
                                queued_ms = queued.as_millis() as u64,
                                read_ms = took.saturating_sub(queued).as_millis() as u64,
                                bytes,
                                "a session's first packets took {} ms to be read",
                                took.as_millis()
                            );
                        }
                    }
                }
            }
            Err(err) => {
                // A read error here could not be rebuilt (counted by Pins).
                tracing::warn!("read-ahead of a playing title failed ({err}); ending its session");
                e.cursor.fail();
            }
        }
        self.plan(&mut st, r.id, now);
    }
}

/// The device a file lives on (`st_dev`), which names its disk's queue.
pub fn device_of(fd: RawFd) -> u64 {
    // SAFETY: fstat fills the struct it is given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            st.st_dev
        } else {
            0
        }
    }
}

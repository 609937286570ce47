//! Engine threads: each owns a set of sessions and the RTSP connections they
//! stream over, wakes them from a timing wheel, sends everything due in a
//! tick as one batch through its data path, and obeys the control plane.

use std::{
    collections::HashMap,
    io,
    sync::Arc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crossbeam_channel::RecvTimeoutError;

use crate::{
    Command, PlayInfo, SessionSpec, Start, ThreadStats, Until,
    datapath::{self, Batch, DataPath, MAX_BATCH_PACKETS},
    inbox::{self, Inbox, Outbox},
    interleaved::Connection,
    lateness::TickStart,
    live::{Live, Out, Sink},
    session::{MAX_BURST_PACKETS, Pacing, Planned, Session},
    totals::{Published, Totals},
    wheel::{TICK, Wheel},
};

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub threads: usize,
    /// How far ahead of its scheduled time a packet may leave.
    pub burst: Duration,
    pub rtcp_interval: Duration,
    /// RTCP CNAME of this server.
    pub cname: String,
    /// A data path by name (see [`datapath::NAMES`]), or `auto` to probe.
    pub datapath: String,
    /// CPUs to pin the threads to, round robin; empty: no pinning.
    pub cpus: Vec<usize>,
    /// Run the threads under SCHED_FIFO so other work on the core cannot
    /// delay a wake-up (needs CAP_SYS_NICE; without it, a warning).
    pub realtime: bool,
    /// An interleaved client that takes no data for this long is dropped.
    pub stall_timeout: Duration,
    /// The storage layer that reads ahead of every session; without it
    /// (benches of titles in memory) every page is taken for resident.
    pub storage: Option<fjord_storage::Storage>,
}

/// Handle to the engine threads. Commands about one session (or one
/// connection) must always go to the same shard.
pub struct Engine {
    queues: Vec<Outbox<Command>>,
    threads: Vec<JoinHandle<()>>,
    totals: Vec<Arc<Published>>,
    datapath: &'static str,
}

impl Engine {
    pub fn start(config: EngineConfig) -> io::Result<Self> {
        let n = config.threads.max(1);
        let datapath = datapath::resolve(&config.datapath)?;
        let mut queues = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        let mut totals = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = inbox::channel();
            let published = Arc::new(Published::default());
            totals.push(published.clone());
            let cfg = config.clone();
            let path =
                datapath::by_name(datapath).ok_or_else(|| io::Error::other("unknown data path"))?;
            let cpu = (!config.cpus.is_empty()).then(|| config.cpus[i % config.cpus.len()]);
            let handle = std::thread::Builder::new()
                .name(format!("fjord-engine-{i}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_to(cpu);
                    }
                    if cfg.realtime {
                        make_realtime();
                    }
                    Worker::new(cfg, rx, path, published).run()
                })?;
            queues.push(tx);
            threads.push(handle);
        }
        Ok(Self {
            queues,
            threads,
            totals,
            datapath,
        })
    }

    /// How many engine threads there are: a shard below it is that thread.
    pub fn threads(&self) -> usize {
        self.queues.len()
    }

    /// The data path the threads started with.
    pub fn datapath(&self) -> &'static str {
        self.datapath
    }

    /// Sends a command to the thread owning `shard`: the connection id for
    /// interleaved sessions and connection commands, the session id otherwise.
    pub fn send(&self, shard: u64, cmd: Command) {
        let i = (shard % self.queues.len() as u64) as usize;
        // A send fails only when the thread is gone, i.e. during shutdown.
        let _ = self.queues[i].send(cmd);
    }

    /// Asks every thread for its account: each answers `reply` with its
    /// index, on its own thread (so `reply` must not block), and drops it.
    pub fn ask_stats(&self, reply: impl Fn(usize, ThreadStats) + Clone + Send + 'static) {
        for (i, q) in self.queues.iter().enumerate() {
            let reply = reply.clone();
            let _ = q.send(Command::Stats {
                reply: Box::new(move |s| reply(i, s)),
            });
        }
    }

    /// All threads' totals as of their last tick (wakes none of them).
    pub fn totals(&self) -> Totals {
        self.totals
            .iter()
            .map(|t| t.read())
            .fold(Totals::default(), |a, b| a + b)
    }

    /// Every thread's account (waits for each to answer).
    pub fn stats(&self) -> Vec<ThreadStats> {
        let (tx, rx) = crossbeam_channel::unbounded();
        self.ask_stats(move |i, s| {
            let _ = tx.send((i, s));
        });
        let mut all: Vec<(usize, ThreadStats)> = rx.iter().collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, s)| s).collect()
    }

    /// Stops every thread after it has drained its queue.
    pub fn shutdown(self) {
        drop(self.queues);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The burst limit servers run with unless configured otherwise. A
/// session's send then carries some 24 packets of a 4.5 Mbit/s stream
/// instead of 12 at 40 ms: 100 sessions cost about a sixth less CPU per
/// packet (`fjord bench peers`, bench/results/peers-burst/), while a
/// player's socket buffer holds far more than the burst (at most
/// `MAX_BURST_PACKETS` per send) and its jitter buffer far more than 80 ms.
pub const DEFAULT_BURST: Duration = Duration::from_millis(80);

/// Wake-ups fall on a grid of an eighth of the burst limit (10 ms at the
/// default 80 ms): sessions due within it share one tick, so a thread
/// sleeps and wakes at most that often, however many sessions it has. A
/// packet still leaves at most the burst limit early: a session sends what
/// is due by its wake-up plus the burst.
pub const fn wake_grid(burst: Duration) -> Duration {
    Duration::from_nanos((burst.as_nanos() / 8) as u64)
}

fn align_ticks(burst: Duration) -> u64 {
    wake_grid(burst).as_micros() as u64 / TICK.as_micros() as u64
}

/// A tick or one session in it taking longer than this is logged: it delays
/// the thread's packets by as much.
const SLOW: Duration = Duration::from_millis(20);
/// A command should cost microseconds: one taking longer than a packet may
/// be late ([`crate::LATE`]) is logged, as it can make the next tick late.
const SLOW_COMMAND: Duration = crate::LATE;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Puts the due packets of the sessions `due` names (with their `burst`
/// and whether the data path sends prefabricated packets) in `batch`
/// while they fit, each session's count in `planned`; returns how many of
/// `due` it took.
fn collect<'a>(
    slots: &'a [Option<Session>],
    (due, burst, prefab): (&[u32], Duration, bool),
    now: Instant,
    planned: &mut Vec<(u32, Planned)>,
    batch: &mut Batch<'a>,
) -> usize {
    planned.clear();
    let mut taken = 0;
    while taken < due.len() && batch.packets.len() + MAX_BURST_PACKETS <= MAX_BATCH_PACKETS {
        let key = due[taken];
        taken += 1;
        let Some(session) = slots[key as usize].as_ref() else {
            continue;
        };
        let (packets, bursts) = (batch.packets.len(), batch.bursts.len());
        let n = if session.is_interleaved() || session.title_damaged() {
            Planned::default()
        } else {
            session.collect(now, burst, prefab, batch)
        };
        // A file of the title shrank and collecting read zeros from it
        // (`Title::damaged`): none of that leaves; the session ends in
        // `Worker::account`.
        let n = if n != Planned::default() && session.title_damaged() {
            batch.packets.truncate(packets);
            batch.bursts.truncate(bursts);
            Planned::default()
        } else {
            n
        };
        planned.push((key, n));
    }
    taken
}

/// Sends `batch` through `path`, each burst's count of sent packets in
/// `sent`; a data path the kernel refuses gives way to mmap-writev (and
/// the sessions of `slots` stop sending prefabricated packets).
fn transmit(
    path: &mut Box<dyn DataPath>,
    slots: &[Option<Session>],
    batch: &Batch,
    sent: &mut Vec<usize>,
) {
    sent.clear();
    sent.resize(batch.bursts.len(), 0);
    if batch.is_empty() {
        return;
    }
    let Err(e) = path.send(batch, sent) else {
        return;
    };
    if datapath::is_unsupported(&e) {
        tracing::warn!(
            "data path {} failed ({e}); falling back to mmap-writev",
            path.name()
        );
        *path = Box::new(datapath::MmapWritev::default());
        for s in slots.iter().flatten() {
            s.set_prefab_path(false);
        }
    } else {
        tracing::warn!("data path {}: {e}", path.name());
    }
}

struct Worker {
    config: EngineConfig,
    rx: Inbox<Command>,
    /// Sessions by key; a key is also the session's place in the wheel.
    slots: Vec<Option<Session>>,
    free: Vec<u32>,
    ids: HashMap<u64, u32>,
    connections: HashMap<u64, Connection>,
    wheel: Wheel,
    path: Box<dyn DataPath>,
    // Reused from tick to tick so steady state allocates nothing.
    due: Vec<u32>,
    planned: Vec<(u32, Planned)>,
    sent: Vec<usize>,
    batch: Option<Batch<'static>>,
    stats: ThreadStats,
    /// What `Engine::totals` reads: published after every tick.
    published: Arc<Published>,
    /// Wheel key that keeps the wheel turning while replies wait to be
    /// written to a full connection.
    flush_key: u32,
    /// When a slow tick or command was last logged.
    slow_logged: Option<Instant>,
    /// The wake-up grid, wheel ticks.
    align_ticks: u64,
    live: Live,
    /// Wheel key that wakes the thread when gathered live packets are due.
    live_key: u32,
}

impl Worker {
    fn new(
        config: EngineConfig,
        rx: Inbox<Command>,
        path: Box<dyn DataPath>,
        published: Arc<Published>,
    ) -> Self {
        let mut wheel = Wheel::new(Instant::now());
        wheel.reserve_keys(2);
        let align = align_ticks(config.burst);
        Self {
            config,
            rx,
            slots: vec![None, None],
            free: Vec::new(),
            ids: HashMap::new(),
            connections: HashMap::new(),
            wheel,
            path,
            due: Vec::new(),
            planned: Vec::new(),
            // A burst's count for each burst a batch can hold.
            sent: Vec::with_capacity(MAX_BATCH_PACKETS),
            batch: Some(Batch::with_capacity(MAX_BATCH_PACKETS, MAX_BATCH_PACKETS)),
            stats: ThreadStats::default(),
            published,
            flush_key: 0,
            slow_logged: None,
            align_ticks: align,
            live: Live::default(),
            live_key: 1,
        }
    }

    fn run(mut self) {
        let idle = Duration::from_secs(1);
        let mut start = TickStart::default();
        loop {
            let began = Instant::now();
            let sent = self.stats.packets;
            self.tick(began, start);
            self.published.publish(self.ids.len(), &self.stats);
            let slept = Instant::now();
            if slept - began > SLOW && self.may_log_slow(slept) {
                let (ms, sent) = (ms(slept - began), self.stats.packets - sent);
                let due = self.due.len();
                tracing::warn!(due, sent, "an engine tick took {ms:.1} ms");
            }
            let wake = self.wheel.next_deadline().unwrap_or(slept + idle);
            let received = self.rx.recv_deadline(wake);
            let woke = Instant::now();
            match received {
                Ok(cmd) => self.handle_queued(cmd),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            start = TickStart::new(wake, slept, woke, Instant::now());
        }
    }

    /// One tick: every session due now puts its due packets in a batch; the
    /// data path sends the batch; sessions account and reschedule.
    fn tick(&mut self, now: Instant, start: TickStart) {
        self.due.clear();
        self.wheel.expire(now, &mut self.due);
        let mut next = 0;
        while next < self.due.len() {
            next = self.send_batch(now, start, next);
        }
        self.flush_live_if_due(now);
        self.flush_connections(now);
    }

    /// Sends one batch for the due sessions from `self.due[first..]` (as
    /// many as fit); returns where the next batch starts.
    fn send_batch(&mut self, now: Instant, start: TickStart, first: usize) -> usize {
        let mut batch = self.batch.take().unwrap_or_default().recycle();
        let due = (
            &self.due[first..],
            self.config.burst,
            self.path.prefabricated(),
        );
        let taken = collect(&self.slots, due, now, &mut self.planned, &mut batch);
        transmit(&mut self.path, &self.slots, &batch, &mut self.sent);
        self.batch = Some(batch.recycle());
        self.account(now, start);
        first + taken
    }

    /// After a batch went: each session of `self.planned` accounts for what
    /// of its burst left (or writes, if interleaved, or ends, if its title
    /// is unreadable) and goes back on the wheel for its next packets.
    fn account(&mut self, now: Instant, start: TickStart) {
        let batch_sent = Instant::now();
        let mut pacing = Pacing {
            now,
            start,
            sent_at: now,
            stats: &mut self.stats,
            burst: self.config.burst,
            rtcp_interval: self.config.rtcp_interval,
            connections: &mut self.connections,
        };
        let mut burst = 0;
        // Described only when logged: a slow tick (a loaded machine) must
        // not allocate.
        let mut slowest: Option<(Duration, u32)> = None;
        // One clock read per session: its end is the next one's start.
        let mut began = batch_sent;
        for &(key, n) in &self.planned {
            let Some(session) = self.slots[key as usize].as_mut() else {
                continue;
            };
            // A session adds at most one burst: repair or source.
            let own = (n.bursts() > 0).then(|| {
                burst += 1;
                self.sent[burst - 1]
            });
            let wake = if own == Some(datapath::FAULTED) || session.title_damaged() {
                // Its bytes are gone (EFAULT: a mapped file was truncated)
                // or read as zeros: retrying would fail, or send garbage,
                // forever. End it (RTCP BYE); other sessions go on.
                session.end_unreadable(&mut pacing)
            } else if session.is_interleaved() {
                // It writes now, not with the batch.
                pacing.sent_at = began;
                session.pump_interleaved(&mut pacing)
            } else {
                pacing.sent_at = batch_sent;
                let sent = own.unwrap_or(0);
                let sent = Planned {
                    source: if n.source > 0 { sent } else { 0 },
                    repair: if n.repair > 0 { sent } else { 0 },
                };
                session.advance(n, sent, &mut pacing)
            };
            let ended = Instant::now();
            let took = ended.saturating_duration_since(began);
            began = ended;
            if took > SLOW && slowest.as_ref().is_none_or(|(t, _)| took > *t) {
                slowest = Some((took, key));
            }
            if let Some(w) = wake {
                // A retry due within the grid step stays where it is.
                let aligned = self.wheel.align_down(w, self.align_ticks);
                self.wheel
                    .insert(key, if aligned > now { aligned } else { w });
            }
        }
        if let Some((took, key)) = slowest {
            self.log_slow(took, key);
        }
    }

    /// Warns (rate-limited) that session `key` took `took` of a tick.
    fn log_slow(&mut self, took: Duration, key: u32) {
        if self.may_log_slow(Instant::now())
            && let Some(session) = self.slots[key as usize].as_ref()
        {
            let what = session.describe();
            tracing::warn!(
                "a session took {:.1} ms of an engine tick: {what}",
                ms(took)
            );
        }
    }

    fn flush_connections(&mut self, now: Instant) {
        let mut retry: Option<Instant> = None;
        for c in self.connections.values_mut() {
            if !c.flush(now) && !c.is_broken() {
                let at = c.retry_at().unwrap_or(now + Duration::from_millis(1));
                retry = Some(retry.map_or(at, |r| r.min(at)));
            }
        }
        if let Some(at) = retry {
            // Keep the wheel turning until the replies are out.
            self.wheel.insert(self.flush_key, at);
        }
    }

    /// Handles `first` and every command queued behind it, logging them
    /// when together they took long enough to make packets late (the next
    /// tick waits for them all): a command should cost microseconds.
    fn handle_queued(&mut self, first: Command) {
        let began = Instant::now();
        let (mut n, mut slowest) = (0, (Duration::ZERO, ""));
        let mut next = Some(first);
        while let Some(cmd) = next {
            let (name, at) = (cmd.name(), Instant::now());
            self.handle(cmd);
            let took = at.elapsed();
            if took > slowest.0 {
                slowest = (took, name);
            }
            n += 1;
            next = self.rx.try_recv().ok();
        }
        // Every live packet the queue held leaves in one flush, once the
        // first has waited for those right behind it.
        self.flush_live_if_due(Instant::now());
        let took = began.elapsed();
        if took > SLOW_COMMAND && self.may_log_slow(began + took) {
            let (most, name) = slowest;
            tracing::warn!(
                "{n} engine commands took {:.1} ms (the slowest, {name}, {:.1} ms)",
                ms(took),
                ms(most)
            );
        }
    }

    /// Whether a slow tick or command may be logged at `now`: one line a
    /// second at most, so a saturated thread does not flood the log.
    fn may_log_slow(&mut self, now: Instant) -> bool {
        let may =
            (self.slow_logged).is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
        if may {
            self.slow_logged = Some(now);
        }
        may
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Add(spec) => self.add(*spec),
            Command::AttachRepair { id, repair } => {
                // Fields apart, not `session_mut`: the name is borrowed beside.
                let attached = (self.ids.get(&id))
                    .and_then(|&k| self.slots[k as usize].as_mut())
                    .is_some_and(|s| s.attach_repair(*repair, &self.config.cname));
                if !attached {
                    tracing::warn!(
                        id,
                        "repair stream not attached: no such stream or no parity"
                    );
                }
            }
            Command::Play {
                id,
                start,
                until,
                scale,
                speed,
                queue,
                reply,
            } => reply(self.play(id, (start, until), (scale, speed), queue)),
            Command::PauseAt {
                id,
                packet,
                ns,
                reply,
            } => {
                let now = Instant::now();
                reply((self.session_mut(id)).is_some_and(|s| s.pause_at(packet, ns, now)));
            }
            Command::Position { id, reply } => {
                let now = Instant::now();
                reply(self.session_mut(id).map(|s| s.position_at(now)));
            }
            Command::Start { id, at, origin_ns } => {
                if !self.ids.contains_key(&id) {
                    self.live.start(id);
                } else if let Some(s) = self.session_mut(id) {
                    s.start(at, origin_ns);
                    let k = self.ids[&id];
                    self.wheel.insert(k, Instant::now());
                }
            }
            Command::Pause { id } => {
                if let Some(s) = self.session_mut(id) {
                    s.pause(Instant::now());
                }
                if let Some(&k) = self.ids.get(&id) {
                    self.wheel.remove(k);
                }
            }
            Command::Remove { id } => self.remove(id),
            Command::Pace { id, first, offsets } => {
                if let Some(s) = self.session_mut(id) {
                    s.pace(first, offsets);
                }
            }
            Command::Bye { id } if self.ids.contains_key(&id) => self.bye(id),
            Command::Bye { id } => self.live(|live, out, sink| live.bye(id, out, sink)),
            Command::LiveAdd(viewer) => self.live(|live, out, sink| live.add(*viewer, out, sink)),
            Command::LivePackets { feed, packets } => {
                self.live.packets(feed, packets, Instant::now());
                if self.live.must_flush() {
                    self.live(Live::flush);
                }
            }
            Command::LiveRemove { id } => self.live.remove(id),
            Command::LiveSync { feed, sync } => self.live.sync(feed, sync),
            Command::LiveEnd { feed } => self.live(|live, out, sink| live.end(feed, out, sink)),
            Command::Stats { reply } => reply(self.thread_stats()),
            Command::AttachConnection { conn, fd, seal } => {
                match Connection::new(fd, self.config.stall_timeout, seal) {
                    Ok(c) => drop(self.connections.insert(conn, c)),
                    Err(e) => tracing::warn!(conn, "cannot attach connection: {e}"),
                }
            }
            Command::Write { conn, bytes } => {
                if let Some(c) = self.connections.get_mut(&conn) {
                    c.write_control(&bytes, Instant::now());
                }
            }
            Command::DetachConnection { conn } => self.detach(conn),
        }
    }

    /// Lets the live viewers send, through the thread's data path and
    /// batch; frames left queued on a full connection are written by the
    /// ticks that follow.
    fn live(&mut self, f: impl FnOnce(&mut Live, &mut Out<'_>, &mut Sink<'_>)) {
        let mut out = Out {
            path: self.path.as_mut(),
            batch: &mut self.batch,
            sent: &mut self.sent,
        };
        let mut sink = Sink {
            connections: &mut self.connections,
            stats: &mut self.stats,
            cname: &self.config.cname,
            rtcp_interval: self.config.rtcp_interval,
        };
        f(&mut self.live, &mut out, &mut sink);
        if let Some(at) = (self.connections.values())
            .filter(|c| c.has_pending() && !c.is_broken())
            .map(|c| c.retry_at().unwrap_or_else(Instant::now))
            .min()
        {
            self.wheel.insert(self.flush_key, at);
        }
    }

    /// Flushes the live packets if they are due at `now`, else has the
    /// wheel wake the thread when they are.
    fn flush_live_if_due(&mut self, now: Instant) {
        match self.live.due() {
            Some(due) if due <= now => self.live(Live::flush),
            Some(due) => self.wheel.insert(self.live_key, due),
            None => {}
        }
    }

    /// The session with engine id `id`, if this thread has it.
    fn session_mut(&mut self, id: u64) -> Option<&mut Session> {
        let &k = self.ids.get(&id)?;
        self.slots[k as usize].as_mut()
    }

    /// Takes a new session into a free slot, with room for every session
    /// at once in the tick's tables, so ticks never allocate.
    fn add(&mut self, spec: SessionSpec) {
        let id = spec.id;
        let mut session = Session::new(spec, &self.config.cname);
        if let Some(storage) = &self.config.storage {
            session.attach_storage(storage, self.path.prefabricated());
        }
        let key = match self.free.pop() {
            Some(k) => {
                self.slots[k as usize] = Some(session);
                k
            }
            None => {
                self.slots.push(Some(session));
                (self.slots.len() - 1) as u32
            }
        };
        self.ids.insert(id, key);
        let n = self.slots.len();
        self.wheel.reserve_keys(n);
        self.due.reserve(n.saturating_sub(self.due.len()));
        self.planned.reserve(n.saturating_sub(self.planned.len()));
    }

    /// Positions a session for a PLAY (or queues it behind the range
    /// playing); it leaves the wheel until its Start, unless queued.
    fn play(
        &mut self,
        id: u64,
        (start, until): (Start, Until),
        (scale, speed): (i32, u32),
        queue: bool,
    ) -> Option<PlayInfo> {
        let now = Instant::now();
        let info = self.session_mut(id).map(|s| {
            s.set_speed(speed);
            let queued = queue.then(|| s.queue(start, until)).flatten();
            queued.unwrap_or_else(|| s.play(start, until, scale, now))
        });
        if let Some(&k) = self.ids.get(&id).filter(|_| info.is_none_or(|i| !i.queued)) {
            self.wheel.remove(k);
        }
        info
    }

    fn thread_stats(&self) -> ThreadStats {
        let (user, system) = thread_cpu();
        ThreadStats {
            sessions: self.ids.len() + self.live.viewers(),
            user,
            system,
            datapath: self.path.counters(),
            ..self.stats
        }
    }

    /// A connection closed: its interleaved sessions go, and what it had
    /// queued is flushed once more.
    fn detach(&mut self, conn: u64) {
        self.live.detach(conn);
        let on_it = |s: &Option<Session>| s.as_ref().is_some_and(|s| s.connection() == Some(conn));
        let gone: Vec<u64> = (self.ids.iter())
            .filter(|&(_, &k)| on_it(&self.slots[k as usize]))
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.remove(id);
        }
        if let Some(mut c) = self.connections.remove(&conn) {
            c.flush(Instant::now());
        }
    }

    fn bye(&mut self, id: u64) {
        let Some(&k) = self.ids.get(&id) else { return };
        if let Some(s) = self.slots[k as usize].as_mut() {
            let now = Instant::now();
            let mut pacing = Pacing {
                now,
                start: TickStart::default(),
                sent_at: now,
                stats: &mut self.stats,
                burst: self.config.burst,
                rtcp_interval: self.config.rtcp_interval,
                connections: &mut self.connections,
            };
            s.end(&mut pacing);
            self.wheel.remove(k);
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(k) = self.ids.remove(&id) {
            self.slots[k as usize] = None;
            self.wheel.remove(k);
            self.free.push(k);
        }
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> (Duration, Duration) {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let d = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (d(ru.ru_utime), d(ru.ru_stime))
}

/// Pins the calling thread to one CPU (for capacity measurements).
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET stays inside it for
    // cpu < CPU_SETSIZE, which the modulo guarantees.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::warn!(
                cpu,
                "cannot pin engine thread: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// SCHED_FIFO at a low real-time priority for the calling thread. The
/// kernel's RT throttling still leaves 5 % of each core to everything else.
fn make_realtime() {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: a valid sched_param for the calling thread (pid 0).
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::warn!(
            "cannot run the engine thread real-time: {} (needs CAP_SYS_NICE)",
            io::Error::last_os_error()
        );
    }
}

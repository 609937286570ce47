//! Engine threads: each owns a set of sessions and the RTSP connections they
//! stream over, wakes them from a timing wheel, sends everything due in a
//! tick as one batch through its data path, and obeys the control plane.

use std::{
    collections::HashMap,
    io,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::{
    Command,
    datapath::{self, Batch, DataPath},
    interleaved::Connection,
    session::{Pacing, Session},
    wheel::{Entry, Wheel},
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
}

/// Handle to the engine threads. Commands about one session (or one
/// connection) must always go to the same shard.
pub struct Engine {
    queues: Vec<Sender<Command>>,
    threads: Vec<JoinHandle<()>>,
    datapath: &'static str,
}

impl Engine {
    pub fn start(config: EngineConfig) -> io::Result<Self> {
        let n = config.threads.max(1);
        let datapath = datapath::resolve(&config.datapath)?;
        let mut queues = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = crossbeam_channel::unbounded();
            let cfg = config.clone();
            let path =
                datapath::by_name(datapath).ok_or_else(|| io::Error::other("unknown data path"))?;
            let handle = std::thread::Builder::new()
                .name(format!("fjord-engine-{i}"))
                .spawn(move || Worker::new(cfg, rx, path).run())?;
            queues.push(tx);
            threads.push(handle);
        }
        Ok(Self {
            queues,
            threads,
            datapath,
        })
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

    /// Stops every thread after it has drained its queue.
    pub fn shutdown(self) {
        drop(self.queues);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A session's place in the worker: its slot, and the generation that
/// tells live wheel entries from stale ones.
struct Slot {
    session: Option<Session>,
    generation: u32,
}

struct Worker {
    config: EngineConfig,
    rx: Receiver<Command>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    ids: HashMap<u64, u32>,
    connections: HashMap<u64, Connection>,
    wheel: Wheel,
    path: Box<dyn DataPath>,
    // Reused from tick to tick so steady state allocates nothing.
    due: Vec<Entry>,
    planned: Vec<(u32, usize)>,
    sent: Vec<usize>,
    later: Vec<Entry>,
    batch: Option<Batch<'static>>,
}

impl Worker {
    fn new(config: EngineConfig, rx: Receiver<Command>, path: Box<dyn DataPath>) -> Self {
        Self {
            config,
            rx,
            slots: Vec::new(),
            free: Vec::new(),
            ids: HashMap::new(),
            connections: HashMap::new(),
            wheel: Wheel::new(Instant::now()),
            path,
            due: Vec::new(),
            planned: Vec::new(),
            sent: Vec::new(),
            later: Vec::new(),
            batch: Some(Batch::with_capacity(1024, 256)),
        }
    }

    fn run(mut self) {
        let idle = Duration::from_secs(1);
        loop {
            self.tick(Instant::now());
            let wake = self
                .wheel
                .next_deadline()
                .unwrap_or_else(|| Instant::now() + idle);
            match self.rx.recv_deadline(wake) {
                Ok(cmd) => {
                    self.handle(cmd);
                    while let Ok(cmd) = self.rx.try_recv() {
                        self.handle(cmd);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn schedule(&mut self, key: u32, due: Instant) {
        let slot = &mut self.slots[key as usize];
        slot.generation = slot.generation.wrapping_add(1);
        self.wheel.insert(Entry {
            key,
            generation: slot.generation,
            due,
        });
    }

    /// Forgets a session's pending wake-up.
    fn unschedule(&mut self, key: u32) {
        let slot = &mut self.slots[key as usize];
        slot.generation = slot.generation.wrapping_add(1);
    }

    /// One tick: every session due now puts its due packets in one batch;
    /// the data path sends the batch; sessions account and reschedule.
    fn tick(&mut self, now: Instant) {
        self.due.clear();
        self.wheel.expire(now, &mut self.due);
        if self.due.is_empty() {
            self.flush_connections(now);
            return;
        }
        let mut pacing = Pacing {
            now,
            burst: self.config.burst,
            rtcp_interval: self.config.rtcp_interval,
            cname: &self.config.cname,
            connections: &mut self.connections,
        };
        let mut batch = self.batch.take().unwrap_or_default().recycle();
        self.planned.clear();
        self.later.clear();
        for i in 0..self.due.len() {
            let e = self.due[i];
            let Some(slot) = self.slots.get(e.key as usize) else {
                continue;
            };
            let Some(session) = slot
                .session
                .as_ref()
                .filter(|_| slot.generation == e.generation)
            else {
                continue;
            };
            if e.due > now + crate::wheel::TICK {
                self.later.push(e);
                continue;
            }
            if !session.is_interleaved() {
                let n = session.collect(now, pacing.burst, &mut batch);
                self.planned.push((e.key, n));
            }
        }
        self.sent.clear();
        self.sent.resize(batch.bursts.len(), 0);
        if !batch.is_empty()
            && let Err(e) = self.path.send(&batch, &mut self.sent)
        {
            if datapath::is_unsupported(&e) {
                tracing::warn!(
                    "data path {} failed ({e}); falling back to mmap-writev",
                    self.path.name()
                );
                self.path = Box::new(datapath::MmapWritev::default());
            } else {
                tracing::warn!("data path {}: {e}", self.path.name());
            }
        }
        self.batch = Some(batch.recycle());
        let mut burst = 0;
        for k in 0..self.planned.len() {
            let (key, n) = self.planned[k];
            let sent = if n > 0 {
                burst += 1;
                self.sent[burst - 1]
            } else {
                0
            };
            let wake = self.slots[key as usize]
                .session
                .as_mut()
                .and_then(|s| s.advance(n, sent, &mut pacing));
            if let Some(w) = wake {
                let slot = &mut self.slots[key as usize];
                slot.generation = slot.generation.wrapping_add(1);
                self.wheel.insert(Entry {
                    key,
                    generation: slot.generation,
                    due: w,
                });
            }
        }
        for i in 0..self.due.len() {
            let e = self.due[i];
            let Some(slot) = self.slots.get_mut(e.key as usize) else {
                continue;
            };
            if slot.generation != e.generation {
                continue;
            }
            let Some(session) = slot.session.as_mut().filter(|s| s.is_interleaved()) else {
                continue;
            };
            if e.due > now + crate::wheel::TICK {
                continue;
            }
            if let Some(w) = session.pump_interleaved(&mut pacing) {
                slot.generation = slot.generation.wrapping_add(1);
                self.wheel.insert(Entry {
                    key: e.key,
                    generation: slot.generation,
                    due: w,
                });
            }
        }
        for e in self.later.drain(..) {
            self.wheel.insert(e);
        }
        self.flush_connections(now);
    }

    fn flush_connections(&mut self, now: Instant) {
        let mut blocked = false;
        for c in self.connections.values_mut() {
            blocked |= !c.flush() && !c.is_broken();
        }
        if blocked {
            // Keep the wheel turning until the replies are out.
            self.wheel.insert(Entry {
                key: u32::MAX,
                generation: 0,
                due: now + Duration::from_millis(1),
            });
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Add(spec) => {
                let id = spec.id;
                let session = Session::new(*spec);
                let key = match self.free.pop() {
                    Some(k) => {
                        self.slots[k as usize].session = Some(session);
                        k
                    }
                    None => {
                        self.slots.push(Slot {
                            session: Some(session),
                            generation: 0,
                        });
                        (self.slots.len() - 1) as u32
                    }
                };
                self.ids.insert(id, key);
            }
            Command::Play { id, start, reply } => {
                let key = self.ids.get(&id).copied();
                let info = key
                    .and_then(|k| self.slots[k as usize].session.as_mut())
                    .map(|s| s.play(start));
                if let Some(k) = key {
                    self.unschedule(k);
                }
                reply(info);
            }
            Command::Start { id } => {
                if let Some(&k) = self.ids.get(&id)
                    && let Some(s) = self.slots[k as usize].session.as_mut()
                {
                    let now = Instant::now();
                    s.start(now);
                    self.schedule(k, now);
                }
            }
            Command::Pause { id } => {
                if let Some(&k) = self.ids.get(&id) {
                    if let Some(s) = self.slots[k as usize].session.as_mut() {
                        s.pause();
                    }
                    self.unschedule(k);
                }
            }
            Command::Remove { id } => self.remove(id),
            Command::AttachConnection { conn, fd } => match Connection::new(fd) {
                Ok(c) => {
                    self.connections.insert(conn, c);
                }
                Err(e) => tracing::warn!(conn, "cannot attach connection: {e}"),
            },
            Command::Write { conn, bytes } => {
                if let Some(c) = self.connections.get_mut(&conn) {
                    c.write_control(&bytes);
                }
            }
            Command::DetachConnection { conn } => {
                let gone: Vec<u64> = self
                    .ids
                    .iter()
                    .filter(|&(_, &k)| {
                        self.slots[k as usize]
                            .session
                            .as_ref()
                            .is_some_and(|s| s.connection() == Some(conn))
                    })
                    .map(|(&id, _)| id)
                    .collect();
                for id in gone {
                    self.remove(id);
                }
                if let Some(mut c) = self.connections.remove(&conn) {
                    c.flush();
                }
            }
        }
    }

    fn remove(&mut self, id: u64) {
        if let Some(k) = self.ids.remove(&id) {
            self.slots[k as usize].session = None;
            self.unschedule(k);
            self.free.push(k);
        }
    }
}

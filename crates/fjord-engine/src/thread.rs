//! Engine threads: each owns a set of sessions and the RTSP connections they
//! stream over, paces them, and obeys commands from the control plane.

use std::{
    collections::HashMap,
    io,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::{
    Command,
    datapath::SendMsg,
    interleaved::Connection,
    session::{Pacing, Session},
};

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub threads: usize,
    /// How far ahead of its scheduled time a packet may leave.
    pub burst: Duration,
    pub rtcp_interval: Duration,
    /// RTCP CNAME of this server.
    pub cname: String,
}

/// Handle to the engine threads. Commands about one session (or one
/// connection) must always go to the same shard.
pub struct Engine {
    queues: Vec<Sender<Command>>,
    threads: Vec<JoinHandle<()>>,
}

impl Engine {
    pub fn start(config: EngineConfig) -> io::Result<Self> {
        let n = config.threads.max(1);
        let mut queues = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = crossbeam_channel::unbounded();
            let cfg = config.clone();
            let handle = std::thread::Builder::new()
                .name(format!("fjord-engine-{i}"))
                .spawn(move || Worker::new(cfg, rx).run())?;
            queues.push(tx);
            threads.push(handle);
        }
        Ok(Self { queues, threads })
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

struct Worker {
    config: EngineConfig,
    rx: Receiver<Command>,
    sessions: HashMap<u64, Session>,
    connections: HashMap<u64, Connection>,
    path: SendMsg,
}

impl Worker {
    fn new(config: EngineConfig, rx: Receiver<Command>) -> Self {
        Self {
            config,
            rx,
            sessions: HashMap::new(),
            connections: HashMap::new(),
            path: SendMsg,
        }
    }

    fn run(mut self) {
        let idle = Duration::from_secs(1);
        loop {
            let now = Instant::now();
            let wake = self.pump(now).unwrap_or(now + idle);
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

    fn pump(&mut self, now: Instant) -> Option<Instant> {
        let mut pacing = Pacing {
            now,
            burst: self.config.burst,
            rtcp_interval: self.config.rtcp_interval,
            cname: &self.config.cname,
            connections: &mut self.connections,
        };
        let mut wake: Option<Instant> = None;
        for s in self.sessions.values_mut() {
            if let Some(w) = s.pump(&mut pacing, &mut self.path) {
                wake = Some(wake.map_or(w, |x| x.min(w)));
            }
        }
        for c in self.connections.values_mut() {
            if !c.flush() && !c.is_broken() {
                let retry = now + Duration::from_millis(1);
                wake = Some(wake.map_or(retry, |x| x.min(retry)));
            }
        }
        wake
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Add(spec) => {
                let id = spec.id;
                self.sessions.insert(id, Session::new(*spec));
            }
            Command::Play { id, start, reply } => {
                let info = self.sessions.get_mut(&id).map(|s| s.play(start));
                reply(info);
            }
            Command::Start { id } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.start(Instant::now());
                }
            }
            Command::Pause { id } => {
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.pause();
                }
            }
            Command::Remove { id } => {
                self.sessions.remove(&id);
            }
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
                self.sessions.retain(|_, s| s.connection() != Some(conn));
                if let Some(mut c) = self.connections.remove(&conn) {
                    c.flush();
                }
            }
        }
    }
}

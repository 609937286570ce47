//! Connection slots: `max_connections` for the whole server, RTSP and HTTP
//! together, and at most `max_connections_per_address` of them for one
//! client address, so that one address cannot lock everybody else out.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(crate) struct Slots {
    all: Arc<Semaphore>,
    max: usize,
    /// Connections refused: at `max_connections`, at the per-address cap.
    refused: [AtomicU64; 2],
    /// 0: no cap per address (a reload may change it).
    per_address: AtomicUsize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place; given back when dropped.
pub(crate) struct Slot {
    _all: OwnedSemaphorePermit,
    slots: Arc<Slots>,
    addr: IpAddr,
}

/// Why a connection gets no slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    Server,
    Address,
}

impl Slots {
    pub(crate) fn new(max: usize, per_address: usize) -> Arc<Slots> {
        Arc::new(Slots {
            all: Arc::new(Semaphore::new(max)),
            max,
            refused: Default::default(),
            per_address: AtomicUsize::new(per_address),
            open: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn set_per_address(&self, cap: usize) {
        self.per_address.store(cap, Ordering::Relaxed);
    }

    /// Connections open now, RTSP and HTTP.
    pub(crate) fn open(&self) -> usize {
        self.max - self.all.available_permits()
    }

    /// Connections refused so far at `max_connections` and at
    /// `max_connections_per_address`.
    pub(crate) fn refused(&self) -> [u64; 2] {
        self.refused.each_ref().map(|n| n.load(Ordering::Relaxed))
    }

    /// A slot for a connection from `addr`, or which limit it meets.
    pub(crate) fn take(self: &Arc<Self>, addr: IpAddr) -> Result<Slot, Full> {
        let addr = addr.to_canonical();
        let all = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| Full::Server)?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(addr).or_insert(0);
        let cap = self.per_address.load(Ordering::Relaxed);
        if cap > 0 && *n >= cap {
            return Err(Full::Address);
        }
        *n += 1;
        Ok(Slot {
            _all: all,
            slots: self.clone(),
            addr,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.addr);
            }
        }
    }
}

/// A slot for a connection from `peer`, or `None` (logged): over the
/// limit a connection is closed at once, as no reply can be sent before
/// a request arrives.
pub(crate) fn take_or_log(
    slots: &Arc<Slots>,
    peer: std::net::SocketAddr,
    what: &str,
) -> Option<Slot> {
    let taken = slots.take(peer.ip());
    if let Err(full) = &taken {
        slots.refused[(*full == Full::Address) as usize].fetch_add(1, Ordering::Relaxed);
    }
    match taken {
        Ok(slot) => Some(slot),
        Err(Full::Server) => {
            tracing::warn!(%peer, "connection limit reached; refusing an {what} connection");
            None
        }
        Err(Full::Address) => {
            tracing::warn!(%peer, "max_connections_per_address reached; refusing an {what} connection");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_gets_its_share_and_the_server_its_total() {
        let slots = Slots::new(5, 2);
        let (a, b): (IpAddr, IpAddr) =
            ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
        let a1 = slots.take(a).unwrap();
        let _a2 = slots.take(a).unwrap();
        assert_eq!(slots.take(a).err(), Some(Full::Address));
        let mapped: IpAddr = "::ffff:198.18.0.1".parse().unwrap();
        assert_eq!(
            slots.take(mapped).err(),
            Some(Full::Address),
            "the same address in IPv6 form"
        );
        drop(a1);
        let _a3 = slots.take(a).unwrap();
        let _b: Vec<_> = (0..2).map(|_| slots.take(b).unwrap()).collect();
        let c: IpAddr = "198.18.0.3".parse().unwrap();
        let _c1 = slots.take(c).unwrap();
        assert_eq!(slots.take(c).err(), Some(Full::Server), "5 in all");
    }

    #[test]
    fn no_cap_per_address_when_zero() {
        let slots = Slots::new(3, 0);
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let _held: Vec<_> = (0..3).map(|_| slots.take(a).unwrap()).collect();
        assert_eq!(slots.take(a).err(), Some(Full::Server));
    }
}

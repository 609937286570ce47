//! The catalog's titles by name, bounded: past `cap` names, opening a new
//! one unloads the least recently opened titles that nothing holds (no
//! session, no waiting client, no background job), so neither a long
//! library walk nor a flood of names keeps files, mappings and memory
//! forever. Titles in use are never unloaded: the cap is exceeded rather
//! than a playing title closed.

use std::{collections::HashMap, sync::Arc};

pub(crate) struct TitleSlots<S> {
    map: HashMap<Arc<str>, Entry<S>>,
    /// Opens so far: the clock of "least recently opened".
    tick: u64,
    cap: usize,
}

struct Entry<S> {
    slot: Arc<S>,
    used: u64,
}

impl<S: Default> TitleSlots<S> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    /// The slot of `name` with the name as held, made if new; past the cap,
    /// idle titles are unloaded first (`idle`: the slot's title is held by
    /// no one else), never the one returned.
    pub(crate) fn open(&mut self, name: &str, idle: impl Fn(&S) -> bool) -> (Arc<str>, Arc<S>) {
        self.tick += 1;
        let used = self.tick;
        let found = match self.map.get_key_value(name) {
            Some((k, e)) => (k.clone(), e.slot.clone()),
            None => {
                let (k, slot) = (Arc::<str>::from(name), Arc::<S>::default());
                let e = Entry {
                    slot: slot.clone(),
                    used,
                };
                self.map.insert(k.clone(), e);
                (k, slot)
            }
        };
        if let Some(e) = self.map.get_mut(name) {
            e.used = used;
        }
        if self.map.len() > self.cap {
            self.unload(&idle);
        }
        found
    }

    /// Drops the least recently opened idle slots until the cap is met (or
    /// nothing idle is left). Slots handed out and still held are not idle.
    fn unload(&mut self, idle: &impl Fn(&S) -> bool) {
        let mut idle: Vec<(u64, Arc<str>)> = (self.map.iter())
            .filter(|(_, e)| Arc::strong_count(&e.slot) == 1 && idle(&e.slot))
            .map(|(k, e)| (e.used, k.clone()))
            .collect();
        idle.sort_unstable_by_key(|(used, _)| *used);
        let excess = self.map.len() - self.cap;
        for (_, name) in idle.into_iter().take(excess) {
            self.map.remove(&name);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<S>)> {
        self.map.iter().map(|(k, e)| (k, &e.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A slot whose title is in use or not.
    #[derive(Default)]
    struct Busy(AtomicBool);

    fn idle(s: &Busy) -> bool {
        !s.0.load(Ordering::Relaxed)
    }

    #[test]
    fn past_the_cap_the_least_recently_opened_idle_titles_go() {
        let mut t = TitleSlots::<Busy>::new(3);
        for name in ["a", "b", "c"] {
            t.open(name, idle);
        }
        t.open("a", idle); // now b is the oldest
        t.open("d", idle);
        let mut names: Vec<_> = t.iter().map(|(k, _)| k.to_string()).collect();
        names.sort();
        assert_eq!(names, ["a", "c", "d"]);
    }

    #[test]
    fn titles_in_use_stay_and_the_cap_gives_way() {
        let mut t = TitleSlots::<Busy>::new(2);
        let (_, a) = t.open("a", idle);
        a.0.store(true, Ordering::Relaxed);
        let (_, held) = t.open("b", idle); // a caller still holds b's slot
        t.open("c", idle);
        assert_eq!(t.iter().count(), 3, "nothing idle to unload");
        drop(held);
        t.open("d", idle);
        let mut names: Vec<_> = t.iter().map(|(k, _)| k.to_string()).collect();
        names.sort();
        assert_eq!(names, ["a", "d"], "b and c went, a (in use) stayed");
    }

    #[test]
    fn a_flood_of_names_keeps_the_map_at_its_cap() {
        let mut t = TitleSlots::<Busy>::new(16);
        for i in 0..10_000 {
            t.open(&format!("t{i}"), idle);
        }
        assert_eq!(t.iter().count(), 16);
    }
}

//! How often each title is asked for at this node: an exponentially
//! decayed rate per title, for at most [`TRACKED`] titles; and which
//! titles hold the most sessions ([`busiest`]). Pure code: the time is an
//! argument.

use std::collections::HashMap;

/// Titles tracked at most; past it the one asked for least goes.
pub const TRACKED: usize = 1024;
/// Titles a node publishes in its record: the most asked for.
pub const PUBLISHED: usize = 32;

/// Request rates by title.
#[derive(Debug)]
pub struct Rates {
    /// The decay's time constant, in nanoseconds.
    tau_ns: f64,
    /// Title → (rate at `at`, `at`).
    titles: HashMap<String, (f64, u64)>,
}

impl Rates {
    /// Rates averaged over about `tau_s` seconds.
    pub fn new(tau_s: f64) -> Rates {
        Rates {
            tau_ns: tau_s.max(0.001) * 1e9,
            titles: HashMap::new(),
        }
    }

    fn decayed(&self, (rate, at): (f64, u64), now_ns: u64) -> f64 {
        rate * (-(now_ns.saturating_sub(at) as f64) / self.tau_ns).exp()
    }

    /// `title` was asked for at `now_ns`.
    pub fn hit(&mut self, title: &str, now_ns: u64) {
        let add = 1e9 / self.tau_ns;
        if let Some(&v) = self.titles.get(title) {
            let r = self.decayed(v, now_ns) + add;
            self.titles.insert(title.to_owned(), (r, now_ns));
            return;
        }
        if self.titles.len() >= TRACKED {
            let least = (self.titles.iter())
                .map(|(t, &v)| (self.decayed(v, now_ns), t))
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, t)| t.clone());
            if let Some(t) = least {
                self.titles.remove(&t);
            }
        }
        self.titles.insert(title.to_owned(), (add, now_ns));
    }

    /// `title`'s requests a second now.
    pub fn rate(&self, title: &str, now_ns: u64) -> f64 {
        (self.titles.get(title)).map_or(0.0, |&v| self.decayed(v, now_ns))
    }

    /// The `n` titles asked for most, with their rates, most first.
    pub fn top(&self, n: usize, now_ns: u64) -> Vec<(String, f64)> {
        let mut all: Vec<(String, f64)> = (self.titles.iter())
            .map(|(t, &v)| (t.clone(), self.decayed(v, now_ns)))
            .filter(|(_, r)| *r > 0.001)
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }
}

/// The `n` titles with the most sessions, with their sessions, most
/// first (then by name), from each session's title.
pub fn busiest<'a>(sessions: impl Iterator<Item = &'a str>, n: usize) -> Vec<(String, u64)> {
    let mut count: HashMap<&str, u64> = HashMap::new();
    for title in sessions {
        *count.entry(title).or_default() += 1;
    }
    let mut all: Vec<(String, u64)> = (count.into_iter())
        .map(|(t, c)| (t.to_owned(), c))
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(n);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_steady_rate_is_measured_and_decays_when_it_stops() {
        let mut r = Rates::new(10.0);
        // 5 a second for a minute.
        for i in 0..300 {
            r.hit("hot", i * S / 5);
        }
        let now = 60 * S;
        assert!(
            (r.rate("hot", now) - 5.0).abs() < 0.3,
            "{}",
            r.rate("hot", now)
        );
        assert!(r.rate("hot", now + 60 * S) < 0.02);
        assert_eq!(r.rate("cold", now), 0.0);
    }

    #[test]
    fn it_tracks_a_bounded_number_of_titles_keeping_the_hot_ones() {
        let mut r = Rates::new(10.0);
        for _ in 0..50 {
            r.hit("hot", 0);
        }
        for i in 0..(TRACKED as u64 * 3) {
            r.hit(&format!("t{i}"), i);
        }
        assert!(r.titles.len() <= TRACKED);
        let top = r.top(3, TRACKED as u64 * 3);
        assert_eq!(top[0].0, "hot");
        assert_eq!(top.len(), 3);
    }

    #[test]
    fn the_busiest_titles_are_counted_from_the_sessions() {
        let sessions = ["b", "a", "c", "a", "b", "a"];
        let want = [("a", 3), ("b", 2)].map(|(t, n)| (t.to_owned(), n));
        assert_eq!(busiest(sessions.into_iter(), 2), want);
        assert!(busiest([].into_iter(), 2).is_empty());
    }
}

//! Where a title is served: rendezvous (highest random weight) hashing.
//!
//! A title's order of nodes is the members ranked by a hash of (title,
//! node name); its home set is the first `k`. A member that joins or
//! leaves moves only the titles it ranks first (about 1/N of them), and
//! every node computes the same order from the same members with nothing
//! shared but their names. Pure code: members and loads in, a choice out.

/// A member as placement sees it: its name and how full it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node<'a> {
    pub name: &'a str,
    /// Sessions it serves now.
    pub load: u64,
    /// The most it takes; 0: unknown (never full).
    pub capacity: u64,
}

impl Node<'_> {
    fn full(&self) -> bool {
        self.capacity != 0 && self.load >= self.capacity
    }
}

/// Where a request for a title goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice<'a> {
    /// Served by the node asked.
    Here,
    /// Sent on to this member.
    To(&'a str),
}

/// The rendezvous weight of `node` for `title`: BLAKE3 of both (the
/// title's length first, so no two pairs hash the same bytes).
pub fn weight(title: &str, node: &str) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&(title.len() as u64).to_le_bytes());
    h.update(title.as_bytes());
    h.update(node.as_bytes());
    let bytes = h.finalize();
    u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// `nodes` in `title`'s order, best first (ties, only between equal
/// names, by name).
pub fn rank<'a, 'n>(title: &str, nodes: &'n [Node<'a>]) -> Vec<&'n Node<'a>> {
    let mut ranked: Vec<(u64, &Node)> = nodes.iter().map(|n| (weight(title, n.name), n)).collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(b.1.name)));
    ranked.into_iter().map(|(_, n)| n).collect()
}

/// The first `copies` (at least one) of `title`'s order: its home set.
pub fn home<'a>(title: &str, nodes: &[Node<'a>], copies: usize) -> Vec<&'a str> {
    let ranked = rank(title, nodes);
    let k = copies.clamp(1, ranked.len().max(1));
    ranked.iter().take(k).map(|n| n.name).collect()
}

/// Where a request for `title` that reached `me` goes, among `nodes`
/// (which hold `me`, with its load now), the title having `copies` home
/// nodes: here when `me` is a home node with room; else the least loaded
/// home node with room (by share of its capacity, then by order); when
/// every home node is full, the next node in the title's order with room
/// (here, if that is `me`). With no room anywhere: here, which refuses it.
pub fn choose<'a>(title: &str, me: &str, nodes: &[Node<'a>], copies: usize) -> Choice<'a> {
    let ranked = rank(title, nodes);
    let k = copies.clamp(1, ranked.len().max(1)).min(ranked.len());
    let (homes, rest) = ranked.split_at(k);
    if homes.iter().any(|n| n.name == me && !n.full()) {
        return Choice::Here;
    }
    let least = homes.iter().filter(|n| !n.full()).min_by_key(|n| share(n));
    let next = least.or_else(|| rest.iter().find(|n| !n.full()));
    match next {
        Some(n) if n.name != me => Choice::To(n.name),
        _ => Choice::Here,
    }
}

/// A node's load as a share of its capacity, in millionths (an unknown
/// capacity counts as a million sessions).
fn share(n: &Node) -> u64 {
    let cap = if n.capacity == 0 {
        1_000_000
    } else {
        n.capacity
    };
    n.load.saturating_mul(1_000_000) / cap
}

/// How many home nodes a title gets when it is asked for `rate` times a
/// second across the cluster: one per `per_copy` requests a second
/// (`per_copy` 0: always `least`), at least `least`, at most `members`.
pub fn copies(rate: f64, per_copy: f64, least: usize, members: usize) -> usize {
    let hot = if per_copy > 0.0 && rate.is_finite() && rate > 0.0 {
        (rate / per_copy).ceil().min(members as f64) as usize
    } else {
        0
    };
    hot.max(least).clamp(1, members.max(1))
}

#[cfg(test)]
mod tests;

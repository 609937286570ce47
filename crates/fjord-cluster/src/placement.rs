//! Where a title is served: rendezvous (highest random weight) hashing.
//!
//! A title's order of nodes is the members ranked by a hash of (title,
//! node name); its home set is the first `k`. A member that joins or
//! leaves moves only the titles it ranks first (about 1/N of them), and
//! every node computes the same order from the same members with nothing
//! shared but their names. A title's viewers go to the least loaded of
//! its homes; a title holding much of the cluster's load gets more homes
//! ([`copies_for_sessions`]). Loads are bounded (consistent hashing with
//! bounded loads): a node over `1 + ε` of its share of the cluster's load
//! passes new viewers to the next nodes in the title's order. Pure code:
//! members and loads in, a choice out.

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

/// How a title's requests are placed, beside its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Home nodes of the title (at least one).
    pub copies: usize,
    /// ε of bounded loads, in percent: a node takes a new viewer only
    /// while its load, the viewer counted, is within `1 + ε` of its
    /// share of the cluster's ([`Bound`]); 0: no bound.
    pub balance_pct: u32,
}

/// The most redirects one request takes: one by placement, one more when
/// the node it was sent to is full. A request sent on this often is
/// served where it lands (or refused there).
pub const HOPS: usize = 2;

/// Where a request for `title` that reached `me` goes, among `nodes`
/// (which hold `me`, with its load now), sent on by placement from `via`
/// (its mark; empty: not sent by placement).
///
/// Not sent on: the least loaded home node with room, under the bound
/// (by share of its capacity; between equals `me`, then the first in
/// order); else the next node in the title's order so (here, if that is
/// `me`). A node is under the bound when taking one more viewer keeps it
/// within `1 + ε` of its part of the cluster's load, or [`FEW`] sessions
/// over it (Mirrokni, Thorup, Zadimoghaddam, "Consistent hashing with
/// bounded loads"); with none both under it and with room, the same
/// without the bound. With no room anywhere: here, which refuses it.
///
/// Sent on: here unless `me` is full (loads other nodes see are up to a
/// renewal old; the sender judged by them, so sending back could loop);
/// full, the next node in order with room that the request has not been
/// through, while it has taken fewer than [`HOPS`] redirects.
pub fn choose<'a>(
    title: &str,
    me: &str,
    nodes: &[Node<'a>],
    rule: Rule,
    via: &[&str],
) -> Choice<'a> {
    let ranked = rank(title, nodes);
    if !via.is_empty() {
        return onward(&ranked, me, via);
    }
    let k = rule.copies.clamp(1, ranked.len().max(1)).min(ranked.len());
    let (homes, rest) = ranked.split_at(k);
    let bound = Bound::of(nodes, rule.balance_pct);
    let balanced = pick(homes, rest, me, |n| !n.full() && bound.takes(n));
    match balanced.or_else(|| pick(homes, rest, me, |n| !n.full())) {
        Some(n) if n.name != me => Choice::To(n.name),
        _ => Choice::Here,
    }
}

/// The node a request goes to among those `open` takes: the least
/// loaded home (`me` between equals: no redirect); else the first of the
/// rest. Every home, `me` too, is judged by load: a title has several
/// homes to spread its viewers over them.
fn pick<'n, 'a>(
    homes: &[&'n Node<'a>],
    rest: &[&'n Node<'a>],
    me: &str,
    open: impl Fn(&Node) -> bool,
) -> Option<&'n Node<'a>> {
    let least = (homes.iter().filter(|n| open(n))).min_by_key(|n| (share(n), n.name != me));
    least.or_else(|| rest.iter().find(|n| open(n))).copied()
}

/// Where a request placement sent through `via` goes from `me`.
fn onward<'a>(ranked: &[&Node<'a>], me: &str, via: &[&str]) -> Choice<'a> {
    let full = ranked.iter().any(|n| n.name == me && n.full());
    if !full || via.len() >= HOPS {
        return Choice::Here;
    }
    let fresh = |n: &&&Node| n.name != me && !via.contains(&n.name) && !n.full();
    match ranked.iter().find(fresh) {
        Some(n) => Choice::To(n.name),
        None => Choice::Here,
    }
}

/// Sessions too few to be worth an origin fetch: a node within this
/// many of its bound is under it, and a title gets no more homes than
/// one per this many of its sessions. Each viewer sent to a node that
/// does not hold its title costs a fetch of the whole title; balancing
/// a few sessions (at a cluster's start, or in a small one) is not
/// worth that.
pub const FEW: u64 = 3;

/// The bound on each node's load: with `L` sessions in the cluster and
/// `C` its capacity, a node of capacity `c` takes one more while its
/// load is under `(1 + ε)·(L + 1)·c / C + FEW` (so after it takes it, it
/// is at most [`FEW`] and one over `1 + ε` times its share). The
/// cluster's load is always under the sum of these, so some node is
/// under its bound. No bound when ε is 0 or a node's capacity is unknown
/// (its load is too: static peers).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    /// `100 + ε` in percent, `L + 1` and `C`; none: no bound.
    of: Option<(u128, u128, u128)>,
}

impl Bound {
    pub fn of(nodes: &[Node], balance_pct: u32) -> Bound {
        let known = !nodes.is_empty() && nodes.iter().all(|n| n.capacity != 0);
        let of = (balance_pct != 0 && known).then(|| {
            let load: u128 = nodes.iter().map(|n| u128::from(n.load)).sum();
            let capacity: u128 = nodes.iter().map(|n| u128::from(n.capacity)).sum();
            (100 + u128::from(balance_pct), load + 1, capacity)
        });
        Bound { of }
    }

    /// Whether `n` takes one more viewer within the bound.
    pub fn takes(&self, n: &Node) -> bool {
        self.of.is_none_or(|(pct, load, capacity)| {
            let over = u128::from(n.load.saturating_sub(FEW));
            over * capacity * 100 < pct * load * u128::from(n.capacity)
        })
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

/// How many home nodes a title needs for what it costs: one per
/// `share_pct` percent of a node's balanced share of the cluster's
/// sessions that the title's sessions take (`sessions` of the title and
/// `load` of the cluster, the viewer placed counted in neither), so that
/// no home holds more than that much of one title; at most one per
/// [`FEW`] of its sessions and `members`, at least one. `share_pct` 0:
/// one.
pub fn copies_for_sessions(sessions: u64, load: u64, members: usize, share_pct: u32) -> usize {
    let (s, n) = (u128::from(sessions) + 1, members.max(1) as u128);
    if share_pct == 0 {
        return 1;
    }
    // s / (pct/100 · (load + 1) / n), rounded up.
    let per = u128::from(share_pct) * (u128::from(load) + 1);
    let by_share = (s * n * 100).div_ceil(per);
    let by_few = (s / u128::from(FEW)).max(1);
    by_share.min(by_few).min(n) as usize
}

#[cfg(test)]
mod tests;

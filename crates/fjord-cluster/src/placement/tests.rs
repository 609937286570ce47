use proptest::prelude::*;

use super::*;

fn nodes<'a>(names: &'a [String]) -> Vec<Node<'a>> {
    names
        .iter()
        .map(|n| Node {
            name: n,
            load: 0,
            capacity: 0,
        })
        .collect()
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node-{i}")).collect()
}

fn rule(copies: usize) -> Rule {
    Rule {
        copies,
        balance_pct: 0,
    }
}

fn first<'a>(title: &str, nodes: &[Node<'a>]) -> &'a str {
    home(title, nodes, 1)[0]
}

#[test]
fn titles_spread_evenly_over_the_members() {
    let names = names(5);
    let nodes = nodes(&names);
    let mut count = std::collections::HashMap::new();
    for t in 0..20_000 {
        *count
            .entry(first(&format!("films/{t}.mp4"), &nodes))
            .or_insert(0) += 1;
    }
    for (name, n) in count {
        // 4,000 each; a binomial's 3 sigma is about 170.
        assert!((3_700..=4_300).contains(&n), "{name}: {n}");
    }
}

#[test]
fn a_node_joining_takes_about_one_in_n_and_moves_nothing_else() {
    let before = names(4);
    let mut after = before.clone();
    after.push("node-new".into());
    let (b, a) = (nodes(&before), nodes(&after));
    let mut moved = 0;
    for t in 0..20_000 {
        let title = format!("t{t}.ts");
        let (was, is) = (first(&title, &b), first(&title, &a));
        if was != is {
            assert_eq!(is, "node-new", "{title} moved between old nodes");
            moved += 1;
        }
    }
    // 1/5 of 20,000.
    assert!((3_700..=4_300).contains(&moved), "{moved} moved");
}

#[test]
fn a_hot_title_is_served_by_its_first_nodes_least_loaded_first() {
    let names = names(5);
    let mut n = nodes(&names);
    let order: Vec<&str> = rank("hot.ts", &n).iter().map(|n| n.name).collect();
    let (a, b, c) = (order[0], order[1], order[2]);
    for node in n.iter_mut() {
        node.capacity = 100;
        node.load = if node.name == a { 50 } else { 10 };
    }
    assert_eq!(
        choose("hot.ts", c, &n, rule(2), &[]),
        Choice::To(b),
        "the less loaded home"
    );
    assert_eq!(
        choose("hot.ts", a, &n, rule(2), &[]),
        Choice::To(b),
        "a home more loaded than another"
    );
    assert_eq!(
        choose("hot.ts", c, &n, rule(3), &[]),
        Choice::Here,
        "a home as little loaded as any"
    );
    assert_eq!(choose("hot.ts", b, &n, rule(3), &[]), Choice::Here);
    assert_eq!(
        choose("hot.ts", a, &n, rule(1), &[]),
        Choice::Here,
        "the only home"
    );
}

#[test]
fn a_full_node_sends_on_to_the_next_in_order_and_none_with_room_keeps_it() {
    let names = names(3);
    let mut n = nodes(&names);
    let order: Vec<&str> = rank("t.ts", &n).iter().map(|n| n.name).collect();
    for node in n.iter_mut() {
        node.capacity = 10;
        node.load = if node.name == order[0] { 10 } else { 0 };
    }
    assert_eq!(
        choose("t.ts", order[0], &n, rule(1), &[]),
        Choice::To(order[1])
    );
    assert_eq!(
        choose("t.ts", order[2], &n, rule(1), &[]),
        Choice::To(order[1])
    );
    assert_eq!(choose("t.ts", order[1], &n, rule(1), &[]), Choice::Here);
    for node in n.iter_mut() {
        node.load = 10;
    }
    assert_eq!(choose("t.ts", order[2], &n, rule(1), &[]), Choice::Here);
}

#[test]
fn copies_grow_with_the_rate_within_the_members() {
    assert_eq!(copies(0.0, 10.0, 1, 5), 1);
    assert_eq!(copies(25.0, 10.0, 1, 5), 3);
    assert_eq!(copies(1e9, 10.0, 1, 5), 5);
    assert_eq!(copies(25.0, 0.0, 2, 5), 2);
    assert_eq!(copies(f64::NAN, 10.0, 1, 5), 1);
    assert_eq!(copies(5.0, 1.0, 1, 0), 1);
}

#[test]
fn copies_grow_with_a_titles_share_of_the_sessions() {
    // 5 nodes, 99 sessions and the new one: a node's share is 20, a
    // quarter of it 5. A title of 4 sessions (5 with the new one) keeps
    // one home; of 5, two; of 12, three (13 / 5, rounded up).
    assert_eq!(copies_for_sessions(4, 99, 5, 25), 1);
    assert_eq!(copies_for_sessions(5, 99, 5, 25), 2);
    assert_eq!(copies_for_sessions(12, 99, 5, 25), 3);
    // At most every member, and one home per FEW of its sessions: at a
    // cluster's start every title is a large share of few sessions.
    assert_eq!(copies_for_sessions(99, 99, 5, 25), 5);
    assert_eq!(copies_for_sessions(1, 1, 5, 25), 1);
    assert_eq!(copies_for_sessions(5, 5, 5, 25), 2);
    // Off, and no members.
    assert_eq!(copies_for_sessions(99, 99, 5, 0), 1);
    assert_eq!(copies_for_sessions(9, 9, 0, 25), 1);
}

#[test]
fn no_members_is_here() {
    assert_eq!(choose("t.ts", "me", &[], rule(1), &[]), Choice::Here);
    assert!(home("t.ts", &[], 1).is_empty());
}

fn balanced(copies: usize, pct: u32) -> Rule {
    Rule {
        copies,
        balance_pct: pct,
    }
}

#[test]
fn a_home_past_the_bound_passes_new_viewers_to_the_next_node_which_keeps_them() {
    let names = names(3);
    let mut n = nodes(&names);
    let order: Vec<&str> = rank("t.ts", &n).iter().map(|n| n.name).collect();
    for node in n.iter_mut() {
        node.capacity = 100;
        node.load = if node.name == order[0] { 16 } else { 8 };
    }
    // 33 sessions with the new one: a third is 11, +10 % is 12.1, and
    // FEW over that 15.1.
    let rule = balanced(1, 10);
    assert_eq!(
        choose("t.ts", order[0], &n, rule, &[]),
        Choice::To(order[1])
    );
    assert_eq!(
        choose("t.ts", order[2], &n, rule, &[]),
        Choice::To(order[1])
    );
    assert_eq!(choose("t.ts", order[1], &n, rule, &[]), Choice::Here);
    // Sent on: kept, even where this node's view says it is over too.
    n.iter_mut().for_each(|x| x.load = 20);
    assert_eq!(
        choose("t.ts", order[1], &n, rule, &[order[0]]),
        Choice::Here
    );
    // Within the bound (or without one) the home keeps its titles.
    assert_eq!(
        choose("t.ts", order[2], &n, rule, &[]),
        Choice::To(order[0])
    );
    n.iter_mut()
        .for_each(|x| x.load = if x.name == order[0] { 40 } else { 0 });
    assert_eq!(
        choose("t.ts", order[0], &n, balanced(1, 0), &[]),
        Choice::Here
    );
    // Unknown capacities (static peers): unknown loads, no bound.
    n.iter_mut().for_each(|x| x.capacity = 0);
    assert_eq!(choose("t.ts", order[0], &n, rule, &[]), Choice::Here);
}

#[test]
fn a_full_node_sends_a_marked_request_on_once_and_never_back() {
    let names = names(4);
    let mut n = nodes(&names);
    let order: Vec<&str> = rank("t.ts", &n).iter().map(|n| n.name).collect();
    for node in n.iter_mut() {
        node.capacity = 10;
        node.load = if node.name == order[1] { 10 } else { 0 };
    }
    let rule = balanced(1, 10);
    // From order[0] to a full order[1]: on to order[2], not back.
    let sent = choose("t.ts", order[1], &n, rule, &[order[0]]);
    assert_eq!(sent, Choice::To(order[2]));
    // A second hop is the last: served (or refused) where it lands.
    n.iter_mut().for_each(|x| x.load = 10);
    let last = choose("t.ts", order[2], &n, rule, &[order[0], order[1]]);
    assert_eq!(last, Choice::Here);
    // Full with nowhere new to go: here.
    assert_eq!(
        choose("t.ts", order[1], &n, rule, &[order[0]]),
        Choice::Here
    );
}

proptest! {
    /// A node leaving moves exactly the titles it was first for; each
    /// goes to the node it ranked second.
    #[test]
    fn a_node_leaving_moves_only_its_own_titles(
        n in 2usize..8, gone in 0usize..8, titles in prop::collection::vec(".{0,40}", 1..50)
    ) {
        let all = names(n);
        let gone = gone % n;
        let left: Vec<String> = all.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, s)| s.clone()).collect();
        let (a, l) = (nodes(&all), nodes(&left));
        for t in &titles {
            let before = home(t, &a, 2);
            let after = first(t, &l);
            if before[0] == all[gone] {
                prop_assert_eq!(after, before[1]);
            } else {
                prop_assert_eq!(after, before[0]);
            }
        }
    }

    /// With a title on several homes, a node leaving moves only what it
    /// held: every other home of every title stays one.
    #[test]
    fn a_node_leaving_keeps_every_other_home(
        n in 2usize..8, gone in 0usize..8, k in 1usize..5, titles in prop::collection::vec(".{0,40}", 1..50)
    ) {
        let all = names(n);
        let gone = &all[gone % n];
        let left: Vec<String> = all.iter().filter(|x| *x != gone).cloned().collect();
        let (a, l) = (nodes(&all), nodes(&left));
        for t in &titles {
            let after = home(t, &l, k);
            for h in home(t, &a, k).into_iter().filter(|h| h != gone) {
                prop_assert!(after.contains(&h), "{t}: {h} lost");
            }
        }
    }

    /// Homes by sessions: one at least, every member at most, never
    /// fewer for more sessions; a title holding more than a node's share
    /// (and twice the `FEW` sessions a home is worth) gets two or more.
    #[test]
    fn copies_for_sessions_stay_within_the_members(
        sessions in 0u64..10_000, more in 0u64..100, load in 0u64..100_000,
        n in 0usize..20, pct in 0u32..=1000,
    ) {
        let load = load.max(sessions + more);
        let k = copies_for_sessions(sessions, load, n, pct);
        prop_assert!(k >= 1 && k <= n.max(1));
        prop_assert!(copies_for_sessions(sessions + more, load, n, pct) >= k);
        // Over a node's share, (load + 1) / n.
        let over = (sessions + 1) * n as u64 > load + 1 && sessions + 1 >= 2 * FEW;
        if over && n >= 2 && (1..=100).contains(&pct) {
            prop_assert!(k >= 2, "{sessions} of {load} over {n}: {k}");
        }
    }

    /// Every node computes the same order whatever order it lists the
    /// members in, and a choice is always a member.
    #[test]
    fn the_order_is_the_members_own(
        n in 1usize..8, title in ".{0,60}", shift in 0usize..8, me in 0usize..8,
        loads in prop::collection::vec((0u64..20, 0u64..20), 8)
    ) {
        let all = names(n);
        let mut a = nodes(&all);
        for (node, (load, cap)) in a.iter_mut().zip(loads) {
            node.load = load;
            node.capacity = cap;
        }
        let mut b = a.clone();
        b.rotate_left(shift % n);
        let ra: Vec<&str> = rank(&title, &a).iter().map(|x| x.name).collect();
        let rb: Vec<&str> = rank(&title, &b).iter().map(|x| x.name).collect();
        prop_assert_eq!(&ra, &rb);
        let me = &all[me % n];
        match choose(&title, me, &a, rule(1), &[]) {
            Choice::Here => {}
            Choice::To(to) => {
                prop_assert!(all.iter().any(|x| x == to));
                prop_assert_ne!(to, me.as_str());
            }
        }
    }

    /// Viewers arriving at random entries, each placed with the loads
    /// as they are and following its redirect: no node ever holds more
    /// than 1 + ε of its share of the cluster's sessions, plus FEW and
    /// one.
    #[test]
    fn no_node_takes_a_viewer_past_the_bound(
        n in 2usize..7, pct in 1u32..60, caps in prop::collection::vec(1u64..4, 7),
        arrivals in prop::collection::vec((0usize..40, 0usize..7), 1..300),
    ) {
        let all = names(n);
        let mut a = nodes(&all);
        for (node, c) in a.iter_mut().zip(&caps) {
            node.capacity = c * 1000;
        }
        let rule = balanced(1, pct);
        for (title, entry) in arrivals {
            let title = format!("t{title}.ts");
            let entry = all[entry % n].as_str();
            let to = match choose(&title, entry, &a, rule, &[]) {
                Choice::Here => entry,
                Choice::To(to) => {
                    prop_assert_eq!(choose(&title, to, &a, rule, &[entry]), Choice::Here);
                    to
                }
            };
            a.iter_mut().find(|x| x.name == to).unwrap().load += 1;
            let load: u64 = a.iter().map(|x| x.load).sum();
            let capacity: u64 = a.iter().map(|x| x.capacity).sum();
            for x in &a {
                let bound = (1.0 + pct as f64 / 100.0) * (load * x.capacity) as f64 / capacity as f64;
                let most = bound + FEW as f64 + 1.0;
                prop_assert!(x.load as f64 <= most, "{} holds {} of {}", x.name, x.load, load);
            }
        }
    }

    /// A request placement sent on is served where it lands unless that
    /// node is full; then sent on once more at most, never to a node it
    /// came through.
    #[test]
    fn a_marked_request_is_never_sent_back(
        n in 2usize..8, title in ".{0,30}", me in 0usize..8, from in prop::collection::vec(0usize..8, 1..=2),
        loads in prop::collection::vec((0u64..6, 0u64..6), 8), pct in 0u32..50,
    ) {
        let all = names(n);
        let mut a = nodes(&all);
        for (node, (load, cap)) in a.iter_mut().zip(loads) {
            node.load = load;
            node.capacity = cap;
        }
        let me = &all[me % n];
        let via: Vec<&str> = from.iter().map(|i| all[i % n].as_str()).filter(|v| v != me).collect();
        prop_assume!(!via.is_empty());
        let room = a.iter().any(|x| x.name == me && !x.full());
        match choose(&title, me, &a, balanced(1, pct), &via) {
            Choice::Here => {}
            Choice::To(to) => {
                prop_assert!(!room && via.len() < HOPS);
                prop_assert!(to != me && !via.contains(&to));
                prop_assert!(a.iter().any(|x| x.name == to && !x.full()));
            }
        }
    }
}

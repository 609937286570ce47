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
        choose("hot.ts", c, &n, 2),
        Choice::To(b),
        "the less loaded home"
    );
    assert_eq!(choose("hot.ts", a, &n, 2), Choice::Here, "a home with room");
    assert_eq!(choose("hot.ts", c, &n, 3), Choice::Here);
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
    assert_eq!(choose("t.ts", order[0], &n, 1), Choice::To(order[1]));
    assert_eq!(choose("t.ts", order[2], &n, 1), Choice::To(order[1]));
    assert_eq!(choose("t.ts", order[1], &n, 1), Choice::Here);
    for node in n.iter_mut() {
        node.load = 10;
    }
    assert_eq!(choose("t.ts", order[2], &n, 1), Choice::Here);
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
fn no_members_is_here() {
    assert_eq!(choose("t.ts", "me", &[], 1), Choice::Here);
    assert!(home("t.ts", &[], 1).is_empty());
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
        match choose(&title, me, &a, 1) {
            Choice::Here => {}
            Choice::To(to) => {
                prop_assert!(all.iter().any(|x| x == to));
                prop_assert_ne!(to, me.as_str());
            }
        }
    }
}

use proptest::prelude::*;

use super::*;

fn query(path: &str) -> &str {
    path.split_once('?').map_or("", |(_, q)| q)
}

#[test]
fn a_redirect_marks_the_path_and_keeps_the_rest_of_its_query() {
    assert_eq!(
        put("/films/a%20b.ts", &["node-1"]),
        "/films/a%20b.ts?fjord-placed=node-1"
    );
    assert_eq!(
        put("/t.ts/index.m3u8?x=1&fjord-placed=a&y", &["a", "b c"]),
        "/t.ts/index.m3u8?x=1&y&fjord-placed=a,b%20c"
    );
    assert_eq!(read("x=1&fjord-placed=a,b%20c"), ["a", "b c"]);
    assert_eq!(read("fjord-placed=n%C3%A9"), ["né"]);
}

#[test]
fn anything_but_one_well_formed_mark_is_no_mark() {
    for query in [
        "",
        "broadcast",
        "fjord-placed",
        "fjord-placed=",
        "fjord-placed=a,",
        "fjord-placed=a,b,c",
        "fjord-placed=a&fjord-placed=b",
        "fjord-placed=a%2",
        "fjord-placed=a%+5",
        "fjord-placed=a%zz",
        "fjord-placed=%FF",
        "fjord-placed=a b",
        "fjord-placed=a/b",
        "Fjord-Placed=a",
    ] {
        assert!(read(query).is_empty(), "{query:?}: {:?}", read(query));
    }
}

proptest! {
    /// Whatever names, and whatever query came before, the mark put is
    /// read back as those names, and the path is unchanged.
    #[test]
    fn a_mark_put_is_read_back(
        names in prop::collection::vec(".{1,20}", 1..=HOPS),
        path in "/[a-z/%.]{0,20}",
        before in "[a-z=&]{0,20}",
    ) {
        let via: Vec<&str> = names.iter().map(String::as_str).collect();
        let marked = put(&format!("{path}?{before}"), &via);
        let head = format!("{path}?");
        prop_assert!(marked.starts_with(&head));
        prop_assert_eq!(&read(query(&marked)), &names);
        let again = put(&marked, &via[..1]);
        prop_assert_eq!(read(query(&again)), &names[..1]);
    }

    /// Arbitrary queries read as a mark of at most HOPS names, never a
    /// panic.
    #[test]
    fn any_query_reads_as_at_most_hops_names(query in ".{0,80}") {
        let names = read(&query);
        prop_assert!(names.len() <= HOPS);
        prop_assert!(names.iter().all(|n| !n.is_empty()));
    }
}

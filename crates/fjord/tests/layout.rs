//! The layout rules as code (docs/architecture.md, "Rules"):
//!
//! 1. No `.rs` file under `crates/*/src` is longer than [`MAX_LINES`]
//!    lines; a test module (a file named `tests.rs`, or one under a
//!    `tests/` directory) is exempt.
//! 2. The top-level modules of `fjord-server` and of `fjord-engine` import
//!    each other without a circle. Each file under `src/` belongs to its
//!    top-level module (`src/foo.rs` and `src/foo/**` are `foo`); `lib.rs`
//!    is the root and belongs to none. A module depends on another when its
//!    code names a path into it: `crate::bar::…` in a `use` (grouped ones
//!    too: `use crate::{a, b::c}`) or in code, `super::…` that climbs out
//!    of the module, or `crate::Name` where `lib.rs` imports `Name` from
//!    `bar`. Comments, strings and `#[cfg(test)] mod` blocks are not code
//!    here.
//!
//! 3. Every crate's root (`lib.rs`, else `main.rs`) forbids `unsafe`, or
//!    denies an `unsafe` block without a `SAFETY:` comment.
//!
//! Pure Rust over the source tree: no dependency, no build of the crates
//! it reads. By hand because `cargo modules dependencies --acyclic` does
//! the second rule but builds rust-analyzer (many minutes on CI's two
//! cores), and a full parser (`syn`) would take every item for the few
//! paths this needs.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::{Path, PathBuf},
};

/// The most lines a source file may have.
const MAX_LINES: usize = 1200;

/// The crates whose top-level modules must not import in a circle.
const ACYCLIC_CRATES: &[&str] = &["fjord-server", "fjord-engine"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// ---------------------------------------------------------------- the rules

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let root = workspace();
    let mut long = Vec::new();
    for krate in crate_dirs(&root) {
        let src = krate.join("src");
        for file in rust_files(&src) {
            let rel = file.strip_prefix(&src).expect("under src");
            if is_test_module(rel) {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("readable source");
            let lines = text.lines().count();
            if lines > MAX_LINES {
                let shown = file.strip_prefix(&root).unwrap_or(&file).to_owned();
                long.push((shown, lines));
            }
        }
    }
    long.sort();
    let report: String = long
        .iter()
        .map(|(f, n)| format!("  {}: {n} lines\n", f.display()))
        .collect();
    assert!(
        long.is_empty(),
        "{} source files are longer than {MAX_LINES} lines (split them by concept; \
         a test module, tests.rs or under tests/, is exempt):\n{report}",
        long.len()
    );
}

#[test]
fn top_level_modules_import_without_circles() {
    let root = workspace();
    let mut report = String::new();
    for name in ACYCLIC_CRATES {
        let src = root.join("crates").join(name).join("src");
        let graph = crate_graph(&src, &root);
        for cycle in cycles(&graph) {
            report += &describe_cycle(name, &graph, &cycle);
        }
    }
    assert!(
        report.is_empty(),
        "top-level modules import each other in a circle (make one side not \
         need the other: move the shared part down, or pass it in):\n{report}"
    );
}

#[test]
fn every_crate_forbids_unsafe_or_documents_each_unsafe_block() {
    let rules = [
        "#![forbid(unsafe_code)]",
        "#![deny(clippy::undocumented_unsafe_blocks)]",
    ];
    let missing: Vec<String> = crate_dirs(&workspace())
        .into_iter()
        .filter(|dir| {
            let root = ["src/lib.rs", "src/main.rs"]
                .iter()
                .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
                .unwrap_or_default();
            !rules.iter().any(|r| root.contains(r))
        })
        .map(|dir| dir.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "crates whose root says neither {rules:?}: {missing:?}"
    );
}

// ------------------------------------------------------------ the source tree

/// `crates/*` directories with a `src/`.
fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/ readable")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("directory readable") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Whether a file (relative to `src/`) is a test module: `tests.rs`, or
/// anything under a `tests/` directory.
fn is_test_module(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel
            .parent()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

/// The module path of a file relative to `src/` (`foo/bar.rs` and
/// `foo/bar/mod.rs`: `["foo", "bar"]`); empty for the crate root.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let Some(last) = parts.pop() else {
        return parts;
    };
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    match stem {
        "mod" => {}
        "lib" | "main" if parts.is_empty() => {}
        _ => parts.push(stem.to_owned()),
    }
    parts
}

// ------------------------------------------------------------------- lexing

#[derive(Clone, Debug, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

/// The identifiers and punctuation of Rust source, without comments,
/// string, character or number literals and lifetimes; `::` is one token.
fn tokens(src: &str) -> Vec<Token> {
    let b = src.as_bytes();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let ident_start = |c: u8| c == b'_' || c.is_ascii_alphabetic();
    let ident_char = |c: u8| c == b'_' || c.is_ascii_alphanumeric();
    // Skips a quoted literal from its opening quote at `i`; returns the
    // index after it, counting lines.
    let quoted = |mut i: usize, line: &mut usize| {
        i += 1;
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' {
                i += 1;
            }
            if i < b.len() && b[i] == b'\n' {
                *line += 1;
            }
            i += 1;
        }
        i + 1
    };
    // A raw string: `r`, hashes, a quote at `i`; returns the index after it.
    let raw = |i: usize, line: &mut usize| {
        let mut j = i + 1;
        let mut hashes = 0;
        while j < b.len() && b[j] == b'#' {
            hashes += 1;
            j += 1;
        }
        if j >= b.len() || b[j] != b'"' {
            return None;
        }
        j += 1;
        loop {
            if j >= b.len() {
                return Some(j);
            }
            if b[j] == b'\n' {
                *line += 1;
            }
            let closes = b.get(j + 1..j + 1 + hashes);
            if b[j] == b'"' && closes.is_some_and(|h| h.iter().all(|&c| c == b'#')) {
                return Some(j + 1 + hashes);
            }
            j += 1;
        }
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            _ if c.is_ascii_whitespace() => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            b'"' => i = quoted(i, &mut line),
            b'\'' => {
                // A character literal ('x', '\n', '\u{..}') or a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    i += 3; // past the quote, the backslash and the escaped character
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    let ch = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if b.get(i + 1 + ch) == Some(&b'\'') {
                        i += 2 + ch;
                    } else {
                        i += 1;
                        while i < b.len() && ident_char(b[i]) {
                            i += 1;
                        }
                    }
                }
            }
            _ if c.is_ascii_digit() => {
                while i < b.len() && (ident_char(b[i]) || b[i] == b'.') {
                    // `0..n`: a range, not a fraction.
                    if b[i] == b'.' && b.get(i + 1) == Some(&b'.') {
                        break;
                    }
                    i += 1;
                }
            }
            _ if ident_start(c) => {
                // Literal prefixes: b"..", b'..', r"..", r#".."#, br"..", c"..".
                let rest = &b[i..];
                let prefixed = |p: &[u8]| rest.starts_with(p);
                if prefixed(b"b\"") || prefixed(b"c\"") {
                    i = quoted(i + 1, &mut line);
                    continue;
                }
                if prefixed(b"b'") {
                    i += 1;
                    continue; // the character literal comes next
                }
                let raw_end = [&b"br"[..], b"cr", b"r"].iter().find_map(|p| {
                    let starts = prefixed(p) && matches!(b.get(i + p.len()), Some(b'"' | b'#'));
                    starts.then(|| raw(i + p.len() - 1, &mut line)).flatten()
                });
                if let Some(end) = raw_end {
                    i = end;
                    continue;
                }
                // A raw identifier `r#name` is `name`.
                if prefixed(b"r#") && b.get(i + 2).is_some_and(|&c| ident_start(c)) {
                    i += 2;
                }
                let start = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                out.push(Token {
                    text: src[start..i].to_owned(),
                    line,
                });
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push(Token {
                    text: "::".to_owned(),
                    line,
                });
                i += 2;
            }
            _ => {
                let ch = src[i..].chars().next().map_or(1, char::len_utf8);
                out.push(Token {
                    text: src[i..i + ch].to_owned(),
                    line,
                });
                i += ch;
            }
        }
    }
    out
}

// -------------------------------------------------------------------- paths

/// A path named in code: its segments (from `crate` or `super` on), the
/// inline modules it is written in, and where.
#[derive(Clone, Debug, PartialEq)]
struct PathRef {
    segments: Vec<String>,
    /// A `use … as NAME` rename.
    rename: Option<String>,
    /// Inline `mod x { … }` blocks around it, outermost first.
    inline: Vec<String>,
    line: usize,
}

/// A path a use tree names: segments, `as` rename, the line of its last
/// segment.
type Named = (Vec<String>, Option<String>, usize);

/// Parses a use tree (or a plain path) at `toks[*i]`: `a::b`, `a::{b, c::d}`,
/// `a::*`, `a as b`; returns every path it names, expanded.
fn use_tree(toks: &[Token], i: &mut usize) -> Vec<Named> {
    let mut prefix = Vec::new();
    let mut line = toks.get(*i).map_or(0, |t| t.line);
    loop {
        let Some(t) = toks.get(*i) else {
            return vec![(prefix, None, line)];
        };
        match t.text.as_str() {
            "{" => {
                *i += 1;
                let mut out = Vec::new();
                while toks.get(*i).is_some_and(|t| t.text != "}") {
                    for (rest, rename, line) in use_tree(toks, i) {
                        let mut p = prefix.clone();
                        // `a::{self, …}` names `a` itself.
                        p.extend(rest.into_iter().filter(|s| s != "self"));
                        out.push((p, rename, line));
                    }
                    if toks.get(*i).is_some_and(|t| t.text == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return out;
            }
            "*" => {
                *i += 1;
                return vec![(prefix, None, line)];
            }
            s if s.starts_with(|c: char| c == '_' || c.is_alphabetic()) => {
                prefix.push(s.to_owned());
                line = t.line;
                *i += 1;
                if toks.get(*i).is_some_and(|t| t.text == "::") {
                    *i += 1;
                    continue;
                }
                let rename = (toks.get(*i).is_some_and(|t| t.text == "as"))
                    .then(|| toks.get(*i + 1).map(|t| t.text.clone()))
                    .flatten();
                if rename.is_some() {
                    *i += 2;
                }
                return vec![(prefix, rename, line)];
            }
            _ => return vec![(prefix, None, line)],
        }
    }
}

/// Whether the tokens before `toks[at]` (a `mod`, maybe after `pub`,
/// `pub(crate)`) are `#[cfg(test)]`.
fn after_cfg_test(toks: &[Token], mut at: usize) -> bool {
    let text = |k: usize| toks.get(k).map_or("", |t| t.text.as_str());
    if at >= 1 && text(at - 1) == ")" && at >= 4 && text(at - 4) == "pub" {
        at -= 4; // pub(crate), pub(super)
    } else if at >= 1 && text(at - 1) == "pub" {
        at -= 1;
    }
    at >= 7
        && ["#", "[", "cfg", "(", "test", ")", "]"]
            .iter()
            .enumerate()
            .all(|(k, s)| text(at - 7 + k) == *s)
}

/// Every `crate::…`, `$crate::…` and `super::…` path in `src` outside
/// `#[cfg(test)]` modules; `use` trees expanded. With `all_uses`, also
/// every other `use` tree (the crate root's imports: `use foo::Bar`).
fn path_refs(src: &str, all_uses: bool) -> Vec<PathRef> {
    let toks = tokens(src);
    let mut out = Vec::new();
    // Open inline modules: (name, brace depth inside it, cfg(test)).
    let mut inline: Vec<(String, usize, bool)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i].text;
        let in_test = inline.iter().any(|m| m.2);
        match t.as_str() {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|m| m.1 == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t.text == "{") => {
                let name = toks[i + 1].text.clone();
                inline.push((name, depth + 1, after_cfg_test(&toks, i)));
                depth += 1;
                i += 3;
                continue;
            }
            "use" if all_uses && !in_test => {
                i += 1;
                push_refs(&toks, &mut i, &inline, &mut out);
                continue;
            }
            "crate" | "super"
                if !in_test
                    && toks.get(i + 1).is_some_and(|t| t.text == "::")
                    && (i == 0 || !matches!(toks[i - 1].text.as_str(), "::" | "in")) =>
            {
                push_refs(&toks, &mut i, &inline, &mut out);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The paths of the use tree or path at `toks[*i]`, each with the inline
/// modules it is written in (`inline`'s names), after `*i`.
fn push_refs(
    toks: &[Token],
    i: &mut usize,
    inline: &[(String, usize, bool)],
    out: &mut Vec<PathRef>,
) {
    let names: Vec<String> = inline.iter().map(|m| m.0.clone()).collect();
    for (segments, rename, line) in use_tree(toks, i) {
        out.push(PathRef {
            segments,
            rename,
            inline: names.clone(),
            line,
        });
    }
}

/// What the crate root imports from a top-level module, by the name it
/// is known by at the root (`pub use thread::Engine`: `Engine` → `thread`).
fn root_aliases(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut aliases = BTreeMap::new();
    for r in path_refs(lib, true) {
        if !r.inline.is_empty() {
            continue;
        }
        let segs: Vec<&str> = r.segments.iter().map(String::as_str).collect();
        let segs = match segs.first() {
            Some(&"crate") => &segs[1..],
            _ => &segs[..],
        };
        if let (Some(first), Some(last)) = (segs.first(), segs.last())
            && segs.len() >= 2
            && modules.contains(*first)
        {
            let name = r.rename.clone().unwrap_or_else(|| (*last).to_owned());
            aliases.insert(name, (*first).to_owned());
        }
    }
    aliases
}

/// The top-level module a path written in module `at` (file and inline
/// modules) names, if any: `None` for the root's own items and for paths
/// that do not start at `crate` or `super`.
fn target(
    r: &PathRef,
    at: &[String],
    modules: &BTreeSet<String>,
    aliases: &BTreeMap<String, String>,
) -> Option<String> {
    let mut segs = r.segments.iter().map(String::as_str).peekable();
    let mut base: Vec<&str> = match segs.peek() {
        Some(&"crate") => {
            segs.next();
            Vec::new()
        }
        Some(&"super") => {
            let mut base: Vec<&str> = at.iter().map(String::as_str).collect();
            base.extend(r.inline.iter().map(String::as_str));
            while segs.peek() == Some(&"super") {
                segs.next();
                base.pop()?;
            }
            base
        }
        _ => return None,
    };
    if base.is_empty() {
        let first = segs.next()?;
        if modules.contains(first) {
            base.push(first);
        } else {
            return aliases.get(first).cloned();
        }
    }
    Some(base[0].to_owned())
}

/// Where a module first names another: file, line and the path.
#[derive(Clone, Debug)]
struct Evidence {
    file: String,
    line: usize,
    path: String,
}

/// Top-level modules and who imports whom, with the first place each edge
/// is seen.
#[derive(Default, Debug)]
struct Graph {
    edges: BTreeMap<String, BTreeMap<String, Evidence>>,
}

impl Graph {
    fn add(&mut self, from: &str, to: &str, why: Evidence) {
        if from != to {
            let out = self.edges.entry(from.to_owned()).or_default();
            out.entry(to.to_owned()).or_insert(why);
        }
    }

    fn node(&mut self, name: &str) {
        self.edges.entry(name.to_owned()).or_default();
    }

    fn successors(&self, n: &str) -> impl Iterator<Item = &String> {
        self.edges.get(n).into_iter().flat_map(|m| m.keys())
    }
}

/// The import graph between the top-level modules of the crate at `src`.
fn crate_graph(src: &Path, root: &Path) -> Graph {
    let files: Vec<(PathBuf, Vec<String>)> = rust_files(src)
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).expect("under src").to_owned();
            let m = module_path(&rel);
            (f, m)
        })
        .collect();
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(_, m)| m.first().cloned())
        .collect();
    let lib = ["lib.rs", "main.rs"]
        .iter()
        .find_map(|f| std::fs::read_to_string(src.join(f)).ok())
        .unwrap_or_default();
    let aliases = root_aliases(&lib, &modules);
    let mut graph = Graph::default();
    for (file, at) in &files {
        let rel = file.strip_prefix(src).expect("under src");
        let Some(from) = at.first() else { continue };
        graph.node(from);
        if is_test_module(rel) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("readable source");
        for r in path_refs(&text, false) {
            if let Some(to) = target(&r, at, &modules, &aliases) {
                let shown = file.strip_prefix(root).unwrap_or(file);
                graph.add(
                    from,
                    &to,
                    Evidence {
                        file: shown.display().to_string(),
                        line: r.line,
                        path: r.segments.join("::"),
                    },
                );
            }
        }
    }
    graph
}

// ------------------------------------------------------------------ cycles

/// The strongly connected components of more than one module (Tarjan),
/// each sorted, in order of their first module.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let g = self.g;
            for w in g.successors(v) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.found.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    let nodes: BTreeSet<&str> = g
        .edges
        .iter()
        .flat_map(|(k, v)| std::iter::once(k).chain(v.keys()))
        .map(String::as_str)
        .collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found.sort();
    t.found
}

/// The shortest circle from `start` back to it inside `scc` (breadth first).
fn shortest_circle(g: &Graph, scc: &[String], start: &str) -> Vec<String> {
    let inside: BTreeSet<&str> = scc.iter().map(String::as_str).collect();
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in g.successors(v).map(String::as_str) {
            if !inside.contains(w) {
                continue;
            }
            if w == start {
                // v, its way back to start, reversed; then start again.
                let mut path = vec![v.to_owned()];
                let mut at = v;
                while at != start {
                    at = came_from[at];
                    path.push(at.to_owned());
                }
                path.reverse();
                path.push(start.to_owned());
                return path;
            }
            if !came_from.contains_key(w) && w != start {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    Vec::new()
}

/// A circle of `krate`: its modules, one shortest circle, and every import
/// between its modules with where it is.
fn describe_cycle(krate: &str, g: &Graph, scc: &[String]) -> String {
    let mut s = format!(
        "{krate}: {} modules in a circle: {}\n  e.g. {}\n",
        scc.len(),
        scc.join(", "),
        shortest_circle(g, scc, &scc[0]).join(" → ")
    );
    for from in scc {
        for (to, why) in g.edges.get(from).into_iter().flatten() {
            if scc.contains(to) {
                let _ = writeln!(
                    s,
                    "    {from} → {to}: {}:{} {}",
                    why.file, why.line, why.path
                );
            }
        }
    }
    s
}

// ------------------------------------------------------ tests of the checker

#[cfg(test)]
mod checker {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    fn modules(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The top-level modules `src` (written in module `at`) depends on.
    fn targets(src: &str, at: &[&str], mods: &[&str], lib: &str) -> Vec<String> {
        let mods = modules(mods);
        let aliases = root_aliases(lib, &mods);
        let at = strings(at);
        let mut t: Vec<String> = path_refs(src, false)
            .iter()
            .filter_map(|r| target(r, &at, &mods, &aliases))
            .filter(|t| Some(t) != at.first())
            .collect();
        t.sort();
        t.dedup();
        t
    }

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::default();
        for (a, b) in edges {
            let why = Evidence {
                file: "f.rs".into(),
                line: 1,
                path: format!("crate::{b}"),
            };
            g.add(a, b, why);
        }
        g
    }

    #[test]
    fn files_belong_to_their_top_level_module() {
        let m = |p: &str| module_path(Path::new(p));
        assert_eq!(m("lib.rs"), Vec::<String>::new());
        assert_eq!(m("main.rs"), Vec::<String>::new());
        assert_eq!(m("conn.rs"), strings(&["conn"]));
        assert_eq!(m("http/mod.rs"), strings(&["http"]));
        assert_eq!(m("http/hls.rs"), strings(&["http", "hls"]));
        assert_eq!(m("a/b/mod.rs"), strings(&["a", "b"]));
        assert_eq!(m("a/lib.rs"), strings(&["a", "lib"]));
    }

    #[test]
    fn test_modules_are_exempt_by_name_or_directory() {
        assert!(is_test_module(Path::new("hls/tests.rs")));
        assert!(is_test_module(Path::new("tests.rs")));
        assert!(is_test_module(Path::new("auth/tests/vectors.rs")));
        assert!(is_test_module(Path::new("tests/mod.rs")));
        assert!(!is_test_module(Path::new("contests.rs")));
        assert!(!is_test_module(Path::new("session.rs")));
        assert!(!is_test_module(Path::new("tests_helper/x.rs")));
    }

    #[test]
    fn comments_strings_and_characters_are_not_code() {
        let src = r####"
            //! See [`crate::a`].
            /* crate::b /* nested crate::c */ still a comment crate::d */
            let s = "crate::e \" crate::f";
            let r = r#"crate::g "quoted" crate::h"#;
            let q = '"'; let e = '\''; let u = '\u{1F600}'; let b = b'"';
            fn f<'a>(x: &'a crate::real::X) -> &'static str { "" }
            let n = 1.5e3; for i in 0..n {}
        "####;
        assert_eq!(targets(src, &["m"], &["real", "a", "b"], ""), ["real"]);
        let lines: Vec<usize> = path_refs(src, false).iter().map(|r| r.line).collect();
        assert_eq!(lines, [7]);
    }

    #[test]
    fn grouped_uses_are_expanded() {
        let src = "use crate::{Server, control, session::{self, Session}, x::*};";
        let refs: Vec<Vec<String>> = path_refs(src, false)
            .into_iter()
            .map(|r| r.segments)
            .collect();
        assert_eq!(
            refs,
            [
                strings(&["crate", "Server"]),
                strings(&["crate", "control"]),
                strings(&["crate", "session"]),
                strings(&["crate", "session", "Session"]),
                strings(&["crate", "x"]),
            ]
        );
        let src2 = "use crate::{\n    a,\n    b::{c, d},\n};";
        let lines: Vec<usize> = path_refs(src2, false).iter().map(|r| r.line).collect();
        assert_eq!(
            lines,
            [2, 3, 3],
            "each path at the line of its last segment"
        );
        let mods = ["control", "session", "x", "conn"];
        assert_eq!(
            targets(src, &["conn"], &mods, ""),
            ["control", "session", "x"]
        );
    }

    #[test]
    fn paths_in_code_count_and_visibility_does_not() {
        let src = "pub(crate) fn f() { crate::guard::check(); $crate::m::X; }
                   pub(in crate::vis) struct S; pub(super) fn g() {}";
        assert_eq!(
            targets(src, &["a"], &["guard", "m", "vis"], ""),
            ["guard", "m"]
        );
    }

    #[test]
    fn root_items_count_as_the_module_the_root_imports_them_from() {
        let lib = "mod catalog; pub use catalog::{Catalog, CatalogError as CE};
                   use admission::Admission; pub struct Server;";
        let mods = ["catalog", "admission", "http"];
        let src = "use crate::{CE, Server}; fn f(a: crate::Admission) {}";
        assert_eq!(
            targets(src, &["http"], &mods, lib),
            ["admission", "catalog"]
        );
    }

    #[test]
    fn super_climbs_files_and_inline_modules() {
        let mods = ["control", "conn", "http"];
        // control/multicast.rs: `super` is `control`, `super::super` the root.
        let src = "use super::{Reply, refuse}; use super::super::conn::Conn;";
        assert_eq!(targets(src, &["control", "multicast"], &mods, ""), ["conn"]);
        // conn.rs: an inline module's `super` is `conn`, not the root.
        let src = "mod inner { use super::Conn; fn f() { super::super::http::x(); } }";
        assert_eq!(targets(src, &["conn"], &mods, ""), ["http"]);
        // A top-level file's `super` is the root.
        assert_eq!(
            targets("use super::control::X;", &["conn"], &mods, ""),
            ["control"]
        );
    }

    #[test]
    fn cfg_test_modules_are_not_code() {
        let src = "fn f() {}
            #[cfg(test)]
            mod tests { use super::*; use crate::b::Helper; fn t() { crate::c::x(); } }
            fn g() { crate::d::y(); }
            #[cfg(test)] pub(crate) mod more { use crate::e::Z; }";
        assert_eq!(targets(src, &["a"], &["a", "b", "c", "d", "e"], ""), ["d"]);
    }

    #[test]
    fn circles_are_the_strongly_connected_components() {
        let g = graph(&[
            ("a", "b"),
            ("b", "c"),
            ("c", "a"),
            ("c", "d"),
            ("d", "e"),
            ("e", "d"),
            ("e", "f"),
        ]);
        assert_eq!(
            cycles(&g),
            [strings(&["a", "b", "c"]), strings(&["d", "e"])]
        );
        assert_eq!(
            shortest_circle(&g, &strings(&["a", "b", "c"]), "a"),
            ["a", "b", "c", "a"]
        );
        assert_eq!(
            shortest_circle(&g, &strings(&["d", "e"]), "e"),
            ["e", "d", "e"]
        );
    }

    #[test]
    fn a_tree_and_self_references_are_no_circle() {
        let g = graph(&[("a", "b"), ("a", "c"), ("b", "c"), ("c", "d"), ("d", "d")]);
        assert!(cycles(&g).is_empty());
        assert!(cycles(&Graph::default()).is_empty());
    }

    #[test]
    fn a_circle_is_described_with_where_each_import_is() {
        let g = graph(&[("conn", "control"), ("control", "conn"), ("control", "x")]);
        let text = describe_cycle("fjord-server", &g, &cycles(&g)[0]);
        assert!(text.contains("conn, control"), "{text}");
        assert!(text.contains("conn → control → conn"), "{text}");
        assert!(
            text.contains("control → conn: f.rs:1 crate::conn"),
            "{text}"
        );
        assert!(!text.contains("→ x"), "{text}");
    }
}

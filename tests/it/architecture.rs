//! The layout rules of ARCHITECTURE.md, checked on the source: no import circle between
//! modules, nothing outside the store reaches its SQL or its connection, and progress bars
//! are drawn only by the commands. A rule broken here is a structure change to discuss, not
//! a test to loosen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A source file's module path (`src/features/face/pose.rs` is `features::face::pose`,
/// a `mod.rs` its folder's).
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root().join("src")).unwrap();
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a file without its unit tests and its comment lines (a comment may name a
/// module without depending on it).
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a piece of code names after `prefix` (`crate::a::b::C` gives
/// `["a", "b", "C"]`).
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        out.push(rest[..end].split("::").filter(|s| !s.is_empty()).collect());
    }
    out
}

/// Modules at this depth are the graph's nodes (`features::face`, `store::outbox`,
/// `config`): a file and the folder it heads are one node.
const DEPTH: usize = 2;

fn node(path: &[String]) -> String {
    path[..path.len().min(DEPTH)].join("::")
}

#[test]
fn no_import_circle_between_modules() {
    let src = root().join("src");
    let files: Vec<PathBuf> = sources(&src)
        .into_iter()
        .filter(|f| !f.ends_with("main.rs") && !f.ends_with("lib.rs"))
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f).join("::")).collect();
    let is_module = |p: &[String]| modules.contains(&p.join("::"));
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let me = module_of(f);
        let from = node(&me);
        let code = code(f);
        let mut targets: Vec<Vec<String>> = Vec::new();
        for p in paths_after(&code, "crate::") {
            targets.push(p.iter().map(|s| s.to_string()).collect());
        }
        // `super::x` from a file names its parent module's `x` (from a `mod.rs`, the
        // parent of its folder).
        let is_mod_rs = f.ends_with("mod.rs");
        let parent: Vec<String> = if is_mod_rs {
            me[..me.len().saturating_sub(1)].to_vec()
        } else {
            me[..me.len() - 1].to_vec()
        };
        for p in paths_after(&code, "super::") {
            let mut t = parent.clone();
            t.extend(p.iter().map(|s| s.to_string()));
            targets.push(t);
        }
        for t in targets {
            // The longest prefix that is a module of this crate.
            let Some(n) = (1..=t.len()).rev().find(|&n| is_module(&t[..n])) else {
                continue;
            };
            let to = node(&t[..n]);
            if to != from {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    let circles = strongly_connected(&edges);
    assert!(
        circles.is_empty(),
        "import circles between modules (each names who imports whom):\n{}",
        circles
            .iter()
            .map(|c| c
                .iter()
                .map(|m| format!(
                    "  {m} -> {:?}",
                    edges[m]
                        .iter()
                        .filter(|t| c.contains(t))
                        .collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
                .join("\n"))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

/// Tarjan's strongly connected components of more than one node.
fn strongly_connected(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.edges.get(v) {
            for w in ws {
                if !s.index.contains_key(w.as_str()) {
                    visit(s, w);
                    let lw = s.low[w.as_str()];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(lw));
                } else if s.on.contains(w.as_str()) {
                    let iw = s.index[w.as_str()];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(iw));
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn the_store_is_reached_only_through_its_types() {
    let src = root().join("src");
    let mut found = Vec::new();
    for f in sources(&src) {
        if f.starts_with(src.join("store")) {
            continue;
        }
        let code = code(&f);
        for needle in [
            "store::sql",
            ".connection()",
            "connection_for_tests",
            "rusqlite",
        ] {
            // The collector's central database in PostgreSQL speaks its own client, and
            // the SQLite central database is the store's (`store::central`).
            if code.contains(needle) {
                found.push(format!("{} names `{needle}`", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn progress_bars_are_drawn_only_by_the_commands() {
    let src = root().join("src");
    let mut found = Vec::new();
    for f in sources(&src) {
        if f.starts_with(src.join("cli")) || f.ends_with("main.rs") {
            continue;
        }
        if code(&f).contains("indicatif") {
            found.push(f.display().to_string());
        }
    }
    assert!(
        found.is_empty(),
        "progress is reported through a callback outside src/cli: {found:?}"
    );
}

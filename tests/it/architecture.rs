//! The layout rules of ARCHITECTURE.md, checked on the source: the top-level modules import
//! only what their layer allows ([`ALLOWED`]), the store's modules only the siblings their
//! table allows ([`STORE_ALLOWED`]), no import circle at any depth, nothing outside the
//! store reaches its SQL or its connection, and progress bars are drawn only by the
//! commands. A rule broken here is a structure change to discuss, not
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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths a `use` tree names, braces expanded (`a::{b, c::{d, self}}` gives `a::b`,
/// `a::c::d`, `a::c`); renames dropped.
fn expand_use(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        return vec![path.to_string()];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    // Not a use tree after all (the words `use ` in a string, say).
    let Some(close) = tree.rfind('}').filter(|&c| c > open) else {
        return Vec::new();
    };
    let inner = &tree[open + 1..close];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(expand_use)
        .map(|p| match (prefix.is_empty(), p.as_str()) {
            (true, _) => p,
            (false, "self") => prefix.to_string(),
            (false, _) => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every path a file's code names that may be a module of this crate: each `use` tree
/// expanded, and each path written inline that starts `crate::`, `super::`, `self::` or
/// with a child module's name. Relative paths are made absolute from `me`.
fn named_paths(
    code: &str,
    me: &[String],
    is_module: &dyn Fn(&[String]) -> bool,
) -> Vec<Vec<String>> {
    let mut raw: Vec<String> = Vec::new();
    // `use` statements.
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let starts = rest[..i]
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == ')' || c == '{' || c == ';');
        rest = &rest[i + 4..];
        if !starts {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        raw.extend(expand_use(&rest[..end]));
        rest = &rest[end..];
    }
    // Inline paths.
    let bytes = code;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i..].chars().next().unwrap();
        let before_ok = i == 0 || {
            let b = bytes[..i].chars().last().unwrap();
            !is_ident(b) && b != ':'
        };
        if before_ok && is_ident(c) {
            let end = bytes[i..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .map_or(bytes.len(), |e| i + e);
            let word = &bytes[i..end];
            if word.contains("::") {
                raw.push(word.trim_end_matches(':').to_string());
            }
            i = end.max(i + c.len_utf8());
        } else {
            i += c.len_utf8();
        }
    }
    let mut out = Vec::new();
    for path in raw {
        let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = match segs.first() {
            Some(&"crate") => {
                segs.remove(0);
                Vec::new()
            }
            Some(&"self") => {
                segs.remove(0);
                me.to_vec()
            }
            Some(&"super") => {
                let mut b = me.to_vec();
                while segs.first() == Some(&"super") {
                    segs.remove(0);
                    b.pop();
                }
                b
            }
            Some(first) => {
                let mut child = me.to_vec();
                child.push(first.to_string());
                if !is_module(&child) {
                    continue;
                }
                me.to_vec()
            }
            None => continue,
        };
        base.extend(segs.iter().map(|s| s.to_string()));
        out.push(base);
    }
    out
}

/// The crate's module edges between source files: `(from, to)` module paths, `to` the
/// longest prefix of a named path that is a module.
fn module_edges() -> BTreeSet<(Vec<String>, Vec<String>)> {
    let src = root().join("src");
    let files: Vec<PathBuf> = sources(&src)
        .into_iter()
        .filter(|f| !f.ends_with("main.rs") && !f.ends_with("lib.rs"))
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f).join("::")).collect();
    let is_module = |p: &[String]| modules.contains(&p.join("::"));
    let mut edges = BTreeSet::new();
    for f in &files {
        let me = module_of(f);
        for t in named_paths(&code(f), &me, &is_module) {
            if let Some(n) = (1..=t.len()).rev().find(|&n| is_module(&t[..n])) {
                if t[..n] != me[..] {
                    edges.insert((me.clone(), t[..n].to_vec()));
                }
            }
        }
    }
    edges
}

/// `a` is `b` or inside it.
fn within(a: &[String], b: &[String]) -> bool {
    a.len() >= b.len() && a[..b.len()] == *b
}

/// Which top-level modules each may import (depth 1). The layers, bottom up: `core`,
/// `exit`, `clock`, `files`, `named_thread` (shared vocabulary, no other crate module); the session format
/// and the model files; the configuration; capture < features < windows < fusion (the
/// sensing pipeline); the store; sync and the story bank; the report; the runtime and the
/// installation check; the commands. The store, sync and report import nothing of the
/// sensing pipeline but `report`'s drawing helpers, so the collector build needs only
/// the native-code modules gated. A new edge is a design change: add it here with why.
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("exit", &[]),
    ("clock", &[]),
    ("named_thread", &[]),
    ("digest", &[]),
    ("files", &["exit"]),
    ("session", &["core", "clock", "exit"]),
    ("models", &["exit", "digest"]),
    ("config", &["core", "exit", "models", "session"]),
    ("capture", &["core", "clock", "exit", "files", "session"]),
    (
        "features",
        &["core", "exit", "capture", "config", "models", "session"],
    ),
    ("windows", &["core", "features"]),
    ("fusion", &["core", "exit", "features", "models"]),
    ("store", &["core", "exit", "digest", "config", "session"]),
    (
        "sync",
        &[
            "core", "clock", "exit", "digest", "config", "session", "store",
        ],
    ),
    (
        "stories",
        &["core", "exit", "features", "fusion", "models", "store"],
    ),
    (
        "report",
        &[
            "core",
            "clock",
            "exit",
            "files",
            "named_thread",
            "config",
            "session",
            "capture",
            "features",
            "fusion",
            "store",
            "sync",
        ],
    ),
    (
        "doctor",
        &[
            "core", "clock", "exit", "config", "session", "models", "capture", "features",
            "fusion", "sync",
        ],
    ),
    (
        "runtime",
        &[
            "core",
            "clock",
            "exit",
            "digest",
            "files",
            "named_thread",
            "config",
            "session",
            "models",
            "capture",
            "features",
            "windows",
            "fusion",
            "store",
            "sync",
            "stories",
            "report",
        ],
    ),
    (
        "cli",
        &[
            "core",
            "clock",
            "exit",
            "files",
            "named_thread",
            "config",
            "session",
            "models",
            "capture",
            "features",
            "fusion",
            "store",
            "sync",
            "stories",
            "report",
            "runtime",
            "doctor",
        ],
    ),
];

/// Which of the store's modules may use which siblings (at every depth inside the store;
/// a module always uses its ancestors' items, the store's handle and error, and a parent
/// its children). The SQL of one table family per file; the participant's lifecycle uses
/// the sessions and the outbox, which use neither it nor each other.
const STORE_ALLOWED: &[(&str, &[&str])] = &[
    ("store::central", &["store::replica", "store::sql::study"]),
    ("store::connect", &["store::schema", "store::sql"]),
    ("store::outbox", &["store::sql"]),
    (
        "store::replica",
        &["store::sql::announce", "store::sql::session_rows"],
    ),
    ("store::sql", &["store::rows"]),
    ("store::sql::delivery", &["store::sql::announce"]),
    ("store::sql::export", &["store::rows"]),
    ("store::sql::frames", &["store::rows"]),
    (
        "store::sql::participants",
        &["store::sql::announce", "store::sql::session_rows"],
    ),
    ("store::sql::predictions", &["store::rows"]),
    (
        "store::sql::session_rows",
        &[
            "store::rows",
            "store::sql::frames",
            "store::sql::announce",
            "store::sql::predictions",
        ],
    ),
    ("store::sql::stories", &["store::rows"]),
    (
        "store::writer",
        &[
            "store::connect",
            "store::rows",
            "store::sql",
            "store::sql::announce",
            "store::sql::session_rows",
        ],
    ),
    ("store::read", &["store::rows", "store::sql"]),
];

fn allowed_of(table: &[(&str, &[&str])], from: &str) -> Option<BTreeSet<String>> {
    table
        .iter()
        .find(|(m, _)| *m == from)
        .map(|(_, to)| to.iter().map(|s| s.to_string()).collect())
}

#[test]
fn top_level_modules_import_only_what_their_layer_allows() {
    let mut broken = Vec::new();
    for (from, to) in module_edges() {
        let (a, b) = (&from[0], &to[0]);
        if a == b {
            continue;
        }
        match allowed_of(ALLOWED, a) {
            None => broken.push(format!("`{a}` is not in the layer table")),
            Some(ok) if !ok.contains(b) => broken.push(format!(
                "{} uses {} (`{a}` may use: {})",
                from.join("::"),
                to.join("::"),
                ok.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
            Some(_) => {}
        }
    }
    broken.sort();
    broken.dedup();
    assert!(
        broken.is_empty(),
        "edges outside the layers:\n{}",
        broken.join("\n")
    );
    // The table itself has no circle.
    let table: BTreeMap<String, BTreeSet<String>> = ALLOWED
        .iter()
        .map(|(m, to)| (m.to_string(), to.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert!(strongly_connected(&table).is_empty());
}

#[test]
fn the_store_modules_use_only_the_siblings_their_table_allows() {
    let store = vec!["store".to_string()];
    let mut broken = Vec::new();
    for (from, to) in module_edges() {
        if !within(&from, &store)
            || !within(&to, &store)
            || within(&from, &to)
            || within(&to, &from)
        {
            continue;
        }
        // The sibling (at the first depth where the two differ) that `to` is in, seen
        // from `from`'s module at every depth: listed for `from` or for an ancestor of it.
        let ok = (2..=from.len()).any(|n| {
            allowed_of(STORE_ALLOWED, &from[..n].join("::")).is_some_and(|ok| {
                ok.iter()
                    .any(|t| within(&to, &t.split("::").map(String::from).collect::<Vec<_>>()))
            })
        });
        if !ok {
            broken.push(format!("{} uses {}", from.join("::"), to.join("::")));
        }
    }
    assert!(
        broken.is_empty(),
        "edges inside the store not in its table:\n{}",
        broken.join("\n")
    );
}

/// ARCHITECTURE.md's layer table says what `ALLOWED` says, row by row (a newcomer reads the
/// table; the test reads `ALLOWED`).
#[test]
fn the_layer_table_of_architecture_md_is_the_tested_one() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| `module` | `a`, `b` |` (or "nothing of the crate").
        if cells.len() == 4 && cells[1].starts_with('`') {
            let module = cells[1].trim_matches('`').to_string();
            let uses = cells[2]
                .split(',')
                .map(|s| s.trim())
                .filter(|s| s.starts_with('`'))
                .map(|s| s.trim_matches('`').to_string())
                .collect();
            documented.insert(module, uses);
        }
    }
    let tested: BTreeMap<String, BTreeSet<String>> = ALLOWED
        .iter()
        .map(|(m, to)| (m.to_string(), to.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert_eq!(
        documented, tested,
        "ARCHITECTURE.md's layer table and ALLOWED differ"
    );
}

#[test]
fn the_edge_finder_sees_use_trees_and_relative_paths() {
    assert_eq!(
        expand_use("crate::a::{b, c::{d, self}, e as f}"),
        [
            "crate::a::b",
            "crate::a::c::d",
            "crate::a::c",
            "crate::a::e"
        ]
    );
    let edges = module_edges();
    let has = |a: &str, b: &str| {
        edges.contains(&(
            a.split("::").map(String::from).collect(),
            b.split("::").map(String::from).collect(),
        ))
    };
    // `use super::{ctx, outbox, sessions, NOW};` in store/sql/participants.rs.
    assert!(has("store::sql::participants", "store::sql::announce"));
    assert!(has("store::sql::participants", "store::sql::session_rows"));
}

#[test]
fn no_import_circle_at_any_depth() {
    let edges = module_edges();
    let deepest = edges
        .iter()
        .map(|(a, b)| a.len().max(b.len()))
        .max()
        .unwrap_or(1);
    for depth in 1..=deepest {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in &edges {
            // A parent naming its own children is declaring them, not depending on them.
            if within(to, from) {
                continue;
            }
            let (a, b) = (&from[..from.len().min(depth)], &to[..to.len().min(depth)]);
            if a != b && !within(b, a) {
                graph.entry(a.join("::")).or_default().insert(b.join("::"));
            }
        }
        let circles = strongly_connected(&graph);
        assert!(
            circles.is_empty(),
            "import circles at depth {depth} (each names who imports whom):\n{}",
            circles
                .iter()
                .map(|c| c
                    .iter()
                    .map(|m| format!(
                        "  {m} -> {:?}",
                        graph[m]
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

/// Where threads may start: through `named_thread` only (its `std::thread::Builder` is the
/// crate's one), called from the runtime, the collector's study-page thread and the alert
/// command's pipe readers.
#[test]
fn threads_start_only_where_the_rule_says() {
    let src = root().join("src");
    let allowed = [
        src.join("runtime"),
        src.join("cli/collect.rs"),
        src.join("report/study/alert_command.rs"),
    ];
    let mut found = Vec::new();
    for f in sources(&src) {
        let code = code(&f);
        if f != src.join("named_thread.rs") && code.contains("thread::Builder") {
            found.push(format!(
                "{} builds a thread itself (use named_thread)",
                f.display()
            ));
        }
        if code.contains("named_thread::spawn") && !allowed.iter().any(|a| f.starts_with(a)) {
            found.push(format!(
                "{} starts a thread outside the places the rule lists",
                f.display()
            ));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The runtime reads in one sitting: no function under `src/runtime/` is longer than 120
/// lines (from its `fn` line to its closing brace at the same indentation).
#[test]
fn no_function_in_the_runtime_is_over_120_lines() {
    let mut long = Vec::new();
    for f in sources(&root().join("src/runtime")) {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let indent = line.len() - line.trim_start().len();
            let head = line.trim_start();
            let is_fn = ["fn ", "pub fn ", "pub(super) fn ", "pub(crate) fn "]
                .iter()
                .any(|p| head.starts_with(p));
            // A declaration without a body (a trait's) ends with `;` before any `{`.
            let body_at = (i..lines.len()).find(|&k| {
                let l = lines[k].trim_end();
                l.ends_with('{') || l.ends_with(';')
            });
            match body_at {
                Some(k) if is_fn && lines[k].trim_end().ends_with('{') => {
                    let close = format!("{}}}", " ".repeat(indent));
                    let end = (k + 1..lines.len())
                        .find(|&e| lines[e].starts_with(&close))
                        .unwrap_or(lines.len() - 1);
                    if end - i + 1 > 120 {
                        long.push(format!("{}:{} ({} lines)", f.display(), i + 1, end - i + 1));
                    }
                    i = end + 1;
                }
                _ => i += 1,
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over 120 lines:\n{}",
        long.join("\n")
    );
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

/// Issue 56: every operation on the station's recordings goes through one helper
/// (`files::beneath`), which never follows a link out of the folder it opened. Deleting
/// anywhere else is named here with why it is not a recording's.
#[test]
fn station_files_are_made_opened_and_deleted_only_beneath_their_folders() {
    let src = root().join("src");
    let allowed: &[(&str, &str)] = &[
        ("files/beneath.rs", "the helper itself"),
        ("files/mod.rs", "an output's own .partial beside it"),
        ("doctor/mod.rs", "the doctor's probe files it just made"),
        (
            "runtime/live/control_socket.rs",
            "the socket, only when it is a socket (issue 56 item 5)",
        ),
        ("store/writer.rs", "the database's reserve file"),
        ("digest.rs", "a unit test's temporary folder"),
    ];
    let mut found = Vec::new();
    for f in sources(&src) {
        let rel = f.strip_prefix(&src).unwrap().display().to_string();
        if allowed.iter().any(|(a, _)| *a == rel) {
            continue;
        }
        let code = code(&f);
        for needle in ["remove_dir_all", "fs::remove_file", "fs::remove_dir("] {
            if code.contains(needle) {
                found.push(format!("{rel} calls `{needle}`: go through files::beneath"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The recordings' readers and deleters open them through the helper.
    for (file, needle) in [
        ("capture/record.rs", "Beneath::open"),
        ("runtime/live/retention.rs", "Beneath::open"),
        ("runtime/live/session_run.rs", "Beneath::open"),
    ] {
        assert!(
            code(&src.join(file)).contains(needle),
            "{file} does not open the recordings through files::beneath"
        );
    }
    // And they make and open nothing in a recording by its path: the recorder creates its
    // folder and files through the helper too (issue 56 item 6).
    for file in [
        "capture/record.rs",
        "runtime/live/retention.rs",
        "runtime/live/session_run.rs",
    ] {
        let text = code(&src.join(file));
        for needle in [
            "File::create",
            "File::open",
            "OpenOptions",
            "fs::create_dir(",
            "WavWriter::create",
            "MjpegAviWriter::create",
            "files::write_atomically",
        ] {
            assert!(
                !text.contains(needle),
                "{file} calls `{needle}`: a recording is opened beneath its folder"
            );
        }
    }
}

/// Issue 56: one gate for every way into a central database. The session records are
/// applied (checked) by `replica` alone: the live collector and `collect copy` both reach
/// it through `rules::store_session`, and PostgreSQL's `set_session` checks with
/// `store::central::check_applies`, the same apply.
#[test]
fn every_way_into_a_central_database_passes_one_gate() {
    let central = root().join("src/sync/central");
    let copy = code(&central.join("copy.rs"));
    let live = code(&central.join("mod.rs"));
    for (name, text) in [("copy.rs", &copy), ("mod.rs", &live)] {
        for rule in [
            "store_session(",
            "store_purge(",
            "store_tombstone(",
            "store_consent(",
        ] {
            assert!(text.contains(rule), "{name} does not use the rule {rule}");
        }
    }
    assert!(
        copy.contains("verify_copied("),
        "collect copy verifies what it reads"
    );
    assert!(
        code(&central.join("postgres.rs")).contains("check_applies("),
        "PostgreSQL checks each record with the store's apply"
    );
    let inserts: Vec<String> = sources(&root().join("src"))
        .into_iter()
        .filter(|f| code(f).contains("INSERT INTO collect_records"))
        .map(|f| f.display().to_string())
        .collect();
    assert_eq!(
        inserts.len(),
        1,
        "one place writes central records: {inserts:?}"
    );
}

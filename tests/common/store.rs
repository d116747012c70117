//! Reading the session store in tests: one canonical text line per stored row, and digests.
//!
//! A row's line lists its columns in schema order, each `name=value`; blobs appear as the
//! sha256 of their bytes. Columns that name the run rather than its content (wall-clock
//! times, the owning process, the folder the session was read from) are left out, so two
//! runs of one session give the same lines.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::Connection;
use sha2::{Digest, Sha256};

/// The one way a test opens a database file raw (a station store or a SQLite central
/// database) to read what the code under test stored: it waits up to 5 s for a writer's
/// lock, and a failure names the file.
pub fn open_db(path: impl AsRef<Path>) -> Connection {
    let path = path.as_ref();
    try_open_db(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
}

/// [`open_db`] for a test that polls a database that may not exist yet.
pub fn try_open_db(path: impl AsRef<Path>) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}

/// Columns that differ between two runs of the same input by design.
const RUN_COLUMNS: &[&str] = &[
    "created_at",
    "updated_at",
    "owner_host",
    "owner_pid",
    "owner_boot_id",
    "source_path",
    "first_seen_at",
];

/// The session-scoped tables, with the column that names the session.
pub const SESSION_TABLES: &[(&str, &str)] = &[
    ("sessions", "id"),
    ("phases", "session_id"),
    ("events", "session_id"),
    ("utterances", "session_id"),
    ("story_exposures", "session_id"),
    ("self_ratings", "session_id"),
    ("survey_responses", "session_id"),
    ("modalities", "session_id"),
    ("frames", "session_id"),
    ("frame_features", "session_id"),
    ("windows", "session_id"),
    ("window_features", "session_id"),
    ("predictions", "session_id"),
];

pub fn cell(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => "null".into(),
        ValueRef::Integer(i) => i.to_string(),
        // Exact: the bits, not a rounded decimal.
        ValueRef::Real(f) => format!("{:016x}", f.to_bits()),
        ValueRef::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("blob:{:x}", Sha256::digest(b)),
    }
}

/// Every row of `table` for session `id`, one canonical line each, sorted.
pub fn table_lines(conn: &Connection, table: &str, key: &str, id: &str) -> Vec<String> {
    table_lines_where(conn, table, &format!("{key} = ?1"), id)
}

/// Every row of `table` matching `condition` (with `?1` bound to `arg`), one line each, sorted.
pub fn table_lines_where(
    conn: &Connection,
    table: &str,
    condition: &str,
    arg: &str,
) -> Vec<String> {
    let mut st = conn
        .prepare(&format!("SELECT * FROM {table} WHERE {condition}"))
        .unwrap();
    let names: Vec<String> = st.column_names().map(|s| s.to_string()).collect();
    let mut lines: Vec<String> = st
        .query_map([arg], |r| {
            let mut parts = Vec::new();
            for (i, n) in names.iter().enumerate() {
                if RUN_COLUMNS.contains(&n.as_str()) {
                    continue;
                }
                parts.push(format!("{n}={}", cell(r.get_ref(i)?)));
            }
            Ok(parts.join(" "))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    lines.sort();
    lines
}

/// sha256 of lines joined by newlines.
pub fn digest(lines: &[String]) -> String {
    let mut h = Sha256::new();
    for l in lines {
        h.update(l.as_bytes());
        h.update(b"\n");
    }
    format!("{:x}", h.finalize())
}

/// `table digest` lines for every session-scoped table of session `id`.
pub fn session_digests(conn: &Connection, id: &str) -> Vec<(String, String)> {
    SESSION_TABLES
        .iter()
        .map(|(t, k)| (t.to_string(), digest(&table_lines(conn, t, k, id))))
        .collect()
}

/// One query's single integer.
pub fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The first column of every row of `sql`.
pub fn column<T: rusqlite::types::FromSql>(conn: &Connection, sql: &str) -> Vec<T> {
    conn.prepare(sql)
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

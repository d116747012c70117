//! Opening the SQLite file: the store's pragmas, the busy timeout and size limit, a
//! read-only or immutable connection for reading commands, and the schema migrations.

use std::path::Path;

use rusqlite::{params, Connection};

use super::{schema, sql, StoreError};

/// How a connection waits and how large the file may grow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectOptions {
    /// How long a statement waits for another process's lock before failing.
    pub busy_timeout: std::time::Duration,
    /// The most the file may grow to, in MiB; 0 is no limit but the disk's.
    pub max_db_mib: u64,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self::from(&crate::config::StoreConfig::default())
    }
}

impl From<&crate::config::StoreConfig> for ConnectOptions {
    fn from(c: &crate::config::StoreConfig) -> Self {
        Self {
            busy_timeout: std::time::Duration::from_millis(c.busy_timeout_ms),
            max_db_mib: c.max_db_mib,
        }
    }
}

fn open_error(path: &Path, source: rusqlite::Error) -> StoreError {
    let text = source.to_string();
    let shown = path.display().to_string();
    // SQLite names the path in some messages ("unable to open database file: PATH").
    let mut detail = if text.contains(&shown) {
        text
    } else {
        format!("{shown}: {text}")
    };
    if matches!(
        source.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    ) {
        detail = format!("{detail} ({})", open_hint(path));
    }
    StoreError::Open {
        path: path.to_path_buf(),
        detail,
        source,
    }
}

/// Why a database cannot be opened, in words a user can act on (SQLite says only "unable
/// to open database file").
fn open_hint(path: &Path) -> String {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => "it is a directory".into(),
        Ok(m) if m.permissions().readonly() => "the file is read-only".into(),
        Ok(_) => match std::fs::metadata(dir) {
            Ok(d) if d.permissions().readonly() => format!(
                "its folder {} is read-only (SQLite writes -wal and -shm files beside it)",
                dir.display()
            ),
            _ => "check its permissions and those of its folder".into(),
        },
        Err(_) => match std::fs::metadata(dir) {
            Err(e) => format!("its folder {} cannot be used: {e}", dir.display()),
            Ok(d) if !d.is_dir() => format!("{} is not a folder", dir.display()),
            Ok(_) => format!("cannot create it in {}", dir.display()),
        },
    }
}

pub(crate) fn connect(path: &Path, options: ConnectOptions) -> Result<Connection, StoreError> {
    let open = |source| open_error(path, source);
    let conn = Connection::open(path).map_err(open)?;
    conn.busy_timeout(options.busy_timeout).map_err(open)?;
    // WAL: readers never block the writer. FULL: a committed batch survives power loss too.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(open)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(open)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(open)?;
    // Deleted content is overwritten with zeros, so a withdrawal, a replaced session or a
    // removed record leaves none of its bytes in the file's free pages (deletes are rare:
    // the cost is a write of each freed page).
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(open)?;
    if options.max_db_mib > 0 {
        let page_size: u64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
            .map_err(open)?
            .max(512) as u64;
        let pages = options.max_db_mib.saturating_mul(1 << 20) / page_size;
        conn.pragma_update(None, "max_page_count", pages.max(1) as i64)
            .map_err(open)?;
    }
    Ok(conn)
}

/// Opens an existing database for reading only: no migration, no recovery, no file
/// created, so it works on a read-only file or folder (a copy for analysis, a mounted
/// backup).
pub(crate) fn connect_read_only(path: &Path) -> Result<Connection, StoreError> {
    let open = |source| open_error(path, source);
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(open)?;
    conn.busy_timeout(ConnectOptions::default().busy_timeout)
        .map_err(open)?;
    // A WAL database needs its -shm file even to be read; in a folder nobody may write to
    // (a mounted backup, a copy owned by someone else) SQLite cannot create it, and the first
    // read fails. Such a file cannot change under us, so it is read as immutable, unless a
    // -wal file beside it holds commits that immutable reading would leave out.
    match conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(())) {
        Ok(()) => Ok(conn),
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
            ) =>
        {
            drop(conn);
            let wal = sidecar(path, "-wal");
            if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
                return Err(StoreError::Open {
                    path: path.to_path_buf(),
                    detail: format!(
                        "{}: {e} (its folder cannot be written and {} holds commits not yet in the file: copy both into a folder you can write, or open it once where it was written)",
                        path.display(),
                        wal.display()
                    ),
                    source: e,
                });
            }
            let conn = Connection::open_with_flags(
                immutable_uri(path),
                flags | rusqlite::OpenFlags::SQLITE_OPEN_URI,
            )
            .map_err(open)?;
            Ok(conn)
        }
        Err(e) => Err(open(e)),
    }
}

/// `path` with `suffix` appended to its file name (SQLite's -wal and -shm files).
fn sidecar(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    name.into()
}

/// A `file:` URI that opens `path` as immutable (no locks, no -shm), with the characters a
/// URI gives meaning to percent-encoded.
fn immutable_uri(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for b in absolute.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                uri.push(char::from(*b))
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    uri
}

pub(super) fn current_version(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )
    .map_err(sql("reading the schema version"))
}

/// Applies the migrations the file lacks, each in its own transaction.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at TEXT NOT NULL
         )",
    )
    .map_err(sql("creating the migrations table"))?;
    let found = current_version(conn)?;
    let known = schema::MIGRATIONS.last().map_or(0, |m| m.0);
    if found > known {
        return Err(StoreError::TooNew {
            path: path.to_path_buf(),
            found,
            known,
        });
    }
    for &(version, name, sql_text) in schema::MIGRATIONS.iter().filter(|m| m.0 > found) {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql("starting a migration"))?;
        tx.execute_batch(sql_text)
            .map_err(sql(&format!("applying migration {version} ({name})")))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at)
             VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            params![version, name],
        )
        .map_err(sql("recording a migration"))?;
        tx.commit().map_err(sql("committing a migration"))?;
        // A new database is made by the same steps: only an upgrade is news.
        if found == 0 {
            tracing::debug!(version, name, "applied session-store migration");
        } else {
            tracing::info!(version, name, path = %path.display(), "upgraded the session store");
        }
    }
    // An in-memory store (a snapshot of a central PostgreSQL database) is no news.
    if found == 0 && path != std::path::Path::new(":memory:") {
        tracing::info!(path = %path.display(), "created a new session store");
    }
    Ok(())
}

//! The store's errors (the station store's, [`StoreError`], and a central database's,
//! [`CentralError`]): each names what was being done and the file, and says whether it is
//! bad input (a file the user can fix) or a runtime failure (disk, lock).

use std::path::PathBuf;

use crate::exit::{Classify, ExitKind};

/// Errors of the session store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the session database: {detail}")]
    Open {
        path: PathBuf,
        /// The path (once), SQLite's reason and, for a file it cannot open, why.
        detail: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("session database error while {context}: {source}")]
    Sqlite {
        context: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("session database has schema version {found}, newer than this build knows ({known}); upgrade empathic: {path}")]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("session `{id}` is already stored as complete; pass --replace to replace it: {path}")]
    AlreadyStored { id: String, path: PathBuf },
    #[error("no session `{id}` in {path}")]
    NoSuchSession { id: String, path: PathBuf },
    #[error("session `{id}` is being written by process {pid} on {host} right now; one process owns a session at a time: wait for it to end, or give this run another session id: {path}")]
    Busy {
        id: String,
        pid: u32,
        host: String,
        path: PathBuf,
    },
    #[error("the session store writer stopped: {0}")]
    WriterGone(String),
    #[error("cannot encode {what} for the session database: {message}")]
    Encode { what: &'static str, message: String },
    #[error("{message}")]
    Invalid { message: String },
    #[error("an earlier write to the session database failed, nothing more is written: {reason}")]
    Poisoned { reason: String },
}

impl StoreError {
    /// Whether SQLite said the disk (or `store.max_db_mib`) is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Sqlite { source, .. } | StoreError::Open { source, .. } => {
                source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
            }
            _ => false,
        }
    }
}

impl Classify for StoreError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            StoreError::AlreadyStored { .. }
            | StoreError::Busy { .. }
            | StoreError::NoSuchSession { .. }
            | StoreError::Invalid { .. } => ExitKind::BadInput,
            _ => ExitKind::Runtime,
        }
    }
}

/// Wraps a rusqlite error with what was being done.
pub(crate) fn sql(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |source| {
        let busy = matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        let context = if busy {
            format!("{context} (another process held the database's lock for longer than store.busy_timeout_ms)")
        } else {
            context.to_string()
        };
        StoreError::Sqlite { context, source }
    }
}

/// What went wrong with a central database (a SQLite file or PostgreSQL), classified into
/// exit codes like every error of the crate.
#[derive(Debug, thiserror::Error)]
pub enum CentralError {
    /// The target is no central database this build can use (a typo, a station's store, an
    /// unparsable URL): bad input.
    #[error("{target}: {reason}")]
    NotCentral { target: String, reason: String },
    /// The database could not be reached, or failed a statement: a runtime failure. The
    /// message is what the user reads (for PostgreSQL, the server's own words); the source,
    /// when a library error caused it, is kept for whoever walks the chain.
    #[error("central database: {doing}: {message}")]
    Database {
        doing: String,
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A record that cannot be applied as it is (its content): quarantined with this
    /// reason, never retried as it is.
    #[error("{0}")]
    Record(String),
    /// What was asked cannot be done as asked (an unknown study or station, a key of the
    /// wrong kind, a record of a kind this build does not know): bad input.
    #[error("{0}")]
    Refused(String),
    /// A read or write of the station-schema tables of a SQLite central database.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CentralError {
    /// A failed statement or connection while `doing` something, said in the library
    /// error's own words and kept as the source.
    pub fn database(
        doing: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::database_with(doing, source.to_string(), source)
    }

    /// [`CentralError::database`] with the message said otherwise than by the source's
    /// `Display` (PostgreSQL's server error, whose `Display` leaves the server's words out).
    pub fn database_with(
        doing: impl Into<String>,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CentralError::Database {
            doing: doing.into(),
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// A database failure found by this crate (no library error behind it).
    pub fn database_says(doing: impl Into<String>, message: impl std::fmt::Display) -> Self {
        CentralError::Database {
            doing: doing.into(),
            message: message.to_string(),
            source: None,
        }
    }
}

impl CentralError {
    /// The same error, said of `what` (a record, a target).
    pub fn of(self, what: &str) -> Self {
        match self {
            CentralError::Database {
                doing,
                message,
                source,
            } => CentralError::Database {
                doing: format!("{what}: {doing}"),
                message,
                source,
            },
            CentralError::Record(m) => CentralError::Record(format!("{what}: {m}")),
            CentralError::Refused(m) => CentralError::Refused(format!("{what}: {m}")),
            other => other,
        }
    }
}

impl Classify for CentralError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            CentralError::NotCentral { .. }
            | CentralError::Record(_)
            | CentralError::Refused(_) => ExitKind::BadInput,
            CentralError::Database { .. } => ExitKind::Runtime,
            CentralError::Store(e) => e.exit_kind(),
        }
    }
}

//! The central database's storage: the transaction interface both backends implement
//! ([`CentralTx`], [`Val`]), the SQLite central database (one file that is a store with the
//! station schema, which every reading command works on, plus the collector's tables), and
//! the station-schema snapshot built from records (PostgreSQL's read view).
//!
//! Contract: the collector's rules (`sync::central`) run over [`CentralTx`] and never see a
//! connection. SQLite: transactions are `IMMEDIATE` (several collectors may share the file: the write
//! lock is taken up front, waiting up to 30 s, never upgraded midway); the station-schema
//! rows of a session change inside a savepoint, so a record that cannot be applied leaves
//! them as they were. A central file of format 1 (before records were applied) is upgraded
//! on open: its columns are added and its latest record of each session is applied.

use std::path::Path;

use rusqlite::{types::ValueRef, Transaction, TransactionBehavior};

use super::replica as apply;
use super::{CentralError, Store};

/// A value bound to or read from the central database (only integers and text are used,
/// so both databases agree on every column's type).
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Int(Option<i64>),
    Text(Option<String>),
}

impl Val {
    pub fn text(s: &str) -> Self {
        Val::Text(Some(s.to_string()))
    }
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => *i,
            Val::Text(_) => None,
        }
    }
    pub fn into_text(self) -> Option<String> {
        match self {
            Val::Text(t) => t,
            Val::Int(i) => i.map(|i| i.to_string()),
        }
    }
}

/// One transaction on the central database. SQL is written once with `?N` placeholders
/// (each backend binds them its way).
pub trait CentralTx {
    fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, CentralError>;
    fn rows(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, CentralError>;
    /// The station-schema view follows the applied records: session `id`'s rows become
    /// those of `record` (`None`: removed), whose outbox sequence number is `seq`. An error
    /// leaves the view as it was.
    fn set_session(
        &mut self,
        id: &str,
        record: Option<&str>,
        seq: Option<i64>,
    ) -> Result<(), CentralError>;
    /// Removes what is left of a participant in the view once their sessions are gone.
    fn remove_participant(&mut self, id: &str) -> Result<(), CentralError>;
    fn commit(self: Box<Self>) -> Result<(), CentralError>;
}

/// The collector's tables as first created (central format 3 with the stations' health and
/// the alerts told); the later formats' columns are added by `COLUMNS` below. Today's
/// tables: docs/formats.md.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS collect_records (
    message_id  TEXT PRIMARY KEY,
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    voided      INTEGER NOT NULL DEFAULT 0,
    participant TEXT,
    seq         INTEGER,
    applied     INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS collect_chunks (
    message_id TEXT NOT NULL,
    chunk      INTEGER NOT NULL,
    chunks     INTEGER NOT NULL,
    data       TEXT NOT NULL,
    station    TEXT,
    subject    TEXT,
    received_at TEXT,
    PRIMARY KEY (message_id, chunk)
);
CREATE TABLE IF NOT EXISTS collect_purges (
    study          TEXT NOT NULL,
    station        TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    records        INTEGER NOT NULL,
    purged_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    seq            INTEGER
);
CREATE TABLE IF NOT EXISTS collect_stations (
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    key         TEXT NOT NULL,
    allow_plain INTEGER NOT NULL DEFAULT 0,
    enrolled_at TEXT NOT NULL,
    revoked_at  TEXT,
    PRIMARY KEY (study, station, key)
);
CREATE TABLE IF NOT EXISTS collect_quarantine (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    topic       TEXT NOT NULL,
    reason      TEXT NOT NULL,
    payload     TEXT NOT NULL,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    message_id  TEXT
);
";

/// The tables central format 4 added (stations' health, `sync::central::health`) and format 5's
/// `collect_alerts` (the problems `[collect] on_problem` was told of and that have not cleared), the same
/// text for SQLite and PostgreSQL (`BIGINT` has SQLite's integer affinity).
pub const HEALTH_TABLES: &str = "
CREATE TABLE IF NOT EXISTS collect_health (
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    sent_at     TEXT NOT NULL,
    received_at TEXT NOT NULL,
    sealed      BIGINT NOT NULL DEFAULT 0,
    payload     TEXT NOT NULL,
    PRIMARY KEY (study, station)
);
CREATE TABLE IF NOT EXISTS collect_health_history (
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    sent_at     TEXT NOT NULL,
    received_at TEXT NOT NULL,
    payload     TEXT NOT NULL,
    PRIMARY KEY (study, station, sent_at)
);
CREATE TABLE IF NOT EXISTS collect_status (
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    status      TEXT NOT NULL,
    received_at TEXT NOT NULL,
    connection  TEXT,
    PRIMARY KEY (study, station)
);
CREATE TABLE IF NOT EXISTS collect_alerts (
    study       TEXT NOT NULL,
    problem     TEXT NOT NULL,
    what        TEXT NOT NULL,
    reported_at TEXT NOT NULL,
    PRIMARY KEY (study, problem)
);
";

/// Columns formats 2, 3, 6 (a status word's connection stamp) and 7 (the message a refusal
/// at the gate named) added to earlier tables.
const ADDED: &[(&str, &str, &str)] = &[
    ("collect_records", "sealed", "INTEGER NOT NULL DEFAULT 0"),
    ("collect_records", "participant", "TEXT"),
    ("collect_records", "seq", "INTEGER"),
    ("collect_records", "applied", "INTEGER NOT NULL DEFAULT 0"),
    ("collect_purges", "seq", "INTEGER"),
    ("collect_quarantine", "message_id", "TEXT"),
    ("collect_chunks", "station", "TEXT"),
    ("collect_chunks", "subject", "TEXT"),
    ("collect_chunks", "received_at", "TEXT"),
    ("collect_status", "connection", "TEXT"),
    ("collect_quarantine", "refused_id", "TEXT"),
    ("collect_records", "proof", "TEXT"),
];

const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS collect_records_subject ON collect_records (study, station, subject);
CREATE INDEX IF NOT EXISTS collect_records_participant ON collect_records (study, station, participant);
CREATE INDEX IF NOT EXISTS collect_quarantine_message ON collect_quarantine (message_id);
CREATE INDEX IF NOT EXISTS collect_quarantine_refused ON collect_quarantine (refused_id);
";

/// Whether `path` is a SQLite central database (a file with the collector's tables), read
/// without changing it.
pub fn is_central_file(path: &Path) -> bool {
    path.is_file()
        && rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| {
                c.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'collect_records'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .is_ok_and(|n| n > 0)
}

/// Opens (creating or upgrading the collector's tables of) the SQLite central database.
pub fn open(path: &Path) -> Result<Store, CentralError> {
    let doing = format!("preparing {}", path.display());
    let fail = |e: rusqlite::Error| CentralError::database(doing.clone(), e);
    let store = Store::open(path)?;
    let conn = store.connection();
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .and_then(|()| conn.execute_batch(SCHEMA))
        .and_then(|()| conn.execute_batch(HEALTH_TABLES))
        .map_err(fail)?;
    let mut upgraded = false;
    for (table, column, ty) in ADDED {
        let has: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
                [table, column],
                |r| r.get(0),
            )
            .map_err(fail)?;
        if has == 0 {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {ty}"))
                .map_err(fail)?;
            upgraded |= *column == "applied";
        }
    }
    conn.execute_batch(INDEXES).map_err(fail)?;
    if upgraded {
        let n = apply_format_1(conn)?;
        tracing::info!(sessions = n, "central database upgraded from format 1");
    }
    Ok(store)
}

/// A format 1 file: each session's latest record (by arrival) is applied.
fn apply_format_1(conn: &rusqlite::Connection) -> Result<usize, CentralError> {
    let sql = |e| CentralError::database("upgrading from format 1", e);
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(sql)?;
    let latest: Vec<(String, String)> = tx
        .prepare(
            "SELECT message_id, payload FROM collect_records r WHERE kind = 'session' AND voided = 0
               AND received_at = (SELECT max(received_at) FROM collect_records o
                                  WHERE o.kind = 'session' AND o.voided = 0 AND o.study = r.study
                                    AND o.station = r.station AND o.subject = r.subject)
             ORDER BY received_at",
        )
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(sql)?;
    let mut n = 0;
    for (id, payload) in &latest {
        match apply::header(payload) {
            Ok(h) => {
                apply::remove_session(&tx, &h.session_id)?;
                apply::apply_record(&tx, payload, None)?;
                tx.execute(
                    "UPDATE collect_records SET applied = 1, participant = ?2 WHERE message_id = ?1",
                    rusqlite::params![id, h.participant_id],
                )
                .map_err(sql)?;
                n += 1;
            }
            Err(e) => tracing::warn!(message = %id, "a format 1 record not applied: {e}"),
        }
    }
    tx.commit().map_err(sql)?;
    Ok(n)
}

struct SqliteTx<'a>(Transaction<'a>);

impl Store {
    /// One `IMMEDIATE` transaction on this store as a central database.
    pub fn central_transaction(&self) -> Result<Box<dyn CentralTx + '_>, CentralError> {
        Transaction::new_unchecked(self.connection(), TransactionBehavior::Immediate)
            .map(|t| Box::new(SqliteTx(t)) as Box<dyn CentralTx>)
            .map_err(|e| CentralError::database("cannot begin a central transaction", e))
    }

    /// An empty page view: an in-memory store with the station schema and the fold of the
    /// predictions (`sql::study::make_page_table`), for [`Store::update_page_view`].
    pub fn new_page_view() -> Result<Store, CentralError> {
        let store = Store::open(Path::new(":memory:")).map_err(|e| {
            CentralError::database("cannot make a read view of the central database", e)
        })?;
        super::sql::study::make_page_table(store.connection())?;
        Ok(store)
    }

    /// Brings a page view up to date in one transaction: removes the sessions in `gone`,
    /// then applies `records` (message id, payload; each replaces its session) without the
    /// tables in `skip`, folding each one's predictions and windows
    /// (`sql::study::fold_predictions`).
    pub fn update_page_view(
        &self,
        gone: &[String],
        records: impl IntoIterator<Item = (String, String)>,
        skip: &[&str],
    ) -> Result<(), CentralError> {
        let tx = self
            .connection()
            .unchecked_transaction()
            .map_err(|e| CentralError::database("cannot update the read view", e))?;
        for id in gone {
            apply::remove_session(&tx, id)?;
        }
        for (id, payload) in records {
            apply_or_leave_out(&tx, &id, |tx| {
                let h = apply::header(&payload)?;
                apply::remove_session(tx, &h.session_id)?;
                apply::apply_record_without(tx, &payload, None, skip)?;
                Ok(super::sql::study::fold_predictions(tx, &h.session_id)?)
            })?;
        }
        tx.commit()
            .map_err(|e| CentralError::database("cannot update the read view", e))
    }

    /// An in-memory store with the station schema holding the given session records
    /// (`(message id, payload)`, applied in order): a central database's read view.
    pub fn from_records(
        records: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Store, CentralError> {
        let store = Store::open(Path::new(":memory:")).map_err(|e| {
            CentralError::database("cannot make the snapshot of the central database", e)
        })?;
        let tx = store
            .connection()
            .unchecked_transaction()
            .map_err(|e| CentralError::database("cannot make the snapshot", e))?;
        for (id, payload) in records {
            apply_or_leave_out(&tx, &id, |tx| {
                apply::apply_record(tx, &payload, None).map(|_| ())
            })?;
        }
        tx.commit()
            .map_err(|e| CentralError::database("cannot make the snapshot", e))?;
        Ok(store)
    }
}

/// Applies one central record to a read view inside a savepoint; a record that cannot be
/// applied (one a collector of an older build let in) is left out with a warning naming
/// it, so one record never breaks every read. `Err` only when the view itself fails.
fn apply_or_leave_out(
    tx: &Transaction<'_>,
    id: &str,
    apply: impl FnOnce(&Transaction<'_>) -> Result<(), CentralError>,
) -> Result<bool, CentralError> {
    let sql = |e: rusqlite::Error| CentralError::database("applying a record to the read view", e);
    tx.execute_batch("SAVEPOINT record").map_err(sql)?;
    let done = apply(tx);
    if let Err(e) = &done {
        tx.execute_batch("ROLLBACK TO record").map_err(sql)?;
        tracing::warn!(
            record = %id,
            "central record {id} cannot be applied and is left out of this read: {e} (`collect quarantine` lists what the gate refuses now)"
        );
    }
    tx.execute_batch("RELEASE record").map_err(sql)?;
    Ok(done.is_ok())
}

/// Whether session record `payload` applies to the station schema (every table it carries
/// known, every NOT NULL and CHECK held), tried on a scratch in-memory store: the gate a
/// PostgreSQL central database puts every record through, the one a SQLite central file
/// passes by applying it to its own tables.
pub fn check_applies(payload: &str) -> Result<(), CentralError> {
    let scratch = Store::open(Path::new(":memory:"))
        .map_err(|e| CentralError::database("cannot make a scratch store to check a record", e))?;
    let tx = scratch
        .connection()
        .unchecked_transaction()
        .map_err(|e| CentralError::database("cannot check a record", e))?;
    apply::apply_record(&tx, payload, None).map(|_| ())
}

fn bind(params: &[Val]) -> Vec<rusqlite::types::Value> {
    params
        .iter()
        .map(|p| match p {
            Val::Int(Some(i)) => rusqlite::types::Value::Integer(*i),
            Val::Text(Some(t)) => rusqlite::types::Value::Text(t.clone()),
            Val::Int(None) | Val::Text(None) => rusqlite::types::Value::Null,
        })
        .collect()
}

impl CentralTx for SqliteTx<'_> {
    fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, CentralError> {
        self.0
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(rusqlite::params_from_iter(bind(params))))
            .map(|n| n as u64)
            .map_err(|e| CentralError::database("central database", e))
    }

    fn rows(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, CentralError> {
        let mut st = self
            .0
            .prepare_cached(sql)
            .map_err(|e| CentralError::database("central database", e))?;
        let n = st.column_count();
        st.query_map(rusqlite::params_from_iter(bind(params)), |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        ValueRef::Integer(x) => Val::Int(Some(x)),
                        ValueRef::Null => Val::Text(None),
                        ValueRef::Text(t) => Val::Text(Some(String::from_utf8_lossy(t).into())),
                        ValueRef::Real(x) => Val::Text(Some(x.to_string())),
                        ValueRef::Blob(b) => Val::Text(Some(String::from_utf8_lossy(b).into())),
                    })
                })
                .collect()
        })
        .and_then(|rows| rows.collect())
        .map_err(|e| CentralError::database("central database", e))
    }

    fn set_session(
        &mut self,
        id: &str,
        record: Option<&str>,
        seq: Option<i64>,
    ) -> Result<(), CentralError> {
        let sql = |e: rusqlite::Error| CentralError::database("applying a record", e);
        self.0.execute_batch("SAVEPOINT apply").map_err(sql)?;
        let done = apply::remove_session(&self.0, id).and_then(|()| match record {
            Some(r) => apply::apply_record(&self.0, r, seq).map(|_| ()),
            None => Ok(()),
        });
        if done.is_err() {
            self.0.execute_batch("ROLLBACK TO apply").map_err(sql)?;
        }
        self.0.execute_batch("RELEASE apply").map_err(sql)?;
        done
    }

    fn remove_participant(&mut self, id: &str) -> Result<(), CentralError> {
        apply::remove_participant(&self.0, id)
    }

    fn commit(self: Box<Self>) -> Result<(), CentralError> {
        self.0
            .commit()
            .map_err(|e| CentralError::database("cannot commit to the central database", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{Classify, ExitKind};

    #[test]
    fn central_errors_are_classified_by_whose_fault_they_are() {
        let db = CentralError::database_says("applying a record", "disk I/O error");
        assert_eq!(db.exit_kind(), ExitKind::Runtime);
        assert_eq!(
            db.to_string(),
            "central database: applying a record: disk I/O error"
        );
        assert_eq!(
            CentralError::Refused("key revoked".into()).exit_kind(),
            ExitKind::BadInput
        );
        let record = CentralError::Record("table `x` is not one a record may carry".into());
        assert_eq!(
            record.of("central record m1").to_string(),
            "central record m1: table `x` is not one a record may carry"
        );
        // A record that cannot be applied stays a record's fault when said of it.
        assert_eq!(
            CentralError::Record("bad".into()).of("m1").exit_kind(),
            ExitKind::BadInput
        );
    }
}

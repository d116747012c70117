//! The session store: one SQLite file per station (or per researcher's laptop).
//!
//! Contract:
//! - [`Store::open`] creates or opens the file in WAL mode with `synchronous=FULL` and
//!   foreign keys on, applies pending [`schema`] migrations, and marks every session left
//!   `running` by a process that no longer exists as `incomplete` (killed or crashed).
//! - All writes of a run go through one [`writer::StoreWriter`] thread in batched
//!   transactions; a batch is all-or-nothing, so a kill at any moment leaves the file
//!   consistent with every committed batch intact.
//! - Reads ([`Store::list_sessions`], [`Store::session_detail`]) use their own connection and
//!   never block the writer (WAL).
//! - Nothing outside this module has the connection or the SQL (`sql` is private): the
//!   outbox is [`Store::outbox`], the central database's transactions [`central`].
//!
//! Files: `mod.rs` the `Store` (open, recovery, consent, erasure), `connect.rs` the
//! connection and migrations, `error.rs`, `read.rs` the read models and queries,
//! `writer.rs` the batched writer, `outbox.rs` (the `Outbox` handle), `central.rs` and `replica.rs` for sync,
//! `rows.rs` the stored forms, `schema.rs` the migrations' SQL, `sql/` every statement.

pub mod central;
mod connect;
mod error;
pub mod outbox;
mod read;
pub mod replica;
pub mod rows;
pub mod schema;
mod sql;
pub mod writer;

use std::path::{Path, PathBuf};

use rusqlite::Connection;

pub use connect::ConnectOptions;
pub(crate) use connect::{connect, connect_read_only};
use connect::{current_version, migrate};
pub(crate) use error::sql;
pub use error::{CentralError, StoreError};
pub use read::{
    ExportReads, ModalityRow, PhaseRow, SessionDetail, SessionSummary, StoredAttribution,
    StoryExposureRow, StoryPrediction,
};
pub use sql::announce::{CONSENT_VERSION, PAYLOAD_VERSION};
pub use sql::export::{ExportModality, ExportWindow};
pub use sql::report::{PredictionPoint, SurveyRow, UtteranceRow};
pub use sql::stories::StoredEmbedding;
pub use sql::study::{ParticipantRow, RatedStory, ScoreBins};
pub use writer::StoreWriter;

/// Who owns a running session: host, boot and process.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    pub host: String,
    pub boot_id: String,
    pub pid: u32,
}

impl Owner {
    pub fn current() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Self {
            host: read("/proc/sys/kernel/hostname"),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
            pid: std::process::id(),
        }
    }

    /// The owner in columns `host, boot_id, pid` of `row`, from index `first` (unset
    /// columns read as empty: no owner recorded).
    pub(crate) fn from_row(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Self> {
        Ok(Owner {
            host: row.get::<_, Option<String>>(first)?.unwrap_or_default(),
            boot_id: row.get::<_, Option<String>>(first + 1)?.unwrap_or_default(),
            pid: row.get::<_, Option<u32>>(first + 2)?.unwrap_or(0),
        })
    }

    /// Whether the process that owned a session could still be running.
    pub(crate) fn is_alive(&self, current: &Owner) -> bool {
        if !self.host.is_empty() && self.host != current.host {
            // Another machine's session (a copied file): this machine cannot tell.
            return true;
        }
        if self.host.is_empty() || self.boot_id != current.boot_id {
            // No owner recorded, or this machine rebooted since: the writer is gone.
            return false;
        }
        self.pid == current.pid || Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

/// A handle for opening, migrating, recovering and reading the store.
pub struct Store {
    path: PathBuf,
    conn: Connection,
}

impl Store {
    /// The same store, named `name` in messages (an in-memory snapshot of a PostgreSQL
    /// database says which database, not `:memory:`).
    pub fn named(mut self, name: impl Into<PathBuf>) -> Self {
        self.path = name.into();
        self
    }

    /// Opens (creating if needed) and migrates the store, then recovers abandoned sessions,
    /// with the default busy timeout and no size limit.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, ConnectOptions::default())
    }

    /// [`Store::open`] with the station's store settings.
    pub fn open_with(path: &Path, options: ConnectOptions) -> Result<Store, StoreError> {
        let mut conn = connect(path, options)?;
        migrate(&mut conn, path)?;
        let store = Store {
            path: path.to_path_buf(),
            conn,
        };
        store.recover_abandoned(&Owner::current())?;
        Ok(store)
    }

    /// Opens an existing store to read it: no migration, no recovery, works on a
    /// read-only file. A file newer than this build is refused; an older one is read
    /// as it is (the readers only use columns every version has).
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let conn = connect_read_only(path)?;
        let found = current_version(&conn)?;
        let known = schema::MIGRATIONS.last().map_or(0, |m| m.0);
        if found > known {
            return Err(StoreError::TooNew {
                path: path.to_path_buf(),
                found,
                known,
            });
        }
        Ok(Store {
            path: path.to_path_buf(),
            conn,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records what session records carry from now on (`[sync]` switches).
    pub fn set_sync_content(&self, content: &crate::config::SyncContent) -> Result<(), StoreError> {
        sql::announce::set_content(&self.conn, content)
    }

    /// The schema version of the file.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        current_version(&self.conn)
    }

    /// Marks sessions whose writer is gone as `incomplete`. Returns how many.
    pub fn recover_abandoned(&self, current: &Owner) -> Result<usize, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, owner_host, owner_boot_id, owner_pid FROM sessions WHERE status = 'running'",
            )
            .map_err(sql("looking for abandoned sessions"))?;
        let running: Vec<(String, Owner)> = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, Owner::from_row(r, 1)?)))
            .and_then(|rows| rows.collect())
            .map_err(sql("looking for abandoned sessions"))?;
        let mut recovered = 0;
        for (id, owner) in running {
            if owner.is_alive(current) {
                continue;
            }
            if id.ends_with(sql::session_rows::STAGING_SUFFIX) {
                // A replacement abandoned before it completed: the session it was to
                // replace is still stored complete; the partial copy goes.
                self.conn
                    .execute("DELETE FROM sessions WHERE id = ?1", [&id])
                    .map_err(sql("removing an abandoned replacement"))?;
                tracing::warn!(session = %id, "removed a replacement abandoned by process {} on {}", owner.pid, owner.host);
                recovered += 1;
                continue;
            }
            let reason = format!(
                "process {} on {} ended without finishing the session (killed, crashed or power lost); data up to its last committed batch is kept",
                owner.pid, owner.host
            );
            // Marked incomplete and announced to sync in one transaction; its duration is
            // that of the frames it stored (it was 0: a killed session listed as `0.0s`).
            let tx = self
                .conn
                .unchecked_transaction()
                .map_err(sql("marking an abandoned session incomplete"))?;
            sql::session_rows::keep_incomplete(&tx, &id, &reason)?;
            sql::announce::announce_session(&tx, &id)?;
            tx.commit()
                .map_err(sql("marking an abandoned session incomplete"))?;
            tracing::warn!(session = %id, "{reason}");
            recovered += 1;
        }
        Ok(recovered)
    }

    /// Records a participant's consent as study staff took it (creating the participant),
    /// with its `consent` message for the study's central database, in one transaction.
    /// `consent`: `given` or `withdrawn`.
    pub fn set_consent(&self, id: &str, consent: &str, raw_media: bool) -> Result<(), StoreError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(sql("beginning to record a participant's consent"))?;
        sql::participants::record_consent(&tx, id, consent, raw_media)?;
        tx.commit()
            .map_err(sql("committing a participant's consent"))
    }

    /// Leaves no deleted byte in the database's files: rebuilds the file from its live
    /// content (`VACUUM`: free pages of deletes made before `secure_delete`, or by another
    /// build, go too), then copies the write-ahead log into it and truncates the log to
    /// nothing (older versions of changed pages live there until then). Returns `false` when
    /// another process holds the database open so the log could not be emptied (its pages
    /// are reused, and emptied at that process's next checkpoint).
    pub fn erase_deleted(&self) -> Result<bool, StoreError> {
        self.conn
            .execute_batch("VACUUM")
            .map_err(sql("rebuilding the database without deleted content"))?;
        let (busy, _, _): (i64, i64, i64) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(sql("emptying the write-ahead log"))?;
        Ok(busy == 0)
    }

    /// The connection: the store's own modules only (`sql`, the outbox, the central
    /// database); everything else goes through the store's methods.
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The connection, for the integration tests' and benchmarks' raw checks of what was
    /// stored. Nothing under `src/` calls it (`tests/it/architecture.rs` checks).
    #[doc(hidden)]
    pub fn connection_for_tests(&self) -> &Connection {
        &self.conn
    }

    /// Embeds are computed by the caller; this stores each story with its embedding under
    /// `model` in one transaction.
    pub fn import_stories(
        &mut self,
        stories: &[rows::Story],
        vectors: &[Vec<f32>],
        model: &str,
    ) -> Result<(), StoreError> {
        sql::stories::upsert(&mut self.conn, stories, vectors, model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::params;

    #[test]
    fn open_twice_migrates_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 13);
        drop(store);
        let store = Store::open(&path).unwrap();
        let n: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 13, "one row per migration, each applied once");
        let mode: String = store
            .connection()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    /// A database file as a build of schema `version` left it.
    fn file_at_version(path: &Path, version: usize) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);",
        )
        .unwrap();
        for (v, name, sql) in &schema::MIGRATIONS[..version] {
            conn.execute_batch(sql).unwrap();
            conn.execute(
                "INSERT INTO schema_migrations VALUES (?1, ?2, 'x')",
                params![v, name],
            )
            .unwrap();
        }
        conn
    }

    /// Version 11 rebuilds the outbox (its CHECK widened for consent messages): every row,
    /// its state and sealed bytes stay, and numbering goes on past the highest number ever
    /// given (a purged message's number is not given again).
    #[test]
    fn version_10_outbox_is_rebuilt_keeping_rows_and_numbering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v10.db");
        let conn = file_at_version(&path, 10);
        conn.execute_batch(
            "INSERT INTO outbox (message_id, kind, subject, payload, sha256, created_at, state, sealed_to, sealed)
               VALUES ('m1', 'session', 's1', '{}', 'h1', 'x', 'synced', 'k', 'sealed-bytes'),
                      ('m2', 'tombstone', 's1', '{}', 'h2', 'x', 'pending', NULL, NULL),
                      ('m3', 'purge', 'P1', '{}', 'h3', 'x', 'pending', NULL, NULL);
             DELETE FROM outbox WHERE message_id = 'm3';",
        )
        .unwrap();
        drop(conn);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 13);
        let rows: Vec<(i64, String, String, Option<String>)> = store
            .connection()
            .prepare("SELECT seq, message_id, state, sealed FROM outbox ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                (1, "m1".into(), "synced".into(), Some("sealed-bytes".into())),
                (2, "m2".into(), "pending".into(), None)
            ]
        );
        store.set_consent("P1", "given", false).unwrap();
        let (seq, kind): (i64, String) = store
            .connection()
            .query_row(
                "SELECT seq, kind FROM outbox ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((seq, kind.as_str()), (4, "consent"));
    }

    #[test]
    fn version_1_file_migrates_keeping_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        let conn = file_at_version(&path, 1);
        conn.execute_batch(
            "INSERT INTO stations VALUES ('st', 'x');
             INSERT INTO sessions (id, station_id, source, nominal_fps, status, created_at, updated_at)
               VALUES ('s1', 'st', 'replay', 15, 'complete', 'x', 'x');
             INSERT INTO modalities VALUES ('s1', 'video_signal', 'video', 3, '[]');",
        )
        .unwrap();
        drop(conn);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 13);
        let n: i64 = store
            .connection()
            .query_row(
                "SELECT count(*) FROM modalities WHERE session_id = 's1'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(store.session_detail("s1").unwrap().modalities.len(), 1);
    }

    #[test]
    fn version_2_file_migrates_its_predictions_and_modalities() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.db");
        let conn = file_at_version(&path, 2);
        conn.execute_batch(
            "INSERT INTO stations VALUES ('st', 'x');
             INSERT INTO sessions (id, station_id, source, nominal_fps, status, created_at, updated_at)
               VALUES ('s1', 'st', 'replay', 15, 'complete', 'x', 'x');
             INSERT INTO modalities VALUES ('s1', 'text', 'text', 384, '[]');
             INSERT INTO windows (session_id, window_index, start_frame, end_frame, start_ns, end_ns,
               video_presence, audio_presence) VALUES ('s1', 0, 0, 120, 0, 8000000000, 1, 1);
             INSERT INTO predictions VALUES ('s1', 0, 'old-model', 'story', 3.5, 'x');",
        )
        .unwrap();
        drop(conn);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 13);
        // v4: the outbox exists and announces nothing retroactively.
        let queued: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM outbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(queued, 0);
        let row: (String, f64, Option<f64>, String, Option<String>) = store
            .connection()
            .query_row(
                "SELECT p.predictor, p.score, p.raw_cosine, p.calibration, m.producer
                 FROM predictions p JOIN modalities m ON m.session_id = p.session_id",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        assert_eq!(row, ("old-model".into(), 3.5, None, "unknown".into(), None));
        let broken: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(broken, 0);
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(Store::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute(
            "INSERT INTO schema_migrations VALUES (99, 'future', 'x')",
            [],
        )
        .unwrap();
        drop(conn);
        let msg = Store::open(&path).err().unwrap().to_string();
        assert!(msg.contains("99") && msg.contains("s.db"), "{msg}");
    }

    #[test]
    fn dead_owner_makes_session_incomplete_and_live_one_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        let me = Owner::current();
        let conn = store.connection();
        conn.execute("INSERT INTO stations VALUES ('st', 'now')", [])
            .unwrap();
        for (id, pid) in [("dead", 0x7fff_fff0u32), ("alive", me.pid)] {
            conn.execute(
                "INSERT INTO sessions (id, station_id, source, nominal_fps, status, owner_host,
                 owner_pid, owner_boot_id, created_at, updated_at)
                 VALUES (?1, 'st', 'live', 15, 'running', ?2, ?3, ?4, 'now', 'now')",
                params![id, me.host, pid, me.boot_id],
            )
            .unwrap();
        }
        assert_eq!(store.recover_abandoned(&me).unwrap(), 1);
        let list = store.list_sessions().unwrap();
        let status = |id: &str| list.iter().find(|s| s.id == id).unwrap().status.clone();
        assert_eq!(status("dead"), "incomplete");
        assert_eq!(status("alive"), "running");
    }
}

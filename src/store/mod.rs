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

pub mod central;
pub mod outbox;
pub mod replica;
pub mod rows;
pub mod schema;
mod sql;
pub mod writer;

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::exit::{Classify, ExitKind};

pub use sql::export::{ExportModality, ExportWindow};
pub use sql::report::PredictionPoint;
pub use sql::stories::StoredEmbedding;
pub use writer::StoreWriter;

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

/// Opens a connection with the store's pragmas.
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

/// A session as listed by `empathic sessions list`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionSummary {
    pub id: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub station_id: String,
    pub participant_id: Option<String>,
    pub source: String,
    pub source_path: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub frames: u64,
    pub windows: u64,
    pub duration_secs: f64,
    /// The quality report stored at the end of the run (see `report::QualityReport`).
    pub quality: Option<serde_json::Value>,
}

/// A session-level prediction toward one story: the mean over every predicted window of
/// the configured phases after the story was shown, beside the participant's self-rating.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StoryPrediction {
    pub predictor: String,
    pub story_id: String,
    /// Retrieved while the participant shared (windows before any story was shown), or
    /// shown (windows after it was shown).
    pub retrieved: bool,
    pub title: Option<String>,
    pub windows: u64,
    /// Mean calibrated score (1-5).
    pub score: f64,
    pub raw_cosine: f64,
    pub rating: Option<u8>,
    pub synthetic: bool,
    /// `predictions.calibration` of its windows (the last when they differ): `population`
    /// or `participant:N` (see `fusion::uncalibrated`).
    pub calibration: String,
}

/// A session with what it contains, for `empathic sessions show`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionDetail {
    #[serde(flatten)]
    pub summary: SessionSummary,
    pub phases: Vec<PhaseRow>,
    pub events: u64,
    pub utterances: u64,
    pub stories: Vec<StoryExposureRow>,
    pub modalities: Vec<ModalityRow>,
    pub predictions: Vec<StoryPrediction>,
    /// In a central database: which optional tables the session's record carried (the
    /// rest, and the raw event log, were never synced here). `None` on a station's own
    /// database, which holds everything it stored.
    pub synced_content: Option<crate::config::SyncContent>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseRow {
    pub phase: String,
    pub start_secs: f64,
    pub end_secs: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StoryExposureRow {
    pub position: u32,
    pub story_id: String,
    pub title: String,
    pub shown_secs: f64,
    pub rating: Option<u8>,
    /// The participant saw another title or text than the stored story of this id (the
    /// title above is the one shown; the text shown is on the exposure row).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub differs_from_bank: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModalityRow {
    pub name: String,
    pub stream: String,
    pub dims: u32,
    /// Frames where the modality is present, out of `frames`.
    pub present_frames: u64,
}

/// The reads of `export windows`.
pub struct ExportReads<'a>(&'a Connection);

impl ExportReads<'_> {
    pub fn sessions(
        &self,
        only: Option<&str>,
    ) -> Result<Vec<(String, Option<String>)>, StoreError> {
        sql::export::sessions(self.0, only)
    }
    pub fn modalities(&self, id: &str) -> Result<Vec<sql::export::ExportModality>, StoreError> {
        sql::export::modalities(self.0, id)
    }
    pub fn frame_count(&self, id: &str) -> Result<u64, StoreError> {
        sql::export::frame_count(self.0, id)
    }
    pub fn frame_vectors(
        &self,
        id: &str,
        modality: &str,
        each: impl FnMut(u64, Vec<f32>),
    ) -> Result<(), StoreError> {
        sql::export::frame_vectors(self.0, id, modality, each)
    }
    pub fn windows(
        &self,
        id: &str,
        phase: Option<&str>,
    ) -> Result<Vec<sql::export::ExportWindow>, StoreError> {
        sql::export::windows(self.0, id, phase)
    }
    pub fn window_means(
        &self,
        id: &str,
        modality: &str,
        each: impl FnMut(u64, u64, Option<Vec<f32>>),
    ) -> Result<(), StoreError> {
        sql::export::window_means(self.0, id, modality, each)
    }
    /// The sentence encoders the story bank was embedded with.
    pub fn story_encoders(&self) -> Result<Vec<String>, StoreError> {
        sql::export::story_encoders(self.0)
    }
    /// Every story's id, title and text, by id.
    pub fn stories(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        sql::export::stories(self.0)
    }
    /// Every story embedded with `model`, by id.
    pub fn story_embeddings(
        &self,
        model: &str,
    ) -> Result<Vec<sql::stories::StoredEmbedding>, StoreError> {
        sql::stories::embeddings(self.0, model)
    }
}

/// A handle for opening, migrating, recovering and reading the store.
pub struct Store {
    path: PathBuf,
    conn: Connection,
}

impl Store {
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
        sql::outbox::set_content(&self.conn, content)
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
            if id.ends_with(sql::sessions::STAGING_SUFFIX) {
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
            // Marked incomplete and announced to sync in one transaction.
            let tx = self
                .conn
                .unchecked_transaction()
                .map_err(sql("marking an abandoned session incomplete"))?;
            tx.execute(
                "UPDATE sessions SET status = 'incomplete', status_reason = ?2,
                 frames = (SELECT count(*) FROM frames WHERE session_id = ?1),
                 windows = (SELECT count(*) FROM windows WHERE session_id = ?1),
                 updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                 WHERE id = ?1 AND status = 'running'",
                params![id, reason],
            )
            .map_err(sql("marking an abandoned session incomplete"))?;
            sql::outbox::announce_session(&tx, &id)?;
            tx.commit()
                .map_err(sql("marking an abandoned session incomplete"))?;
            tracing::warn!(session = %id, "{reason}");
            recovered += 1;
        }
        Ok(recovered)
    }

    /// Session `id`'s predictions per predictor and story (see [`StoryPrediction`]), in the
    /// order the stories were shown.
    pub fn session_predictions(&self, id: &str) -> Result<Vec<StoryPrediction>, StoreError> {
        self.conn
            .prepare(
                "SELECT p.predictor, p.story_id, s.title, count(*), avg(p.score),
                        avg(p.raw_cosine), max(p.synthetic), r.value, p.in_play = 'retrieved',
                        max(p.calibration)
                 FROM predictions p
                 LEFT JOIN stories s ON s.id = p.story_id
                 LEFT JOIN self_ratings r ON r.session_id = p.session_id AND r.story_id = p.story_id
                 LEFT JOIN story_exposures e ON e.session_id = p.session_id AND e.story_id = p.story_id
                 WHERE p.session_id = ?1
                 GROUP BY p.predictor, p.in_play, p.story_id
                 ORDER BY p.predictor, p.in_play DESC, e.position, p.story_id",
            )
            .and_then(|mut st| {
                st.query_map([id], |r| {
                    Ok(StoryPrediction {
                        predictor: r.get(0)?,
                        story_id: r.get(1)?,
                        title: r.get(2)?,
                        windows: r.get::<_, i64>(3)?.max(0) as u64,
                        score: r.get(4)?,
                        raw_cosine: r.get::<_, Option<f64>>(5)?.unwrap_or(f64::NAN),
                        synthetic: r.get::<_, i64>(6)? != 0,
                        rating: r.get(7)?,
                        retrieved: r.get(8)?,
                        calibration: r.get(9)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading predictions"))
    }

    /// Window predictions toward stories shown and rated, from complete sessions (see
    /// `fusion::evaluate`); `phase` keeps only windows of that phase. Also returns how
    /// many predictions there are at all under the filters.
    pub fn rated_predictions(
        &self,
        predictor: Option<&str>,
        phase: Option<&str>,
    ) -> Result<(Vec<crate::fusion::evaluate::RatedWindow>, u64), StoreError> {
        let filter = "FROM predictions p
             JOIN sessions ses ON ses.id = p.session_id AND ses.status = 'complete'
             LEFT JOIN windows w ON w.session_id = p.session_id AND w.window_index = p.window_index
             WHERE p.in_play = 'shown' AND (?1 IS NULL OR p.predictor = ?1)
               AND (?2 IS NULL OR w.phase = ?2)";
        let total: i64 = self
            .conn
            .query_row(
                &format!("SELECT count(*) {filter}"),
                params![predictor, phase],
                |r| r.get(0),
            )
            .map_err(sql("counting predictions"))?;
        let rows = self
            .conn
            .prepare(&format!(
                "SELECT p.predictor, COALESCE(ses.participant_id, ses.id), p.session_id,
                        p.story_id, p.score, p.raw_cosine, r.value, p.synthetic, p.calibration
                 {filter_rated}
                 ORDER BY p.predictor, ses.created_at, p.session_id, p.story_id, p.window_index",
                filter_rated = filter.replace(
                    "LEFT JOIN windows",
                    "JOIN self_ratings r ON r.session_id = p.session_id AND r.story_id = p.story_id
             LEFT JOIN windows"
                )
            ))
            .and_then(|mut st| {
                st.query_map(params![predictor, phase], |r| {
                    Ok(crate::fusion::evaluate::RatedWindow {
                        predictor: r.get(0)?,
                        participant: r.get(1)?,
                        session_id: r.get(2)?,
                        story_id: r.get(3)?,
                        score: r.get(4)?,
                        raw_cosine: r.get(5)?,
                        rating: f64::from(r.get::<_, i64>(6)? as i32),
                        synthetic: r.get::<_, i64>(7)? != 0,
                        calibration: r.get(8)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading rated predictions"))?;
        Ok((rows, total.max(0) as u64))
    }

    /// Stories shown to `participant` in their sessions before this one (by `start_time`,
    /// else by when they were stored): retrieval leaves them out.
    pub fn stories_seen_before(
        &self,
        participant: &str,
        session_id: &str,
        start_time: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        self.conn
            .prepare(
                "SELECT DISTINCT e.story_id FROM story_exposures e
                 JOIN sessions s ON s.id = e.session_id AND s.participant_id = ?1 AND s.id != ?2
                   AND COALESCE(s.start_time, s.created_at) < COALESCE(?3, '9999')
                 ORDER BY e.story_id",
            )
            .and_then(|mut st| {
                st.query_map(params![participant, session_id, start_time], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()
            })
            .map_err(sql("reading stories seen before"))
    }

    /// (mean raw cosine, self-rating) per rated story of `participant`'s complete sessions
    /// before this one (by `start_time`, else by when they were stored), for `predictor`:
    /// what per-participant calibration may learn from, never the session itself.
    pub fn calibration_pairs(
        &self,
        participant: &str,
        predictor: &str,
        session_id: &str,
        start_time: Option<&str>,
    ) -> Result<Vec<(f64, f64)>, StoreError> {
        self.conn
            .prepare(
                "SELECT avg(p.raw_cosine), r.value FROM predictions p
                 JOIN sessions s ON s.id = p.session_id AND s.status = 'complete'
                   AND s.participant_id = ?1 AND s.id != ?3
                   AND COALESCE(s.start_time, s.created_at) < COALESCE(?4, '9999')
                 JOIN self_ratings r ON r.session_id = p.session_id AND r.story_id = p.story_id
                 WHERE p.predictor = ?2 AND p.in_play = 'shown' AND p.raw_cosine IS NOT NULL
                 GROUP BY p.session_id, p.story_id
                 ORDER BY p.session_id, p.story_id",
            )
            .and_then(|mut st| {
                st.query_map(
                    params![participant, predictor, session_id, start_time],
                    |r| Ok((r.get::<_, f64>(0)?, f64::from(r.get::<_, i64>(1)? as i32))),
                )?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading calibration history"))
    }

    /// Every session, newest first.
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("{SUMMARY_SELECT} ORDER BY created_at DESC, id"))
            .map_err(sql("listing sessions"))?;
        let rows = stmt
            .query_map([], summary_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql("listing sessions"))?;
        Ok(rows)
    }

    /// Every stored window prediction of session `id` over time.
    pub fn prediction_series(
        &self,
        id: &str,
    ) -> Result<Vec<sql::report::PredictionPoint>, StoreError> {
        sql::report::prediction_series(&self.conn, id)
    }

    /// The recorded start time of session `id`.
    pub fn start_time(&self, id: &str) -> Result<Option<String>, StoreError> {
        sql::report::start_time(&self.conn, id)
    }

    /// The utterances of session `id`, in order.
    pub fn utterances(&self, id: &str) -> Result<Vec<sql::report::UtteranceRow>, StoreError> {
        sql::report::utterances(&self.conn, id)
    }

    /// The survey answers of `participant`.
    pub fn surveys(&self, participant: &str) -> Result<Vec<sql::report::SurveyRow>, StoreError> {
        sql::report::surveys(&self.conn, participant)
    }

    /// A participant's recorded consent: `(consent, raw_media_consent)`, or `None` when
    /// the participant is unknown here.
    pub fn participant_consent(&self, id: &str) -> Result<Option<(String, bool)>, StoreError> {
        self.conn
            .query_row(
                "SELECT consent, raw_media_consent FROM participants WHERE id = ?1",
                [id],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? == 1)),
            )
            .optional()
            .map_err(sql("reading a participant's consent"))
    }

    /// Records a participant's consent as study staff took it (creating the participant).
    /// `consent`: `given` or `withdrawn`.
    pub fn set_consent(&self, id: &str, consent: &str, raw_media: bool) -> Result<(), StoreError> {
        self.conn
            .execute(
                &format!(
                    "INSERT INTO participants (id, consent, consent_at, raw_media_consent, first_seen_at)
                     VALUES (?1, ?2, {now}, ?3, {now})
                     ON CONFLICT (id) DO UPDATE SET consent = ?2, consent_at = {now},
                         raw_media_consent = ?3",
                    now = sql::NOW
                ),
                rusqlite::params![id, consent, i64::from(raw_media)],
            )
            .map(|_| ())
            .map_err(sql("recording a participant's consent"))
    }

    /// The sessions of `participant`, oldest first.
    pub fn participant_sessions(&self, participant: &str) -> Result<Vec<String>, StoreError> {
        sql::report::participant_sessions(&self.conn, participant)
    }

    /// One session with its phases, stories, ratings and modalities.
    pub fn session_detail(&self, id: &str) -> Result<SessionDetail, StoreError> {
        let summary = self
            .conn
            .query_row(
                &format!("{SUMMARY_SELECT} WHERE id = ?1"),
                [id],
                summary_from_row,
            )
            .optional()
            .map_err(sql("reading a session"))?
            .ok_or_else(|| StoreError::NoSuchSession {
                id: id.to_string(),
                path: self.path.clone(),
            })?;
        let ctx = sql("reading a session");
        let phases = self
            .conn
            .prepare(
                "SELECT phase, start_ns, end_ns FROM phases WHERE session_id = ?1 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([id], |r| {
                    Ok(PhaseRow {
                        phase: r.get(0)?,
                        start_secs: ns_to_secs(r.get(1)?),
                        end_secs: r.get::<_, Option<i64>>(2)?.map(ns_to_secs),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(ctx)?;
        let count = |table: &str| -> Result<u64, StoreError> {
            self.conn
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE session_id = ?1"),
                    [id],
                    |r| r.get::<_, i64>(0),
                )
                .map(|n| n.max(0) as u64)
                .map_err(sql("counting session rows"))
        };
        // A file older than version 8 (opened read-only, not migrated) has no shown words.
        let shown = if self.schema_version()? >= 8 {
            "coalesce(e.shown_title, s.title), e.shown_ns, r.value, e.shown_text IS NOT NULL"
        } else {
            "s.title, e.shown_ns, r.value, 0"
        };
        let stories = self
            .conn
            .prepare(&format!(
                "SELECT e.position, e.story_id, {shown}
                 FROM story_exposures e JOIN stories s ON s.id = e.story_id
                 LEFT JOIN self_ratings r ON r.session_id = e.session_id AND r.story_id = e.story_id
                 WHERE e.session_id = ?1 ORDER BY e.position"
            ))
            .and_then(|mut s| {
                s.query_map([id], |r| {
                    Ok(StoryExposureRow {
                        position: r.get(0)?,
                        story_id: r.get(1)?,
                        title: r.get(2)?,
                        shown_secs: ns_to_secs(r.get(3)?),
                        rating: r.get(4)?,
                        differs_from_bank: r.get(5)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading story exposures"))?;
        let modalities = self
            .conn
            .prepare(
                "SELECT m.name, m.stream, m.dims,
                   (SELECT count(*) FROM frame_features f
                    WHERE f.session_id = m.session_id AND f.modality = m.name AND f.present = 1)
                 FROM modalities m WHERE m.session_id = ?1 ORDER BY m.stream DESC, m.name",
            )
            .and_then(|mut s| {
                s.query_map([id], |r| {
                    Ok(ModalityRow {
                        name: r.get(0)?,
                        stream: r.get(1)?,
                        dims: r.get(2)?,
                        present_frames: get_u64(r, 3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading modalities"))?;
        Ok(SessionDetail {
            summary,
            phases,
            events: count("events")?,
            utterances: count("utterances")?,
            stories,
            modalities,
            predictions: self.session_predictions(id)?,
            synced_content: self.synced_content(id)?,
        })
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

    /// The stored status of session `id`, if it is stored.
    pub fn session_status(&self, id: &str) -> Result<Option<String>, StoreError> {
        sql::sessions::status(&self.conn, id)
    }

    /// In a central database, which optional tables session `id`'s record carried; `None`
    /// on a station's database (or one from before the table existed, read read-only).
    pub fn synced_content(
        &self,
        id: &str,
    ) -> Result<Option<crate::config::SyncContent>, StoreError> {
        let has_table: bool = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'session_sync'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(sql("reading what was synced"))?;
        if !has_table {
            return Ok(None);
        }
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT content FROM session_sync WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("reading what was synced"))?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// The reads of `export windows` (see `sql::export`), on this store's connection.
    pub fn export_reads(&self) -> ExportReads<'_> {
        ExportReads(&self.conn)
    }

    /// The connection: the store's own modules only (`sql`, the outbox, the central
    /// database); everything else goes through the store's methods.
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The connection, for the integration tests' and benchmarks' raw checks of what was
    /// stored. Nothing under `src/` calls it (`tests/architecture.rs` checks).
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

    /// Every story embedded with `model`: id, title, stored dims and embedding.
    pub fn story_embeddings(
        &self,
        model: &str,
    ) -> Result<Vec<sql::stories::StoredEmbedding>, StoreError> {
        sql::stories::embeddings(&self.conn, model)
    }

    /// What story retrieval for session `id` needs; `None` when there is no such session.
    pub fn retrieval_context(
        &self,
        id: &str,
        speaker: &str,
    ) -> Result<Option<sql::stories::RetrievalContext>, StoreError> {
        sql::stories::retrieval_context(&self.conn, id, speaker)
    }
}

const SUMMARY_SELECT: &str =
    "SELECT id, status, status_reason, station_id, participant_id, source, source_path,
        created_at, updated_at, frames, windows, duration_ns, quality_json FROM sessions";

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionSummary> {
    let quality: Option<String> = r.get(12)?;
    Ok(SessionSummary {
        id: r.get(0)?,
        status: r.get(1)?,
        status_reason: r.get(2)?,
        station_id: r.get(3)?,
        participant_id: r.get(4)?,
        source: r.get(5)?,
        source_path: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
        frames: get_u64(r, 9)?,
        windows: get_u64(r, 10)?,
        duration_secs: ns_to_secs(r.get(11)?),
        quality: quality.and_then(|q| serde_json::from_str(&q).ok()),
    })
}

/// SQLite integers are i64; counts are never negative.
fn get_u64(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(r.get::<_, i64>(i)?.max(0) as u64)
}

fn ns_to_secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

fn current_version(conn: &Connection) -> Result<i64, StoreError> {
    conn.query_row(
        "SELECT coalesce(max(version), 0) FROM schema_migrations",
        [],
        |r| r.get(0),
    )
    .map_err(sql("reading the schema version"))
}

/// Applies the migrations the file lacks, each in its own transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
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
    if found == 0 {
        tracing::info!(path = %path.display(), "created a new session store");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_twice_migrates_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), 8);
        drop(store);
        let store = Store::open(&path).unwrap();
        let n: i64 = store
            .connection()
            .query_row("SELECT count(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 8, "one row per migration, each applied once");
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
        assert_eq!(store.schema_version().unwrap(), 8);
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
        assert_eq!(store.schema_version().unwrap(), 8);
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

//! The single writer of the session store: an actor the runtime runs on its own thread.
//!
//! Contract: [`StoreWriter::open`] gives a cloneable handle and the [`WriterActor`]; the
//! runtime runs [`WriterActor::run`] on a named thread (this module spawns nothing).
//! Commands arrive on a bounded channel (senders block when it is full: stored data is
//! never dropped). Frames, windows and events are grouped into one transaction per batch
//! (at most `batch_max_rows` commands or `batch_max_ms` old). Session start, end, failure
//! and flush commands close the batch they are in and are acknowledged only after its
//! commit, so an acknowledged write is on disk; a batch holds at most one of them, so its
//! typed error goes back to the one requester that waits for it. After a failed commit
//! (disk full, I/O error) the writer refuses further data and answers every
//! acknowledgement with [`StoreError::Poisoned`]; what was committed before stays intact.
//! The actor ends when every handle is dropped, after committing what it holds.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use rusqlite::{Connection, OptionalExtension};

use super::rows::{EndStatus, SessionEnd, SessionStart, WindowRow};
use super::sql::frames::{self, FrameRows};
use super::sql::predictions;
pub use super::sql::session_rows::Failure;
use super::sql::session_rows::{self, EventCursor};
use super::{connect, ConnectOptions, Owner, StoreError};
use crate::core::Prediction;
use crate::core::{FrameRecord, ModalityId};
use crate::session::Event;

/// Capacity of the writer's command queue.
const QUEUE_CAPACITY: usize = 1024;

type Ack = Sender<Result<(), StoreError>>;

enum Command {
    Begin(Box<SessionStart>, Ack),
    Events(Vec<Event>),
    Frame(Arc<FrameRecord>, FrameRows),
    Window(Box<WindowRow>),
    Predictions(Vec<Prediction>),
    Finish(Box<SessionEnd>, Ack),
    Fail(Failure, Ack),
    Flush(Ack),
}

impl Command {
    fn ack(&self) -> Option<&Ack> {
        match self {
            Command::Begin(_, a)
            | Command::Finish(_, a)
            | Command::Fail(_, a)
            | Command::Flush(a) => Some(a),
            Command::Events(_)
            | Command::Frame(..)
            | Command::Window(_)
            | Command::Predictions(_) => None,
        }
    }
}

/// A handle to the writer actor. Cheap to clone: every thread that writes holds one.
#[derive(Clone)]
pub struct StoreWriter {
    tx: Sender<Command>,
    path: PathBuf,
    /// Why the writer stopped writing (set once by the actor when a commit fails): data
    /// sent after it is refused at once, so the run stops instead of capturing into nothing.
    failed: Arc<OnceLock<String>>,
}

/// Batch limits of the writer.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    pub max_rows: usize,
    pub max_age: Duration,
}

impl StoreWriter {
    /// Connects to `path` (already migrated by [`super::Store::open`]); returns the handle
    /// and the actor for the runtime to run.
    pub fn open(
        path: &Path,
        limits: BatchLimits,
        options: ConnectOptions,
    ) -> Result<(Self, WriterActor), StoreError> {
        let conn = connect(path, options)?;
        let (tx, rx) = bounded(QUEUE_CAPACITY);
        let reserve = reserve_path(path);
        make_reserve(&reserve);
        let failed = Arc::new(OnceLock::new());
        let actor = WriterActor {
            failed: failed.clone(),
            conn,
            rx,
            limits,
            path: path.to_path_buf(),
            session: None,
            poisoned: None,
            owner: Owner::current(),
            reserve,
        };
        Ok((
            Self {
                tx,
                path: path.to_path_buf(),
                failed,
            },
            actor,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the writer stopped writing, once a commit failed (the disk or the database
    /// full, an I/O error); what it committed before stays.
    pub fn failure(&self) -> Option<String> {
        self.failed.get().cloned()
    }

    /// The shared place [`Self::failure`] reads, for whoever must tell the failure while a
    /// session runs (the live service's `status` and requests).
    pub fn failure_flag(&self) -> Arc<OnceLock<String>> {
        self.failed.clone()
    }

    fn send(&self, cmd: Command) -> Result<(), StoreError> {
        // Data after a failed commit would only be refused by the actor, unseen: the
        // sender is told at once, so the run stops and the session ends with the reason.
        if let (Some(reason), None) = (self.failed.get(), cmd.ack()) {
            return Err(StoreError::Poisoned {
                reason: reason.clone(),
            });
        }
        self.tx
            .send(cmd)
            .map_err(|_| StoreError::WriterGone("its thread has ended".into()))
    }

    fn request(&self, make: impl FnOnce(Ack) -> Command) -> Result<(), StoreError> {
        let (ack, done) = bounded(1);
        self.send(make(ack))?;
        done.recv().map_err(|_| {
            StoreError::WriterGone("the writer thread ended before answering".into())
        })?
    }

    /// Writes the session row `running` and its modalities.
    pub fn begin(&self, start: SessionStart) -> Result<(), StoreError> {
        self.request(|ack| Command::Begin(Box::new(start), ack))
    }

    /// Queues session events of the current session, as they become known.
    pub fn events(&self, events: Vec<Event>) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.send(Command::Events(events))
    }

    /// Queues one frame record of the current session.
    pub fn frame(&self, record: Arc<FrameRecord>) -> Result<(), StoreError> {
        self.send(Command::Frame(record, FrameRows::All))
    }

    /// Queues one frame record of the current session whose modality `later` is not known
    /// yet (a live frame before its words): its row is written by [`Self::frame_later`],
    /// so a service killed meanwhile keeps the frame.
    pub fn frame_before(
        &self,
        record: Arc<FrameRecord>,
        later: ModalityId,
    ) -> Result<(), StoreError> {
        self.send(Command::Frame(record, FrameRows::AllBut(later)))
    }

    /// Queues modality `m` of a frame queued by [`Self::frame_before`], now known (the
    /// complete record).
    pub fn frame_later(&self, record: Arc<FrameRecord>, m: ModalityId) -> Result<(), StoreError> {
        self.send(Command::Frame(record, FrameRows::Only(m)))
    }

    /// Queues one window of the current session.
    pub fn window(&self, row: WindowRow) -> Result<(), StoreError> {
        self.send(Command::Window(Box::new(row)))
    }

    /// Queues the fusion stage's predictions for one window of the current session.
    pub fn predictions(&self, rows: Vec<Prediction>) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.send(Command::Predictions(rows))
    }

    /// Commits everything queued so far.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.request(Command::Flush)
    }

    /// Commits what is queued and closes the current session.
    pub fn finish(&self, end: SessionEnd) -> Result<(), StoreError> {
        self.request(|ack| Command::Finish(Box::new(end), ack))
    }

    /// Marks session `id` failed with `reason` and removes its derived rows (frames,
    /// windows, features, predictions), in one transaction. Creates the session row if it
    /// does not exist yet; never touches a session stored complete.
    pub fn fail(&self, failure: Failure) -> Result<(), StoreError> {
        self.request(|ack| Command::Fail(failure, ack))
    }
}

/// The session being written.
struct ActiveSession {
    /// The id its rows are written under (a staging id while it replaces a complete one).
    id: String,
    /// The complete session this run replaces once it completes (see `sessions::Begun`).
    replaces: Option<String>,
    /// Survey responses of a staged replacement, written when it is swapped in.
    deferred_surveys: Vec<Event>,
    participant_id: Option<String>,
    modality_names: Vec<&'static str>,
    layout: crate::core::ModalityLayout,
    events: EventCursor,
    /// See [`SessionStart::recovers_recording`].
    recovers_recording: bool,
}

/// Bytes kept free beside the database (a file of zeros, `<db>.reserve`) so that a run
/// stopped by a full disk can still record that it failed: released just before the
/// failure is written, made again when the writer next opens.
pub const RESERVE_BYTES: usize = 4 << 20;

fn reserve_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".reserve");
    db.with_file_name(name)
}

/// Makes the reserve file (whole, synced) unless it is there; a disk already too full for
/// it is logged, and the run goes on without one.
fn make_reserve(path: &Path) {
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= RESERVE_BYTES as u64) {
        return;
    }
    let written = std::fs::File::create(path).and_then(|mut f| {
        use std::io::Write as _;
        f.write_all(&vec![0u8; RESERVE_BYTES])?;
        f.sync_all()
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(path);
        tracing::warn!(file = %path.display(), "no space reserved to record a failure on a full disk: {e}");
    }
}

/// The writer's state: its connection and the session being written.
pub struct WriterActor {
    conn: Connection,
    rx: Receiver<Command>,
    limits: BatchLimits,
    path: PathBuf,
    session: Option<ActiveSession>,
    poisoned: Option<String>,
    /// Shared with every handle: see [`StoreWriter::failure`].
    failed: Arc<OnceLock<String>>,
    owner: Owner,
    /// See [`RESERVE_BYTES`].
    reserve: PathBuf,
}

impl WriterActor {
    /// Applies commands until every handle is gone.
    pub fn run(mut self) {
        while let Ok(first) = self.rx.recv() {
            let deadline = Instant::now() + self.limits.max_age;
            let mut batch = vec![first];
            // A command with an acknowledgement closes the batch, so a batch has at most one.
            while batch.len() < self.limits.max_rows
                && batch.last().is_some_and(|c| c.ack().is_none())
            {
                match self.rx.recv_deadline(deadline) {
                    Ok(cmd) => batch.push(cmd),
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            self.apply(batch);
        }
        tracing::debug!(path = %self.path.display(), "store writer stopped");
    }

    fn apply(&mut self, batch: Vec<Command>) {
        let result = match &self.poisoned {
            // Marking the session failed is still tried on its own: a lock that timed out or
            // a refused row does not stop the reason from being stored.
            Some(_) if matches!(batch.last(), Some(Command::Fail(..))) => {
                self.record_failure(&batch[batch.len() - 1..])
            }
            Some(reason) => Err(StoreError::Poisoned {
                reason: reason.clone(),
            }),
            None => self.commit(&batch),
        };
        if let Err(e) = &result {
            // A refused begin (already stored) or a refused event is the caller's to
            // report; any other failure stops the writer, which keeps what was committed.
            let refusal = matches!(
                e,
                StoreError::AlreadyStored { .. }
                    | StoreError::Busy { .. }
                    | StoreError::Poisoned { .. }
            );
            if !refusal {
                tracing::error!(path = %self.path.display(), "session store write failed: {e}");
                self.poisoned = Some(e.to_string());
                let _ = self.failed.set(e.to_string());
            }
        }
        if let Some(ack) = batch.iter().find_map(Command::ack) {
            // The requester may have gone away (stopped): nothing to tell then.
            let _ = ack.send(result);
        }
    }

    /// Commits a `Fail`; on a full disk, releases the reserve and tries again, and if the
    /// whole failure (partial rows removed, record announced) still does not fit, writes
    /// the least that keeps the promise: the session row `failed` with its reason (the
    /// partial rows stay until the space is freed and the session is rerun).
    fn record_failure(&mut self, fail: &[Command]) -> Result<(), StoreError> {
        let first = self.commit(fail);
        let Err(e) = first else {
            return Ok(());
        };
        if !e.is_disk_full() {
            return Err(e);
        }
        if std::fs::remove_file(&self.reserve).is_ok() {
            tracing::warn!(file = %self.reserve.display(), "disk full: released the reserve to record the failure");
        }
        let second = self.commit(fail);
        let Err(e) = second else {
            return Ok(());
        };
        let Some(Command::Fail(f, _)) = fail.last() else {
            return Err(e);
        };
        // What was stored is the session's (`keep_stored`): it stays, `incomplete`;
        // otherwise the partial rows wait for the space to be freed and a rerun.
        let id = self
            .session
            .as_ref()
            .map_or(f.id.as_str(), |s| s.id.as_str())
            .to_string();
        let staged = self.session.as_ref().is_some_and(|s| s.replaces.is_some());
        let kept = if f.keep_stored && !staged {
            session_rows::stored_frames(&self.conn, &id)?
        } else {
            0
        };
        if kept > 0 {
            // What was stored is the session's: kept `incomplete` with its counts; its
            // record did not fit in the outbox, so it is announced once space is freed.
            // The reason says what was kept in the same words as a failure that fitted.
            let reason = format!(
                "{}; everything stored before it is kept ({kept} frames) (the disk was full: once space is freed, `empathic sync --backfill` announces it to sync)",
                f.reason
            );
            session_rows::keep_incomplete(&self.conn, &id, &reason)?;
        } else {
            let reason = format!(
                "{} (the disk was full: this run's partial rows are kept until space is freed and the session is rerun)",
                f.reason
            );
            self.conn
                .execute(
                    "UPDATE sessions SET status = 'failed', status_reason = ?2,
                       updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
                     WHERE id = ?1 AND status = 'running'",
                    rusqlite::params![id, reason],
                )
                .map_err(super::sql("marking the session failed on a full disk"))?;
        }
        self.session = None;
        Ok(())
    }

    fn commit(&mut self, batch: &[Command]) -> Result<(), StoreError> {
        let tx = self
            .conn
            // Immediate: take the write lock (waiting up to the busy timeout) before
            // reading, so a lock held elsewhere is waited for, not failed on at once.
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(super::sql("starting a transaction"))?;
        let mut session = self.session.take();
        let no_session =
            |what: &str| StoreError::WriterGone(format!("{what} arrived with no session started"));
        for cmd in batch {
            let step = match cmd {
                Command::Begin(start, _) => {
                    session_rows::begin(&tx, start, &self.owner, &self.path).map(|begun| {
                        session = Some(ActiveSession {
                            id: begun.row_id,
                            replaces: begun.replaces,
                            deferred_surveys: Vec::new(),
                            participant_id: start.participant_id.clone(),
                            modality_names: start.layout.iter().map(|(_, m)| m.spec.name).collect(),
                            layout: start.layout.clone(),
                            events: EventCursor::default(),
                            recovers_recording: start.recovers_recording,
                        });
                    })
                }
                Command::Events(events) => match &mut session {
                    Some(s) => session_rows::write_events(
                        &tx,
                        &s.id,
                        s.participant_id.as_deref(),
                        &mut s.events,
                        events,
                        s.replaces.is_some().then_some(&mut s.deferred_surveys),
                    ),
                    None => Err(no_session("events")),
                },
                Command::Frame(record, rows) => match &session {
                    Some(s) => s
                        .layout
                        .check(&record.features)
                        .map_err(|message| StoreError::Invalid {
                            message: format!("frame {}: {message}", record.index),
                        })
                        .and_then(|()| {
                            frames::write_frame(&tx, &s.id, &s.modality_names, record, *rows)
                        }),
                    None => Err(no_session("a frame")),
                },
                Command::Window(row) => match &session {
                    Some(s) => frames::write_window(&tx, &s.id, row),
                    None => Err(no_session("a window")),
                },
                Command::Predictions(rows) => match &session {
                    Some(s) => predictions::write(&tx, &s.id, rows),
                    None => Err(no_session("predictions")),
                },
                Command::Finish(end, _) => match session.take() {
                    Some(s) => finish(&tx, &s, end),
                    None => Err(no_session("finish")),
                },
                Command::Fail(f, _) => match session.take() {
                    // A failed replacement is discarded: the complete session it was to
                    // replace stays exactly as it was.
                    Some(s) if s.replaces.as_deref() == Some(f.id.as_str()) => {
                        tracing::warn!(
                            session = f.id,
                            "the replacement failed; the stored session is kept unchanged: {}",
                            f.reason
                        );
                        session_rows::delete(&tx, &s.id)
                    }
                    other => {
                        session = other.filter(|s| s.id != f.id);
                        session_rows::fail(&tx, f, &self.owner)
                    }
                },
                Command::Flush(_) => Ok(()),
            };
            if let Err(e) = step {
                // The transaction rolls back on drop: the batch is all or nothing.
                self.session = session;
                return Err(e);
            }
        }
        tx.commit().map_err(super::sql("committing a batch"))?;
        self.session = session;
        Ok(())
    }
}

/// Closes the session; a staged replacement is swapped in, with its survey responses.
fn finish(
    tx: &rusqlite::Transaction<'_>,
    s: &ActiveSession,
    end: &SessionEnd,
) -> Result<(), StoreError> {
    if let (Some(final_id), false) = (&s.replaces, end.status == EndStatus::Complete) {
        // A replacement that is not complete displaces nothing, but for a killed live
        // session replayed from its repaired recording: it displaces the stored run when
        // that is not complete either and holds fewer frames.
        let stored: Option<(String, i64)> = tx
            .query_row(
                "SELECT status, frames FROM sessions WHERE id = ?1",
                [final_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(super::sql("reading the session being replaced"))?;
        let better = s.recovers_recording
            && stored.as_ref().is_some_and(|(status, frames)| {
                status != "complete" && end.frames > u64::try_from(*frames).unwrap_or(u64::MAX)
            });
        if !better {
            let (status, frames) = stored.unwrap_or_else(|| ("gone".into(), 0));
            tracing::warn!(
                session = final_id.as_str(),
                "the replacement is not complete ({} frames): the stored session ({status}, {frames} frames) is kept",
                end.frames
            );
            return session_rows::delete(tx, &s.id);
        }
    }
    session_rows::finish(tx, &s.id, end)?;
    if let Some(final_id) = &s.replaces {
        // The replaced session's record is void; the replacement's is announced below, in
        // the same transaction.
        crate::store::sql::announce::tombstone(tx, final_id, "replaced")?;
        session_rows::swap_in(tx, &s.id, final_id)?;
        for e in &s.deferred_surveys {
            session_rows::write_survey(tx, final_id, s.participant_id.as_deref(), e)?;
        }
    }
    // The session's record goes into the outbox with the commit that ends it (sync).
    crate::store::sql::announce::announce_session(tx, s.replaces.as_ref().unwrap_or(&s.id))?;
    Ok(())
}

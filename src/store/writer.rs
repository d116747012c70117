//! The single writer of the session store: an actor on its own named thread.
//!
//! Contract: commands arrive on a bounded channel (senders block when it is full: stored
//! data is never dropped). Frames and windows are grouped into one transaction per batch
//! (at most `batch_max_rows` commands or `batch_max_ms` old). Session start, end, failure
//! and flush commands close the batch they are in and are acknowledged only after its
//! commit, so an acknowledged write is on disk. After a failed commit (disk full, I/O error)
//! the writer refuses further data and answers every acknowledgement with the error; what
//! was committed before stays intact.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use rusqlite::{params, Connection, Transaction};

use super::rows::{vec_to_blob, SessionEnd, SessionStart, WindowRow};
use super::{connect, Owner, StoreError};
use crate::session::EventKind;
use crate::windows::FrameRecord;

/// Capacity of the writer's command queue.
const QUEUE_CAPACITY: usize = 1024;

type Ack = Sender<Result<(), String>>;

enum Command {
    Begin(Box<SessionStart>, Ack),
    Frame(Arc<FrameRecord>),
    Window(Box<WindowRow>),
    Finish(Box<SessionEnd>, Ack),
    Fail {
        id: String,
        station_id: String,
        reason: String,
        ack: Ack,
    },
    Flush(Ack),
}

impl Command {
    fn ack(&self) -> Option<&Ack> {
        match self {
            Command::Begin(_, a) | Command::Finish(_, a) | Command::Flush(a) => Some(a),
            Command::Fail { ack, .. } => Some(ack),
            Command::Frame(_) | Command::Window(_) => None,
        }
    }
}

/// Handle to the writer thread. Dropping it flushes and joins the thread.
pub struct StoreWriter {
    tx: Option<Sender<Command>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl StoreWriter {
    /// Starts the writer on `path` (already migrated by [`super::Store::open`]).
    pub fn spawn(
        path: &Path,
        batch_max_rows: usize,
        batch_max_ms: u64,
    ) -> Result<Self, StoreError> {
        let conn = connect(path)?;
        let (tx, rx) = bounded(QUEUE_CAPACITY);
        let mut actor = Actor {
            conn,
            path: path.to_path_buf(),
            session: None,
            poisoned: None,
            owner: Owner::current(),
        };
        let limits = (batch_max_rows, Duration::from_millis(batch_max_ms));
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || actor.run(rx, limits))
            .map_err(|e| StoreError::WriterGone(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn send(&self, cmd: Command) -> Result<(), StoreError> {
        self.tx
            .as_ref()
            .ok_or_else(|| StoreError::WriterGone("already closed".into()))?
            .send(cmd)
            .map_err(|_| StoreError::WriterGone("its thread has ended".into()))
    }

    fn request(&self, make: impl FnOnce(Ack) -> Command) -> Result<(), String> {
        let (ack, done) = bounded(1);
        self.send(make(ack)).map_err(|e| e.to_string())?;
        done.recv()
            .map_err(|_| "the writer thread ended before answering".to_string())?
    }

    /// Writes the session row, its events, phases, stories, ratings, surveys and modalities.
    pub fn begin(&self, start: SessionStart) -> Result<(), StoreError> {
        let id = start.id.clone();
        self.request(|ack| Command::Begin(Box::new(start), ack))
            .map_err(|message| {
                if message == ALREADY_STORED {
                    StoreError::AlreadyStored {
                        id,
                        path: self.path.clone(),
                    }
                } else {
                    StoreError::WriterGone(message)
                }
            })
    }

    /// Queues one frame record of the current session.
    pub fn frame(&self, record: Arc<FrameRecord>) -> Result<(), StoreError> {
        self.send(Command::Frame(record))
    }

    /// Queues one window of the current session.
    pub fn window(&self, row: WindowRow) -> Result<(), StoreError> {
        self.send(Command::Window(Box::new(row)))
    }

    /// Commits everything queued so far.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.request(Command::Flush).map_err(StoreError::WriterGone)
    }

    /// Commits what is queued and closes the current session.
    pub fn finish(&self, end: SessionEnd) -> Result<(), StoreError> {
        self.request(|ack| Command::Finish(Box::new(end), ack))
            .map_err(StoreError::WriterGone)
    }

    /// Marks session `id` failed with `reason` and removes its derived rows (frames,
    /// windows, features, predictions), in one transaction. Creates the session row (as a
    /// replay: only a replay can fail before its session starts) if it does not exist yet;
    /// never touches a session stored complete.
    pub fn fail(&self, id: &str, station_id: &str, reason: &str) -> Result<(), StoreError> {
        self.request(|ack| Command::Fail {
            id: id.to_string(),
            station_id: station_id.to_string(),
            reason: reason.to_string(),
            ack,
        })
        .map_err(StoreError::WriterGone)
    }

    /// Flushes, stops and joins the writer thread.
    pub fn close(mut self) -> Result<(), StoreError> {
        let flushed = self.flush();
        self.shutdown();
        flushed
    }

    fn shutdown(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        // Dropping the sender ends the actor's loop after it has committed what it holds.
        self.shutdown();
    }
}

const ALREADY_STORED: &str = "already stored";

/// The session being written.
struct ActiveSession {
    id: String,
    modality_names: Vec<&'static str>,
}

struct Actor {
    conn: Connection,
    path: PathBuf,
    session: Option<ActiveSession>,
    poisoned: Option<String>,
    owner: Owner,
}

impl Actor {
    fn run(&mut self, rx: Receiver<Command>, (max_rows, max_age): (usize, Duration)) {
        while let Ok(first) = rx.recv() {
            let deadline = Instant::now() + max_age;
            let mut batch = vec![first];
            while batch.len() < max_rows && batch.last().is_some_and(|c| c.ack().is_none()) {
                match rx.recv_deadline(deadline) {
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
            Some(reason) => Err(format!(
                "an earlier write failed, nothing more is written: {reason}"
            )),
            None => self.commit(&batch),
        };
        if let Err(e) = &result {
            if self.poisoned.is_none() && e != ALREADY_STORED {
                tracing::error!(path = %self.path.display(), "session store write failed: {e}");
                self.poisoned = Some(e.clone());
            }
        }
        for cmd in &batch {
            if let Some(ack) = cmd.ack() {
                // The requester may have gone away (stopped): nothing to tell then.
                let _ = ack.send(result.clone());
            }
        }
    }

    fn commit(&mut self, batch: &[Command]) -> Result<(), String> {
        let tx = self
            .conn
            .transaction()
            .map_err(|e| format!("cannot start a transaction: {e}"))?;
        let mut session = self.session.take();
        for cmd in batch {
            let step = match cmd {
                Command::Begin(start, _) => begin(&tx, start, &self.owner).map(|names| {
                    session = Some(ActiveSession {
                        id: start.id.clone(),
                        modality_names: names,
                    });
                }),
                Command::Frame(record) => match &session {
                    Some(s) => write_frame(&tx, s, record),
                    None => Err("a frame arrived with no session started".into()),
                },
                Command::Window(row) => match &session {
                    Some(s) => write_window(&tx, &s.id, row),
                    None => Err("a window arrived with no session started".into()),
                },
                Command::Finish(end, _) => match session.take() {
                    Some(s) => finish(&tx, &s.id, end),
                    None => Err("finish with no session started".into()),
                },
                Command::Fail {
                    id,
                    station_id,
                    reason,
                    ..
                } => {
                    if session.as_ref().is_some_and(|s| &s.id == id) {
                        session = None;
                    }
                    fail(&tx, id, station_id, reason, &self.owner)
                }
                Command::Flush(_) => Ok(()),
            };
            if let Err(e) = step {
                // The transaction rolls back on drop: the batch is all or nothing.
                self.session = session;
                return Err(e);
            }
        }
        tx.commit().map_err(|e| format!("commit failed: {e}"))?;
        self.session = session;
        Ok(())
    }
}

fn err(context: &str) -> impl FnOnce(rusqlite::Error) -> String + '_ {
    move |e| format!("{context}: {e}")
}

/// The stored status of session `id`, if it exists.
fn session_status(tx: &Transaction<'_>, id: &str) -> Result<Option<String>, String> {
    tx.query_row("SELECT status FROM sessions WHERE id = ?1", [id], |r| {
        r.get(0)
    })
    .map(Some)
    .or_else(|e| match e {
        rusqlite::Error::QueryReturnedNoRows => Ok(None),
        e => Err(e),
    })
    .map_err(err("looking up the session"))
}

fn begin(
    tx: &Transaction<'_>,
    s: &SessionStart,
    owner: &Owner,
) -> Result<Vec<&'static str>, String> {
    let existing = session_status(tx, &s.id)?;
    if let Some(status) = existing {
        if status == "complete" && !s.replace {
            return Err(ALREADY_STORED.into());
        }
        tx.execute(
            "DELETE FROM survey_responses WHERE session_id = ?1",
            [&s.id],
        )
        .map_err(err("removing the earlier run's surveys"))?;
        tx.execute("DELETE FROM sessions WHERE id = ?1", [&s.id])
            .map_err(err("removing the earlier run of this session"))?;
    }
    tx.execute(
        "INSERT OR IGNORE INTO stations (id, first_seen_at)
         VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        [&s.station_id],
    )
    .map_err(err("recording the station"))?;
    if let Some(p) = &s.participant_id {
        tx.execute(
            "INSERT OR IGNORE INTO participants (id, first_seen_at)
             VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            [p],
        )
        .map_err(err("recording the participant"))?;
    }
    tx.execute(
        "INSERT INTO sessions (id, station_id, participant_id, source, source_path,
            format_version, start_time, nominal_fps, status, owner_host, owner_pid,
            owner_boot_id, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9, ?10, ?11,
            strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        params![
            s.id,
            s.station_id,
            s.participant_id,
            s.source,
            s.source_path,
            s.format_version,
            s.start_time,
            s.nominal_fps,
            owner.host,
            owner.pid,
            owner.boot_id
        ],
    )
    .map_err(err("creating the session row"))?;
    for (seq, p) in s.phases.iter().enumerate() {
        let last = seq + 1 == s.phases.len();
        tx.execute(
            "INSERT INTO phases (session_id, seq, phase, start_ns, end_ns) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                s.id,
                seq as i64,
                p.phase.as_str(),
                p.start_ns as i64,
                (!last).then_some(p.end_ns as i64)
            ],
        )
        .map_err(err("writing phases"))?;
    }
    let mut position = 0i64;
    for (seq, e) in s.events.iter().enumerate() {
        let payload = serde_json::to_string(&e.kind).map_err(|e| e.to_string())?;
        let t_ns = e.t_ns as i64;
        tx.execute(
            "INSERT INTO events (session_id, seq, t_ns, type, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![s.id, seq as i64, t_ns, e.kind.type_name(), payload],
        )
        .map_err(err("writing events"))?;
        match &e.kind {
            EventKind::Utterance {
                speaker,
                start_ms,
                end_ms,
                text,
            } => {
                tx.execute(
                    "INSERT INTO utterances (session_id, seq, speaker, start_ns, end_ns, text)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        s.id,
                        seq as i64,
                        speaker,
                        (*start_ms as i64) * 1_000_000,
                        (*end_ms as i64) * 1_000_000,
                        text
                    ],
                )
                .map_err(err("writing utterances"))?;
            }
            EventKind::StoryShown {
                story_id,
                title,
                text,
            } => {
                tx.execute(
                    "INSERT OR IGNORE INTO stories (id, title, text, source, created_at)
                     VALUES (?1, ?2, ?3, 'session events', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                    params![story_id, title, text],
                )
                .map_err(err("writing stories"))?;
                position += 1;
                tx.execute(
                    "INSERT INTO story_exposures (session_id, story_id, position, shown_ns)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![s.id, story_id, position, t_ns],
                )
                .map_err(err("writing story exposures"))?;
            }
            EventKind::Rating { story_id, value } => {
                tx.execute(
                    "INSERT INTO self_ratings (session_id, story_id, value, t_ns) VALUES (?1, ?2, ?3, ?4)",
                    params![s.id, story_id, value, t_ns],
                )
                .map_err(err("writing self-ratings"))?;
            }
            EventKind::Survey {
                instrument,
                item,
                value,
                time_point,
            } => {
                let participant = s
                    .participant_id
                    .as_ref()
                    .ok_or("a survey response needs a participant_id in session.json")?;
                tx.execute(
                    "INSERT OR REPLACE INTO survey_responses
                     (participant_id, instrument, item, time_point, value, session_id, t_ns)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        participant,
                        instrument,
                        item,
                        time_point.as_str(),
                        value,
                        s.id,
                        t_ns
                    ],
                )
                .map_err(err("writing survey responses"))?;
            }
            EventKind::Phase { .. } | EventKind::Note { .. } => {}
        }
    }
    let mut names = Vec::new();
    for (stream, spec) in &s.layout.modalities {
        let columns = serde_json::to_string(&spec.columns).map_err(|e| e.to_string())?;
        tx.execute(
            "INSERT INTO modalities (session_id, name, stream, dims, columns) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                s.id,
                spec.name,
                stream.as_str(),
                spec.dims() as i64,
                columns
            ],
        )
        .map_err(err("writing modalities"))?;
        names.push(spec.name);
    }
    Ok(names)
}

fn write_frame(
    tx: &Transaction<'_>,
    s: &ActiveSession,
    record: &FrameRecord,
) -> Result<(), String> {
    tx.prepare_cached(
        "INSERT INTO frames (session_id, frame_index, t_ns, decoded) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut st| {
        st.execute(params![
            s.id,
            record.index as i64,
            record.t_ns as i64,
            record.decoded
        ])
    })
    .map_err(err("writing frames"))?;
    let mut st = tx
        .prepare_cached(
            "INSERT INTO frame_features (session_id, modality, frame_index, present, vec)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(err("writing frame features"))?;
    for (name, v) in s.modality_names.iter().zip(&record.features) {
        st.execute(params![
            s.id,
            name,
            record.index as i64,
            v.is_some(),
            v.as_deref().map(vec_to_blob)
        ])
        .map_err(err("writing frame features"))?;
    }
    Ok(())
}

fn write_window(tx: &Transaction<'_>, id: &str, w: &WindowRow) -> Result<(), String> {
    tx.prepare_cached(
        "INSERT INTO windows (session_id, window_index, start_frame, end_frame, start_ns, end_ns,
            phase, video_presence, audio_presence, brightness, sharpness, level_dbfs,
            voice_activity, clipped_fraction)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            w.index as i64,
            w.start_frame as i64,
            w.end_frame as i64,
            w.start_ns as i64,
            w.end_ns as i64,
            w.phase.map(|p| p.as_str()),
            w.video_presence,
            w.audio_presence,
            w.brightness,
            w.sharpness,
            w.level_dbfs,
            w.voice_activity,
            w.clipped_fraction
        ])
    })
    .map_err(err("writing windows"))?;
    let mut st = tx
        .prepare_cached(
            "INSERT INTO window_features (session_id, window_index, modality, present_frames, presence, mean)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(err("writing window features"))?;
    for m in &w.modalities {
        st.execute(params![
            id,
            w.index as i64,
            m.name,
            m.present_frames as i64,
            m.presence,
            m.mean.as_deref().map(vec_to_blob)
        ])
        .map_err(err("writing window features"))?;
    }
    Ok(())
}

fn finish(tx: &Transaction<'_>, id: &str, end: &SessionEnd) -> Result<(), String> {
    tx.execute(
        "UPDATE phases SET end_ns = ?2 WHERE session_id = ?1 AND end_ns IS NULL",
        params![id, end.duration_ns as i64],
    )
    .map_err(err("closing the last phase"))?;
    tx.execute(
        "UPDATE sessions SET status = ?2, status_reason = ?3, frames = ?4, windows = ?5,
            duration_ns = ?6, quality_json = ?7,
            updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
         WHERE id = ?1",
        params![
            id,
            end.status.as_str(),
            end.reason,
            end.frames as i64,
            end.windows as i64,
            end.duration_ns as i64,
            end.quality_json
        ],
    )
    .map_err(err("closing the session"))?;
    Ok(())
}

fn fail(
    tx: &Transaction<'_>,
    id: &str,
    station_id: &str,
    reason: &str,
    owner: &Owner,
) -> Result<(), String> {
    let status = session_status(tx, id)?;
    match status.as_deref() {
        Some("complete") => {
            tracing::warn!(
                session = id,
                "not marking a complete session failed: {reason}"
            );
            return Ok(());
        }
        Some(_) => {
            for table in [
                "predictions",
                "window_features",
                "windows",
                "frame_features",
                "frames",
            ] {
                tx.execute(&format!("DELETE FROM {table} WHERE session_id = ?1"), [id])
                    .map_err(err("removing a failed session's partial rows"))?;
            }
            tx.execute(
                "UPDATE sessions SET status = 'failed', status_reason = ?2, frames = 0, windows = 0,
                    updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?1",
                params![id, reason],
            )
            .map_err(err("marking the session failed"))?;
        }
        None => {
            tx.execute(
                "INSERT OR IGNORE INTO stations (id, first_seen_at)
                 VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                [station_id],
            )
            .map_err(err("recording the station"))?;
            tx.execute(
                "INSERT INTO sessions (id, station_id, source, nominal_fps, status, status_reason,
                    owner_host, owner_pid, owner_boot_id, created_at, updated_at)
                 VALUES (?1, ?2, 'replay', 0, 'failed', ?3, ?4, ?5, ?6,
                    strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                params![id, station_id, reason, owner.host, owner.pid, owner.boot_id],
            )
            .map_err(err("recording the failed session"))?;
        }
    }
    Ok(())
}

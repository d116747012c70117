//! The session row (start, end, failure) and the session's events as they arrive.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{ctx, NOW};
use crate::session::{Event, EventKind};
use crate::store::rows::{EndStatus, SessionEnd, SessionSource, SessionStart};
use crate::store::{Owner, StoreError};

/// The stored status of session `id`, if it exists.
pub fn status(tx: &rusqlite::Connection, id: &str) -> Result<Option<String>, StoreError> {
    tx.query_row("SELECT status FROM sessions WHERE id = ?1", [id], |r| {
        r.get(0)
    })
    .optional()
    .map_err(ctx("looking up the session"))
}

/// The stored status of session `id` and the process that wrote (or writes) it.
fn status_and_owner(tx: &Transaction<'_>, id: &str) -> Result<Option<(String, Owner)>, StoreError> {
    tx.query_row(
        "SELECT status, owner_host, owner_boot_id, owner_pid FROM sessions WHERE id = ?1",
        [id],
        |r| Ok((r.get::<_, String>(0)?, Owner::from_row(r, 1)?)),
    )
    .optional()
    .map_err(ctx("looking up the session"))
}

/// Refuses when another live process is writing row `id` (`running`, its owner alive).
fn check_not_busy(
    tx: &Transaction<'_>,
    id: &str,
    shown_id: &str,
    owner: &Owner,
    path: &std::path::Path,
) -> Result<(), StoreError> {
    if let Some((status, other)) = status_and_owner(tx, id)? {
        if status == "running" && other != *owner && other.is_alive(owner) {
            return Err(StoreError::Busy {
                id: shown_id.to_string(),
                pid: other.pid,
                host: other.host,
                path: path.to_path_buf(),
            });
        }
    }
    Ok(())
}

fn record_station(tx: &Transaction<'_>, station_id: &str) -> Result<(), StoreError> {
    tx.execute(
        &format!("INSERT OR IGNORE INTO stations (id, first_seen_at) VALUES (?1, {NOW})"),
        [station_id],
    )
    .map_err(ctx("recording the station"))?;
    Ok(())
}

/// Removes session `id` and everything it holds (its survey responses too).
pub fn delete(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    tx.execute("DELETE FROM survey_responses WHERE session_id = ?1", [id])
        .map_err(ctx("removing the earlier run's surveys"))?;
    tx.execute("DELETE FROM sessions WHERE id = ?1", [id])
        .map_err(ctx("removing the earlier run of this session"))?;
    Ok(())
}

/// Records which optional tables session `id`'s applied record carried (a central
/// database's readers show the rest as "not synced").
pub fn set_synced_content(
    tx: &Transaction<'_>,
    id: &str,
    content: &crate::config::SyncContent,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(content).map_err(|e| StoreError::Encode {
        what: "the synced content",
        message: e.to_string(),
    })?;
    tx.execute(
        "INSERT INTO session_sync (session_id, content) VALUES (?1, ?2)
         ON CONFLICT (session_id) DO UPDATE SET content = excluded.content",
        [id, &text],
    )
    .map_err(ctx("recording what a session record carried"))?;
    Ok(())
}

/// What suffix marks the row of a replacement being written beside the complete session
/// it will replace. Session ids cannot contain `~` (see `session::valid_id`), so a staged
/// id never names a real session.
pub const STAGING_SUFFIX: &str = "~replacing";

/// The id a replacement of session `id` is written under until it completes.
pub fn staging_id(id: &str) -> String {
    format!("{id}{STAGING_SUFFIX}")
}

/// Where [`begin`] put the session row.
#[derive(Debug, Clone, PartialEq)]
pub struct Begun {
    /// The id its rows are written under.
    pub row_id: String,
    /// When the run replaces a complete session: that session's id. The rows are staged
    /// under [`staging_id`] and swapped in by [`swap_in`] only when the run completes.
    pub replaces: Option<String>,
}

/// Writes the session row `running` and its modalities, after checking everything and
/// writing nothing when refused:
/// - another live process writing the session (or a replacement of it) is
///   [`StoreError::Busy`]: one process owns a session at a time;
/// - a complete session is kept untouched until the new run completes when `start.replace`
///   says so (the new rows are staged, see [`Begun`]), otherwise that is
///   [`StoreError::AlreadyStored`] (with `path` for the message);
/// - an incomplete one (or one whose writer died before it was marked so) holds kept work:
///   the rerun is staged the same way, without `--replace`, and displaces it only when it
///   completes;
/// - a failed one holds nothing but its reason and is replaced at once.
pub fn begin(
    tx: &Transaction<'_>,
    s: &SessionStart,
    owner: &Owner,
    path: &std::path::Path,
) -> Result<Begun, StoreError> {
    let staged = staging_id(&s.id);
    check_not_busy(tx, &s.id, &s.id, owner, path)?;
    check_not_busy(tx, &staged, &s.id, owner, path)?;
    let mut begun = Begun {
        row_id: s.id.clone(),
        replaces: None,
    };
    let stage = |begun: &mut Begun| -> Result<(), StoreError> {
        *begun = Begun {
            row_id: staged.clone(),
            replaces: Some(s.id.clone()),
        };
        // A replacement abandoned by a crash (its writer is gone: checked above).
        delete(tx, &staged)
    };
    match status(tx, &s.id)?.as_deref() {
        Some("complete") if !s.replace => {
            return Err(StoreError::AlreadyStored {
                id: s.id.clone(),
                path: path.to_path_buf(),
            });
        }
        Some("complete" | "incomplete" | "running") => stage(&mut begun)?,
        Some(_) => {
            // An earlier failed run (no rows but its reason), announced when it ended:
            // void it.
            super::announce::tombstone(tx, &s.id, "rerun")?;
            delete(tx, &s.id)?
        }
        None => {}
    }
    let row_id = &begun.row_id;
    record_station(tx, &s.station_id)?;
    if let Some(p) = &s.participant_id {
        tx.execute(
            &format!("INSERT OR IGNORE INTO participants (id, first_seen_at) VALUES (?1, {NOW})"),
            [p],
        )
        .map_err(ctx("recording the participant"))?;
    }
    tx.execute(
        &format!(
            "INSERT INTO sessions (id, station_id, participant_id, source, source_path,
                format_version, start_time, nominal_fps, status, owner_host, owner_pid,
                owner_boot_id, created_at, updated_at, text_source)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9, ?10, ?11, {NOW}, {NOW}, ?12)"
        ),
        params![
            row_id,
            s.station_id,
            s.participant_id,
            s.source.as_str(),
            s.source_path,
            s.format_version,
            s.start_time,
            s.nominal_fps,
            owner.host,
            owner.pid,
            owner.boot_id,
            s.text_source.as_str()
        ],
    )
    .map_err(ctx("creating the session row"))?;
    for (_, m) in s.layout.iter() {
        let columns = serde_json::to_string(&m.spec.columns).map_err(|e| StoreError::Encode {
            what: "modality columns",
            message: e.to_string(),
        })?;
        tx.execute(
            "INSERT INTO modalities (session_id, name, stream, dims, columns, producer, layout_version)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                row_id,
                m.spec.name,
                m.stream.as_str(),
                m.spec.dims() as i64,
                columns,
                m.spec.producer,
                m.spec.layout_version
            ],
        )
        .map_err(ctx("writing modalities"))?;
    }
    Ok(begun)
}

/// Where the next event of a running session goes: its sequence number, the position of
/// the next story shown, and the phase row still open.
#[derive(Debug, Clone, Default)]
pub struct EventCursor {
    pub next_seq: i64,
    pub stories_shown: i64,
    pub phases: i64,
}

/// Writes events of session `id` (time-sorted, after those already written). A phase
/// event closes the phase still open and opens its own (its end is set by the next phase
/// or by [`finish`]).
///
/// With `deferred_surveys`, survey responses are kept there instead of written (a staged
/// replacement writes them with [`write_survey`] when it is swapped in).
pub fn write_events(
    tx: &Transaction<'_>,
    id: &str,
    participant_id: Option<&str>,
    cursor: &mut EventCursor,
    events: &[Event],
    mut deferred_surveys: Option<&mut Vec<Event>>,
) -> Result<(), StoreError> {
    for e in events {
        let seq = cursor.next_seq;
        cursor.next_seq += 1;
        let payload = serde_json::to_string(&e.kind).map_err(|err| StoreError::Encode {
            what: "an event",
            message: err.to_string(),
        })?;
        let t_ns = e.t_ns as i64;
        tx.execute(
            "INSERT INTO events (session_id, seq, t_ns, type, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, seq, t_ns, e.kind.type_name(), payload],
        )
        .map_err(ctx("writing events"))?;
        match &e.kind {
            EventKind::Phase { phase } => {
                tx.execute(
                    "UPDATE phases SET end_ns = ?2 WHERE session_id = ?1 AND end_ns IS NULL",
                    params![id, t_ns],
                )
                .map_err(ctx("writing phases"))?;
                tx.execute(
                    "INSERT INTO phases (session_id, seq, phase, start_ns, end_ns) VALUES (?1, ?2, ?3, ?4, NULL)",
                    params![id, cursor.phases, phase.as_str(), t_ns],
                )
                .map_err(ctx("writing phases"))?;
                cursor.phases += 1;
            }
            EventKind::Utterance {
                speaker,
                start_ms,
                end_ms,
                text,
                source,
                model,
                confidence,
            } => {
                tx.execute(
                    "INSERT INTO utterances
                         (session_id, seq, speaker, start_ns, end_ns, text, source, model, confidence)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        id,
                        seq,
                        speaker,
                        (*start_ms as i64).saturating_mul(1_000_000),
                        (*end_ms as i64).saturating_mul(1_000_000),
                        text,
                        source.as_str(),
                        model,
                        confidence.map(f64::from)
                    ],
                )
                .map_err(ctx("writing utterances"))?;
            }
            EventKind::StoryShown {
                story_id,
                title,
                text,
            } => {
                tx.execute(
                    &format!(
                        "INSERT OR IGNORE INTO stories (id, title, text, source, created_at)
                         VALUES (?1, ?2, ?3, 'session events', {NOW})"
                    ),
                    params![story_id, title, text],
                )
                .map_err(ctx("writing stories"))?;
                // The id may already name a story with other words (the bank's, or an
                // earlier session's): keep what this participant saw on the exposure.
                let (stored_title, stored_text): (String, String) = tx
                    .query_row(
                        "SELECT title, text FROM stories WHERE id = ?1",
                        [story_id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(ctx("reading the story shown"))?;
                let differs = stored_title != *title || stored_text != *text;
                let (shown_title, shown_text) = if differs {
                    (Some(title), Some(text))
                } else {
                    (None, None)
                };
                cursor.stories_shown += 1;
                tx.execute(
                    "INSERT INTO story_exposures
                         (session_id, story_id, position, shown_ns, shown_title, shown_text)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        id,
                        story_id,
                        cursor.stories_shown,
                        t_ns,
                        shown_title,
                        shown_text
                    ],
                )
                .map_err(ctx("writing story exposures"))?;
            }
            EventKind::Rating { story_id, value } => {
                tx.execute(
                    "INSERT INTO self_ratings (session_id, story_id, value, t_ns) VALUES (?1, ?2, ?3, ?4)",
                    params![id, story_id, value, t_ns],
                )
                .map_err(ctx("writing self-ratings"))?;
            }
            EventKind::Survey { .. } => match deferred_surveys.as_deref_mut() {
                // Survey responses are keyed by participant, not session: a staged
                // replacement must not overwrite the stored session's before it completes.
                Some(deferred) => deferred.push(e.clone()),
                None => write_survey(tx, id, participant_id, e)?,
            },
            EventKind::Note { .. } | EventKind::Recommendation { .. } => {}
        }
    }
    Ok(())
}

/// Writes the survey response of event `e` (a survey) for session `id`; the latest
/// response of a participant to an item at a time point wins.
pub fn write_survey(
    tx: &Transaction<'_>,
    id: &str,
    participant_id: Option<&str>,
    e: &Event,
) -> Result<(), StoreError> {
    let EventKind::Survey {
        instrument,
        item,
        value,
        time_point,
    } = &e.kind
    else {
        return Ok(());
    };
    let participant = participant_id.ok_or_else(|| StoreError::Invalid {
        message: format!(
            "event line {}: a survey response needs a participant_id in session.json",
            e.line
        ),
    })?;
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
            id,
            e.t_ns as i64
        ],
    )
    .map_err(ctx("writing survey responses"))?;
    Ok(())
}

/// Swaps a completed replacement in: removes the session `replaces` (and everything it
/// holds) and moves every row of `staged` to its id, in the caller's transaction, so a
/// reader sees either the old session or the new one, never neither.
pub fn swap_in(tx: &Transaction<'_>, staged: &str, replaces: &str) -> Result<(), StoreError> {
    delete(tx, replaces)?;
    // Children and parent change ids one statement at a time; the keys hold again at the
    // end of the transaction, which is when they are checked.
    tx.pragma_update(None, "defer_foreign_keys", "ON")
        .map_err(ctx("deferring foreign keys for the swap"))?;
    let tables: Vec<String> = tx
        .prepare(
            "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c
             WHERE m.type = 'table' AND c.name = 'session_id' ORDER BY m.name",
        )
        .and_then(|mut st| {
            st.query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(ctx("listing the session's tables"))?;
    tx.execute(
        "UPDATE sessions SET id = ?2 WHERE id = ?1",
        params![staged, replaces],
    )
    .map_err(ctx("swapping the replacement in"))?;
    for table in tables {
        tx.execute(
            &format!("UPDATE \"{table}\" SET session_id = ?2 WHERE session_id = ?1"),
            params![staged, replaces],
        )
        .map_err(ctx("swapping the replacement in"))?;
    }
    Ok(())
}

/// Closes session `id`: the last phase ends at the session's end, and the row gets its
/// status, counts and quality report.
pub fn finish(tx: &Transaction<'_>, id: &str, end: &SessionEnd) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE phases SET end_ns = ?2 WHERE session_id = ?1 AND end_ns IS NULL",
        params![id, end.duration_ns as i64],
    )
    .map_err(ctx("closing the last phase"))?;
    tx.execute(
        &format!(
            "UPDATE sessions SET status = ?2, status_reason = ?3, frames = ?4, windows = ?5,
                duration_ns = ?6, quality_json = ?7, updated_at = {NOW}
             WHERE id = ?1"
        ),
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
    .map_err(ctx("closing the session"))?;
    if end.status == EndStatus::Incomplete {
        // Cut short (a replay stopped by a signal): no phase past what was stored.
        clip_phases(tx, id)?;
    }
    Ok(())
}

/// Clips session `id`'s phases to its stored duration: none starts after it (their events
/// stay), none ends past it. The station's own transcript (`asr`) of audio read ahead of the
/// last stored frame goes too: words of a time the session does not hold (the dialogue
/// app's utterances are its events, which stay).
fn clip_phases(tx: &rusqlite::Connection, id: &str) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM utterances WHERE session_id = ?1 AND source = 'asr'
         AND start_ns >= (SELECT duration_ns FROM sessions WHERE id = ?1)",
        [id],
    )
    .map_err(ctx("clipping the transcript to the stored frames"))?;
    tx.execute(
        "DELETE FROM phases WHERE session_id = ?1
         AND start_ns >= (SELECT duration_ns FROM sessions WHERE id = ?1) AND start_ns > 0",
        [id],
    )
    .map_err(ctx("clipping the phases to the stored frames"))?;
    tx.execute(
        "UPDATE phases SET end_ns = (SELECT duration_ns FROM sessions WHERE id = ?1)
         WHERE session_id = ?1
           AND (end_ns IS NULL OR end_ns > (SELECT duration_ns FROM sessions WHERE id = ?1))",
        [id],
    )
    .map_err(ctx("closing the last phase"))?;
    Ok(())
}

/// How many frames session `id` has stored.
pub fn stored_frames(tx: &rusqlite::Connection, id: &str) -> Result<i64, StoreError> {
    tx.query_row(
        "SELECT count(*) FROM frames WHERE session_id = ?1",
        [id],
        |r| r.get(0),
    )
    .map_err(ctx("counting the session's stored frames"))
}

/// Closes a running session that ended without its close (its writer killed, or the store
/// failed under it) as `incomplete` with `reason`, keeping every row it committed: its
/// counts and duration are those of the frames stored (a killed session was listed as
/// `0.0s`), its last phase ends there, and a frame stored before its words has its text
/// modality absent. The caller announces it to sync.
pub fn keep_incomplete(
    tx: &rusqlite::Connection,
    id: &str,
    reason: &str,
) -> Result<(), StoreError> {
    tx.execute(
        &format!(
            "UPDATE sessions SET status = 'incomplete', status_reason = ?2,
             frames = (SELECT count(*) FROM frames WHERE session_id = ?1),
             windows = (SELECT count(*) FROM windows WHERE session_id = ?1),
             duration_ns = COALESCE((SELECT max(t_ns) FROM frames WHERE session_id = ?1)
                 + CAST(1000000000.0 / NULLIF(nominal_fps, 0) AS INTEGER), duration_ns),
             updated_at = {NOW}
             WHERE id = ?1 AND status = 'running'"
        ),
        params![id, reason],
    )
    .map_err(ctx("marking the session incomplete"))?;
    // A live frame is stored before its words are known (the transcript wait): a frame
    // whose words never came has its text modality absent, as every frame has a row per
    // modality.
    tx.execute(
        "INSERT INTO frame_features (session_id, modality, frame_index, present, vec)
         SELECT f.session_id, m.name, f.frame_index, 0, NULL
         FROM frames f JOIN modalities m ON m.session_id = f.session_id
         WHERE f.session_id = ?1 AND NOT EXISTS (
             SELECT 1 FROM frame_features x WHERE x.session_id = f.session_id
               AND x.modality = m.name AND x.frame_index = f.frame_index)",
        [id],
    )
    .map_err(ctx("marking the words never known absent"))?;
    // Phases are the session's as stored: none past its end (their events stay).
    clip_phases(tx, id)
}

/// What `fail` is told about the failed session.
#[derive(Debug, Clone)]
pub struct Failure {
    pub id: String,
    pub station_id: String,
    pub source: SessionSource,
    pub reason: String,
    /// What is known of a session that failed before its row was written (a bad events
    /// line, a missing file): its participant and where it came from, so `sessions list`
    /// and `show` name them.
    pub participant_id: Option<String>,
    pub source_path: Option<String>,
    /// The store itself failed mid-session (a full disk, an I/O error): what it committed
    /// before is good and is kept, `incomplete` with the reason, when it holds a frame.
    pub keep_stored: bool,
}

/// Marks a session failed with its reason and removes its derived rows (frames, windows,
/// features, predictions); creates the session row when the run failed before writing
/// it; never touches a session stored complete.
pub fn fail(tx: &Transaction<'_>, f: &Failure, owner: &Owner) -> Result<(), StoreError> {
    match status_and_owner(tx, &f.id)? {
        Some((status, other))
            if status == "running" && other != *owner && other.is_alive(owner) =>
        {
            // Another process's session (this run was refused for it): not ours to touch.
            tracing::warn!(
                session = f.id,
                "not marking session failed: process {} on {} is writing it: {}",
                other.pid,
                other.host,
                f.reason
            );
            return Ok(());
        }
        Some((status, _)) if status == "incomplete" => {
            // Kept work of an earlier run: a run that failed before staging its rerun
            // leaves it as it was.
            tracing::warn!(
                session = f.id,
                "the rerun failed; the incomplete session is kept unchanged: {}",
                f.reason
            );
            return Ok(());
        }
        _ => {}
    }
    // Frames the store itself failed under are the session's (`keep_stored`).
    let kept = if f.keep_stored {
        stored_frames(tx, &f.id)?
    } else {
        0
    };
    match status(tx, &f.id)?.as_deref() {
        Some("complete") => {
            tracing::warn!(
                session = f.id,
                "not marking a complete session failed: {}",
                f.reason
            );
        }
        Some(_) if kept > 0 => {
            let frames = kept;
            let reason = format!(
                "{}; everything stored before it is kept ({frames} frames)",
                f.reason
            );
            keep_incomplete(tx, &f.id, &reason)?;
        }
        Some(_) => {
            super::predictions::delete_for_session(tx, &f.id)?;
            super::frames::delete_for_session(tx, &f.id)?;
            tx.execute(
                &format!(
                    "UPDATE sessions SET status = 'failed', status_reason = ?2, frames = 0,
                        windows = 0, updated_at = {NOW} WHERE id = ?1"
                ),
                params![f.id, f.reason],
            )
            .map_err(ctx("marking the session failed"))?;
        }
        None => {
            record_station(tx, &f.station_id)?;
            if let Some(p) = &f.participant_id {
                tx.execute(
                    &format!(
                        "INSERT OR IGNORE INTO participants (id, first_seen_at) VALUES (?1, {NOW})"
                    ),
                    [p],
                )
                .map_err(ctx("recording the participant"))?;
            }
            tx.execute(
                &format!(
                    "INSERT INTO sessions (id, station_id, participant_id, source, source_path,
                        nominal_fps, status, status_reason, owner_host, owner_pid, owner_boot_id,
                        created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 0, 'failed', ?6, ?7, ?8, ?9, {NOW}, {NOW})"
                ),
                params![
                    f.id,
                    f.station_id,
                    f.participant_id,
                    f.source.as_str(),
                    f.source_path,
                    f.reason,
                    owner.host,
                    owner.pid,
                    owner.boot_id
                ],
            )
            .map_err(ctx("recording the failed session"))?;
        }
    }
    if status(tx, &f.id)?.as_deref() != Some("complete") {
        super::announce::announce_session(tx, &f.id)?;
    }
    Ok(())
}

//! The sync outbox (schema v4): messages announcing stored records, written in the same
//! transaction as what they announce, and marked synced only when the broker acknowledged
//! them.
//!
//! Contract: [`announce_session`] snapshots a session's record (payload format
//! `empathic-session` version 1, see ARCHITECTURE.md) into a `session` message;
//! [`tombstone`] enqueues a `tombstone` for a session that no longer exists in the form
//! announced (replaced or removed). Message ids are unique (sha256 of the station, subject,
//! kind, payload digest and a per-database sequence), so a resend carries the same id and a
//! collector de-duplicates by it.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{ctx, NOW};
use crate::store::StoreError;

/// The version of the payloads this build writes.
pub const PAYLOAD_VERSION: u32 = 1;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn rows_json(tx: &Transaction<'_>, sql: &str, id: &str) -> Result<serde_json::Value, StoreError> {
    let mut st = tx
        .prepare(sql)
        .map_err(ctx("reading a session to announce"))?;
    let names: Vec<String> = st.column_names().map(str::to_string).collect();
    let rows = st
        .query_map([id], |r| {
            let mut obj = serde_json::Map::new();
            for (i, n) in names.iter().enumerate() {
                let v = match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => serde_json::Value::Null,
                    rusqlite::types::ValueRef::Integer(x) => x.into(),
                    rusqlite::types::ValueRef::Real(x) => x.into(),
                    rusqlite::types::ValueRef::Text(t) => {
                        String::from_utf8_lossy(t).into_owned().into()
                    }
                    rusqlite::types::ValueRef::Blob(b) => hex(b).into(),
                };
                obj.insert(n.clone(), v);
            }
            Ok(serde_json::Value::Object(obj))
        })
        .map_err(ctx("reading a session to announce"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(ctx("reading a session to announce"))?;
    Ok(rows.into())
}

fn enqueue(
    tx: &Transaction<'_>,
    kind: &str,
    subject: &str,
    payload: &serde_json::Value,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(payload).map_err(|e| StoreError::Encode {
        what: "an outbox message",
        message: e.to_string(),
    })?;
    let digest = hex(&Sha256::digest(text.as_bytes()));
    let next: i64 = tx
        .query_row("SELECT coalesce(max(seq), 0) + 1 FROM outbox", [], |r| {
            r.get(0)
        })
        .map_err(ctx("numbering an outbox message"))?;
    let station: String = tx
        .query_row("SELECT coalesce(min(id), '') FROM stations", [], |r| {
            r.get(0)
        })
        .map_err(ctx("reading the station id"))?;
    let id = hex(&Sha256::digest(
        format!("{station}\n{subject}\n{kind}\n{digest}\n{next}").as_bytes(),
    )[..16]);
    tx.execute(
        &format!(
            "INSERT INTO outbox (message_id, kind, subject, payload, sha256, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, {NOW})"
        ),
        params![id, kind, subject, text, digest],
    )
    .map_err(ctx("writing an outbox message"))?;
    Ok(())
}

/// Enqueues session `id`'s record: the session row (status, reason, counts, quality),
/// phases, stories shown, self-ratings, survey answers given in it, and every prediction.
/// Transcripts, raw media and per-frame or window features are not in it.
pub fn announce_session(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    let session = rows_json(
        tx,
        "SELECT id, station_id, participant_id, source, start_time, nominal_fps, status,
                status_reason, frames, windows, duration_ns, quality_json, created_at,
                updated_at FROM sessions WHERE id = ?1",
        id,
    )?;
    let Some(session) = session.as_array().and_then(|a| a.first()).cloned() else {
        return Ok(());
    };
    let payload = serde_json::json!({
        "format": "empathic-session",
        "version": PAYLOAD_VERSION,
        "session": session,
        "phases": rows_json(tx, "SELECT seq, phase, start_ns, end_ns FROM phases WHERE session_id = ?1 ORDER BY seq", id)?,
        "stories_shown": rows_json(tx, "SELECT story_id, position, shown_ns FROM story_exposures WHERE session_id = ?1 ORDER BY position", id)?,
        "self_ratings": rows_json(tx, "SELECT story_id, value, t_ns FROM self_ratings WHERE session_id = ?1 ORDER BY story_id", id)?,
        "surveys": rows_json(tx, "SELECT participant_id, instrument, item, time_point, value, t_ns FROM survey_responses WHERE session_id = ?1 ORDER BY instrument, item, time_point", id)?,
        "predictions": rows_json(tx, "SELECT window_index, predictor, story_id, in_play, raw_cosine, score, calibration, modalities, coverage, synthetic FROM predictions WHERE session_id = ?1 ORDER BY window_index, predictor, story_id", id)?,
    });
    enqueue(tx, "session", id, &payload)
}

/// Enqueues a tombstone: every earlier record of session `id` is void (`reason`:
/// `replaced` or `deleted`).
pub fn tombstone(tx: &Transaction<'_>, id: &str, reason: &str) -> Result<(), StoreError> {
    let announced: Option<i64> = tx
        .query_row(
            "SELECT 1 FROM outbox WHERE subject = ?1 AND kind = 'session' LIMIT 1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .map_err(ctx("reading the outbox"))?;
    if announced.is_none() {
        // Nothing was ever announced: nothing to void.
        return Ok(());
    }
    enqueue(
        tx,
        "tombstone",
        id,
        &serde_json::json!({"format": "empathic-tombstone", "version": PAYLOAD_VERSION,
                            "session_id": id, "reason": reason}),
    )
}

/// Announces every ended session that has no record in the outbox yet: sessions stored
/// before schema v4 (a station upgraded mid-study). Returns how many were enqueued.
pub fn backfill(tx: &Transaction<'_>) -> Result<usize, StoreError> {
    let ids: Vec<String> = tx
        .prepare(
            "SELECT id FROM sessions s WHERE status IN ('complete', 'failed', 'incomplete')
               AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.subject = s.id AND o.kind = 'session')
             ORDER BY start_time, created_at, id",
        )
        .and_then(|mut st| {
            st.query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(ctx("looking for sessions never announced"))?;
    for id in &ids {
        announce_session(tx, id)?;
    }
    Ok(ids.len())
}

/// Removes participant `id` from the store (a withdrawal): their sessions with everything
/// derived from them, their survey answers, their row, and the records of their sessions
/// still in the outbox (pending or sent: their data must not leave the station again); then
/// enqueues a `purge` message naming the participant and their sessions (no data) so the
/// collector removes them too, and keeps only an audit line (`purges`). Returns the
/// sessions removed, or `None` when the store has no such participant.
pub fn purge_participant(
    tx: &Transaction<'_>,
    id: &str,
) -> Result<Option<Vec<String>>, StoreError> {
    let known: Option<i64> = tx
        .query_row(
            "SELECT 1 FROM participants WHERE id = ?1
             UNION SELECT 1 FROM sessions WHERE participant_id = ?1 LIMIT 1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .map_err(ctx("looking up the participant"))?;
    if known.is_none() {
        return Ok(None);
    }
    let sessions: Vec<String> = tx
        .prepare("SELECT id FROM sessions WHERE participant_id = ?1 ORDER BY id")
        .and_then(|mut s| {
            s.query_map([id], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(ctx("listing the participant's sessions"))?;
    for s in &sessions {
        super::sessions::delete(tx, s)?;
        tx.execute(
            "DELETE FROM outbox WHERE kind = 'session' AND subject = ?1",
            [s],
        )
        .map_err(ctx("removing the participant's records from the outbox"))?;
    }
    tx.execute(
        "DELETE FROM survey_responses WHERE participant_id = ?1",
        [id],
    )
    .map_err(ctx("removing the participant's survey answers"))?;
    tx.execute("DELETE FROM participants WHERE id = ?1", [id])
        .map_err(ctx("removing the participant"))?;
    enqueue(
        tx,
        "purge",
        id,
        &serde_json::json!({"format": "empathic-purge", "version": PAYLOAD_VERSION,
                            "participant_id": id, "sessions": sessions}),
    )?;
    tx.execute(
        &format!("INSERT INTO purges (participant_id, sessions, purged_at) VALUES (?1, ?2, {NOW})"),
        params![id, sessions.len() as i64],
    )
    .map_err(ctx("recording the purge"))?;
    Ok(Some(sessions))
}

/// A message waiting to be sent (or re-sent).
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub seq: i64,
    pub message_id: String,
    pub kind: String,
    pub subject: String,
    pub payload: String,
    pub sha256: String,
}

/// How long a message the broker took may wait for a collector's receipt before it is
/// sent again (a broker that lost its state may have dropped it).
pub const RESEND_AFTER_SECS: i64 = 60;

/// The store's clock now (the form `sent_at` has), e.g. to mark a connection's start.
pub fn now(conn: &Connection) -> Result<String, StoreError> {
    conn.query_row(&format!("SELECT {NOW}"), [], |r| r.get(0))
        .map_err(ctx("reading the clock"))
}

/// The oldest `limit` messages to send, in order: never acknowledged by the broker, or
/// acknowledged without a collector's receipt, either before `connected_at` (an earlier
/// connection: the receipt may have come while nobody listened) or [`RESEND_AFTER_SECS`]
/// ago.
pub fn pending(
    conn: &Connection,
    limit: usize,
    connected_at: &str,
) -> Result<Vec<Pending>, StoreError> {
    conn.prepare(
        "SELECT seq, message_id, kind, subject, payload, sha256 FROM outbox
         WHERE state = 'pending'
            OR (state = 'sent' AND sent_at < max(?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?3)))
         ORDER BY seq LIMIT ?1",
    )
    .and_then(|mut s| {
        s.query_map(
            params![
                limit as i64,
                connected_at,
                format!("-{RESEND_AFTER_SECS} seconds")
            ],
            |r| {
                Ok(Pending {
                    seq: r.get(0)?,
                    message_id: r.get(1)?,
                    kind: r.get(2)?,
                    subject: r.get(3)?,
                    payload: r.get(4)?,
                    sha256: r.get(5)?,
                })
            },
        )?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading the outbox"))
}

/// Marks message `seq` acknowledged by the broker (its receipt still to come).
pub fn mark_sent(conn: &Connection, seq: i64) -> Result<(), StoreError> {
    conn.execute(
        &format!(
            "UPDATE outbox SET state = 'sent', sent_at = {NOW}, last_error = NULL
             WHERE seq = ?1 AND state != 'synced'"
        ),
        [seq],
    )
    .map_err(ctx("marking an outbox message sent"))?;
    Ok(())
}

/// Marks message `message_id` synced: a collector committed it. Returns whether it was
/// this outbox's (and not yet synced).
pub fn mark_synced(conn: &Connection, message_id: &str) -> Result<bool, StoreError> {
    let n = conn
        .execute(
            &format!(
                "UPDATE outbox SET state = 'synced', synced_at = {NOW}, last_error = NULL
                 WHERE message_id = ?1 AND state != 'synced'"
            ),
            [message_id],
        )
        .map_err(ctx("marking an outbox message synced"))?;
    Ok(n > 0)
}

/// Records an attempt (and its error) for message `seq`.
pub fn note_attempt(conn: &Connection, seq: i64, error: Option<&str>) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE outbox SET attempts = attempts + 1, last_error = coalesce(?2, last_error) WHERE seq = ?1",
        params![seq, error],
    )
    .map_err(ctx("recording an outbox attempt"))?;
    Ok(())
}

/// What the outbox holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxStatus {
    /// Not yet acknowledged by the broker.
    pub pending: u64,
    /// Acknowledged by the broker, no collector receipt yet.
    pub sent: u64,
    pub synced: u64,
    pub pending_bytes: u64,
    pub oldest_pending: Option<String>,
    pub last_synced: Option<String>,
    pub last_error: Option<String>,
}

pub fn status(conn: &Connection) -> Result<OutboxStatus, StoreError> {
    conn.query_row(
        "SELECT
            (SELECT count(*) FROM outbox WHERE state = 'pending'),
            (SELECT count(*) FROM outbox WHERE state = 'sent'),
            (SELECT count(*) FROM outbox WHERE state = 'synced'),
            (SELECT coalesce(sum(length(payload)), 0) FROM outbox WHERE state != 'synced'),
            (SELECT min(created_at) FROM outbox WHERE state = 'pending'),
            (SELECT max(synced_at) FROM outbox WHERE state = 'synced'),
            (SELECT last_error FROM outbox WHERE last_error IS NOT NULL ORDER BY seq DESC LIMIT 1)",
        [],
        |r| {
            Ok(OutboxStatus {
                pending: r.get::<_, i64>(0)?.max(0) as u64,
                sent: r.get::<_, i64>(1)?.max(0) as u64,
                synced: r.get::<_, i64>(2)?.max(0) as u64,
                pending_bytes: r.get::<_, i64>(3)?.max(0) as u64,
                oldest_pending: r.get(4)?,
                last_synced: r.get(5)?,
                last_error: r.get(6)?,
            })
        },
    )
    .map_err(ctx("reading the outbox status"))
}

//! The sync outbox (schema v4): messages announcing stored records, written in the same
//! transaction as what they announce, and marked synced only when the broker acknowledged
//! them.
//!
//! Contract: [`announce_session`] snapshots a session's record (payload format
//! `empathic-session` version 2: the session's rows of the station schema, table by table,
//! see [`RECORD_TABLES`] and ARCHITECTURE.md) into a `session` message;
//! [`tombstone`] enqueues a `tombstone` for a session that no longer exists in the form
//! announced (replaced or removed). Message ids are unique (sha256 of the station, subject,
//! kind, payload digest and a per-database sequence), so a resend carries the same id and a
//! collector de-duplicates by it.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{ctx, NOW};
use crate::config::SyncContent;
use crate::store::StoreError;

/// The version of the payloads this build writes.
pub const PAYLOAD_VERSION: u32 = 2;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

/// Writes `value` as JSON under `key` in `sync_settings`.
fn put_setting(
    conn: &Connection,
    key: &str,
    what: &'static str,
    value: &impl Serialize,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(value).map_err(|e| StoreError::Encode {
        what,
        message: e.to_string(),
    })?;
    conn.execute(
        "INSERT INTO sync_settings (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, &text],
    )
    .map_err(ctx("recording a sync setting"))?;
    Ok(())
}

/// The JSON under `key` in `sync_settings` (`None` when absent or unreadable).
fn get_setting<T: serde::de::DeserializeOwned>(
    conn: &Connection,
    key: &str,
) -> Result<Option<T>, StoreError> {
    let text: Option<String> = conn
        .query_row(
            "SELECT value FROM sync_settings WHERE key = ?1",
            [key],
            |r| r.get(0),
        )
        .optional()
        .map_err(ctx("reading a sync setting"))?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

/// Records the choice for the records written from now on.
pub fn set_content(conn: &Connection, c: &SyncContent) -> Result<(), StoreError> {
    put_setting(conn, "content", "the sync settings", c)
}

/// The choice in force (the default when none was recorded).
pub fn content(conn: &Connection) -> Result<SyncContent, StoreError> {
    Ok(get_setting(conn, "content")?.unwrap_or_default())
}

/// What decides whether a table goes into a session record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    Always,
    WindowFeatures,
    Transcripts,
    FrameFeatures,
}

/// One table of a session record: its station-schema name, the columns carried, the rows
/// (`?1` is the session id), and the switch that includes it. In foreign-key order: a
/// collector inserts them in this order.
#[derive(Debug, Clone, Copy)]
pub struct RecordTable {
    pub name: &'static str,
    pub columns: &'static str,
    pub rows: &'static str,
    pub include: Include,
}

/// Every table a session record (payload version 2) may carry. Station-local columns
/// (the session's source path and owner process) and the raw event log stay home.
pub const RECORD_TABLES: &[RecordTable] = &[
    RecordTable {
        name: "stations",
        columns: "id, first_seen_at",
        rows: "id = (SELECT station_id FROM sessions WHERE id = ?1)",
        include: Include::Always,
    },
    RecordTable {
        name: "participants",
        columns: "id, consent, consent_at, raw_media_consent, first_seen_at",
        rows: "id = (SELECT participant_id FROM sessions WHERE id = ?1)",
        include: Include::Always,
    },
    RecordTable {
        name: "stories",
        columns: "id, title, text, source, licence, created_at",
        rows: "id IN (SELECT story_id FROM story_exposures WHERE session_id = ?1
                      UNION SELECT story_id FROM predictions WHERE session_id = ?1) ORDER BY id",
        include: Include::Always,
    },
    RecordTable {
        name: "sessions",
        columns: "id, station_id, participant_id, source, format_version, start_time, nominal_fps,
                  status, status_reason, created_at, updated_at, frames, windows, duration_ns,
                  quality_json",
        rows: "id = ?1",
        include: Include::Always,
    },
    RecordTable {
        name: "phases",
        columns: "session_id, seq, phase, start_ns, end_ns",
        rows: "session_id = ?1 ORDER BY seq",
        include: Include::Always,
    },
    RecordTable {
        name: "story_exposures",
        columns: "session_id, story_id, position, shown_ns, shown_title, shown_text",
        rows: "session_id = ?1 ORDER BY position",
        include: Include::Always,
    },
    RecordTable {
        name: "self_ratings",
        columns: "session_id, story_id, value, t_ns",
        rows: "session_id = ?1 ORDER BY story_id",
        include: Include::Always,
    },
    RecordTable {
        name: "survey_responses",
        columns: "participant_id, instrument, item, time_point, value, session_id, t_ns",
        rows: "session_id = ?1 ORDER BY instrument, item, time_point",
        include: Include::Always,
    },
    RecordTable {
        name: "modalities",
        columns: "session_id, name, stream, dims, columns, producer, layout_version",
        rows: "session_id = ?1 ORDER BY name",
        include: Include::Always,
    },
    RecordTable {
        name: "windows",
        columns: "session_id, window_index, start_frame, end_frame, start_ns, end_ns, phase,
                  video_presence, audio_presence, brightness, sharpness, level_dbfs,
                  voice_activity, clipped_fraction",
        rows: "session_id = ?1 ORDER BY window_index",
        include: Include::Always,
    },
    RecordTable {
        name: "predictions",
        columns: "session_id, window_index, predictor, story_id, in_play, raw_cosine, score,
                  calibration, modalities, coverage, synthetic, created_at",
        rows: "session_id = ?1 ORDER BY window_index, predictor, story_id",
        include: Include::Always,
    },
    RecordTable {
        name: "window_features",
        columns: "session_id, window_index, modality, present_frames, presence, mean",
        rows: "session_id = ?1 ORDER BY window_index, modality",
        include: Include::WindowFeatures,
    },
    RecordTable {
        name: "utterances",
        columns: "session_id, seq, speaker, start_ns, end_ns, text",
        rows: "session_id = ?1 ORDER BY seq",
        include: Include::Transcripts,
    },
    RecordTable {
        name: "frames",
        columns: "session_id, frame_index, t_ns, decoded",
        rows: "session_id = ?1 ORDER BY frame_index",
        include: Include::FrameFeatures,
    },
    RecordTable {
        name: "frame_features",
        columns: "session_id, modality, frame_index, present, vec",
        rows: "session_id = ?1 ORDER BY modality, frame_index",
        include: Include::FrameFeatures,
    },
];

impl SyncContent {
    pub fn includes(&self, i: Include) -> bool {
        match i {
            Include::Always => true,
            Include::WindowFeatures => self.window_features,
            Include::Transcripts => self.transcripts,
            Include::FrameFeatures => self.frame_features,
        }
    }
}

/// One table's rows, columnar: `{"columns": [...], "rows": [[...], ...]}`; blobs as base64.
fn table_json(
    tx: &Transaction<'_>,
    t: &RecordTable,
    id: &str,
) -> Result<serde_json::Value, StoreError> {
    use base64::Engine as _;
    let sql = format!("SELECT {} FROM {} WHERE {}", t.columns, t.name, t.rows);
    let what = ctx("reading a session to announce");
    let mut st = tx.prepare(&sql).map_err(what)?;
    let columns: Vec<String> = st.column_names().map(str::to_string).collect();
    let n = columns.len();
    let rows = st
        .query_map([id], |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => serde_json::Value::Null,
                        rusqlite::types::ValueRef::Integer(x) => x.into(),
                        rusqlite::types::ValueRef::Real(x) => x.into(),
                        rusqlite::types::ValueRef::Text(t) => {
                            String::from_utf8_lossy(t).into_owned().into()
                        }
                        rusqlite::types::ValueRef::Blob(b) => {
                            base64::engine::general_purpose::STANDARD.encode(b).into()
                        }
                    })
                })
                .collect::<Result<Vec<_>, rusqlite::Error>>()
                .map(serde_json::Value::Array)
        })
        .map_err(ctx("reading a session to announce"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(ctx("reading a session to announce"))?;
    Ok(serde_json::json!({ "columns": columns, "rows": rows }))
}

/// Enqueues session `id`'s record (payload `empathic-session` version 2): its rows of every
/// table in [`RECORD_TABLES`] that the store's [`SyncContent`] includes. Raw media and the
/// raw event log are never in it.
pub fn announce_session(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    let exists: Option<i64> = tx
        .query_row("SELECT 1 FROM sessions WHERE id = ?1", [id], |r| r.get(0))
        .optional()
        .map_err(ctx("reading a session to announce"))?;
    if exists.is_none() {
        return Ok(());
    }
    let content = content(tx)?;
    let mut tables = serde_json::Map::new();
    for t in RECORD_TABLES.iter().filter(|t| content.includes(t.include)) {
        tables.insert(t.name.to_string(), table_json(tx, t, id)?);
    }
    let payload = serde_json::json!({
        "format": "empathic-session",
        "version": PAYLOAD_VERSION,
        "session_id": id,
        "content": content,
        "tables": tables,
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
            "DELETE FROM outbox_receipts WHERE message_id IN
               (SELECT message_id FROM outbox WHERE kind = 'session' AND subject = ?1)",
            [s],
        )
        .map_err(ctx("removing the participant's receipts from the outbox"))?;
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

/// Message `seq`'s payload as sealed to `study_key`, when it was sealed to that key before.
pub fn sealed(conn: &Connection, seq: i64, study_key: &str) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT sealed FROM outbox WHERE seq = ?1 AND sealed_to = ?2",
        rusqlite::params![seq, study_key],
        |r| r.get(0),
    )
    .optional()
    .map(Option::flatten)
    .map_err(ctx("reading a sealed outbox payload"))
}

/// Keeps message `seq`'s payload as sealed to `study_key`, for its resends.
pub fn keep_sealed(
    conn: &Connection,
    seq: i64,
    study_key: &str,
    sealed: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE outbox SET sealed_to = ?2, sealed = ?3 WHERE seq = ?1",
        rusqlite::params![seq, study_key, sealed],
    )
    .map_err(ctx("keeping a sealed outbox payload"))?;
    Ok(())
}

/// Records `collector`'s receipt for message `message_id` (a collector committed it) and
/// marks the message synced once every collector in `required` has answered (any one
/// receipt when `required` is empty). A receipt that names no collector (`None`, an older
/// collector) counts only when `required` is empty. Returns whether this receipt made a
/// message of this outbox synced.
/// Whether a receipt can be one for message `message_id` as this station sent it: the
/// message exists, was handed to the broker (`sent`, already `synced` since a receipt may
/// come again, or `in_flight`: published, its broker acknowledgement not yet read), and
/// the receipt names its sha256. `Err` says why not.
pub fn receipt_matches(
    conn: &Connection,
    message_id: &str,
    sha256: Option<&str>,
    in_flight: Option<&str>,
) -> Result<Result<(), String>, StoreError> {
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT state, sha256 FROM outbox WHERE message_id = ?1",
            [message_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(ctx("reading the outbox for a receipt"))?;
    Ok(match row {
        None => Err("no such message in the outbox".into()),
        Some((state, _)) if state == "pending" && in_flight != Some(message_id) => {
            Err("the message was never handed to the broker".into())
        }
        Some((_, sent)) => match sha256 {
            Some(h) if h == sent => Ok(()),
            Some(h) => Err(format!("it names sha256 {h}, the message sent has {sent}")),
            None => Err("it names no sha256 (a collector older than this station?)".into()),
        },
    })
}

pub fn mark_synced(
    conn: &Connection,
    message_id: &str,
    collector: Option<&str>,
    required: &[String],
) -> Result<bool, StoreError> {
    if let Some(c) = collector {
        conn.execute(
            &format!(
                "INSERT OR IGNORE INTO outbox_receipts (message_id, collector, received_at)
                 SELECT message_id, ?2, {NOW} FROM outbox WHERE message_id = ?1"
            ),
            params![message_id, c],
        )
        .map_err(ctx("recording a collector's receipt"))?;
    }
    if !required.is_empty() {
        let mut answered = conn
            .prepare_cached(
                "SELECT 1 FROM outbox_receipts WHERE message_id = ?1 AND collector = ?2",
            )
            .map_err(ctx("reading the collectors' receipts"))?;
        for c in required {
            if !answered
                .exists(params![message_id, c])
                .map_err(ctx("reading the collectors' receipts"))?
            {
                return Ok(false);
            }
        }
    }
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

/// The publisher's last word about its broker, kept in `sync_settings` (key `broker`) so
/// `sync status` can say it after the publisher exited.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BrokerState {
    /// `connected`, `unreachable` (retrying) or `disconnected` (the publisher ended).
    pub state: String,
    /// `HOST:PORT`.
    pub broker: String,
    /// Since when (the store's clock).
    pub since: String,
    /// Why it is unreachable.
    pub error: Option<String>,
}

/// Records the broker's state (the `since` of a state that does not change is kept).
pub fn set_broker_state(
    conn: &Connection,
    state: &str,
    broker: &str,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let before = broker_state(conn)?;
    let since = match &before {
        Some(b) if b.state == state && b.broker == broker => b.since.clone(),
        _ => now(conn)?,
    };
    put_setting(
        conn,
        "broker",
        "the broker state",
        &BrokerState {
            state: state.into(),
            broker: broker.into(),
            since,
            error: error.map(str::to_string),
        },
    )
}

/// The broker's state as the publisher last recorded it.
pub fn broker_state(conn: &Connection) -> Result<Option<BrokerState>, StoreError> {
    get_setting(conn, "broker")
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
    /// The publisher's last word about its broker (none before the first sync).
    pub broker: Option<BrokerState>,
    /// Receipts held per collector (client id or share group), by name.
    pub receipts: std::collections::BTreeMap<String, u64>,
}

pub fn status(conn: &Connection) -> Result<OutboxStatus, StoreError> {
    let broker = broker_state(conn)?;
    let receipts = conn
        .prepare(
            "SELECT collector, count(*) FROM outbox_receipts GROUP BY collector ORDER BY collector",
        )
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?
            .collect::<Result<std::collections::BTreeMap<_, _>, _>>()
        })
        .map_err(ctx("reading the collectors' receipts"))?;
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
                broker,
                receipts,
            })
        },
    )
    .map_err(ctx("reading the outbox status"))
}

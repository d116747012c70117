//! The sync outbox (schema v4): messages announcing stored records, written in the same
//! transaction as what they announce, and marked synced only when the broker acknowledged
//! them.
//!
//! Contract: [`announce_session`] snapshots a session's record (payload format
//! `empathic-session` version 2: the session's rows of the station schema, table by table,
//! see [`RECORD_TABLES`] and docs/formats.md) into a `session` message;
//! [`tombstone`] enqueues a `tombstone` for a session that no longer exists in the form
//! announced (replaced or removed). Message ids are unique (sha256 of the station, subject,
//! kind, payload digest and a per-database sequence), so a resend carries the same id and a
//! collector de-duplicates by it. What happens to a message after it is enqueued (sent,
//! sealed, receipted, synced) is `delivery.rs`.

use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::Serialize;

use super::{ctx, NOW};
use crate::config::SyncContent;
use crate::digest::sha256_hex;
use crate::store::StoreError;

/// The version of the payloads this build writes.
pub const PAYLOAD_VERSION: u32 = 2;

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
    let digest = sha256_hex(text.as_bytes());
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
    // The first 16 bytes of the digest: 32 hex digits.
    let mut id = sha256_hex(format!("{station}\n{subject}\n{kind}\n{digest}\n{next}").as_bytes());
    id.truncate(32);
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

/// The version of consent messages' payload (`empathic-consent`).
pub const CONSENT_VERSION: u32 = 1;

/// Enqueues participant `id`'s consent as it now stands (a `consent` message: format
/// `empathic-consent` v1, `{participant_id, consent, consent_at, raw_media_consent}`;
/// nothing else of the participant).
pub fn announce_consent(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    let (consent, at, raw): (String, Option<String>, i64) = tx
        .query_row(
            "SELECT consent, consent_at, raw_media_consent FROM participants WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(ctx("reading a participant's consent"))?;
    enqueue(
        tx,
        "consent",
        id,
        &serde_json::json!({"format": "empathic-consent", "version": CONSENT_VERSION,
                            "participant_id": id, "consent": consent, "consent_at": at,
                            "raw_media_consent": raw != 0}),
    )
}

/// Writes `value` as JSON under `key` in `sync_settings`.
pub(super) fn put_setting(
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
pub(super) fn get_setting<T: serde::de::DeserializeOwned>(
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

/// Every table a session record (payload version 2) may carry, with every column of the
/// station's schema but the station-local ones ([`STATION_LOCAL`]): the central copy is the
/// station's (a test holds the two lists to the schema). The raw event log stays home.
/// Columns that stay on the station: where a replayed session came from and which process
/// owns a running one.
pub const STATION_LOCAL: [(&str, &str); 4] = [
    ("sessions", "source_path"),
    ("sessions", "owner_host"),
    ("sessions", "owner_pid"),
    ("sessions", "owner_boot_id"),
];

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
                  quality_json, text_source",
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
        name: "attributions",
        columns: "session_id, window_index, predictor, story_id, baseline, method, coalitions,
                  cues",
        rows: "session_id = ?1 ORDER BY window_index, predictor, story_id",
        include: Include::WindowFeatures,
    },
    RecordTable {
        name: "window_features",
        columns: "session_id, window_index, modality, present_frames, presence, mean",
        rows: "session_id = ?1 ORDER BY window_index, modality",
        include: Include::WindowFeatures,
    },
    RecordTable {
        name: "utterances",
        columns: "session_id, seq, speaker, start_ns, end_ns, text, source, model, confidence",
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
/// `replaced` or `rerun`).
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

/// Forgets every message of `kind` about `subject` with its receipts (a withdrawal: the
/// participant's data must not leave the station again, sent or not).
pub fn forget(tx: &Transaction<'_>, kind: &str, subject: &str) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM outbox_receipts WHERE message_id IN
           (SELECT message_id FROM outbox WHERE kind = ?1 AND subject = ?2)",
        [kind, subject],
    )
    .map_err(ctx(
        "removing a withdrawn participant's receipts from the outbox",
    ))?;
    tx.execute(
        "DELETE FROM outbox WHERE kind = ?1 AND subject = ?2",
        [kind, subject],
    )
    .map_err(ctx(
        "removing a withdrawn participant's messages from the outbox",
    ))?;
    Ok(())
}

/// Enqueues a `purge` message naming participant `id` and their removed `sessions` (no
/// data), so the collector removes them too.
pub fn announce_purge(
    tx: &Transaction<'_>,
    id: &str,
    sessions: &[String],
) -> Result<(), StoreError> {
    enqueue(
        tx,
        "purge",
        id,
        &serde_json::json!({"format": "empathic-purge", "version": PAYLOAD_VERSION,
                            "participant_id": id, "sessions": sessions}),
    )
}

//! Session stores as earlier builds left them (issue 46, "Upgrades from every earlier
//! schema"): the migrations of `store/schema.rs` applied up to a version, and between them
//! the rows each version could hold, written in the shape the build of that era wrote
//! them. Every migration's text is the one that shipped (`migrations_are_never_edited`
//! pins them), so the tables are the ones stations had.
//!
//! One session per era (`{station}-v1` .. `-vN`, each with phases, an event, an utterance, a
//! story shown and rated, modalities, frames, frame and window features, windows and
//! predictions in that era's shape). From version 4 on, the outbox holds every era's
//! session record: era 4's in the version 1 payload (`empathic-session` v1, as builds
//! before version 5 wrote it), later eras' in version 2 with the columns the tables had
//! then; era 4's and the last era's are pending, the ones between synced (with receipts
//! from version 6 on). Version 11 adds a pending consent record.

use std::path::Path;

use rusqlite::{params, Connection};
use serde_json::{json, Map, Value};

pub const STORY: &str = "story-old";

/// What [`store_at`] wrote.
pub struct OldStore {
    /// Every session, oldest first.
    pub sessions: Vec<String>,
    /// Sessions whose record is pending in the outbox.
    pub pending_sessions: Vec<String>,
    /// Message ids pending and synced.
    pub pending: Vec<String>,
    pub synced: Vec<String>,
}

/// Writes a store of `station` at schema `version` (1 ..= the newest) to `path`; its
/// sessions are `{station}-v1` ..., its participant `P-{station}`.
pub fn store_at(path: &Path, version: i64, station: &str) -> OldStore {
    let newest = empathic::store::schema::MIGRATIONS.last().unwrap().0;
    assert!(
        (1..=newest).contains(&version),
        "no schema version {version}"
    );
    let mut conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;
         CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);",
    )
    .unwrap();
    let mut out = OldStore {
        sessions: Vec::new(),
        pending_sessions: Vec::new(),
        pending: Vec::new(),
        synced: Vec::new(),
    };
    for &(v, name, sql) in empathic::store::schema::MIGRATIONS
        .iter()
        .take(version as usize)
    {
        let tx = conn.transaction().unwrap();
        tx.execute_batch(sql).unwrap();
        tx.execute(
            "INSERT INTO schema_migrations VALUES (?1, ?2, '2026-01-01T00:00:00.000Z')",
            params![v, name],
        )
        .unwrap();
        tx.commit().unwrap();
        era(&conn, station, v, version, &mut out);
    }
    out
}

fn columns(conn: &Connection, table: &str) -> Vec<String> {
    conn.prepare("SELECT name FROM pragma_table_info(?1)")
        .unwrap()
        .query_map([table], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn f32_blob(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The rows era `v` adds: its session and, from version 4 on, its record.
fn era(conn: &Connection, station: &str, v: i64, last: i64, out: &mut OldStore) {
    let at = format!("2026-01-{:02}T10:00:00.000Z", v);
    let participant = format!("P-{station}");
    if v == 1 {
        conn.execute_batch(&format!(
            "INSERT INTO stations VALUES ('{station}', '{at}');
             INSERT INTO participants (id, consent, consent_at, raw_media_consent, first_seen_at)
                 VALUES ('{participant}', 'given', '{at}', 0, '{at}');
             INSERT INTO stories VALUES ('{STORY}', 'The lighthouse', 'A keeper stays on.', 'test', 'CC0', '{at}');"
        ))
        .unwrap();
    }
    if v == 2 {
        conn.execute(
            "INSERT INTO story_embeddings VALUES (?1, 'all-MiniLM-L6-v2', 2, ?2)",
            params![STORY, f32_blob(&[0.6, 0.8])],
        )
        .unwrap();
    }
    let id = format!("{station}-v{v}");
    session(conn, &id, station, &participant, v, &at);
    out.sessions.push(id.clone());
    if v < 4 {
        return;
    }
    let payload = if v == 4 {
        record_v1(conn, &id)
    } else {
        record_v2(conn, &id)
    };
    let message = enqueue(conn, station, "session", &id, &payload, &at);
    if v == 4 || v == last {
        out.pending_sessions.push(id);
        out.pending.push(message);
    } else {
        // Synced when the next era's build sent it.
        conn.execute(
            "UPDATE outbox SET state = 'synced', sent_at = ?2, synced_at = ?2, attempts = 1
             WHERE message_id = ?1",
            params![message, at],
        )
        .unwrap();
        if v >= 6 {
            // Receipts exist from version 6 on.
            conn.execute(
                "INSERT INTO outbox_receipts VALUES (?1, 'test-collector', ?2)",
                params![message, at],
            )
            .unwrap();
        }
        out.synced.push(message);
    }
    if v == 5 {
        conn.execute(
            "INSERT INTO sync_settings VALUES ('content', ?1)",
            [
                json!({"window_features": true, "transcripts": false, "frame_features": false})
                    .to_string(),
            ],
        )
        .unwrap();
    }
    if v == 11 {
        let consent = json!({"format": "empathic-consent", "version": 1,
            "participant_id": participant, "consent": "given", "consent_at": at,
            "raw_media_consent": false});
        let m = enqueue(conn, station, "consent", &participant, &consent, &at);
        out.pending.push(m);
    }
}

/// A session of 30 frames and one window, in the tables' shapes at version `v`.
fn session(conn: &Connection, id: &str, station: &str, participant: &str, v: i64, at: &str) {
    conn.execute(
        "INSERT INTO sessions (id, station_id, participant_id, source, format_version, start_time,
             nominal_fps, status, created_at, updated_at, frames, windows, duration_ns, quality_json)
         VALUES (?1, ?2, ?3, 'replay', 1, ?4, 15.0, 'complete', ?4, ?4, 30, 1, 2000000000, '{}')",
        params![id, station, participant, at],
    )
    .unwrap();
    if v >= 10 {
        conn.execute(
            "UPDATE sessions SET text_source = 'events' WHERE id = ?1",
            [id],
        )
        .unwrap();
    }
    conn.execute_batch(&format!(
        "INSERT INTO phases VALUES ('{id}', 0, 'story_receive', 0, 2000000000);
         INSERT INTO events VALUES ('{id}', 0, 100000000, 'story_shown', '{{\"story_id\":\"{STORY}\"}}');
         INSERT INTO utterances (session_id, seq, speaker, start_ns, end_ns, text)
             VALUES ('{id}', 0, 'participant', 0, 1000000000, 'era {v} words');
         INSERT INTO story_exposures (session_id, story_id, position, shown_ns)
             VALUES ('{id}', '{STORY}', 0, 100000000);
         INSERT INTO self_ratings VALUES ('{id}', '{STORY}', {rating}, 1900000000);
         INSERT INTO windows VALUES ('{id}', 0, 0, 29, 0, 2000000000, 'story_receive', 1.0, 1.0,
             0.5, 0.1, -30.0, 0.4, 0.0);",
        rating = 1 + v % 5,
    ))
    .unwrap();
    let stream = if v >= 2 { "text" } else { "video" };
    conn.execute(
        "INSERT INTO modalities (session_id, name, stream, dims, columns) VALUES (?1, 'm', ?2, 2, '[\"a\",\"b\"]')",
        params![id, stream],
    )
    .unwrap();
    if v >= 3 {
        conn.execute(
            "UPDATE modalities SET producer = 'test-stage', layout_version = 1 WHERE session_id = ?1",
            [id],
        )
        .unwrap();
    }
    for f in 0..30i64 {
        conn.execute(
            "INSERT INTO frames VALUES (?1, ?2, ?3, 1)",
            params![id, f, f * 66_666_667],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO frame_features VALUES (?1, 'm', ?2, 1, ?3)",
            params![id, f, f32_blob(&[f as f32, v as f32])],
        )
        .unwrap();
    }
    conn.execute(
        "INSERT INTO window_features VALUES (?1, 0, 'm', 30, ?2, ?3)",
        params![id, vec![1u8; 30], f32_blob(&[14.5, v as f32])],
    )
    .unwrap();
    if v >= 3 {
        conn.execute(
            "INSERT INTO predictions VALUES (?1, 0, 'text-zero-shot', ?2, 'shown', 0.42, 3.5,
                 'linear', '[\"m\"]', '{\"m\":1.0}', 0, ?3)",
            params![id, STORY, at],
        )
        .unwrap();
    } else {
        conn.execute(
            "INSERT INTO predictions VALUES (?1, 0, 'text-zero-shot', ?2, 3.5, ?3)",
            params![id, STORY, at],
        )
        .unwrap();
    }
}

/// Rows as JSON objects (`rows_json` of the builds that wrote version 1 records).
fn objects(conn: &Connection, sql: &str, id: &str) -> Value {
    let mut st = conn.prepare(sql).unwrap();
    let names: Vec<String> = st.column_names().map(str::to_string).collect();
    let rows = st
        .query_map([id], |r| {
            let mut o = Map::new();
            for (i, n) in names.iter().enumerate() {
                o.insert(n.clone(), value(r.get_ref(i).unwrap()));
            }
            Ok(Value::Object(o))
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    Value::Array(rows)
}

fn value(v: rusqlite::types::ValueRef<'_>) -> Value {
    use base64::Engine as _;
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(x) => x.into(),
        ValueRef::Real(x) => x.into(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
        ValueRef::Blob(b) => base64::engine::general_purpose::STANDARD.encode(b).into(),
    }
}

/// The version 1 session record, with the queries the builds of version 4 ran.
fn record_v1(conn: &Connection, id: &str) -> Value {
    let session = objects(
        conn,
        "SELECT id, station_id, participant_id, source, start_time, nominal_fps, status,
                status_reason, frames, windows, duration_ns, quality_json, created_at,
                updated_at FROM sessions WHERE id = ?1",
        id,
    )[0]
    .clone();
    json!({
        "format": "empathic-session",
        "version": 1,
        "session": session,
        "phases": objects(conn, "SELECT seq, phase, start_ns, end_ns FROM phases WHERE session_id = ?1 ORDER BY seq", id),
        "stories_shown": objects(conn, "SELECT story_id, position, shown_ns FROM story_exposures WHERE session_id = ?1 ORDER BY position", id),
        "self_ratings": objects(conn, "SELECT story_id, value, t_ns FROM self_ratings WHERE session_id = ?1 ORDER BY story_id", id),
        "surveys": objects(conn, "SELECT participant_id, instrument, item, time_point, value, t_ns FROM survey_responses WHERE session_id = ?1 ORDER BY instrument, item, time_point", id),
        "predictions": objects(conn, "SELECT window_index, predictor, story_id, in_play, raw_cosine, score, calibration, modalities, coverage, synthetic FROM predictions WHERE session_id = ?1 ORDER BY window_index, predictor, story_id", id),
    })
}

/// A version 2 session record as a build of the store's version wrote it: today's record
/// tables with the columns the store's tables had then (a record has always carried every
/// column but the station-local ones: `a_record_carries_every_column_...`).
fn record_v2(conn: &Connection, id: &str) -> Value {
    use empathic::store::outbox::{Include, RECORD_TABLES};
    let mut tables = Map::new();
    for t in RECORD_TABLES {
        if matches!(t.include, Include::Transcripts | Include::FrameFeatures) {
            continue;
        }
        let now: Vec<String> = columns(conn, t.name);
        // A table the store's version did not have yet (`attributions` before 12): its
        // build carried no such table.
        if now.is_empty() {
            continue;
        }
        let carried: Vec<&str> = t
            .columns
            .split(',')
            .map(str::trim)
            .filter(|c| now.iter().any(|n| n == c))
            .collect();
        let sql = format!(
            "SELECT {} FROM {} WHERE {}",
            carried.join(", "),
            t.name,
            t.rows
        );
        let mut st = conn.prepare(&sql).unwrap();
        let n = carried.len();
        let rows: Vec<Value> = st
            .query_map([id], |r| {
                Ok(Value::Array(
                    (0..n).map(|i| value(r.get_ref(i).unwrap())).collect(),
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        tables.insert(
            t.name.to_string(),
            json!({"columns": carried, "rows": rows}),
        );
    }
    json!({
        "format": "empathic-session",
        "version": 2,
        "session_id": id,
        "content": {"window_features": true, "transcripts": false, "frame_features": false},
        "tables": tables,
    })
}

/// An outbox row as `store/sql/announce.rs` numbers and names it.
fn enqueue(
    conn: &Connection,
    station: &str,
    kind: &str,
    subject: &str,
    payload: &Value,
    at: &str,
) -> String {
    let text = payload.to_string();
    let digest = empathic::digest::sha256_hex(text.as_bytes());
    let next: i64 = conn
        .query_row("SELECT coalesce(max(seq), 0) + 1 FROM outbox", [], |r| {
            r.get(0)
        })
        .unwrap();
    let mut id = empathic::digest::sha256_hex(
        format!("{station}\n{subject}\n{kind}\n{digest}\n{next}").as_bytes(),
    );
    id.truncate(32);
    conn.execute(
        "INSERT INTO outbox (message_id, kind, subject, payload, sha256, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![id, kind, subject, text, digest, at],
    )
    .unwrap();
    id
}

/// Every row of every table of the store, as `table: col=value ...` lines over the columns
/// `keep` says to compare (blobs as base64), sorted.
pub fn rows(conn: &Connection, keep: impl Fn(&str, &str) -> bool) -> Vec<String> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = Vec::new();
    for t in tables {
        let cols: Vec<String> = columns(conn, &t)
            .into_iter()
            .filter(|c| keep(&t, c))
            .collect();
        if cols.is_empty() {
            continue;
        }
        let quoted: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
        let mut st = conn
            .prepare(&format!("SELECT {} FROM \"{t}\"", quoted.join(", ")))
            .unwrap();
        let lines = st
            .query_map([], |r| {
                Ok(cols
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{c}={}", value(r.get_ref(i).unwrap())))
                    .collect::<Vec<_>>()
                    .join(" "))
            })
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        out.extend(lines.into_iter().map(|l| format!("{t}: {l}")));
    }
    out.sort();
    out
}
